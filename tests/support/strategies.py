"""Random well-typed C-RASP programs, generated directly as IR, for differential tests.

One generator, two drivers::

    from tests.support.strategies import programs, inputs          # hypothesis strategies
    from tests.support.strategies import random_program, random_inputs   # plain, seeded

    @given(programs(local=False, periodic=False), st.data())
    def test_something(program, data):
        tokens = data.draw(inputs(program, max_len=8))
        ...

    program = random_program(seed=7, max_definitions=8)   # outside hypothesis
    words = random_inputs(program, seed=7, count=20, max_len=10)

Every decision the generator makes is one call ``choose.integer(lo, hi)`` on a
:class:`Chooser`. Under hypothesis each call is a ``st.integers`` draw, so failing
programs shrink (towards fewer definitions, leaves, small constants, the first kind of
each menu); with :func:`random_program` it is ``random.Random(seed).randint``. Both
drivers therefore produce exactly the same family of programs.

The generated IR is well typed and *canonical*, i.e. what the checker would build
from the printed text: periodic predicates come from :meth:`Periodic.make`, and a
``Not``/``And``/``Or`` whose operands are all periodic is folded with
:func:`fold_periodic`, exactly as the checker does. So for every generated program
``parse_program(format_program(p)) == p``.

Covered: token tests, ``true``/``false``, periodic predicates (moduli 1..6),
``!``/``&&``/``||``, all six comparisons, counts with ψ = ⊤ and with local offsets
(non-empty subsets of {0..4}), count constants (negative too), ``+``, ``-``,
``k *`` with k in [-3, 3], ``min``, ``max``, count conditionals, references to earlier
definitions of either sort, nesting up to ``max_depth``, and several outputs.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from hypothesis import strategies as st

from crasp_compiler.languages.crasp.nodes import (
    COMPARISONS,
    Add,
    And,
    BoolConst,
    BoolExpr,
    BoolRef,
    Compare,
    Cond,
    Count,
    CountConst,
    CountExpr,
    CountRef,
    Definition,
    Max,
    Min,
    Not,
    Or,
    Periodic,
    Program,
    Scale,
    Sort,
    Sub,
    TokenIs,
    fold_periodic,
)

SYMBOLS = ("a", "b", "c", "d")
MAX_MODULUS = 6
MAX_OFFSET = 4
CONST_RANGE = (-5, 5)
SCALE_RANGE = (-3, 3)


class Chooser(Protocol):
    """The source of every random decision: an integer in ``[lo, hi]`` (inclusive)."""

    def integer(self, lo: int, hi: int) -> int: ...


class RandomChooser:
    """Decisions from a ``random.Random``."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)


class DrawChooser:
    """Decisions drawn inside a hypothesis test (``draw`` from ``st.composite`` or
    ``st.data().draw``), so that they shrink."""

    def __init__(self, draw: Callable[[st.SearchStrategy[int]], int]) -> None:
        self.draw = draw

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))


@dataclass(frozen=True)
class Shape:
    """What programs to generate.

    ``local`` / ``periodic``: allow local counts / periodic predicates (both False:
    C-RASP[∅]). ``alphabet``: a number of symbols (prefix of ``a b c d``), explicit
    symbols, or None to draw 1..4 symbols. ``max_depth``: the deepest nesting of one
    definition's expression (a leaf is depth 0; ``# "a"`` counts as a leaf of counts).
    ``max_extra_outputs``: outputs besides the acceptance Boolean. ``scale_range`` /
    ``const_range``: the factors of ``k *`` and the count constants (wide ranges give
    values beyond int64, for the interpreter's exact integers).

    Count values grow by up to the largest factor per nesting level and per chained
    reference; the interpreter evaluates them exactly at any size (Python integers
    beyond int64), the compiler refuses coefficients beyond what float64 weights hold.
    """

    local: bool = True
    periodic: bool = True
    min_definitions: int = 1
    max_definitions: int = 6
    alphabet: int | tuple[str, ...] | None = None
    max_depth: int = 3
    max_extra_outputs: int = 2
    scale_range: tuple[int, int] = SCALE_RANGE
    const_range: tuple[int, int] = CONST_RANGE

    def __post_init__(self) -> None:
        if not 1 <= self.min_definitions <= self.max_definitions:
            raise ValueError("need 1 <= min_definitions <= max_definitions")
        if self.max_depth < 0:
            raise ValueError("max_depth must be >= 0")
        if isinstance(self.alphabet, int) and not 1 <= self.alphabet <= len(SYMBOLS):
            raise ValueError(f"alphabet size must be in 1..{len(SYMBOLS)}")
        if isinstance(self.alphabet, tuple) and not self.alphabet:
            raise ValueError("the alphabet must not be empty")


