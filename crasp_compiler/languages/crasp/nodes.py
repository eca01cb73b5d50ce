"""The typed intermediate representation of C-RASP programs.

Two sorts: Booleans (``BoolExpr``) and integer counts (``CountExpr``). Each node is a
frozen dataclass; ``span`` points back into the source and is ignored by equality, so
two programs are equal when they mean the same thing structurally.

Positions ``i`` are counted from 0 over the input tokens. Every definition also has a
value on the *empty prefix* (position ``-1``, the BOS position of a transformer): there
token tests are false, every count is 0 and a periodic predicate takes its value at
``-1 mod m``. The empty string is accepted iff the acceptance output holds there.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from math import isqrt, lcm

from crasp_compiler.errors import Diagnostic, Span


class Sort(StrEnum):
    BOOL = "bool"
    COUNT = "count"


@dataclass(frozen=True)
class Node:
    """A node of either sort; ``span`` is where it was written (None when built in code)."""

    span: Span | None = field(default=None, compare=False, repr=False, kw_only=True)


class BoolExpr(Node):
    sort = Sort.BOOL


class CountExpr(Node):
    sort = Sort.COUNT


# ---------------------------------------------------------------- Booleans


@dataclass(frozen=True)
class TokenIs(BoolExpr):
    """``Q_a(i)``: the token at position i is ``symbol``."""

    symbol: str


@dataclass(frozen=True)
class BoolConst(BoolExpr):
    """``⊤`` or ``⊥``."""

    value: bool


@dataclass(frozen=True)
class Periodic(BoolExpr):
    """``i mod modulus ∈ residues``: a periodic positional predicate, in canonical form
    (smallest period, residues in ``range(modulus)``, neither empty nor complete)."""

    modulus: int
    residues: frozenset[int]

    @staticmethod
    def make(modulus: int, residues: frozenset[int]) -> BoolExpr:
        """Canonicalise; an empty or complete residue set becomes a constant."""
        residues = frozenset(r % modulus for r in residues)
        if not residues:
            return BoolConst(False)
        if len(residues) == modulus:
            return BoolConst(True)
        small = [d for d in range(1, isqrt(modulus) + 1) if modulus % d == 0]
        for period in sorted({*small, *(modulus // d for d in small)}):  # the divisors
            if all(((r + period) % modulus in residues) for r in residues):
                return Periodic(period, frozenset(r % period for r in residues))
        raise AssertionError("unreachable: modulus is always a period")

    def holds(self, position: int) -> bool:
        return position % self.modulus in self.residues

    def lift(self, modulus: int) -> frozenset[int]:
        """The residues modulo a multiple of this predicate's modulus."""
        return frozenset(r + k for k in range(0, modulus, self.modulus) for r in self.residues)


@dataclass(frozen=True)
class Not(BoolExpr):
    """``¬arg``."""

    arg: BoolExpr


@dataclass(frozen=True)
class And(BoolExpr):
    """``left ∧ right``."""

    left: BoolExpr
    right: BoolExpr


@dataclass(frozen=True)
class Or(BoolExpr):
    """``left ∨ right``."""

    left: BoolExpr
    right: BoolExpr


COMPARISONS = ("<=", "<", "==", "!=", ">=", ">")


@dataclass(frozen=True)
class Compare(BoolExpr):
    """``left op right`` between two counts; ``op`` is one of :data:`COMPARISONS`."""

    op: str
    left: CountExpr
    right: CountExpr


@dataclass(frozen=True)
class BoolRef(BoolExpr):
    """The Boolean defined earlier as ``name``, at the same position."""

    name: str


# ---------------------------------------------------------------- counts


@dataclass(frozen=True)
class Count(CountExpr):
    """``#[j <= i, ψ(i, j)] arg(j)``. ``offsets`` is None for ψ = ⊤ (all j ≤ i);
    otherwise ψ(i, j) holds iff ``i - j`` is in ``offsets`` (a local relation)."""

    arg: BoolExpr
    offsets: frozenset[int] | None = None


@dataclass(frozen=True)
class CountConst(CountExpr):
    """The integer constant ``value`` at every position."""

    value: int


@dataclass(frozen=True)
class Add(CountExpr):
    """``left + right``."""

    left: CountExpr
    right: CountExpr


@dataclass(frozen=True)
class Sub(CountExpr):
    """``left − right``."""

    left: CountExpr
    right: CountExpr


