"""Blocks that evaluate themselves (``FFNBlock.evaluate``, ``HeadBlock.evaluate``,
``evaluate_blocks`` and ``BosValues`` in :mod:`crasp_compiler.cookbook.blocks`).

- **Definitions, no model.** ``evaluate`` of cookbook constructions against their
  mathematical definitions, directly on numpy arrays: comparators (ReLU bands, Heaviside
  thresholds at exactly 0, tolerance forms), CPWL knots, the layer-norm sign at every
  scale, uniform averages under every mask, offset lookups and routing, hard-attention
  ties (average, leftmost, rightmost, the tie tolerance), softmax weights.
- **Differential.** A block's ``evaluate`` equals what the model assembled from it by the
  :class:`~crasp_compiler.assemble.builder.Builder` computes in the numpy runtime, for
  random FFN and head blocks (every activation, norm groups, weighting, mask, bias and
  scale) on random inputs, two sequences at once, and for cookbook constructions.
- **BOS.** The BOS values the compilers follow (``Lowered.at_bos``, from ``evaluate``)
  are the BOS residual of the compiled models, for the C-RASP and PCOC examples and
  random C-RASP programs.
"""

from __future__ import annotations

import math
from itertools import pairwise, product
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp_compiler.assemble.builder import BOS_VAR, NONBOS_VAR, Builder
from crasp_compiler.cookbook import attention, ffn, layernorm
from crasp_compiler.cookbook.blocks import (
    EXACT,
    Block,
    BosValues,
    FFNBlock,
    Form,
    HeadBlock,
    Unit,
    evaluate_blocks,
    var,
)
from crasp_compiler.languages.crasp.lower import lower_program
from crasp_compiler.languages.crasp.program import load_program
from crasp_compiler.languages.pcoc import load_program as load_pcoc
from crasp_compiler.languages.pcoc.lower import lower_pcoc
from crasp_compiler.model.features import feature_matrix
from crasp_compiler.model.model import ACTIVATIONS, MASKS, WEIGHTINGS
from crasp_compiler.runtime.numpy_exec import run_tokens
from tests.support.strategies import random_program

FAST = settings(max_examples=40)
ROOT = Path(__file__).resolve().parents[2]

# dyadic numbers with few bits: every sum and product of a few of them is exact in
# float64, so thresholds and ties are decided alike by evaluate and by the runtimes
dyadic = st.integers(-12, 12).map(lambda k: k / 4)
VARIABLES = ("x0", "x1", "x2")


def at(block: Block, **values) -> dict[str, np.ndarray]:
    """``block.evaluate`` on keyword values (lists become arrays)."""
    arrays = {k: np.asarray(v, dtype=float) for k, v in values.items()}
    return block.evaluate(arrays)


def out(block: Block, **values) -> np.ndarray:
    (result,) = at(block, **values).values()
    return result


# ---------------------------------------------------------------- FFN definitions


XS = np.array([-7.5, -1.0, -0.25, -1e-300, 0.0, 1e-300, 0.25, 0.5, 1.0, 3.0, 1e6])


@pytest.mark.parametrize(
    ("kind", "indicator"),
    [
        ("gt", lambda x: x > 0),
        ("ge", lambda x: x >= 0),
        ("eq", lambda x: x == 0),
    ],
)
def test_comparators_with_heaviside_units_are_exact_indicators(kind, indicator):
    """tolerance 0: Heaviside units, ``1[z ≥ 0]`` decided exactly at 0 and next to it."""
    make = {"gt": ffn.gt_zero, "ge": ffn.ge_zero, "eq": ffn.eq_zero}[kind]
    got = out(make(var("x"), "o", tolerance=0.0), x=XS)
    np.testing.assert_array_equal(got, indicator(XS).astype(float))
    assert got.dtype == np.float64 and got.shape == XS.shape


