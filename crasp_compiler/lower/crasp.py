"""Lower a checked C-RASP program to a circuit of cookbook blocks.

Representation (numerical conventions of DESIGN.md):

- A Boolean is a form with value in {0, 1} that is 0 at BOS. Token tests, ``true``
  (``nonbos``), periodic predicates (positional features) and ``not`` (``nonbos − x``)
  are linear; each maximal ``and``/``or``/``not`` formula becomes one truth-table FFN.
- A count c at position t is a form with value ``c/(t+1)``: a sum of attention outputs
  (``#``), gated offset lookups (local ``#``), FFN outputs (min, max, conditional) and
  ``k · ONE`` for constants, where ``ONE = 1/(t+1)`` averages the BOS indicator.
- ``C1 op C2`` thresholds ``d = form(C1) − form(C2)``: ``(t+1)·d`` is an integer, so
  ``D ≤ 0`` iff ``−d + ONE/2 ≥ 0``, with margin ``ONE/2 ≥ 1/(2(n+1))``.

Every form carries a bound on its absolute value at every position (BOS included),
used for big-M gating and BOS guards.
"""

from __future__ import annotations

from itertools import product

from crasp_compiler.assemble.builder import BOS_VAR, NONBOS_VAR, Builder, token_var
from crasp_compiler.cookbook import attention, ffn, layernorm
from crasp_compiler.cookbook.blocks import Block, Form, form_add
from crasp_compiler.ir.nodes import (
    Add,
    And,
    BoolConst,
    BoolRef,
    Compare,
    Cond,
    Count,
    CountConst,
    CountRef,
    Max,
    Min,
    Node,
    Not,
    Or,
    Periodic,
    Program,
    Scale,
    Sub,
    TokenIs,
    walk,
)
from crasp_compiler.model.features import periodic as periodic_feature

BOS, NONBOS, ONE = BOS_VAR, NONBOS_VAR, "ONE"
MODES = ("heaviside", "relu", "layernorm")
# A truth-table FFN with more rows than this is split into smaller formulas.
MAX_TABLE_UNITS = 256
# ReLU as a piecewise-linear function: one unit, ReLU(z).
RELU_KNOTS = ((-1.0, 0.0), (0.0, 0.0), (1.0, 1.0))


