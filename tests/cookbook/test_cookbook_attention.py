"""Attention constructions (crasp_compiler.cookbook.attention) against their definitions.

Every block runs on chosen per-position inputs through the builder, the numpy executor and
the torch module (tests.support.block_harness.evaluate: both runtimes agree to 1e-9); outputs are
compared with the definition at every position, BOS (index 0) included. Each construction
is checked under each weighting it claims (Table 2), softmax through ``sharpen``.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp_compiler.cookbook import attention as A
from crasp_compiler.cookbook import ffn
from crasp_compiler.cookbook import layernorm as L
from crasp_compiler.cookbook.blocks import Exactness, Form, HeadBlock, var
from crasp_compiler.model.features import almost_orthogonal, ao_signs, feature_matrix, onehot
from tests.support.block_harness import build, evaluate

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FEW = settings(max_examples=20)
N = 40  # the maximum length of the lookup tests
TOL = 1e-9


def values(n: int, low: float = -5.0, high: float = 5.0):
    return st.lists(
        st.floats(low, high, allow_nan=False, allow_infinity=False), min_size=n, max_size=n
    )


def declare(b, *blocks) -> None:
    """Declare every positional feature the blocks read."""
    for block in blocks:
        for name in sorted(block.reads):
            if name.startswith(("index", "inverse", "alternating", "onehot:", "ao:")):
                b.feature(name)


def shape(columns, construct, bos_values=None):
    """(layers, heads per layer, hidden units per layer) of the built model."""
    model, _ = build(columns, construct, bos_values)
    return [(len(layer.heads), layer.mlp.w1.shape[0] if layer.mlp else 0) for layer in model.layers]


# ---------------------------------------------------------------------------- §5.1


@FEW
@given(st.integers(1, 30).flatmap(lambda n: st.tuples(values(n), st.floats(-5, 5))))
def test_identity_reads_own_value_under_every_weighting(case):
    v, v0 = case
    n = len(v)

    def construct(b, x):
        outs = {w: b.add(A.identity(x["v"], f"id-{w}", weighting=w)) for w in A.HARD}
        sharp = A.sharpen(A.identity(x["v"], "soft"), gap=1, max_len=n, value_range=10)
        outs["soft"] = b.add(sharp)
        return outs

    got = evaluate({"v": v}, construct, {"v": v0})
    want = np.array([v0, *v])
    for w in A.HARD:
        np.testing.assert_allclose(got[w], want, atol=TOL)
    # within (ℓ/2)·(spread of the values) = ptp/8 (the block states the looser 10/8)
    assert np.all(np.abs(got["soft"] - want) <= np.ptp(want) / 8 + TOL)
    assert shape({"v": v}, construct) == [(4, 0)]


def test_identity_rejects_softmax_and_unknown_weightings():
    with pytest.raises(ValueError, match="sharpen"):
        A.identity(var("x"), "o", weighting="softmax")
    with pytest.raises(ValueError, match="weighting"):
        A.identity(var("x"), "o", weighting="soft")


MASK_ROWS = {
    "causal": lambda t, n: range(t + 1),
    "strict": lambda t, n: range(t),
    "past": lambda t, n: range(t, n + 1),
    "strict-past": lambda t, n: range(t + 1, n + 1),
    "none": lambda t, n: range(n + 1),
}


@FEW
@given(st.integers(1, 30).flatmap(lambda n: st.tuples(values(n), st.floats(-5, 5))))
def test_average_is_the_mean_over_the_masked_keys_bos_included(case):
    v, v0 = case
    n = len(v)
    full = np.array([v0, *v])

    def construct(b, x):
        return {
            f"{mask}/{w}": b.add(A.average(x["v"], f"{mask}/{w}", mask=mask, weighting=w))
            for mask in MASK_ROWS
            for w in A.UNIFORM
        }

    got = evaluate({"v": v}, construct, {"v": v0})
    for mask, rows in MASK_ROWS.items():
        want = [np.mean(full[list(rows(t, n))]) if len(rows(t, n)) else 0.0 for t in range(n + 1)]
        for w in A.UNIFORM:
            np.testing.assert_allclose(got[f"{mask}/{w}"], want, atol=TOL)


def test_average_counts_and_the_paper_token_average():
    bits = [1, 0, 1, 1, 0, 1]
    got = evaluate({"b": bits}, lambda b, x: {"o": b.add(A.average(x["b"], "o"))})["o"]
    counts = np.cumsum([0, *bits])
    t = np.arange(len(bits) + 1)
    np.testing.assert_allclose(got, counts / (t + 1), atol=TOL)
    # the paper's Avg← over tokens 1..t is out·(t+1)/t
    np.testing.assert_allclose(got[1:] * (t[1:] + 1) / t[1:], counts[1:] / t[1:], atol=TOL)


def test_average_rejects_unique_hard_and_bad_masks():
    with pytest.raises(ValueError, match="unique-hard"):
        A.average(var("x"), "o", weighting="hard-left")
    with pytest.raises(ValueError, match="mask"):
        A.average(var("x"), "o", mask="future")


def test_causal_average_is_the_causal_softmax_average():
    old = HeadBlock([], [], {"o": var("x")}, Exactness("exact at every length"), label="L")
    assert A.causal_average(var("x"), "o", label="L") == old


# ---------------------------------------------------------------------------- §5.2


@pytest.mark.parametrize("n", [1, 2, 3, 7, 40])
def test_first_marks_the_first_token_or_bos(n):
    def construct(b, x):
        alt = b.feature("alternating")
        outs = {}
        for mask in ("strict", "causal"):
            for w in A.UNIFORM:
                blocks = A.first(alt, f"{mask}/{w}", one=b.one, mask=mask, weighting=w)
                for block in blocks:
                    b.add(block)
                outs[f"{mask}/{w}"] = var(f"{mask}/{w}")
                outs[f"{mask}/{w}/avg"] = var(f"{mask}/{w}.avg")
        return outs

    got = evaluate({"z": [0.0] * n}, construct)
    t = np.arange(n + 1)
    alt = (-1.0) ** t
    strict = [np.mean(alt[:s]) if s else 0.0 for s in t]  # the paper's −(−1)^i, shifted
    causal = [np.mean(alt[: s + 1]) for s in t]
    for w in A.UNIFORM:
        np.testing.assert_allclose(got[f"strict/{w}/avg"], strict, atol=TOL)
        np.testing.assert_allclose(got[f"causal/{w}/avg"], causal, atol=TOL)
        np.testing.assert_allclose(got[f"strict/{w}"], t == 1, atol=TOL)
        np.testing.assert_allclose(got[f"causal/{w}"], t == 0, atol=TOL)
    assert max(strict[2:], default=0) <= 1 / 3 + TOL and max(causal[1:]) <= 1 / 3 + TOL

    def one_first(b, x):
        for block in A.first(b.feature("alternating"), "f", one=b.one):
            b.add(block)
        return {"f": var("f")}

    assert shape({"z": [0.0] * n}, one_first) == [(1, 2)]


def test_first_rejects_other_masks_and_weightings():
    with pytest.raises(ValueError, match="mask"):
        A.first(var("alternating"), "f", one=var("one"), mask="none")
    with pytest.raises(ValueError, match="weighting"):
        A.first(var("alternating"), "f", one=var("one"), weighting="hard-left")


# ---------------------------------------------------------------------------- §5.3


@st.composite
def lookups(draw, max_len: int = N):
    """(q, v, bits, v0): q_t for t = 1..n (random in 1..t, or the edges t and 1)."""
    n = draw(st.integers(1, max_len))
    mode = draw(st.sampled_from(["random", "self", "first"]))
    if mode == "random":
        q = [draw(st.integers(1, t)) for t in range(1, n + 1)]
    elif mode == "self":
        q = list(range(1, n + 1))
    else:
        q = [1] * n
    v = draw(values(n))
    bits = draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=n, max_size=n))
    return q, v, bits, draw(st.floats(-5, 5))


def add_all(b, blocks) -> None:
    declare(b, *blocks)
    for block in blocks:
        b.add(block)


def lookup_variants(b, make, gap: float, max_len: int, v: Form, bits: Form) -> dict[str, Form]:
    """``make(value, out, weighting)`` under every hard weighting, sharpened (softmax) on
    real values, and sharpened on bits followed by the rounding comparator."""
    blocks = [make(v, f"o-{w}", w) for w in A.HARD]
    blocks.append(A.sharpen(make(v, "soft", "hard"), gap=gap, max_len=max_len, value_range=10))
    blocks.append(A.sharpen(make(bits, "soft-bit", "hard"), gap=gap, max_len=max_len))
    blocks.append(ffn.gt_zero(var("soft-bit") - 0.25 * b.one, "bit", tolerance=0.5))
    add_all(b, blocks)
    names = [f"o-{w}" for w in A.HARD] + ["soft", "soft-bit", "bit"]
    return {name: var(name) for name in names}


def check_lookup(got, q, v, bits, v0, bits0: float = 0.0) -> None:
    full_v = np.array([v0, *v])
    full_bits = np.array([bits0, *bits])
    index = np.array([0, *q])
    for w in A.HARD:
        np.testing.assert_allclose(got[f"o-{w}"], full_v[index], atol=TOL)
    assert np.all(np.abs(got["soft"] - full_v[index]) <= np.ptp(full_v) / 8 + TOL)
    assert np.all(np.abs(got["soft-bit"] - full_bits[index]) <= 1 / 8 + TOL)
    np.testing.assert_allclose(got["bit"], full_bits[index], atol=TOL)


@FEW
@given(lookups())
def test_lookup_onehot_with_data_queries(case):
    q, v, bits, v0 = case
    cols = {"v": v, "bits": bits, **{f"q{k}": [float(x == k) for x in q] for k in range(N + 1)}}

    def construct(b, x):
        query = [x[f"q{k}"] for k in range(N + 1)]

        def make(value, out, w):
            return A.lookup_onehot(query, value, out, weighting=w)

        return lookup_variants(b, make, 1.0, N, x["v"], x["bits"])

    # at BOS every q_k column is 0: no key scores 1, BOS is the only key
    check_lookup(evaluate(cols, construct, {"v": v0}), q, v, bits, v0)


@FEW
@given(lookups())
def test_lookup_onehot_with_the_positional_query_t_minus_1(case):
    _, v, bits, v0 = case
    n = len(v)

    def construct(b, x):
        def make(value, out, w):
            return A.lookup_onehot(A.onehot_query(1, N), value, out, weighting=w)

        return lookup_variants(b, make, 1.0, N, x["v"], x["bits"])

    q = list(range(0, n))
    check_lookup(evaluate({"v": v, "bits": bits}, construct, {"v": v0}), q, v, bits, v0)


def test_lookup_onehot_size_and_bound():
    block = A.lookup_onehot(A.onehot_query(0, 10), var("v"), "o")
    assert len(block.query) == len(block.key) == 11
    assert block.key[3] == var(onehot(3)) and block.query[3] == var(onehot(3))
    assert block.exact.max_len == 10
    assert A.onehot_query(2, 5)[4] == Form() and A.onehot_query(2, 5)[3] == var(onehot(5))
    with pytest.raises(ValueError, match="at least 2"):
        A.lookup_onehot([var("q")], var("v"), "o")
    with pytest.raises(ValueError, match="offset"):
        A.onehot_query(-1, 5)


AO_SEED = 3
AO_DIM = A.ao_dim(N, AO_SEED)


def test_ao_dim_is_the_smallest_almost_orthogonal_dimension():
    for seed, max_len in [(AO_SEED, N), (0, 10), (1, 25)]:
        m = A.ao_dim(max_len, seed)
        # the runtimes' own features, not the helper's signs
        names = [almost_orthogonal(seed, m, k) for k in range(m)]
        x = feature_matrix(names, max_len + 1)
        gram = x @ x.T
        np.testing.assert_allclose(np.diag(gram), 1.0, atol=1e-12)
        off = gram[~np.eye(max_len + 1, dtype=bool)]
        assert np.abs(off).max() <= 0.25 + 1e-12
        assert A.ao_overlap(seed, m, max_len) == pytest.approx(np.abs(off).max())
        assert A.ao_overlap(seed, m - 1, max_len) > 0.25
        # far below the paper's sufficient m = ⌈12k/ε² log 2N⌉ (k = 1, ε = 1/4)
        assert m < math.ceil(192 * math.log(2 * max_len))


def test_lookup_almost_orthogonal_checks_its_dimension():
    query = A.ao_query(0, AO_DIM - 1, AO_SEED)
    with pytest.raises(ValueError, match=f"m = {AO_DIM} works"):
        A.lookup_almost_orthogonal(query, var("v"), "o", max_len=N, seed=AO_SEED)
    block = A.lookup_almost_orthogonal(
        A.ao_query(0, AO_DIM, AO_SEED), var("v"), "o", max_len=N, seed=AO_SEED
    )
    assert len(block.key) == AO_DIM and block.exact.max_len == N
    with pytest.raises(ValueError, match="at least one"):
        A.lookup_almost_orthogonal([], var("v"), "o", max_len=N)


@FEW
@given(lookups())
def test_lookup_almost_orthogonal_with_data_queries(case):
    q, v, bits, v0 = case
    signs = {k: ao_signs(AO_SEED, AO_DIM, k, np.array(q)) for k in range(AO_DIM)}
    bos_query = {f"x{k}": float(ao_signs(AO_SEED, AO_DIM, k, np.array([0]))[0]) for k in signs}
    cols = {"v": v, "bits": bits, **{f"x{k}": list(s) for k, s in signs.items()}}

    def construct(b, x):
        query = [x[f"x{k}"] for k in range(AO_DIM)]

        def make(value, out, w):
            return A.lookup_almost_orthogonal(
                query, value, out, max_len=N, seed=AO_SEED, weighting=w
            )

        return lookup_variants(b, make, 0.75, N, x["v"], x["bits"])

    got = evaluate(cols, construct, {"v": v0, **bos_query})
    check_lookup(got, q, v, bits, v0)


@FEW
@given(lookups(max_len=N))
def test_lookup_almost_orthogonal_with_the_positional_query_t_minus_1(case):
    _, v, bits, v0 = case

    def construct(b, x):
        def make(value, out, w):
            query = A.ao_query(1, AO_DIM, AO_SEED)
            return A.lookup_almost_orthogonal(
                query, value, out, max_len=N, seed=AO_SEED, weighting=w
            )

        return lookup_variants(b, make, 0.75, N, x["v"], x["bits"])

    got = evaluate({"v": v, "bits": bits}, construct, {"v": v0})
    check_lookup(got, list(range(len(v))), v, bits, v0)


def test_layernorm_hash_gap_is_the_smallest_score_gap():
    for n in (1, 2, 5, 40):
        grid = np.arange(n + 1, dtype=float)
        lh = np.sqrt(2 / (grid**2 + 1))[:, None] * np.stack([grid, 1 + 0 * grid], 1)
        scores = 2 * lh @ lh.T  # the 4-vector dot product (a, b, −a, −b)·(a', b', −a', −b')
        np.testing.assert_allclose(np.diag(scores), 4.0)
        gaps = 4 - scores[~np.eye(n + 1, dtype=bool)]
        assert A.layernorm_hash_gap(n) == pytest.approx(gaps.min(), rel=1e-6)
    assert A.layernorm_hash_gap(200) > 1e-9  # resolved by the runtimes' tolerance
    assert A.layernorm_hash_gap(200) == pytest.approx(2 / (200**2 - 199) ** 2, rel=1e-6)


def lh_blocks(b, query_xs: Form, query_s: Form, scaled_keys: bool) -> tuple:
    index, inverse = b.feature("index"), b.feature("inverse")
    if scaled_keys:  # (t, 1)·1/(t+1): scale invariance
        keys = L.layernorm_hash(b.one - inverse, inverse, ("ka", "kb"))
    else:
        keys = L.layernorm_hash(index, b.one, ("ka", "kb"))
    queries = L.layernorm_hash(query_xs, query_s, ("qa", "qb"))
    b.add(keys)
    b.add(queries)
    return (var("qa"), var("qb")), (var("ka"), var("kb"))


@FEW
@given(lookups(), st.booleans())
def test_lookup_layernorm_hash_with_data_queries(case, scaled_keys):
    q, v, bits, v0 = case

    def construct(b, x):
        query, key = lh_blocks(b, x["q"], b.one, scaled_keys)

        def make(value, out, w):
            return A.lookup_layernorm_hash(query, key, value, out, weighting=w)

        return lookup_variants(b, make, A.layernorm_hash_gap(N), N, x["v"], x["bits"])

    got = evaluate({"q": q, "v": v, "bits": bits}, construct, {"v": v0})
    check_lookup(got, q, v, bits, v0)


@FEW
@given(lookups(), st.booleans())
def test_lookup_layernorm_hash_with_the_positional_query_t_minus_1(case, scaled):
    _, v, bits, v0 = case

    def construct(b, x):
        inverse = b.feature("inverse")
        if scaled:  # ((t − 1)/(t + 1), 1/(t + 1))
            query, key = lh_blocks(b, b.one - 2 * inverse, inverse, scaled)
        else:
            query, key = lh_blocks(b, b.feature("index") - b.one, b.one, scaled)

        def make(value, out, w):
            return A.lookup_layernorm_hash(query, key, value, out, weighting=w)

        return lookup_variants(b, make, A.layernorm_hash_gap(N), N, x["v"], x["bits"])

    got = evaluate({"v": v, "bits": bits}, construct, {"v": v0})
    check_lookup(got, list(range(len(v))), v, bits, v0)


def test_lookup_layernorm_hash_at_length_200():
    n = 200
    v = np.random.default_rng(5).uniform(-1, 1, n)

    def construct(b, x):
        query, key = lh_blocks(b, b.feature("index") - b.one, b.one, False)
        return {"o": b.add(A.lookup_layernorm_hash(query, key, x["v"], "o"))}

    got = evaluate({"v": v}, construct, torch_too=False)["o"]
    np.testing.assert_allclose(got[1:], np.array([0.0, *v])[:-1], atol=TOL)


def test_lookup_layernorm_hash_needs_pairs():
    with pytest.raises(ValueError, match=r"\(a, b\)"):
        A.lookup_layernorm_hash([var("a")], [var("a"), var("b")], var("v"), "o")


@FEW
@given(lookups())
def test_lookup_quadratic_with_data_queries(case):
    q, v, bits, v0 = case

    def construct(b, x):
        def make(value, out, w):
            return A.lookup_quadratic(x["q"], value, out, s=b.one, weighting=w)

        return lookup_variants(b, make, 1.0, N, x["v"], x["bits"])

    check_lookup(evaluate({"q": q, "v": v, "bits": bits}, construct, {"v": v0}), q, v, bits, v0)


@FEW
@given(lookups(max_len=N), st.booleans())
def test_lookup_quadratic_with_the_positional_query_t_minus_1(case, scaled):
    _, v, bits, v0 = case
    n = len(v)

    def construct(b, x):
        index, inverse = b.feature("index"), b.feature("inverse")
        if scaled:  # q·s = (t − 1)/(t + 1), s = 1/(t + 1): gap s ≥ 1/(n + 1)
            query, s, gap = b.one - 2 * inverse, inverse, 1 / (n + 1)
        else:
            query, s, gap = index - b.one, b.one, 1.0

        def make(value, out, w):
            return A.lookup_quadratic(query, value, out, s=s, weighting=w)

        return lookup_variants(b, make, gap, N, x["v"], x["bits"])

    got = evaluate({"v": v, "bits": bits}, construct, {"v": v0})
    check_lookup(got, list(range(n)), v, bits, v0)


def test_lookups_reject_softmax_with_a_hint():
    for make in (
        lambda w: A.lookup_quadratic(var("q"), var("v"), "o", s=var("one"), weighting=w),
        lambda w: A.lookup_onehot(A.onehot_query(0, 3), var("v"), "o", weighting=w),
        lambda w: A.predecessor_strict(var("v"), "o", weighting=w),
    ):
        with pytest.raises(ValueError, match="sharpen"):
            make("softmax")


# ---------------------------------------------------------------------------- §5.4


@FEW
@given(
    st.integers(1, 40).flatmap(lambda n: st.tuples(values(n, 0, 1), st.sampled_from([0.0, 0.7])))
)
def test_predecessor_alternating_reads_t_minus_1(case):
    v, v0 = case

    def construct(b, x):
        alt = b.feature("alternating")
        outs = {}
        for w in ("hard-right", "hard"):
            for bound in (None, 1.0):
                name = f"{w}/{bound}"
                blocks = A.predecessor_alternating(
                    x["v"], name, one=b.one, alternating=alt, weighting=w, bound=bound
                )
                add_all(b, blocks)
                outs[name] = var(name)
        return outs

    got = evaluate({"v": v}, construct, {"v": v0})
    full = np.array([v0, *v])
    want = np.array([v0, *full[:-1]])  # BOS reads itself; the first token reads BOS
    for name, out in got.items():
        np.testing.assert_allclose(out, want, atol=TOL, err_msg=name)


@FEW
@given(st.integers(1, 40).flatmap(lambda n: values(n, -3, 3)))
def test_predecessor_alternating_with_bounded_values_of_any_sign(v):
    def construct(b, x):
        add_all(b, A.predecessor_alternating(x["v"], "p", one=b.one, bound=3.0))
        return {"p": var("p")}

    got = evaluate({"v": v}, construct)["p"]
    np.testing.assert_allclose(got, [0.0, 0.0, *v[:-1]], atol=TOL)  # 0 at the first token


def test_predecessor_alternating_is_two_heads_and_one_ffn_in_one_layer():
    for w, bound, units in (("hard-right", None, 2), ("hard", 2.0, 4)):

        def construct(b, x, w=w, bound=bound):
            add_all(b, A.predecessor_alternating(x["v"], "p", one=b.one, weighting=w, bound=bound))
            return {"p": var("p")}

        assert shape({"v": [0.5] * 5}, construct) == [(2, units)]
    with pytest.raises(ValueError, match="weighting"):
        A.predecessor_alternating(var("v"), "p", one=var("one"), weighting="hard-left")


@FEW
@given(st.integers(1, 40).flatmap(lambda n: st.tuples(values(n), st.floats(-5, 5))))
def test_predecessor_strict_reads_t_minus_1_and_bos_reads_0(case):
    v, v0 = case
    n = len(v)

    def construct(b, x):
        b.feature("index")
        outs = {w: b.add(A.predecessor_strict(x["v"], w, weighting=w)) for w in A.HARD[::2]}
        sharp = A.sharpen(A.predecessor_strict(x["v"], "soft"), gap=1, max_len=n, value_range=10)
        outs["soft"] = b.add(sharp)
        return outs

    got = evaluate({"v": v}, construct, {"v": v0})
    want = np.array([0.0, v0, *v[:-1]])
    for w in ("hard", "hard-right"):
        np.testing.assert_allclose(got[w], want, atol=TOL)
    # within (ℓ/2)·(spread of the values) = ptp/8 (the block states the looser 10/8)
    assert np.all(np.abs(got["soft"] - want) <= np.ptp(want) / 8 + TOL)
    assert got["soft"][0] == 0.0  # the BOS row has no key under any weighting


def test_predecessor_strict_blocks():
    hard = A.predecessor_strict(var("v"), "o")
    assert hard.mask == "strict" and hard.query == [var("index")] == hard.key
    right = A.predecessor_strict(var("v"), "o", weighting="hard-right")
    assert right.query == [] and right.key == [] and right.weighting == "hard-right"


def test_offset_lookups_keep_their_weights_and_behaviour():
    one, bos = Form({"BOS": 1.0, "nonbos": 1.0}), "BOS"
    hard = A.offset_lookup(var("v"), 2, "o", one, bos, "L")
    assert (hard.query, hard.key, hard.bias, hard.weighting, hard.scale) == (
        [one],
        [{bos: 1.0}],
        {2: 2.0},
        "hard",
        1.0,
    )
    soft = A.soft_offset_lookup(var("v"), 2, "o", one, label="L")
    assert soft.query == [{"index": 3.0, "BOS": -6.0, "nonbos": -6.0}, {"BOS": 3.0, "nonbos": 3.0}]
    assert soft.key == [{"index": 2.0}, {"index^2": -1.0}]
    assert (soft.scale, soft.bias, soft.weighting, soft.exact.max_len) == (1.0, {}, "softmax", None)
    assert soft.exact.error == 0.1
    bits = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0]

    def construct(b, x):
        declare(b, soft)
        return {
            "h": b.add(A.offset_lookup(x["b"], 2, "h", b.one, "BOS")),
            "s": b.add(A.soft_offset_lookup(x["b"], 2, "s", b.one)),
        }

    got = evaluate({"b": bits}, construct)
    want = np.array([0, 0, 0, *bits[:-2]])
    np.testing.assert_allclose(got["h"], want, atol=TOL)
    assert np.all(np.abs(got["s"] - want) < 0.1)


def test_soft_offset_lookup_bound_holds_at_every_length():
    """``Σ_{j≠j*} α_j ≤ 2 Σ_d e^{−3d²} < 1/10`` whatever the length: a lone 1 at the winner
    among 0s is read above 0.9, a lone 0 among 1s below 0.1 (the worst cases), at every
    row of a 3000-token input and for offsets beyond the row (BOS wins)."""
    assert 2 * sum(math.exp(-3 * d * d) for d in range(1, 10)) < 0.0996
    size, c = 3000, 5
    t = np.arange(size + 1, dtype=np.float64)
    head = A.soft_offset_lookup(var("v"), c, "o", var("one"))
    for lone in (0.0, 1.0):
        for row in (1, 4, 5, 6, 7, 1500, size):
            v = np.full(size + 1, 1.0 - lone)
            v[0] = 0.0
            winner = max(row - c, 0)
            v[winner] = lone if winner else 0.0
            columns = {"v": v, "one": np.ones(size + 1), "index": t, "index^2": t * t}
            got = head.evaluate(columns)["o"][row]
            assert abs(got - v[winner]) < 0.1, (lone, row)


def test_soft_offset_lookup_scores_are_exact_integers_in_float32():
    """Up to 9t² + 6ct < 2^24 every float32 score is the exact integer (the rounding
    analysis's check), so the float32 head equals the float64 one to float32 rounding."""
    c = 3
    size = 1364  # 9·1364² + 6·3·1364 < 2^24
    assert 9 * size**2 + 6 * c * size < 2**24
    t = np.arange(size + 1)
    q = np.stack([3 * (t - c), 3 * np.ones_like(t)], axis=1).astype(np.float32)
    k = np.stack([2 * t, -(t**2)], axis=1).astype(np.float32)
    exact = 3 * (2 * (t[:, None] - c) * t[None, :] - t[None, :] ** 2)
    np.testing.assert_array_equal((q @ k.T).astype(np.int64), exact)


# ---------------------------------------------------------------------------- §5.5


@FEW
@given(lookups(max_len=20))
def test_multi_head_is_the_sum_of_its_heads_in_one_layer(case):
    q, v, _, v0 = case
    makers = [
        lambda x: A.average(x["v"], "o"),
        lambda x: A.identity(x["v"], "o"),
        lambda x: A.predecessor_strict(x["v"], "o"),
        lambda x: A.lookup_quadratic(x["q"], x["v"], "o", s=x["one"]),
    ]
    cols = {"q": q, "v": v}

    def single(make):
        def construct(b, x):
            block = make({**x, "one": b.one})
            add_all(b, [block])
            return {"o": var("o")}

        return evaluate(cols, construct, {"v": v0})["o"]

    def together(b, x):
        heads = A.multi_head([make({**x, "one": b.one}) for make in makers], "m", label="mh")
        add_all(b, heads)
        return {"m": A.head_sum(heads)}

    got = evaluate(cols, together, {"v": v0})["m"]
    np.testing.assert_allclose(got, sum(single(make) for make in makers), atol=1e-8)
    assert shape(cols, together, {"v": v0}) == [(len(makers), 0)]


def test_multi_head_names_and_errors():
    heads = A.multi_head([A.average(var("x"), "a"), A.identity(var("y"), "b", label="id")], "m")
    assert [h.writes for h in heads] == [["m.0"], ["m.1"]]
    assert A.head_sum(heads) == var("m.0") + var("m.1")
    assert heads[1].label == "id"
    with pytest.raises(ValueError, match="at least one"):
        A.multi_head([], "m")
    with pytest.raises(ValueError, match="independent"):
        A.multi_head([A.average(var("x"), "a"), A.average(var("a"), "b")], "m")
    two = HeadBlock([], [], {"a": var("x"), "b": var("x")}, Exactness("exact"))
    with pytest.raises(ValueError, match="writes 2"):
        A.multi_head([two], "m")
    with pytest.raises(ValueError, match="HeadBlock"):
        A.multi_head([ffn.identity(var("x"), "a")], "m")


# ---------------------------------------------------------------------------- §5.6


def hard_reference(scores: np.ndarray, allowed, side: str) -> int | None:
    """The key unique-hard attention picks in one row (None: no key)."""
    keys = [s for s in allowed]
    if not keys:
        return None
    top = max(scores[s] for s in keys)
    best = [s for s in keys if scores[s] >= top - 1e-12]
    return best[0] if side == "left" else best[-1]


@FEW
@given(
    st.integers(1, 40).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(0, 2), min_size=n + 1, max_size=n + 1),
            values(n),
            st.sampled_from([1.0, 0.5, 1e-3, 3.0]),
        )
    )
)
def test_tie_break_acts_as_unique_hard_attention(case):
    """Scores in gap·{0, 1, 2}: many ties and pairs exactly gap apart."""
    levels, v, gap = case
    n = len(v)
    keys = [gap * level for level in levels]
    spread = max(float(np.ptp([0.25, *v])), 1e-6)  # the width of the values' range
    variants = [
        (mask, side, positional)
        for side in ("left", "right")
        for mask, positional in (
            ("causal", "index"),
            ("strict", "index"),
            ("causal", "inverse"),
            ("none", "inverse"),
            ("past", "inverse"),
        )
    ]

    def construct(b, x):
        b.feature("index"), b.feature("inverse")
        outs = {}
        for mask, side, positional in variants:
            name = f"{mask}/{side}/{positional}"
            head = HeadBlock(
                [b.one], [x["k"]], {name: x["v"]}, Exactness("e"), weighting="hard", mask=mask
            )
            broken = A.tie_break(head, side=side, gap=gap, positional=positional, one=b.one)
            outs[name] = b.add(broken)
            unique = HeadBlock(
                [b.one],
                [x["k"]],
                {f"u/{name}": x["v"]},
                Exactness("e"),
                weighting=f"hard-{side}",
                mask=mask,
            )
            outs[f"u/{name}"] = b.add(unique)
            if positional == "index":  # tieless with gap γ/(n+1): softmax simulates it
                sharp = A.sharpen(
                    replace(broken, values={f"s/{name}": x["v"]}),
                    gap=gap / (n + 1),
                    max_len=n,
                    value_range=spread,
                )
                outs[f"s/{name}"] = b.add(sharp)
        return outs

    got = evaluate({"k": keys[1:], "v": v}, construct, {"k": keys[0], "v": 0.25})
    full_v = np.array([0.25, *v])
    scores = np.array(keys)
    for mask, side, positional in variants:
        name = f"{mask}/{side}/{positional}"
        picks = [hard_reference(scores, MASK_ROWS[mask](t, n), side) for t in range(n + 1)]
        want = [0.0 if p is None else full_v[p] for p in picks]
        np.testing.assert_allclose(got[name], want, atol=TOL, err_msg=name)
        np.testing.assert_allclose(got[name], got[f"u/{name}"], atol=TOL, err_msg=name)
        if positional == "index":
            assert np.all(np.abs(got[f"s/{name}"] - np.array(want)) <= spread / 8 + TOL), name


