"""The model family: the contract between the compiler and every runtime.

Input: ``BOS`` at position 0, tokens at positions 1..n. With residual width d:

    x_t = W_E[token_t] + W_P · pos(t) + W_X · v_t          (pos: named features)
    for each layer:
        x_t += Σ_h W_O^h Σ_s α^h_{ts} W_V^h x_s             (attention)
        x_t += W_2 act(N(W_1 x_t + b_1)) + b_2              (MLP, act per hidden unit)
    out_k(t) = w_k · x_t                                    (named outputs)

``v_t`` are the optional *numeric inputs*: one real number per named channel
(``Model.inputs``) at every token, 0 at BOS (PCOC models read their data this way).

Scores of head h: ``s_{ts} = scale · (W_Q x_t)·(W_K x_s) + bias(t − s)``, where ``bias``
is a sparse map from offsets to values (0 elsewhere). Weighting (:class:`Weighting`):
``softmax``; ``hard`` (average-hard: uniform over the maximal scores); ``hard-left`` /
``hard-right`` (unique-hard: the leftmost / rightmost maximal score). Under the three hard
weightings a score is maximal when it is within :data:`HARD_TOLERANCE` of its row's
maximum: ``1e-9`` when the model runs in float64, ``1e-4`` in float32 or narrower types
(:func:`hard_tolerance`), so that rounding never splits a tie of exact scores. Mask
(:class:`Mask`): ``causal`` (s ≤ t), ``strict`` (s < t; a row with no key attends to
nothing and reads 0), ``past`` (s ≥ t: the past is masked, the query sees itself and
later positions of its own sequence), ``strict-past`` (s > t; the last position reads 0)
or ``none``. Activations (:class:`Activation`): ``relu``, ``heaviside`` (``1[z ≥ 0]``)
and ``gelu`` (tanh form).

Each head records its structural *kind* (:class:`HeadKind`), a fact about its weights that
lets runtimes pick an evaluation without looking at weight values:

- ``uniform``: every score is 0 (no query, no key or scale 0, and no nonzero bias), so a
  causal softmax or average-hard head is the running mean, evaluated as prefix sums;
- ``bos-keyed``: the keys are 0 at every token, so scores differ from 0 only on the BOS
  key and at the bias offsets (the offset lookups of compiled local relations); a causal
  softmax or average-hard head is evaluated in O(T) from prefix sums;
- ``general``: anything (the chunked T × T evaluation is always correct).

``uniform`` implies ``bos-keyed``, and ``general`` holds for every head. Assembly records
the kind (:func:`derive_kinds`, a structural check of the weights: which matrices are
zero, and which residual dimensions can be nonzero at a token); a head built without one
(``kind=None``) gets it from the same check when a runtime first sees it, and model files
store it (:mod:`crasp_compiler.model.io` refuses a recorded kind the weights do not bear
out).

``N`` is the MLP's optional selective layer norm: each listed group g of hidden units is
replaced by ``(z_g − mean z_g) / std z_g`` (population std, ε = 0, no gain or bias; a
group with zero variance becomes 0); units in no group pass through unchanged. On a pair
``(z, −z)`` it gives ``(sign z, −sign z)`` at any scale of z.

Weight matrices are dense ``numpy`` arrays, or ``scipy.sparse.csr_array`` when a dense
one would be large (:data:`DENSE_LIMIT` entries): compiled models are mostly zeros, and
programs such as Beneš routing at n = 64 have residual widths in the hundreds of
thousands. Every runtime accepts both (:func:`matmul_t`, :func:`dense`).

Decision rules (:class:`Rule`) turn an output into a value: ``bool`` is ``out > 0.5``;
``count`` is ``round(out · (t + 1))`` (counts are stored scaled by ``1/(t+1)``); ``int``
is ``round(out)``; ``value`` is the raw number.

The enumerations are :class:`enum.StrEnum`: their members are the strings model files
and programs use (``Weighting.HARD_LEFT == "hard-left"``), and every constructor here
accepts either.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol, TypeAlias

import numpy as np
from numpy.typing import ArrayLike, NDArray

from crasp_compiler.errors import CraspError, spacing_hint


class Weighting(StrEnum):
    """How a head turns scores into attention weights (module docstring)."""

    SOFTMAX = "softmax"
    HARD = "hard"
    HARD_LEFT = "hard-left"
    HARD_RIGHT = "hard-right"


class Mask(StrEnum):
    """Which keys a query may attend to (module docstring)."""

    CAUSAL = "causal"
    STRICT = "strict"
    PAST = "past"
    STRICT_PAST = "strict-past"
    NONE = "none"


class Activation(StrEnum):
    """The activation of one MLP hidden unit."""

    RELU = "relu"
    HEAVISIDE = "heaviside"
    GELU = "gelu"


class Rule(StrEnum):
    """The decision rule of a named output."""

    BOOL = "bool"
    COUNT = "count"
    INT = "int"
    VALUE = "value"


class HeadKind(StrEnum):
    """The structural kind of a head (module docstring): what its weights guarantee about
    its scores, whatever the input."""

    UNIFORM = "uniform"
    BOS_KEYED = "bos-keyed"
    GENERAL = "general"


# The names as plain strings (messages print them as such).
ACTIVATIONS = tuple(a.value for a in Activation)
WEIGHTINGS = tuple(w.value for w in Weighting)
MASKS = tuple(m.value for m in Mask)
RULES = tuple(r.value for r in Rule)
HEAD_KINDS = tuple(k.value for k in HeadKind)
HARD_WEIGHTINGS = (Weighting.HARD, Weighting.HARD_LEFT, Weighting.HARD_RIGHT)

# Scores within this distance of the row maximum count as maximal under hard attention,
# per float type the model runs in (module docstring).
HARD_TOLERANCE: dict[str, float] = {"float64": 1e-9, "float32": 1e-4}


def hard_tolerance(dtype: str) -> float:
    """The tie tolerance of hard attention for a model running in ``dtype`` (a float type
    name such as ``"float64"``): :data:`HARD_TOLERANCE` of float64, else of float32."""
    return HARD_TOLERANCE["float64" if dtype == "float64" else "float32"]


BOS = "<bos>"
# A weight matrix with more entries than this is assembled as a CSR sparse matrix.
DENSE_LIMIT = 1 << 16

FloatArray: TypeAlias = NDArray[np.float64]
BoolArray: TypeAlias = NDArray[np.bool_]


class SparseMatrix(Protocol):
    """What the package uses of ``scipy.sparse.csr_array`` (scipy ships no types)."""

    data: NDArray[Any]
    indices: NDArray[Any]
    indptr: NDArray[Any]

    @property
    def shape(self) -> tuple[int, int]: ...
    @property
    def dtype(self) -> np.dtype[Any]: ...
    def toarray(self) -> FloatArray: ...
    def count_nonzero(self) -> int: ...
    def astype(self, dtype: Any, copy: bool = ...) -> SparseMatrix: ...
    def __matmul__(self, other: Any, /) -> Any: ...
    def __getitem__(self, key: Any, /) -> SparseMatrix: ...


# A weight matrix: dense, or CSR sparse (``isinstance(w, np.ndarray)`` tells them apart).
Matrix: TypeAlias = FloatArray | SparseMatrix


def is_sparse(w: Matrix) -> bool:
    return not isinstance(w, np.ndarray)


def dense(w: Matrix) -> FloatArray:
    """``w`` as a dense array."""
    return w if isinstance(w, np.ndarray) else w.toarray()


def matrix(shape: tuple[int, int], rows: ArrayLike, cols: ArrayLike, values: ArrayLike) -> Matrix:
    """The matrix with ``values`` summed at (``rows``, ``cols``): dense up to
    :data:`DENSE_LIMIT` entries, CSR beyond."""
    r, c = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    v = np.asarray(values, dtype=np.float64)
    if shape[0] * shape[1] <= DENSE_LIMIT:
        out = np.zeros(shape)
        np.add.at(out, (r, c), v)
        return out
    from scipy import sparse  # imported only where a sparse matrix is built

    csr = sparse.csr_array(sparse.coo_array((v, (r, c)), shape=shape))
    csr.sum_duplicates()
    csr.eliminate_zeros()
    out_sparse: SparseMatrix = csr
    return out_sparse


def matmul_t(x: NDArray[Any], w: Matrix) -> NDArray[Any]:
    """``x @ w.T`` over the last axis of ``x``, for dense or sparse ``w``."""
    if isinstance(w, np.ndarray):
        return x @ w.T
    flat = x.reshape(-1, x.shape[-1])
    out: NDArray[Any] = np.asarray(w @ flat.T).T.reshape(*x.shape[:-1], w.shape[0])
    return out


# The exports hold dense weights, and the torch module every matrix but those it keeps
# sparse (:func:`kept_sparse`): at most this many numbers held dense.
TORCH_DENSE_LIMIT = 1 << 27
# Builders refuse models that would store more numbers than this (1 GiB in float64),
# unless the environment variable names another budget.
PARAMETER_BUDGET = 1 << 27
BUDGET_VARIABLE = "CRASP_MAX_PARAMETERS"


def parameter_budget() -> int:
    """The most numbers a built model may store: ``$CRASP_MAX_PARAMETERS`` if set (an
    integer), else :data:`PARAMETER_BUDGET`."""
    text = os.environ.get(BUDGET_VARIABLE)
    if text is None:
        return PARAMETER_BUDGET
    if not text.strip().isdecimal():
        raise CraspError(f"{BUDGET_VARIABLE}={text!r} is not a whole number of parameters")
    return int(text)


def kept_sparse(w: Matrix) -> bool:
    """Whether a runtime that keeps large sparse matrices sparse (the torch module) keeps
    ``w`` so: it is stored sparse and has more than :data:`DENSE_LIMIT` entries."""
    return is_sparse(w) and w.shape[0] * w.shape[1] > DENSE_LIMIT


def require_dense(model: Model, what: str, keep_sparse: bool = False) -> None:
    """CraspError when ``model`` is too large to hold densely (``what`` needs that); with
    ``keep_sparse``, only the matrices that stay dense count (not :func:`kept_sparse`)."""
    count = sum(math.prod(a.shape) for a in model.weights() if not (keep_sparse and kept_sparse(a)))
    if count > TORCH_DENSE_LIMIT:
        held = (
            f"dense weights but for its large sparse matrices, and this model has {count:,} "
            "parameters in the others"
            if keep_sparse
            else f"dense weights, and this model has {count:,} parameters"
        )
        raise CraspError(
            f"{what} holds {held} ({count * 8 / 2**30:.1f} GiB in float64; "
            f"{model.nonzero_count():,} nonzero in all); run it with the numpy executor "
            "(`crasp run`, runtime.numpy_exec.run_tokens), which keeps large matrices sparse"
        )


def densified(model: Model) -> Model:
    """``model`` with every weight matrix dense (the same object when none is sparse)."""
    if not model.is_sparse():
        return model
    layers = []
    for layer in model.layers:
        heads = [
            replace(h, w_q=dense(h.w_q), w_k=dense(h.w_k), w_v=dense(h.w_v), w_o=dense(h.w_o))
            for h in layer.heads
        ]
        mlp = layer.mlp and replace(layer.mlp, w1=dense(layer.mlp.w1), w2=dense(layer.mlp.w2))
        layers.append(Layer(heads, mlp))
    return replace(model, w_p=dense(model.w_p), layers=layers)


def any_nonzero(w: Matrix) -> bool:
    return bool(np.any(w)) if isinstance(w, np.ndarray) else bool(w.count_nonzero())


def nonzero_rows(w: Matrix) -> BoolArray:
    """Which rows of ``w`` hold a nonzero entry."""
    if not isinstance(w, np.ndarray):
        counts = np.diff(w.indptr)
        rows = np.repeat(np.arange(w.shape[0]), counts)[np.asarray(w.data) != 0]
        out = np.zeros(w.shape[0], dtype=np.bool_)
        out[rows] = True
        return out
    return np.asarray(np.any(w != 0, axis=1), dtype=np.bool_)


def nonzero_columns(w: Matrix) -> BoolArray:
    """Which columns of ``w`` hold a nonzero entry."""
    if not isinstance(w, np.ndarray):
        out = np.zeros(w.shape[1], dtype=np.bool_)
        out[np.asarray(w.indices)[np.asarray(w.data) != 0]] = True
        return out
    return np.asarray(np.any(w != 0, axis=0), dtype=np.bool_)


def scores_vanish(has_query: bool, has_key: bool, scale: float, bias: Mapping[int, float]) -> bool:
    """Whether a head's scores are 0 for every input (its kind is ``uniform``): it has no
    query, no key or scale 0, and no nonzero bias."""
    no_scores = not has_query or not has_key or scale == 0
    return no_scores and not any(bias.values())


@dataclass
class Head:
    """One attention head (module docstring): scores ``scale·(W_Q x_t)·(W_K x_s) +
    bias(t − s)`` under ``mask``, weights ``a_ts`` by ``weighting``, and
    ``W_O Σ_s a_ts W_V x_s`` added to the residual at t."""

    w_q: Matrix  # (dk, d)
    w_k: Matrix  # (dk, d)
    w_v: Matrix  # (dv, d)
    w_o: Matrix  # (d, dv)
    scale: float = 1.0
    bias: dict[int, float] = field(default_factory=dict)
    weighting: Weighting = Weighting.SOFTMAX
    mask: Mask = Mask.CAUSAL
    label: str = ""
    # what the weights guarantee (module docstring); None: not recorded, derived when needed
    kind: HeadKind | None = None

    def __post_init__(self) -> None:
        self.weighting = Weighting(self.weighting)
        self.mask = Mask(self.mask)
        if self.kind is not None:
            self.kind = HeadKind(self.kind)

    @property
    def is_uniform(self) -> bool:
        """True when every score is 0, so any weighting is the uniform average (read from
        the weights, whatever ``kind`` records)."""
        return scores_vanish(any_nonzero(self.w_q), any_nonzero(self.w_k), self.scale, self.bias)


@dataclass
class MLP:
    """One feed-forward sublayer: ``W₂ σ(W₁ x + b₁) + b₂``, with one activation σ per
    hidden unit (``norm_groups``: units normalised together, module docstring)."""

    w1: Matrix  # (h, d)
    b1: FloatArray  # (h,)
    w2: Matrix  # (d, h)
    b2: FloatArray  # (d,)
    activations: list[Activation]  # one per hidden unit
    labels: list[str] = field(default_factory=list)  # one per hidden unit
    norm_groups: list[list[int]] = field(default_factory=list)  # disjoint hidden-unit groups

    def __post_init__(self) -> None:
        self.activations = [Activation(a) for a in self.activations]


@dataclass
class Layer:
    """The heads of one attention sublayer (in parallel) and the MLP after them."""

    heads: list[Head]
    mlp: MLP | None


@dataclass
class Output:
    """A named output read from the final residual: ``weights · x`` decided by ``rule``."""

    name: str
    weights: FloatArray  # (d,)
    rule: Rule

    def __post_init__(self) -> None:
        self.rule = Rule(self.rule)


FLOAT_DTYPES = ("float64", "float32")


def describe_limit(limit: int) -> str:
    """A float-type length limit of a guarantee in words (−1: no input)."""
    if limit < 0:
        return "for no input"
    if limit == 0:
        return "only for the empty input"
    return f"for inputs of length <= {limit:,}"


MAX_SEND_CAPACITY = 16  # the most senders a PCOC send lets one machine receive from


@dataclass
class Guarantee:
    """When the outputs are exact.

    ``max_len``: the longest input covered in real arithmetic (None: every length).
    ``dtypes``: per float type (``"float64"``, ``"float32"``), the longest input for which
    the compiler's rounding analysis proves the outputs exact when the model runs in that
    type (−1: no input, not even the empty one); a type that is absent was not analysed
    (the model claims only ``max_len``).
    ``input_bounds``: ``|v| ≤ bound`` for numeric input channels; values outside are not
    covered. ``destinations``: numeric input channels that are the destinations of a
    data-dependent send (PCOC): in a run of T tokens, the values at positions 1..T
    (machines 0..T−1) are covered only when they are integers and no value in 0..T−1
    occurs more often than its capacity (a destination outside sends nothing).
    ``capacities``: a destination's capacity where it is more than 1 (the senders one
    machine may receive from; 1 — distinct destinations — for the others). ``errors``: per float type the model
    is covered in, a bound on how far any raw output may be from the reference
    semantics' output (a compiled PCOC model: from its interpreter's float64 output) on
    every covered input; a type that is absent has no such bound (a C-RASP model's
    outputs are decided exactly). ``text`` says all of this in words.
    """

    max_len: int | None
    text: str
    dtypes: dict[str, int] = field(default_factory=dict)
    input_bounds: dict[str, float] = field(default_factory=dict)
    destinations: list[str] = field(default_factory=list)
    errors: dict[str, float] = field(default_factory=dict)
    capacities: dict[str, int] = field(default_factory=dict)

    def limit(self, dtype: str | None = None) -> int | None:
        """The longest input covered when running in ``dtype`` (None: no limit)."""
        limits = [self.max_len, self.dtypes.get(dtype) if dtype is not None else None]
        known = [limit for limit in limits if limit is not None]
        return min(known) if known else None

    def covers(self, length: int, dtype: str | None = None) -> bool:
        limit = self.limit(dtype)
        return limit is None or length <= limit

    def length_problem(self, length: int, dtype: str | None = None) -> str | None:
        """Why an input of ``length`` tokens is not covered in ``dtype``, or None."""
        if self.covers(length, dtype):
            return None
        if self.max_len is not None and length > self.max_len:
            return f"input length {length} exceeds the model's guarantee ({self.text})"
        limit = self.dtypes[dtype]  # type: ignore[index]
        return (
            f"input length {length} is beyond what the model is proven exact for in {dtype} "
            f"({describe_limit(limit)}; float64 and float32 limits differ)"
        )

    def value_problem(self, name: str, values: np.ndarray) -> str | None:
        """Why numeric input ``name`` holding ``values`` is not covered, or None."""
        bound = self.input_bounds.get(name)
        if bound is None or not values.size:
            return None
        worst = float(np.max(np.abs(values)))
        if worst <= bound:
            return None
        return (
            f"numeric input {name!r} holds {worst:g}, outside its declared bound "
            f"|{name}| <= {bound:g} (the model is exact only within it)"
        )

    def destination_problem(
        self, name: str, values: NDArray[np.float64], lengths: NDArray[np.int64]
    ) -> str | None:
        """Why the send destinations of input ``name`` are not covered, or None:
        ``values`` ``(B, T)`` at positions 0..T−1 (BOS at 0, padding past
        ``lengths[b]``); the first run and machine with a destination that is not an
        integer, or more machines with one destination in 0..lengths[b]−1 than its
        capacity."""
        if name not in self.destinations:
            return None
        capacity = self.capacities.get(name, 1)
        for b, length in enumerate(lengths):
            where = f" of input {b}" if len(lengths) > 1 else ""
            row = values[b, 1 : 1 + int(length)]
            fractional = np.flatnonzero(row != np.floor(row))
            if fractional.size:
                i = int(fractional[0])
                return (
                    f"numeric input {name!r} holds {float(row[i])!r} at machine {i}{where}, "
                    "not an integer: the model routes a send exactly only to integral "
                    "destinations"
                )
            senders = np.flatnonzero((row >= 0) & (row < length))
            order = senders[np.argsort(row[senders], kind="stable")]  # by destination
            targets = row[order]
            # a destination that capacity + 1 machines name: sorted, it repeats c places on
            again = np.flatnonzero(targets[capacity:] == targets[:-capacity]) + capacity
            if again.size:  # the first machine that overfills an earlier destination
                i = int(np.min(order[again]))
                first = int(np.searchsorted(targets, row[i]))
                machines = sorted(int(m) for m in order[first : first + capacity])
                if capacity == 1:
                    return (
                        f"numeric input {name!r} sends machines {machines[0]} and {i}{where} "
                        f"both to machine {int(row[i])}: the model routes a send exactly only "
                        "to distinct destinations"
                    )
                return (
                    f"numeric input {name!r} sends machines "
                    f"{', '.join(map(str, machines))} and {i}{where} all to machine "
                    f"{int(row[i])}: the model routes a send exactly only to at most "
                    f"{capacity} senders per machine"
                )
        return None

    def input_problems(
        self, names: Sequence[str], numeric: NDArray[np.float64], lengths: NDArray[np.int64]
    ) -> list[str]:
        """Why the numeric inputs ``numeric`` ``(B, T, m)`` (channel k is input
        ``names[k]``; BOS at position 0) are not covered: values beyond a declared bound
        (:meth:`value_problem`), send destinations that are not integers or collide
        (:meth:`destination_problem`)."""
        return [
            problem
            for k, name in enumerate(names)
            for problem in (
                self.value_problem(name, numeric[..., k]),
                self.destination_problem(name, numeric[..., k], lengths),
            )
            if problem
        ]


@dataclass(frozen=True)
class Provenance:
    """Where a compiled model came from, typed: the source language (the title its
    :class:`~crasp_compiler.languages.registry.Language` registers, e.g. ``"C-RASP"``),
    the compile mode, and, for languages compiled for a fixed size (PCOC), that size.
    Code branches on this, never on ``info`` keys; the file stores it in its own header
    field (format version 5 on; older files get it from ``info``/``options``,
    :func:`legacy_provenance`), checked by the language on load."""

    language: str
    mode: str | None = None
    size: int | None = None


def legacy_provenance(info: Mapping[str, Any], options: Mapping[str, Any]) -> Provenance | None:
    """The provenance a model file of format version 1–4 records in ``info``/``options``:
    ``info["language"]``, ``options["mode"]`` and, for a language compiled for a size,
    ``info["n"]`` (None without a language: a model built by hand)."""
    language = info.get("language")
    if not isinstance(language, str):
        return None
    mode, size = options.get("mode"), info.get("n")
    return Provenance(
        language,
        mode if isinstance(mode, str) else None,
        size if type(size) is int else None,
    )


FREE = "(free)"
"""The label of a residual dimension that holds nothing at a stage (:func:`labels_at`)."""


def labels_at(
    residual: Sequence[str],
    occupants: Sequence[Sequence[tuple[int, str]]] | None,
    stage: int,
    stages: int,
) -> list[str]:
    """The label of each residual dimension at ``stage`` of ``0 … stages`` (negative
    counts from the end): ``residual`` when no dimension is reused (``occupants`` is
    None), else each dimension's latest occupant from ``stage`` or before, :data:`FREE`
    where there is none."""
    if not -stages - 1 <= stage <= stages:
        raise IndexError(f"stage {stage} out of range (0 … {stages})")
    if occupants is None:
        return list(residual)
    stage %= stages + 1
    out = []
    for dimension in occupants:
        here = [label for start, label in dimension if start <= stage]
        out.append(here[-1] if here and here[-1] else FREE)
    return out


@dataclass
class Model:
    """A model of the family (module docstring). ``info`` holds descriptive facts for
    people (classes, bounds, theorem counts); :attr:`provenance` is the typed origin."""

    vocab: list[str]  # vocab[0] is BOS
    w_e: FloatArray  # (V, d)
    features: list[str]  # positional feature names
    w_p: Matrix  # (d, F)
    layers: list[Layer]
    outputs: list[Output]
    residual: list[str]  # label of each residual dimension (its occupants, joined by " → ")
    guarantee: Guarantee
    accept: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)  # numeric input channels
    w_x: FloatArray | None = None  # (d, len(inputs)); None when there are none
    # where dimensions are reused: per dimension, (stage, label) of each value it holds in
    # turn, from the stage it is there on ("" = free: cancelled); None = one label each
    occupants: list[list[tuple[int, str]]] | None = None
    # the typed origin of a compiled model (None: built by hand)
    provenance: Provenance | None = None

    @property
    def stages(self) -> int:
        """The last stage: stage 0 is the embedding, stage 2L − 1 the residual after the
        attention of layer L, stage 2L after its MLP."""
        return 2 * len(self.layers)

    def labels_at(self, stage: int) -> list[str]:
        """The label of what each residual dimension holds at ``stage`` (see
        :attr:`stages`; negative counts from the end, like a list index):
        :func:`labels_at`."""
        return labels_at(self.residual, self.occupants, stage, self.stages)

    @property
    def numeric_weights(self) -> FloatArray:
        """``W_X`` as a (d, m) array, (d, 0) for a model without numeric inputs."""
        return self.w_x if self.w_x is not None else np.zeros((self.width, 0))

    @property
    def width(self) -> int:
        return len(self.residual)

    @property
    def mlp_width(self) -> int:
        return max((layer.mlp.w1.shape[0] for layer in self.layers if layer.mlp), default=0)

    def output(self, name: str) -> Output:
        for out in self.outputs:
            if out.name == name:
                return out
        raise KeyError(name)

    def weights(self) -> list[Matrix]:
        """Every weight array: embeddings, positional and numeric maps, outputs, then each
        layer's head matrices and MLP weights and biases."""
        arrays: list[Matrix] = [self.w_e, self.w_p, self.numeric_weights]
        arrays += [o.weights for o in self.outputs]
        for layer in self.layers:
            arrays += [m for h in layer.heads for m in (h.w_q, h.w_k, h.w_v, h.w_o)]
            if layer.mlp:
                arrays += [layer.mlp.w1, layer.mlp.b1, layer.mlp.w2, layer.mlp.b2]
        return arrays

    def parameter_count(self) -> int:
        return sum(math.prod(a.shape) for a in self.weights())

    def nonzero_count(self) -> int:
        """The number of nonzero weights."""
        return sum(
            int(np.count_nonzero(a)) if isinstance(a, np.ndarray) else int(a.count_nonzero())
            for a in self.weights()
        )

    def is_sparse(self) -> bool:
        """Whether any weight matrix is stored sparse."""
        return any(is_sparse(a) for a in self.weights())

    def token_ids(self, tokens: Sequence[str]) -> NDArray[np.int64]:
        """Map tokens (without BOS) to vocabulary ids; ValueError names a bad token."""
        return token_ids(self.vocab, tokens)


