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

Count forms have integer coefficients (Python ints, so constants like 10^9·10^9 stay
exact). A comparison divides ``D = Σ α_k c_k + β`` by ``g = gcd(α_k)`` first
(``D ≤ 0 ⟺ D/g ≤ ⌊−β/g⌋``, and so on), and min, max and conditionals factor g out
(``ReLU(g·z) = g·ReLU(z)``), so common factors never reach the weights. Every variable
also carries the rounding bounds of :mod:`crasp_compiler.languages.crasp.rounding`, from which the
compiler derives the float horizons of the model.

A local count over a run of at least :data:`WINDOW_RUN` consecutive offsets ``a..b`` is
a difference of two prefix counts, ``#_{[t−b, t−a]} P = C(t − a) − C(t − b − 1)``, where
``C(t − c)/(t + 1)`` is the causal average of ``P`` shifted by c (one offset lookup
writes ``P(t − c)`` as a Boolean, a uniform head counts it): a window of any width costs
at most two lookups and two heads. Shorter runs read each offset separately.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import product
from math import gcd
from typing import Concatenate, ParamSpec

from crasp_compiler.assemble.builder import BOS_VAR, NONBOS_VAR, Builder, token_var
from crasp_compiler.cookbook import attention, ffn, layernorm
from crasp_compiler.cookbook.blocks import Block, BosValues, Form, form_add
from crasp_compiler.errors import CraspError, Diagnostic
from crasp_compiler.languages.crasp.depth import (
    WINDOW_RUN,
    Depth,
    Formula,
    Gate,
    Lit,
    Plan,
    Signal,
    Wire,
    holds,
    literals,
)
from crasp_compiler.languages.crasp.nodes import (
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
    children,
)
from crasp_compiler.languages.crasp.printer import format_expr, offset_runs
from crasp_compiler.languages.crasp.rounding import UNIT_ROUNDOFF, Analysis, Poly
from crasp_compiler.model.features import feature_matrix
from crasp_compiler.model.features import periodic as periodic_feature

BOS, NONBOS, ONE = BOS_VAR, NONBOS_VAR, "ONE"
MODES = ("heaviside", "relu", "layernorm")
COMPARE = {
    "<=": operator.le,
    "<": operator.lt,
    "==": operator.eq,
    "!=": operator.ne,
    ">=": operator.ge,
    ">": operator.gt,
}
NEGATED = {"<=": ">", "<": ">=", "==": "!=", "!=": "==", ">=": "<", ">": "<="}
# Count coefficients beyond this are refused (float64 ends near 1.8e308).
MAX_COEFFICIENT = 10**300

Args = ParamSpec("Args")  # the arguments of a rule of the rounding analysis


def _flip(want: int | None) -> int | None:
    """The side a negation must be exact on for its argument to be exact on ``want``."""
    return None if want is None else 1 - want


def _apply_row(row: tuple[bool, ...]) -> bool:
    """``lo ∨ (hi ∧ x)`` of a row ``(lo, hi, x)``."""
    lo, hi, x = row
    return lo or (hi and x)


def _gcd(form: Form) -> int:
    """The gcd of a form's (integer) coefficients, 1 for the empty form."""
    return gcd(*(int(c) for c in form.values())) or 1