@pytest.mark.parametrize("delta", [0.5, 1e-3, 8.0])
def test_comparators_with_a_tolerance_are_their_ramps(delta):
    """δ > 0: ``clamp(x/δ, 0, 1)`` (gt), ``clamp(1 + x/δ, 0, 1)`` (ge),
    ``max(0, 1 − |x|/δ)`` (eq): the indicator outside the band."""
    xs = np.concatenate([XS, [delta, -delta, delta / 2, -delta / 2]])
    want = {
        "gt": np.clip(xs / delta, 0, 1),
        "ge": np.clip(1 + xs / delta, 0, 1),
        "eq": np.maximum(0, 1 - np.abs(xs) / delta),
    }
    for kind, make in (("gt", ffn.gt_zero), ("ge", ffn.ge_zero), ("eq", ffn.eq_zero)):
        got = out(make(var("x"), "o", tolerance=delta), x=xs)
        np.testing.assert_allclose(got, want[kind], rtol=1e-12, atol=1e-12)


def test_comparators_with_a_tolerance_form_scale_by_it():
    """A tolerance form ε (a variable here): ``ε·1[x > 0]`` etc. outside the band."""
    eps = np.array([0.5, 0.5, 0.5, 0.25, 0.25, 0.1])
    xs = np.array([-1.0, 0.0, 2.0, 0.25, -0.25, 0.0])
    want = {"gt": eps * (xs > 0), "ge": eps * (xs >= 0), "eq": eps * (xs == 0)}
    for kind, make in (("gt", ffn.gt_zero), ("ge", ffn.ge_zero), ("eq", ffn.eq_zero)):
        got = out(make(var("x"), "o", tolerance=var("e")), x=xs, e=eps)
        np.testing.assert_allclose(got, want[kind], rtol=1e-12, atol=1e-15)


knot_lists = st.lists(
    st.tuples(st.integers(-40, 40), st.integers(-40, 40)), min_size=2, max_size=7
).map(lambda ks: sorted({x: (x / 2, y / 4) for x, y in ks}.values()))


@FAST
@given(knot_lists.filter(lambda ks: len(ks) >= 2), st.lists(st.integers(-200, 200), max_size=8))
def test_cpwl_evaluates_to_its_knots_and_end_slopes(knots, extra):
    """At every knot, between knots and beyond both ends (the end pieces extended)."""
    xs_k, ys_k = (np.array(v) for v in zip(*knots, strict=True))
    mids = [(a + b) / 2 for a, b in pairwise(xs_k)]
    xs = np.array([*xs_k, *mids, *(e / 4 for e in extra)])
    first = (ys_k[1] - ys_k[0]) / (xs_k[1] - xs_k[0])
    last = (ys_k[-1] - ys_k[-2]) / (xs_k[-1] - xs_k[-2])
    want = np.interp(xs, xs_k, ys_k)
    want = np.where(xs < xs_k[0], ys_k[0] + first * (xs - xs_k[0]), want)
    want = np.where(xs > xs_k[-1], ys_k[-1] + last * (xs - xs_k[-1]), want)
    got = out(ffn.cpwl(var("x"), knots, "o"), x=xs)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)


def test_named_cpwl_constructions_and_one_unit_min_max():
    xs, ys = np.array([-3.0, -0.5, 0.0, 0.5, 7.0]), np.array([1.0, -0.5, 2.0, -4.0, 7.0])
    np.testing.assert_array_equal(out(ffn.relu(var("x"), "o"), x=xs), np.maximum(xs, 0))
    np.testing.assert_array_equal(out(ffn.absolute(var("x"), "o"), x=xs), np.abs(xs))
    clamp = ffn.clamp(var("x"), -1, 2, "o")
    np.testing.assert_array_equal(out(clamp, x=xs), np.clip(xs, -1, 2))
    np.testing.assert_array_equal(out(ffn.clean_bit(var("b"), "o"), b=[0.2, 0.8, 0.5]), [0, 1, 0.5])
    for make, want in ((ffn.minimum_one_unit, np.minimum), (ffn.maximum_one_unit, np.maximum)):
        block, form = make(var("x"), var("y"), "u", factor=2)
        values = {"x": xs, "y": ys, **block.evaluate({"x": xs, "y": ys})}
        result = sum(c * values[name] for name, c in form.items())
        np.testing.assert_array_equal(result, want(xs, ys))
    for make, want in ((ffn.minimum, np.minimum), (ffn.maximum, np.maximum)):
        np.testing.assert_array_equal(out(make(var("x"), var("y"), "o"), x=xs, y=ys), want(xs, ys))


