"""Blocks over named residual variables: the unit every construction is written in.

A *variable* is one named residual dimension. A *form* is a linear combination of
variables, ``Form({name: coefficient})``, with ``+``, ``-`` and scalar ``*``. A block reads
forms and writes variables; its matrices are local (rows and columns indexed by its own
inputs and outputs) and the builder lifts them into the global residual stream, so no
user code does index arithmetic. Each block states when it is exact (:class:`Exactness`).

Every block can evaluate itself: :meth:`FFNBlock.evaluate` and :meth:`HeadBlock.evaluate`
are the semantics of one MLP or one head of :mod:`crasp_compiler.model.model` on given
variable values (numpy, float64), a reference that needs no model; :class:`BosValues`
uses them to follow every variable's value at BOS while a model is being built.

A block normally writes *fresh* variables. A block may instead add to variables that
already exist when it lists them in ``in_place`` (cancelling the residual, zeroing out a
variable): the builder schedules it after every block that reads the old value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from crasp_compiler.model.model import ACTIVATIONS, HARD_TOLERANCE, MASKS, WEIGHTINGS

Array: TypeAlias = npt.NDArray[np.float64]
Value: TypeAlias = float | Array
"""A variable's value: a number, or an array (over positions, or anything else)."""


class Form(dict[str, float]):
    """A linear combination of residual variables, ``{name: coefficient}``."""

    def __add__(self, other: Mapping[str, float]) -> Form:
        return form_add((1, self), (1, other))

    def __radd__(self, other: Mapping[str, float]) -> Form:
        return form_add((1, other), (1, self))

    def __sub__(self, other: Mapping[str, float]) -> Form:
        return form_add((1, self), (-1, other))

    def __rsub__(self, other: Mapping[str, float]) -> Form:
        return form_add((1, other), (-1, self))

    def __mul__(self, factor: float) -> Form:
        return form_add((factor, self))

    __rmul__ = __mul__

    def __truediv__(self, divisor: float) -> Form:
        return form_add((1 / divisor, self))

    def __neg__(self) -> Form:
        return form_add((-1, self))


def var(name: str) -> Form:
    """The form of one variable."""
    return Form({name: 1.0})


def form_add(*terms: tuple[float, Mapping[str, float]]) -> Form:
    """Σ coefficient · form, with zero coefficients dropped."""
    out = Form()
    get = out.get
    for coef, form in terms:
        if coef == 1:
            for name, value in form.items():
                out[name] = get(name, 0) + value
        else:
            for name, value in form.items():
                out[name] = get(name, 0) + coef * value
    if 0 in out.values():  # a scan in C; cancelled terms are rare
        for name in [name for name, value in out.items() if value == 0]:
            del out[name]
    return out


def as_form(x: Mapping[str, float]) -> Form:
    """A clean :class:`Form` copy of ``x`` (zero coefficients dropped)."""
    return form_add((1, x))


def form_value(form: Mapping[str, float], values: Mapping[str, Value]) -> Value:
    """The value of ``form``, ``Σ coefficient · value`` (float64, summed in the form's
    order; 0.0 for the empty form): a number when the values it reads are numbers, else
    an array (arrays broadcast). KeyError names a variable with no value."""
    total: Value = 0.0
    for name, coef in form.items():
        try:
            value = values[name]
        except KeyError:
            raise KeyError(f"no value given for the variable {name!r}") from None
        if not isinstance(value, (float, np.ndarray)):
            value = np.asarray(value, dtype=np.float64) if np.ndim(value) else float(value)
        total = total + float(coef) * value
    return total


def activate(activation: str, z: Value) -> Value:
    """An activation of :data:`crasp_compiler.model.model.ACTIVATIONS` on ``z`` (a number or
    an array): ``relu``, ``heaviside`` (``1[z ≥ 0]``) or ``gelu`` (tanh form)."""
    if activation == "relu":
        return np.maximum(z, 0.0) if isinstance(z, np.ndarray) else max(z, 0.0)
    if activation == "heaviside":
        return (z >= 0).astype(np.float64) if isinstance(z, np.ndarray) else float(z >= 0)
    if activation == "gelu":
        return 0.5 * z * (1.0 + np.tanh(_GELU_A * (z + _GELU_B * z**3)))
    raise ValueError(f"unknown activation {activation!r} (one of {ACTIVATIONS})")


_GELU_A = math.sqrt(2.0 / math.pi)
_GELU_B = 0.044715