class _Lowerer:
    def __init__(self, program: Program, mode: str, max_len: int | None) -> None:
        self.program = program
        self.mode = mode
        self.max_len = max_len
        self.builder = Builder(program.alphabet)
        self.forms: dict[str, Form] = {}
        self.var_bounds: dict[str, float] = {BOS: 1, NONBOS: 1}
        # every variable's value at BOS (the empty input), from the blocks' evaluate
        self.at_bos = BosValues({BOS: 1.0, NONBOS: 0.0})
        for symbol in program.alphabet:
            self.at_bos.set(token_var(symbol), 0.0)
        self.memo: dict[Node, Form] = {}
        self.defs = {d.name: d.expr for d in program.definitions}
        self.counter = 0
        self.one_made = False
        self.rounding = {dtype: Analysis(dtype) for dtype in UNIT_ROUNDOFF}
        self.track(Analysis.exact_input, BOS, Poly())  # 0 at every token
        self.track(Analysis.exact_input, NONBOS, ones=True)
        for symbol in program.alphabet:
            self.track(Analysis.exact_input, token_var(symbol), token=True)
        # the Boolean forms made, by node and the side they are exact on (relu mode)
        self.bools: dict[tuple[Node, int | None], Form] = {}
        self.shifted: dict[tuple[frozenset[tuple[str, float]], int], Form] = {}
        self.depth = Depth(program, mode)
        self.bounds: dict[Node, Poly] = {}
        self.wired: dict[tuple[int, int], Form] = {}  # balanced circuits' wires, by id, side

    # -------------------------------------------------------------- helpers

    def fresh(self, kind: str) -> str:
        self.counter += 1
        return f"{kind}#{self.counter}"

    def add(self, block: Block, outputs: dict[str, float]) -> None:
        """Add ``block``; ``outputs`` bounds the absolute value of each variable it writes."""
        self.builder.add(block)
        self.at_bos.add(block)
        self.var_bounds.update(outputs)

    def track(
        self, rule: Callable[Concatenate[Analysis, Args], None], *args: Args.args, **kw: Args.kwargs
    ) -> None:
        """Apply one rule of the rounding analysis, a method of :class:`Analysis` such as
        ``Analysis.table``, to the analysis of every float type, with these arguments."""
        for analysis in self.rounding.values():
            rule(analysis, *args, **kw)

    def bound(self, form: Form) -> float:
        return sum(abs(c) * self.var_bounds[v] for v, c in form.items())

    def one(self) -> Form:
        if not self.one_made:
            self.add(attention.causal_average(Form({BOS: 1}), ONE, label="ONE = 1/(t+1)"), {ONE: 1})
            self.track(Analysis.one, ONE)
            self.one_made = True
        return Form({ONE: 1})

    # -------------------------------------------------------------- Booleans

    def boolean(self, node: Node, want: int | None = None) -> Form:
        """The form of a Boolean; in relu mode ``want`` is the side (0 or 1) it must be
        exact on in floating point (a counted bit: 0; a guard or a condition: 1; None:
        either, 0 if it is new), and a node may be made once for each side."""
        if self.mode != "relu":
            want = None
        keys = [(node, want)] if want is not None else [(node, 0), (node, 1), (node, None)]
        for key in keys:
            if key in self.bools:
                return self.bools[key]
        if want is None and self.mode == "relu":
            want = 0
        match node:
            case TokenIs(symbol):
                form = Form({token_var(symbol): 1.0})
            case BoolConst(value):
                form = Form({NONBOS: 1}) if value else Form()
            case Periodic(modulus, residues):
                # the features hold their value at position −1 on BOS; a Boolean is 0 there
                form = Form({BOS: -1}) if modulus - 1 in residues else Form()
                for r in sorted(residues):
                    name = periodic_feature(modulus, r)
                    form = form_add((1, form), (1, self.builder.feature(name)))
                    self.var_bounds[name] = 1
                    self.at_bos.set(name, feature_matrix([name], 1)[0, 0])
                    self.track(Analysis.exact_input, name)
            case Not(arg):
                form = form_add((1, {NONBOS: 1}), (-1, self.boolean(arg, _flip(want))))
            case BoolRef(name):
                form = self.boolean(self.defs[name], want)
            case Compare():
                form = self.compare(node, polarity=want)
            case And() | Or():
                form = self.formula(node, want)
            case _:  # pragma: no cover - the checker admits no other Boolean nodes
                raise TypeError(node)
        self.bools[(node, want)] = form
        return form

    # -------------------------------------------------------------- formulas

    def formula(self, node: Node, want: int | None = None) -> Form:
        """A maximal and/or/not formula, by its plan (:mod:`.depth`), exact on the side
        ``want`` where the plan's construction can be."""
        plan = self.depth.plan(node)
        label = format_expr(node)
        match plan.kind:
            case "literal":
                assert isinstance(plan.formula, Lit)
                return self.literal(plan.formula, want)
            case "fused":
                assert isinstance(plan.formula, Gate) and plan.fresh is not None
                return self.fused(plan.formula, plan.fresh, node, label, want)
            case "table":
                return self.table(plan.formula, node, label, want)
            case "fused-table":
                assert plan.fresh is not None
                return self.fused_table(plan.formula, plan.fresh.node, node, label, want)
            case "balanced":
                assert plan.wire is not None
                return self.balanced(plan.wire, node, label, want)
        return self.circuit(plan.formula, node, label, want)  # a gate: a one-level circuit

    def literal(self, lit: Lit, want: int | None = None) -> Form:
        form = self.boolean(lit.node, want if lit.positive else _flip(want))
        return form if lit.positive else form_add((1, {NONBOS: 1}), (-1, form))

    def circuit(self, formula: Formula, node: Node, label: str, want: int | None = None) -> Form:
        """A threshold circuit: each gate a clamped sum (:func:`ffn.all_of`,
        :func:`ffn.any_of`) over its children, in the MLP after them; the root exact on
        the side ``want`` (an and is one unit where that is 0, an or where it is 1). Gates
        are made children first, with an explicit stack, each once."""
        if isinstance(formula, Lit):
            return self.literal(formula, want)
        made: dict[int, Form] = {}
        stack: list[tuple[Gate, list[Form]]] = [(formula, [])]
        while stack:
            gate, inputs = stack[-1]
            if len(inputs) < len(gate.children):  # the next child, as a recursion would
                child = gate.children[len(inputs)]
                if isinstance(child, Lit):
                    inputs.append(self.literal(child))
                elif id(child) in made:
                    inputs.append(made[id(child)])
                else:
                    stack.append((child, []))
                continue
            stack.pop()
            side = 0 if gate.op == "and" else 1
            made[id(gate)] = self.gate(
                gate.op, inputs, want if want is not None and gate is formula else side, node, label
            )
            if stack:
                stack[-1][1].append(made[id(gate)])
        return made[id(formula)]

    def gate(self, op: str, inputs: list[Form], side: int, node: Node, label: str) -> Form:
        """One gate of a circuit over the bits ``inputs``, exact on the side ``side``: an
        ``and``/``or`` (:func:`ffn.all_of`, :func:`ffn.any_of`), or ``apply``,
        ``lo ∨ (hi ∧ x)`` of ``(lo, hi, x)`` by its truth table (:func:`ffn.boolean_function`,
        the complement form where ``side`` is 1)."""
        out = self.fresh("bool")
        if op == "apply":
            block = ffn.boolean_function(
                inputs, _apply_row, out, nonbos=NONBOS, complement=side == 1, label=label
            )
        else:
            make = ffn.all_of if op == "and" else ffn.any_of
            block = make(inputs, out, nonbos=NONBOS, exact_at=side, label=label)
        self.add(block, {out: 1})
        self.track(Analysis.table, out, inputs, node, side)
        return Form({out: 1})

    def balanced(self, root: Signal, node: Node, label: str, want: int | None = None) -> Form:
        """A balanced circuit (:meth:`.depth.Depth.value`): each wire one :meth:`gate`
        in the MLP after its inputs, made once for all the formulas that share it, exact
        on its natural side (an and at 0, an or and an ``apply`` at 1), the root on the
        side ``want``; wires are made inputs first, with an explicit stack."""
        stack: list[tuple[Signal, bool]] = [(root, False)]
        while stack:
            top, ready = stack.pop()
            if not isinstance(top, Wire):
                continue
            side = (0 if top.op == "and" else 1) if top is not root or want is None else want
            if (id(top), side) in self.wired:
                continue
            if not ready:
                stack.append((top, True))
                stack.extend((x, False) for x in top.inputs)
                continue
            inputs = [self.signal(x) for x in top.inputs]
            self.wired[(id(top), side)] = self.gate(top.op, inputs, side, node, label)
        return self.signal(root, want)

    def signal(self, bit: Signal, want: int | None = None) -> Form:
        """The form of a balanced circuit's input or made wire."""
        if isinstance(bit, Wire):
            side = (0 if bit.op == "and" else 1) if want is None else want
            return self.wired[(id(bit), side)]
        if isinstance(bit, Lit):
            return self.literal(bit, want)
        return Form({NONBOS: 1}) if bit else Form()

    def table(self, formula: Formula, node: Node, label: str, want: int | None = None) -> Form:
        """A formula of several levels over at most 9 leaves: one truth-table MLP, in the
        form that is exact on the side ``want`` (the complement for 1)."""
        leaves = list(dict.fromkeys(lit.node for lit in literals(formula)))
        forms = [self.boolean(leaf) for leaf in leaves]
        rows = {
            bits: holds(formula, dict(zip(leaves, bits, strict=True)))
            for bits in product((False, True), repeat=len(leaves))
        }
        if len(set(rows.values())) == 1:  # a contradiction or a tautology needs no block
            return Form({NONBOS: 1}) if rows[(False,) * len(leaves)] else Form()
        out = self.fresh("bool")
        # the side asked for, else the smaller table (the false rows where most are true)
        complement = 2 * sum(rows.values()) > len(rows) if want is None else want == 1
        block = ffn.boolean_function(
            forms, rows.__getitem__, out, nonbos=NONBOS, complement=complement, label=label
        )
        self.add(block, {out: 1})
        side = 1 if complement else 0
        self.track(Analysis.table, out, forms, node, side)
        return Form({out: 1})

    def fused_table(
        self, formula: Formula, fresh: Node, node: Node, label: str, want: int | None = None
    ) -> Form:
        """A formula of several levels with one comparison c computed in this MLP and the
        other leaves b ready: ``F = Σ_a [b = a] · F_a(c)`` over the rows a of b, where
        ``F_a(c)`` is 1, c, ¬c or 0. A row is the and of its literals, so a row with c
        or ¬c is :meth:`compare` guarded by them and a row with 1 one :func:`ffn.all_of`
        unit; rows are exclusive, so the sum is the bit, exact on the side ``want`` where
        every row is (its guards exact at 1, its comparison exact on that side)."""
        others = list(dict.fromkeys(lit.node for lit in literals(formula)))
        others.remove(fresh)
        compare = self.depth.resolve(fresh)
        assert isinstance(compare, Compare)
        total: Form = Form()
        parts: list[Form] = []
        for bits in product((False, True), repeat=len(others)):
            row = dict(zip(others, bits, strict=True))
            when = (holds(formula, {**row, fresh: False}), holds(formula, {**row, fresh: True}))
            if when == (False, False):
                continue
            guard = [self.literal(Lit(leaf, bit), 1) for leaf, bit in row.items()]
            if when == (True, True):
                out = self.fresh("bool")
                self.add(ffn.all_of(guard, out, nonbos=NONBOS, label=label), {out: 1})
                self.track(Analysis.table, out, guard, node, 0)
                part: Form = Form({out: 1})
            else:
                part = self.compare(
                    compare, negate=not when[1], guard=guard, label=label, polarity=want
                )
            parts.append(part)
            total = form_add((1, total), (1, part))
        self.track(Analysis.exclusive, total, parts)
        return total

    def fused(
        self, gate: Gate, fresh: Lit, node: Node, label: str, want: int | None = None
    ) -> Form:
        """A gate with one comparison computed in this MLP: ``c ∧ ℓ₁ ∧ … ∧ ℓ_r`` rides on
        the comparison's threshold units (:meth:`compare` with ``guard``, exact at 1); an
        ``or`` is ``¬(¬c ∧ ¬ℓ₁ ∧ …)``."""
        negate = gate.op == "or"
        others = [c for c in gate.children if c != fresh]
        lits = [c for c in others if isinstance(c, Lit)]
        assert len(lits) == len(others)
        guard = [self.literal(Lit(c.node, c.positive != negate), 1) for c in lits]
        compare = self.depth.resolve(fresh.node)
        assert isinstance(compare, Compare)
        form = self.compare(
            compare,
            negate=fresh.positive == negate,
            guard=guard,
            label=label,
            polarity=_flip(want) if negate else want,
        )
        return form_add((1, {NONBOS: 1}), (-1, form)) if negate else form

    def absorbed(self, plan: Plan, node: Node) -> Form:
        """An output's root gate in its readout (:meth:`.depth.Depth.absorbed`): the sum of
        its children's exact bits, minus ``k − 1`` for an ``and`` (decided ``> 1/2``)."""
        assert isinstance(plan.formula, Gate)
        label = format_expr(node)
        parts: list[Form] = []
        for child in plan.formula.children:
            if isinstance(child, Lit):
                parts.append(self.literal(child))
                continue
            lits = literals(child)
            fresh = [lit for lit in lits if self.depth.slot(lit.node) == plan.slot]
            if fresh:
                parts.append(self.fused(child, fresh[0], node, label))
            else:
                parts.append(self.circuit(child, node, label))
        k = len(parts)
        constant = -(k - 1) if plan.formula.op == "and" else 0
        return form_add(*((1, part) for part in parts), (constant, {NONBOS: 1}))

    def compare(
        self,
        node: Compare,
        *,
        negate: bool = False,
        guard: Sequence[Form] = (),
        label: str | None = None,
        polarity: int | None = None,
    ) -> Form:
        """``left op right`` (its negation with ``negate``) on ``D = left − right = g·D' +
        β`` (β the constant part, g the gcd of the other coefficients), decided on the
        integer D' against a rounded threshold: ``D ≤ 0 ⟺ D' ≤ ⌊−β/g⌋``, ``D ≥ 0 ⟺ D' ≥
        ⌈−β/g⌉``, ``D = 0 ⟺ g | β and D' = −β/g``.

        With ``guard`` (bits ℓ₁ … ℓ_r, exact at 1) the result is ``[D op 0] ∧ ℓ₁ ∧ … ∧ ℓ_r``
        in the same units: each threshold ``H(z)`` becomes ``H(z + M(Σℓ − r))``
        (:meth:`step`), and an equality ``[z ≤ 0] + [z ≥ 0] − 1`` subtracts ``ℓ₁ ∧ … ∧ ℓ_r``
        instead of 1. In relu mode an order comparison is exact on the side ``polarity``;
        an equality is exact at 1 (its two thresholds are), an inequality at 0."""
        op = NEGATED[node.op] if negate else node.op
        text = label if label is not None else format_expr(node)
        one = self.one()
        d = form_add((1, self.count(node.left)), (-1, self.count(node.right)))
        beta = int(d.pop(ONE, 0))
        made: list[Form] = []

        def conjunction() -> Form:  # ℓ₁ ∧ … ∧ ℓ_r (nonbos for none), made once
            if not made:
                if len(guard) <= 1:
                    made.append(guard[0] if guard else Form({NONBOS: 1}))
                else:
                    out = self.fresh("bool")
                    self.add(ffn.all_of(guard, out, nonbos=NONBOS, label=text), {out: 1})
                    self.track(Analysis.table, out, guard, node, 0)
                    made.append(Form({out: 1}))
            return made[0]

        if not d:  # a constant comparison
            return conjunction() if COMPARE[op](beta, 0) else Form()
        g = _gcd(d)
        rest = Form({v: int(c) // g for v, c in d.items()})
        half = {v: c / 2 for v, c in one.items()}
        # |D'| ≤ (|left| + |right| + |β|)/g, from the program's own bounds
        size = (self.ir(node.left) + self.ir(node.right) + Poly.const(abs(beta))).scale(1 / g)
        exact_at = 0 if polarity is None else polarity

        def le(k: int, part: str = "", side: int = exact_at) -> Form:  # D' <= k
            z = form_add((-1, rest), (k, one), (1, half))
            return self.step(z, node, size + Poly.const(abs(k) + 0.5), text + part, guard, side)

        def ge(k: int, part: str = "", side: int = exact_at) -> Form:  # D' >= k
            z = form_add((1, rest), (-k, one), (1, half))
            return self.step(z, node, size + Poly.const(abs(k) + 0.5), text + part, guard, side)

        match op:
            case "<=":
                return le(-beta // g)
            case ">=":
                return ge(-(beta // g))
            case "<":
                return le((-1 - beta) // g)
            case ">":
                return ge(-((beta - 1) // g))
        conj = conjunction()
        if beta % g:  # g·D' = −β has no integer solution
            return Form() if op == "==" else conj
        low = le(-beta // g, " (<= half)", 1)
        high = ge(-beta // g, " (>= half)", 1)
        eq = form_add((1, low), (1, high), (-1, conj))
        neq = form_add((1, conj), (-1, eq))
        self.track(Analysis.equality, eq, neq, low, high, conj)
        return eq if op == "==" else neq

    def step(
        self,
        z: Form,
        node: Node,
        size: Poly,
        label: str,
        guard: Sequence[Form] = (),
        exact_at: int = 0,
    ) -> Form:
        """A Boolean variable holding ``1[z ≥ 0]`` at tokens and 0 at BOS (``size``
        bounds ``|z|·(t+1)``); with ``guard`` (bits ℓ₁ … ℓ_r), ``1[z ≥ 0] ∧ ℓ₁ ∧ … ∧ ℓ_r``
        as ``1[z + M(Σℓ − r) ≥ 0]``, M above ``|z|`` plus the margin: an ℓ at 0 puts the
        argument at ``≤ −1 − w``, like the BOS guard ``−M·bos``.

        Heaviside: one Heaviside unit; layer norm: the sign of ``(z, 0)``; relu: the ramp
        :func:`ffn.step_ramp` of half-width ``w = 1/(4(N+1))``, exact since ``|z| ≥ ONE/2 ≥
        2w`` for t ≤ N, with a slack of w for rounding. Exact at 1 (``exact_at``), the
        ramp is the complement form: guards and BOS push z up, past the ramp, where its
        output is its hold unit (the guards' and, 0 at BOS)."""
        out = self.fresh("cmp")
        bound = min(self.bound(z), size.stored_max())
        width = 0.0
        if self.mode == "relu":
            assert self.max_len is not None
            width = 1 / (4 * (self.max_len + 1))
        else:
            exact_at = 0  # exact both sides
        sign = 1.0 if exact_at == 0 else -1.0
        push = bound + 1 + width
        row = dict(z)
        if guard:
            gate = form_add(*((1, g) for g in guard), (-len(guard), {NONBOS: 1}))
            row = form_add((1, row), (sign * push, gate))
        row = form_add((1, row), (-sign * push, {BOS: 1.0}))
        if self.mode == "layernorm":
            block = layernorm.positive(row, out, label=label)
        elif self.mode == "heaviside":
            block = ffn.ge_zero(row, out, tolerance=0.0, label=label)
        elif exact_at == 0:
            block = ffn.step_ramp(row, out, width=width, label=label)
        else:  # the hold unit: ReLU(2Σℓ − 2r + nonbos), ReLU(nonbos) without guards
            hold = form_add(*((2, g) for g in guard), (1, {NONBOS: 1}))
            block = ffn.step_ramp(
                row,
                out,
                width=width,
                exact_at=1,
                hold=hold,
                hold_bias=-2.0 * len(guard),
                label=label,
            )
        self.add(block, {out: 1})
        what = f"the comparison `{format_expr(node)}`"
        self.track(
            Analysis.threshold,
            out,
            z,
            row,
            node,
            what,
            mode=self.mode,
            guards=guard,
            push=push,
            bos_push=push,
            width=width,
            exact_at=exact_at,
            length=self.max_len,
        )
        return Form({out: 1})

    # -------------------------------------------------------------- counts

    def count(self, node: Node) -> Form:
        if node in self.memo:
            return self.memo[node]
        match node:
            case Count(arg, None):
                form = self.prefix_count(self.boolean(arg, 0), node)
            case Count(arg, frozenset() as offsets):
                form = self.local_count(self.boolean(arg), offsets, node)
            case CountConst(constant):
                form = (
                    Form({v: constant * c for v, c in self.one().items()}) if constant else Form()
                )
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
                # min(x, y) = y − g·ReLU((y − x)/g);  max(x, y) = y + g·ReLU((x − y)/g):
                # one unit and a linear read (g: the gcd of the coefficients)
                g = _gcd(form_add((sign, x), (-sign, y)))
                make = ffn.minimum_one_unit if sign < 0 else ffn.maximum_one_unit
                label = format_expr(node)
                block, form = make(y, x, out, factor=g, label=label)
                (unit,) = block.units
                z = Form(unit.form)
                value = (self.ir(a) + self.ir(b)).scale(1 / g)
                bound = min(self.bound(z), value.stored_max())
                self.add(block, {out: bound})
                self.track(Analysis.relu, out, z, value)
            case Cond(c, a, b):
                # c ? x : y  =  y + g·c·((x − y)/g), by big-M gating
                x, y, bit = self.count(a), self.count(b), self.boolean(c, 1)
                diff = form_add((1, x), (-1, y))
                g = _gcd(diff)
                diff = Form({v: int(c) // g for v, c in diff.items()})
                value = (self.ir(a) + self.ir(b)).scale(1 / g)
                out = self.fresh("cond")
                bound = min(self.bound(diff), value.stored_max())
                # relu mode: M one above |x|, so that p = 0 switches both units off even
                # where the bit (exact at 1) is inexact at 0
                big = bound + 1 if self.mode == "relu" else bound
                gate = ffn.conditional_bigm(
                    bit, diff, Form(), out, bound=big, label=format_expr(node)
                )
                self.add(gate, {out: bound})
                self.track(Analysis.gate, out, bit, diff, big, value, node=node)
                form = form_add((1, y), (g, {out: 1}))
            case _:  # pragma: no cover
                raise TypeError(node)
        if any(abs(c) > MAX_COEFFICIENT for c in form.values()):
            raise CraspError(
                [
                    Diagnostic(
                        f"a coefficient of this count is about 10^{len(str(abs(int(max(form.values(), key=abs))))) - 1}, "
                        "beyond what a float64 weight can hold",
                        node.span,
                        "scale the program down",
                    )
                ],
                self.program.source,
                self.program.filename,
            )
        self.memo[node] = form
        return form

    def ir(self, node: Node) -> Poly:
        """A bound on ``|value|·(t + 1)`` of a count expression (its integer value) from the
        program alone: ``|# P| ≤ t``, ``|#[ψ] P| ≤ |offsets|``, ``|k| ``, sums, ``|f|·``,
        the larger of two for min, max and conditionals. Tighter than the sum over a
        form's variables, whose values may cancel."""
        if node not in self.bounds:
            match node:
                case Count(_, None):
                    value = Poly.linear(0, 1)
                case Count(_, frozenset() as offsets):
                    value = Poly.const(len(offsets))
                case CountConst(value=v):
                    value = Poly.const(abs(v))
                case CountRef(name):
                    value = self.ir(self.defs[name])
                case Add(a, b) | Sub(a, b):
                    value = self.ir(a) + self.ir(b)
                case Scale(factor, arg):
                    value = self.ir(arg).scale(factor)
                case Min(a, b) | Max(a, b) | Cond(_, a, b):
                    value = self.ir(a).max(self.ir(b))
                case _:  # pragma: no cover - not a count
                    raise TypeError(node)
            self.bounds[node] = value
        return self.bounds[node]

    def prefix_count(self, arg: Form, node: Node | None = None, label: str | None = None) -> Form:
        """``# P``: the causal average of the Boolean form ``arg`` (0 at BOS); the head is
        labelled ``label``, else with the source expression ``node``."""
        key = (frozenset(arg.items()), 0)
        if key not in self.shifted:
            out = self.fresh("count")
            if label is None:
                label = format_expr(node) if node is not None else f"# -> {out}"
            self.add(attention.causal_average(arg, out, label=label), {out: 1})
            self.track(Analysis.average, out, arg, node)
            self.shifted[key] = Form({out: 1})
        return self.shifted[key]

    def shifted_count(self, arg: Form, shift: int, node: Count) -> Form:
        """``C(t − shift)/(t + 1)``: the prefix count of ``P(· − shift)``, whose bit one
        offset lookup writes (a softmax lookup in relu mode, made exact by a ramp). At
        shift 0 it is the whole prefix count, labelled ``# P`` (what it holds), not as
        the window ``node`` it is part of."""
        key = (frozenset(arg.items()), shift)
        if shift == 0:
            return self.prefix_count(arg, node, label=format_expr(Count(node.arg)))
        if key in self.shifted:
            return self.shifted[key]
        constant = Form({BOS: 1.0, NONBOS: 1.0})  # 1 at every position
        bit = self.fresh(f"prev{shift}")
        label = f"P(i-{shift}) in {format_expr(node)}"
        if self.mode == "relu":
            soft = self.fresh(f"soft{shift}")
            self.add(self.soft_lookup(arg, shift, soft, label), {soft: 1})
            self.track(Analysis.soft_lookup, soft, arg, shift, node)
            clean = ffn.clean_bit(Form({soft: 1}), bit, label=f"{label} (clean)")
            self.add(clean, {bit: 1})
            self.track(Analysis.clean, bit, soft, node)
        else:
            self.add(attention.offset_lookup(arg, shift, bit, constant, BOS, label), {bit: 1})
            self.track(Analysis.lookup, bit, arg)
        form = self.prefix_count(Form({bit: 1}), node, label=f"# {label}")
        self.shifted[key] = form
        return form

    def soft_lookup(self, arg: Form, offset: int, out: str, label: str) -> Block:
        """The relu-mode offset lookup: softmax on absolute positions (features
        ``index`` and ``index^2``, 0 at BOS), which standard architectures can hold."""
        index, index_sq = (self.position_feature(name) for name in ("index", "index^2"))
        constant = Form({BOS: 1.0, NONBOS: 1.0})  # 1 at every position
        return attention.soft_offset_lookup(
            arg, offset, out, constant, index=index, index_sq=index_sq, label=label
        )

    def position_feature(self, name: str) -> Form:
        """A positional feature read by attention only (no count form holds it)."""
        form = self.builder.feature(name)
        self.at_bos.set(name, feature_matrix([name], 1)[0, 0])
        return form

    def local_count(self, arg: Form, offsets: frozenset[int], node: Count) -> Form:
        """``#[j <= i, i − j ∈ offsets] P(j)``. A run ``a..b`` of at least
        :data:`WINDOW_RUN` offsets is ``C(t − a) − C(t − b − 1)`` (two shifted prefix
        counts); every other offset c is ``ONE · P(i − c)``, by an offset lookup and a
        gate: hard lookups (a relative bias) and big-M gates in heaviside and layernorm
        modes, softmax lookups on absolute positions and soft gates in relu mode."""
        one = self.one()
        constant = Form({BOS: 1.0, NONBOS: 1.0})  # 1 at every position
        form: Form = Form()
        for start, stop in offset_runs(offsets):
            if stop - start + 1 >= WINDOW_RUN:
                form = form_add(
                    (1, form),
                    (1, self.shifted_count(arg, start, node)),
                    (-1, self.shifted_count(arg, stop + 1, node)),
                )
                continue
            for offset in range(start, stop + 1):
                bit = self.fresh(f"prev{offset}")
                out = self.fresh("local")
                lookup_label = f"P(i-{offset}) in {format_expr(node)}"
                gate_label = f"ONE·P(i-{offset}) in {format_expr(node)}"
                if self.mode == "relu":
                    self.add(self.soft_lookup(arg, offset, bit, lookup_label), {bit: 1})
                    self.track(Analysis.soft_lookup, bit, arg, offset, node)
                    gate = ffn.soft_gate(Form({bit: 1.0}), one, out, bound=1.0, label=gate_label)
                    self.add(gate, {out: 1})
                    self.track(Analysis.soft_gate, out, bit, one, node)
                else:
                    lookup = attention.offset_lookup(arg, offset, bit, constant, BOS, lookup_label)
                    self.add(lookup, {bit: 1})
                    self.track(Analysis.lookup, bit, arg)
                    gate = ffn.conditional_bigm(
                        Form({bit: 1.0}), one, Form(), out, bound=1.0, label=gate_label
                    )
                    self.add(gate, {out: 1})
                    self.track(Analysis.gate, out, {bit: 1.0}, one, 1.0, nonneg=True)
                form = form_add((1, form), (1, {out: 1}))
        return form

    # -------------------------------------------------------------- program

    def needed(self) -> set[str]:
        """The definitions the outputs depend on (the others are not compiled). A
        formula reaches through the formula definitions it references (they are not
        compiled for it: its plan inlines them), and an output absorbed by its readout
        needs only its literals."""
        seen: set[str] = set()
        stack = list(self.program.outputs)
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            stack.extend(self.references(self.defs[name]))
        return seen

    def references(self, expr: Node) -> list[str]:
        """The definitions ``expr`` reads, formula definitions inlined."""
        found: list[str] = []
        stack = [expr]
        while stack:
            node = stack.pop()
            if isinstance(node, And | Or):
                stack.extend(lit.node for lit in literals(self.depth.nnf(node)[0]))
            elif isinstance(node, BoolRef | CountRef):
                found.append(node.name)
            else:
                stack.extend(children(node))
        return found

    def lower(self) -> Lowered:
        needed = self.needed()
        absorbed = {name: self.depth.absorbed(name) for name in self.program.outputs}
        for definition in self.program.definitions:
            name = definition.name
            if name not in needed:
                continue
            plan = absorbed.get(name)
            if plan is not None:
                form = self.absorbed(plan, definition.expr)
            elif definition.sort.value == "bool":
                form = self.boolean(definition.expr)
            else:
                self.ir(definition.expr)  # in order: references find their bounds made
                form = self.count(definition.expr)
            self.forms[name] = form
        for name in self.program.outputs:
            definition = self.program[name]
            rule = "bool" if definition.sort.value == "bool" else "count"
            form, what = self.forms[name], f"the output {name!r}"
            self.track(Analysis.output, form, rule, definition, what)
        return Lowered(self.builder, self.forms, self.rounding, self.at_bos, self.depth)


@dataclass
class Lowered:
    """The result of :func:`lower_program`: the builder, the form of every compiled
    definition, the rounding analysis of the variables and decisions, every variable's
    value at BOS (what the model computes there, on any input), and the plans followed."""

    builder: Builder
    forms: dict[str, Form]
    rounding: dict[str, Analysis]  # per float type
    at_bos: BosValues
    depth: Depth  # the slots and formula plans the lowering followed


def lower_program(program: Program, mode: str = "heaviside", max_len: int | None = None) -> Lowered:
    """Lower ``program`` to blocks on a :class:`Builder`. ``mode`` picks how comparisons
    threshold."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if mode == "relu" and (max_len is None or max_len < 0):
        raise ValueError("relu mode needs max_len, the longest input it must be exact for")
    return _Lowerer(program, mode, max_len).lower()