def test_boolean_function_and_conditionals_evaluate_to_their_tables():
    rows = np.array(list(product((0.0, 1.0), repeat=3)))
    a, b, c = rows.T
    table = lambda bits: bits[0] != (bits[1] and bits[2])  # noqa: E731
    block = ffn.boolean_function([var("a"), var("b"), var("c")], table, "o")
    want = [float(table(tuple(bool(v) for v in row))) for row in rows]
    np.testing.assert_array_equal(out(block, a=a, b=b, c=c), want)
    guarded = ffn.boolean_function([var("a")], lambda bits: not bits[0], "o", nonbos="nb")
    np.testing.assert_array_equal(out(guarded, a=[0, 1, 0], nb=[1, 1, 0]), [1, 0, 0])
    gate = ffn.conditional_bigm(var("p"), var("x"), var("y"), "o", bound=10)
    np.testing.assert_array_equal(
        out(gate, p=[1, 0, 1, 0], x=[3, 3, -10, 10], y=[-2, -2, 5, -10]), [3, -2, -10, -10]
    )


def test_multiply_is_within_its_stated_error():
    xs, ys = np.meshgrid(np.linspace(-3, 3, 13), np.linspace(-3, 3, 13))
    block = ffn.multiply(var("x"), var("y"), "o", bound=3)
    got = out(block, x=xs, y=ys)
    assert got.shape == xs.shape
    assert np.max(np.abs(got - xs * ys)) <= block.exact.error


# ---------------------------------------------------------------- layer norm


def test_layernorm_positive_is_the_sign_at_every_scale():
    """``1[z > 0]`` from the normalised pair (z, 0): ±1 at any scale, 0 at z = 0 (a
    zero-variance group), within the float64 range where squares do not underflow."""
    zs = np.array([-1e100, -3.0, -1e-100, 0.0, 1e-100, 2.5, 1e100])
    np.testing.assert_array_equal(out(layernorm.positive(var("z"), "o"), z=zs), zs > 0)


def test_layernorm_sign_normalize_and_clip():
    xs = np.array([[0.5, -2.0], [-0.1, 0.1], [0.0, 0.0], [3.0, -4.0]])
    clips = layernorm.sign([var("a"), var("b")], ["sa", "sb"], delta=0.5)
    values = evaluate_blocks(clips, {"a": xs[:, 0], "b": xs[:, 1]})
    np.testing.assert_allclose(values["sa.clip"], np.clip(xs[:, 0], -0.5, 0.5))
    # every |x_k| ≥ δ: signs; all zero: 0; otherwise clip/√(mean clip²)
    np.testing.assert_allclose(values["sa"], [1, -1, 0, 1], rtol=1e-12)
    np.testing.assert_allclose(values["sb"], [-1, 1, 0, -1], rtol=1e-12)
    norm = layernorm.normalize([var("a"), var("b")], ["na", "nb"])
    got = norm.evaluate({"a": xs[:, 0], "b": xs[:, 1]})
    scale = np.sqrt((xs**2).mean(1))
    with np.errstate(invalid="ignore", divide="ignore"):
        want = np.where(scale[:, None] > 0, xs / scale[:, None], 0)
    np.testing.assert_allclose(np.stack([got["na"], got["nb"]], 1), want, rtol=1e-12)


# ---------------------------------------------------------------- heads