def layer_norm(part: Array) -> Array:
    """The selective layer norm of one group along the last axis: ``(z − mean)/std``
    (population std, ε = 0, no gain or bias), 0 where the std is 0."""
    centred = part - part.mean(-1, keepdims=True)
    std = np.sqrt((centred**2).mean(-1, keepdims=True))
    out: Array = np.where(std > 0, centred / np.where(std > 0, std, 1.0), 0.0)
    return out


def attention_mask(mask: str, size: int) -> npt.NDArray[np.bool_]:
    """Which keys s each query t may attend to, shape (size, size), for a mask of
    :data:`crasp_compiler.model.model.MASKS`: ``causal`` s ≤ t, ``strict`` s < t,
    ``past`` s ≥ t, ``strict-past`` s > t, ``none`` every s."""
    t, s = np.arange(size)[:, None], np.arange(size)[None, :]
    if mask == "causal":
        return s <= t
    if mask == "strict":
        return s < t
    if mask == "past":
        return s >= t
    if mask == "strict-past":
        return s > t
    if mask == "none":
        return np.ones((size, size), dtype=bool)
    raise ValueError(f"unknown mask {mask!r} (one of {MASKS})")


def output_name(out: str) -> str:
    """``out`` if it is a usable variable name; ValueError otherwise."""
    if not isinstance(out, str) or not out:
        raise ValueError(f"output variable names must be non-empty strings, not {out!r}")
    return out


@dataclass(frozen=True)
class Exactness:
    """When a block computes its definition.

    ``max_len``: exact only for inputs of at most this many tokens (None: every length).
    ``error``: the output is within ``error`` of the definition (0: exact). ``text`` states
    the whole condition (value ranges, gaps) in words.
    """

    text: str
    max_len: int | None = None
    error: float = 0.0

    @property
    def exact(self) -> bool:
        return self.error == 0.0


EXACT = Exactness("exact")


@dataclass(frozen=True)
class Unit:
    """One hidden unit: ``act(form + bias)``."""

    form: Mapping[str, float]
    bias: float
    activation: str = "relu"


@dataclass
class FFNBlock:
    """Hidden units and, per output variable, ``Σ coef · unit`` (plus a constant).

    ``norm_groups`` lists groups of unit indices whose pre-activations are layer-normalised
    together (ε = 0) before the activation (see :mod:`crasp_compiler.model.model`)."""

    units: list[Unit]
    outputs: dict[str, dict[int, float]]
    exact: Exactness
    label: str = ""
    constants: dict[str, float] = field(default_factory=dict)
    norm_groups: list[list[int]] = field(default_factory=list)
    in_place: frozenset[str] = frozenset()

    @property
    def reads(self) -> set[str]:
        return {name for unit in self.units for name in unit.form}

    @property
    def writes(self) -> list[str]:
        return list(dict.fromkeys([*self.outputs, *self.constants]))

    def evaluate(self, values: Mapping[str, Value]) -> dict[str, Value]:
        """What this MLP adds to each variable it writes, ``Σ coef · act(N(z)) + constant``
        with ``z_u = form_u · values + bias_u``, given the values of the variables it reads
        (numbers, or arrays that broadcast together: one value per position, per input…).

        The semantics of :mod:`crasp_compiler.model.model` in float64: the activations
        ``relu``, ``heaviside`` (``1[z ≥ 0]``) and ``gelu`` (tanh form), each norm group
        layer-normalised first (ε = 0, a zero-variance group becomes 0). The results are
        numbers when the inputs are numbers, else arrays of the inputs' broadcast shape;
        an ``in_place`` variable gets this added to its old value."""
        pre = [form_value(unit.form, values) + unit.bias for unit in self.units]
        arrays = any(isinstance(z, np.ndarray) for z in pre)
        shape = np.broadcast_shapes(*(np.shape(z) for z in pre)) if arrays else ()
        for group in self.norm_groups:
            part = np.stack([np.broadcast_to(pre[u], shape) for u in group], axis=-1)
            normed = layer_norm(part)
            for k, u in enumerate(group):
                pre[u] = normed[..., k] if arrays else float(normed[k])
        hidden = [activate(unit.activation, z) for unit, z in zip(self.units, pre, strict=True)]
        out: dict[str, Value] = {}
        for name in self.writes:
            total: Value = 0.0
            for u, coef in self.outputs.get(name, {}).items():
                total = total + float(coef) * hidden[u]
            total = total + float(self.constants.get(name, 0.0))
            out[name] = np.array(np.broadcast_to(total, shape)) if arrays else float(total)
        return out


