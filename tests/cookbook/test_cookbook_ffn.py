"""Feed-forward constructions (crasp_compiler.cookbook.ffn) against their definitions.

Every block runs on chosen per-position inputs through the builder, the numpy executor
and the torch module (tests.support.block_harness.evaluate: both runtimes agree to 1e-9); the raw
outputs are checked against the mathematical definition at every position, BOS (where
every input is 0 unless stated) included, at the edges of each construction's condition
(values exactly at a tolerance, at a bound, ties) and inside its tolerance band. The
sizes the docstrings claim and the ValueErrors for bad arguments are checked too.
"""

from __future__ import annotations

import math
from itertools import pairwise, product

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp_compiler.assemble.builder import Builder
from crasp_compiler.cookbook import ffn
from crasp_compiler.cookbook.blocks import EXACT, FFNBlock, Form, var
from crasp_compiler.runtime.numpy_exec import run_tokens
from tests.support.block_harness import evaluate

pytestmark = pytest.mark.usefixtures("one_torch_thread")
FAST = settings(max_examples=40)

values = st.floats(-100, 100, allow_nan=False, allow_infinity=False)
columns = st.integers(1, 12).flatmap(
    lambda n: st.tuples(
        st.lists(values, min_size=n, max_size=n), st.lists(values, min_size=n, max_size=n)
    )
)


def run_block(cols: dict[str, list[float]], make, bos_values=None) -> np.ndarray:
    """The raw output ``out`` of the block(s) ``make(inputs)`` at positions 0..n."""
    blocks: list[FFNBlock] = []

    def construct(builder, inputs):
        made = make(inputs)
        for block in made if isinstance(made, list) else [made]:
            blocks.append(block)
            builder.add(block)
        return {"out": var("out")}

    return evaluate(cols, construct, bos_values)["out"]


def with_bos(xs: list[float], bos: float = 0.0) -> np.ndarray:
    return np.array([bos, *xs], dtype=float)


def relu_units(block: FFNBlock) -> int:
    return sum(unit.activation == "relu" for unit in block.units)


# ---------------------------------------------------------------- linear maps


@FAST
@given(columns, st.floats(-5, 5, allow_nan=False))
def test_identity_add_subtract_scale_are_exact(xy, c):
    xs, ys = xy
    x, y = with_bos(xs), with_bos(ys)
    cols = {"x": xs, "y": ys}
    cases = [
        (lambda v: ffn.identity(v["x"], "out"), x),
        (lambda v: ffn.add(v["x"], v["y"], "out"), x + y),
        (lambda v: ffn.subtract(v["x"], v["y"], "out"), x - y),
        (lambda v: ffn.scale(v["x"], c, "out"), c * x),
        (lambda v: ffn.identity(2 * v["x"] - v["y"], "out"), 2 * x - y),
    ]
    for make, want in cases:
        np.testing.assert_allclose(run_block(cols, make), want, rtol=1e-12, atol=1e-12)
        block = make({"x": var("x"), "y": var("y")})
        assert len(block.units) == 2 and relu_units(block) == 2
        assert block.exact.exact and block.in_place == frozenset()


@FAST
@given(columns)
def test_assign_and_cancel_update_in_place(xy):
    xs, ys = xy
    x, y = with_bos(xs), with_bos(ys)

    def model_of(block_of):
        b = Builder([f"s{t}" for t in range(1, len(xs) + 1)])
        u = b.embed("x", {f"s{t}": v for t, v in enumerate(xs, 1)})
        w = b.embed("y", {f"s{t}": v for t, v in enumerate(ys, 1)})
        old = b.add(ffn.identity(u, "old"))  # reads x in the same MLP as the update
        block = block_of(u, w)
        b.add(block)
        return b, block, {"x": u, "old": old}

    for block_of, want in [
        (lambda u, w: ffn.assign("x", 3 * w - u, label="x := 3y − x"), 3 * y - x),
        (lambda u, w: ffn.assign("x", w), y),
        (lambda u, w: ffn.cancel("x"), 0 * x),
    ]:
        b, block, outs = model_of(block_of)
        assert block.in_place == frozenset({"x"}) and block.writes == ["x"]
        assert len(block.units) == 2 and block.exact.exact
        model = b.build(outs)
        assert len(model.layers) == 1  # the update shares the MLP with the old reader
        got = run_tokens(model, [[f"s{t}" for t in range(1, len(xs) + 1)]]).outputs
        np.testing.assert_allclose(got["x"][0], want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got["old"][0], x, rtol=1e-12, atol=1e-12)

    # through the harness too (numpy and torch agree)
    got = evaluate(
        {"x": xs, "y": ys},
        lambda b, v: (b.add(ffn.assign("x", v["y"] - 2 * v["x"])), {"out": v["x"]})[1],
    )["out"]
    np.testing.assert_allclose(got, y - 2 * x, rtol=1e-12, atol=1e-12)