def masked_mean(values: np.ndarray, mask: str) -> np.ndarray:
    """The mean of ``values`` (B, T) over the keys the mask allows, 0 for no key."""
    size = values.shape[1]
    out = np.zeros_like(values)
    for t in range(size):
        keys = [s for s in range(size) if {"causal": s <= t, "strict": s < t, "past": s >= t,
                "strict-past": s > t, "none": True}[mask]]  # fmt: skip
        if keys:
            out[:, t] = values[:, keys].mean(1)
    return out


@FAST
@given(
    st.sampled_from(MASKS),
    st.sampled_from(["softmax", "hard"]),
    st.integers(1, 3),
    st.integers(1, 9),
    st.data(),
)
def test_uniform_average_is_the_masked_mean(mask, weighting, batch, size, data):
    values = np.array(data.draw(st.lists(dyadic, min_size=batch * size, max_size=batch * size)))
    values = values.reshape(batch, size)
    head = attention.average(var("v"), "o", mask=mask, weighting=weighting)
    got = out(head, v=values)
    np.testing.assert_allclose(got, masked_mean(values, mask), rtol=1e-12, atol=1e-15)
    single = out(head, v=values[0])  # shape (T,): one sequence
    np.testing.assert_allclose(single, got[0], rtol=0, atol=0)


def test_offset_lookup_reads_t_minus_c_or_bos():
    size = 8
    xs = np.arange(size) * 1.5 + 0.25
    bos = (np.arange(size) == 0).astype(float)
    for c in range(5):
        head = attention.offset_lookup(var("x"), c, "o", var("B") + var("nb"), "B")
        want = [xs[t - c] if t >= c else xs[0] for t in range(size)]
        np.testing.assert_array_equal(out(head, x=xs, B=bos, nb=1 - bos), want)
        soft = attention.soft_offset_lookup(var("x"), c, "o", var("B") + var("nb"))
        bits = (np.arange(size) % 3 == 1).astype(float) * (1 - bos)
        t = np.arange(size, dtype=float)
        got = out(soft, x=bits, B=bos, nb=1 - bos, index=t, **{"index^2": t * t})
        hard = np.array([bits[t - c] if t >= c else 0.0 for t in range(size)])
        assert np.max(np.abs(got - hard)) < 0.1


def test_route_reads_its_sources():
    n = 5
    sources = [0, 3, 1, 0, 5, 2]
    head = attention.route(sources, {"o": var("v")}, n=n)
    features = {f"onehot:{k}": (np.arange(n + 1) == k).astype(float) for k in range(n + 1)}
    vs = np.array([0.0, 10, 20, 30, 40, 50])
    got = head.evaluate({**features, "v": vs})["o"]
    np.testing.assert_array_equal(got, vs[sources])


def scored(weighting: str, keys, mask: str = "causal") -> HeadBlock:
    """A head whose score of key s is ``keys[s]`` (query 1, key ``k``), value ``v``."""
    return HeadBlock([var("one")], [var("k")], {"o": var("v")}, EXACT, weighting=weighting,
                     mask=mask)  # fmt: skip


def test_hard_attention_ties():
    """Average-hard: the mean over the maximal scores; hard-left/right: the leftmost /
    rightmost of them; scores within the tolerance of the maximum count as maximal."""
    keys = np.array([1.0, 3.0, 2.0, 3.0, 3.0 - 1e-12, 0.0])
    vs = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0])
    one = np.ones_like(keys)
    got = {
        w: out(scored(w, keys), one=one, k=keys, v=vs) for w in ("hard", "hard-left", "hard-right")
    }
    np.testing.assert_array_equal(got["hard"], [1, 2, 2, 5, 26 / 3, 26 / 3])
    np.testing.assert_array_equal(got["hard-left"], [1, 2, 2, 2, 2, 2])
    np.testing.assert_array_equal(got["hard-right"], [1, 2, 2, 8, 16, 16])
    exact = scored("hard", keys).evaluate({"one": one, "k": keys, "v": vs}, tolerance=0.0)["o"]
    np.testing.assert_array_equal(exact, [1, 2, 2, 5, 5, 5])
    # the bias adds to the scores by offset: bias(0) = 3 makes every row read itself
    own = HeadBlock([], [], {"o": var("v")}, EXACT, bias={0: 3.0}, weighting="hard")
    np.testing.assert_array_equal(out(own, v=vs), vs)


