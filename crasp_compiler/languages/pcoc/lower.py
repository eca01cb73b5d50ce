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
  ``Σ v_i · onehot:(i+1)``; data comparisons are :func:`ffn.gt_zero` / ``ge_zero`` /
  ``eq_zero`` with the declared margin as tolerance (Heaviside units for margin 0);
  conditionals (on a static condition that differs between machines, or on a data
  comparison) are ``y + p·(x − y)`` by :func:`ffn.conditional_bigm` with M the bound of
  ``|x − y|``; ``y + c·p`` (linear) when ``x − y`` is one number c.
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
  ``check_promises``), never assumed: only slots the compiler makes itself (Beneš
  routing) get the interval their construction proves (:meth:`_Lowerer.constructed`).
  Big-M gating needs a finite interval, else a :class:`CraspError` names the input slots
  that need ``bound``.
- **Softmax error analysis.** Every value carries ``leak``: in the softmax model with
  temperature T, ``|value − hard value| ≤ leak · e^{−T}`` at every position (BOS
  included). A routed value gains ``n · R`` (R the width of its range over the
  positions, the sink's 0 included: each row puts weight ≤ n·e^{−T} off its source);
  linear maps scale it by ``Σ|c|``; ``min``/``max``/``abs``/``relu``/``clamp`` are
  1-Lipschitz; a comparison with margin m is (1/m)-Lipschitz in ``left − right`` (the
  ramp clamps to [0, 1]); the gate ``y + g(p, z)`` moves by at most
  ``Δy + Δz + M·Δp`` for p in (−∞, 1]. ``noise`` is the same analysis for float
  rounding, in units of the dtype's unit roundoff: every operation adds about twice the
  magnitude it handles (an estimate, first order).
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


def _times(a: float, b: float) -> float:
    """``a·b`` with ``∞·0 = 0`` (an infinite Lipschitz constant times no error)."""
    return 0.0 if a == 0 or b == 0 else a * b


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


def _flatten(fn: str, node: Expr) -> list[Expr]:
    """The arguments of nested ``min`` (or ``max``) calls, in order."""
    if isinstance(node, Call) and node.fn == fn:
        return [leaf for arg in node.args for leaf in _flatten(fn, arg)]
    return [node]


@dataclass(frozen=True)
class Value:
    """A data value of every machine.

    ``form``: its residual form, 0 at BOS in the average-hard model. ``lo``/``hi``: an
    interval holding at every machine, whichever branch it takes (±inf where unknown;
    ``unbounded`` names the input slots whose missing bound makes it so). ``leak``/``noise``: softmax and rounding
    coefficients (module docstring). ``const``: the value of every machine when it is
    known at compile time. ``choices``: for a value selected per machine by static
    conditions, the candidate values and the machines that take each (a later static
    selection builds on the candidates, so nested static ``if``s cost one gating layer).
    ``zero_at``: machines where a selector is exactly 0; ``same``: a value this one equals
    on the given machines (a data selection that keeps its ``else`` value there)."""

    form: Form
    lo: float
    hi: float
    leak: float = 0.0
    noise: float = 0.0
    const: tuple[float, ...] | None = None
    unbounded: frozenset[str] = frozenset()
    choices: tuple[tuple[Value, tuple[bool, ...]], ...] | None = None
    zero_at: tuple[bool, ...] | None = None
    same: tuple[Value, tuple[bool, ...]] | None = None

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
    """A data comparison as compiled: its margin and the rounding estimate ``noise`` (in
    units of the float type's unit roundoff) and bound ``magnitude`` of ``left − right``."""

    node: Compare
    span: Span | None
    margin: float
    noise: float
    magnitude: float


@dataclass
class RoundReport:
    """What one round compiled to: its heads (one per routed source pattern)."""

    number: int
    heads: list[HeadBlock] = field(default_factory=list)
    routed: list[str] = field(default_factory=list)
    receives: int = 0


class _Lowerer:
    def __init__(self, program: Program, n: int, mode: str, temperature: float | None) -> None:
        self.program = program
        self.n = n
        self.mode = mode
        self.temperature = temperature
        self.builder = Builder([TOKEN])
        # every variable's value at BOS, from the blocks' evaluate (BOS reads only itself)
        self.at_bos = BosValues({BOS_VAR: 1.0, NONBOS_VAR: 0.0, token_var(TOKEN): 0.0})
        self.span: Span | None = None
        self.rounds: list[RoundReport] = []
        self.comparisons: list[Comparison] = []
        self.compared: dict[tuple, tuple[Value, Compare, tuple[Value | None, ...]]] = {}
        self.constants: dict[tuple[float, ...], Value] = {}
        self.uniforms: dict[float, Value] = {}
        self.names: dict[int, tuple[Compare, list[str]]] = {}  # id(node) -> names it reads
        self.partial: dict[str, Span | None] = {}
        self.round_number = 0
        # the machines where the statements being lowered take effect (per-machine branches)
        self.context: tuple[bool, ...] = (True,) * n
        # the values that stood before the innermost per-machine branch (by identity)
        self.bases: set[int] = set()

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

    def mlp(self, block: FFNBlock) -> Form:
        """Add an MLP block with one output; its form, corrected to 0 at BOS."""
        (name,) = block.writes
        self.builder.add(block)
        at_bos = self.at_bos.add(block)[name]
        return form_add((1, var(name)), (-at_bos, var(BOS_VAR)))

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
        """``Σ c · value``: a form (no block)."""
        form = self.linear(*((c, v.form) for c, v in terms))
        lo = sum(c * (v.lo if c > 0 else v.hi) for c, v in terms if c)
        hi = sum(c * (v.hi if c > 0 else v.lo) for c, v in terms if c)
        const = None
        if all(v.const is not None for _, v in terms):
            const = tuple(
                sum(c * v.const[i] for c, v in terms if c)  # type: ignore[index]
                for i in range(self.n)
            )
            lo, hi = min(const), max(const)
        return Value(
            form,
            lo,
            hi,
            leak=sum(_times(abs(c), v.leak) for c, v in terms),
            noise=sum(abs(c) * (v.noise + 2 * v.magnitude) for c, v in terms if c),
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
        right (the same interval, constant, leak, and noise with each partial sum's
        magnitude counted), with the form built once: O(total size), not quadratic in
        the number of terms."""
        if len(values) == 1:
            return values[0]
        form = self.linear(*((1, v.form) for v in values))
        lo = hi = noise = leak = 0.0
        const: list[float] | None = [0.0] * self.n
        for k, v in enumerate(values):
            if k >= 2:  # the partial sum of the first k terms is an operand
                noise += 2 * max(abs(lo), abs(hi))
            noise += v.noise + 2 * v.magnitude
            leak += _times(1.0, v.leak)
            lo, hi = lo + v.lo, hi + v.hi
            if const is not None and v.const is not None:
                const = [a + b for a, b in zip(const, v.const, strict=True)]
                if k >= 1:
                    lo, hi = min(const), max(const)
            else:
                const = None
        return Value(
            form,
            lo,
            hi,
            leak=leak,
            noise=noise,
            const=None if const is None else tuple(const),
            unbounded=_unbounded(values, lo, hi),
        )

    def nonlinear(
        self,
        block: FFNBlock,
        inputs: Sequence[tuple[float, Value]],
        lo: float,
        hi: float,
        magnitude: float,
        unbounded: frozenset[str] = frozenset(),
    ) -> Value:
        """The output of an MLP block whose output moves by at most ``Σ L · Δinput``
        (``inputs``: (Lipschitz constant, value)); it handles numbers up to ``magnitude``."""
        form = self.mlp(block)
        leak = sum(_times(lip, v.leak) for lip, v in inputs)
        noise = sum(_times(lip, v.noise) for lip, v in inputs) + 2 * magnitude
        if math.isfinite(lo) and math.isfinite(hi):
            unbounded = frozenset()
        return Value(form, lo, hi, leak=leak, noise=noise, unbounded=unbounded)

    # -------------------------------------------------------------- expressions

    def expr(self, node: Expr, scope: dict[str, Value], env: dict[str, int]) -> Value:
        match node:
            case Num(value):
                return self.uniform(value)
            case Read(name, span):
                return self.read(name, scope, span)
            case Static(expr):
                return self.constant(self.static(expr, env))
            case Add():
                terms = _flatten_add(node)
                if sum(map(_data_select, terms)) > 1:
                    return self.select_sum(terms, scope, env)
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
            return self.nonlinear(block, [(1.0, x)], lo, hi, x.magnitude, x.unbounded)
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
            magnitude = max(x.magnitude, abs(low), abs(high))
            return self.nonlinear(block, [(1.0, x)], lo, hi, magnitude)
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
            # min(x, y) = x − ReLU(x − y), max(x, y) = x + ReLU(y − x); the ReLU's input
            # pushed down by K ≥ |z| on the machines outside makes it 0 there: x
            shift = self.constant([z.magnitude if o else 0.0 for o in outside])
            shifted = self.combine((1, z), (-1, shift))
            out = self.fresh(f"{fn}-in-branch")
            block = ffn.relu(shifted.form, out, label=self.site(f"{fn} in a branch"))
            relu = self.nonlinear(block, [(1.0, shifted)], 0.0, max(z.hi, 0.0), shifted.magnitude)
            result = self.combine((1, x), (-1 if fn == "min" else 1, relu))
            if fn == "min":
                lo, hi = min(x.lo, y.lo), x.hi
            else:
                lo, hi = x.lo, max(x.hi, y.hi)
            return replace(self.hull(result, [x, y]), lo=lo, hi=hi, same=(x, outside))
        out = self.fresh(fn)
        make = ffn.minimum if fn == "min" else ffn.maximum
        block = make(x.form, y.form, out, label=self.site(fn))
        if fn == "min":
            lo, hi = min(x.lo, y.lo), min(x.hi, y.hi)
        else:
            lo, hi = max(x.lo, y.lo), max(x.hi, y.hi)
        form = self.mlp(block)
        unbounded = (
            frozenset() if math.isfinite(lo) and math.isfinite(hi) else x.unbounded | y.unbounded
        )
        # |Δmin| ≤ max(Δx, Δy)
        return Value(
            form,
            lo,
            hi,
            leak=max(x.leak, y.leak),
            noise=max(x.noise, y.noise) + 2 * (x.magnitude + y.magnitude),
            unbounded=unbounded,
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
            test = {
                ">": lambda a, b: a > b,
                ">=": lambda a, b: a >= b,
                "<": lambda a, b: a < b,
                "<=": lambda a, b: a <= b,
                "==": lambda a, b: a == b,
                "!=": lambda a, b: a != b,
            }[node.op]
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
        self.comparisons.append(Comparison(node, self.span, margin, d.noise, d.magnitude))
        outside = [not m for m in self.context]
        folded = selector and any(outside) and node.op != "!=" and math.isfinite(d.magnitude)
        if folded:
            # inside a per-machine branch: push d at least m past the threshold on the
            # machines outside it, so the selector is exactly 0 there
            big = d.magnitude + max(margin, 1.0)
            shift = self.constant([big if o else 0.0 for o in outside])
            d = self.combine((1, d), (1 if kind == "eq" else -1, shift))
        label = f"{node.op} margin {margin:g}"
        if self.mode == "hard":
            p = self.step(kind, d, margin, label)
        else:
            make = {"gt": ffn.gt_zero, "ge": ffn.ge_zero, "eq": ffn.eq_zero}[kind]
            out = self.fresh(f"cmp{node.op}")
            block = make(d.form, out, tolerance=margin, label=self.site(label))
            # the ramp clamp(d/m, 0, 1) is (1/m)-Lipschitz; a Heaviside step (m = 0) is not
            lipschitz = 1 / margin if margin > 0 else INF
            p = self.nonlinear(
                block, [(lipschitz, d)], 0.0, 1.0, _times(lipschitz, d.magnitude) + 1
            )
        if node.op == "!=":
            p = self.combine((1, self.uniform(1.0)), (-1, p))
        if folded:
            p = replace(p, zero_at=tuple(outside))
        return p

    def step(self, kind: str, d: Value, margin: float, label: str) -> Value:
        """A hard-mode comparison: Heaviside units at the middle of the margin,
        ``1[d > m/2]`` (gt), ``1[d ≥ −m/2]`` (ge), ``1[d ≥ −m/2] + 1[−d ≥ −m/2] − 1``
        (eq). Where ``d`` is outside its margin they give exactly 0 or 1 as long as ``d``
        is computed to within m/2, which the compiler checks against the rounding of the
        float type (:mod:`crasp_compiler.languages.pcoc.compile`); so the result carries no error."""
        half = self.uniform(margin / 2)

        def unit(make, z: Form) -> Value:
            out = self.fresh("cmp")
            return Value(self.mlp(make(z, out, tolerance=0.0, label=self.site(label))), 0, 1)

        # only forms are needed (a step's result is exactly 0 or 1, with no error)
        if kind == "gt":
            return unit(ffn.gt_zero, self.linear((1, d.form), (-1, half.form)))
        low = self.linear((1, d.form), (1, half.form))
        if kind == "ge":
            return unit(ffn.ge_zero, low)
        # both Heaviside units write one variable (one residual dimension): H(lo) + H(hi)
        high = self.linear((-1, d.form), (1, half.form))
        out = self.fresh("cmp")
        block = FFNBlock(
            [Unit(low, 0.0, "heaviside"), Unit(high, 0.0, "heaviside")],
            {out: {0: 1.0, 1: 1.0}},
            Exactness("exact"),
            label=self.site(label),
        )
        return Value(self.linear((1, self.mlp(block)), (-1, self.uniform(1.0).form)), 0.0, 1.0)

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
                return self.hull(self.combine((1, x), (1, y), (-1, x.same[0])), [x, y])
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
            return self.hull(self.combine((1, y), (z.const[0], p)), [x, y])
        bound = self.require(z.magnitude, z, "this conditional (big-M gating)")
        out = self.fresh("select")
        block = ffn.conditional_bigm(
            p.form, z.form, Form(), out, bound=bound, label=self.site("select")
        )
        # g(p, z) moves by ≤ Δz + M·Δp for p ≤ 1; the output is y + g
        gate = self.nonlinear(
            block, [(1.0, z), (bound, p)], min(z.lo, 0.0), max(z.hi, 0.0), 2 * bound
        )
        result = self.hull(self.combine((1, y), (1, gate)), [x, y])
        if p.zero_at is not None:
            result = replace(result, same=(y, p.zero_at))
        return result

    def select_sum(self, terms: list[Expr], scope: dict[str, Value], env: dict[str, int]) -> Value:
        """``Σ terms`` where several are data selections ``if p_i then x_i else y_i``: the
        big-M gates ``p_i·(x_i − y_i)`` (:meth:`select`) are the units of one MLP block
        that writes their sum into one variable, so a sum of s selections (the slot of a
        compaction, :mod:`crasp_compiler.languages.pcoc.benes`) costs one residual
        dimension, not s. Every unit outputs an exact 0 or its gated value, as apart."""
        parts: list[tuple[float, Value]] = []
        gates: list[tuple[Value, Value, float]] = []  # (p, x − y, M)
        lo = hi = 0.0
        for term in terms:
            if not _data_select(term):
                value = self.expr(term, scope, env)
                parts.append((1, value))
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
                lo, hi = lo + value.lo, hi + value.hi
                continue
            bound = self.require(z.magnitude, z, "this conditional (big-M gating)")
            gates.append((p, z, bound))
            if not zero:
                parts.append((1, y))
            lo, hi = lo + min(x.lo, y.lo), hi + max(x.hi, y.hi)
        if gates:
            units: list[Unit] = []
            coefs: dict[int, float] = {}
            for p, z, bound in gates:
                coefs[len(units)], coefs[len(units) + 1] = 1.0, -1.0
                units += ffn.gate_units(p.form, z.form, bound)
            worst = max(bound for _, _, bound in gates)
            block = FFNBlock(
                units,
                {self.fresh("select"): coefs},
                Exactness(f"exact for p ∈ {{0, 1}} and |x − y| ≤ {worst:g}"),
                label=self.site("select"),
            )
            inputs = [pair for p, z, bound in gates for pair in ((1.0, z), (bound, p))]
            gate_lo = sum(min(z.lo, 0.0) for _, z, _ in gates)
            gate_hi = sum(max(z.hi, 0.0) for _, z, _ in gates)
            magnitude = sum(2 * bound for _, _, bound in gates)
            parts.append((1, self.nonlinear(block, inputs, gate_lo, gate_hi, magnitude)))
        result = self.chain([value for _, value in parts])  # as the sum was written
        if math.isfinite(lo) and math.isfinite(hi):
            result = replace(result, lo=max(result.lo, lo), hi=min(result.hi, hi))
        return result

    def candidates(self, x: Value) -> tuple[tuple[Value, tuple[bool, ...]], ...]:
        return x.choices if x.choices is not None else ((x, (True,) * self.n),)

    def hull(self, result: Value, values: Sequence[Value]) -> Value:
        """``result`` with the interval that covers ``values`` (it takes one of them at
        every machine)."""
        lo, hi = min(v.lo for v in values), max(v.hi for v in values)
        unbounded = frozenset()
        if not (math.isfinite(lo) and math.isfinite(hi)):
            unbounded = frozenset().union(*(v.unbounded for v in values))
        return replace(result, lo=lo, hi=hi, const=None, unbounded=unbounded)

    def choose(self, cands: Sequence[tuple[Value, tuple[bool, ...]]]) -> Value:
        """The value that is candidate v at the machines of its mask (masks partition the
        machines): the most common candidate plus, for every other one, a big-M gate
        ``onehot-mask · (v − base)``. All gates read the candidates only, so they share
        one MLP layer."""
        merged: dict[frozenset, tuple[Value, list[bool]]] = {}
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
        if all(value.const is not None for value, _ in options):
            out = [0.0] * self.n
            for value, mask in options:
                for i, taken in enumerate(mask):
                    if taken:
                        out[i] = value.const[i]  # type: ignore[index]
            return self.constant(out)
        base = max(options, key=lambda option: sum(option[1]))[0]
        terms: list[tuple[float, Value]] = [(1.0, base)]
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
                continue
            bound = self.require(z.magnitude, z, "this per-machine selection (big-M gating)")
            out = self.fresh("choose")
            gate = ffn.conditional_bigm(
                self.positional([1.0 if m else 0.0 for m in mask]),
                z.form,
                Form(),
                out,
                bound=bound,
                label=self.site("per-machine select"),
            )
            lo, hi = min(z.lo, 0.0), max(z.hi, 0.0)
            terms.append((1.0, self.nonlinear(gate, [(1.0, z)], lo, hi, 2 * bound)))
        result = self.hull(self.combine(*terms), [value for value, _ in options])
        return replace(result, choices=tuple(options))

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
                for rec in recs:
                    default = float(rec.default)
                    fill = self.positional([default if s is None else 0.0 for s in sources])
                    lo, hi = source.lo, source.hi
                    if missing:
                        lo, hi = min(lo, default), max(hi, default)
                    softmax = self.mode == "softmax"
                    received[rec.target] = Value(
                        form_add((1, var(outs[slot])), (1, fill)),
                        lo,
                        hi,
                        leak=source.leak + self.n * source.width,
                        noise=source.noise + (2 + (self.n + 1) * softmax) * source.magnitude,
                        unbounded=source.unbounded,
                    )
                routed.append(slot)
        self.rounds.append(RoundReport(self.round_number, heads, routed, len(rnd.receives)))
        return received

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
                if slot.bound is None:
                    scope[slot.name] = Value(form, -INF, INF, unbounded=frozenset([slot.name]))
                else:
                    scope[slot.name] = Value(form, -slot.bound, slot.bound)
            else:
                scope[slot.name] = self.constant([slot.init] * self.n)
        made = {slot.name: slot for slot in program.slots if slot.made}
        for number, (rnd, env) in enumerate(unroll(program, self.n)):
            self.round_number = number
            self.span = rnd.span
            received = self.receive(rnd, env, scope)
            local = {**scope, **received}
            self.partial = {}
            self.statements(rnd.body, local, env)
            start, scope = scope, {name: local[name] for name in scope}
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


def lower_pcoc(
    program: Program, n: int, mode: str = "hard", temperature: float | None = None
) -> Lowered:
    """Lower ``program`` for ``n`` machines to blocks on a :class:`Builder`.

    ``mode="hard"``: routing heads with average-hard attention; ``"softmax"``: softmax
    heads with scale ``temperature``. Raises :class:`CraspError` for programs that need a
    bound or a margin they do not declare."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, not {n!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if mode == "softmax" and (temperature is None or not temperature > 0):
        raise ValueError("softmax mode needs a temperature > 0")
    lowerer = _Lowerer(program, n, mode, temperature)
    slots = lowerer.lower()
    return Lowered(lowerer.builder, slots, lowerer.rounds, lowerer.comparisons, lowerer.at_bos)


__all__ = ["MODES", "TOKEN", "Comparison", "Lowered", "RoundReport", "Value", "lower_pcoc"]