@dataclass(frozen=True)
class Scale(CountExpr):
    """``factor * arg`` for an integer constant ``factor``."""

    factor: int
    arg: CountExpr


@dataclass(frozen=True)
class Min(CountExpr):
    """``min(left, right)``."""

    left: CountExpr
    right: CountExpr


@dataclass(frozen=True)
class Max(CountExpr):
    """``max(left, right)``."""

    left: CountExpr
    right: CountExpr


@dataclass(frozen=True)
class Cond(CountExpr):
    """``cond ? then : orelse`` on counts."""

    cond: BoolExpr
    then: CountExpr
    orelse: CountExpr


@dataclass(frozen=True)
class CountRef(CountExpr):
    """The count defined earlier as ``name``, at the same position."""

    name: str


Expr = BoolExpr | CountExpr


def children(node: Node) -> tuple[Node, ...]:
    """The direct sub-expressions of a node, in source order."""
    match node:
        case Not(arg) | Count(arg) | Scale(_, arg):
            return (arg,)
        case (
            And(a, b) | Or(a, b) | Compare(_, a, b) | Add(a, b) | Sub(a, b) | Min(a, b) | Max(a, b)
        ):
            return (a, b)
        case Cond(c, t, e):
            return (c, t, e)
    return ()


def walk(node: Node) -> Iterator[Node]:
    """Every node of an expression, parents before children, in source order (with an
    explicit stack: no expression is too deep to walk)."""
    stack = [node]
    while stack:
        top = stack.pop()
        yield top
        stack.extend(reversed(children(top)))


def fold_periodic(op: str, parts: list[BoolExpr]) -> BoolExpr | None:
    """Combine periodic predicates with not (one part) or an and/or of any number of
    parts into one, or None if not all periodic."""
    periodic = [p for p in parts if isinstance(p, Periodic)]
    if len(periodic) < len(parts):
        return None
    modulus = lcm(*(p.modulus for p in periodic))
    sets = [p.lift(modulus) for p in periodic]
    everything = frozenset(range(modulus))
    if op == "not":
        return Periodic.make(modulus, everything - sets[0])
    if op == "and":
        return Periodic.make(modulus, everything.intersection(*sets))
    return Periodic.make(modulus, frozenset().union(*sets))


# ---------------------------------------------------------------- programs


@dataclass(frozen=True)
class Definition:
    """``name = expr``: one line of a program."""

    name: str
    expr: Expr
    span: Span | None = field(default=None, compare=False, repr=False)

    @property
    def sort(self) -> Sort:
        return self.expr.sort


@dataclass(frozen=True)
class Program:
    """A checked C-RASP program: definitions in order, alphabet, acceptance and outputs.

    ``accept`` names the Boolean that decides membership (None if the program only has
    named outputs); ``outputs`` lists every named output, ``accept`` included.
    """

    definitions: tuple[Definition, ...]
    alphabet: tuple[str, ...]
    accept: str | None
    outputs: tuple[str, ...]
    source: str | None = field(default=None, compare=False, repr=False)
    filename: str = field(default="<string>", compare=False, repr=False)
    # things worth a word that are not errors (e.g. a 0-indexed reading of paper notation)
    warnings: tuple[Diagnostic, ...] = field(default=(), compare=False, repr=False)
    # the alphabet's symbols declared by `range A..B`: standing in for an alphabet that
    # grows with the input (crasp_compiler.languages.crasp.theory)
    stand_in: tuple[str, ...] = ()
    _by_name: dict[str, Definition] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {d.name: d for d in self.definitions})

    def __getitem__(self, name: str) -> Definition:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.definitions)

    def nodes(self) -> Iterator[Node]:
        for definition in self.definitions:
            yield from walk(definition.expr)

    @property
    def uses_periodic(self) -> bool:
        return any(isinstance(n, Periodic) for n in self.nodes())

    @property
    def uses_local(self) -> bool:
        return any(isinstance(n, Count) and n.offsets is not None for n in self.nodes())

    @property
    def relation_class(self) -> str:
        """The C-RASP class by positional relations: ``C-RASP[∅]``, ``C-RASP[periodic]``,
        ``C-RASP[local]`` or ``C-RASP[periodic, local]``."""
        used = [c for c, on in (("periodic", self.uses_periodic), ("local", self.uses_local)) if on]
        return "C-RASP[" + (", ".join(used) if used else "∅") + "]"
