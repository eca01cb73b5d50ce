"""Lower a PCOC program (:mod:`crasp_compiler.languages.pcoc.nodes`) to cookbook blocks on a Builder.

Layout: BOS (t = 0) is the *sink*; machine i sits at t = i + 1; every position holds the
token ``m``; each input slot is a numeric input channel (0 at BOS). A slot's current
value is a :class:`Value`: a form over the residual variables plus what the compiler
knows about it.

- **Communication.** The receives of a round are grouped by their source pattern (the
  source of every machine, from :func:`~crasp_compiler.languages.pcoc.static.static_value`
  over every ``i``); each pattern is one positional routing head
  (:func:`crasp_compiler.cookbook.attention.route`) carrying every slot read with that
  pattern. Machines without a source read the sink, whose slots are 0, and get
  ``default`` from the positional form ``default · Σ onehot:(i+1)`` over those machines.
  A pattern where every machine reads itself is the residual (no head); a slot whose
  value is known at compile time (a per-machine constant) is routed at compile time.
- **Local computation.** Linear operations are forms (free); ``min``/``max``
  (:func:`ffn.minimum`/:func:`ffn.maximum`), ``abs``/``relu``/``clamp`` (:func:`ffn.absolute`,
  :func:`ffn.relu`, :func:`ffn.clamp`)
  are exact ReLU blocks; static per-machine values are positional forms
  ``Σ v_i · onehot:(i+1)``; data comparisons are Heaviside units at the middle of the
  declared margin (hard mode, :meth:`_Lowerer.step`) or ReLU ramps between a quarter and
  three quarters of it (softmax, :meth:`_Lowerer.ramp`), so that a rounding below the
  rest of the margin changes nothing; conditionals (on a static condition that differs
  between machines, or on a data comparison) are ``y + p·(x − y)`` by
  :func:`ffn.conditional_bigm` with ``M' = M(1 + 2^-6)``, M the bound of ``|x − y|`` (the
  slack makes an unselected gate exactly 0 under rounding); ``y + c·p`` (linear) when
  ``x − y`` is one number c. A form that grows every round (``x − ReLU(…) + ReLU(…)``)
  is made one variable where an MLP reads it anyway (:meth:`_Lowerer.materialize`).
- **Per-machine branches cost no extra layer where it can be avoided.** Nested static
  conditions are flattened: the machines are split between candidate values, and one
  layer of gates (one per candidate but the most common) picks them. Inside a static
  branch taken by the machines S, a data comparison that selects (the condition of an
  ``if``) gets ``K·1[i ∉ S]`` pushed into its input (K ≥ its bound plus the margin, a
  positional form), so it is exactly 0 outside S and the data selection keeps its
  ``else`` value there; and ``min(x, y)`` / ``max(x, y)`` of a value x that stood before
  the branch is ``x ∓ ReLU(±(x − y) − K·1[i ∉ S])`` (:func:`ffn.relu`), which is x outside
  S. Where both branches keep the old value c outside their machines, the merge is the
  linear ``a + b − c`` (odd-even transposition sort: one layer per round).
- **The sink stays 0.** Every value's form is 0 at BOS in the average-hard model: BOS
  reads only itself, so its residual does not depend on the input. The lowering follows
  every variable's value there (:class:`~crasp_compiler.cookbook.blocks.BosValues`: each
  block's ``evaluate`` on the BOS values of what it reads, a routing head's being its
  value forms at BOS, 0); the output of every MLP block at BOS is subtracted times the
  ``bos`` variable.
- **Bounds.** Every value carries an interval that holds at every machine, derived from
  the declared bounds of the input slots (which the runtimes check), the constants and
  the operations; the candidates of a selection keep their own intervals wherever they
  are computed (a big-M gate bounds what it gates, taken or not). The bound declared on
  any other slot is a promise of the programmer (checked by the interpreter with
  ``check_promises``), never assumed: only slots the compiler makes itself (the
  routing of sends) get the interval their construction proves (:meth:`_Lowerer.constructed`).
  Big-M gating needs a finite interval, else a :class:`CraspError` names the input slots
  that need ``bound``.
- **Error analysis.** Every value carries ``leak``: in the softmax model with
  temperature T, ``|value − hard value| ≤ leak · e^{−T}`` at every position (BOS
  included). A routed value gains ``n · R`` (R the width of its range over the
  positions, the sink's 0 included: each row puts weight ≤ n·e^{−T} off its source);
  linear maps scale it by ``Σ|c|``; ``min``/``max``/``abs``/``relu``/``clamp`` are
  1-Lipschitz; a data comparison stops it (it is decided exactly while the leak of
  ``left − right``, with its rounding, stays below its slack: each is recorded as a
  :class:`Comparison` the temperature must satisfy); a selection passes the larger of its
  branches'. Every value also carries its float errors, ``err`` (the model, per float
  type) and ``ref`` (the interpreter), by the rules of
  :mod:`crasp_compiler.languages.pcoc.rounding`, which each construction here applies;
  each output's are collected in :attr:`Lowered.bounds`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import TypeVar

import numpy as np

from crasp_compiler.assemble.builder import BOS_VAR, NONBOS_VAR, Builder, token_var
from crasp_compiler.cookbook import attention, ffn
from crasp_compiler.cookbook.blocks import (
    Block,
    BosValues,
    Exactness,
    FFNBlock,
    Form,
    HeadBlock,
    Unit,
    form_add,
    var,
)
from crasp_compiler.errors import CraspError, Diagnostic, Span
from crasp_compiler.languages.pcoc.benes import PREFIX
from crasp_compiler.languages.pcoc.nodes import (
    Add,
    Assign,
    Call,
    Compare,
    Expr,
    If,
    IfExpr,
    Num,
    Program,
    Read,
    Receive,
    Round,
    Scale,
    Slot,
    Static,
    StaticExpr,
    Stmt,
    Sub,
)
from crasp_compiler.languages.pcoc.rounding import (
    BITS,
    DTYPES,
    FLOAT32_MAX,
    GATE_SLACK,
    SOFTMAX_WEIGHT_ROUNDINGS,
    UNIT,
    ZERO,
    Floats,
    Mlp,
    Pair,
    Var,
    bos_defect,
    gamma,
    grid,
    padd,
    pair,
    pmax,
    pscale,
    psub,
    times,
)
from crasp_compiler.languages.pcoc.static import (
    StaticFailure,
    machine_indices,
    static_value,
    unroll,
)
from crasp_compiler.model.features import onehot

TOKEN = "m"
_T = TypeVar("_T")
MODES = ("hard", "softmax")
COMPARISONS = (">", ">=", "<", "<=", "==", "!=")
INF = math.inf
# A value whose form has more variables than this is made one variable where an MLP
# reads it anyway (_Lowerer.materialize).
LONG_FORM = 4
# What identifies a lowered comparison (_Lowerer.compare): the id of its node, whether it is
# a selector inside per-machine branches, the machines of the branches, the static
# environment and the ids of the values it reads.
_CompareKey = tuple[int, bool, tuple[bool, ...], tuple[tuple[str, int], ...], tuple[int, ...]]


def _arithmetic(terms: Sequence[tuple[float, Value]], grid: int | None = None) -> float:
    """The float64 rounding of ``Σ c·v`` evaluated left to right, as the interpreter
    evaluates ``+``, ``−`` and ``c·``: ``u·|c v|`` for every product with c not ±2^k and
    ``u·|S_k|`` for every partial sum S_k after the first term (|v| at most its interval
    plus its own rounding ``ref``); none when every term is exact (``ref`` 0) and every
    product and partial sum a multiple of ``2^grid`` below ``2^(53 + grid)``."""
    u, total, partial = UNIT[0], 0.0, 0.0
    terms = [(c, v) for c, v in terms if c and (v.lo, v.hi, v.ref) != (0.0, 0.0, 0.0)]
    if grid is not None and all(v.ref == 0 for _, v in terms):
        size = sum(times(abs(c), v.magnitude) for c, v in terms)
        if size < 2.0 ** (BITS[0] + grid):
            return 0.0
    for k, (c, v) in enumerate((c, v) for c, v in terms if c):
        size = times(abs(c), v.magnitude + v.ref)
        if not _power_of_two(c):
            total += u * size
        partial += size
        if k >= 1:
            total += u * partial
    return total


class Unresolved(CraspError):
    """A data comparison that a float type cannot decide exactly (:func:`unresolved`)."""

    def __init__(self, comparison: Comparison, diagnostic: Diagnostic, program: Program) -> None:
        self.comparison = comparison
        super().__init__([diagnostic], program.source or None, program.filename)


def unresolved(comparison: Comparison, program: Program, dtype: str) -> Unresolved:
    """Why a data comparison cannot be decided exactly in float type ``dtype``: the
    margin that would compile, or the bound that is missing."""
    d = DTYPES.index(dtype)
    rounding = comparison.rounding(d)
    margin = comparison.margin
    node = comparison.node
    if comparison.unbounded:
        slots = ", ".join(repr(s) for s in sorted(comparison.unbounded))
        example = sorted(comparison.unbounded)[0]
        message = (
            f"this comparison needs a bound on the values it compares, so that their {dtype} "
            f"rounding is bounded; the slot(s) {slots} have none"
        )
        hint = f"declare one, e.g. `input {example} bound 1e6` or `slot {example} bound 1e6`"
    elif comparison.generated:
        message = (
            f"the routing of a send (generated by the compiler) compares the "
            f"destination and integers derived from it with margin {margin:g}, but "
            f"{dtype} computes their differences only to within {rounding:.3g}"
        )
        hint = "declare a smaller bound on the destination slot"
    elif margin == 0:
        message = (
            "this comparison has margin 0, a step that is exact only where left − right "
            f"is computed exactly; {dtype} computes it only to within {rounding:.3g}"
        )
        hint = f"declare a margin, e.g. `margin {_round_up(4 * rounding)}`"
    else:
        need = rounding * margin / comparison.threshold * 1.25
        message = (
            f"the margin {margin:g} of this comparison is below what {dtype} resolves: "
            f"left − right (values up to {comparison.magnitude:g}) is computed only to "
            f"within {rounding:.3g} (the model and the interpreter), and the model needs "
            f"it within {comparison.threshold:g}"
        )
        hint = f"declare `margin {_round_up(need)}` or more, or tighter bounds on the values"
    span = node.span or comparison.span
    return Unresolved(comparison, Diagnostic(message, span, hint), program)


def _round_up(value: float) -> str:
    """``value`` rounded up to 2 significant digits, as text."""
    if not math.isfinite(value) or value <= 0:
        return f"{value:g}"
    exponent = math.floor(math.log10(value)) - 1
    return f"{math.ceil(value / 10**exponent) * 10**exponent:.2g}"


def _power_of_two(value: float) -> bool:
    return value != 0 and math.isfinite(value) and math.frexp(abs(value))[0] == 0.5


def _covers(machines: Sequence[bool], mask: Sequence[bool], where: bool) -> bool:
    """Whether ``machines`` includes every machine whose ``mask`` bit is ``where``."""
    return all(m for m, b in zip(machines, mask, strict=True) if b == where)


def _read_names(node: object) -> list[str]:
    """The names an expression reads, in order (with repeats)."""
    if isinstance(node, Read):
        return [node.name]
    if isinstance(node, tuple):
        return [name for item in node for name in _read_names(item)]
    if not is_dataclass(node):
        return []
    return [name for f in fields(node) for name in _read_names(getattr(node, f.name))]


def _flatten_add(node: Expr) -> list[Expr]:
    """The terms of a tree of ``+``."""
    if isinstance(node, Add):
        return _flatten_add(node.left) + _flatten_add(node.right)
    return [node]


def _unbounded(values: Sequence[Value], lo: float, hi: float) -> frozenset[str]:
    """The slots whose missing bound leaves a sum of ``values`` unbounded (none when its
    interval [lo, hi] is finite)."""
    if math.isfinite(lo) and math.isfinite(hi):
        return frozenset()
    return frozenset().union(*(v.unbounded for v in values))


def _left_chain(node: Expr) -> bool:
    """Whether ``node`` is a term or ``((a + b) + c) + …`` (no ``+`` on any right)."""
    while isinstance(node, Add):
        if isinstance(node.right, Add):
            return False
        node = node.left
    return True


def _data_select(node: Expr) -> bool:
    """Whether ``node`` is ``if <data comparison> then … else …``."""
    return isinstance(node, IfExpr) and isinstance(node.cond, Compare)


def _flatten(fn: str, node: Expr) -> tuple[Expr, ...]:
    """The arguments of nested ``min`` (or ``max``) calls, in order."""
    if isinstance(node, Call) and node.fn == fn:
        return tuple(leaf for arg in node.args for leaf in _flatten(fn, arg))
    return (node,)


@dataclass(frozen=True)
class Value:
    """A data value of every machine.

    ``form``: its residual form, 0 at BOS in the average-hard model. ``lo``/``hi``: an
    interval holding at every machine, whichever branch it takes (±inf where unknown;
    ``unbounded`` names the input slots whose missing bound makes it so). ``leak``: the
    softmax coefficient (module docstring); ``err`` (per float type,
    :data:`~crasp_compiler.languages.pcoc.rounding.DTYPES`) and ``ref``: the model's and
    the interpreter's rounding (:mod:`crasp_compiler.languages.pcoc.rounding`). ``const``:
    the value of every machine when it is
    known at compile time. ``choices``: for a value selected per machine by static
    conditions, the candidate values and the machines that take each (a later static
    selection builds on the candidates, so nested static ``if``s cost one gating layer).
    ``zero_at``: machines where a selector is exactly 0; ``same``: a value this one equals
    on the given machines (a data selection that keeps its ``else`` value there), as the
    model computes them up to the given rounding per float type."""

    form: Form
    lo: float
    hi: float
    leak: float = 0.0
    err: Pair = ZERO
    ref: float = 0.0
    const: tuple[float, ...] | None = None
    unbounded: frozenset[str] = frozenset()
    choices: tuple[tuple[Value, tuple[bool, ...]], ...] | None = None
    zero_at: tuple[bool, ...] | None = None
    same: tuple[Value, tuple[bool, ...], Pair] | None = None

    @property
    def magnitude(self) -> float:
        """A bound on ``|value|`` at every position (the sink's 0 included)."""
        return max(abs(self.lo), abs(self.hi))

    @property
    def width(self) -> float:
        """The width of the range of values over all positions, the sink's 0 included."""
        return max(self.hi, 0.0) - min(self.lo, 0.0)


@dataclass(frozen=True)
class Comparison:
    """A data comparison as compiled, which the model decides exactly only while the
    rounding of ``left − right`` stays below a slack: in float type d while ``err[d] + ref
    + leak·e^{−T} < slack[d]`` (for margin 0: while all of it is 0), ``slack`` being the
    ``threshold`` (m/2 for a Heaviside step, m/4 for a softmax ramp) less the rounding of
    the unit's own sum. ``magnitude`` bounds ``left − right``; ``generated``: a comparison
    the compiler made (the routing of a send), not one of the program's; ``unbounded``: the slots
    whose missing bound leaves its rounding unbounded."""

    node: Compare
    span: Span | None
    margin: float
    threshold: float
    slack: Pair
    err: Pair
    ref: float
    leak: float
    magnitude: float
    generated: bool = False
    unbounded: frozenset[str] = frozenset()

    def holds(self, d: int, decay: float = 0.0) -> bool:
        """Whether it is decided exactly in float type number d when softmax weights off
        the source are at most ``decay`` (e^{−T}; 0 in hard mode)."""
        total = self.err[d] + self.ref + times(self.leak, decay)
        if self.margin == 0:
            return total == 0 and self.slack[d] == 0
        return total < self.slack[d]

    def rounding(self, d: int) -> float:
        """What the model and the interpreter may be off by in ``left − right`` (against
        ``threshold``: m/2 for a Heaviside step, m/4 for a softmax ramp)."""
        return self.err[d] + self.ref + self.threshold - self.slack[d]


@dataclass(frozen=True)
class Bound:
    """An output's bound against the interpreter: ``err[d] + ref + leak·e^{−T}``."""

    err: Pair
    ref: float
    leak: float

    def total(self, d: int, decay: float = 0.0) -> float:
        return self.err[d] + self.ref + times(self.leak, decay)


@dataclass
class _Emitted:
    """An MLP block just added: the form of its output (corrected to 0 at BOS), the output
    variable, its value at BOS, its output coefficients per unit, and the block as the
    model computes it."""

    form: Form
    name: str
    at_bos: float
    coefs: dict[int, float]
    info: Mlp
    defect: float

    def spread(self) -> Pair:
        """``Σ_u |a_u| r_u + r_out``: what the block's own rounding adds to its output."""
        units = padd(*(pscale(abs(a), self.info.pre(u)) for u, a in self.coefs.items()))
        return padd(units, self.out)

    def pre(self, *units: int) -> Pair:
        """The largest rounding of these units' pre-activations."""
        return pmax(*(self.info.pre(u) for u in units))

    @property
    def out(self) -> Pair:
        """The rounding of the output sum."""
        return self.info.outputs[self.name].rounding


@dataclass
class RoundReport:
    """What one round compiled to: its heads (one per routed source pattern)."""

    number: int
    heads: list[HeadBlock] = field(default_factory=list)
    routed: list[str] = field(default_factory=list)
    receives: int = 0


class _Lowerer:
    def __init__(
        self,
        program: Program,
        n: int,
        mode: str,
        temperature: float | None,
        dtype: int,
        clean: bool = False,
    ) -> None:
        self.program = program
        self.n = n
        self.mode = mode
        self.temperature = temperature
        # softmax: the weight off a row's source is at most n·e^{−T} (magnitudes grow by
        # leak·e^{−T}); the float type the model must be exact in (refused otherwise)
        self.decay = math.exp(-temperature) if mode == "softmax" and temperature else 0.0
        self.dtype = dtype
        # softmax: make a comparison's bit exact before a big-M gate reads it (clean_bit)
        self.clean = clean
        self.builder = Builder([TOKEN])
        # every variable's value at BOS, from the blocks' evaluate (BOS reads only itself)
        self.at_bos = BosValues({BOS_VAR: 1.0, NONBOS_VAR: 0.0, token_var(TOKEN): 0.0})
        # every variable as the model computes it (crasp_compiler.languages.pcoc.rounding)
        self.floats = Floats(n)
        self.floats.feature(BOS_VAR, "bos")
        self.floats.feature(NONBOS_VAR, "machines")
        self.floats.feature(token_var(TOKEN), "machines")
        self.span: Span | None = None
        self.rounds: list[RoundReport] = []
        self.comparisons: list[Comparison] = []
        self.compared: dict[_CompareKey, tuple[Value, Compare, tuple[Value | None, ...]]] = {}
        self.constants: dict[tuple[float, ...], Value] = {}
        self.uniforms: dict[float, Value] = {}
        self.names: dict[int, tuple[Compare, list[str]]] = {}  # id(node) -> names it reads
        self.partial: dict[str, Span | None] = {}
        self.round_number = 0
        # the machines where the statements being lowered take effect (per-machine branches)
        self.context: tuple[bool, ...] = (True,) * n
        # the values that stood before the innermost per-machine branch (by identity)
        self.bases: set[int] = set()
        # this round's long forms made one variable each (:meth:`materialize`)
        self.materialized: dict[int, tuple[Value, Value]] = {}

    # -------------------------------------------------------------- errors and helpers

    def error(self, message: str, span: Span | None = None, hint: str | None = None) -> CraspError:
        return CraspError(
            [Diagnostic(message, span if span is not None else self.span, hint)],
            source=self.program.source or None,
            filename=self.program.filename,
        )

    def static(self, expr: StaticExpr, env: dict[str, int]) -> list[int]:
        """The value of a static expression at every machine (evaluated for all machines
        at once by :func:`~crasp_compiler.languages.pcoc.static.static_value`, the
        checker's and the interpreter's evaluator)."""
        try:
            value = static_value(expr, env, machine_indices(self.n))
        except StaticFailure as failure:
            raise self.error(
                f"static expression has no value: {failure.message}", failure.span
            ) from None
        if isinstance(value, np.ndarray):
            return [int(v) for v in value]
        return [int(value)] * self.n

    def feature(self, position: int) -> Form:
        name = onehot(position)
        if name not in self.at_bos:
            self.builder.feature(name)
            self.at_bos.set(name, 1.0 if position == 0 else 0.0)
            self.floats.onehot(position)
        return var(name)

    def positional(self, values: Sequence[float]) -> Form:
        """``Σ v_i · onehot:(i+1)`` (0 at BOS); ``v · nonbos`` when all are equal."""
        values = [float(v) for v in values]
        if len(set(values)) == 1:
            return Form({NONBOS_VAR: values[0]}) if values[0] else Form()
        return form_add(*((v, self.feature(i + 1)) for i, v in enumerate(values) if v))

    def constant(self, values: Sequence[float]) -> Value:
        values = tuple(map(float, values))
        if values not in self.constants:  # Values are immutable: one per distinct vector
            form = self.positional(values)
            self.constants[values] = Value(form, min(values), max(values), const=values)
        return self.constants[values]

    def uniform(self, value: float) -> Value:
        """The constant ``value`` at every machine."""
        if value not in self.uniforms:
            self.uniforms[value] = self.constant([value] * self.n)
        return self.uniforms[value]

    def fresh(self, stem: str) -> str:
        return self.builder.fresh(stem)

    def emit(self, block: FFNBlock) -> _Emitted:
        """Add an MLP block with one output: its form (corrected to 0 at BOS), and the
        block as the model computes it; :meth:`made` then records the output's value."""
        (name,) = block.writes
        info = self.floats.mlp(block)
        self.builder.add(block)
        at_bos = self.at_bos.add(block)[name]
        # the float64 rounding of the value at BOS the compiler subtracts
        defect = bos_defect(block, self.at_bos.values, at_bos, name)
        form = form_add((1, var(name)), (-at_bos, var(BOS_VAR)))
        return _Emitted(form, name, at_bos, dict(block.outputs.get(name, {})), info, defect)

    def made(
        self,
        emitted: _Emitted,
        value: Value,
        support: frozenset[int] | None = None,
        at_bos_exact: bool = False,
    ) -> Value:
        """``value`` (computed by ``emitted``, its ``err`` from the construction's rule)
        recorded for its variable: exact where the block is computed exactly on exact
        inputs, else off by its rule plus the float64 rounding of its value at BOS (none
        where ``at_bos_exact``: a decision that holds there with a slack)."""
        out = emitted.info.outputs[emitted.name]
        defect = 0.0 if at_bos_exact else emitted.defect
        err = pair(
            lambda d: (
                0.0
                if out.exact[d] and out.exact[0] and value.leak == 0 and math.isfinite(value.err[d])
                else value.err[d] + defect
            )
        )
        value = replace(value, err=err)
        self.define(emitted.name, value, emitted.at_bos, out.grid, support)
        return value

    def define(
        self,
        name: str,
        value: Value,
        at_bos: float,
        grid: int | None,
        support: frozenset[int] | None = None,
    ) -> None:
        """Record variable ``name``, which holds ``value`` at the machines and ``at_bos``
        at BOS (its reference there), as the model computes it."""
        leak = times(value.leak, self.decay)
        self.floats.define(
            name,
            Var(
                self.computed(value),
                pair(lambda d: abs(at_bos) + value.err[d] + leak),
                pair(lambda d: value.err[d] == 0 and value.leak == 0),
                grid,
                support,
            ),
        )

    def computed(self, value: Value) -> Pair:
        """A bound on ``|value|`` as the model computes it, per float type: its reference
        bound (the interpreter keeps the interval, the reference is within ``ref`` of it),
        its softmax leak and its rounding."""
        base = value.magnitude + value.ref + times(value.leak, self.decay)
        return pair(lambda d: base + value.err[d])

    def grid(self, terms: Sequence[tuple[float, Value]]) -> int | None:
        """The grid of the references of ``Σ c·v`` (every product's; None if unknown)."""
        grids = []
        for c, v in terms:
            if c:
                g, cg = self.floats.grid(v.form), grid(c)
                if g is None or cg is None:
                    return None
                grids.append(g + cg)
        return min(grids, default=0)

    def robust(self, value: Value, slack: Pair) -> tuple[bool, bool]:
        """Per float type, whether ``value`` as computed stays within ``slack`` of its
        reference (rounding, the interpreter's, the softmax leak at this temperature)."""
        leak = times(value.leak, self.decay)
        return pair(lambda d: value.err[d] + value.ref + leak < slack[d])

    def check(
        self,
        margin: float,
        slack: Pair,
        value: Value,
        node: Compare,
        generated: bool = False,
    ) -> Comparison:
        """Record a data comparison, which decides exactly while ``value``'s rounding stays
        below ``slack`` (:class:`Comparison`); one that no temperature makes hold in the
        model's float type is refused here (:func:`unresolved`), before the rest of the
        program is lowered."""
        threshold = margin / 2 if self.mode == "hard" else margin / 4
        comparison = Comparison(
            node,
            self.span,
            margin,
            threshold,
            slack,
            value.err,
            value.ref,
            value.leak,
            value.magnitude,
            generated,
            value.unbounded,
        )
        self.comparisons.append(comparison)
        # a comparison of values without bounds is refused after the lowering, which may
        # name the bounds a gate needs first
        if not comparison.holds(self.dtype, 0.0) and not value.unbounded:
            raise unresolved(comparison, self.program, DTYPES[self.dtype])
        return comparison

    def require(self, bound: float, value: Value, what: str) -> float:
        if math.isfinite(bound):
            return bound
        slots = ", ".join(repr(s) for s in sorted(value.unbounded)) or "(unknown)"
        example = sorted(value.unbounded)[0] if value.unbounded else "x"
        raise self.error(
            f"{what} needs a bound on the values involved; the input slot(s) {slots} declare none",
            hint=f"declare one, e.g. `input {example} bound 1e6` (the bounds of all other "
            "values are derived from the inputs')",
        )

    # -------------------------------------------------------------- linear algebra of values

    def combine(self, *terms: tuple[float, Value]) -> Value:
        """``Σ c · value``: a form (no block). Its error is ``Σ|c|·err``; the interpreter
        rounds each of its ``+``, ``−`` and ``c·`` (:func:`_arithmetic`), and so does the
        compiler where the result is a constant (a positional form)."""
        form = self.linear(*((c, v.form) for c, v in terms))
        lo = sum(c * (v.lo if c > 0 else v.hi) for c, v in terms if c)
        hi = sum(c * (v.hi if c > 0 else v.lo) for c, v in terms if c)
        const = None
        consts = [(c, v.const) for c, v in terms if v.const is not None]
        if len(consts) == len(terms):
            const = tuple(sum(c * k[i] for c, k in consts if c) for i in range(self.n))
            lo, hi = min(const), max(const)
        rounding = _arithmetic(terms, self.grid(terms))
        err = padd(*(pscale(abs(c), v.err) for c, v in terms))
        return Value(
            form,
            lo,
            hi,
            leak=sum(times(abs(c), v.leak) for c, v in terms),
            err=err if const is None else padd(err, (rounding, rounding)),
            ref=sum(times(abs(c), v.ref) for c, v in terms) + rounding,
            const=const,
            unbounded=_unbounded([v for c, v in terms if c], lo, hi),
        )

    def linear(self, *terms: tuple[float, Form]) -> Form:
        """``Σ c · form``, refused where a coefficient overflows float64."""
        form = form_add(*terms)
        if not all(math.isfinite(c) for c in form.values()):
            raise self.error("this expression overflows float64 (a coefficient beyond ±1.8e308)")
        return form

    def chain(self, values: Sequence[Value]) -> Value:
        """``((v₁ + v₂) + v₃) + …``: what :meth:`combine` gives pair by pair, left to
        right (the same interval, constant, leak, errors, and the interpreter's rounding
        of every partial sum), with the form built once: O(total size), not quadratic in
        the number of terms."""
        if len(values) == 1:
            return values[0]
        form = self.linear(*((1, v.form) for v in values))
        lo = hi = leak = ref = 0.0
        err = ZERO
        const: list[float] | None = [0.0] * self.n
        for k, v in enumerate(values):
            leak += times(1.0, v.leak)
            err, ref = padd(err, v.err), ref + v.ref
            lo, hi = lo + v.lo, hi + v.hi
            if const is not None and v.const is not None:
                const = [a + b for a, b in zip(const, v.const, strict=True)]
                if k >= 1:
                    lo, hi = min(const), max(const)
            else:
                const = None
        terms = [(1.0, v) for v in values]
        rounding = _arithmetic(terms, self.grid(terms))
        return Value(
            form,
            lo,
            hi,
            leak=leak,
            err=err if const is None else padd(err, (rounding, rounding)),
            ref=ref + rounding,
            const=None if const is None else tuple(const),
            unbounded=_unbounded(values, lo, hi),
        )

    def piecewise(
        self, block: FFNBlock, x: Value, lo: float, hi: float, unbounded: frozenset[str]
    ) -> Value:
        """A 1-Lipschitz piecewise-linear function of ``x`` (``abs``, ``relu``, ``clamp``):
        off by ``E_x + Σ_u |a_u| r_u + r_out``; the interpreter's is exact on its values."""
        emitted = self.emit(block)
        if math.isfinite(lo) and math.isfinite(hi):
            unbounded = frozenset()
        value = Value(
            emitted.form,
            lo,
            hi,
            leak=x.leak,
            err=padd(x.err, emitted.spread()),
            ref=x.ref,
            unbounded=unbounded,
        )
        return self.made(emitted, value)

    # -------------------------------------------------------------- expressions

    def expr(self, node: Expr, scope: dict[str, Value], env: dict[str, int]) -> Value:
        match node:
            case Num(value):
                return self.uniform(value)
            case Read(name, span=span):
                return self.read(name, scope, span)
            case Static(expr):
                return self.constant(self.static(expr, env))
            case Add():
                terms = _flatten_add(node)
                if sum(map(_data_select, terms)) > 1:
                    return self.select_sum(terms, scope, env, exclusive=node.exclusive)
                if _left_chain(node):
                    return self.chain([self.expr(term, scope, env) for term in terms])
                return self.add_tree(node, scope, env)
            case Sub(a, b):
                return self.combine((1, self.expr(a, scope, env)), (-1, self.expr(b, scope, env)))
            case Scale(factor, arg):
                return self.combine((float(factor), self.expr(arg, scope, env)))
            case Call(fn, args):
                if fn in ("min", "max"):  # min(min(a, b), c) = min(a, b, c): a balanced tree
                    args = _flatten(fn, node)
                return self.call(fn, [self.expr(a, scope, env) for a in args], node)
            case Compare():
                return self.compare(node, scope, env)
            case IfExpr(cond, then, otherwise):
                if isinstance(cond, Compare):
                    p = self.compare(cond, scope, env, selector=True)
                    return self.select(
                        p, self.expr(then, scope, env), self.expr(otherwise, scope, env)
                    )
                bits = self.static(cond, env)
                if all(bits):
                    return self.expr(then, scope, env)
                if not any(bits):
                    return self.expr(otherwise, scope, env)
                p = self.constant([1.0 if b else 0.0 for b in bits])
                saved, self.bases = self.bases, {id(v) for v in scope.values()}
                try:
                    x = self.within(p, True, lambda: self.expr(then, scope, env))
                    y = self.within(p, False, lambda: self.expr(otherwise, scope, env))
                finally:
                    self.bases = saved
                return self.select(p, x, y)
        raise self.error(f"unknown expression {node!r}")  # pragma: no cover

    def add_tree(self, node: Expr, scope: dict[str, Value], env: dict[str, int]) -> Value:
        """A tree of ``+`` pair by pair, as written; a chain ``((a + b) + c) + …`` (what
        long sums are) in one pass (:meth:`chain`)."""
        if not isinstance(node, Add):
            return self.expr(node, scope, env)
        if _left_chain(node):
            return self.chain([self.expr(term, scope, env) for term in _flatten_add(node)])
        left = self.add_tree(node.left, scope, env)
        right = self.add_tree(node.right, scope, env)
        return self.combine((1, left), (1, right))

    def within(self, p: Value, taken: bool, lower: Callable[[], _T]) -> _T:
        """``lower()`` with the context narrowed to the machines where the static ``p`` is
        ``taken`` (a data ``p`` leaves the context as it is)."""
        saved = self.context
        if p.const is not None:
            self.context = tuple(
                c and bool(b) == taken for c, b in zip(saved, p.const, strict=True)
            )
        try:
            return lower()
        finally:
            self.context = saved

    def read(self, name: str, scope: dict[str, Value], span: Span | None = None) -> Value:
        if name in scope:
            return scope[name]
        if name in self.partial:
            raise self.error(
                f"{name!r} is assigned in only one branch of an `if` whose condition differs "
                "between machines, and read after it",
                span,
            )
        raise self.error(f"{name!r} is not a slot or a value defined earlier in this round", span)

    def call(self, fn: str, args: list[Value], node: Call) -> Value:
        if fn in ("min", "max"):
            if not args:
                raise self.error(f"{fn}() needs at least one argument")
            if len(args) == 2:
                return self.min_max(fn, args[0], args[1], branch=True)
            while len(args) > 1:  # a balanced tree: ⌈log2 k⌉ MLP layers for k arguments
                paired = [
                    self.min_max(fn, a, b) for a, b in zip(args[::2], args[1::2], strict=False)
                ]
                args = paired + ([args[-1]] if len(args) % 2 else [])
            return args[0]
        if fn in ("abs", "relu"):
            if len(args) != 1:
                raise self.error(f"{fn}() takes one argument, not {len(args)}")
            (x,) = args
            if x.const is not None:
                f = abs if fn == "abs" else (lambda v: max(v, 0.0))
                return self.constant([f(v) for v in x.const])
            if fn == "abs":
                make = ffn.absolute
                lo = 0.0 if x.lo <= 0 <= x.hi else min(abs(x.lo), abs(x.hi))
                hi = x.magnitude
            else:
                make = ffn.relu
                lo, hi = max(x.lo, 0.0), max(x.hi, 0.0)
            out = self.fresh(fn)
            block = make(x.form, out, label=self.site(fn))
            return self.piecewise(block, x, lo, hi, x.unbounded)
        if fn == "clamp":
            if len(args) != 3 or args[1].const is None or args[2].const is None:
                raise self.error("clamp(x, lo, hi) takes a value and two constant bounds")
            x = args[0]
            lows, highs = set(args[1].const), set(args[2].const)
            if len(lows) != 1 or len(highs) != 1:
                raise self.error("clamp(x, lo, hi): lo and hi must be numbers")
            low, high = lows.pop(), highs.pop()
            if low > high:
                raise self.error(f"clamp(x, {low:g}, {high:g}): lo is above hi")
            if x.const is not None:
                return self.constant([min(max(v, low), high) for v in x.const])
            out = self.fresh("clamp")
            if low == high:
                return self.uniform(low)
            try:  # flat pieces of width max(1, |bound|): a unit step vanishes next to 1e300
                block = ffn.clamp(x.form, low, high, out, label=self.site("clamp"))
            except ValueError:
                raise self.error(
                    f"clamp(x, {low:g}, {high:g}): the bounds overflow float64"
                ) from None
            lo, hi = min(max(x.lo, low), high), max(min(x.hi, high), low)
            return self.piecewise(block, x, lo, hi, frozenset())
        raise self.error(f"unknown function {fn}()")

    def min_max(self, fn: str, x: Value, y: Value, branch: bool = False) -> Value:
        """``min(x, y)`` or ``max(x, y)``; with ``branch`` inside per-machine branches, a
        value that is also x (the operand that stood before the branch) on the machines
        outside them."""
        if x.const is not None and y.const is not None:
            f = min if fn == "min" else max
            return self.constant([f(a, b) for a, b in zip(x.const, y.const, strict=True)])
        outside = tuple(not m for m in self.context)
        if id(y) in self.bases and id(x) not in self.bases:
            x, y = y, x
        z = self.combine((1, x), (-1, y)) if fn == "min" else self.combine((1, y), (-1, x))
        if branch and any(outside) and math.isfinite(z.magnitude) and id(x) in self.bases:
            return self.min_max_in_branch(fn, x, y, z, outside)
        out = self.fresh(fn)
        make = ffn.minimum if fn == "min" else ffn.maximum
        block = make(x.form, y.form, out, label=self.site(fn))
        if fn == "min":
            lo, hi = min(x.lo, y.lo), min(x.hi, y.hi)
        else:
            lo, hi = max(x.lo, y.lo), max(x.hi, y.hi)
        emitted = self.emit(block)
        unbounded = (
            frozenset() if math.isfinite(lo) and math.isfinite(hi) else x.unbounded | y.unbounded
        )
        # min(X, Y) is 1-Lipschitz in max(ΔX, ΔY); units ReLU(X), ReLU(−X) (an identity
        # pair: off by the larger of their roundings) and ReLU(±(Y − X))
        err = padd(pmax(x.err, y.err), emitted.pre(0, 1), emitted.pre(2), emitted.out)
        value = Value(
            emitted.form,
            lo,
            hi,
            leak=max(x.leak, y.leak),
            err=err,
            ref=max(x.ref, y.ref),
            unbounded=unbounded,
        )
        return self.made(emitted, value)

    def materialize(self, x: Value) -> None:
        """Make a form of more than :data:`LONG_FORM` variables one variable, by an
        identity pair ``ReLU(x) − ReLU(−x)`` in the MLP that reads it now (no layer more):
        the next round's values then read that variable (:meth:`shorten`), so forms that
        grow every round (``x − ReLU(…) + ReLU(…)``, odd-even transposition sort) stay
        short and each read rounds over a few terms, not all the rounds'."""
        data = [v for v in x.form if self.floats.vars[v].feature is None]
        if len(data) <= LONG_FORM or id(x) in self.materialized:
            return
        emitted = self.emit(ffn.identity(x.form, self.fresh("x"), label=self.site("value")))
        own = padd(emitted.pre(0, 1), emitted.out, (emitted.defect,) * 2)
        copy = replace(x, form=emitted.form, err=padd(x.err, own), const=None, choices=None)
        self.materialized[id(x)] = (x, self.made(emitted, copy))

    def shorten(self, value: Value) -> Value:
        """``value`` with a form of this round that was made one variable
        (:meth:`materialize`) replaced by it, where value holds it as a term: ``v = x +
        rest`` becomes ``m + rest``, off by m's rounding more."""
        for x, copy in self.materialized.values():
            if value is x or not all(
                value.form.get(v) == c
                for v, c in x.form.items()
                if self.floats.vars[v].feature is None
            ):
                continue
            form = self.linear((1, value.form), (-1, x.form), (1, copy.form))
            err = padd(value.err, psub(copy.err, x.err))
            value = replace(value, form=form, err=err)
        return value

    def min_max_in_branch(
        self, fn: str, x: Value, y: Value, z: Value, outside: tuple[bool, ...]
    ) -> Value:
        """``min(x, y) = x − ReLU(x − y)``, ``max(x, y) = x + ReLU(y − x)`` on the machines
        of the branch, x on the others: the ReLU's input is pushed down by
        ``K = 2|z| + 1`` there, so its unit is exactly 0 (its support is the branch's
        machines) while z's rounding stays below ``|z| + 1``."""
        self.materialize(x)
        big = 2 * z.magnitude + 1
        shift = self.constant([big if o else 0.0 for o in outside])
        shifted = self.combine((1, z), (-1, shift))
        out = self.fresh(f"{fn}-in-branch")
        block = ffn.relu(shifted.form, out, label=self.site(f"{fn} in a branch"))
        emitted = self.emit(block)
        robust = self.robust(z, psub((big - z.magnitude,) * 2, emitted.pre(0)))
        inside = frozenset(i for i, o in enumerate(outside) if not o)
        support = inside if all(robust) else None
        relu_value = Value(
            emitted.form,
            0.0,
            max(z.hi, 0.0),
            leak=z.leak,
            err=padd(z.err, emitted.spread()),
            ref=z.ref,
        )
        relu = self.made(emitted, relu_value, support)
        result = self.combine((1, x), (-1 if fn == "min" else 1, relu))
        if fn == "min":
            lo, hi = min(x.lo, y.lo), x.hi
        else:
            lo, hi = x.lo, max(x.hi, y.hi)
        # inside: min(X, Y) + r; outside: X exactly (when robust; else off by the unit)
        own = padd(emitted.spread(), (emitted.defect, emitted.defect))
        residue = pair(lambda d: 0.0 if robust[d] else relu.err[d])
        err = pair(lambda d: max(x.err[d] + max(residue[d], own[d]), y.err[d] + own[d]))
        leak = max(x.leak, y.leak) + (0.0 if all(robust) else z.leak)
        return replace(
            self.hull(result, [x, y]),
            lo=lo,
            hi=hi,
            err=err,
            leak=leak,
            ref=max(x.ref, y.ref),
            same=(x, outside, residue),
        )

    def compare(
        self,
        node: Compare,
        scope: dict[str, Value],
        env: dict[str, int],
        selector: bool = False,
    ) -> Value:
        """A data comparison as a 0/1 value; a ``selector`` (the condition of an ``if``)
        inside per-machine branches is also exactly 0 on the machines outside them."""
        if node.op not in COMPARISONS:
            raise self.error(f"unknown comparison {node.op!r}")
        # the same comparison of the same values (one test read by several selections,
        # as a compaction's equality tests are by every field) is lowered once
        if id(node) not in self.names:  # the entry holds the node, so its id stays its own
            self.names[id(node)] = (node, _read_names(node))
        reads = tuple(scope.get(name) for name in self.names[id(node)][1])
        folds = selector and not all(self.context)  # only then is a selector different
        key = (id(node), folds, self.context, tuple(env.items()), tuple(map(id, reads)))
        if key in self.compared:
            return self.compared[key][0]
        value = self._compare(node, scope, env, selector)
        self.compared[key] = (value, node, reads)  # held, so the ids in the key stay theirs
        return value

    def _compare(
        self, node: Compare, scope: dict[str, Value], env: dict[str, int], selector: bool
    ) -> Value:
        left, right = self.expr(node.left, scope, env), self.expr(node.right, scope, env)
        if left.const is not None and right.const is not None:
            tests: dict[str, Callable[[float, float], bool]] = {
                ">": lambda a, b: a > b,
                ">=": lambda a, b: a >= b,
                "<": lambda a, b: a < b,
                "<=": lambda a, b: a <= b,
                "==": lambda a, b: a == b,
                "!=": lambda a, b: a != b,
            }
            test = tests[node.op]
            return self.constant(
                [1.0 if test(a, b) else 0.0 for a, b in zip(left.const, right.const, strict=True)]
            )
        margin = float(node.margin)
        if not math.isfinite(margin) or margin < 0:
            raise self.error(f"the margin of a comparison must be a number >= 0, not {margin:g}")
        if margin == 0 and self.mode == "softmax":
            raise self.error(
                f"softmax mode needs a positive margin on the comparison `{node.op}` "
                "(margin 0 is a step, which no temperature makes continuous)",
                hint="declare one, e.g. `a > b margin 0.5`",
            )
        # a > b: 1[d > 0]; a >= b: 1[d ≥ 0]; a < b: 1[−d > 0]; a <= b: 1[−d ≥ 0] (exact
        # when d ∉ (0, m)); a == b: 1[d = 0]; a != b: 1 − 1[d = 0]; d = a − b
        kind, sign = {
            ">": ("gt", 1),
            ">=": ("ge", 1),
            "<": ("gt", -1),
            "<=": ("ge", -1),
            "==": ("eq", 1),
            "!=": ("eq", 1),
        }[node.op]
        d = self.combine((sign, left), (-sign, right))
        if margin == 0:  # the interpreter decides ``a > b`` exactly on its values
            d = replace(d, ref=left.ref + right.ref)
        generated = any(name.startswith(PREFIX) for name in self.names[id(node)][1])
        outside = [not m for m in self.context]
        folded = selector and any(outside) and node.op != "!=" and math.isfinite(d.magnitude)
        if folded:
            # inside a per-machine branch: push d at least m past the threshold on the
            # machines outside it, so the selector is exactly 0 there
            big = d.magnitude + max(margin, 1.0)
            shift = self.constant([big if o else 0.0 for o in outside])
            d = replace(self.combine((1, d), (1 if kind == "eq" else -1, shift)), ref=d.ref)
        label = f"{node.op} margin {margin:g}"
        if self.mode == "hard":
            p = self.step(kind, d, margin, label, node, generated)
        else:
            p = self.ramp(kind, d, margin, label, node, generated)
        if node.op == "!=":
            p = replace(self.combine((1, self.uniform(1.0)), (-1, p)), ref=0.0)
        if folded:
            p = replace(p, zero_at=tuple(outside))
        return p

    def decided(
        self,
        emitted: _Emitted,
        d: Value,
        margin: float,
        slack: Pair,
        err: Pair,
        node: Compare,
        generated: bool,
    ) -> Value:
        """The 0/1 output of a comparison that decides exactly where ``d``'s rounding stays
        below ``slack`` (recorded, :meth:`check`): off by ``err`` there, unbounded in a
        float type where it may not."""
        comparison = self.check(margin, slack, d, node, generated)
        value = Value(
            emitted.form,
            0.0,
            1.0,
            err=pair(lambda t: err[t] if comparison.holds(t, self.decay) else math.inf),
        )
        return self.made(emitted, value, at_bos_exact=self.mode == "hard")

    def step(
        self, kind: str, d: Value, margin: float, label: str, node: Compare, generated: bool
    ) -> Value:
        """A hard-mode comparison: Heaviside units at the middle of the margin,
        ``1[d > m/2]`` (gt), ``1[d ≥ −m/2]`` (ge), ``1[d ≥ −m/2] + 1[−d ≥ −m/2] − 1``
        (eq), the threshold ``m/2`` times the constant 1 (BOS included, where d is 0).
        Where ``d`` is outside its margin they give exactly 0 or 1 while ``d`` is computed
        to within m/2 (less the rounding of the unit's own sum): error does not pass."""
        half = form_add((margin / 2, var(BOS_VAR)), (margin / 2, var(NONBOS_VAR)))
        out = self.fresh("cmp")
        if kind == "gt":
            block = ffn.gt_zero(self.linear((1, d.form), (-1, half)), out, tolerance=0.0)
        elif kind == "ge":
            block = ffn.ge_zero(self.linear((1, d.form), (1, half)), out, tolerance=0.0)
        else:  # both Heaviside units write one variable (one residual dimension)
            low = self.linear((1, d.form), (1, half))
            high = self.linear((-1, d.form), (1, half))
            block = FFNBlock(
                [Unit(low, 0.0, "heaviside"), Unit(high, 0.0, "heaviside")],
                {out: {0: 1.0, 1: 1.0}},
                Exactness("exact"),
                constants={out: -1.0},
            )
        block.label = self.site(label)
        emitted = self.emit(block)
        rounding = emitted.pre(*range(len(block.units)))
        slack = pair(lambda t: margin / 2 - rounding[t] if margin else -rounding[t])
        return self.decided(emitted, d, margin, slack, ZERO, node, generated)

    def ramp(
        self, kind: str, d: Value, margin: float, label: str, node: Compare, generated: bool
    ) -> Value:
        """A softmax-mode comparison: ReLU ramps saturated with a slack of m/4 on either
        side, ``clamp((d − m/4)/δ, 0, 1)`` (gt), ``clamp(1 + (d + m/4)/δ, 0, 1)`` (ge) with
        δ = m/2, and for eq the ge ramps of ``d`` and ``−d`` minus 1. Where ``d`` is outside
        its margin and within m/4 (less the units' rounding, in units of δ) of its value,
        they are exactly 0 below and ``1 ± Σ r`` above: error does not pass."""
        quarter = form_add((margin / 4, var(BOS_VAR)), (margin / 4, var(NONBOS_VAR)))
        delta = margin / 2
        out = self.fresh(f"cmp{node.op}")
        if kind == "gt":
            block = ffn.gt_zero(self.linear((1, d.form), (-1, quarter)), out, tolerance=delta)
        elif kind == "ge":
            block = ffn.ge_zero(self.linear((1, d.form), (1, quarter)), out, tolerance=delta)
        else:
            up = ffn.ge_zero(self.linear((1, d.form), (1, quarter)), out, tolerance=delta)
            down = ffn.ge_zero(self.linear((-1, d.form), (1, quarter)), out, tolerance=delta)
            block = FFNBlock(
                up.units + down.units,
                {out: {0: 1.0, 1: -1.0, 2: 1.0, 3: -1.0}},
                Exactness(f"exact when d = 0 or |d| >= {margin:g}"),
                constants={out: -1.0},
            )
        block.label = self.site(label)
        emitted = self.emit(block)
        rounding = emitted.pre(*range(len(block.units)))
        slack = pair(lambda t: margin / 4 - delta * rounding[t])
        return self.decided(emitted, d, margin, slack, emitted.spread(), node, generated)

    def select(self, p: Value, x: Value, y: Value) -> Value:
        """``x`` where ``p = 1``, ``y`` where ``p = 0``.

        A static ``p`` (known per machine) splits the machines between the candidate
        values of x and y (:meth:`choose`); a data ``p`` gates ``y + p·(x − y)`` by big-M
        (M bounds ``|x − y|``)."""
        if p.const is not None:
            mask = tuple(bool(b) for b in p.const)
            # a data selection that already keeps the other value where it must
            if x.same is not None and x.same[0] is y and _covers(x.same[1], mask, False):
                return x
            if y.same is not None and y.same[0] is x and _covers(y.same[1], mask, True):
                return y
            # both keep the same value c where the other one is taken: x + y − c
            if (
                x.same is not None
                and y.same is not None
                and x.same[0] is y.same[0]
                and _covers(x.same[1], mask, False)
                and _covers(y.same[1], mask, True)
            ):
                # x + (y − c): y − c is 0 as computed where x is taken, up to its residue
                merged = self.hull(self.combine((1, x), (1, y), (-1, x.same[0])), [x, y])
                err = pmax(padd(x.err, y.same[2]), padd(y.err, x.same[2]))
                return replace(merged, err=err, leak=max(x.leak, y.leak), ref=max(x.ref, y.ref))
            cands = [
                (v, tuple(a and b for a, b in zip(m, mask, strict=True)))
                for v, m in self.candidates(x)
            ] + [
                (v, tuple(a and not b for a, b in zip(m, mask, strict=True)))
                for v, m in self.candidates(y)
            ]
            return self.choose(cands)
        z = self.combine((1, x), (-1, y))
        if not z.form:
            return y
        if z.const is not None and len(set(z.const)) == 1:
            # x − y is one number c at every machine: y + c·p is linear
            linear = self.hull(self.combine((1, y), (z.const[0], p)), [x, y])
            return replace(linear, leak=max(x.leak, y.leak), ref=max(x.ref, y.ref))
        bound = self.require(z.magnitude, z, "this conditional (big-M gating)")
        p = self.cleaned(p)
        out = self.fresh("select")
        big = bound * (1 + GATE_SLACK)
        block = ffn.conditional_bigm(
            p.form, z.form, Form(), out, bound=big, label=self.site("select")
        )
        gate, owns, tail, (robust,) = self.gate(self.emit(block), [(p, z, bound, big)])
        result = self.hull(self.combine((1, y), (1, gate)), [x, y])
        # y + p·(x − y): x where p = 1, off by its gate's own rounding; y where p = 0
        # (exactly, while the gate is robust)
        selected = padd(x.err, owns[0], tail)
        residue = pair(lambda d: 0.0 if robust[d] else gate.err[d])
        result = replace(
            result,
            err=pmax(selected, padd(y.err, residue)),
            leak=max(x.leak, y.leak) + (0.0 if all(robust) else z.leak),
            ref=max(x.ref, y.ref),
        )
        if p.zero_at is not None:
            result = replace(result, same=(y, p.zero_at, residue))
        return result

    def cleaned(self, p: Value) -> Value:
        """With ``clean`` (softmax), a comparison's bit that is only ``1 ± E_p`` on its high
        side (a saturated ramp's rounding, which a big-M gate multiplies by M) made 0 or 1
        up to its own rounding by ``2·ReLU(p − 1/4) − 2·ReLU(p − 3/4)``
        (:func:`ffn.clean_bit`, one layer more), while ``E_p`` stays below 1/8."""
        if not self.clean or p.err[self.dtype] == 0:
            return p
        emitted = self.emit(ffn.clean_bit(p.form, self.fresh("bit"), label=self.site("bit")))
        own = emitted.spread()
        err = pair(lambda d: own[d] + emitted.defect if p.err[d] < 0.125 else math.inf)
        value = Value(emitted.form, 0.0, 1.0, err=err, zero_at=p.zero_at)
        return self.made(emitted, value)

    def gate(
        self,
        emitted: _Emitted,
        gates: Sequence[tuple[Value, Value, float, float]],
        exclusive: bool = True,
    ) -> tuple[Value, list[Pair], Pair, list[tuple[bool, bool]]]:
        """The output of a block of big-M gate pairs ``ReLU(±z + M'p − M')`` (units 2k,
        2k + 1 for gate k, ``(p, z, M, M')``, |z| ≤ M, M' = M(1 + 2^-6)) writing
        ``Σ p_k z_k``. A pair with ``p = 1`` is z off by ``max(r_1, r_2)`` (and ``M'·E_p``
        for a bit that is only 1 ± E_p): ``owns[k]``; with ``p = 0`` both units are exactly
        0 while ``E_z + r < M' − M`` (``robust[k]``, per float type). ``tail``: the
        rounding of the output sum (at most one pair is nonzero where the conditions are
        ``exclusive`` and every gate is robust) and of its value at BOS. The output's own
        error is every selected pair's (the largest, where ``exclusive``)."""
        owns, robust, sizes = [], [], []
        for k, (p, z, bound, big) in enumerate(gates):
            rounding = emitted.pre(2 * k, 2 * k + 1)
            owns.append(padd(rounding, pscale(big, p.err)))
            robust.append(self.robust(z, psub((big - bound,) * 2, rounding)))
            sizes.append(padd(self.computed(z), rounding, rounding))
        out = emitted.out
        if exclusive:  # one pair ReLU(ẑ + r₁), ReLU(−ẑ + r₂): two terms at most
            out = pair(
                lambda d: (
                    min(out[d], gamma(1, d) * max(m[d] for m in sizes))
                    if all(ok[d] for ok in robust)
                    else out[d]
                )
            )
        tail = padd(out, (emitted.defect, emitted.defect))
        combine = pmax if exclusive else padd
        total = ZERO
        for (_, z, _, _), own in zip(gates, owns, strict=True):
            total = combine(total, padd(z.err, own))
        leaks = [z.leak for _, z, _, _ in gates]
        lows, highs = (
            [min(z.lo, 0.0) for _, z, _, _ in gates],
            [max(z.hi, 0.0) for _, z, _, _ in gates],
        )
        lo, hi = (min(lows), max(highs)) if exclusive else (sum(lows), sum(highs))
        value = Value(
            emitted.form,
            lo,
            hi,
            err=padd(total, tail),
            leak=max(leaks) if exclusive else sum(leaks),
        )
        return self.made(emitted, value), owns, tail, robust

    def select_sum(
        self,
        terms: list[Expr],
        scope: dict[str, Value],
        env: dict[str, int],
        exclusive: bool = False,
    ) -> Value:
        """``Σ terms`` where several are data selections ``if p_i then x_i else y_i``: the
        big-M gates ``p_i·(x_i − y_i)`` (:meth:`select`) are the units of one MLP block
        that writes their sum into one variable, so a sum of s selections (an entry of a
        send's routing, :mod:`crasp_compiler.languages.pcoc.benes`) costs one residual
        dimension, not s. Every unit outputs an exact 0 or its gated value, as apart.
        ``exclusive``: at most one of the gated conditions holds (a promise the
        interpreter checks), so at most one gate adds its error."""
        parts: list[tuple[float, Value]] = []
        others: list[Value] = []  # the terms that are not gated here
        gated: list[tuple[Value, Value, Value, float]] = []  # (p, x, y, M)
        read: list[Value] = []  # every term as the interpreter adds it
        grids: list[tuple[float, Value]] = []  # ... and the values it takes them from
        lo = hi = 0.0
        for term in terms:
            if not _data_select(term):
                value = self.expr(term, scope, env)
                parts.append((1, value))
                others.append(value)
                read.append(value)
                grids.append((1.0, value))
                lo, hi = lo + value.lo, hi + value.hi
                continue
            assert isinstance(term, IfExpr) and isinstance(term.cond, Compare)
            p = self.compare(term.cond, scope, env, selector=True)
            x, y = self.expr(term.then, scope, env), self.expr(term.otherwise, scope, env)
            zero = y is self.uniform(0.0)  # `else 0`, as a compaction has
            z = x if zero else self.combine((1, x), (-1, y))
            if (
                not z.form
                or p.const is not None
                or p.zero_at is not None
                or (z.const is not None and len(set(z.const)) == 1)
            ):
                value = self.select(p, x, y)
                parts.append((1, value))
                others.append(value)
                read.append(value)
                grids.append((1.0, value))
                lo, hi = lo + value.lo, hi + value.hi
                continue
            bound = self.require(z.magnitude, z, "this conditional (big-M gating)")
            gated.append((self.cleaned(p), x, y, bound))
            if not zero:
                parts.append((1, y))
            read.append(Value(Form(), min(x.lo, y.lo), max(x.hi, y.hi), ref=max(x.ref, y.ref)))
            grids += [(1.0, x), (1.0, y)]
            lo, hi = lo + min(x.lo, y.lo), hi + max(x.hi, y.hi)
        if not gated:
            return self.chain([value for _, value in parts])
        units: list[Unit] = []
        coefs: dict[int, float] = {}
        gates = []
        for p, x, y, bound in gated:
            z = x if y is self.uniform(0.0) else self.combine((1, x), (-1, y))
            big = bound * (1 + GATE_SLACK)
            coefs[len(units)], coefs[len(units) + 1] = 1.0, -1.0
            units += ffn.gate_units(p.form, z.form, big)
            gates.append((p, z, bound, big))
        worst = max(bound for _, _, _, bound in gated)
        block = FFNBlock(
            units,
            {self.fresh("select"): coefs},
            Exactness(f"exact for p ∈ {{0, 1}} and |x − y| ≤ {worst:g}"),
            label=self.site("select"),
        )
        gate, owns, tail, robust = self.gate(self.emit(block), gates, exclusive)
        parts.append((1, gate))
        result = self.chain([value for _, value in parts])  # as the sum was written
        if exclusive:  # the terms not gated, every y, and one x − y at most
            fixed = [*others, *(y for _, _, y, _ in gated)]
            lo = sum(v.lo for v in fixed) + min(0.0, *(z.lo for _, z, _, _ in gates))
            hi = sum(v.hi for v in fixed) + max(0.0, *(z.hi for _, z, _, _ in gates))
        if math.isfinite(lo) and math.isfinite(hi):
            result = replace(result, lo=max(result.lo, lo), hi=min(result.hi, hi))
        # a term selected: x off by its gate's rounding; not selected: y (exactly while
        # its gate is robust)
        err = padd(*(v.err for v in others), tail) if others else tail
        selected: list[Pair] = []
        kept: list[Pair] = []
        for (_, x, y, _), (_, z, _, _), own, ok in zip(gated, gates, owns, robust, strict=True):
            selected.append(padd(x.err, own))
            residue = padd(z.err, own)
            kept.append(padd(y.err, (0.0 if ok[0] else residue[0], 0.0 if ok[1] else residue[1])))
        if exclusive:
            err = padd(err, *kept, pmax(*selected))
            leak = max(x.leak for _, x, _, _ in gated) + sum(y.leak for _, _, y, _ in gated)
        else:
            err = padd(err, *(pmax(a, b) for a, b in zip(selected, kept, strict=True)))
            leak = sum(max(x.leak, y.leak) for _, x, y, _ in gated)
        if not all(all(ok) for ok in robust):
            leak += sum(z.leak for _, z, _, _ in gates)
        if exclusive and not others and all(y is self.uniform(0.0) for _, _, y, _ in gated):
            # the interpreter adds one x to exact zeros: no rounding
            ref = max(x.ref for _, x, _, _ in gated)
        else:
            ref = sum(v.ref for v in read) + _arithmetic([(1.0, v) for v in read], self.grid(grids))
        return replace(result, err=err, leak=leak + sum(v.leak for v in others), ref=ref)

    def candidates(self, x: Value) -> tuple[tuple[Value, tuple[bool, ...]], ...]:
        return x.choices if x.choices is not None else ((x, (True,) * self.n),)

    def hull(self, result: Value, values: Sequence[Value]) -> Value:
        """``result`` with the interval that covers ``values`` (it takes one of them at
        every machine)."""
        lo, hi = min(v.lo for v in values), max(v.hi for v in values)
        unbounded: frozenset[str] = frozenset()
        if not (math.isfinite(lo) and math.isfinite(hi)):
            unbounded = frozenset().union(*(v.unbounded for v in values))
        return replace(result, lo=lo, hi=hi, const=None, unbounded=unbounded)

    def choose(self, cands: Sequence[tuple[Value, tuple[bool, ...]]]) -> Value:
        """The value that is candidate v at the machines of its mask (masks partition the
        machines): the most common candidate plus, for every other one, a big-M gate
        ``onehot-mask · (v − base)``. All gates read the candidates only, so they share
        one MLP layer."""
        merged: dict[frozenset[tuple[str, float]], tuple[Value, list[bool]]] = {}
        for value, mask in cands:
            if not any(mask):
                continue
            key = frozenset(value.form.items())
            if key in merged:
                old = merged[key][1]
                merged[key] = (merged[key][0], [a or b for a, b in zip(old, mask, strict=True)])
            else:
                merged[key] = (value, list(mask))
        options = [(value, tuple(mask)) for value, mask in merged.values()]
        if len(options) == 1:
            return options[0][0]
        # every machine takes one candidate: its errors (the gate's rounding added)
        values = [value for value, _ in options]
        leak, ref = max(v.leak for v in values), max(v.ref for v in values)
        consts = [(value.const, mask) for value, mask in options if value.const is not None]
        if len(consts) == len(options):
            chosen = [0.0] * self.n
            for const, mask in consts:
                for i, taken in enumerate(mask):
                    if taken:
                        chosen[i] = const[i]
            return replace(self.constant(chosen), err=pmax(*(v.err for v in values)), ref=ref)
        base = max(options, key=lambda option: sum(option[1]))[0]
        terms: list[tuple[float, Value]] = [(1.0, base)]
        err, residues = base.err, ZERO
        for value, mask in options:
            if value is base:
                continue
            z = self.combine((1, value), (-1, base))
            if z.const is not None:  # the candidate is base plus known numbers: linear
                terms.append(
                    (
                        1.0,
                        self.constant(
                            [c if m else 0.0 for c, m in zip(z.const, mask, strict=True)]
                        ),
                    )
                )
                err = pmax(err, value.err)
                continue
            bound = self.require(z.magnitude, z, "this per-machine selection (big-M gating)")
            out = self.fresh("choose")
            big = bound * (1 + GATE_SLACK)
            block = ffn.conditional_bigm(
                self.positional([1.0 if m else 0.0 for m in mask]),
                z.form,
                Form(),
                out,
                bound=big,
                label=self.site("per-machine select"),
            )
            emitted = self.emit(block)
            # exactly 0 off its machines (its support) while robust
            rounding = emitted.pre(0, 1)
            robust = self.robust(z, psub((big - bound,) * 2, rounding))
            own = padd(rounding, emitted.out, (emitted.defect, emitted.defect))
            machines = frozenset(i for i, m in enumerate(mask) if m)
            gate = Value(
                emitted.form, min(z.lo, 0.0), max(z.hi, 0.0), err=padd(z.err, own), leak=z.leak
            )
            gate = self.made(emitted, gate, machines if all(robust) else None)
            terms.append((1.0, gate))
            err = pmax(err, padd(value.err, own))
            if not all(robust):  # off its machines, off by up to its own error
                residue = (0.0 if robust[0] else gate.err[0], 0.0 if robust[1] else gate.err[1])
                residues, leak = padd(residues, residue), leak + z.leak
        result = self.hull(self.combine(*terms), values)
        return replace(result, choices=tuple(options), err=padd(err, residues), leak=leak, ref=ref)

    def site(self, what: str) -> str:
        """A label for a block computing ``what`` in the current statement: ``what`` and
        the statement's source text (cut to one line)."""
        span, source = self.span, self.program.source
        if span is None or not source:
            return what
        lines = source.splitlines()
        if not 0 < span.line <= len(lines):
            return what
        line = lines[span.line - 1]
        end = span.end_column - 1 if span.end_line == span.line else len(line)
        text = " ".join(line[span.column - 1 : end].split())
        if len(text) > 60:
            text = text[:59] + "…"
        return f"{what} in `{text}`" if text else what

    # -------------------------------------------------------------- statements

    def statements(
        self, stmts: Sequence[Stmt], scope: dict[str, Value], env: dict[str, int]
    ) -> None:
        for stmt in stmts:
            self.span = stmt.span
            if isinstance(stmt, Assign):
                value = self.expr(stmt.expr, scope, env)
                self.partial.pop(stmt.target, None)
                scope[stmt.target] = value
            elif isinstance(stmt, If):
                self.branch(stmt, scope, env)
            else:  # pragma: no cover - the IR has no other statements
                raise self.error(f"unknown statement {stmt!r}")

    def constructed(self, slot: Slot, value: Value, start: dict[str, Value]) -> Value:
        """The value a compiler-made slot (:mod:`~crasp_compiler.languages.pcoc.benes`)
        holds after a round that assigned it, with the interval its construction proves:
        one of the values of the slot it carries at the start of the round, or 0 (a
        tuple's payload); within its bound (a 0/1 flag or bit)."""
        if slot.carries is not None:
            carried = start[slot.carries]
            lo, hi = min(carried.lo, 0.0), max(carried.hi, 0.0)
            unbounded = carried.unbounded
        else:
            assert slot.bound is not None, f"the compiler-made slot {slot.name!r} has no bound"
            lo, hi, unbounded = -slot.bound, slot.bound, frozenset()
        lo, hi = max(value.lo, lo), min(value.hi, hi)
        if math.isfinite(lo) and math.isfinite(hi):
            unbounded = frozenset()
        return replace(value, lo=lo, hi=hi, unbounded=unbounded | value.unbounded)

    def branch(self, stmt: If, scope: dict[str, Value], env: dict[str, int]) -> None:
        if isinstance(stmt.cond, Compare):
            p = self.compare(stmt.cond, scope, env, selector=True)
        else:
            bits = self.static(stmt.cond, env)
            if all(bits) or not any(bits):
                self.statements(stmt.then if all(bits) else stmt.otherwise, scope, env)
                return
            p = self.constant([1.0 if b else 0.0 for b in bits])
        then_scope, else_scope = dict(scope), dict(scope)
        saved, self.bases = self.bases, {id(v) for v in scope.values()}
        try:
            self.within(p, True, lambda: self.statements(stmt.then, then_scope, env))
            self.within(p, False, lambda: self.statements(stmt.otherwise, else_scope, env))
        finally:
            self.bases = saved
        self.span = stmt.span
        for name in dict.fromkeys([*then_scope, *else_scope]):
            if name in then_scope and name in else_scope:
                a, b = then_scope[name], else_scope[name]
                scope[name] = a if a is b else self.select(p, a, b)
            else:  # a temporary made in one branch only
                scope.pop(name, None)
                self.partial[name] = stmt.span

    # -------------------------------------------------------------- rounds

    def receive(self, rnd: Round, env: dict[str, int], scope: dict[str, Value]) -> dict[str, Value]:
        """The received values of a round, read from the slots as they stand at its start."""
        received: dict[str, Value] = {}
        groups: dict[tuple[int | None, ...], dict[str, list[Receive]]] = {}
        for rec in rnd.receives:
            self.span = rec.span
            if rec.slot not in self.slots:
                raise self.error(f"`recv {rec.slot}`: {rec.slot!r} is not a slot")
            if rec.target in self.slots:
                raise self.error(f"the received name {rec.target!r} is a slot; use a new name")
            sources = tuple(s if 0 <= s < self.n else None for s in self.static(rec.source, env))
            value, default = scope[rec.slot], float(rec.default)
            if value.const is not None or all(s is None for s in sources):
                known = value.const or (0.0,) * self.n
                received[rec.target] = self.constant(
                    [default if s is None else known[s] for s in sources]
                )
                if value.const is not None and any(s is not None for s in sources):
                    received[rec.target] = replace(
                        received[rec.target], err=value.err, ref=value.ref
                    )
            elif all(s == i for i, s in enumerate(sources)):
                received[rec.target] = value
            else:
                groups.setdefault(sources, {}).setdefault(rec.slot, []).append(rec)
        heads: list[HeadBlock] = []
        routed = []
        for sources, slots in groups.items():
            outs = {slot: self.fresh(f"recv:{slot}") for slot in slots}
            if self.mode == "softmax":
                for slot in slots:
                    self.span = slots[slot][0].span
                    self.require(scope[slot].width, scope[slot], "routing with softmax attention")
            positions = [0] + [0 if s is None else s + 1 for s in sources]
            for k in range(self.n + 1):  # the query reads every position's one-hot
                self.feature(k)
            values = {outs[slot]: scope[slot].form for slot in slots}
            span_range = max(scope[slot].width for slot in slots)
            head = attention.route(
                positions,
                values,
                n=self.n,
                weighting=self.mode,
                scale=self.temperature if self.mode == "softmax" else None,
                value_range=span_range if math.isfinite(span_range) and span_range > 0 else 1.0,
                label=f"round {self.round_number}: recv {', '.join(slots)}",
            )
            self.builder.add(head)
            # the BOS row's source is BOS (positions[0] = 0): in the average-hard model it
            # reads its own slot values, which are 0 there
            self.at_bos.add(head, reads_itself=True)
            heads.append(head)
            missing = [i for i, s in enumerate(sources) if s is None]
            for slot, recs in slots.items():
                source = scope[slot]
                err, leak = self.routed(outs[slot], source)
                for rec in recs:
                    default = float(rec.default)
                    fill = self.positional([default if s is None else 0.0 for s in sources])
                    lo, hi = source.lo, source.hi
                    if missing:
                        lo, hi = min(lo, default), max(hi, default)
                    received[rec.target] = Value(
                        form_add((1, var(outs[slot])), (1, fill)),
                        lo,
                        hi,
                        leak=leak,
                        err=err,
                        ref=source.ref,
                        unbounded=source.unbounded,
                    )
                routed.append(slot)
        self.rounds.append(RoundReport(self.round_number, heads, routed, len(rnd.receives)))
        return received

    def routed(self, name: str, source: Value) -> tuple[Pair, float]:
        """Record the variable ``name`` a routing head writes from ``source``'s form; its
        error and softmax leak. Average-hard: the source's computed form, copied exactly.
        Softmax: weights ``α_s(1 + θ_s)``, |θ_s| ≤ θ = γ_{n+12}, summed over n + 1 values
        (``γ_{n+1}``), around the source's weight ``≥ 1 − n·e^{−T}`` (the leak ``n·R``)."""
        reading = self.floats.read(source.form)
        err = padd(source.err, reading.rounding)
        largest = pmax(reading.mag, reading.bos)
        if self.mode == "hard":
            exact = reading.exact
            err = pair(lambda d: 0.0 if exact[d] else err[d])
            self.floats.define(name, Var(largest, reading.bos, exact, reading.grid))
            return err, 0.0
        leak = source.leak + self.n * source.width

        def softmax(d: int) -> float:
            theta = gamma(self.n + SOFTMAX_WEIGHT_ROUNDINGS, d)
            spread = theta + gamma(self.n + 1, d) * (1 + theta)
            return (1 + theta) * err[d] + times(spread, largest[d])

        err = pair(softmax)
        mag = pair(lambda d: largest[d] + err[d] + times(self.n * source.width, self.decay))
        self.floats.define(name, Var(mag, mag, (False, False), None))
        return err, leak

    def lower(self) -> dict[str, Value]:
        program = self.program
        self.slots: dict[str, float | None] = {s.name: s.bound for s in program.slots}
        scope: dict[str, Value] = {}
        for slot in program.slots:
            if slot.bound is not None and (not math.isfinite(slot.bound) or slot.bound < 0):
                raise self.error(f"slot {slot.name!r}: the bound must be a number >= 0", slot.span)
            if slot.name in program.inputs:
                form = self.builder.numeric(slot.name)
                self.at_bos.set(slot.name, 0.0)  # numeric inputs are 0 at BOS
                bound = INF if slot.bound is None else float(slot.bound)
                self.floats.input(slot.name, bound)
                # float64 numbers: exact in float64, rounded once to float32
                cast = times(UNIT[1], bound) if bound < FLOAT32_MAX else INF
                unbounded = frozenset([slot.name]) if slot.bound is None else frozenset()
                scope[slot.name] = Value(form, -bound, bound, err=(0.0, cast), unbounded=unbounded)
            else:
                scope[slot.name] = self.constant([slot.init] * self.n)
        made = {slot.name: slot for slot in program.slots if slot.made}
        for number, (rnd, env) in enumerate(unroll(program, self.n)):
            self.round_number = number
            self.span = rnd.span
            received = self.receive(rnd, env, scope)
            local = {**scope, **received}
            self.partial = {}
            self.materialized = {}
            self.statements(rnd.body, local, env)
            start = scope
            scope = {name: self.shorten(local[name]) for name in scope}
            for name, slot in made.items():
                if scope[name] is not start[name]:
                    scope[name] = self.constructed(slot, scope[name], start)
        self.prune([scope[name].form for name in program.outputs])
        return scope

    def prune(self, outputs: Sequence[Form]) -> None:
        """Keep only the blocks the outputs depend on (values computed and then not
        used: temporaries never read, selections superseded by a flatter one), and only
        the positional features they read; every input channel stays."""
        needed = {name for form in outputs for name in form}
        kept: list[Block] = []
        for block in reversed(self.builder.blocks):
            if any(name in needed for name in block.writes):
                kept.append(block)
                needed |= block.reads
        old = self.builder
        self.builder = Builder([TOKEN])
        for name in old.features:
            if name in needed:
                self.builder.feature(name)
        for name in old.numeric_inputs:
            self.builder.numeric(name)
        for block in reversed(kept):
            self.builder.add(block)
        alive = {id(block) for block in kept}
        for report in self.rounds:
            report.heads = [head for head in report.heads if id(head) in alive]


@dataclass
class Lowered:
    """The result of :func:`lower_pcoc`: the builder, the final value of every slot, what
    every round compiled to, and every variable's value at BOS in the average-hard model."""

    builder: Builder
    slots: dict[str, Value]
    rounds: list[RoundReport]
    comparisons: list[Comparison] = field(default_factory=list)
    at_bos: BosValues = field(default_factory=BosValues)
    bounds: dict[str, Bound] = field(default_factory=dict)


def lower_pcoc(
    program: Program,
    n: int,
    mode: str = "hard",
    temperature: float | None = None,
    dtype: str = "float64",
    clean: bool = False,
) -> Lowered:
    """Lower ``program`` for ``n`` machines to blocks on a :class:`Builder`.

    ``mode="hard"``: routing heads with average-hard attention; ``"softmax"``: softmax
    heads with scale ``temperature``. Every value carries its float errors
    (:mod:`crasp_compiler.languages.pcoc.rounding`); ``bounds`` holds each output's.
    Raises :class:`CraspError` for programs that need a bound or a margin they do not
    declare, and for a data comparison that ``dtype`` cannot decide exactly (in softmax
    mode: at any temperature). ``clean`` (softmax): a comparison's bit is made exact
    before a big-M gate reads it, one layer more."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, not {n!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if mode == "softmax" and (temperature is None or not temperature > 0):
        raise ValueError("softmax mode needs a temperature > 0")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, not {dtype!r}")
    lowerer = _Lowerer(program, n, mode, temperature, DTYPES.index(dtype), clean)
    slots = lowerer.lower()
    bounds = {}
    for name in program.outputs:
        value = slots[name]
        reading = lowerer.floats.read(value.form)  # the readout row
        bounds[name] = Bound(padd(value.err, reading.rounding), value.ref, value.leak)
    return Lowered(
        lowerer.builder, slots, lowerer.rounds, lowerer.comparisons, lowerer.at_bos, bounds
    )


__all__ = [
    "MODES",
    "TOKEN",
    "Bound",
    "Comparison",
    "Lowered",
    "RoundReport",
    "Unresolved",
    "Value",
    "lower_pcoc",
    "unresolved",
]