def token_ids(vocab: Sequence[str], tokens: Sequence[str]) -> NDArray[np.int64]:
    """Ids of ``tokens`` (without BOS) in ``vocab``, as int64; ValueError names the first
    bad token and its position. One dictionary lookup per token in C (``map``), no
    per-token Python; the error path alone walks the tokens."""
    index = {s: k for k, s in enumerate(vocab) if s != BOS}
    try:
        return np.fromiter(map(index.__getitem__, tokens), dtype=np.int64, count=len(tokens))
    except (KeyError, TypeError):
        for position, token in enumerate(tokens):
            if not isinstance(token, str) or token not in index:
                hint = spacing_hint(token, vocab[1:]) if isinstance(token, str) else None
                raise ValueError(
                    f"token {token!r} at position {position} is not in the vocabulary"
                    + (f"; {hint}" if hint else "")
                ) from None
        raise


# ---------------------------------------------------------------- head kinds


@dataclass(frozen=True)
class HeadShape:
    """What the kind of a head depends on, read from its weights: whether its scores
    vanish (:func:`scores_vanish`), which residual dimensions its keys read (the nonzero
    columns of ``W_K``) and which it writes (the nonzero rows of ``W_O``)."""

    uniform: bool
    reads: BoolArray
    writes: BoolArray


