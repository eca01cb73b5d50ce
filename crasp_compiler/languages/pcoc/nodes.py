"""The PCOC IR: programs of machines, memory slots and rounds.

A program describes ``n`` machines ``0..n-1`` (n is given at compile time). Each machine
holds named memory *slots* of real numbers. Execution is a sequence of *rounds*; in
every round each machine

1. **receives**: every ``Receive`` reads, from the memory as it stood at the start of the
   round, slot ``slot`` of machine ``source(i, r, n)``; a source outside ``0..n-1`` gives
   ``default``. All receives of a round happen simultaneously;
2. **computes locally**: the statements run in order; an assignment to a slot updates the
   memory at once (later statements of the round see it); an assignment to any other
   name makes a round-local temporary. Received names are round-local too.

Two kinds of expression:

- *static* (:class:`StaticExpr`): integers known at compile time — numbers, the machine
  index ``i``, the round number ``r`` (0-based over all rounds after unrolling), ``n``,
  loop variables, ``+ - * // % **``, ``log2`` (exact, n must be a power of two) and
  ``ceil_log2``, comparisons and ``and / or / not``. Used for sources, loop bounds and
  per-machine conditions;
- *data* (:class:`Expr`): real numbers per machine — constants, slots, temporaries,
  received values, static expressions (a per-machine constant), ``+ −``, multiplication
  by a constant, ``min max abs relu clamp``, comparisons (0/1) with a declared margin,
  and conditionals on a static condition or on a data comparison.

Slots declare a bound ``|value| ≤ bound`` where exactness needs one (gating by big-M);
a data comparison ``a > b margin m`` is exact when ``a − b`` is never in ``(0, m)``
(``>``/``<=``), ``(−m, 0)`` (``<``/``>=``) or ``(−m, m)∖{0}`` (``==``/``!=``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from crasp_compiler.errors import Span


@dataclass(frozen=True)
class Node:
    """The base of every IR node (not :class:`Program`): ``span``, where the node is in
    the source (None for nodes the compiler makes), takes no part in equality."""

    span: Span | None = field(default=None, compare=False, repr=False, kw_only=True)


# ------------------------------------------------------------------ static expressions


@dataclass(frozen=True)
class SNum(Node):
    value: int


@dataclass(frozen=True)
class SVar(Node):
    """``i``, ``r``, ``n`` or a loop variable."""

    name: str


@dataclass(frozen=True)
class SBin(Node):
    """``+ - * // % **`` and comparisons ``< <= > >= == !=`` (giving 0/1), ``and``/``or``."""

    op: str
    left: StaticExpr
    right: StaticExpr


@dataclass(frozen=True)
class SNot(Node):
    arg: StaticExpr


@dataclass(frozen=True)
class SCall(Node):
    """``log2(x)`` (x a power of two) or ``ceil_log2(x)``, ``min``/``max`` of two."""

    fn: str
    args: tuple[StaticExpr, ...]


StaticExpr = SNum | SVar | SBin | SNot | SCall
# For isinstance: whether an expression is static.
STATIC_TYPES = (SNum, SVar, SBin, SNot, SCall)

# ------------------------------------------------------------------ data expressions


@dataclass(frozen=True)
class Num(Node):
    value: float


@dataclass(frozen=True)
class Read(Node):
    """A slot, a round-local temporary or a received value."""

    name: str


@dataclass(frozen=True)
class Static(Node):
    """A static expression used as data: a per-machine constant (e.g. ``i``)."""

    expr: StaticExpr


@dataclass(frozen=True)
class Add(Node):
    """``left + right``. ``exclusive`` (set by the compiler's own lowerings, never by the
    parser): of the data selections ``if c then … else …`` among the terms of this chain
    of ``+``, at most one condition holds on any machine (a compaction slot,
    :mod:`crasp_compiler.languages.pcoc.benes`); the interpreter checks it with its other
    promises, and the rounding analysis counts one selected term."""

    left: Expr
    right: Expr
    exclusive: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class Sub(Node):
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Scale(Node):
    """Multiplication by a constant ``factor``."""

    factor: float
    arg: Expr