def test_assign_needs_an_existing_variable():
    b = Builder(["a"])
    with pytest.raises(ValueError, match="updates 'nope', which does not exist"):
        b.add(ffn.cancel("nope"))


# ---------------------------------------------------------------- min, max, CPWL


@FAST
@given(columns, st.data())
def test_minimum_and_maximum_are_exact_with_ties(xy, data):
    xs, ys = xy
    # make some positions ties
    ties = data.draw(st.lists(st.booleans(), min_size=len(xs), max_size=len(xs)))
    ys = [x if tie else y for x, y, tie in zip(xs, ys, ties, strict=True)]
    x, y = with_bos(xs), with_bos(ys)
    for fn, want in ((ffn.minimum, np.minimum(x, y)), (ffn.maximum, np.maximum(x, y))):
        got = run_block({"x": xs, "y": ys}, lambda v, fn=fn: fn(v["x"], v["y"], "out"))
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        block = fn(var("x"), var("y"), "out")
        assert len(block.units) == 3 and relu_units(block) == 3 and block.exact.exact


@FAST
@given(columns, st.data())
def test_one_unit_minimum_and_maximum_are_exact_with_ties(xy, data):
    """``x ∓ g·ReLU(±(x − y)/g)``: one unit, the result a linear read of x and the unit."""
    xs, ys = xy
    ties = data.draw(st.lists(st.booleans(), min_size=len(xs), max_size=len(xs)))
    ys = [x if tie else y for x, y, tie in zip(xs, ys, ties, strict=True)]
    factor = data.draw(st.sampled_from([1, 2, 0.5]))
    x, y = with_bos(xs), with_bos(ys)
    for fn, want in (
        (ffn.minimum_one_unit, np.minimum(x, y)),
        (ffn.maximum_one_unit, np.maximum(x, y)),
    ):

        def construct(builder, inputs, fn=fn):
            block, form = fn(inputs["x"], inputs["y"], "unit", factor=factor)
            builder.add(block)
            return {"out": form}

        got = evaluate({"x": xs, "y": ys}, construct)["out"]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        block, form = fn(var("x"), var("y"), "unit", factor=factor)
        assert len(block.units) == 1 and relu_units(block) == 1 and block.exact.exact
        assert set(form) == {"x", "unit"} and form["unit"] == (
            factor if fn is ffn.maximum_one_unit else -factor
        )


def test_one_unit_minimum_keeps_integer_coefficients_exact():
    """A common factor g leaves the weights as exact integers (Python ints of any size)."""
    big = 10**30
    block, form = ffn.minimum_one_unit(
        Form({"a": 3 * big}), Form({"b": 6 * big}), "m", factor=3 * big
    )
    (unit,) = block.units
    assert dict(unit.form) == {"b": -2, "a": 1} and all(type(c) is int for c in unit.form.values())
    assert form == {"a": 3 * big, "m": -3 * big}
    for bad in (0, -1, True, math.nan):
        with pytest.raises(ValueError, match="factor"):
            ffn.minimum_one_unit(var("a"), var("b"), "m", factor=bad)


@FAST
@given(st.lists(values, min_size=1, max_size=10), st.floats(-20, 20), st.floats(0, 30))
def test_relu_absolute_clamp_are_exact(xs, low, width):
    high = low + width
    # the knots themselves are inputs too
    xs = [*xs, 0.0, low, high]
    x = with_bos(xs)
    cases = [
        (lambda v: ffn.relu(v["x"], "out"), np.maximum(x, 0), 1),
        (lambda v: ffn.absolute(v["x"], "out"), np.abs(x), 2),
        # low = high: a constant (one idle unit)
        (lambda v: ffn.clamp(v["x"], low, high, "out"), np.clip(x, low, high), 2 - (low == high)),
    ]
    for make, want, units in cases:
        got = run_block({"x": xs}, make)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)
        block = make({"x": var("x")})
        assert len(block.units) == relu_units(block) == units and block.exact.exact