@dataclass
class HeadBlock:
    """One attention head: scores ``scale · q·k + bias(t − s)``, values written to variables.

    ``query`` and ``key`` are lists of forms (one per query/key dimension); ``values`` maps
    each output variable to the form it averages: ``out_t = Σ_s α_ts · value(x_s)``.
    """

    query: list[Mapping[str, float]]
    key: list[Mapping[str, float]]
    values: dict[str, Mapping[str, float]]
    exact: Exactness
    bias: dict[int, float] = field(default_factory=dict)
    weighting: str = "softmax"
    mask: str = "causal"
    scale: float = 1.0
    label: str = ""
    in_place: frozenset[str] = frozenset()

    @property
    def reads(self) -> set[str]:
        forms = (*self.query, *self.key, *self.values.values())
        return {name for form in forms for name in form}

    @property
    def writes(self) -> list[str]:
        return list(self.values)

    def evaluate(
        self, values: Mapping[str, Value], *, tolerance: float | None = None
    ) -> dict[str, Array]:
        """The head's output for each variable it writes, ``out_t = Σ_s α_ts · value(x_s)``,
        given the values of the variables it reads at every position of a sequence:
        arrays of shape (T,), or (B, T) for B sequences of T positions (numbers broadcast;
        position 0 is BOS). The result has that shape.

        The semantics of :mod:`crasp_compiler.model.model` in float64: scores
        ``scale · q_t·k_s + bias(t − s)``; the mask (``causal`` s ≤ t, ``strict`` s < t,
        ``past`` s ≥ t, ``strict-past`` s > t, ``none``; a row with no key reads 0); the
        weighting ``softmax``, ``hard`` (uniform over the maximal scores), ``hard-left`` /
        ``hard-right`` (the leftmost / rightmost maximal score). Under hard weightings a
        score within ``tolerance`` of the row maximum counts as maximal (default: the
        model family's float64 tolerance, :data:`crasp_compiler.model.model.HARD_TOLERANCE`;
        0 for exact ties only)."""
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"unknown weighting {self.weighting!r} (one of {WEIGHTINGS})")
        if len(self.query) != len(self.key):
            raise ValueError(f"{len(self.query)} query forms but {len(self.key)} key forms")
        shape = np.broadcast_shapes(*(np.shape(value) for value in values.values()))
        if len(shape) not in (1, 2):
            raise ValueError(
                f"a head evaluates on sequences: give values of shape (T,) or (B, T), not {shape}"
            )
        batch, size = shape if len(shape) == 2 else (1, shape[0])
        seqs = _Sequences(values, shape, (batch, size))

        def stack(forms: Iterable[Mapping[str, float]]) -> Array:
            columns = [np.broadcast_to(form_value(form, seqs), (batch, size)) for form in forms]
            if not columns:
                return np.zeros((batch, size, 0))
            return np.stack(columns, axis=-1)

        v = stack(self.values.values())
        if size == 1:  # one key, which takes all the weight whatever its score (if allowed)
            out = v * attention_mask(self.mask, 1)[0, 0]
        else:
            out = self._weights(stack(self.query), stack(self.key), size, tolerance) @ v
        if len(shape) == 1:
            out = out[0]
        return {name: np.array(out[..., j]) for j, name in enumerate(self.values)}

    def _weights(self, q: Array, k: Array, size: int, tolerance: float | None) -> Array:
        """The attention weights α (B, T, T) from queries and keys (B, T, dk)."""
        scores: Array = self.scale * np.einsum("btk,bsk->bts", q, k)
        offsets = np.arange(size)[:, None] - np.arange(size)[None, :]
        for offset, value in self.bias.items():
            scores = scores + value * (offsets == offset)
        allowed = np.broadcast_to(attention_mask(self.mask, size), scores.shape)
        scores = np.where(allowed, scores, -np.inf)
        empty = ~allowed.any(-1, keepdims=True)
        top = np.where(empty, 0.0, scores.max(-1, keepdims=True))
        if self.weighting == "softmax":
            weights = np.where(allowed, np.exp(scores - top), 0.0)
        else:
            margin = HARD_TOLERANCE["float64"] if tolerance is None else float(tolerance)
            best = allowed & (scores >= top - margin)
            if self.weighting in ("hard-left", "hard-right"):
                if self.weighting == "hard-left":
                    pick = best.argmax(-1)
                else:
                    pick = size - 1 - best[..., ::-1].argmax(-1)
                best = (np.arange(size) == pick[..., None]) & best.any(-1, keepdims=True)
            weights = best.astype(np.float64)
        total = weights.sum(-1, keepdims=True)
        normalised: Array = weights / np.where(total == 0, 1.0, total)
        return normalised


