"""The reference interpreter against a naive evaluator, and its edge semantics."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp_compiler import CraspError, accepts, interpret, interpret_batch, parse_program
from crasp_compiler.languages.crasp.nodes import And, Compare, Count, CountRef
from tests.support.naive import naive_accepts, naive_values
from tests.support.strategies import (
    all_inputs,
    inputs,
    programs,
    random_inputs,
    random_program,
)

DIFFERENTIAL = settings(max_examples=60)
RELATION_CLASSES = [
    pytest.param(False, False, id="none"),
    pytest.param(False, True, id="periodic"),
    pytest.param(True, False, id="local"),
    pytest.param(True, True, id="periodic+local"),
]


def assert_matches_naive(program, tokens) -> None:
    """Every definition (outputs included) at every position, empty prefix included."""
    trace = interpret(program, tokens)
    expected = naive_values(program, tokens)
    for name in program.names:
        got = trace.values[name].tolist()
        assert got == expected[name], (name, tokens)
        assert len(got) == len(tokens) + 1
    if program.accept is not None:
        assert trace.accepted == naive_accepts(program, tokens)


def values(program, text: str, name: str) -> list:
    """``name`` at positions -1 .. n-1 of the whitespace-separated ``text``."""
    return interpret(program, text.split()).values[name].tolist()


# ---------------------------------------------------------------- differential


@pytest.mark.parametrize(("local", "periodic"), RELATION_CLASSES)
@DIFFERENTIAL
@given(data=st.data())
def test_interpreter_matches_naive(local, periodic, data):
    program = data.draw(programs(local=local, periodic=periodic), label="program")
    assert program.uses_local <= local
    assert program.uses_periodic <= periodic
    for _ in range(3):
        assert_matches_naive(program, data.draw(inputs(program, max_len=9), label="tokens"))


@settings(max_examples=40)
@given(program=programs(max_definitions=3, max_depth=2, alphabet=2))
def test_interpreter_matches_naive_on_every_short_input(program):
    for tokens in all_inputs(program, max_len=5):
        assert_matches_naive(program, tokens)


@settings(max_examples=60)
@given(data=st.data())
def test_deep_programs_match_naive(data):
    program = data.draw(programs(max_definitions=6, max_depth=5, max_extra_outputs=4))
    assert_matches_naive(program, data.draw(inputs(program, max_len=6)))


@pytest.mark.parametrize("seed", range(20))
def test_seeded_programs_match_naive(seed):
    program = random_program(seed, max_definitions=8)
    for tokens in random_inputs(program, seed, count=5, max_len=12):
        assert_matches_naive(program, tokens)


@settings(max_examples=60)
@given(data=st.data())
def test_batch_equals_one_by_one(data):
    program = data.draw(programs())
    n = data.draw(st.integers(0, 7), label="length")
    batch = data.draw(
        st.lists(inputs(program, min_len=n, max_len=n), min_size=1, max_size=5), label="batch"
    )
    result = interpret_batch(program, batch)
    assert set(result) == set(program.names)
    for name, array in result.items():
        assert array.shape == (len(batch), n + 1)
        for row, tokens in enumerate(batch):
            np.testing.assert_array_equal(array[row], interpret(program, tokens).values[name])


def test_seeded_generator_is_deterministic():
    assert random_program(5) == random_program(5)
    assert [random_program(s) for s in range(10)] != [random_program(0)] * 10
    program = random_program(3)
    assert random_inputs(program, 3) == random_inputs(program, 3)


def test_generator_respects_relation_classes():
    for seed in range(200):
        program = random_program(seed, local=False, periodic=False, alphabet=1)
        assert program.relation_class == "C-RASP[∅]"
        assert program.alphabet == ("a",)
        assert program.accept == program.outputs[0]
        assert program[program.accept].sort == "bool"


# ---------------------------------------------------------------- the empty string


DYCK1 = """
C_open = # "("
C_close = # ")"
V = C_open < C_close
M = # V == 0
D = M && C_open == C_close
"""


def test_dyck1_accepts_the_empty_string():
    program = parse_program(DYCK1)
    assert accepts(program, [])
    assert accepts(program, list("(())()"))
    assert not accepts(program, list("())("))
    assert not accepts(program, list("(()"))
    assert interpret(program, []).values["D"].tolist() == [True]


def test_at_least_one_rejects_the_empty_string():
    program = parse_program('alphabet "a", "b"\nA = # "a" >= 1')
    assert not accepts(program, [])
    assert accepts(program, ["a"])
    assert values(program, "b a b", "A") == [False, False, True, True]


def test_empty_prefix_values():
    program = parse_program(
        """
        alphabet "a", "b"
        T = "a"
        F = !"a"
        N = # !"a"
        K = 3 - # "a"
        """
    )
    trace = interpret(program, [])
    assert {name: trace.at(name, -1) for name in program.names} == {
        "T": False,
        "F": True,
        "N": 0,
        "K": 3,
    }


# ---------------------------------------------------------------- counts


def test_negative_counts():
    program = parse_program(
        """
        D = # "a" - 2 * # "b"
        N = -# "a"
        K = -3
        L = D < -2
        """
    )
    assert values(program, "a b b", "D") == [0, 1, -1, -3]
    assert values(program, "a b b", "N") == [0, -1, -1, -1]
    assert values(program, "a b b", "K") == [-3, -3, -3, -3]
    assert values(program, "a b b", "L") == [False, False, False, True]


def test_local_count_before_its_offset_is_zero():
    program = parse_program(
        """
        L2 = #[j <= i, j == i - 2] "a"
        L01 = #[j <= i, j == i || j == i - 1] "a"
        output L2, L01
        """
    )
    assert values(program, "a a a", "L2") == [0, 0, 0, 1]
    assert values(program, "a a a", "L01") == [0, 1, 2, 2]
    assert values(program, "a", "L2") == [0, 0]
    assert values(program, "", "L2") == [0]


def test_named_relation():
    program = parse_program('#import pred\nalphabet "a", "b"\nP = #[pred] "a"\noutput P')
    assert program["P"].expr == Count(program["P"].expr.arg, frozenset({1}))
    assert values(program, "a b a", "P") == [0, 0, 1, 0]


def test_strict_count():
    program = parse_program(
        """
        alphabet "a", "b"
        S(i) := #[j < i] Q_a(j)
        R(i) := #[j < i, j = i - 1 ∨ j = i] Q_a(j)
        output S, R
        """
    )
    assert values(program, "a b a a", "S") == [0, 0, 1, 1, 2]
    assert values(program, "a b a a", "R") == [0, 0, 1, 0, 1]
    assert values(program, "", "S") == [0]


# ---------------------------------------------------------------- periodic


def test_periodic_at_the_empty_prefix():
    program = parse_program(
        """
        alphabet "a"
        Odd = i % 2 == 1
        Zero3 = i % 3 == 0
        Two3 = i % 3 == 2
        """
    )
    trace = interpret(program, [])
    assert trace.at("Odd", -1) is True  # -1 mod 2 = 1
    assert trace.at("Zero3", -1) is False
    assert trace.at("Two3", -1) is True  # -1 mod 3 = 2
    assert values(program, "a a a a", "Zero3") == [False, True, False, False, True]
    assert values(program, "a a a a", "Odd") == [True, False, True, False, True]


def test_even_length_accepts_the_empty_string():
    program = parse_program('alphabet "a"\nE = i % 2 == 1')
    assert [accepts(program, ["a"] * n) for n in range(5)] == [True, False, True, False, True]


# ---------------------------------------------------------------- min, max, conditionals


def test_min_max_conditional_with_negative_values():
    program = parse_program(
        """
        alphabet "a", "b"
        X = min(# "a" - 3, -1)
        Y = max(-5, -2 * # "b")
        Z = "a" ? -1 : # "b" - 4
        W = min(X, Y, Z, 0)
        output X, Y, Z, W
        """
    )
    text = "a b b b a"
    assert values(program, text, "X") == [-3, -2, -2, -2, -2, -1]
    assert values(program, text, "Y") == [0, 0, -2, -4, -5, -5]
    assert values(program, text, "Z") == [-4, -1, -3, -2, -1, -1]
    assert values(program, text, "W") == [-4, -2, -3, -4, -5, -5]


def test_chained_comparisons():
    program = parse_program(
        """
        E = # "a" == # "b" == # "c"
        R = 0 < # "a" <= 2
        """
    )
    expr = program["E"].expr
    assert isinstance(expr, And)
    assert isinstance(expr.left, Compare) and isinstance(expr.right, Compare)
    assert expr.left.op == expr.right.op == "=="
    assert expr.left.right == expr.right.left  # the middle operand is shared
    assert values(program, "a b c a", "E") == [True, False, False, True, False]
    assert values(program, "a a a", "R") == [False, True, True, False]


def test_boolean_conditional():
    program = parse_program(
        """
        alphabet "a", "b", "c"
        B = "a" ? # "b" > 0 : "c"
        P = i % 2 == 0 ? "a" : "b"
        """
    )
    assert values(program, "a b a c b", "B") == [False, False, False, True, True, False]
    assert values(program, "a b b a", "P") == [False, True, True, False, False]


def test_count_conditional_references():
    program = parse_program(
        """
        alphabet "a", "b"
        C = # "a"
        D = C > 1 ? C : -C
        output D
        """
    )
    assert isinstance(program["D"].expr.then, CountRef)
    assert values(program, "a b a a", "D") == [0, -1, -1, 2, 3]


# ---------------------------------------------------------------- inputs


def test_batch_of_one_length():
    program = parse_program(DYCK1)
    batch = [list("()"), list(")("), list("((")]
    result = interpret_batch(program, batch)
    assert result["D"][:, -1].tolist() == [True, False, False]
    with pytest.raises(ValueError):
        interpret_batch(program, [list("()"), list("(")])
    empty = interpret_batch(program, [])
    assert empty["D"].shape == (0, 1)


def test_token_outside_the_alphabet():
    program = parse_program('alphabet "a", "b"\nA = # "a" >= 1')
    with pytest.raises(CraspError) as err:
        interpret(program, ["a", "b", "z", "a"])
    message = str(err.value)
    assert "'z'" in message
    assert "position 2" in message
    with pytest.raises(CraspError, match="position 1"):
        interpret_batch(program, [["a", "b"], ["b", "x"]])
    with pytest.raises(CraspError, match="'c'"):
        accepts(program, ["c"])


def test_counts_never_wrap_around():
    """10^27·#"a" overflowed int64 silently (E was False on "a", the count printed
    −6446744073709551616): counts beyond int64 are exact Python integers."""
    program = parse_program(
        'D = 1000000000 * (1000000000 * (1000000000 * # "a"))\nE = D > 0\noutput D, E\n'
    )
    trace = interpret(program, ["a", "a"])
    assert trace.at("D", 1) == 2 * 10**27 and trace.at("E", 0) is True
    assert trace.values["D"].dtype == object
    small = parse_program('D = 1000 * # "a"\nE = D > 0\n')
    assert interpret(small, ["a"]).values["D"].dtype == np.int64  # the int64 fast path
    doubling = "\n".join(['A0 = # "a"', *(f"A{k} = A{k - 1} + A{k - 1}" for k in range(1, 64))])
    assert interpret(parse_program(doubling + "\nE = A63 > 0\n"), ["a"]).accepted


# factors and constants around the int64 range: nested, they reach 10^28 and beyond
HUGE = {"scale_range": (-(3 * 10**9), 3 * 10**9), "const_range": (-(10**19), 10**19)}


@DIFFERENTIAL
@given(data=st.data())
def test_interpreter_is_exact_with_huge_coefficients(data):
    """Every sub-expression is exact whatever its size, under comparisons, min, max and
    conditionals too: the interpreter equals the naive evaluator's Python integers on
    programs whose intermediate values cross int64."""
    program = data.draw(programs(**HUGE, max_depth=4))
    tokens = data.draw(inputs(program, max_len=6))
    assert_matches_naive(program, tokens)


@pytest.mark.parametrize(
    ("source", "length", "first_true"),  # E holds from position first_true on
    [
        # 10^19·#a > 0 wrapped to a negative int64 inside the comparison
        ('A = # "a"\nE = 1000000000 * (1000000000 * A) > 0\n', 10, 0),
        # a near tie at 1.5·10^16·#a: int64 wrapped from position 607 on
        (
            'N1 = # "a"\nN2 = N1 - 1\n'
            "E = 50410995 * (301017544 * N1) + -2 >= 50410995 * (301017544 * N2)\n",
            608,
            -1,
        ),
    ],
)
def test_comparisons_of_huge_counts_are_exact(source, length, first_true):
    """The two programs of issue 24 item 1: the count arithmetic under a comparison is
    bounded too, so it is evaluated in Python integers where int64 would wrap."""
    program = parse_program(source)
    got = interpret(program, ["a"] * length).values["E"].tolist()
    assert got == naive_values(program, ["a"] * length)["E"]
    expected = [t >= first_true + 1 for t in range(length + 1)]
    assert got == expected