def test_named_cpwl_constructions_use_the_shared_knots():
    """One place for each construction: relu, |x|, clamp and the soft-bit cleaner are cpwl
    through the module's knots."""
    (unit,) = ffn.relu(var("z"), "out").units
    assert dict(unit.form) == {"z": 1.0} and unit.bias == 0 and unit.activation == "relu"
    assert ffn.relu(var("z"), "o") == ffn.cpwl(var("z"), ffn.RELU_KNOTS, "o")
    assert ffn.absolute(var("z"), "o") == ffn.cpwl(var("z"), ffn.ABS_KNOTS, "o")
    assert ffn.clamp_knots(-2, 3) == ((-4, -2), (-2, -2), (3, 3), (6, 3))
    assert ffn.clamp_knots(1e300, 1e300) == ((0.0, 1e300), (2e300, 1e300))
    constant = ffn.clamp(var("z"), 5, 5, "o")
    assert constant.constants == {"o": 5.0} and not constant.outputs["o"]
    for low, high, message in (
        (2, 1, "low <= high"),
        (-1e308, 0, "overflow"),
        (0, 1e308, "overflow"),
    ):
        with pytest.raises(ValueError, match=message):
            ffn.clamp_knots(low, high)


@FAST
@given(st.lists(st.tuples(st.booleans(), st.floats(0, 0.25)), min_size=1, max_size=10))
def test_clean_bit_rounds_soft_bits(cases):
    """A bit within 1/4 of {0, 1} comes out exactly 0 or 1; between, the ramp."""
    bs = [1 - off if bit else off for bit, off in cases] + [0.5, 0.3, 0.7]
    got = run_block({"b": bs}, lambda v: ffn.clean_bit(v["b"], "out"))
    want = with_bos([float(bit) for bit, _ in cases] + [0.5, 0.1, 0.9])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    block = ffn.clean_bit(var("b"), "out")
    assert relu_units(block) == 2 and block.exact.text == "exact (0 or 1) for b ∉ (1/4, 3/4)"


def cpwl_reference(knots, x):
    """Linear interpolation through the knots, extended with the end slopes."""
    kx = np.array([k[0] for k in knots])
    ky = np.array([k[1] for k in knots])
    x = np.asarray(x, dtype=float)
    left = ky[0] + (ky[1] - ky[0]) / (kx[1] - kx[0]) * (x - kx[0])
    right = ky[-1] + (ky[-1] - ky[-2]) / (kx[-1] - kx[-2]) * (x - kx[-1])
    return np.where(x < kx[0], left, np.where(x > kx[-1], right, np.interp(x, kx, ky)))


def cpwl_size(knots) -> int:
    """The size the docstring claims: C breakpoints (slope changes); C units if a piece
    is flat, C + 1 if none is; an affine f takes 2 units, a constant one idle unit."""
    slopes = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in pairwise(knots)]
    pieces = [slopes[0]] + [m for prev, m in pairwise(slopes) if m != prev]
    changes = len(pieces) - 1
    if changes == 0:
        return 1 if slopes[0] == 0 else 2
    return changes if 0 in pieces else changes + 1


knot_lists = st.integers(2, 6).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(-20, 20), min_size=n, max_size=n, unique=True).map(sorted),
        st.lists(st.integers(-3, 3), min_size=n, max_size=n),  # small ys: flat, collinear
    )
)


@settings(max_examples=60)
@given(knot_lists, st.lists(st.floats(-40, 40, allow_nan=False), min_size=1, max_size=8))
def test_cpwl_interpolates_the_knots_and_extends_the_end_slopes(knots, extra):
    kx, ky = knots
    points = [(x / 2, float(y)) for x, y in zip(kx, ky, strict=True)]
    mids = [(a + b) / 2 for a, b in pairwise(kx)]
    xs = [p[0] for p in points] + [m / 2 for m in mids] + [kx[0] / 2 - 7, kx[-1] / 2 + 7]
    xs += extra
    got = run_block({"x": xs}, lambda v: ffn.cpwl(v["x"], points, "out"))
    want = cpwl_reference(points, with_bos(xs))
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got[1 : len(points) + 1], [p[1] for p in points], atol=1e-9)
    block = ffn.cpwl(var("x"), points, "out")
    assert len(block.units) == cpwl_size(points) <= len(points)  # paper: pieces + 1
    assert block.exact.exact


@pytest.mark.parametrize(
    ("knots", "size"),
    [
        (((-1, 0), (0, 0), (1, 1)), 1),  # ReLU(x)
        (((0, 0), (1, 1), (2, 1)), 1),  # min(x, 1) = 1 − ReLU(1 − x)
        (((-1, 1), (0, 0), (1, 1)), 2),  # |x|
        (((-1, -2), (0, 0), (1, 1), (2, 3)), 3),  # no flat piece: C + 1
        (((0, 1), (1, 3)), 2),  # affine
        (((0, 4), (1, 4), (5, 4)), 1),  # constant
        (((0, 0), (1, 1), (2, 1), (3, 2), (4, 2)), 3),  # two flat pieces
    ],
)
def test_cpwl_sizes_of_familiar_functions(knots, size):
    xs = [-3.5, -1.0, -0.25, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 9.0]
    block = ffn.cpwl(var("x"), knots, "out")
    assert len(block.units) == size
    got = run_block({"x": xs}, lambda v: ffn.cpwl(v["x"], knots, "out"))
    np.testing.assert_allclose(got, cpwl_reference(knots, with_bos(xs)), atol=1e-12)