def test_softmax_weights_and_masks():
    keys = np.array([0.0, math.log(3.0), 0.0])
    vs = np.array([4.0, 8.0, 0.0])
    one = np.ones(3)
    got = out(scored("softmax", keys), one=one, k=keys, v=vs)
    np.testing.assert_allclose(got, [4.0, (4 + 3 * 8) / 4, (4 + 24) / 5], rtol=1e-12)
    strict = out(scored("softmax", keys, "strict"), one=one, k=keys, v=vs)
    np.testing.assert_allclose(strict, [0.0, 4.0, (4 + 24) / 4], rtol=1e-12)  # BOS reads 0
    past = out(scored("hard-left", keys, "strict-past"), one=one, k=keys, v=vs)
    np.testing.assert_array_equal(past, [8.0, 0.0, 0.0])  # the last position reads 0


def test_evaluate_shapes_and_errors():
    block = ffn.minimum(var("x"), var("y"), "m")
    assert block.evaluate({"x": 1.0, "y": -2.0}) == {"m": -2.0}  # numbers for numbers
    assert block.evaluate({"x": np.zeros((2, 3)), "y": 1.0})["m"].shape == (2, 3)
    with pytest.raises(KeyError, match="'y'"):
        block.evaluate({"x": 1.0})
    head = attention.causal_average(var("x"), "a")
    assert head.evaluate({"x": np.zeros((2, 5))})["a"].shape == (2, 5)
    with pytest.raises(ValueError, match=r"shape \(T,\) or \(B, T\)"):
        head.evaluate({"x": 1.0})
    with pytest.raises(ValueError, match="unknown activation"):
        FFNBlock([Unit(var("x"), 0.0, "tanh")], {"o": {0: 1.0}}, EXACT).evaluate({"x": 1.0})
    # a head that reads nothing still needs the sequence's shape from some variable
    empty = HeadBlock([], [], {"o": Form()}, EXACT)
    assert empty.evaluate({"x": np.ones(4)})["o"].tolist() == [0, 0, 0, 0]


def test_in_place_blocks_add_to_the_old_value():
    blocks = [
        ffn.identity(var("x"), "y"),
        ffn.assign("y", 2 * var("y") + var("x")),
        ffn.cancel("x"),
    ]
    values = evaluate_blocks(blocks, {"x": np.array([1.0, -3.0])})
    np.testing.assert_array_equal(values["y"], [3.0, -9.0])
    np.testing.assert_array_equal(values["x"], [0.0, 0.0])


# ---------------------------------------------------------------- BosValues


def test_bos_values_follow_the_blocks():
    bos = BosValues({BOS_VAR: 1.0, NONBOS_VAR: 0.0, "x": 0.0})
    assert bos.add(attention.causal_average(var(BOS_VAR), "ONE")) == {"ONE": 1.0}
    assert bos.add(ffn.ge_zero(var("x") - 0.5 * var("ONE"), "c", tolerance=0.0)) == {"c": 0.0}
    assert bos.add(ffn.assign("ONE", 3 * var("ONE"))) == {"ONE": 2.0}
    assert bos["ONE"] == 3.0 and "c" in bos and bos.form({"ONE": 2, BOS_VAR: -1}) == 5.0
    strict = attention.average(var("ONE"), "s", mask="strict")
    assert bos.add(strict) == {"s": 0.0}  # the BOS row of a strict head has no key
    with pytest.raises(ValueError, match="mask 'none'"):
        bos.add(attention.average(var("ONE"), "n", mask="none"))
    assert bos.add(attention.average(var("ONE"), "n", mask="none"), reads_itself=True) == {"n": 3.0}
    with pytest.raises(KeyError, match=r"no value given for the variable .missing. at BOS"):
        bos.add(ffn.relu(var("missing"), "r"))