Block = FFNBlock | HeadBlock


def evaluate_blocks(
    blocks: Iterable[Block], values: Mapping[str, Value], *, tolerance: float | None = None
) -> dict[str, Array]:
    """Every variable's value after ``blocks`` run in order (the order a builder gets
    them: a block reads what the blocks before it wrote; an ``in_place`` block adds to the
    old value) on ``values``, the inputs at every position of a sequence (arrays of shape
    (T,), or (B, T); numbers broadcast). The reference semantics of a circuit: what the
    model a builder assembles from ``blocks`` computes. ``tolerance``: see
    :meth:`HeadBlock.evaluate`."""
    out: dict[str, Array] = {name: np.asarray(v, dtype=np.float64) for name, v in values.items()}
    for block in blocks:
        got: Mapping[str, Value]
        if isinstance(block, HeadBlock):
            got = block.evaluate(out, tolerance=tolerance)
        else:
            got = block.evaluate(out)
        for name, value in got.items():
            added = np.asarray(value, dtype=np.float64)
            out[name] = out[name] + added if name in block.in_place else added
    return out


class _Sequences(Mapping[str, Value]):
    """``values`` as float64 arrays of shape (B, T), converted when first read."""

    def __init__(
        self, values: Mapping[str, Value], shape: tuple[int, ...], target: tuple[int, int]
    ) -> None:
        self.source, self.shape, self.target = values, shape, target
        self.cache: dict[str, Array] = {}

    def __getitem__(self, name: str) -> Array:
        if name not in self.cache:
            value = np.asarray(self.source[name], dtype=np.float64)
            self.cache[name] = np.broadcast_to(value, self.shape).reshape(self.target)
        return self.cache[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.source)

    def __len__(self) -> int:
        return len(self.source)


class BosValues:
    """Every variable's value at the BOS position (t = 0), followed block by block.

    A head whose mask is ``causal`` or ``strict`` shows the BOS row only BOS itself, so
    in a model built from such heads (and MLPs) the BOS residual does not depend on the
    input: it is what the model computes on the empty input, and each block's output
    there is its ``evaluate`` on the one-position sequence of BOS values (a causal head
    returns its value form at BOS, a strict one 0). Declare the BOS values of the inputs
    (embeddings, positional features at t = 0; numeric inputs are 0 there), then
    :meth:`add` the blocks in the order the builder gets them (an ``in_place`` block
    adds to the old value, as the builder schedules it)."""

    def __init__(self, inputs: Mapping[str, float] | None = None) -> None:
        self.values: dict[str, float] = {}
        for name, value in (inputs or {}).items():
            self.set(name, value)

    def set(self, name: str, value: float) -> None:
        """Declare (or overwrite) the BOS value of ``name``."""
        self.values[name] = float(value)

    def __getitem__(self, name: str) -> float:
        return self.values[name]

    def __contains__(self, name: object) -> bool:
        return name in self.values

    def form(self, form: Mapping[str, float]) -> float:
        """The value of ``form`` at BOS."""
        return float(form_value(form, self.values))

    def add(self, block: Block, *, reads_itself: bool = False) -> dict[str, float]:
        """Evaluate ``block`` at BOS, record the values of the variables it writes, and
        return what it adds to each. A head needs a ``causal`` or ``strict`` mask, or
        ``reads_itself=True``: the caller's word that the BOS row of this head reads
        only BOS (e.g. positional routing whose BOS row points at BOS,
        :func:`crasp_compiler.cookbook.attention.route` in average-hard mode)."""
        try:
            if isinstance(block, HeadBlock):
                got = self._head(block, reads_itself)
            else:
                got = {name: float(v) for name, v in block.evaluate(self.values).items()}
        except KeyError as err:
            raise KeyError(f"block {block.label!r}: {err.args[0]} at BOS") from None
        for name, value in got.items():
            old = self.values.get(name, 0.0) if name in block.in_place else 0.0
            self.values[name] = old + value
        return got

    def _head(self, block: HeadBlock, reads_itself: bool) -> dict[str, float]:
        if block.mask not in ("causal", "strict") and not reads_itself:
            raise ValueError(
                f"head {block.label!r} has mask {block.mask!r}: its BOS row sees later "
                "positions, so its value there depends on the input"
            )
        at_bos = {name: np.array([self.values[name]]) for name in block.reads}
        if not at_bos:  # no query, key or value reads a variable: every output is 0
            return dict.fromkeys(block.writes, 0.0)
        return {name: float(v[0]) for name, v in block.evaluate(at_bos).items()}
