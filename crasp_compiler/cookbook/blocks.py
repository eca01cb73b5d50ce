"""Blocks over named residual variables: the unit the compilers lower to.

A *variable* is one named residual dimension. A *form* is a linear combination of
variables, ``{name: coefficient}``. A block reads forms and writes fresh variables; its
matrices are local (rows and columns indexed by its own inputs and outputs), and the
assembler lifts them into the global residual stream. Each block states when it is exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Form = dict[str, float]


def form_add(*terms: tuple[float, Form]) -> Form:
    """Σ coefficient · form, with zero coefficients dropped."""
    out: Form = {}
    for coef, form in terms:
        for var, value in form.items():
            out[var] = out.get(var, 0.0) + coef * value
    return {var: value for var, value in out.items() if value != 0}


@dataclass(frozen=True)
class Unit:
    """One hidden unit: ``act(form + bias)``."""

    form: Form
    bias: float
    activation: str = "relu"


@dataclass
class FFNBlock:
    """Hidden units and, per output variable, ``Σ coef · unit`` (plus a constant).

    ``norm_groups`` lists groups of unit indices whose pre-activations are layer-normalised
    together (ε = 0) before the activation (see :mod:`crasp_compiler.model.model`)."""

    units: list[Unit]
    outputs: dict[str, dict[int, float]]
    exact: str
    label: str = ""
    constants: dict[str, float] = field(default_factory=dict)
    norm_groups: list[list[int]] = field(default_factory=list)

    @property
    def reads(self) -> set[str]:
        return {var for unit in self.units for var in unit.form}

    @property
    def writes(self) -> list[str]:
        return list(self.outputs)


@dataclass
class HeadBlock:
    """One attention head: ``scale · q·k + bias(t − s)`` scores, value ``form``.

    ``query`` and ``key`` are lists of forms (one per query/key dimension); the head
    writes ``Σ_s α_ts · value_form(x_s)`` into the variable ``output``.
    """

    query: list[Form]
    key: list[Form]
    value: Form
    output: str
    exact: str
    bias: dict[int, float] = field(default_factory=dict)
    weighting: str = "softmax"
    mask: str = "causal"
    scale: float = 1.0
    label: str = ""

    @property
    def reads(self) -> set[str]:
        return {var for f in (*self.query, *self.key, self.value) for var in f}

    @property
    def writes(self) -> list[str]:
        return [self.output]


Block = FFNBlock | HeadBlock