# ---------------------------------------------------------------- differential


def assembled(cols, blocks, bos=None):
    """(model outputs, evaluate_blocks outputs), each (2, T), of ``blocks`` on the
    sequence whose token t carries ``cols[name][t − 1]`` (and ``bos[name]`` at BOS) and on
    its reversal; the blocks may read ``BOS``, ``nonbos`` and positional features too."""
    bos = bos or {}
    n = len(next(iter(cols.values())))
    symbols = [f"s{t}" for t in range(1, n + 1)]
    builder = Builder(symbols)
    for name, column in cols.items():
        embedding = dict(zip(symbols, map(float, column), strict=True))
        builder.embed(name, embedding, bos=bos.get(name, 0.0))
    written = list(dict.fromkeys(name for block in blocks for name in block.writes))
    reads = set().union(*(block.reads for block in blocks))
    for name in sorted(reads - set(cols) - set(written) - {BOS_VAR, NONBOS_VAR}):
        builder.feature(name)
    for block in blocks:
        builder.add(block)
    model = builder.build({name: var(name) for name in written})
    result = run_tokens(model, [symbols, symbols[::-1]], on_overlength="ignore")
    size = n + 1
    values = {
        name: np.array([[bos.get(name, 0.0), *column], [bos.get(name, 0.0), *column[::-1]]])
        for name, column in cols.items()
    }
    position = (np.arange(size) == 0).astype(float)
    values |= {BOS_VAR: position, NONBOS_VAR: 1 - position}
    features = feature_matrix(builder.features, size)
    values |= {name: features[:, k] for k, name in enumerate(builder.features)}
    got = evaluate_blocks(blocks, values)
    return {name: result.outputs[name] for name in written}, {name: got[name] for name in written}


forms = st.dictionaries(st.sampled_from(VARIABLES), dyadic.filter(bool), max_size=3).map(Form)


@st.composite
def ffn_blocks(draw) -> FFNBlock:
    count = draw(st.integers(1, 6))
    units: list[Unit] = []
    for k in range(count):
        activation = draw(st.sampled_from(ACTIVATIONS))
        if k and draw(st.booleans()):  # equal pre-activations: zero-variance norm groups
            twin = units[draw(st.integers(0, k - 1))]
            units.append(Unit(twin.form, twin.bias, activation))
        else:
            units.append(Unit(draw(forms), draw(dyadic), activation))
    order = draw(st.permutations(range(count)))
    groups, start = [], 0
    while count - start >= 2 and draw(st.booleans()):
        size = draw(st.integers(2, count - start))
        groups.append(sorted(order[start : start + size]))
        start += size
    coefs = st.dictionaries(st.integers(0, count - 1), dyadic, max_size=count)
    outputs = {f"o{j}": draw(coefs) for j in range(draw(st.integers(1, 2)))}
    constants = draw(st.dictionaries(st.sampled_from(sorted(outputs)), dyadic, max_size=2))
    return FFNBlock(units, outputs, EXACT, constants=constants, norm_groups=groups)


@st.composite
def head_blocks(draw) -> HeadBlock:
    dk = draw(st.integers(0, 2))
    return HeadBlock(
        [draw(forms) for _ in range(dk)],
        [draw(forms) for _ in range(dk)],
        {f"o{j}": draw(forms) for j in range(draw(st.integers(1, 2)))},
        EXACT,
        bias=draw(st.dictionaries(st.integers(-3, 3), dyadic, max_size=2)),
        weighting=draw(st.sampled_from(WEIGHTINGS)),
        mask=draw(st.sampled_from(MASKS)),
        scale=draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])),
    )


