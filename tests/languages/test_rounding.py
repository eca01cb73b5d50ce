"""The float guarantee of compiled C-RASP models (crasp_compiler/languages/crasp/rounding.py).

A compiled model records, per float type, the longest input its rounding analysis proves
it exact for; the runtimes refuse longer inputs in that type. These tests check that the
analysis never claims more than the models deliver (big constants, nested scalings,
windows, every mode, float32 and float64), that common factors are divided out so that
programs with large coefficients still compile exactly, and that the compiler refuses,
at the expression, a program whose float64 model would be exact for no input.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp_compiler import CraspError, interpret_batch, parse_program
from crasp_compiler.languages.crasp.compile import compile_program
from crasp_compiler.languages.crasp.rounding import MAX_CLAIM, ZERO, Bound, Decision, Poly, horizon
from crasp_compiler.model import read_model, save_model
from crasp_compiler.runtime.numpy_exec import run_tokens

# the program: each constant within 10^9, nested to 10^18
NESTED = """
A = # "a"
W = #[j <= i, j >= i - 3] Q_a(j)
X = 1000000000 * (1000000000 * A)
Y = 1000000000 * (1000000000 * W)
E = X == Y
"""


def agree(program, model, words, dtype=np.float64):
    """Every output equals the interpreter at every position of every word."""
    result = run_tokens(model, words, dtype=dtype)
    for row, word in enumerate(words):
        want = interpret_batch(program, [word])
        for name in program.outputs:
            got = result.values[name][row, : len(word) + 1]
            assert got.tolist() == want[name][0].tolist(), (name, word)


def test_nested_constants_are_divided_out_and_exact():
    """X == Y is 10^18·(A − W) == 0: the gcd 10^18 is divided out, so the model compares
    A − W exactly (it printed False on `a a` where the interpreter prints True)."""
    program = parse_program(NESTED)
    model = compile_program(program)
    assert run_tokens(model, [["a", "a"]]).final("E").tolist() == [True]
    words = [["a"] * n for n in range(12)] + [["a"] * 5000]
    agree(program, model, words)
    agree(program, model, words[:12], np.float32)
    for layer in model.layers:
        if layer.mlp is not None:
            assert np.abs(layer.mlp.w1).max() < 1e4  # no 10^18 weight anywhere


def test_a_comparison_float64_cannot_resolve_is_refused_at_the_expression():
    program = parse_program(
        'A = # "a"\nB = # "b"\nX = 1000000000 * (1000000000 * A)\nE = X > 3 * B\n'
    )
    with pytest.raises(CraspError) as info:
        compile_program(program)
    text = info.value.format()
    assert "<string>:4:5: error: the comparison `X > B * 3`" in text
    assert "not provably exact in float64" in text
    assert "compare smaller multiples" in text


def test_constants_float32_cannot_resolve_are_refused_in_float32_only():
    """A > 10^9 is exact in float64 but not in float32: the guarantee says so per type,
    and the runtime refuses float32 runs (the old model answered silently)."""
    program = parse_program('A = # "a"\nE = A > 1000000000\n')
    model = compile_program(program)
    assert model.guarantee.dtypes["float64"] > 10**12
    assert model.guarantee.dtypes["float32"] == -1
    assert "in float32 for no input" in model.guarantee.text
    agree(program, model, [["a"] * 3])
    with pytest.raises(CraspError, match="proven exact for in float32"):
        run_tokens(model, [["a"]], dtype=np.float32)
    with pytest.warns(UserWarning, match="float32"):
        run_tokens(model, [["a"]], dtype=np.float32, on_overlength="warn")


def test_count_outputs_beyond_float64_integers_are_refused():
    program = parse_program('A = # "a"\nX = 1000000000 * (1000000000 * A)\noutput X\n')
    with pytest.raises(CraspError, match="the output 'X' is not provably exact in float64"):
        compile_program(program)


def test_the_guarantee_survives_a_model_file(tmp_path):
    model = compile_program(parse_program('A = # "a"\nE = A > 100000\n'))
    save_model(model, tmp_path / "m.npz")
    loaded = read_model(tmp_path / "m.npz")
    assert loaded.guarantee.dtypes == model.guarantee.dtypes
    assert loaded.guarantee.limit("float32") == model.guarantee.dtypes["float32"]


@pytest.mark.parametrize("mode", ["heaviside", "layernorm", "relu"])
def test_every_mode_records_both_float_types(mode):
    program = parse_program('C = # "(" \nD = # ")"\nB = C >= D && # (C < D) == 0\n')
    model = compile_program(program, mode=mode, max_len=100 if mode == "relu" else None)
    assert set(model.guarantee.dtypes) == {"float64", "float32"}
    limit64 = model.guarantee.limit("float64")
    assert limit64 is not None and limit64 >= {"relu": 100}.get(mode, 10**12)
    if mode == "relu":  # exact to max_len in float32 too: the ramps' exact sides
        assert model.guarantee.limit("float32") == 100


# Programs with large coefficients, where float rounding matters: within the recorded
# guarantee the model must agree with the interpreter, in both float types.
BIG = st.sampled_from([1, 3, 1000, 65536, 10**6, 10**9])


@settings(max_examples=30)
@given(
    k1=BIG,
    k2=BIG,
    c=st.integers(-(10**9), 10**9),
    op=st.sampled_from(["<", "<=", "==", "!=", ">", ">="]),
    mode=st.sampled_from(["heaviside", "layernorm", "relu"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_large_coefficients_agree_within_the_guarantee(k1, k2, c, op, mode, seed):
    text = (
        'alphabet "a", "b"\nA = # "a"\nB = #[j <= i, j >= i - 2] Q_b(j)\n'
        f"X = {k1} * ({k2} * A) - {k2} * B\nE = X {op} {c}\nF = # E > 1 && E\n"
        "output E, F, X\n"
    )
    program = parse_program(text)
    try:
        model = compile_program(program, mode=mode, max_len=64 if mode == "relu" else None)
    except CraspError as err:  # refused: only when float64 is exact for no input
        assert "not provably exact in float64" in err.format()
        return
    rng = random.Random(seed)
    for dtype in (np.float64, np.float32):
        limit = model.guarantee.limit(np.dtype(dtype).name)
        assert limit is not None
        longest = min(limit, 64)
        if longest < 0:
            continue
        words = [[rng.choice("ab") for _ in range(rng.randint(0, longest))] for _ in range(12)]
        agree(program, model, words, dtype)


def test_horizon_is_the_largest_length_every_check_allows():
    u = 2.0**-53
    grows = Bound("t·u·(1/u) < 1/2 fails from t = 1", None, Poly.linear(0, 1), 0.5)
    assert horizon([grows], "float64") == (0, grows)
    linear = Bound("t·u < 1/2: t < 2^52", None, Poly.linear(0, u), 0.5)
    assert horizon([linear], "float64") == (2**52 - 1, linear)
    assert horizon([linear], "float64", cap=1000) == (1000, None)
    assert horizon([], "float64") == (MAX_CLAIM, None)
    bos = Bound("BOS fails", None, Poly.const(2.0), 1.0, bos=True)
    assert horizon([linear, bos], "float64")[0] == -1


def test_poly_bounds():
    p = Poly((3.0, 2.0, 1.0))
    assert p(2) == 3 + 4 + 4
    assert Poly((3.0, 0.0)) == Poly.const(3)
    for t in range(0, 50):
        assert p(t) / (t + 1) <= p.over_t1()(t)
        assert p.times_t1()(t) == pytest.approx(p(t) * (t + 1))
    assert Poly.linear(2, 5).stored_max() == 5
    q = Poly.linear(3, 1)
    assert q.token_max() == max(q(t) / (t + 1) for t in range(1, 10**4)) == 2


def test_a_decision_is_exactly_its_two_sides():
    """The multiplier bound of a decision is the exact worst case on small boxes: for
    ``Z = X − k − 1/2`` (a count against a constant) with error ``A + cX``, it holds
    exactly when ``A + c·k < 1/2`` and ``A + c(k + 1) < 1/2`` (the two X nearest the
    threshold) — not when ``c·mag < 1/2`` as an absolute bound would need."""
    for k in (0, 1, 5):
        for c in (0.0, 0.01, 0.1, 0.3):
            for a in (0.0, 0.1, 0.4):
                decision = Decision(
                    "d", None, Poly.const(a), -k - 0.5, ((1.0, c, Poly.linear(0, 1)),)
                )
                for t in (k + 1, 10, 1000):
                    worst = max(
                        a + c * x - abs(x - k - 0.5) for x in range(0, t + 1)
                    )  # < 0 for every integer X up to t
                    assert decision.ok(t) == (worst < 0), (k, c, a, t)
    # two counts compared with each other: the error bound stays absolute
    two = Decision(
        "two", None, ZERO, 0.5, ((1.0, 0.001, Poly.linear(0, 1)), (-1.0, 0.001, Poly.linear(0, 1)))
    )
    assert two.ok(249) and not two.ok(251)


@pytest.mark.parametrize("name", ["dyck1.cr", "abcde.crasp", "tomita7.crasp", "c_near_a.cr"])
def test_a_decision_asked_again_answers_as_a_fresh_one(name):
    """A decision keeps its candidate multipliers from the second position asked on; at
    every position the answer is the one a fresh copy (nothing kept) gives."""
    from dataclasses import replace
    from pathlib import Path

    from crasp_compiler.languages.crasp.lower import lower_program

    root = Path(__file__).resolve().parents[2]
    program = parse_program((root / "examples" / "crasp" / name).read_text())
    lowered = lower_program(program, "relu", max_len=64)
    positions = [1, 2**40, 7, 2**20, 3, 10**6, 2**52, 64, 2**30 + 1]
    asked = 0
    for analysis in lowered.rounding.values():
        for check in analysis.checks:
            if isinstance(check, Decision):
                for t in positions:
                    assert check.ok(t) == replace(check).ok(t), (name, check.what, t)
                    asked += 1
    assert asked > 0
