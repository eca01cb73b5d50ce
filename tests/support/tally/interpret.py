"""The reference semantics of Tally, in exact integer arithmetic.

On tokens ``w_1 … w_n`` the prefix of length t (t = 0 … n, the empty prefix first) has
``count(a) = #{s ≤ t : w_s = a}`` and ``length = t``. A sum is evaluated term by term;
a rule holds at t when its comparison does, a strict one with the program's margin K:
``L > R`` when ``L > R + K``, ``L < R`` when ``L + K < R``; the others as written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from crasp_compiler.errors import CraspError
from tests.support.tally.nodes import Count, Length, Program, Rule, Sum


def value(total: Sum, counts: Mapping[str, int], length: int) -> int:
    """The sum's value at a prefix with these counts and this length."""
    out = 0
    for term in total.terms:
        if isinstance(term.atom, Count):
            out += term.coefficient * counts[term.atom.symbol]
        elif isinstance(term.atom, Length):
            out += term.coefficient * length
        else:
            out += term.coefficient
    return out


def holds(rule: Rule, margin: int, counts: Mapping[str, int], length: int) -> bool:
    """Whether ``rule`` holds at a prefix with these counts and this length."""
    left, right = value(rule.left, counts, length), value(rule.right, counts, length)
    return {
        ">": left > right + margin,
        ">=": left >= right,
        "<": left + margin < right,
        "<=": left <= right,
        "=": left == right,
        "!=": left != right,
    }[rule.op]


@dataclass(frozen=True)
class Run:
    """One input's trace: every count and every rule at every prefix (``ε`` first)."""

    tokens: list[str]
    counts: dict[str, list[int]]
    values: dict[str, list[bool]]
    accept: str | None

    @property
    def accepted(self) -> bool | None:
        """The verdict: the accept rule on the whole input (None: no accept rule)."""
        return None if self.accept is None else self.values[self.accept][-1]


def run(program: Program, tokens: Sequence[str]) -> Run:
    """``program`` on ``tokens`` (CraspError for a token that is not a symbol)."""
    for position, token in enumerate(tokens):
        if token not in program.symbols:
            raise CraspError(
                f"token {token!r} at position {position} is not a symbol of the program "
                f"(symbols: {' '.join(program.symbols)})",
                filename="input",
            )
    counts = dict.fromkeys(program.symbols, 0)
    history: dict[str, list[int]] = {a: [0] for a in program.symbols}
    values = {rule.name: [holds(rule, program.margin, counts, 0)] for rule in program.rules}
    for t, token in enumerate(tokens, start=1):
        counts[token] += 1
        for a in program.symbols:
            history[a].append(counts[a])
        for rule in program.rules:
            values[rule.name].append(holds(rule, program.margin, counts, t))
    return Run(list(tokens), history, values, program.accept)