@pytest.mark.parametrize("gap", [1.0, 1e-3])
def test_tie_break_never_overturns_a_gap_at_long_lengths(gap):
    """The worst cases: the maximum at one end of the row and every other key exactly
    gap below, the tie-break term pulling towards the other end, at t up to 300."""
    n = 300
    v = np.random.default_rng(1).uniform(-1, 1, n)

    def construct(b, x):
        b.feature("index"), b.feature("inverse")
        outs = {}
        for positional in ("index", "inverse"):
            # own position maximal (bias at offset 0), leftmost pull towards BOS
            own = HeadBlock([], [], {f"own/{positional}": x["v"]}, Exactness("e"), bias={0: gap})
            own.weighting = "hard"
            own = A.tie_break(own, side="left", gap=gap, positional=positional, one=b.one)
            outs[f"own/{positional}"] = b.add(own)
            # BOS maximal, rightmost pull towards t
            bos = HeadBlock(
                [b.one],
                [gap * b.bos],
                {f"bos/{positional}": x["v"]},
                Exactness("e"),
                weighting="hard",
            )
            bos = A.tie_break(bos, side="right", gap=gap, positional=positional, one=b.one)
            outs[f"bos/{positional}"] = b.add(bos)
        return outs

    got = evaluate({"v": v}, construct, {"v": 0.5}, torch_too=False)
    for positional in ("index", "inverse"):
        np.testing.assert_allclose(got[f"own/{positional}"], [0.5, *v], atol=TOL)
        np.testing.assert_allclose(got[f"bos/{positional}"], 0.5, atol=TOL)


