"""Independent reference recognisers for the programs in ``examples/crasp/``.

Nothing here uses ``crasp_compiler``: each language is decided straight from its
definition with regular expressions, counters or small loops, so the tests can check the
interpreter against something that shares none of its code.

Every example has an :class:`Example` entry in :data:`REGISTRY`, keyed by file name:

- ``recognise(tokens) -> bool``: membership of a token sequence (single-character
  symbols);
- ``generate(rng, size) -> list[str]``: a random *member* of the language, of length
  ``size`` where the language has members of that length, otherwise of a nearby length
  (rounded down to a multiple of the period, up to the shortest member, or the one fixed
  length of a finite language);
- ``alphabet``: the symbols of the language;
- ``outputs`` (optional): for programs with named per-position outputs, a reference
  ``tokens -> {name: list[bool]}`` giving each output at the empty prefix (index 0) and
  at every token position (index ``t`` is position ``t - 1``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

Tokens = Sequence[str]
Recogniser = Callable[[Tokens], bool]
Generator = Callable[[random.Random, int], list[str]]
OutputsReference = Callable[[Tokens], dict[str, list[bool]]]


class Example(NamedTuple):
    recognise: Recogniser
    generate: Generator
    alphabet: tuple[str, ...]
    outputs: OutputsReference | None = None


def _text(tokens: Tokens) -> str:
    return "".join(tokens)


def _regex(pattern: str) -> Recogniser:
    compiled = re.compile(pattern)
    return lambda tokens: compiled.fullmatch(_text(tokens)) is not None


# ---------------------------------------------------------------- recognisers


def bounded_dyck(opening: str, closing: str, max_depth: int | None) -> Recogniser:
    """Balanced strings whose nesting depth never exceeds ``max_depth`` (None: unbounded).

    ``D_n = (a D_{n-1} b)*`` with ``D_0 = ε`` is exactly the balanced strings of depth <= n.
    """

    def recognise(tokens: Tokens) -> bool:
        depth = 0
        for token in tokens:
            depth += 1 if token == opening else -1 if token == closing else 0
            if depth < 0 or (max_depth is not None and depth > max_depth):
                return False
        return depth == 0

    return recognise


def majority(tokens: Tokens) -> bool:
    return tokens.count("1") >= tokens.count("0")


def anbncn(tokens: Tokens) -> bool:
    text = _text(tokens)
    match = re.fullmatch(r"(a*)(b*)(c*)", text)
    return match is not None and len(match[1]) == len(match[2]) == len(match[3])


def tomita4(tokens: Tokens) -> bool:
    return "000" not in _text(tokens)


def contains_ab(tokens: Tokens) -> bool:
    return "ab" in _text(tokens)


def copy8(tokens: Tokens) -> bool:
    return len(tokens) == 8 and list(tokens[:4]) == list(tokens[4:])


def no_repeat(tokens: Tokens) -> bool:
    return all(tokens[k] != tokens[k + 1] for k in range(len(tokens) - 1))


def c_near_a(tokens: Tokens) -> bool:
    return all("a" in tokens[max(0, k - 2) : k] for k, token in enumerate(tokens) if token == "c")


def last_symbol_seen_before(tokens: Tokens) -> bool:
    """The induction head's acceptance: the last symbol also occurs earlier."""
    return len(tokens) >= 1 and tokens[-1] in tokens[:-1]


def induction_head_next(alphabet: Sequence[str]) -> OutputsReference:
    """P8 from its definition: ``NEXT_τ(i)`` iff, with ``σ = x_i``, the bigram ``σ τ``
    occurs at positions ``j - 1, j`` for some ``1 <= j <= i``. False at the empty prefix.

    The bigrams ending at or before i are collected in one pass, so long inputs stay cheap.
    """

    names = [(tau, f"NEXT_{tau}") for tau in alphabet]

    def reference(tokens: Tokens) -> dict[str, list[bool]]:
        out = {name: [False] for _, name in names}
        columns = [(tau, out[name]) for tau, name in names]
        bigrams: set[tuple[str, str]] = set()  # (x_{j-1}, x_j) for 1 <= j <= i
        for i, sigma in enumerate(tokens):
            if i >= 1:
                bigrams.add((tokens[i - 1], sigma))
            for tau, column in columns:
                column.append((sigma, tau) in bigrams)
        return out

    return reference


# ---------------------------------------------------------------- generators


def _random_word(rng: random.Random, alphabet: Sequence[str], length: int) -> list[str]:
    return [rng.choice(alphabet) for _ in range(length)]


def dyck_words(opening: str, closing: str, max_depth: int | None) -> Generator:
    """Random balanced words of even length (``size`` rounded down), depth <= max_depth."""

    def generate(rng: random.Random, size: int) -> list[str]:
        length = size - size % 2
        depth, word = 0, []
        for step in range(length):
            remaining = length - step
            can_open = depth + 1 <= remaining - 1 and (max_depth is None or depth < max_depth)
            can_close = depth > 0
            if can_open and (not can_close or rng.random() < 0.5):
                word.append(opening)
                depth += 1
            else:
                word.append(closing)
                depth -= 1
        return word

    return generate


def gen_majority(rng: random.Random, size: int) -> list[str]:
    half = (size + 1) // 2
    # bias towards the boundary #1 = #0 (or #1 = #0 + 1 for odd lengths)
    ones = half + rng.choice([0, 0, 1, rng.randint(0, size - half)])
    ones = min(ones, size)
    word = ["1"] * ones + ["0"] * (size - ones)
    rng.shuffle(word)
    return word


