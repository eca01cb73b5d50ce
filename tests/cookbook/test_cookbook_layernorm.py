"""Layer-norm constructions (crasp_compiler.cookbook.layernorm) against their definitions.

Every block runs on chosen per-position inputs through the builder, the numpy executor and
the torch module (tests.support.block_harness.evaluate: both runtimes agree to 1e-9), whose MLPs
apply the selective layer norm (ε = 0) to the blocks' norm groups.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp_compiler.cookbook import layernorm as L
from crasp_compiler.cookbook.blocks import var
from tests.support.block_harness import build, evaluate

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FEW = settings(max_examples=30)
TOL = 1e-9


def floats(low: float = -10.0, high: float = 10.0):
    """Finite floats, 0 or of magnitude above 1e-100: layer norm squares its inputs, and
    squares of smaller numbers lose precision to underflow (a float64 limit, not the
    construction's)."""
    return st.floats(low, high, allow_nan=False, allow_infinity=False).filter(
        lambda z: z == 0 or abs(z) > 1e-100
    )


@st.composite
def rows(draw, low: float = -10.0, high: float = 10.0, zero_rows: bool = True):
    """m inputs at n positions (column k = input k), some positions all-zero."""
    m = draw(st.integers(1, 5))
    n = draw(st.integers(1, 8))
    cols = [draw(st.lists(floats(low, high), min_size=n, max_size=n)) for _ in range(m)]
    if zero_rows:
        for t in draw(st.lists(st.integers(0, n - 1), max_size=2)):
            for col in cols:
                col[t] = 0.0
    return cols


def run_columns(cols, make):
    """``make(forms) -> (blocks, outs)`` on inputs x0..x(m−1); the outputs at tokens 1..n."""
    columns = {f"x{k}": col for k, col in enumerate(cols)}

    def construct(b, x):
        blocks, outs = make([x[f"x{k}"] for k in range(len(cols))])
        for block in blocks:
            b.add(block)
        return {name: var(name) for name in outs}

    got = evaluate(columns, construct)
    model, _ = build(columns, construct)
    return {name: values[1:] for name, values in got.items()}, model


@FEW
@given(rows())
def test_normalize_rescales_by_the_root_mean_square(cols):
    m = len(cols)
    outs = [f"o{k}" for k in range(m)]
    got, model = run_columns(cols, lambda xs: ([L.normalize(xs, outs)], outs))
    x = np.array(cols)  # (m, n)
    rms = np.sqrt((x**2).mean(axis=0))
    want = np.where(rms > 0, x / np.where(rms > 0, rms, 1), 0.0)
    for k in range(m):
        np.testing.assert_allclose(got[f"o{k}"], want[k], atol=TOL)
    out = np.array([got[f"o{k}"] for k in range(m)])
    np.testing.assert_allclose((out**2).sum(axis=0), np.where(rms > 0, m, 0), atol=1e-8)
    (layer,) = model.layers
    assert layer.mlp.w1.shape[0] == 2 * m and layer.mlp.norm_groups == [list(range(2 * m))]


@FEW
@given(rows(), floats(0.01, 100))
def test_normalize_is_scale_invariant(cols, c):
    outs = [f"o{k}" for k in range(len(cols))]
    got, _ = run_columns(cols, lambda xs: ([L.normalize(xs, outs)], outs))
    scaled = [[c * v for v in col] for col in cols]
    again, _ = run_columns(scaled, lambda xs: ([L.normalize(xs, outs)], outs))
    for name in outs:
        np.testing.assert_allclose(got[name], again[name], atol=1e-8)


def test_normalize_errors():
    with pytest.raises(ValueError, match="at least one"):
        L.normalize([], [])
    with pytest.raises(ValueError, match="expected 2 output names"):
        L.normalize([var("a"), var("b")], ["o"])
    with pytest.raises(ValueError, match="distinct"):
        L.normalize([var("a"), var("b")], ["o", "o"])
    with pytest.raises(ValueError, match="non-empty"):
        L.normalize([var("a")], [""])


@FEW
@given(st.lists(floats(), min_size=1, max_size=8), floats(0.01, 5))
def test_clip_is_exact(xs, delta):
    xs = [*xs, delta, -delta, 0.0]  # the edges
    got, model = run_columns([xs], lambda f: ([L.clip(f[0], "c", delta=delta)], ["c"]))
    np.testing.assert_allclose(got["c"], np.clip(xs, -delta, delta), atol=TOL)
    assert model.layers[0].mlp.w1.shape[0] == 2


@FEW
@given(rows(zero_rows=False), floats(0.01, 3), st.data())
def test_sign_is_exact_when_every_input_is_at_least_delta(cols, delta, data):
    # push every value to |x| ≥ δ, some exactly at ±δ
    pushed = []
    for col in cols:
        new = []
        for v in col:
            at_edge = data.draw(st.booleans())
            sign = 1.0 if v >= 0 else -1.0
            new.append(sign * delta if at_edge else sign * (delta + abs(v)))
        pushed.append(new)
    outs = [f"s{k}" for k in range(len(cols))]
    got, model = run_columns(pushed, lambda xs: (L.sign(xs, outs, delta=delta), outs))
    for k in range(len(cols)):
        np.testing.assert_allclose(got[f"s{k}"], np.sign(pushed[k]), atol=TOL)
    m = len(cols)
    assert [layer.mlp.w1.shape[0] for layer in model.layers] == [2 * m, 2 * m]
    assert model.layers[1].mlp.norm_groups == [list(range(2 * m))]


def test_sign_of_zeros_is_zero_and_small_inputs_break_it():
    outs = ["s0", "s1"]
    cols = [[0.0, 2.0, 0.5], [0.0, -3.0, -4.0]]
    got, _ = run_columns(cols, lambda xs: (L.sign(xs, outs, delta=1.0), outs))
    np.testing.assert_allclose(got["s0"][:2], [0.0, 1.0], atol=TOL)
    np.testing.assert_allclose(got["s1"][:2], [0.0, -1.0], atol=TOL)
    # |0.5| < δ: clipped (0.5, −1) normalised is (0.5, −1)/√(0.625), not (1, −1)
    assert got["s0"][2] == pytest.approx(0.5 / math.sqrt(0.625))
    with pytest.raises(ValueError, match="delta"):
        L.sign([var("a")], ["s"], delta=0)
    with pytest.raises(ValueError, match="delta"):
        L.clip(var("a"), "c", delta=-1)
    with pytest.raises(ValueError, match="at least one"):
        L.sign([], [], delta=1)


def lh(x: np.ndarray) -> np.ndarray:
    """The paper's lh(x) = √(2/(x²+1))·(x, 1, −x, −1)."""
    x = np.asarray(x, dtype=float)
    v = np.stack([x, np.ones_like(x), -x, -np.ones_like(x)], axis=-1)
    return np.sqrt(2 / (x**2 + 1))[..., None] * v


@FEW
@given(st.lists(st.tuples(floats(-50, 50), floats(1e-3, 1e3)), min_size=1, max_size=8))
def test_layernorm_hash_is_scale_invariant(pairs):
    xs = [x for x, _ in pairs]
    cols = [[x * s for x, s in pairs], [s for _, s in pairs]]
    got, model = run_columns(
        cols, lambda f: ([L.layernorm_hash(f[0], f[1], ("a", "b"))], ["a", "b"])
    )
    want = lh(xs)
    np.testing.assert_allclose(got["a"], want[:, 0], atol=1e-8)
    np.testing.assert_allclose(got["b"], want[:, 1], atol=1e-8)
    assert model.layers[0].mlp.w1.shape[0] == 4


def test_layernorm_hash_dot_product_is_maximal_exactly_at_equal_arguments():
    grid = np.arange(-3, 30)
    cols = [list(grid.astype(float)), [1.0] * len(grid)]
    got, _ = run_columns(cols, lambda f: ([L.layernorm_hash(f[0], f[1], ("a", "b"))], ["a", "b"]))
    a, b = got["a"], got["b"]
    scores = 2 * (np.outer(a, a) + np.outer(b, b))  # lh(q)·lh(k) with lh = (a, b, −a, −b)
    np.testing.assert_allclose(scores, lh(grid) @ lh(grid).T, atol=1e-12)
    np.testing.assert_allclose(np.diag(scores), 4.0, atol=1e-12)
    off = scores[~np.eye(len(grid), dtype=bool)]
    assert off.max() < 4 - 1e-6


def test_layernorm_hash_of_a_zero_scale_is_zero():
    got, _ = run_columns(
        [[0.0], [0.0]], lambda f: ([L.layernorm_hash(f[0], f[1], ("a", "b"))], ["a", "b"])
    )
    assert got["a"][0] == 0.0 and got["b"][0] == 0.0


@FEW
@given(
    st.lists(
        st.one_of(floats(), st.just(0.0), floats(-1e-6, 1e-6)).filter(
            lambda z: z == 0 or abs(z) > 1e-150
        ),
        min_size=1,
        max_size=10,
    )
)
def test_positive_is_the_indicator_of_a_positive_input_at_any_scale(zs):
    """``positive`` = 1[z > 0] exactly at any scale (z = 0 gives 0); in float64 down to
    |z| ≈ 1e-150, below which z² underflows and the group reads as zero variance."""
    got = evaluate({"z": zs}, lambda b, x: {"p": b.add(L.positive(x["z"], "p"))})["p"]
    np.testing.assert_allclose(got, [0.0] + [1.0 if z > 0 else 0.0 for z in zs], atol=TOL)
    block = L.positive(var("z"), "p")
    assert len(block.units) == 2 and block.norm_groups == [[0, 1]]
