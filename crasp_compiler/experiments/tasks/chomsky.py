"""The 15 tasks of the Chomsky-hierarchy benchmark (Delétang et al. 2023) as used by
Ruoss, Delétang et al. (2023), "Randomized Positional Encodings".

Generators follow the benchmark's released code (digest
``randomized-positional-encodings.md`` §2): the same distributions, special cases for
short inputs and output formats, drawn from a ``numpy.random.Generator``. LEN is the task
input length n; training lengths are 1..40 (``train_max`` 40), tests go beyond.

Input construction (§3.2): the model (a non-causal encoder, ``encoder=True``) reads the
task input ``x_1 .. x_n`` followed by one query token :data:`QUERY` (the paper's ∅) per
output position, and is scored at the query positions only (target ``None`` on the
input). Classification tasks have one query token. Stack manipulation and binary
addition / multiplication end their output with the terminator label :data:`EOS` and pad
it with zeros up to the output length; the padding positions are not scored (target
``None``), as the benchmark's accuracy mask counts only positions up to the first
terminator (its training loss also covers the padding zeros).

Tokens are the benchmark's symbols as strings: bits and digits ``"0" ..``, operators
``+ - * ( ) x =``, stack actions ``POP PUSH0 PUSH1``, cycle moves ``-1 0 +1``, the hole
``_`` and the pad ``#`` of missing duplicate. Labels are the output classes as strings.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from itertools import pairwise
from typing import ClassVar

import numpy as np

from crasp_compiler.experiments.tasks.base import Example, SequenceTask

QUERY = "?"  # the empty output token ∅ of the benchmark's input construction
EOS = "EOS"  # the terminator label of stack manipulation and binary addition/multiplication
MODULUS = 5
TRAIN_MAX = 40

BITS = ("0", "1")
DIGITS = tuple(str(d) for d in range(MODULUS))
STACK_ACTIONS = ("POP", "PUSH0", "PUSH1")
CYCLE_MOVES = {"-1": -1, "0": 0, "+1": 1}
HOLE, PAD = "_", "#"
OPERATORS = ("+", "-", "*")
BRACKETS = ("(", ")")

Generator = Callable[[np.random.Generator, int], tuple[list[str], Sequence[str | None]]]


@dataclass
class ChomskyTask(SequenceTask):
    """A benchmark task: ``generator(rng, n)`` gives the input symbols and the output
    labels (``None`` for unscored padding); :meth:`sample` appends one :data:`QUERY`
    token per output position. ``level``: R (regular), DCF (deterministic context-free)
    or CS (context-sensitive); ``permutation_invariant``: the paper's †."""

    level: str = "R"
    permutation_invariant: bool = False
    # results also give per-token accuracy (over output positions; chance is 1/|labels|),
    # the randomized-PE paper's measure, next to whole-sequence accuracy
    per_position_metrics: ClassVar[bool] = True
    _: KW_ONLY  # required, so keyword-only after the fields with defaults
    generator: Generator = field(repr=False)
    output_length_of: Callable[[int], int] = field(repr=False)

    def output_length(self, length: int) -> int:
        """The number of output (query) positions for an input of LEN ``length``."""
        return self.output_length_of(length)

    def sample(self, rng: np.random.Generator, length: int) -> Example:
        if length < self.min_length:
            raise ValueError(f"task {self.name!r} needs LEN >= {self.min_length}, not {length}")
        inputs, outputs = self.generator(rng, length)
        tokens = (*inputs, *[QUERY] * len(outputs))
        targets = (*[None] * len(inputs), *outputs)
        return Example(tokens, targets, length)


# ------------------------------------------------------------------ helpers


def _bits(rng: np.random.Generator, count: int) -> list[str]:
    return [str(b) for b in rng.integers(0, 2, size=count)]


def _positive(rng: np.random.Generator, width: int) -> int:
    """An integer uniform in [1, 2**width − 1] (any width: uniform bits, all-zero rejected)."""
    while True:
        value = int("".join(_bits(rng, width)), 2)
        if value:
            return value


def _little_endian(value: int, width: int = 0) -> list[str]:
    """``value`` in binary, least significant bit first, zero-padded to ``width`` bits
    (no padding for width 0: ``"0"`` for 0)."""
    return list(f"{value:b}".zfill(width)[::-1])


def _terminated(result: list[str], total: int) -> list[str | None]:
    """``result``, the terminator, then unscored padding up to ``total`` positions."""
    return [*result, EOS, *[None] * (total - len(result) - 1)]


# ------------------------------------------------------------------ regular