class _Lowerer:
    def __init__(self, program: Program, mode: str, max_len: int | None) -> None:
        self.program = program
        self.mode = mode
        self.max_len = max_len
        self.builder = Builder(program.alphabet)
        self.forms: dict[str, Form] = {}
        self.var_bounds: dict[str, float] = {BOS: 1, NONBOS: 1}
        self.memo: dict[Node, Form] = {}
        self.defs = {d.name: d.expr for d in program.definitions}
        self.counter = 0
        self.one_made = False

    # -------------------------------------------------------------- helpers

    def fresh(self, kind: str) -> str:
        self.counter += 1
        return f"{kind}#{self.counter}"

    def add(self, block: Block, outputs: dict[str, float]) -> None:
        """Add ``block``; ``outputs`` bounds the absolute value of each variable it writes."""
        self.builder.add(block)
        self.var_bounds.update(outputs)

    def bound(self, form: Form) -> float:
        return sum(abs(c) * self.var_bounds[v] for v, c in form.items())

    def one(self) -> Form:
        if not self.one_made:
            self.add(attention.causal_average({BOS: 1.0}, ONE, label="ONE = 1/(t+1)"), {ONE: 1})
            self.one_made = True
        return {ONE: 1.0}

    # -------------------------------------------------------------- Booleans

    def boolean(self, node: Node) -> Form:
        if node in self.memo:
            return self.memo[node]
        match node:
            case TokenIs(symbol):
                form = {token_var(symbol): 1.0}
            case BoolConst(value):
                form = {NONBOS: 1.0} if value else {}
            case Periodic(modulus, residues):
                form = {}
                for r in sorted(residues):
                    name = periodic_feature(modulus, r)
                    form = form_add((1, form), (1, self.builder.feature(name)))
                    self.var_bounds[name] = 1
            case Not(arg):
                form = form_add((1, {NONBOS: 1.0}), (-1, self.boolean(arg)))
            case BoolRef(name):
                form = self.boolean(self.defs[name])
            case Compare():
                form = self.compare(node)
            case And() | Or():
                form = self.formula(node)
            case _:  # pragma: no cover - the checker admits no other Boolean nodes
                raise TypeError(node)
        self.memo[node] = form
        return form

    def _leaves(self, node: Node, leaves: list[Node]) -> None:
        """Collect the leaves of the maximal and/or/not formula at ``node``."""
        match node:
            case Not(arg):
                self._leaves(arg, leaves)
            case And(a, b) | Or(a, b):
                self._leaves(a, leaves)
                self._leaves(b, leaves)
            case BoolRef(name) if isinstance(self.defs[name], (Not, And, Or)):
                self._leaves(self.defs[name], leaves)
            case _:
                if node not in leaves:
                    leaves.append(node)

    def _evaluate(self, node: Node, env: dict[Node, bool]) -> bool:
        if node in env:
            return env[node]
        match node:
            case Not(arg):
                return not self._evaluate(arg, env)
            case And(a, b):
                return self._evaluate(a, env) and self._evaluate(b, env)
            case Or(a, b):
                return self._evaluate(a, env) or self._evaluate(b, env)
            case BoolRef(name) if isinstance(self.defs[name], (Not, And, Or)):
                return self._evaluate(self.defs[name], env)
        raise KeyError(node)  # pragma: no cover - every leaf is in env

    def formula(self, node: Node) -> Form:
        leaves: list[Node] = []
        self._leaves(node, leaves)
        rows = 2 ** len(leaves)
        if rows // 2 > MAX_TABLE_UNITS:
            # Too wide for one table: materialise the operands first, then combine them.
            a, b = node.left, node.right  # type: ignore[attr-defined]
            leaves = [a, b]
            forms = [self.boolean(a), self.boolean(b)]
        else:
            forms = [self.boolean(leaf) for leaf in leaves]

        def table(bits: tuple[bool, ...]) -> bool:
            return self._evaluate(node, dict(zip(leaves, bits, strict=True)))

        values = {table(bits) for bits in product((False, True), repeat=len(leaves))}
        if len(values) == 1:  # a tautology or a contradiction needs no block
            return {NONBOS: 1.0} if values.pop() else {}
        out = self.fresh("bool")

        block = ffn.boolean_function(forms, table, out, nonbos=NONBOS, label=f"formula -> {out}")
        self.add(block, {out: 1})
        return {out: 1.0}

    def compare(self, node: Compare) -> Form:
        one = self.one()
        d = form_add((1, self.count(node.left)), (-1, self.count(node.right)))
        half = {v: c / 2 for v, c in one.items()}
        le = form_add((-1, d), (1, half))  # D <= 0
        ge = form_add((1, d), (1, half))  # D >= 0
        lt = form_add((-1, d), (-1, half))  # D <= -1
        gt = form_add((1, d), (-1, half))  # D >= 1
        match node.op:
            case "<=":
                return self.step(le)
            case ">=":
                return self.step(ge)
            case "<":
                return self.step(lt)
            case ">":
                return self.step(gt)
        both = form_add((1, self.step(le)), (1, self.step(ge)))
        eq = form_add((1, both), (-1, {NONBOS: 1.0}))
        return eq if node.op == "==" else form_add((1, {NONBOS: 1.0}), (-1, eq))

    def step(self, z: Form) -> Form:
        """A Boolean variable holding ``1[z ≥ 0]`` at tokens and 0 at BOS."""
        out = self.fresh("cmp")
        bound = self.bound(z)
        if self.mode == "layernorm":
            # the BOS guard −M·bos (M = bound + 1) makes z ≤ −1 at BOS, so BOS reads 0
            guarded = form_add((1, z), (-(bound + 1), {BOS: 1.0}))
            block = layernorm.positive(guarded, out, label=f"sign -> {out}")
        else:
            # heaviside: one Heaviside unit; relu: GEZero_δ with δ = 1/(2(N+1)), exact
            # since |z| ≥ ONE/2 ≥ δ for t ≤ N. The BOS guard −M·bos (M = bound + 1 + δ)
            # puts z ≤ −1 − δ at BOS, so BOS reads 0.
            if self.mode == "heaviside":
                tolerance, kind = 0.0, "threshold"
            else:
                assert self.max_len is not None
                tolerance, kind = 1 / (2 * (self.max_len + 1)), "ramp"
            guarded = form_add((1, z), (-(bound + 1 + tolerance), {BOS: 1.0}))
            block = ffn.ge_zero(guarded, out, tolerance=tolerance, label=f"{kind} -> {out}")
        self.add(block, {out: 1})
        return {out: 1.0}

    # -------------------------------------------------------------- counts

    def count(self, node: Node) -> Form:
        if node in self.memo:
            return self.memo[node]
        match node:
            case Count(arg, None):
                out = self.fresh("count")
                self.add(
                    attention.causal_average(self.boolean(arg), out, label=f"# -> {out}"), {out: 1}
                )
                form = {out: 1.0}
            case Count(arg, offsets):
                form = self.local_count(self.boolean(arg), sorted(offsets))
            case CountConst(value):
                form = {v: value * c for v, c in self.one().items()} if value else {}
            case CountRef(name):
                form = self.count(self.defs[name])
            case Add(a, b):
                form = form_add((1, self.count(a)), (1, self.count(b)))
            case Sub(a, b):
                form = form_add((1, self.count(a)), (-1, self.count(b)))
            case Scale(factor, arg):
                form = form_add((factor, self.count(arg)))
            case Min(a, b) | Max(a, b):
                x, y = self.count(a), self.count(b)
                sign = -1 if isinstance(node, Min) else 1
                out = self.fresh("min" if sign < 0 else "max")
                # min(x, y) = y − ReLU(y − x);  max(x, y) = y + ReLU(x − y): one unit and
                # a linear read (ffn.minimum/maximum write min/max itself, with 3 units)
                z = form_add((sign, x), (-sign, y))
                label = f"{type(node).__name__.lower()} -> {out}"
                self.add(ffn.cpwl(z, RELU_KNOTS, out, label=label), {out: self.bound(z)})
                form = form_add((1, y), (sign, {out: 1.0}))
            case Cond(c, a, b):
                # c ? x : y  =  y + c·(x − y), by big-M gating
                x, y, bit = self.count(a), self.count(b), self.boolean(c)
                diff = form_add((1, x), (-1, y))
                out = self.fresh("cond")
                bound = self.bound(diff)
                gate = ffn.conditional_bigm(
                    bit, diff, Form(), out, bound=bound, label=f"conditional -> {out}"
                )
                self.add(gate, {out: bound})
                form = form_add((1, y), (1, {out: 1.0}))
            case _:  # pragma: no cover
                raise TypeError(node)
        self.memo[node] = form
        return form

    def local_count(self, arg: Form, offsets: list[int]) -> Form:
        """``#[j <= i, i − j ∈ offsets] P(j)`` = Σ_c ONE · P(i − c), by offset lookups.

        Hard lookups and big-M gates in heaviside and layernorm modes (every length);
        softmax lookups and soft gates in relu mode (lengths ≤ max_len)."""
        one = self.one()
        constant = {BOS: 1.0, NONBOS: 1.0}  # 1 at every position
        form: Form = {}
        for offset in offsets:
            bit = self.fresh(f"prev{offset}")
            out = self.fresh("local")
            lookup_label, gate_label = f"P(i-{offset}) -> {bit}", f"ONE·P(i-{offset}) -> {out}"
            if self.mode == "relu":
                assert self.max_len is not None
                lookup = attention.soft_offset_lookup(
                    arg, offset, bit, constant, BOS, self.max_len, label=lookup_label
                )
                gate = ffn.soft_gate({bit: 1.0}, one, out, bound=1.0, label=gate_label)
            else:
                lookup = attention.offset_lookup(arg, offset, bit, constant, BOS, lookup_label)
                gate = ffn.conditional_bigm(
                    {bit: 1.0}, one, Form(), out, bound=1.0, label=gate_label
                )
            self.add(lookup, {bit: 1})
            self.add(gate, {out: 1})
            form = form_add((1, form), (1, {out: 1.0}))
        return form

    # -------------------------------------------------------------- program

    def needed(self) -> set[str]:
        """The definitions the outputs depend on (the others are not compiled)."""
        seen: set[str] = set()
        stack = list(self.program.outputs)
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            stack.extend(
                n.name for n in walk(self.defs[name]) if isinstance(n, (BoolRef, CountRef))
            )
        return seen

    def lower(self) -> tuple[Builder, dict[str, Form]]:
        needed = self.needed()
        for definition in self.program.definitions:
            if definition.name not in needed:
                continue
            if definition.sort.value == "bool":
                form = self.boolean(definition.expr)
            else:
                form = self.count(definition.expr)
            self.forms[definition.name] = form
        return self.builder, self.forms


def lower_program(
    program: Program, mode: str = "heaviside", max_len: int | None = None
) -> tuple[Builder, dict[str, Form]]:
    """Lower ``program`` to blocks on a :class:`Builder`; returns the builder and the form
    of every compiled definition. ``mode`` picks how comparisons threshold."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if mode == "relu" and (max_len is None or max_len < 0):
        raise ValueError("relu mode needs max_len, the longest input it must be exact for")
    return _Lowerer(program, mode, max_len).lower()