@st.composite
def columns(draw) -> tuple[dict[str, list[float]], dict[str, float]]:
    n = draw(st.integers(1, 7))
    cols = {name: draw(st.lists(dyadic, min_size=n, max_size=n)) for name in VARIABLES}
    return cols, {name: draw(dyadic) for name in VARIABLES}


@settings(max_examples=60)
@given(ffn_blocks(), columns())
def test_random_ffn_blocks_evaluate_as_the_assembled_model(block, data):
    cols, bos = data
    model, evaluated = assembled(cols, [block], bos)
    for name in block.writes:
        np.testing.assert_allclose(evaluated[name], model[name], rtol=1e-9, atol=1e-9)


@settings(max_examples=80)
@given(head_blocks(), columns())
def test_random_head_blocks_evaluate_as_the_assembled_model(block, data):
    cols, bos = data
    model, evaluated = assembled(cols, [block], bos)
    for name in block.writes:
        np.testing.assert_allclose(evaluated[name], model[name], rtol=1e-9, atol=1e-9)


def reading(form: Form, name: str) -> Form:
    """``form`` with the variable x0 replaced by ``name``."""
    return Form({name if v == "x0" else v: c for v, c in form.items()})


@settings(max_examples=30)
@given(st.lists(st.one_of(ffn_blocks(), head_blocks()), min_size=1, max_size=3), columns())
def test_random_circuits_evaluate_as_the_assembled_model(blocks, data):
    """Blocks in sequence, as the builder schedules them into layers: each reads the
    previous block's first output where it is continuous in it (ReLU and GELU units
    outside norm groups, head values, softmax scores), so that the rounding the two
    evaluations differ by does not cross a threshold; thresholds keep reading x0."""
    cols, bos = data
    chain: list[Block] = []
    for k, block in enumerate(blocks):
        names = {name: f"b{k}:{name}" for name in block.writes}
        previous = chain[-1].writes[0] if chain else "x0"
        if isinstance(block, FFNBlock):
            block.outputs = {names[n]: c for n, c in block.outputs.items()}
            block.constants = {names[n]: c for n, c in block.constants.items()}
            grouped = {u for group in block.norm_groups for u in group}
            block.units = [
                u if u.activation == "heaviside" or j in grouped else
                Unit(reading(u.form, previous), u.bias, u.activation)
                for j, u in enumerate(block.units)
            ]  # fmt: skip
        else:
            block.values = {names[n]: reading(f, previous) for n, f in block.values.items()}
            if block.weighting == "softmax":
                block.query = [reading(f, previous) for f in block.query]
                block.key = [reading(f, previous) for f in block.key]
        chain.append(block)
    model, evaluated = assembled(cols, chain, bos)
    for name, got in evaluated.items():
        scale = max(1.0, float(np.max(np.abs(model[name]))))
        np.testing.assert_allclose(got, model[name], rtol=1e-9, atol=1e-9 * scale)


def constructions():
    """Cookbook constructions over the variables x0..x2 (and positional features)."""
    x, y, p = var("x0"), var("x1"), var("x2")
    one = var(BOS_VAR) + var(NONBOS_VAR)
    return {
        "minimum": [ffn.minimum(x, y, "o")],
        "cpwl": [ffn.cpwl(x, ((-1, 2), (0, 0), (0.5, 1), (2, 1)), "o")],
        "gt_zero": [ffn.gt_zero(x - y, "o", tolerance=0.5)],
        "eq_zero": [ffn.eq_zero(x - y, "o", tolerance=0.0)],
        "clamp": [ffn.clamp(x, -1, 1.5, "o")],
        "multiply": [ffn.multiply(x, y, "o", bound=4)],
        "positive": [layernorm.positive(x - y, "o")],
        "sign": layernorm.sign([x, y], ["o", "o2"], delta=0.5),
        "average": [attention.average(x, "o", mask="strict-past", weighting="hard")],
        "offset_lookup": [attention.offset_lookup(x, 2, "o", one, BOS_VAR)],
        "identity": [attention.identity(x, "o", weighting="hard-right")],
        "predecessor": [attention.predecessor_strict(x, "o", weighting="hard")],
        "tie_break": [
            attention.tie_break(
                HeadBlock([one], [p], {"o": x}, EXACT, weighting="hard"), side="left", gap=0.25
            )
        ],
        "first": attention.first(var("alternating"), "o", one=one),
        "sharpen": [attention.sharpen(attention.identity(x, "o"), gap=1.0, max_len=8)],
        "conditional_bigm": [ffn.conditional_bigm(p, x, y, "o", bound=3)],
    }


