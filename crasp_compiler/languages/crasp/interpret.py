"""The reference interpreter: the semantics every compiled model is tested against.

Values are computed for all positions at once with numpy. Arrays are indexed by the
transformer position ``t = i + 1``: entry 0 is the empty prefix (BOS, position -1),
entry ``t`` is token position ``t - 1``. At the empty prefix token tests are false and
counts are 0; counts only ever range over token positions ``0 <= j <= i``.

Counts are exact integers. :func:`count_bound` bounds every count expression of a program
on inputs of length n — each definition and each sub-expression, those under comparisons,
min, max and conditionals included (``|# P| ≤ n``, ``|k·C| = |k|·|C|``, …); where that
bound fits in int64 the counts are int64 arrays, otherwise the whole batch is evaluated
with Python integers (object arrays), so no intermediate value ever wraps around.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from crasp_compiler.budget import require_memory
from crasp_compiler.errors import CraspError, Diagnostic, spacing_hint
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
    Sort,
    Sub,
    TokenIs,
    children,
)

_COMPARE = {
    "<=": np.less_equal,
    "<": np.less,
    "==": np.equal,
    "!=": np.not_equal,
    ">=": np.greater_equal,
    ">": np.greater,
}


def check_tokens(program: Program, tokens: Sequence[str]) -> None:
    """Raise :class:`CraspError` naming the first token outside the alphabet."""
    alphabet = set(program.alphabet)
    for position, token in enumerate(tokens):
        if token not in alphabet:
            shown = ", ".join(repr(s) for s in program.alphabet)
            hint = spacing_hint(token, program.alphabet)
            raise CraspError(
                [
                    Diagnostic(
                        f"token {token!r} at position {position} is not in the alphabet "
                        f"{{{shown}}}",
                        hint=hint,
                    )
                ],
                filename="input",
            )


@dataclass(frozen=True)
class Trace:
    """Every definition's value at every position of one input.

    ``values[name][t]`` is the value after the first ``t`` tokens (``t = 0``: empty
    prefix). Booleans are ``bool`` arrays, counts ``int64`` arrays (object arrays of
    Python integers where int64 could overflow), each of length n + 1.
    """

    program: Program
    tokens: tuple[str, ...]
    values: dict[str, np.ndarray]

    def at(self, name: str, position: int) -> bool | int:
        """The value of ``name`` at token position ``position`` (``-1``: empty prefix)."""
        array = self.values[name]
        value = array[position + 1]
        return bool(value) if array.dtype == bool else int(value)

    def output(self, name: str) -> np.ndarray:
        return self.values[name]

    @property
    def accepted(self) -> bool:
        """Whether the acceptance output holds at the last position (the empty prefix
        for the empty string)."""
        if self.program.accept is None:
            raise CraspError("the program has no acceptance output; it only has named outputs")
        return bool(self.values[self.program.accept][-1])


# Counts bounded by this are evaluated in int64 (every intermediate of a definition is
# bounded by the definition's bound, and sums of two such values stay below 2^63).
INT64_SAFE = 1 << 61


def count_bound(program: Program, length: int) -> int:
    """A bound on ``|value|`` of every count expression of the program — definitions and
    every sub-expression, under comparisons, min, max and conditionals included — at every
    position of an input of ``length`` tokens (Python integers). Where it is at most
    :data:`INT64_SAFE` every intermediate of the evaluation fits in int64."""
    bounds: dict[Node, int] = {}
    defined: dict[str, int] = {}

    def bound(node: Node) -> int:
        if node in bounds:
            return bounds[node]
        inner = [bound(child) for child in children(node)]
        match node:
            case Count(_, offsets):
                value = length if offsets is None else min(length, len(offsets))
            case CountConst(value=v):
                value = abs(v)
            case CountRef(name) | BoolRef(name):
                value = defined[name]
            case Add() | Sub():
                value = inner[0] + inner[1]
            case Scale(factor, _):
                # a factor multiplies even an empty input's zeros: it must fit too
                value = abs(factor) * max(inner[0], 1)
            case Min() | Max():
                value = max(inner)
            case Cond():
                value = max(inner[1:])
            case _:  # a Boolean: 0 or 1
                value = 1
        bounds[node] = value
        return value

    for definition in program.definitions:
        defined[definition.name] = bound(definition.expr)
    return max(bounds.values(), default=0)


class _Evaluator:
    """Evaluates expressions on a batch of equal-length inputs: arrays of shape (B, n + 1).

    ``exact_ints``: counts are Python integers (object arrays) instead of int64."""

    def __init__(
        self,
        program: Program,
        batch: Sequence[Sequence[str]],
        length: int,
        exact_ints: bool = False,
    ) -> None:
        self.int_type: type = object if exact_ints else np.int64
        index = {s: k for k, s in enumerate(program.alphabet)}
        ids = np.full((len(batch), length + 1), -1, dtype=np.int64)
        for row, tokens in enumerate(batch):
            ids[row, 1:] = [index[s] for s in tokens]
        self.ids = ids
        self.index = index
        self.positions = np.arange(-1, length, dtype=np.int64)
        self.values: dict[str, np.ndarray] = {}

    def eval(self, node: Node) -> np.ndarray:
        shape = self.ids.shape
        size = shape[1]
        value: np.ndarray
        match node:
            case TokenIs(symbol):
                value = self.ids == self.index[symbol]
            case BoolConst(constant):
                value = np.full(shape, constant, dtype=bool)
            case Periodic(modulus, residues):
                row = np.isin(self.positions % modulus, list(residues))
                value = np.broadcast_to(row, shape)
            case Not(arg):
                value = ~self.eval(arg)
            case And(a, b):
                value = self.eval(a) & self.eval(b)
            case Or(a, b):
                value = self.eval(a) | self.eval(b)
            case Compare(op, a, b):
                value = _COMPARE[op](self.eval(a), self.eval(b))
            case BoolRef(name) | CountRef(name):
                value = self.values[name]
            case Count(arg, offsets):
                held = self.eval(arg).astype(np.int64)
                held[:, 0] = 0  # the empty prefix is not a token position
                if offsets is None:
                    value = np.cumsum(held, axis=1).astype(self.int_type)
                else:
                    out = np.zeros(shape, dtype=np.int64)
                    for d in offsets:
                        if d < size - 1:
                            out[:, d + 1 :] += held[:, 1 : size - d]
                    value = out.astype(self.int_type)
            case CountConst(constant):
                value = np.full(shape, constant, dtype=self.int_type)
            case Add(a, b):
                value = self.eval(a) + self.eval(b)
            case Sub(a, b):
                value = self.eval(a) - self.eval(b)
            case Scale(factor, arg):
                value = factor * self.eval(arg)
            case Min(a, b):
                value = np.minimum(self.eval(a), self.eval(b))
            case Max(a, b):
                value = np.maximum(self.eval(a), self.eval(b))
            case Cond(c, a, b):
                value = np.where(self.eval(c), self.eval(a), self.eval(b))
            case _:  # pragma: no cover
                raise TypeError(f"not an IR node: {node!r}")
        return value


def interpreter_bytes(program: Program, batch: int, length: int, exact_ints: bool) -> int:
    """The bytes :func:`interpret_batch` holds at its peak, estimated before it starts:
    ``B·(n + 1)`` positions times 8 (the token ids) plus, per definition, 8 (a count) or 1
    (a Boolean), plus 32 for the temporaries of the expression being evaluated; five
    times that where counts are Python integers (an object pointer and the integer)."""
    per_position = 40 + sum(1 if d.sort == Sort.BOOL else 8 for d in program.definitions)
    return batch * (length + 1) * per_position * (5 if exact_ints else 1)


def interpret_batch(
    program: Program,
    batch: Sequence[Sequence[str]],
    overrides: Mapping[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Evaluate every definition on a batch of inputs of one length n.

    Returns, per definition, an array of shape (len(batch), n + 1) indexed like
    :attr:`Trace.values`. ``overrides`` (name → such an array) replaces those
    definitions' values, and every later definition reads the replacement: the
    program's answer to an intervention on a variable (interchange interventions).
    """
    overrides = overrides or {}
    unknown = sorted(set(overrides) - {d.name for d in program.definitions})
    if unknown:
        raise ValueError(f"no definition named {', '.join(unknown)}")
    lengths = {len(tokens) for tokens in batch}
    if len(lengths) > 1:
        raise ValueError("interpret_batch needs inputs of one length")
    for tokens in batch:
        check_tokens(program, tokens)
    length = lengths.pop() if lengths else 0
    exact_ints = count_bound(program, length) > INT64_SAFE
    require_memory(
        interpreter_bytes(program, len(batch), length, exact_ints),
        f"interpreting the program on {len(batch):,} input{'s' * (len(batch) != 1)} of "
        f"length {length:,}",
        program.filename,
    )
    evaluator = _Evaluator(program, batch, length, exact_ints)
    for definition in program.definitions:
        if definition.name in overrides:
            value = overrides[definition.name]
            if np.shape(value) != (len(batch), length + 1):
                raise ValueError(
                    f"override of {definition.name} has shape {np.shape(value)}, "
                    f"not {(len(batch), length + 1)}"
                )
        else:
            value = evaluator.eval(definition.expr)
        dtype = bool if definition.sort == Sort.BOOL else evaluator.int_type
        evaluator.values[definition.name] = np.array(value, dtype=dtype)
    return evaluator.values


def interpret(program: Program, tokens: Sequence[str]) -> Trace:
    """Evaluate every definition at every position of ``tokens``."""
    tokens = tuple(tokens)
    values = interpret_batch(program, [tokens])
    return Trace(program, tokens, {name: value[0] for name, value in values.items()})


def accepts(program: Program, tokens: Sequence[str]) -> bool:
    """Whether the program accepts the string: its acceptance output at the last position."""
    return interpret(program, tokens).accepted