def gen_anbncn(rng: random.Random, size: int) -> list[str]:
    n = size // 3
    return ["a"] * n + ["b"] * n + ["c"] * n


def repeat_block(block: str) -> Generator:
    """Whole repetitions of ``block``: ``block^k`` with k = size // len(block)."""
    return lambda rng, size: list(block * (size // len(block)))


def gen_contains_ab(rng: random.Random, size: int) -> list[str]:
    word = _random_word(rng, "ab", max(size, 2))
    k = rng.randrange(len(word) - 1)
    word[k : k + 2] = ["a", "b"]
    return word


def gen_piecewise(rng: random.Random, size: int) -> list[str]:
    """A random word over {a, b, c} with a, b, b planted as a subsequence."""
    word = _random_word(rng, "abc", max(size, 3))
    for position, symbol in zip(sorted(rng.sample(range(len(word)), 3)), "abb", strict=True):
        word[position] = symbol
    return word


def gen_tomita4(rng: random.Random, size: int) -> list[str]:
    word: list[str] = []
    for _ in range(size):
        word.append("1" if word[-2:] == ["0", "0"] else rng.choice("01"))
    return word


def gen_tomita7(rng: random.Random, size: int) -> list[str]:
    cuts = sorted(rng.randint(0, size) for _ in range(3))
    a, b, c = cuts[0], cuts[1] - cuts[0], cuts[2] - cuts[1]
    return list("0" * a + "1" * b + "0" * c + "1" * (size - cuts[2]))


def gen_abcde(rng: random.Random, size: int) -> list[str]:
    n = max(size, 5)
    cuts = [0, *sorted(rng.sample(range(1, n), 4)), n]
    return [symbol for k, symbol in enumerate("abcde") for _ in range(cuts[k + 1] - cuts[k])]


def gen_abdbc(rng: random.Random, size: int) -> list[str]:
    n = max(size, 1)
    before = rng.randint(0, n - 1)
    return [*_random_word(rng, "ab", before), "d", *_random_word(rng, "bc", n - 1 - before)]


def gen_seen_before(rng: random.Random, size: int) -> list[str]:
    prefix = _random_word(rng, "abc", max(size, 2) - 1)
    return [*prefix, rng.choice(prefix)]


def gen_copy8(rng: random.Random, size: int) -> list[str]:
    half = _random_word(rng, "ab", 4)
    return half + half


def gen_no_repeat(rng: random.Random, size: int) -> list[str]:
    word: list[str] = []
    for _ in range(size):
        word.append(rng.choice([s for s in "abc" if not word or s != word[-1]]))
    return word


def gen_c_near_a(rng: random.Random, size: int) -> list[str]:
    word: list[str] = []
    for _ in range(size):
        word.append(rng.choice("abc" if "a" in word[-2:] else "ab"))
    return word


# ---------------------------------------------------------------- registry

BINARY = ("0", "1")
AB = ("a", "b")
ABC = ("a", "b", "c")

REGISTRY: dict[str, Example] = {
    "dyck1.cr": Example(bounded_dyck("(", ")", None), dyck_words("(", ")", None), ("(", ")")),
    "majority.crasp": Example(majority, gen_majority, BINARY),
    "anbncn.crasp": Example(anbncn, gen_anbncn, ABC),
    "aa_star.crasp": Example(_regex(r"(aa)*"), repeat_block("aa"), ("a",)),
    "contains_ab.crasp": Example(contains_ab, gen_contains_ab, AB),
    "piecewise.crasp": Example(_regex(r"[abc]*a[abc]*b[abc]*b[abc]*"), gen_piecewise, ABC),
    "tomita1.crasp": Example(_regex(r"1*"), repeat_block("1"), BINARY),
    "tomita2.crasp": Example(_regex(r"(10)*"), repeat_block("10"), BINARY),
    "tomita4.crasp": Example(tomita4, gen_tomita4, BINARY),
    "tomita7.crasp": Example(_regex(r"0*1*0*1*"), gen_tomita7, BINARY),
    "tomita7_local.cr": Example(_regex(r"0*1*0*1*"), gen_tomita7, BINARY),
    "dyck_d2.crasp": Example(bounded_dyck("a", "b", 2), dyck_words("a", "b", 2), AB),
    "dyck_d3.cr": Example(bounded_dyck("a", "b", 3), dyck_words("a", "b", 3), AB),
    "dyck_d4.crasp": Example(bounded_dyck("a", "b", 4), dyck_words("a", "b", 4), AB),
    "dyck_d12.cr": Example(bounded_dyck("a", "b", 12), dyck_words("a", "b", 12), AB),
    "aaaa_star.cr": Example(_regex(r"(aaaa)*"), repeat_block("aaaa"), ("a",)),
    "abab_star.cr": Example(_regex(r"(abab)*"), repeat_block("abab"), AB),
    "abcde.crasp": Example(_regex(r"a+b+c+d+e+"), gen_abcde, ("a", "b", "c", "d", "e")),
    "abdbc.cr": Example(_regex(r"[ab]*d[bc]*"), gen_abdbc, ("a", "b", "c", "d")),
    "induction_head.crasp": Example(
        last_symbol_seen_before, gen_seen_before, ABC, induction_head_next(ABC)
    ),
    "copy8.cr": Example(copy8, gen_copy8, AB),
    "no_repeat.cr": Example(no_repeat, gen_no_repeat, ABC),
    "c_near_a.cr": Example(c_near_a, gen_c_near_a, ABC),
}