def test_cpwl_relu_is_one_plain_unit():
    """ReLU is one plain unit through these knots (ffn.relu, the one-unit min/max)."""
    (unit,) = ffn.cpwl(var("z"), ((-1, 0), (0, 0), (1, 1)), "out").units
    assert dict(unit.form) == {"z": 1.0} and unit.bias == 0 and unit.activation == "relu"


@pytest.mark.parametrize(
    ("knots", "message"),
    [
        ([(0, 0)], "at least 2 knots"),
        ([(0, 0), (0, 1)], "strictly increasing"),
        ([(1, 0), (0, 1)], "strictly increasing"),
        ([(0, 0), (1, math.nan)], "finite"),
        ([(0, 0), (math.inf, 1)], "finite"),
    ],
)
def test_cpwl_rejects_bad_knots(knots, message):
    with pytest.raises(ValueError, match=message):
        ffn.cpwl(var("x"), knots, "out")


# ---------------------------------------------------------------- multiply (GELU)


@settings(max_examples=40)
@given(
    st.sampled_from([0.5, 1.0, 3.0, 20.0]),
    st.lists(st.tuples(st.floats(-1, 1), st.floats(-1, 1)), min_size=1, max_size=10),
)
def test_multiply_error_bound_holds_and_is_tight(bound, pairs):
    corners = [(s * bound, r * bound) for s, r in product((1, -1), repeat=2)]
    edges = [(bound, 0.0), (0.0, -bound), (bound, -0.5 * bound)]
    pairs = corners + edges + [(a * bound, b * bound) for a, b in pairs]
    xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    got = run_block({"x": xs, "y": ys}, lambda v: ffn.multiply(v["x"], v["y"], "out", bound=bound))
    err = np.abs(got - with_bos(xs) * with_bos(ys))
    block = ffn.multiply(var("x"), var("y"), "out", bound=bound)
    bound_err = block.exact.error
    assert bound_err == ffn.multiply_error(bound, ffn.MULTIPLY_SCALE / bound)
    assert err.max() <= bound_err
    assert err[1:5].max() >= bound_err / 100  # not loose: attained at x = y = ±bound
    assert err[1:5].max() >= bound_err / 1.01
    assert 1e-4 * bound**2 < bound_err < 1.2e-4 * bound**2
    assert [u.activation for u in block.units] == ["gelu"] * 3
    assert not block.exact.exact and "approximate" in block.exact.text


def test_multiply_with_a_smaller_scale_is_more_accurate():
    xs, ys = [1.0, -1.0, 0.3, 1.0], [1.0, 1.0, -0.7, -1.0]
    want = with_bos(xs) * with_bos(ys)
    for lam in (0.1, 0.01, 0.001):
        block = ffn.multiply(var("x"), var("y"), "out", bound=1.0, scale=lam)
        got = run_block(
            {"x": xs, "y": ys},
            lambda v, lam=lam: ffn.multiply(v["x"], v["y"], "out", bound=1.0, scale=lam),
        )
        err = np.abs(got - want).max()
        assert block.exact.error / 1.05 <= err <= block.exact.error
    assert ffn.multiply_error(1.0, 0.001) < 1.2e-6


def test_multiply_rejects_bad_bounds():
    for bound in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="bound must be a finite number > 0"):
            ffn.multiply(var("x"), var("y"), "out", bound=bound)
    with pytest.raises(ValueError, match="scale must be a finite number > 0"):
        ffn.multiply(var("x"), var("y"), "out", bound=1.0, scale=0.0)


# ---------------------------------------------------------------- comparators

COMPARATORS = {
    "gt": (ffn.gt_zero, lambda x: (x > 0).astype(float), 2),
    "ge": (ffn.ge_zero, lambda x: (x >= 0).astype(float), 2),
    "eq": (ffn.eq_zero, lambda x: (x == 0).astype(float), 3),
}


def in_band(kind: str, x: np.ndarray, eps) -> np.ndarray:
    """Where the construction is not exact (strictly inside the tolerance band)."""
    if kind == "gt":
        return (x > 0) & (x < eps)
    if kind == "ge":
        return (x < 0) & (x > -eps)
    return (x != 0) & (np.abs(x) < eps)