def test_tie_break_terms_and_errors():
    head = HeadBlock([var("q")], [var("k")], {"o": var("v")}, Exactness("e"), weighting="hard")
    head.scale = 3.0
    right = A.tie_break(head, side="right", gap=0.5)
    assert right.query == [var("q") * 3.0, var("inverse") * 0.5]
    assert right.key == [var("k"), var("index")] and right.scale == 1.0
    left = A.tie_break(head, side="left", gap=0.5, positional="inverse", one=var("one"))
    assert left.query[-1] == var("one") * 0.5 and left.key[-1] == var("inverse")
    assert "leftmost" in left.exact.text
    with pytest.raises(ValueError, match="average-hard"):
        A.tie_break(A.identity(var("v"), "o", weighting="hard-left"), side="left", gap=1)
    with pytest.raises(ValueError, match="side"):
        A.tie_break(head, side="middle", gap=1)
    with pytest.raises(ValueError, match="gap"):
        A.tie_break(head, side="left", gap=0)
    with pytest.raises(ValueError, match="needs the constant"):
        A.tie_break(head, side="left", gap=1, positional="inverse")
    head.mask = "none"
    with pytest.raises(ValueError, match="mask causal or strict"):
        A.tie_break(head, side="left", gap=1)


# ---------------------------------------------------------------------------- §5.7


