"""Printing and parsing agree: ``parse_program(format_program(p)) == p``."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp_compiler import format_program, load_program, parse_program
from crasp_compiler.languages.crasp.nodes import Periodic
from tests.support.strategies import programs, random_program

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "crasp"


def example_files() -> list[Path]:
    return sorted([*EXAMPLES.glob("*.crasp"), *EXAMPLES.glob("*.cr")])


def assert_roundtrip(program) -> None:
    text = format_program(program)
    again = parse_program(text)
    assert again == program, text
    assert format_program(again) == text


@pytest.mark.parametrize(
    ("local", "periodic"), [(False, False), (False, True), (True, False), (True, True)]
)
@settings(max_examples=50)
@given(data=st.data())
def test_random_programs_roundtrip(local, periodic, data):
    program = data.draw(
        programs(local=local, periodic=periodic, max_definitions=8, max_depth=4), label="program"
    )
    assert_roundtrip(program)


@settings(max_examples=40)
@given(program=programs(alphabet=("(", ")", '"', "\\", "é", "'", "Q_a", "#", "0")))
def test_odd_symbols_roundtrip(program):
    assert_roundtrip(program)


@pytest.mark.parametrize("seed", range(50))
def test_seeded_programs_roundtrip(seed):
    assert_roundtrip(random_program(seed, max_definitions=10, max_depth=5))


@pytest.mark.parametrize(
    "source",
    [
        # Boolean conditionals desugar to and/or/not; periodic parts must fold.
        'alphabet "a", "b"\nB = i % 2 == 0 ? "a" : "b"',
        'alphabet "a"\nB = i % 2 == 0 ? i % 3 == 0 : i % 3 == 1',
        'alphabet "a"\nB = "a" ? i % 2 == 0 : !(i % 2 == 0)',
        # nested local counts use fresh position variables i, j, k, i', ...
        'alphabet "a"\nC = #[j <= i, j == i - 1] (#[k <= j, k == j - 2] (#[i\' <= k, i\' == k] "a" > 0) > 0)\nB = C > 0',
        'alphabet "a"\nB = # (#[j <= i, j == i - 1] (# (j % 2 == 0 && "a") > 1) > 0) > 0',
        "#import pos_even\n#import pred\nB = #[pred] pos_even > 0 && !pos_even",
        'C = #[j < i] "a"\nB = C - -3 >= -1 * 2\noutput B, C',
        # only named outputs, no acceptance; acceptance of an earlier Boolean
        'C = # "a"\nB = C > 1\noutput C, B',
        'alphabet "b", "a"\nB = "a"\nD = !B\naccept B\noutput D',
        "B = true",
    ],
)
def test_hand_written_roundtrip(source):
    assert_roundtrip(parse_program(source))


def test_boolean_conditional_with_periodic_condition_is_canonical():
    program = parse_program('alphabet "a"\nB = i % 2 == 0 ? i % 3 == 0 : i % 3 == 1')
    assert program["B"].expr == Periodic(6, frozenset({0, 1}))


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.name)
def test_example_roundtrip(path):
    assert_roundtrip(load_program(path))


def test_examples_exist():
    """The round trip above runs on every example: there are examples to run on."""
    names = {path.name for path in example_files()}
    assert len(names) >= 20 and {"dyck1.cr", "majority.crasp"} <= names, sorted(names)


def test_predicate_uses_get_their_own_spans():
    """Periodic predicates named by `#import` or `predicate` are fresh nodes per use."""
    first = parse_program('#import pos_even\n\n\nB = "a" && pos_even')
    second = parse_program('#import pos_even\nB = pos_even || "a"')
    assert first["B"].expr.right.span.line == 4
    assert second["B"].expr.left.span.line == 2
    program = parse_program('predicate E(i) := i % 2 == 0\nB = E && "a"\nC = "a" || E')
    assert program["B"].expr.left.span.line == 2
    assert program["C"].expr.right.span.line == 3