def classify_heads(
    live: BoolArray, layers: Sequence[tuple[Sequence[HeadShape], BoolArray]]
) -> list[list[HeadKind]]:
    """The kind of every head (module docstring), layer by layer.

    ``live`` marks the residual dimensions that can be nonzero at a token after the
    embedding; each layer gives its heads' shapes and the dimensions its MLP writes (the
    nonzero rows of ``W_2`` and entries of ``b_2``). A head whose keys read no live
    dimension has zero keys at every token, whatever the input: it is ``bos-keyed``. The
    heads of a layer read the residual before that layer's attention."""
    live = live.copy()
    kinds = []
    for heads, mlp_writes in layers:
        row = []
        for head in heads:
            if head.uniform:
                row.append(HeadKind.UNIFORM)
            elif not np.any(head.reads & live):
                row.append(HeadKind.BOS_KEYED)
            else:
                row.append(HeadKind.GENERAL)
        kinds.append(row)
        for head in heads:
            live |= head.writes
        live |= mlp_writes
    return kinds


def embedding_live(model: Model) -> BoolArray:
    """The residual dimensions that can be nonzero at a token after the embedding: those
    a token's row of ``W_E``, a positional feature that is not 0 at every token, or a
    numeric input writes."""
    from crasp_compiler.model.features import zero_at_tokens

    live = nonzero_columns(model.w_e[1:])
    keep = [f for f, name in enumerate(model.features) if not zero_at_tokens(name)]
    if keep:
        live |= nonzero_rows(model.w_p[:, keep])
    return live | nonzero_rows(model.numeric_weights)