@pytest.mark.parametrize("name", sorted(constructions()))
@settings(max_examples=15)
@given(data=columns())
def test_cookbook_constructions_evaluate_as_the_assembled_model(name, data):
    cols, bos = data
    model, evaluated = assembled(cols, constructions()[name], bos)
    for out_name, got in evaluated.items():
        np.testing.assert_allclose(got, model[out_name], rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------- BOS of compiled models


def bos_residual(builder: Builder, tokens: list[str], **kw) -> dict[str, float]:
    model = builder.build({}, reuse=False)  # every variable keeps its value to the end
    trace = run_tokens(model, [tokens], residuals=True, on_overlength="ignore", **kw).residuals
    assert trace is not None
    final = trace[-1][1][0, 0]
    return dict(zip(model.residual, map(float, final), strict=True))


CRASP_EXAMPLES = sorted(p.name for p in (ROOT / "examples" / "crasp").iterdir())


@pytest.mark.parametrize("name", CRASP_EXAMPLES)
@pytest.mark.parametrize("mode", ["heaviside", "layernorm", "relu"])
def test_crasp_bos_values_are_the_bos_residual(name, mode):
    """What the C-RASP lowering follows at BOS (every block's ``evaluate``) is the BOS
    residual of the model, whatever the input."""
    program = load_program(ROOT / "examples" / "crasp" / name)
    lowered = lower_program(program, mode, 6 if mode == "relu" else None)
    symbols = list(program.alphabet)
    tokens = [symbols[k % len(symbols)] for k in range(5)]
    residual = bos_residual(lowered.builder, tokens)
    for variable, value in residual.items():
        assert lowered.at_bos[variable] == pytest.approx(value, rel=1e-12, abs=1e-12), variable


@pytest.mark.parametrize("seed", range(12))
def test_random_program_bos_values_are_the_bos_residual(seed):
    program = random_program(seed)
    for mode in ("heaviside", "relu"):
        lowered = lower_program(program, mode, 4 if mode == "relu" else None)
        residual = bos_residual(lowered.builder, list(program.alphabet)[:1] * 3)
        for variable, value in residual.items():
            assert lowered.at_bos[variable] == pytest.approx(value, rel=1e-12, abs=1e-12)


PCOC_EXAMPLES = sorted((ROOT / "examples" / "pcoc").glob("*.pcoc"))  # no sends


@pytest.mark.parametrize("path", PCOC_EXAMPLES, ids=lambda p: p.name)
def test_pcoc_bos_values_are_the_bos_residual(path):
    """In the average-hard model BOS reads only itself: its residual is what the PCOC
    lowering follows (every value's form is 0 there)."""
    n = 4
    lowered = lower_pcoc(load_pcoc(path), n)
    builder = lowered.builder
    rng = np.random.default_rng(0)
    values = [rng.integers(-3, 4, size=(n, len(builder.numeric_inputs))).astype(float)]
    residual = bos_residual(builder, ["m"] * n, values=values)
    for variable, value in residual.items():
        assert lowered.at_bos[variable] == pytest.approx(value, rel=1e-12, abs=1e-12), variable
    for slot in lowered.slots.values():
        assert lowered.at_bos.form(slot.form) == pytest.approx(0.0, abs=1e-9)
