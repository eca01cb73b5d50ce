"""Blocks over named residual variables: the unit every construction is written in.

A *variable* is one named residual dimension. A *form* is a linear combination of
variables, ``Form({name: coefficient})``, with ``+``, ``-`` and scalar ``*``. A block reads
forms and writes variables; its matrices are local (rows and columns indexed by its own
inputs and outputs) and the builder lifts them into the global residual stream, so no
user code does index arithmetic. Each block states when it is exact (:class:`Exactness`).

A block normally writes *fresh* variables. A block may instead add to variables that
already exist when it lists them in ``in_place`` (cancelling the residual, zeroing out a
variable): the builder schedules it after every block that reads the old value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


class Form(dict[str, float]):
    """A linear combination of residual variables, ``{name: coefficient}``."""

    def __add__(self, other: Mapping[str, float]) -> Form:  # type: ignore[override]
        return form_add((1, self), (1, other))

    def __radd__(self, other: Mapping[str, float]) -> Form:
        return form_add((1, other), (1, self))

    def __sub__(self, other: Mapping[str, float]) -> Form:
        return form_add((1, self), (-1, other))

    def __rsub__(self, other: Mapping[str, float]) -> Form:
        return form_add((1, other), (-1, self))

    def __mul__(self, factor: float) -> Form:  # type: ignore[override]
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
    out: dict[str, float] = {}
    for coef, form in terms:
        for name, value in form.items():
            out[name] = out.get(name, 0) + coef * value
    return Form({name: value for name, value in out.items() if value != 0})


def as_form(x: Mapping[str, float]) -> Form:
    """A clean :class:`Form` copy of ``x`` (zero coefficients dropped)."""
    return form_add((1, x))


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


Block = FFNBlock | HeadBlock
