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
  - ``circuit``: a wider one, a threshold circuit, one MLP per level of gates;
  - ``balanced``: the same formula as a balanced circuit (:meth:`Depth.value`) where
    that is ready earlier. A gate's value is its *heavy path* (down through its largest
    child) read as maps of one bit: each other child c of an and is ``v ↦ v ∧ c``, of an
    or ``v ↦ v ∨ c``; every such map is monotone, ``f(v) = lo ∨ (hi ∧ v)`` with
    ``(lo, hi) = (f(0), f(1))``, and so is a composition,
    ``f ∘ g = (f(g(0)), f(g(1)))``. Each ``lo ∨ (hi ∧ x)`` is one MLP (an and, an or,
    or a 3-input truth table), so the n maps of a path, composed as a balanced tree of
    blocks aligned at the path's end (shared by the gates above), take ⌊log₂ n⌋ + 2
    MLPs after their children; light children hold at most half the leaves, so a
    formula of L leaves takes O(log² L) MLPs, and a path whose other children are
    literals ⌊log₂ n⌋ + 2: an alternating and/or chain of L leaves ⌊log₂(L − 1)⌋ + 2
    (500 leaves: 10), against L for one MLP per level.

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
formulas wider than 9 leaves are circuits of threshold gates, one MLP per level or a
balanced circuit, whichever is ready first, where a wider table could take one, and a
balanced circuit's blocks follow its formula's shape, not the times its leaves are
ready, and nest one path's depth per light child (O(log² L) where weight-balanced blocks
would give O(log L)), so the bound is not the least depth over all restructurings either.
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
# Tree sizes (leaves, a shared gate counted at each use) are capped here: they only pick
# heavy children.
SIZE_CAP = 2**62
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


@dataclass(eq=False)
class Wire:
    """A gate of a balanced circuit (:meth:`Depth.value`), in the MLP after its inputs:
    ``and``/``or`` of two signals, or ``apply`` of ``(lo, hi, x)``, ``lo ∨ (hi ∧ x)``."""

    op: str  # "and" | "or" | "apply"
    inputs: tuple[Signal, ...]
    slot: int


# A bit of a balanced circuit: a constant, a literal or a wire.
Signal = bool | Lit | Wire
# A monotone map of one bit v, ``f(v) = lo ∨ (hi ∧ v)``, as ``(lo, hi) = (f(0), f(1))``.
Map = tuple[Signal, Signal]


@dataclass(frozen=True)
class Plan:
    """How a maximal formula is lowered (module docstring): ``kind`` is ``literal``,
    ``fused``, ``gate``, ``fused-table``, ``table``, ``circuit`` or ``balanced``;
    ``fresh`` is the fused comparison, ``wire`` the balanced circuit's output."""

    kind: str
    formula: Formula
    slot: int
    fresh: Lit | None = None
    wire: Signal | None = None


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


