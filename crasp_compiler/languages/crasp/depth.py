"""Where each C-RASP expression can be computed: the sublayer *slots* of the compiled
model, the plan of every Boolean formula, and the dependency bound.

Slots number the sublayers: 0 is the embedding, 2l − 1 the attention and 2l the MLP of
layer l. The rules are those of the lowering (:mod:`crasp_compiler.languages.crasp.lower`),
which reads its formula plans from here, so the model has exactly
:func:`dependency_bound` layers:

- a ``#`` takes an attention sublayer after its argument (a local window of
  :data:`~crasp_compiler.languages.crasp.lower.WINDOW_RUN` or more offsets in a row: a
  lookup, in relu mode an MLP to clean it, then a count); constants need ``ONE``, an
  attention output (slot 1);
- a comparison, min, max, conditional and local-count gate take an MLP sublayer after
  their arguments;
- a maximal and/or/not formula is put in negation normal form, ``and``/``or`` flattened
  (:func:`Depth.nnf`), and planned (:class:`Plan`):

  - ``fused``: one gate (an n-ary and/or of literals) with exactly one literal that is a
    comparison computed in the latest MLP its literals reach, the others earlier: the
    gate rides on the comparison's threshold units, ``H(z + M(Σℓ − r))``, in that MLP;
  - ``gate``: any other single gate, one unit ``ReLU(2Σℓ − 2k + 1)`` in the next MLP;
  - ``fused-table``: a formula of several levels over at most 9 leaves, one of them a
    comparison computed in the latest MLP its leaves reach, the others earlier: a truth
    table over the others whose rows are gated by that comparison, in that MLP;
  - ``table``: any other formula of several levels over at most 9 leaves, one
    truth-table MLP;
  - ``circuit``: a wider one, a threshold circuit, one MLP per level of gates.

- an output that is a formula used by no other definition is *absorbed* by its readout
  when that is no later: an and of k exact bits is ``Σ b − k + 1 > 1/2``, an or is
  ``Σ b > 1/2``, so its children (literals, comparisons computed in the latest MLP,
  fused or plain gates) need no further MLP.

The bound is the depth of these constructions, not of every transformer that computes
the program. Its steps are forced for models that compute every count by one attention
head over a {0,1} value in the residual, with one hidden layer per MLP and a thresholded
linear readout: a comparison of a count cannot precede the attention that makes the
count, a count of a Boolean cannot share its layer, and an and/or of comparisons of two
different counts is not one threshold unit of their inputs (so it needs another MLP
unless the readout decides it). Constant or cancelling sub-expressions that the
lowering folds (``# "a" − # "a"``) can leave the model with fewer layers than the bound;
formulas wider than 9 leaves are circuits of threshold gates, one MLP per level, where a
wider table could take one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from crasp_compiler.languages.crasp.nodes import (
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
    Program,
    children,
    walk,
)
from crasp_compiler.languages.crasp.printer import offset_runs

# A formula of several levels with more leaves than this is a threshold circuit (a truth
# table would need more than 2^(LEAVES - 1) = 256 units).
TABLE_LEAVES = 9
# Runs of at least this many consecutive offsets are counted as windows.
WINDOW_RUN = 3


@dataclass(frozen=True)
class Lit:
    """A leaf of a formula (not an and/or/not, nor a reference to one), or its negation.
    The hash is computed once (formulas are hashed often, nodes are deep)."""

    node: Node
    positive: bool
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.node, self.positive)))

    def __hash__(self) -> int:
        return self._hash


@dataclass(frozen=True)
class Gate:
    """An n-ary ``and``/``or`` of literals and gates (negation normal form, flattened)."""

    op: str  # "and" | "or"
    children: tuple[Lit | Gate, ...]
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.op, self.children)))

    def __hash__(self) -> int:
        return self._hash


Formula = Lit | Gate


@dataclass(frozen=True)
class Plan:
    """How a maximal formula is lowered (module docstring): ``kind`` is ``literal``,
    ``fused``, ``gate``, ``fused-table``, ``table`` or ``circuit``; ``fresh`` is the
    fused comparison."""

    kind: str
    formula: Formula
    slot: int
    fresh: Lit | None = None


def next_slot(after: int, attention: bool) -> int:
    """The first attention (odd) or MLP (even) slot after ``after``."""
    slot = after + 1
    return slot if (slot % 2 == 1) == attention else slot + 1


def _gate(op: str, parts: tuple[Formula, ...]) -> Formula:
    """``op`` of ``parts``, flattened, without repeats or constants: ``x ∧ ¬x`` is
    false, ``x ∨ ¬x`` true (their units would cancel ``x`` and run earlier)."""
    absorbing = op == "or"  # the constant that decides the gate: true for or
    flat: list[Formula] = []
    for part in parts:
        flat.extend(part.children if isinstance(part, Gate) and part.op == op else (part,))
    unique: dict[Formula, None] = {}  # in order
    polarity: dict[int, bool] = {}  # id(node) -> the polarity of its literal so far
    for part in dict.fromkeys(flat):
        if isinstance(part, Lit) and isinstance(part.node, BoolConst):
            if part.node.value == part.positive:  # the literal is true
                if absorbing:
                    return part
                continue
            if not absorbing:
                return part
            continue
        # both polarities of a leaf share its node object (Depth.nnf makes them together)
        if isinstance(part, Lit) and polarity.setdefault(id(part.node), part.positive) != (
            part.positive
        ):
            return Lit(BoolConst(absorbing), True)
        unique[part] = None
    if not unique:
        return Lit(BoolConst(not absorbing), True)
    kept = tuple(unique)
    return kept[0] if len(kept) == 1 else Gate(op, kept)


def literals(formula: Formula) -> list[Lit]:
    """The literals of a formula, each once, in order."""
    if isinstance(formula, Lit):
        return [formula]
    found: dict[Lit, None] = {}
    seen: set[int] = set()  # gates shared by several parents are read once
    stack: list[Formula] = [formula]
    while stack:
        top = stack.pop()
        if isinstance(top, Lit):
            found.setdefault(top)
        elif id(top) not in seen:
            seen.add(id(top))
            stack.extend(reversed(top.children))
    return list(found)


def holds(formula: Formula, row: Mapping[Node, bool]) -> bool:
    """The value of ``formula`` when each leaf node has the value ``row`` gives it
    (gates evaluated children first, with an explicit stack)."""
    values: dict[Formula, bool] = {}
    stack: list[tuple[Formula, bool]] = [(formula, False)]
    while stack:
        top, ready = stack.pop()
        if top in values:
            continue
        if isinstance(top, Lit):
            values[top] = row[top.node] == top.positive
        elif ready:
            parts = (values[child] for child in top.children)
            values[top] = all(parts) if top.op == "and" else any(parts)
        else:
            stack.append((top, True))
            stack.extend((child, False) for child in top.children)
    return values[formula]


def _leaves(formula: Formula, limit: int) -> set[Node] | None:
    """The leaf nodes of ``formula``, or None when there are more than ``limit``."""
    found: set[Node] = set()
    seen: set[int] = set()
    stack = [formula]
    while stack:
        top = stack.pop()
        if isinstance(top, Lit):
            found.add(top.node)
            if len(found) > limit:
                return None
        elif id(top) not in seen:
            seen.add(id(top))
            stack.extend(top.children)
    return found


class Depth:
    """Slots and formula plans of a program's expressions (module docstring). Each is
    computed once, children and referenced definitions first, with an explicit stack
    (:meth:`slot`), so that no formula or chain of references is too deep to plan."""

    def __init__(self, program: Program, mode: str = "heaviside") -> None:
        self.program = program
        self.mode = mode
        self.defs = {d.name: d.expr for d in program.definitions}
        self.slots: dict[Node, int] = {}
        self.forms: dict[Node, tuple[Formula, Formula]] = {}
        self.plans: dict[Node, Plan] = {}
        self.gate_slots: dict[Formula, int] = {}
        used = {n.name for d in program.definitions for n in walk(d.expr) if isinstance(n, BoolRef)}
        self.unused = {d.name for d in program.definitions} - used
        for definition in program.definitions:  # in order: references find theirs made
            self.slot(definition.expr)

    # ------------------------------------------------------------------ formulas

    def resolve(self, node: Node) -> Node:
        """``node`` with references to definitions followed."""
        while isinstance(node, BoolRef | CountRef):
            node = self.defs[node.name]
        return node

    def nnf(self, node: Node) -> tuple[Formula, Formula]:
        """The negation normal forms of ``node`` and of its negation."""
        if node not in self.forms:
            self.slot(node)  # makes the forms of the formulas below it, then its own
        return self.forms[node]

    def _forms(self, node: Node) -> tuple[Formula, Formula]:
        """:meth:`nnf` of ``node`` from those of its operands, already made."""
        match node:
            case Not(arg):
                positive, negative = self.forms[arg]
                return negative, positive
            case And(a, b) | Or(a, b):
                (pa, na), (pb, nb) = self.forms[a], self.forms[b]
                op, dual = ("and", "or") if isinstance(node, And) else ("or", "and")
                return _gate(op, (pa, pb)), _gate(dual, (na, nb))
            case BoolRef(name) if isinstance(self.defs[name], Not | And | Or):
                return self.forms[self.defs[name]]
        return Lit(node, True), Lit(node, False)

    def is_comparison(self, lit: Lit) -> bool:
        return isinstance(self.resolve(lit.node), Compare)

    def plan(self, node: Node) -> Plan:
        """The plan of the maximal formula at ``node`` (an and/or, or a reference to one)."""
        if node in self.plans:
            return self.plans[node]
        formula = self.nnf(node)[0]
        if isinstance(formula, Lit):
            plan = Plan("literal", formula, self.slot(formula.node))
        elif all(isinstance(c, Lit) for c in formula.children):
            lits = literals(formula)
            latest = max(self.slot(lit.node) for lit in lits)
            fresh = [lit for lit in lits if self.slot(lit.node) == latest]
            if latest > 0 and len(fresh) == 1 and self.is_comparison(fresh[0]):
                plan = Plan("fused", formula, latest, fresh[0])
            else:
                plan = Plan("gate", formula, next_slot(latest, attention=False))
        elif (leaves := _leaves(formula, TABLE_LEAVES)) is not None:
            latest = max(self.slot(leaf) for leaf in leaves)
            fresh = [leaf for leaf in leaves if self.slot(leaf) == latest]
            if latest > 0 and len(fresh) == 1 and self.is_comparison(Lit(fresh[0], True)):
                plan = Plan("fused-table", formula, latest, Lit(fresh[0], True))
            else:
                plan = Plan("table", formula, next_slot(latest, attention=False))
        else:
            plan = Plan("circuit", formula, self.circuit_slot(formula))
        self.plans[node] = plan
        return plan

    def circuit_slot(self, formula: Formula) -> int:
        """The slot of a threshold circuit: each gate in the MLP after its children
        (gates first met are measured children first, with an explicit stack)."""
        if isinstance(formula, Lit):
            return self.slot(formula.node)
        stack: list[tuple[Gate, bool]] = [(formula, False)]
        while stack:
            gate, ready = stack.pop()
            if gate in self.gate_slots:
                continue
            inner = [c for c in gate.children if isinstance(c, Gate)]
            if not ready:
                stack.append((gate, True))
                stack.extend((c, False) for c in inner)
                continue
            latest = max(
                self.gate_slots[c] if isinstance(c, Gate) else self.slot(c.node)
                for c in gate.children
            )
            self.gate_slots[gate] = next_slot(latest, attention=False)
        return self.gate_slots[formula]

    def absorbed(self, name: str) -> Plan | None:
        """The plan of output ``name`` when its readout can absorb its formula's root gate
        (module docstring) no later than its own plan, else None. Absorbing is preferred
        at the same slot: the thresholds then carry no ``M·ℓ`` guard terms, whose
        rounding shortens the float horizons."""
        expr = self.defs[name]
        if name not in self.unused or not isinstance(expr, And | Or):
            return None
        own = self.plan(expr)
        formula = own.formula
        if not isinstance(formula, Gate):
            return None
        latest = max(self.slot(lit.node) for lit in literals(formula))
        for child in formula.children:
            lits = [child] if isinstance(child, Lit) else literals(child)
            if isinstance(child, Gate) and any(isinstance(c, Gate) for c in child.children):
                return None
            fresh = [lit for lit in lits if self.slot(lit.node) == latest]
            if any(not self.is_comparison(lit) for lit in fresh) or len(fresh) > 1:
                return None
        if latest == 0 or latest > own.slot:
            return None
        return Plan("absorbed", formula, latest)

    # ------------------------------------------------------------------ slots

    def slot(self, node: Node) -> int:
        """The slot of ``node``, with those of its operands and of the definitions it
        refers to (and the formulas among them: :meth:`nnf`), made first."""
        if node in self.slots:
            return self.slots[node]
        stack: list[tuple[Node, bool]] = [(node, False)]
        while stack:
            top, ready = stack.pop()
            if top in self.slots:
                continue
            if ready:
                self.forms.setdefault(top, self._forms(top))
                self.slots[top] = self._slot(top)
                continue
            stack.append((top, True))
            below = children(top)
            if isinstance(top, BoolRef | CountRef):
                below = (self.defs[top.name],)
            stack.extend((n, False) for n in below if n not in self.slots)
        return self.slots[node]

    def _slot(self, node: Node) -> int:
        """:meth:`slot` of ``node`` from those of its operands, already made."""
        match node:
            case BoolRef(name) | CountRef(name):
                return self.slots[self.defs[name]]
            case CountConst(value=v):
                return 1 if v else 0
            case Count(arg, None):
                return next_slot(self.slots[arg], attention=True)
            case Count(arg, offsets):
                lookup = next_slot(self.slots[arg], attention=True)
                shifted = next_slot(lookup, attention=False) if self.mode == "relu" else lookup
                return max(
                    next_slot(shifted, attention=True)
                    if stop - start + 1 >= WINDOW_RUN
                    else next_slot(lookup, attention=False)
                    for start, stop in offset_runs(offsets)
                )
            case Compare(_, a, b):
                return next_slot(max(self.slots[a], self.slots[b], 1), attention=False)
            case And() | Or():
                return self.plan(node).slot
            case Min(a, b) | Max(a, b):
                return next_slot(max(self.slots[a], self.slots[b]), attention=False)
            case Cond(c, a, b):
                return next_slot(max(self.slots[c], self.slots[a], self.slots[b]), attention=False)
        return max((self.slots[child] for child in children(node)), default=0)

    def output_slot(self, name: str) -> int:
        absorbed = self.absorbed(name)
        return absorbed.slot if absorbed is not None else self.slot(self.defs[name])

    def bound(self) -> int:
        """The layers of the latest output (:func:`dependency_bound`)."""
        deepest = max((self.output_slot(name) for name in self.program.outputs), default=0)
        return (deepest + 1) // 2


def dependency_bound(program: Program, mode: str = "heaviside") -> int:
    """The fewest layers the program's dependencies allow under the compiler's
    constructions (module docstring); the compiled model has exactly this many."""
    return Depth(program, mode).bound()