@settings(max_examples=40)
@given(
    st.sampled_from(sorted(COMPARATORS)),
    st.floats(0.01, 10),
    st.lists(st.floats(-1, 1), min_size=1, max_size=8),
    st.lists(st.floats(1, 10), min_size=1, max_size=4),
)
def test_comparators_with_a_fixed_tolerance(kind, delta, inside, far):
    fn, indicator, size = COMPARATORS[kind]
    xs = [0.0, delta, -delta, 2 * delta, -2 * delta]
    xs += [f * delta for f in far] + [-f * delta for f in far] + [s * delta for s in inside]
    got = run_block({"x": xs}, lambda v: fn(v["x"], "out", tolerance=delta))
    x = with_bos(xs)
    band = in_band(kind, x, delta)
    np.testing.assert_allclose(got[~band], indicator(x[~band]), atol=1e-9)
    assert np.all((got[band] >= -1e-12) & (got[band] <= 1 + 1e-12))
    block = fn(var("x"), "out", tolerance=delta)
    assert len(block.units) == relu_units(block) == size
    assert block.exact.exact and "exact when" in block.exact.text


def test_comparators_inside_the_band_follow_the_paper():
    """GTZero_δ = x/δ, GEZero_δ = 1 + x/δ, EqZero_δ = 1 − |x|/δ inside the band."""
    delta = 0.5
    xs = [-0.375, -0.25, -0.125, 0.125, 0.25, 0.375]
    x = np.array(xs)
    want = {"gt": np.clip(x / delta, 0, 1), "ge": np.clip(1 + x / delta, 0, 1)}
    want["eq"] = np.maximum(0, 1 - np.abs(x) / delta)
    for kind, (fn, _, _) in COMPARATORS.items():
        got = run_block({"x": xs}, lambda v, fn=fn: fn(v["x"], "out", tolerance=delta))
        np.testing.assert_allclose(got[1:], want[kind], atol=1e-12)


@FAST
@given(st.sampled_from(sorted(COMPARATORS)), st.lists(values, min_size=1, max_size=8))
def test_comparators_with_tolerance_zero_use_heaviside_units_and_are_exact(kind, xs):
    fn, indicator, size = COMPARATORS[kind]
    xs = [0.0, -0.0, 1e-300, -1e-300, 5e-324, *xs]
    got = run_block({"x": xs}, lambda v: fn(v["x"], "out", tolerance=0))
    np.testing.assert_array_equal(got, indicator(with_bos(xs)))
    block = fn(var("x"), "out", tolerance=0.0)
    assert [u.activation for u in block.units] == ["heaviside"] * (size - 1)
    assert block.exact.exact


@settings(max_examples=40)
@given(
    st.sampled_from(sorted(COMPARATORS)),
    st.lists(
        st.tuples(
            st.floats(0.01, 5),  # ε at this position
            st.one_of(  # x as a multiple of ε
                st.sampled_from([0.0, 1.0, -1.0, 2.0, -3.0]),
                st.floats(-1, 1),
                st.floats(1, 50),
                st.floats(-50, -1),
            ),
        ),
        min_size=1,
        max_size=10,
    ),
)
def test_comparators_with_a_tolerance_form_output_eps_times_the_indicator(kind, cases):
    fn, indicator, size = COMPARATORS[kind]
    eps_values = [e for e, _ in cases]
    xs = [e * f for e, f in cases]
    got = run_block({"x": xs, "e": eps_values}, lambda v: fn(v["x"], "out", tolerance=v["e"]))
    x, eps = with_bos(xs), with_bos(eps_values)
    band = in_band(kind, x, eps)
    np.testing.assert_allclose(got[~band], eps[~band] * indicator(x[~band]), atol=1e-9)
    assert np.all((got[band] >= -1e-12) & (got[band] <= eps[band] + 1e-12))
    block = fn(var("x"), "out", tolerance=var("e"))
    assert len(block.units) == relu_units(block) == size
    assert "ε" in block.exact.text and block.exact.exact


def test_tolerance_form_half_inverse_position():
    """ε = 1/(2(t+1)) from the ``inverse`` feature: x = k/(t+1) for integers k."""
    n = 9
    ks = [(-1) ** t * (t % 4) for t in range(1, n + 1)]

    def construct(b, v):
        eps = 0.5 * b.feature("inverse")
        b.add(ffn.ge_zero(v["x"], "out", tolerance=eps))
        b.add(ffn.gt_zero(v["x"], "gt", tolerance=eps))
        b.add(ffn.eq_zero(v["x"], "eq", tolerance=eps))
        return {"out": var("out"), "gt": var("gt"), "eq": var("eq"), "eps": eps}

    # x_t = k_t/(t+1) is an embedding of the token at position t
    xs = [k / (t + 1) for t, k in zip(range(1, n + 1), ks, strict=True)]
    got = evaluate({"x": xs}, construct)
    x, eps = with_bos(xs), 0.5 / np.arange(1, n + 2)
    np.testing.assert_allclose(got["eps"], eps, atol=1e-15)
    np.testing.assert_allclose(got["out"], eps * (x >= 0), atol=1e-12)
    np.testing.assert_allclose(got["gt"], eps * (x > 0), atol=1e-12)
    np.testing.assert_allclose(got["eq"], eps * (x == 0), atol=1e-12)