@FEW
@given(
    st.integers(1, 40).flatmap(
        lambda n: st.tuples(
            st.permutations(range(n + 1)),
            st.lists(st.floats(0, 1), min_size=n + 1, max_size=n + 1),
            st.sampled_from([1.0, 0.3, 4.0]),
            st.integers(0, 10),
        )
    )
)
def test_sharpen_is_within_its_bound_of_average_hard_attention(case):
    """Scores gap·(a permutation of 0..n): every row tieless, neighbours exactly gap apart."""
    perm, v, gap, extra = case
    n = len(perm) - 1
    max_len = n + extra
    keys = [gap * p for p in perm]

    def construct(b, x):
        hard = HeadBlock([b.one], [x["k"]], {"hard": x["v"]}, Exactness("e"), weighting="hard")
        soft = A.sharpen(
            HeadBlock([b.one], [x["k"]], {"soft": x["v"]}, Exactness("e"), weighting="hard"),
            gap=gap,
            max_len=max_len,
        )
        return {"hard": b.add(hard), "soft": b.add(soft)}

    got = evaluate({"k": keys[1:], "v": v[1:]}, construct, {"k": keys[0], "v": v[0]})
    assert np.all(np.abs(got["soft"] - got["hard"]) <= 1 / 8 + TOL)