def derive_kinds(model: Model) -> list[list[HeadKind]]:
    """The kind of every head, from the weights alone (whatever the heads record)."""
    layers = []
    for layer in model.layers:
        shapes = [
            HeadShape(
                scores_vanish(any_nonzero(h.w_q), any_nonzero(h.w_k), h.scale, h.bias),
                nonzero_columns(h.w_k),
                nonzero_rows(h.w_o),
            )
            for h in layer.heads
        ]
        writes = np.zeros(model.width, dtype=np.bool_)
        if layer.mlp is not None:
            writes = nonzero_rows(layer.mlp.w2) | (layer.mlp.b2 != 0)
        layers.append((shapes, writes))
    return classify_heads(embedding_live(model), layers)


PositionalKeys: TypeAlias = tuple[FloatArray, FloatArray]


def positional_keys(model: Model) -> list[list[PositionalKeys | None]]:
    """For every head whose keys are a function of the key's position alone,
    ``k_s = a·s + b·s²``, the pair ``(a, b)``; None for the others. That is a head whose
    ``W_K`` reads only residual dimensions holding the ``index`` or ``index^2`` feature
    and nothing else: no other feature, token, numeric input or layer writes them.
    Nothing is densified but those columns (models without the features return at once)."""
    out: list[list[PositionalKeys | None]] = [[None] * len(layer.heads) for layer in model.layers]
    features = [(f, name) for f, name in enumerate(model.features) if name in ("index", "index^2")]
    if not features:
        return out
    written = nonzero_columns(model.w_e) | nonzero_rows(model.numeric_weights)
    for layer in model.layers:
        for head in layer.heads:
            written |= nonzero_rows(head.w_o)
        if layer.mlp is not None:
            written |= nonzero_rows(layer.mlp.w2) | (layer.mlp.b2 != 0)
    per_dim = np.zeros(model.width, dtype=np.int64)
    for f in range(len(model.features)):
        per_dim += _column(model.w_p, f) != 0
    power: dict[int, tuple[int, float]] = {}  # dimension -> (power of s, coefficient)
    for f, name in features:
        column = _column(model.w_p, f)
        for d in map(int, np.flatnonzero(column)):
            if per_dim[d] == 1 and not written[d]:
                power[d] = (1 if name == "index" else 2, float(column[d]))
    for number, layer in enumerate(model.layers):
        for h, head in enumerate(layer.heads):
            reads = [int(d) for d in np.flatnonzero(nonzero_columns(head.w_k))]
            if not reads or any(d not in power for d in reads):
                continue
            a, b = np.zeros(head.w_k.shape[0]), np.zeros(head.w_k.shape[0])
            for d in reads:
                which, coef = power[d]
                (a if which == 1 else b)[:] += _column(head.w_k, d) * coef
            out[number][h] = (a, b)
    return out