@dataclass(frozen=True)
class Call(Node):
    """``min(a, b)``, ``max(a, b)``, ``abs(a)``, ``relu(a)``, ``clamp(a, lo, hi)``
    (lo, hi constants)."""

    fn: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Compare(Node):
    """``left op right`` as 1.0/0.0; ``margin`` as in the module docstring."""

    op: str
    left: Expr
    right: Expr
    margin: float


@dataclass(frozen=True)
class IfExpr(Node):
    """``then if cond else otherwise``; ``cond`` is a :class:`Compare` (data) or a static
    expression (per machine, per round)."""

    cond: Compare | StaticExpr
    then: Expr
    otherwise: Expr


Expr = Num | Read | Static | Add | Sub | Scale | Call | Compare | IfExpr

# ------------------------------------------------------------------ statements


@dataclass(frozen=True)
class Assign(Node):
    target: str
    expr: Expr


@dataclass(frozen=True)
class If(Node):
    """``if cond { then } else { otherwise }``: a static condition selects per machine and
    round; a data condition (:class:`Compare`) selects per assigned name."""

    cond: Compare | StaticExpr
    then: tuple[Stmt, ...]
    otherwise: tuple[Stmt, ...]


Stmt = Assign | If


@dataclass(frozen=True)
class Receive(Node):
    """``target = recv slot from source default value``."""

    target: str
    slot: str
    source: StaticExpr
    default: float


@dataclass(frozen=True)
class Send(Node):
    """``t₁, …, t_c = send slot to dest default value``: every machine i sends ``slot``
    to machine ``dest`` (a slot holding an integer); on machine j, ``t_k`` is the value
    sent by the k-th lowest-numbered machine that sends to j, or ``default`` when fewer
    than k do. ``c`` (the number of targets) is the receiver's capacity: more than ``c``
    senders to one machine are an error (the general MPC round of Lemma B.1: every send
    statement of a round is one word a machine sends, ``c`` the words it may receive of
    it). A ``dest`` outside ``0..n-1`` sends nothing. Reads the memory at the start of
    the round. Lowered to fixed-pattern rounds by
    :mod:`crasp_compiler.languages.pcoc.benes`."""

    targets: tuple[str, ...]
    slot: str
    dest: str
    default: float

    @property
    def capacity(self) -> int:
        """How many senders one machine may receive from."""
        return len(self.targets)

    def text(self) -> str:
        """The statement as written, in backquotes, for messages."""
        return f"`{', '.join(self.targets)} = send {self.slot} to {self.dest}`"


@dataclass(frozen=True)
class Round(Node):
    receives: tuple[Receive, ...]
    body: tuple[Stmt, ...]
    sends: tuple[Send, ...] = ()


@dataclass(frozen=True)
class For(Node):
    """``for var in start .. stop { rounds }``: ``stop`` exclusive, unrolled at compile
    time."""

    var: str
    start: StaticExpr
    stop: StaticExpr
    body: tuple[Round | For, ...]


@dataclass(frozen=True)
class Slot(Node):
    """A memory slot: ``init`` (0 unless an input), ``bound`` on ``|value|`` or None.

    The compiler relies on the bound of an input slot (the runtimes check the inputs);
    the bound of any other slot of a program is a promise the interpreter checks with
    ``check_promises``, never an assumption of a compiled model. ``made``: a slot the
    compiler made (the routing of a send), whose bound holds by construction; ``carries``: the
    slot whose values (at the start of the round) such a slot holds, or 0."""

    name: str
    bound: float | None = None
    init: float = 0.0
    made: bool = False
    carries: str | None = None


@dataclass(frozen=True)
class Program:
    """``inputs``: slots read from the input vectors (one number per machine each, in
    order); ``outputs``: slots printed after the last round."""

    slots: tuple[Slot, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    rounds: tuple[Round | For, ...]
    source: str = ""
    filename: str = "<program>"

    def slot(self, name: str) -> Slot:
        for slot in self.slots:
            if slot.name == name:
                return slot
        raise KeyError(name)


# ------------------------------------------------------------------ source spans


def span_of(node: Node) -> Span | None:
    """Where ``node`` is in the source (its ``span``; None for nodes the compiler makes)."""
    return node.span