@pytest.mark.parametrize("max_len", [1, 7, 40])
def test_sharpen_bound_is_nearly_attained(max_len):
    """Row N with its maximum at t and N keys exactly gap below: the softmax weight off
    the maximum is N e^{−gap/τ}/(1 + N e^{−gap/τ}) = (1/8)/(1 + 1/8) = 1/9."""
    v = [0.0] * (max_len - 1) + [1.0]

    def construct(b, x):
        head = HeadBlock([], [], {"o": x["v"]}, Exactness("e"), bias={0: 0.7}, weighting="hard")
        return {"o": b.add(A.sharpen(head, gap=0.7, max_len=max_len))}

    got = evaluate({"v": v}, construct)["o"]
    assert got[-1] == pytest.approx(8 / 9, abs=1e-12)


@FEW
@given(lookups(max_len=N), st.integers(0, 20))
def test_sharpened_lookup_rounds_exactly_up_to_max_len(case, extra):
    q, _, bits, _ = case
    max_len = len(q) + extra

    def construct(b, x):
        add_all(
            b, [A.sharpen(A.lookup_quadratic(x["q"], x["b"], "c", s=b.one), gap=1, max_len=max_len)]
        )
        b.add(ffn.gt_zero(var("c") - 0.25 * b.one, "bit", tolerance=0.5))
        return {"c": var("c"), "bit": var("bit")}

    got = evaluate({"q": q, "b": bits}, construct)
    want = np.array([0.0, *bits])[[0, *q]]
    np.testing.assert_allclose(got["bit"], want, atol=TOL)
    assert np.all(np.abs(got["c"] - want) <= 1 / 8 + TOL)


def test_sharpen_parameters_and_errors():
    head = A.identity(var("v"), "o")
    sharp = A.sharpen(head, gap=2.0, max_len=10)
    tau = 2.0 / math.log(80)  # the paper's τ = γ / log(8N)
    assert sharp.weighting == "softmax" and sharp.scale == pytest.approx(1 / tau)
    assert sharp.bias == {0: pytest.approx(1 / tau)}
    assert sharp.exact.max_len == 10 and sharp.exact.error == 1 / 8
    wide = A.sharpen(head, gap=1.0, max_len=10, l1=0.1, value_range=4, label="S")
    assert wide.exact.error == pytest.approx(0.2) and wide.label == "S"
    assert wide.scale == pytest.approx(math.log(200))
    with pytest.raises(ValueError, match="hard head"):
        A.sharpen(A.average(var("v"), "o"), gap=1, max_len=5)
    with pytest.raises(ValueError, match="gap"):
        A.sharpen(head, gap=-1, max_len=5)
    with pytest.raises(ValueError, match="max_len"):
        A.sharpen(head, gap=1, max_len=0)
    with pytest.raises(ValueError, match="l1"):
        A.sharpen(head, gap=1, max_len=2, l1=4)