@pytest.mark.parametrize("fn", [ffn.gt_zero, ffn.ge_zero, ffn.eq_zero])
def test_comparators_reject_bad_tolerances(fn):
    for bad in (-0.1, math.nan, math.inf):
        with pytest.raises(ValueError, match="tolerance must be a finite number ≥ 0"):
            fn(var("x"), "out", tolerance=bad)
    with pytest.raises(ValueError, match="tolerance must be a number"):
        fn(var("x"), "out", tolerance=True)
    with pytest.raises(ValueError, match="tolerance form is zero"):
        fn(var("x"), "out", tolerance=Form())


# ---------------------------------------------------------------- Boolean functions


@settings(max_examples=60)
@given(
    st.integers(0, 4).flatmap(lambda m: st.tuples(st.just(m), st.integers(0, 2 ** (2**m) - 1))),
    st.booleans(),
    st.data(),
)
def test_boolean_function_matches_its_truth_table(m_table, guard, data):
    m, code = m_table
    rows = list(product((False, True), repeat=m))

    def table(bits):
        return bool(code >> rows.index(tuple(bits)) & 1)

    # every row once (BOS and the positions cover all assignments), plus one more
    assignments = [*rows, rows[-1]]
    bos_bits = data.draw(st.tuples(*[st.booleans()] * m)) if m else ()
    cols = {f"x{i}": [float(a[i]) for a in assignments] for i in range(m)} or {
        "pad": [0.0] * len(assignments)
    }
    nonbos = "nonbos" if guard else None
    got = run_block(
        cols,
        lambda v: ffn.boolean_function([v[f"x{i}"] for i in range(m)], table, "out", nonbos=nonbos),
        bos_values={f"x{i}": float(bos_bits[i]) for i in range(m)},
    )
    want_bos = 0.0 if guard else float(table(bos_bits))
    np.testing.assert_array_equal(got, [want_bos] + [float(table(a)) for a in assignments])
    trues = sum(table(r) for r in rows)
    falses = len(rows) - trues
    complement = trues > len(rows) // 2
    size = max(1, min(trues, falses) + (1 if complement and guard else 0))
    block = ffn.boolean_function([var(f"x{i}") for i in range(m)], table, "out", nonbos=nonbos)
    assert len(block.units) == size and block.exact.exact


@settings(max_examples=40)
@given(st.integers(1, 40), st.booleans(), st.data())
def test_all_of_and_any_of_are_one_unit_at_any_width(k, guard, data):
    """The n-ary and/or of k {0,1} inputs: one unit (+1 for ``nonbos`` in an or), exact on
    every assignment drawn (all ones, all zeros, one zero, one one, random), 0 at BOS
    with ``nonbos``, and exact on the BOS values drawn without it."""
    ones, zeros = [1.0] * k, [0.0] * k
    picks = [ones, zeros, [0.0, *ones[1:]], [1.0, *zeros[1:]]]
    picks += data.draw(st.lists(st.lists(st.sampled_from([0.0, 1.0]), min_size=k, max_size=k)))
    cols = {f"x{i}": [row[i] for row in picks] for i in range(k)}
    bos_bits = data.draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=k, max_size=k))
    nonbos = "nonbos" if guard else None
    for make, want in ((ffn.all_of, all), (ffn.any_of, any)):
        got = run_block(
            cols,
            lambda v, make=make: make([v[f"x{i}"] for i in range(k)], "out", nonbos=nonbos),
            bos_values={f"x{i}": bos_bits[i] for i in range(k)},
        )
        at_bos = 0.0 if guard else float(want(b == 1.0 for b in bos_bits))
        expected = [at_bos] + [float(want(b == 1.0 for b in row)) for row in picks]
        np.testing.assert_array_equal(got, expected)
        block = make([var(f"x{i}") for i in range(k)], "out", nonbos=nonbos)
        assert len(block.units) == 1 + (make is ffn.any_of and guard) and block.exact.exact
        # the other side exact: an and exact at 1 (3 units), an or exact at 0 (2 units)
        other = 1 if make is ffn.all_of else 0
        got = run_block(
            cols,
            lambda v, make=make, side=other: make(
                [v[f"x{i}"] for i in range(k)], "out", nonbos=nonbos, exact_at=side
            ),
            bos_values={f"x{i}": bos_bits[i] for i in range(k)},
        )
        np.testing.assert_array_equal(got, expected)
    with pytest.raises(ValueError, match="at least one input"):
        ffn.all_of([], "out")


