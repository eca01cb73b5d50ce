"""Every program in ``examples/crasp/`` against an independent recogniser.

For each example (see ``tests/support/recognizers.py``):

- exhaustive: every string up to length 10 (alphabets of at most 3 symbols), or every
  string up to length 6 plus 3000 random strings up to length 12 (4 or 5 symbols); the
  set must contain both accepted and rejected strings;
- random: 200 uniformly random strings of lengths 0..300;
- positive: 200 generated members of lengths 0..300, which must all be accepted;
- near misses: one random edit (substitution, insertion, deletion or swap of adjacent
  symbols) of each of those members;

and on all of them the interpreter's acceptance must equal the recogniser. Programs with
named per-position outputs (the induction head) are also compared at every position.
"""

from __future__ import annotations

import functools
import itertools
import random
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from crasp_compiler import Program, interpret_batch, load_program
from crasp_compiler.cli import main
from tests.support.recognizers import REGISTRY

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "crasp"
EXAMPLE_FILES = sorted(p.name for p in EXAMPLES.iterdir() if p.suffix in (".cr", ".crasp"))

EXHAUSTIVE_SMALL = 10  # max length, alphabets of <= 3 symbols
EXHAUSTIVE_LARGE = 6  # max length, alphabets of 4-5 symbols
EXTRA_RANDOM = 3000  # random strings up to length 12 for 4-5 symbols
MAX_LENGTH = 300
SAMPLES = 200

DYCK1 = """\
C_open = # "("
C_close = # ")"
V = C_open < C_close
CV = # V
M = (CV == 0)
B = (C_open == C_close)
D = M && B
"""


@functools.cache
def program(name: str) -> Program:
    return load_program(EXAMPLES / name)


@functools.cache
def exhaustive_strings(alphabet: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    if len(alphabet) <= 3:
        max_length, extra = EXHAUSTIVE_SMALL, 0
    else:
        max_length, extra = EXHAUSTIVE_LARGE, EXTRA_RANDOM
    strings = [
        word
        for length in range(max_length + 1)
        for word in itertools.product(alphabet, repeat=length)
    ]
    rng = random.Random(f"exhaustive-extra-{alphabet}")
    strings += [
        tuple(rng.choices(alphabet, k=rng.randint(max_length + 1, 12))) for _ in range(extra)
    ]
    return tuple(strings)


def check(name: str, strings: Sequence[Sequence[str]]) -> list[bool]:
    """Assert the interpreter agrees with the recogniser (and the output reference) on
    every string; return the acceptance decisions."""
    example = REGISTRY[name]
    prog = program(name)
    by_length: dict[int, list[tuple[str, ...]]] = defaultdict(list)
    for tokens in strings:
        by_length[len(tokens)].append(tuple(tokens))

    mismatches: list[str] = []
    decisions: list[bool] = []
    for length, batch in sorted(by_length.items()):
        values = interpret_batch(prog, batch)
        got = values[prog.accept][:, -1]
        for tokens, accepted in zip(batch, got, strict=True):
            expected = example.recognise(tokens)
            decisions.append(expected)
            if bool(accepted) != expected:
                mismatches.append(f"{' '.join(tokens)!r}: interpreter {bool(accepted)}")
        if example.outputs is None:
            continue
        reference = [example.outputs(tokens) for tokens in batch]
        for output in reference[0]:
            want = np.array([ref[output] for ref in reference], dtype=bool).reshape(
                len(batch), length + 1
            )
            bad_rows = np.flatnonzero((values[output] != want).any(axis=1))
            mismatches += [
                f"{' '.join(batch[r])!r}: {output} is {values[output][r].astype(int).tolist()}, "
                f"expected {want[r].astype(int).tolist()}"
                for r in bad_rows[:5]
            ]
    assert not mismatches, f"{name}: {len(mismatches)} mismatches, e.g.\n" + "\n".join(
        mismatches[:10]
    )
    return decisions


def random_strings(name: str) -> list[list[str]]:
    rng = random.Random(f"{name}-random")
    alphabet = REGISTRY[name].alphabet
    return [rng.choices(alphabet, k=rng.randint(0, MAX_LENGTH)) for _ in range(SAMPLES)]


def positive_strings(name: str) -> list[list[str]]:
    rng = random.Random(f"{name}-positive")
    generate = REGISTRY[name].generate
    return [generate(rng, rng.randint(0, MAX_LENGTH)) for _ in range(SAMPLES)]


def near_misses(name: str) -> list[list[str]]:
    rng = random.Random(f"{name}-near")
    alphabet = REGISTRY[name].alphabet
    out = []
    for word in positive_strings(name):
        word = list(word)
        edits = ["substitute", "insert", "delete", "swap"] if len(word) >= 2 else ["insert"]
        edit = rng.choice(edits)
        k = rng.randrange(len(word) + (edit == "insert") - (edit == "swap"))
        if edit == "substitute":
            word[k] = rng.choice([s for s in alphabet if s != word[k]] or alphabet)
        elif edit == "insert":
            word.insert(k, rng.choice(alphabet))
        elif edit == "delete":
            del word[k]
        else:  # swap two adjacent symbols: keeps the counts, changes the order
            word[k], word[k + 1] = word[k + 1], word[k]
        out.append(word)
    return out


# ---------------------------------------------------------------- the examples directory


def test_every_example_is_registered():
    assert EXAMPLE_FILES, "no example programs found"
    assert set(EXAMPLE_FILES) == set(REGISTRY), (
        f"unregistered: {sorted(set(EXAMPLE_FILES) - set(REGISTRY))}; "
        f"missing files: {sorted(set(REGISTRY) - set(EXAMPLE_FILES))}"
    )


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_example_header(name):
    """The first line is a `//` description naming the program's C-RASP class, and the
    program's alphabet is the language's."""
    first = (EXAMPLES / name).read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("// ") and len(first) > 20, f"{name}: no leading description"
    prog = program(name)
    assert prog.relation_class in first, f"{name}: header does not say {prog.relation_class}"
    assert set(prog.alphabet) == set(REGISTRY[name].alphabet)
    assert prog.accept is not None


def test_examples_pass_crasp_check():
    runner = CliRunner()
    for name in EXAMPLE_FILES:
        result = runner.invoke(main, ["check", str(EXAMPLES / name)])
        assert result.exit_code == 0, f"crasp check {name}:\n{result.output}"


def test_dyck1_is_the_reference_program():
    text = (EXAMPLES / "dyck1.cr").read_text(encoding="utf-8")
    assert text.split("\n", 1)[1] == DYCK1


# ---------------------------------------------------------------- agreement


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_exhaustive(name):
    decisions = check(name, exhaustive_strings(REGISTRY[name].alphabet))
    assert any(decisions), f"{name}: no string of the exhaustive set is accepted"
    assert not all(decisions), f"{name}: every string of the exhaustive set is accepted"


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_random_long(name):
    check(name, random_strings(name))


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_positive_long(name):
    strings = positive_strings(name)
    recognise = REGISTRY[name].recognise
    not_members = [" ".join(w) for w in strings if not recognise(w)]
    assert not not_members, f"{name}: generator produced non-members, e.g. {not_members[:3]}"
    assert all(check(name, strings))


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_near_misses(name):
    check(name, near_misses(name))