def positional_patterns(model: Model) -> list[list[bool]]:
    """For every head, whether its queries and keys are functions of position alone, so
    that its attention pattern depends on nothing but the sequence's length: ``W_Q``
    and ``W_K`` read only residual dimensions that a positional feature writes and that
    nothing else has written when the head runs (no token, numeric input, or earlier
    layer: those dimensions hold exactly ``W_P pos(t)``). PCOC's routing heads (a
    receive from a machine the round's static expression names) are such heads."""
    positional = nonzero_rows(model.w_p)
    written = nonzero_columns(model.w_e) | nonzero_rows(model.numeric_weights)
    out = []
    for layer in model.layers:
        fixed = positional & ~written
        out.append(
            [
                bool(
                    np.all(fixed[nonzero_columns(head.w_q)])
                    and np.all(fixed[nonzero_columns(head.w_k)])
                )
                for head in layer.heads
            ]
        )
        for head in layer.heads:
            written = written | nonzero_rows(head.w_o)
        if layer.mlp is not None:
            written = written | nonzero_rows(layer.mlp.w2) | (layer.mlp.b2 != 0)
    return out


def _column(w: Matrix, k: int) -> FloatArray:
    """Column ``k`` of a dense or CSR matrix, dense."""
    if isinstance(w, np.ndarray):
        return np.asarray(w[:, k], dtype=np.float64)
    return np.asarray(w[:, [k]].toarray()[:, 0], dtype=np.float64)