@settings(max_examples=40)
@given(st.integers(1, 2000), st.integers(0, 1), st.data())
def test_step_ramp_is_a_step_outside_its_width_and_exact_on_one_side(n, exact_at, data):
    """``step_ramp`` is 1[x ≥ 0] for |x| ≥ w at every scale of x the comparisons meet
    (x = ±k/(2(t+1)) with w = 1/(4(n+1))), and on its exact side no unit is active: the
    output is exactly the hold unit, whatever rounding the input carries below w."""
    w = 1 / (4 * (n + 1))
    ks = data.draw(st.lists(st.integers(-50, 50).filter(bool), min_size=1, max_size=20))
    ts = data.draw(st.lists(st.integers(1, n), min_size=len(ks), max_size=len(ks)))
    xs = [k / (2 * (t + 1)) for k, t in zip(ks, ts, strict=True)]
    cols = {"x": xs, "hold": [1.0] * len(xs)}
    got = run_block(
        cols,
        lambda v: ffn.step_ramp(
            v["x"], "out", width=w, exact_at=exact_at, hold=v["hold"] if exact_at else None
        ),
    )
    want = np.array([float(x >= 0) for x in xs])
    exact = want == exact_at  # the exact side: no unit active, the hold unit (1) or 0
    np.testing.assert_array_equal(got[1:][exact], want[exact])
    np.testing.assert_allclose(got[1:][~exact], want[~exact], rtol=0, atol=1e-9)
    block = ffn.step_ramp(var("x"), "out", width=w, exact_at=exact_at, hold=var("nonbos"))
    h = np.array([unit.form.get("x", 0.0) for unit in block.units])
    b = np.array([unit.bias for unit in block.units])
    for x in xs:  # the exact side: every ramp unit's argument at most 0
        if (x >= 0) == (exact_at == 1):
            ramp = h != 0
            assert np.all(h[ramp] * x + b[ramp] <= 0)
    assert len(block.units) == 2 + exact_at and block.exact.exact
    with pytest.raises(ValueError, match="hold"):
        ffn.step_ramp(var("x"), "out", width=w, exact_at=1)
    with pytest.raises(ValueError, match="exact_at"):
        ffn.step_ramp(var("x"), "out", width=w, exact_at=2)


def test_boolean_function_complement_is_chosen_on_request():
    """``complement=True`` lists the false rows (no unit active where φ is 1),
    ``complement=False`` the true rows, both computing φ."""
    table = {(False, False): False, (False, True): True, (True, False): True, (True, True): True}
    inputs = [var("a"), var("b")]
    rows = ffn.boolean_function(inputs, table.__getitem__, "out", nonbos="nb", complement=False)
    comp = ffn.boolean_function(inputs, table.__getitem__, "out", nonbos="nb", complement=True)
    assert len(rows.units) == 3 and len(comp.units) == 2
    for (a, b), want in table.items():
        for block in (rows, comp):
            assert block.evaluate({"a": a, "b": b, "nb": 1.0})["out"] == float(want)


def test_boolean_function_nonbos_is_keyword_only():
    with pytest.raises(TypeError):
        ffn.boolean_function([var("a")], lambda b: b[0], "out", "nonbos")  # type: ignore[misc]


# ---------------------------------------------------------------- conditionals

unit_values = st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0, 1))


@FAST
@given(st.lists(st.tuples(st.booleans(), unit_values, unit_values), min_size=1, max_size=10))
def test_conditional_on_the_unit_interval(cases):
    ps = [float(p) for p, _, _ in cases]
    xs = [x for _, x, _ in cases]
    ys = [y for _, _, y in cases]
    got = run_block(
        {"p": ps, "x": xs, "y": ys}, lambda v: ffn.conditional(v["p"], v["x"], v["y"], "out")
    )
    want = np.where(with_bos(ps) == 1, with_bos(xs), with_bos(ys))
    np.testing.assert_allclose(got, want, atol=1e-15)
    block = ffn.conditional(var("p"), var("x"), var("y"), "out")
    assert len(block.units) == 2 and "[0, 1]" in block.exact.text