def _shape(kw: dict) -> Shape:
    alphabet = kw.get("alphabet")
    if isinstance(alphabet, str):
        raise TypeError("give the alphabet as a sequence of symbols or a size, not a string")
    if isinstance(alphabet, Sequence):
        kw = {**kw, "alphabet": tuple(alphabet)}
    return Shape(**kw)


class _Generator:
    """Builds one program, making every decision through ``choose``."""

    def __init__(self, choose: Chooser, shape: Shape) -> None:
        self.choose = choose
        self.shape = shape
        self.alphabet: tuple[str, ...] = ()
        self.bools: list[str] = []  # earlier Boolean definitions
        self.counts: list[str] = []  # earlier count definitions

    # ------------------------------------------------------------ helpers

    def integer(self, lo: int, hi: int) -> int:
        return self.choose.integer(lo, hi)

    def pick(self, options: Sequence):
        return options[self.integer(0, len(options) - 1)]

    def flag(self) -> bool:
        return self.integer(0, 1) == 1

    def leaf_now(self, depth: int) -> bool:
        """At depth 0 always a leaf; otherwise a leaf one time in four."""
        return depth == 0 or self.integer(0, 3) == 0

    # ------------------------------------------------------------ program

    def program(self) -> Program:
        shape = self.shape
        if shape.alphabet is None:
            self.alphabet = SYMBOLS[: self.integer(1, len(SYMBOLS))]
        elif isinstance(shape.alphabet, int):
            self.alphabet = SYMBOLS[: shape.alphabet]
        else:
            self.alphabet = shape.alphabet

        n = self.integer(shape.min_definitions, shape.max_definitions)
        sorts = [Sort.BOOL if self.integer(0, 1) == 0 else Sort.COUNT for _ in range(n)]
        if Sort.BOOL not in sorts:
            sorts[-1] = Sort.BOOL
        definitions = []
        for k, sort in enumerate(sorts):
            depth = self.integer(0, shape.max_depth)
            if sort == Sort.BOOL:
                name, expr = f"B{k}", self.boolean(depth)
                self.bools.append(name)
            else:
                name, expr = f"C{k}", self.count(depth)
                self.counts.append(name)
            definitions.append(Definition(name, expr))

        accept = self.bools[-1]
        candidates = [d.name for d in definitions if d.name != accept]
        extra = []
        for _ in range(self.integer(0, min(shape.max_extra_outputs, len(candidates)))):
            extra.append(candidates.pop(self.integer(0, len(candidates) - 1)))
        return Program(tuple(definitions), self.alphabet, accept, (accept, *extra))

    # ------------------------------------------------------------ Booleans

    def boolean(self, depth: int) -> BoolExpr:
        if self.leaf_now(depth):
            return self.bool_leaf()
        kind = self.pick(("compare", "and", "or", "not"))
        if kind == "compare":
            op = self.pick(COMPARISONS)
            return Compare(op, self.count(depth - 1), self.count(depth - 1))
        if kind == "not":
            arg = self.boolean(depth - 1)
            return fold_periodic("not", [arg]) or Not(arg)
        left, right = self.boolean(depth - 1), self.boolean(depth - 1)
        cls = And if kind == "and" else Or
        return fold_periodic(kind, [left, right]) or cls(left, right)

    def bool_leaf(self) -> BoolExpr:
        kinds = ["token", "const"]
        if self.shape.periodic:
            kinds.append("periodic")
        if self.bools:
            kinds.append("ref")
        kind = self.pick(kinds)
        if kind == "token":
            return TokenIs(self.pick(self.alphabet))
        if kind == "const":
            return BoolConst(self.flag())
        if kind == "periodic":
            modulus = self.integer(1, MAX_MODULUS)
            residues = frozenset(r for r in range(modulus) if self.flag())
            return Periodic.make(modulus, residues)
        return BoolRef(self.pick(self.bools))

    # ------------------------------------------------------------ counts

    def count(self, depth: int) -> CountExpr:
        if self.leaf_now(depth):
            return self.count_leaf()
        kind = self.pick(("count", "add", "sub", "scale", "min", "max", "cond"))
        if kind == "count":
            return Count(self.boolean(depth - 1), self.offsets())
        if kind == "scale":
            return Scale(self.integer(*self.shape.scale_range), self.count(depth - 1))
        if kind == "cond":
            cond = self.boolean(depth - 1)
            return Cond(cond, self.count(depth - 1), self.count(depth - 1))
        cls = {"add": Add, "sub": Sub, "min": Min, "max": Max}[kind]
        return cls(self.count(depth - 1), self.count(depth - 1))

    def count_leaf(self) -> CountExpr:
        kinds = ["const", "count"]
        if self.counts:
            kinds.append("ref")
        kind = self.pick(kinds)
        if kind == "const":
            return CountConst(self.integer(*self.shape.const_range))
        if kind == "count":
            return Count(self.bool_leaf(), self.offsets())
        return CountRef(self.pick(self.counts))

    def offsets(self) -> frozenset[int] | None:
        """None (ψ = ⊤) or, with local relations on, a non-empty subset of {0..4}."""
        if not self.shape.local or not self.flag():
            return None
        bits = self.integer(1, 2 ** (MAX_OFFSET + 1) - 1)
        return frozenset(d for d in range(MAX_OFFSET + 1) if bits >> d & 1)