def head_kinds(model: Model) -> list[list[HeadKind]]:
    """The kind of every head: the recorded one, or (for heads built without one) the
    one :func:`derive_kinds` gives."""
    if all(h.kind is not None for layer in model.layers for h in layer.heads):
        return [[h.kind for h in layer.heads if h.kind is not None] for layer in model.layers]
    derived = derive_kinds(model)
    return [
        [h.kind if h.kind is not None else kind for h, kind in zip(layer.heads, row, strict=True)]
        for layer, row in zip(model.layers, derived, strict=True)
    ]


def kind_holds(recorded: HeadKind, derived: HeadKind) -> bool:
    """Whether a head whose weights have kind ``derived`` may claim ``recorded``
    (``general`` always, ``bos-keyed`` also for a uniform head)."""
    return recorded in (derived, HeadKind.GENERAL) or (
        recorded is HeadKind.BOS_KEYED and derived is HeadKind.UNIFORM
    )


def with_kinds(model: Model, kinds: Iterable[Sequence[HeadKind]] | None = None) -> Model:
    """``model`` with every head's kind recorded (``kinds``, default :func:`derive_kinds`);
    the heads are updated in place and the model returned."""
    rows = derive_kinds(model) if kinds is None else kinds
    for layer, row in zip(model.layers, rows, strict=True):
        for head, kind in zip(layer.heads, row, strict=True):
            head.kind = kind
    return model