def even_pairs(rng: np.random.Generator, n: int) -> tuple[list[str], list[str | None]]:
    """Bits; label: the number of neighbouring pairs that differ, mod 2 (0 = even)."""
    x = _bits(rng, n)
    changes = sum(a != b for a, b in pairwise(x))
    return x, [str(changes % 2)]


def modular_arithmetic(rng: np.random.Generator, n: int) -> tuple[list[str], list[str | None]]:
    """Digits 0–4 alternating with operators from {+, −, *} (length n, or n − 1 when n is
    even); label: the value mod 5 with ``*`` before ``+``/``−``."""
    if n % 2 == 0:
        n -= 1
    digits = rng.integers(0, MODULUS, size=n // 2 + 1)
    ops = [OPERATORS[k] for k in rng.integers(0, 3, size=n // 2)]
    tokens = [str(digits[0])]
    for op, digit in zip(ops, digits[1:], strict=True):
        tokens += [op, str(digit)]
    # sum of products; a − b is a + (−b)
    total, term = 0, int(digits[0])
    for op, digit in zip(ops, digits[1:], strict=True):
        if op == "*":
            term = term * int(digit) % MODULUS
        else:
            total += term
            term = int(digit) if op == "+" else -int(digit)
    return tokens, [str((total + term) % MODULUS)]


def parity_check(rng: np.random.Generator, n: int) -> tuple[list[str], list[str | None]]:
    """Bits; label: the number of 1s mod 2."""
    x = _bits(rng, n)
    return x, [str(x.count("1") % 2)]


def cycle_navigation(rng: np.random.Generator, n: int) -> tuple[list[str], list[str | None]]:
    """Moves −1 / 0 / +1 on a cycle of 5 states from state 0; label: the final state."""
    names = list(CYCLE_MOVES)
    moves = [names[k] for k in rng.integers(0, 3, size=n)]
    return moves, [str(sum(CYCLE_MOVES[m] for m in moves) % MODULUS)]


# ------------------------------------------------------------------ deterministic context-free


def stack_manipulation(rng: np.random.Generator, n: int) -> tuple[list[str], list[str | None]]:
    """A stack of s ~ U{1..n−1} random bits (bottom to top), then n − s actions POP,
    PUSH0, PUSH1 (POP on an empty stack does nothing); output: the final stack top to
    bottom, the terminator, padding to n + 1. For n = 1 the input is one bit."""
    if n == 1:
        bit = _bits(rng, 1)
        return bit, _terminated(bit, 2)
    size = int(rng.integers(1, n))
    stack = _bits(rng, size)
    actions = [STACK_ACTIONS[a] for a in rng.integers(0, 3, size=n - size)]
    final = list(stack)
    for action in actions:
        if action == "POP":
            if final:
                final.pop()
        else:
            final.append(action[-1])
    return stack + actions, _terminated(final[::-1], n + 1)


def reverse_string(rng: np.random.Generator, n: int) -> tuple[list[str], list[str]]:
    """Bits; output: the bits in reverse order."""
    x = _bits(rng, n)
    return x, x[::-1]


def _expression(rng: np.random.Generator, length: int, ops: tuple[str, ...]) -> tuple[str, int]:
    """A bracketed expression of exactly ``length`` symbols and its value mod 5:
    ``d``, ``-d``, ``(d)``, ``(-d)`` for lengths 1–4, otherwise ``(A op B)`` with
    |A| ~ U{1..length−4} and op uniform in ``ops``."""
    if length <= 4:
        digit = int(rng.integers(0, MODULUS))
        text = ("-" if length % 2 == 0 else "") + str(digit)
        value = -digit if length % 2 == 0 else digit
        return (f"({text})" if length > 2 else text), value % MODULUS
    left = int(rng.integers(1, length - 3))
    left_text, left_value = _expression(rng, left, ops)
    right_text, right_value = _expression(rng, length - left - 3, ops)
    op = ops[int(rng.integers(0, len(ops)))]
    value = {
        "+": left_value + right_value,
        "-": left_value - right_value,
        "*": left_value * right_value,
    }[op]
    return f"({left_text}{op}{right_text})", value % MODULUS


def modular_arithmetic_brackets(
    rng: np.random.Generator, n: int
) -> tuple[list[str], list[str | None]]:
    """A bracketed expression over digits 0–4 and {+, −, *} of length n; label: its
    value mod 5."""
    text, value = _expression(rng, n, ("+", "-", "*"))
    return list(text), [str(value)]


def solve_equation(rng: np.random.Generator, n: int) -> tuple[list[str], list[str | None]]:
    """``E = v`` with E a bracketed {+, −} expression of length n − 2 in which one digit
    (from a uniform index, moving right cyclically to the next digit) is replaced by
    ``x``, and v = E's value mod 5; label: the replaced digit. For n < 3: n zeros, label 0."""
    if n < 3:
        return ["0"] * n, ["0"]
    text, value = _expression(rng, n - 2, ("+", "-"))
    index = int(rng.integers(0, len(text)))
    while text[index] not in DIGITS:
        index = (index + 1) % len(text)
    tokens = [*text[:index], "x", *text[index + 1 :], "=", str(value)]
    return tokens, [text[index]]


# ------------------------------------------------------------------ context-sensitive


def duplicate_string(rng: np.random.Generator, n: int) -> tuple[list[str], list[str]]:
    """Bits; output: the bits twice."""
    x = _bits(rng, n)
    return x, x + x


def missing_duplicate_string(
    rng: np.random.Generator, n: int
) -> tuple[list[str], list[str | None]]:
    """``ww`` for random bits w of length n div 2 with one uniformly chosen position
    replaced by the hole ``_``, then the pad ``#`` when n is odd; label: the hidden bit.
    For n = 1 the input is ``1`` with label 1."""
    if n == 1:
        return ["1"], ["1"]
    w = _bits(rng, n // 2)
    doubled = w + w
    index = int(rng.integers(0, len(doubled)))
    hidden = doubled[index]
    doubled[index] = HOLE
    return doubled + [PAD] * (n % 2), [hidden]


def odds_first(rng: np.random.Generator, n: int) -> tuple[list[str], list[str]]:
    """Bits s_1 .. s_n; output: s_2 s_4 ... then s_1 s_3 ... (the released code's order:
    0-based odd indices first)."""
    x = _bits(rng, n)
    return x, x[1::2] + x[0::2]


def _operands(rng: np.random.Generator, n: int, op: str) -> tuple[list[str], int, int]:
    """``A op B`` in little-endian binary with |A| ~ U{1..n−2}, |B| = n − 1 − |A| and
    A, B uniform in [1, 2**|.| − 1] (n ≥ 3)."""
    width = int(rng.integers(1, n - 1))
    a, b = _positive(rng, width), _positive(rng, n - 1 - width)
    return [*_little_endian(a, width), op, *_little_endian(b, n - 1 - width)], a, b


def binary_addition(rng: np.random.Generator, n: int) -> tuple[list[str], list[str | None]]:
    """``A+B`` (little-endian); output: A + B little-endian without leading zeros, the
    terminator, padding to n + 1. For n ≤ 2 the input is one number in [0, 2**n − 2]
    (n bits) and the output is that number."""
    if n <= 2:
        value = int(rng.integers(0, 2**n - 1))
        return _little_endian(value, n), _terminated(_little_endian(value), n + 1)
    tokens, a, b = _operands(rng, n, "+")
    return tokens, _terminated(_little_endian(a + b), n + 1)


def binary_multiplication(rng: np.random.Generator, n: int) -> tuple[list[str], list[str | None]]:
    """``A*B`` (little-endian); output: A · B little-endian without leading zeros, the
    terminator, padding to n. For n ≤ 2 the input is one number in [0, 2**n − 2] and the
    output is n − 1 zeros and the terminator (the released code's convention)."""
    if n <= 2:
        value = int(rng.integers(0, 2**n - 1))
        return _little_endian(value, n), _terminated(["0"] * (n - 1), n)
    tokens, a, b = _operands(rng, n, "*")
    return tokens, _terminated(_little_endian(a * b), n)


def compute_sqrt(rng: np.random.Generator, n: int) -> tuple[list[str], list[str | None]]:
    """A number uniform in [1, 2**n − 1] as n big-endian bits; output: its integer square
    root as ceil(n/2) big-endian bits."""
    value = _positive(rng, n)
    width = math.ceil(n / 2)
    return list(f"{value:b}".zfill(n)), list(f"{math.isqrt(value):b}".zfill(width))


def bucket_sort(rng: np.random.Generator, n: int) -> tuple[list[str], list[str]]:
    """Symbols 0–4; output: the symbols in ascending order."""
    x = [str(v) for v in rng.integers(0, MODULUS, size=n)]
    return x, sorted(x)


# ------------------------------------------------------------------ the registry entries


def _task(
    name: str,
    description: str,
    level: str,
    generator: Generator,
    alphabet: tuple[str, ...],
    labels: tuple[str, ...],
    output_length: Callable[[int], int],
    *,
    permutation_invariant: bool = False,
    notes: str = "",
) -> ChomskyTask:
    return ChomskyTask(
        name=name,
        family="chomsky",
        description=description,
        notes=notes,
        vocab=(*alphabet, QUERY),
        labels=labels,
        min_length=1,
        train_max=TRAIN_MAX,
        encoder=True,
        level=level,
        permutation_invariant=permutation_invariant,
        generator=generator,
        output_length_of=output_length,
    )


def _one(_: int) -> int:
    return 1


def _same(n: int) -> int:
    return n


def _plus_one(n: int) -> int:
    return n + 1


def _double(n: int) -> int:
    return 2 * n


def _half_up(n: int) -> int:
    return math.ceil(n / 2)


TASKS: list[SequenceTask] = [
    _task(
        "even_pairs",
        "bits: are the neighbouring pairs that differ even (0) or odd (1) in number",
        "R",
        even_pairs,
        BITS,
        BITS,
        _one,
    ),
    _task(
        "modular_arithmetic",
        "digits 0-4 and + - * without brackets: the value mod 5 (* first)",
        "R",
        modular_arithmetic,
        (*DIGITS, *OPERATORS),
        DIGITS,
        _one,
        notes="an even LEN n gives an input of n - 1 symbols (Example.length stays n)",
    ),
    _task(
        "parity_check",
        "bits: the number of 1s mod 2",
        "R",
        parity_check,
        BITS,
        BITS,
        _one,
        permutation_invariant=True,
    ),
    _task(
        "cycle_navigation",
        "moves -1/0/+1 on a cycle of 5 states from 0: the final state",
        "R",
        cycle_navigation,
        tuple(CYCLE_MOVES),
        DIGITS,
        _one,
        permutation_invariant=True,
    ),
    _task(
        "stack_manipulation",
        "a bit stack (bottom to top) then POP/PUSH0/PUSH1: the final stack top to bottom",
        "DCF",
        stack_manipulation,
        (*BITS, *STACK_ACTIONS),
        (*BITS, EOS),
        _plus_one,
        notes="padding after EOS unscored",
    ),
    _task(
        "reverse_string",
        "bits: the bits reversed",
        "DCF",
        reverse_string,
        BITS,
        BITS,
        _same,
    ),
    _task(
        "modular_arithmetic_brackets",
        "a bracketed expression over digits 0-4 and + - *: the value mod 5",
        "DCF",
        modular_arithmetic_brackets,
        (*DIGITS, *OPERATORS, *BRACKETS),
        DIGITS,
        _one,
    ),
    _task(
        "solve_equation",
        "a bracketed + - equation mod 5 with one digit replaced by x: that digit",
        "DCF",
        solve_equation,
        (*DIGITS, "+", "-", *BRACKETS, "x", "="),
        DIGITS,
        _one,
    ),
    _task(
        "duplicate_string",
        "bits: the bits twice",
        "CS",
        duplicate_string,
        BITS,
        BITS,
        _double,
    ),
    _task(
        "missing_duplicate_string",
        "ww with one position hidden (_), # appended for odd LEN: the hidden bit",
        "CS",
        missing_duplicate_string,
        (*BITS, HOLE, PAD),
        BITS,
        _one,
    ),
    _task(
        "odds_first",
        "bits s_1..s_n: s_2 s_4 ... then s_1 s_3 ... (the released code's order)",
        "CS",
        odds_first,
        BITS,
        BITS,
        _same,
    ),
    _task(
        "binary_addition",
        "A+B in little-endian binary: the sum, little-endian, then EOS",
        "CS",
        binary_addition,
        (*BITS, "+"),
        (*BITS, EOS),
        _plus_one,
        notes="padding after EOS unscored",
    ),
    _task(
        "binary_multiplication",
        "A*B in little-endian binary: the product, little-endian, then EOS",
        "CS",
        binary_multiplication,
        (*BITS, "*"),
        (*BITS, EOS),
        _same,
        notes="padding after EOS unscored",
    ),
    _task(
        "compute_sqrt",
        "a big-endian binary number: its integer square root, ceil(n/2) big-endian bits",
        "CS",
        compute_sqrt,
        BITS,
        BITS,
        _half_up,
    ),
    _task(
        "bucket_sort",
        "symbols 0-4: the symbols sorted",
        "CS",
        bucket_sort,
        DIGITS,
        DIGITS,
        _same,
        permutation_invariant=True,
    ),
]