def _same(a: Signal, b: Signal) -> bool:
    """Whether two signals are one bit (the same wire, constant or literal)."""
    return a is b or (isinstance(a, Lit) and isinstance(b, Lit) and a == b)


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
        # balanced circuits (:meth:`value`), by ``id`` of their gates (kept alive by forms)
        self.sizes: dict[int, int] = {}
        self.splits: dict[int, tuple[Formula, tuple[Formula, ...]]] = {}
        self.lengths: dict[int, int] = {}
        self.values: dict[int, Signal] = {}
        self.blocks: dict[tuple[int, int, int], tuple[Map, tuple[Gate, int]]] = {}
        self.wires: dict[tuple[object, ...], Wire] = {}
        used = {n.name for d in program.definitions for n in walk(d.expr) if isinstance(n, BoolRef)}
        self.unused = {d.name for d in program.definitions} - used
        for definition in program.definitions:  # in order: references find theirs made
            self.nnf(definition.expr)  # formulas are planned when read (:meth:`slot`)

    # ------------------------------------------------------------------ formulas

    def resolve(self, node: Node) -> Node:
        """``node`` with references to definitions followed."""
        while isinstance(node, BoolRef | CountRef):
            node = self.defs[node.name]
        return node

    def nnf(self, node: Node) -> tuple[Formula, Formula]:
        """The negation normal forms of ``node`` and of its negation."""
        if node not in self.forms:
            self.walk(node)  # makes the forms of the formulas below it, then its own
        return self.forms[node]

    def is_formula(self, node: Node) -> bool:
        """Whether ``node`` is an and/or/not or a reference to one (planned, not a leaf)."""
        if isinstance(node, BoolRef):
            node = self.defs[node.name]
        return isinstance(node, Not | And | Or)

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
            late = [leaf for leaf in leaves if self.slot(leaf) == latest]
            if latest > 0 and len(late) == 1 and self.is_comparison(Lit(late[0], True)):
                plan = Plan("fused-table", formula, latest, Lit(late[0], True))
            else:
                plan = Plan("table", formula, next_slot(latest, attention=False))
        else:
            circuit = self.circuit_slot(formula)
            wire = self.value(formula)
            balanced = self.time(wire)
            if balanced < circuit:
                plan = Plan("balanced", formula, balanced, wire=wire)
            else:
                plan = Plan("circuit", formula, circuit)
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

    # ------------------------------------------------------------------ balanced circuits

    def time(self, item: Map | Signal) -> int:
        """The slot of a signal, or the latest of a map's two."""
        if isinstance(item, tuple):
            return max(self.time(item[0]), self.time(item[1]))
        if isinstance(item, Lit):
            return self.slot(item.node)
        return item.slot if isinstance(item, Wire) else 0

    def size(self, gate: Gate) -> int:
        """The leaves of ``gate`` as a tree (a shared gate counted at each use), capped at
        :data:`SIZE_CAP`; gates first met are measured children first."""
        stack = [gate]
        while stack:
            top = stack[-1]
            todo = [c for c in top.children if isinstance(c, Gate) and id(c) not in self.sizes]
            if id(top) in self.sizes or todo:
                stack.extend(todo) if todo else stack.pop()
                continue
            stack.pop()
            parts = (self.sizes[id(c)] if isinstance(c, Gate) else 1 for c in top.children)
            self.sizes[id(top)] = min(SIZE_CAP, sum(parts))
        return self.sizes[id(gate)]

    def split(self, gate: Gate) -> tuple[Formula, tuple[Formula, ...]]:
        """``gate``'s heavy child (its largest gate, else its latest literal), which
        continues its heavy path, and its other children, each a map on that path."""
        if id(gate) not in self.splits:
            gates = [c for c in gate.children if isinstance(c, Gate)]
            if gates:
                heavy: Formula = max(gates, key=self.size)
            else:  # only literals
                heavy = max([c for c in gate.children if isinstance(c, Lit)], key=self.time)
            others = tuple(c for c in gate.children if c is not heavy)
            self.splits[id(gate)] = (heavy, others)
        return self.splits[id(gate)]

    def length(self, gate: Gate) -> int:
        """The maps on ``gate``'s heavy path, from it down (one per other child)."""
        path: list[Gate] = []
        below: Formula = gate
        while isinstance(below, Gate) and id(below) not in self.lengths:
            path.append(below)
            below = self.split(below)[0]
        n = self.lengths[id(below)] if isinstance(below, Gate) else 0
        for top in reversed(path):
            n += len(self.split(top)[1])
            self.lengths[id(top)] = n
        return self.lengths[id(gate)]

    def below(self, at: tuple[Gate, int]) -> tuple[Gate, int] | None:
        """The map under map ``j`` of ``gate`` on their heavy path, None at its end."""
        gate, j = at
        if j > 0:
            return gate, j - 1
        heavy = self.split(gate)[0]
        return (heavy, len(self.split(heavy)[1]) - 1) if isinstance(heavy, Gate) else None

    def block(self, at: tuple[Gate, int], s: int) -> tuple[Map, tuple[Gate, int]]:
        """The composition of the 2^s maps from ``at`` down its heavy path, and the last
        of them. Maps are numbered from the path's end, and the blocks aligned there
        (the top one is numbered ``2^s·i + 2^s − 1``), so that the gates of one path
        share them: ``B(at, s) = B(at, s − 1) ∘ B(below, s − 1)``; a map of ``gate``'s
        child c is ``v ↦ v ∧ c``, ``(0, c)``, for an and, ``v ∨ c``, ``(c, 1)``, for an or."""
        key = (id(at[0]), at[1], s)
        if key not in self.blocks:
            if s == 0:
                gate, j = at
                child = self.split(gate)[1][j]
                bit = child if isinstance(child, Lit) else self.value(child)
                self.blocks[key] = ((False, bit) if gate.op == "and" else (bit, True)), at
            else:
                upper, end = self.block(at, s - 1)
                under = self.below(end)
                assert under is not None  # the block is aligned: 2^s maps lie below ``at``
                lower, last = self.block(under, s - 1)
                self.blocks[key] = self.compose(upper, lower), last
        return self.blocks[key]

    def value(self, gate: Gate) -> Signal:
        """``gate`` as a balanced circuit: its value is its heavy path's maps applied to
        the literal that ends it, ``f₁ ∘ f₂ ∘ … ∘ f_n (ℓ)``; the n maps are split into
        aligned blocks (:meth:`block`) by the binary digits of n (at most ⌊log₂ n⌋ + 1,
        the smallest on top), which :meth:`combine` joins. A block of 2^s maps is ready
        s MLPs after its maps, a light child's value (a subtree of at most half the
        leaves) in its own circuit before: ⌊log₂ n⌋ + 2 MLPs for a path of literals,
        O(log² L) for L leaves."""
        if id(gate) not in self.values:
            maps: list[Map] = []
            at: tuple[Gate, int] | None = (gate, len(self.split(gate)[1]) - 1)
            n, end = self.length(gate), gate
            while at is not None:
                s = (n & -n).bit_length() - 1  # the largest aligned block that ends at ``at``
                made, (end, j) = self.block(at, s)
                maps.append(made)
                n -= 1 << s
                at = self.below((end, j))
            last = self.split(end)[0]
            assert isinstance(last, Lit)
            self.values[id(gate)] = self.combine(maps, last)
        return self.values[id(gate)]

    def combine(self, maps: list[Map], bit: Signal) -> Signal:
        """``f₁ ∘ … ∘ f_k (bit)``, joining the two neighbours ready first (the lower on
        ties), one MLP each: ``f ∘ g = (f(g(0)), f(g(1)))``."""
        items: list[Map | Signal] = [*maps, bit]
        while len(items) > 1:
            times = [self.time(item) for item in items]
            k = min(range(len(items) - 1), key=lambda i: (max(times[i], times[i + 1]), -i))
            f, g = items[k], items[k + 1]
            assert isinstance(f, tuple)
            joined = self.compose(f, g) if isinstance(g, tuple) else self.apply(f, g)
            items[k : k + 2] = [joined]
        last = items[0]
        assert not isinstance(last, tuple)
        return last

    def compose(self, f: Map, g: Map) -> Map:
        """``f ∘ g``: ``(f(g(0)), f(g(1)))``."""
        return self.apply(f, g[0]), self.apply(f, g[1])

    def apply(self, f: Map, x: Signal) -> Signal:
        """``f(x) = lo ∨ (hi ∧ x)``: one wire, an and (``lo = 0``), an or (``hi = 1``) or
        an ``apply``; none where constants or repeated inputs decide it (``lo ≤ hi``: f
        is monotone)."""
        lo, hi = f
        if lo is True or hi is False or x is False or _same(x, lo) or _same(lo, hi):
            return lo
        if x is True or _same(x, hi):
            return hi  # lo ∨ hi = hi
        if lo is False:
            return x if hi is True else self.wire("and", (hi, x))
        return self.wire("or", (lo, x)) if hi is True else self.wire("apply", (lo, hi, x))

    def wire(self, op: str, inputs: tuple[Signal, ...]) -> Wire:
        """The wire ``op`` of ``inputs``, made once, in the MLP after them."""
        key = (op, *(id(x) if isinstance(x, Wire) else x for x in inputs))
        if key not in self.wires:
            slot = next_slot(max(self.time(x) for x in inputs), attention=False)
            self.wires[key] = Wire(op, inputs, slot)
        return self.wires[key]

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
        """The slot of ``node``: a formula's by its plan, made when first asked for (a
        formula read only by formulas is inlined in theirs, never planned alone)."""
        if node in self.slots:
            return self.slots[node]
        self.walk(node)
        if self.is_formula(node):
            return self.plan(self.defs[node.name] if isinstance(node, BoolRef) else node).slot
        return self.slots[node]

    def walk(self, node: Node) -> None:
        """Make the forms (:meth:`nnf`) of ``node``, of its operands and of the
        definitions it refers to, and the slots of those that are not formulas, operands
        first, with an explicit stack."""
        stack: list[tuple[Node, bool]] = [(node, False)]
        while stack:
            top, ready = stack.pop()
            if top in self.forms:
                continue
            if ready:
                self.forms[top] = self._forms(top)
                if not self.is_formula(top):
                    self.slots[top] = self._slot(top)
                continue
            stack.append((top, True))
            below = children(top)
            if isinstance(top, BoolRef | CountRef):
                below = (self.defs[top.name],)
            stack.extend((n, False) for n in below if n not in self.forms)

    def _slot(self, node: Node) -> int:
        """:meth:`slot` of ``node`` from those of its operands, already made."""
        match node:
            case BoolRef(name) | CountRef(name):
                return self.slot(self.defs[name])
            case CountConst(value=v):
                return 1 if v else 0
            case Count(arg, None):
                return next_slot(self.slot(arg), attention=True)
            case Count(arg, frozenset() as offsets):
                lookup = next_slot(self.slot(arg), attention=True)
                shifted = next_slot(lookup, attention=False) if self.mode == "relu" else lookup
                return max(
                    next_slot(shifted, attention=True)
                    if stop - start + 1 >= WINDOW_RUN
                    else next_slot(lookup, attention=False)
                    for start, stop in offset_runs(offsets)
                )
            case Compare(_, a, b):
                return next_slot(max(self.slot(a), self.slot(b), 1), attention=False)
            case Min(a, b) | Max(a, b):
                return next_slot(max(self.slot(a), self.slot(b)), attention=False)
            case Cond(c, a, b):
                return next_slot(max(self.slot(c), self.slot(a), self.slot(b)), attention=False)
        return max((self.slot(child) for child in children(node)), default=0)

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