# ---------------------------------------------------------------- entry points


def generate_program(choose: Chooser, **kw) -> Program:
    """One program, every decision made by ``choose``; ``kw`` are :class:`Shape` fields."""
    return _Generator(choose, _shape(kw)).program()


def random_program(seed: int | random.Random, **kw) -> Program:
    """A random program from a seed (or a ``random.Random``); ``kw`` as in :class:`Shape`:
    ``local``, ``periodic``, ``min_definitions``, ``max_definitions``, ``alphabet``,
    ``max_depth``, ``max_extra_outputs``."""
    rng = seed if isinstance(seed, random.Random) else random.Random(seed)
    return generate_program(RandomChooser(rng), **kw)


def programs(**kw) -> st.SearchStrategy[Program]:
    """Hypothesis strategy of programs; ``kw`` as in :func:`random_program`."""
    shape = _shape(kw)

    @st.composite
    def strategy(draw) -> Program:
        return _Generator(DrawChooser(draw), shape).program()

    return strategy()


def inputs(program: Program, max_len: int = 8, min_len: int = 0) -> st.SearchStrategy[list[str]]:
    """Hypothesis strategy of token lists over the program's alphabet."""
    return st.lists(st.sampled_from(program.alphabet), min_size=min_len, max_size=max_len)


def random_inputs(
    program: Program,
    seed: int | random.Random,
    count: int = 10,
    max_len: int = 8,
    min_len: int = 0,
) -> list[list[str]]:
    """``count`` random token lists over the program's alphabet, from a seed."""
    rng = seed if isinstance(seed, random.Random) else random.Random(seed)
    return [
        [rng.choice(program.alphabet) for _ in range(rng.randint(min_len, max_len))]
        for _ in range(count)
    ]


def all_inputs(program: Program, max_len: int) -> list[list[str]]:
    """Every token list over the program's alphabet of length at most ``max_len``."""
    words: list[list[str]] = [[]]
    layer: list[list[str]] = [[]]
    for _ in range(max_len):
        layer = [[*w, s] for w in layer for s in program.alphabet]
        words.extend(layer)
    return words
