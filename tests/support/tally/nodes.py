"""The IR of Tally programs: every node keeps its source span; printing gives the source
form back (normalised spacing).

A :class:`Sum` is ``Σ coefficient · atom`` over the atoms ``count(a)`` (how many of the
prefix's tokens are ``a``), ``length`` (how many tokens the prefix has) and constants. A
:class:`Rule` compares two sums; :func:`threshold` rewrites it as one integer form ``Z``
tested against 0, which is what the lowering compiles (the interpreter compares the two
sums as written).
"""

from __future__ import annotations

from dataclasses import dataclass

from crasp_compiler.errors import Span

OPERATORS = (">=", "<=", "!=", ">", "<", "=")


@dataclass(frozen=True)
class Count:
    """``count(symbol)``: the occurrences of ``symbol`` in the prefix."""

    symbol: str
    span: Span  # of the symbol


@dataclass(frozen=True)
class Length:
    """``length``: the number of tokens in the prefix."""

    span: Span


@dataclass(frozen=True)
class Term:
    """``coefficient · atom``; the constant ``coefficient`` when ``atom`` is None."""

    coefficient: int
    atom: Count | Length | None
    span: Span


@dataclass(frozen=True)
class Sum:
    terms: tuple[Term, ...]
    span: Span


@dataclass(frozen=True)
class Rule:
    """``name: left op right``."""

    name: str
    left: Sum
    op: str
    right: Sum
    span: Span  # of the comparison
    name_span: Span


@dataclass(frozen=True)
class Program:
    """A checked program: its symbols (the alphabet, in order), its rules (the outputs, in
    order), the rule ``accept`` names (None: no verdict) and the ``margin`` it was loaded
    with."""

    symbols: tuple[str, ...]
    rules: tuple[Rule, ...]
    accept: str | None
    margin: int
    source: str
    filename: str

    @property
    def outputs(self) -> list[str]:
        """The output names: one per rule (what a model's header check compares)."""
        return [rule.name for rule in self.rules]


@dataclass(frozen=True)
class Threshold:
    """A rule as ``test(Z)`` for the integer ``Z = Σ_a counts[a]·count(a) + length·t +
    constant``: ``ge`` is Z ≥ 0, ``gt`` Z > 0, ``eq`` Z = 0, ``ne`` Z ≠ 0."""

    counts: tuple[tuple[str, int], ...]  # nonzero coefficients, in symbol order
    length: int
    constant: int
    test: str


# op -> (sign of left − right in Z, test, whether the margin is subtracted)
_TESTS = {
    ">": (1, "gt", True),
    ">=": (1, "ge", False),
    "<": (-1, "gt", True),
    "<=": (-1, "ge", False),
    "=": (1, "eq", False),
    "!=": (1, "ne", False),
}


def threshold(rule: Rule, margin: int, symbols: tuple[str, ...]) -> Threshold:
    """``rule`` as a test of ``Z = ±(left − right) − margin·[strict]`` (see
    :class:`Threshold`): ``L > R`` is ``L − R − K > 0``, ``L < R`` is ``R − L − K > 0``."""
    sign, test, strict = _TESTS[rule.op]
    counts = dict.fromkeys(symbols, 0)
    length = constant = 0
    for side, factor in ((rule.left, sign), (rule.right, -sign)):
        for term in side.terms:
            c = factor * term.coefficient
            if isinstance(term.atom, Count):
                counts[term.atom.symbol] += c
            elif isinstance(term.atom, Length):
                length += c
            else:
                constant += c
    constant -= margin if strict else 0
    nonzero = tuple((a, c) for a, c in counts.items() if c)
    return Threshold(nonzero, length, constant, test)


def format_term(term: Term) -> str:
    """The term without its sign."""
    size = abs(term.coefficient)
    if term.atom is None:
        return str(size)
    atom = "length" if isinstance(term.atom, Length) else f"count({term.atom.symbol})"
    return atom if size == 1 else f"{size} * {atom}"


def format_sum(value: Sum) -> str:
    parts = []
    for k, term in enumerate(value.terms):
        sign = "-" if term.coefficient < 0 else "+"
        if k == 0:
            parts.append(("-" if sign == "-" else "") + format_term(term))
        else:
            parts.append(f"{sign} {format_term(term)}")
    return " ".join(parts)


def format_rule(rule: Rule) -> str:
    """``left op right`` as source text."""
    return f"{format_sum(rule.left)} {rule.op} {format_sum(rule.right)}"
