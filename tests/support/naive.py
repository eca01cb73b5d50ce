"""A second evaluator of C-RASP, written straight from the definition.

It is deliberately unlike :mod:`crasp_compiler.languages.crasp.interpret`: no numpy, one position
at a time, each node evaluated recursively at that position, and every count an
explicit loop over the positions ``j`` in ``0..i`` that checks the relation
(``i - j`` in the offsets). It is slow (a count nested k deep costs n^k) and meant
only as an oracle on short inputs.

Values are returned as lists indexed like the interpreter's arrays: entry ``t`` is
position ``i = t - 1`` (entry 0 is the empty prefix, position -1).
"""

from __future__ import annotations

from collections.abc import Sequence

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
)


def _compare(op: str, a: int, b: int) -> bool:
    if op == "<=":
        return a <= b
    if op == "<":
        return a < b
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    if op == ">=":
        return a >= b
    if op == ">":
        return a > b
    raise ValueError(f"unknown comparison {op!r}")


class NaiveEvaluator:
    """Evaluates one program on one input, position by position."""

    def __init__(self, program: Program, tokens: Sequence[str]) -> None:
        for position, token in enumerate(tokens):
            if token not in program.alphabet:
                raise ValueError(f"token {token!r} at position {position} is not in the alphabet")
        self.program = program
        self.tokens = list(tokens)
        self.values: dict[str, list[bool | int]] = {}

    def run(self) -> dict[str, list[bool | int]]:
        for definition in self.program.definitions:
            self.values[definition.name] = [
                self.at(definition.expr, i) for i in range(-1, len(self.tokens))
            ]
        return self.values

    def at(self, node: Node, i: int) -> bool | int:
        """The value of ``node`` at position ``i`` (``-1``: the empty prefix)."""
        match node:
            case TokenIs(symbol):
                return i >= 0 and self.tokens[i] == symbol
            case BoolConst(value):
                return value
            case Periodic(modulus, residues):
                # i ≡ r (mod m) for some residue r: m divides i - r.
                return any((i - r) % modulus == 0 for r in residues)
            case Not(arg):
                return not self.at(arg, i)
            case And(a, b):
                return self.at(a, i) and self.at(b, i)
            case Or(a, b):
                return self.at(a, i) or self.at(b, i)
            case Compare(op, a, b):
                return _compare(op, self.at(a, i), self.at(b, i))
            case BoolRef(name) | CountRef(name):
                return self.values[name][i + 1]
            case Count(arg, offsets):
                total = 0
                for j in range(0, i + 1):
                    related = offsets is None or (i - j) in offsets
                    if related and self.at(arg, j):
                        total += 1
                return total
            case CountConst(value):
                return value
            case Add(a, b):
                return self.at(a, i) + self.at(b, i)
            case Sub(a, b):
                return self.at(a, i) - self.at(b, i)
            case Scale(factor, arg):
                return factor * self.at(arg, i)
            case Min(a, b):
                return min(self.at(a, i), self.at(b, i))
            case Max(a, b):
                return max(self.at(a, i), self.at(b, i))
            case Cond(c, a, b):
                return self.at(a, i) if self.at(c, i) else self.at(b, i)
        raise TypeError(f"not an IR node: {node!r}")


def naive_values(program: Program, tokens: Sequence[str]) -> dict[str, list[bool | int]]:
    """Every definition's value at positions -1 .. n-1 (list index t = i + 1)."""
    return NaiveEvaluator(program, tokens).run()


def naive_accepts(program: Program, tokens: Sequence[str]) -> bool:
    """Whether the acceptance Boolean holds at the last position (-1 for the empty string)."""
    if program.accept is None:
        raise ValueError("the program has no acceptance output")
    return bool(naive_values(program, tokens)[program.accept][-1])