def test_conditional_is_the_papers_construction():
    """if.W1 = [[1, 1, 0], [−1, 0, 1]] on (p, x, y), b1 = [−1, 0], W2 = [1, 1]."""
    block = ffn.conditional(var("p"), var("x"), var("y"), "out")
    rows = [(dict(u.form), u.bias) for u in block.units]
    assert rows == [({"x": 1.0, "p": 1.0}, -1.0), ({"y": 1.0, "p": -1.0}, 0.0)]
    assert block.outputs == {"out": {0: 1.0, 1: 1.0}}


@FAST
@given(
    st.floats(0.5, 50),
    st.lists(st.tuples(st.booleans(), st.floats(-1, 1), st.floats(-1, 1)), min_size=1, max_size=8),
)
def test_conditional_bigm(bound, cases):
    edges = [(True, 1.0, -1.0), (False, 1.0, -1.0), (True, -1.0, 1.0), (False, -1.0, 1.0)]
    cases = edges + cases
    ps = [float(p) for p, _, _ in cases]
    xs = [bound * x for _, x, _ in cases]
    ys = [bound * y for _, _, y in cases]
    cols = {"p": ps, "x": xs, "y": ys}
    got = run_block(
        cols, lambda v: ffn.conditional_bigm(v["p"], v["x"], v["y"], "out", bound=bound)
    )
    p = with_bos(ps)
    np.testing.assert_allclose(got, np.where(p == 1, with_bos(xs), with_bos(ys)), atol=1e-9)
    gated = run_block(
        cols, lambda v: ffn.conditional_bigm(v["p"], v["x"], Form(), "out", bound=bound)
    )
    np.testing.assert_allclose(gated, p * with_bos(xs), atol=1e-9)
    assert len(ffn.conditional_bigm(var("p"), var("x"), var("y"), "out", bound=bound).units) == 4
    assert len(ffn.conditional_bigm(var("p"), var("x"), Form(), "out", bound=bound).units) == 2


@settings(max_examples=30)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.floats(-1, 1, allow_nan=False)), min_size=1, max_size=6
    )
)
def test_gate_units_sum_gated_values(cases):
    """Pairs of gate_units whose outputs add into one variable: Σ_i [k = i]·x_i, the x_i
    of the one selected (every other pair outputs an exact 0), for |x| ≤ M; the selected
    value carries the rounding of x + M − M, as conditional_bigm's does."""
    bound = 4.0
    cols = {f"x{i}": [x * bound for _, x in cases] for i in range(3)}
    cols["k"] = [float(k) for k, _ in cases]
    cols.update({f"p{i}": [float(k == i) for k, _ in cases] for i in range(3)})

    def make(v):
        units, coefs = [], {}
        for i in range(3):
            coefs[len(units)], coefs[len(units) + 1] = 1.0, -1.0
            units += ffn.gate_units(v[f"p{i}"], v[f"x{i}"], bound)
        return FFNBlock(units, {"out": coefs}, EXACT, label="sum of gates")

    got = run_block(cols, make)
    want = with_bos([x * bound for _, x in cases])  # x_k, the same value in every column
    np.testing.assert_allclose(got, want, rtol=0, atol=bound * 2**-52)
    assert len(ffn.gate_units(var("p"), var("x"), bound)) == 2


def test_conditional_bigm_rejects_bad_bounds():
    for bad in (-1.0, math.nan):
        with pytest.raises(ValueError, match="bound must be a finite number ≥ 0"):
            ffn.conditional_bigm(var("p"), var("x"), var("y"), "out", bound=bad)


@FAST
@given(
    st.floats(0.1, 10),
    st.lists(
        st.tuples(
            st.one_of(
                st.sampled_from([0.0, 0.25, 0.75, 1.0]), st.floats(0, 0.25), st.floats(0.75, 1)
            ),
            st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0, 1)),
        ),
        min_size=1,
        max_size=10,
    ),
)
def test_soft_gate(bound, cases):
    ps = [p for p, _ in cases]
    xs = [bound * x for _, x in cases]
    got = run_block({"p": ps, "x": xs}, lambda v: ffn.soft_gate(v["p"], v["x"], "out", bound=bound))
    p = with_bos(ps)
    np.testing.assert_allclose(got, np.where(p >= 0.75, with_bos(xs), 0.0), atol=1e-9)
    assert len(ffn.soft_gate(var("p"), var("x"), "out", bound=bound).units) == 2


# ---------------------------------------------------------------- arguments


def test_bad_output_names_and_factors_are_rejected():
    with pytest.raises(ValueError, match="non-empty strings"):
        ffn.identity(var("x"), "")
    with pytest.raises(ValueError, match="factor c must be a finite number"):
        ffn.scale(var("x"), math.inf, "out")
    with pytest.raises(TypeError):
        ffn.minimum(var("x"), var("y"), "out", "label")  # type: ignore[misc]
