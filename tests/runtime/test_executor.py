"""The numpy executor against the model family's definitions, independently of the compiler.

- random models (:func:`tests.support.reference_model.random_model`) against the naive reference
  :func:`tests.support.reference_model.naive_forward`: raw outputs to 1e-9 and decided values
  exactly, every input run as one right-padded batch of mixed lengths 0..10; inputs on
  which a discrete choice sits near its threshold are left out (see
  :func:`tests.support.reference_model.well_separated`);
- the O(T) path for heads whose keys vanish at tokens (offset lookups) against the dense
  path and the naive reference, with ties; the structural kinds of heads
  (``derive_kinds``) and the path each kind, weighting and mask takes; recorded kinds are
  what runtimes read;
- the observation points of the shared forward pass (``Observer``), attention patterns
  included;
- the ``residuals=True`` trace (labels, shapes, values);
- hand-built models for each definition: masks (strict at BOS, ``none`` per sequence and
  never on padding), hard-left / hard-right / average-hard on tied maxima, softmax with a
  large scale, relative biases, heaviside at 0, gelu's tanh form, the selective layer norm,
  the decision rules;
- float32: a uniform head over 2^24 + 2 tokens keeps an exact mean; float32 and float64
  decide alike on random models with well-separated values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pytest

from crasp_compiler.errors import CraspError
from crasp_compiler.model.model import (
    BOS,
    MLP,
    Guarantee,
    Head,
    HeadKind,
    Layer,
    Model,
    Output,
    derive_kinds,
    head_kinds,
)
from crasp_compiler.runtime import numpy_exec
from crasp_compiler.runtime.backend import NUMPY
from crasp_compiler.runtime.forward import Observer, Path, forward, head_path
from crasp_compiler.runtime.numpy_exec import RunResult, run_tokens
from tests.support.reference_model import (
    SEEDS,
    Probe,
    decide,
    gelu,
    naive_forward,
    random_inputs,
    random_model,
    well_separated,
)

TOLERANCE = 1e-9


# ---------------------------------------------------------------- helpers


def draw_batch(rng: np.random.Generator, model: Model, count: int = 8) -> list[list[str]]:
    """``count`` random inputs of mixed lengths, 0 and 10 always among them."""
    inputs = random_inputs(rng, model, count=count - 2, max_len=10)
    inputs += [*random_inputs(rng, model, count=1, min_len=10, max_len=10), []]
    return [inputs[k] for k in rng.permutation(len(inputs))]


def make_model(
    w_e: dict[str, list[float]],
    layers: list[Layer],
    outputs: dict[str, tuple[int, str]],
    *,
    features: tuple[str, ...] = (),
    w_p: list[list[float]] | None = None,
) -> Model:
    """A hand-built model: ``w_e`` maps BOS (key ``BOS``) and each symbol to its embedding
    row; ``outputs`` maps a name to (residual dimension it reads, rule)."""
    vocab = [BOS, *(s for s in w_e if s != BOS)]
    embedding = np.array([w_e[s] for s in vocab], dtype=np.float64)
    d = embedding.shape[1]
    return Model(
        vocab=vocab,
        w_e=embedding,
        features=list(features),
        w_p=np.zeros((d, 0)) if w_p is None else np.array(w_p, dtype=np.float64),
        layers=layers,
        outputs=[Output(name, np.eye(d)[dim], rule) for name, (dim, rule) in outputs.items()],
        residual=[f"r{i}" for i in range(d)],
        guarantee=Guarantee(None, "hand-built test model"),
    )


def unit(d: int, i: int) -> np.ndarray:
    """Row vector (1, d) selecting dimension i."""
    return np.eye(d)[i][None, :]


def head(d: int, q: int | None, k: int | None, v: int, o: int, **options) -> Head:
    """A one-dimensional head: query reads dim q, key dim k (None: all-zero), value dim v,
    output written to dim o."""
    return Head(
        w_q=np.zeros((1, d)) if q is None else unit(d, q),
        w_k=np.zeros((1, d)) if k is None else unit(d, k),
        w_v=unit(d, v),
        w_o=unit(d, o).T,
        **options,
    )


def raw(result: RunResult, name: str, row: int = 0) -> np.ndarray:
    """Raw output ``name`` of sequence ``row`` at its real positions."""
    return result.outputs[name][row, : result.lengths[row] + 1]


def assert_matches_reference(model: Model, inputs: list[list[str]], what: str) -> int:
    """Run ``inputs`` as one batch and compare every well-separated sequence with the
    naive reference; returns how many sequences were compared."""
    result = run_tokens(model, inputs)
    compared = 0
    for row, tokens in enumerate(inputs):
        probe = Probe()
        want = naive_forward(model, tokens, probe=probe)
        if not well_separated(model, want, probe, margin=1e-6):
            continue
        compared += 1
        for out in model.outputs:
            got = raw(result, out.name, row)
            where = f"{what}: output {out.name} on {tokens}"
            np.testing.assert_allclose(
                got, want[out.name], rtol=TOLERANCE, atol=TOLERANCE, err_msg=where
            )
            np.testing.assert_array_equal(
                result.values[out.name][row, : len(tokens) + 1],
                decide(out.rule, want[out.name]),
                err_msg=where,
            )
    return compared


# ---------------------------------------------------------------- random models


def test_random_models_exercise_the_family():
    """The generator covers what the comparisons are meant to exercise, ties included."""
    seen: dict[str, int] = {}
    tied_rows = hard_rows = 0

    def note(key: str) -> None:
        seen[key] = seen.get(key, 0) + 1

    for seed in SEEDS:  # the seeds of the conformance suite
        rng = np.random.default_rng(seed)
        model = random_model(rng)
        for layer in model.layers:
            for h in layer.heads:
                note(h.weighting)
                note(h.mask)
                note("bias" if h.bias else "no bias")
                note("uniform causal" if h.is_uniform and h.mask == "causal" else "scored")
            if layer.mlp is not None:
                for kind in layer.mlp.activations:
                    note(kind)
                if layer.mlp.norm_groups:
                    note("norm")
        for out in model.outputs:
            note(out.rule)
        if model.features:
            note("features")
        for tokens in draw_batch(rng, model, count=4):
            probe = Probe()
            naive_forward(model, tokens, probe=probe)
            hard_rows += len(probe.hard_maximal)
            tied_rows += sum(1 for count in probe.hard_maximal if count > 1)
    for key in [
        *("softmax", "hard", "hard-left", "hard-right"),
        *("causal", "strict", "past", "strict-past", "none"),
        *("relu", "heaviside", "gelu", "norm", "bias", "no bias", "uniform causal", "scored"),
        *("bool", "count", "features"),
    ]:
        assert seen.get(key, 0) >= 3, (key, seen)
    assert tied_rows >= 0.3 * hard_rows  # rows of hard heads with several maximal keys


@pytest.mark.parametrize("seed", range(4))
def test_residual_trace(seed):
    rng = np.random.default_rng(1000 + seed)
    model = random_model(rng, layers=(3, 3), heads=(1, 2), p_mlp=1.0)
    model.layers[1].mlp = None
    model.layers[2].heads = []
    inputs = draw_batch(rng, model, count=5)
    result = run_tokens(model, inputs, residuals=True)
    assert run_tokens(model, inputs).residuals is None
    labels = ["embed", "layer 1 attention", "layer 1 mlp", "layer 2 attention", "layer 3 mlp"]
    assert result.residuals is not None
    assert [label for label, _ in result.residuals] == labels
    size = 1 + max(len(t) for t in inputs)
    for _, x in result.residuals:
        assert x.shape == (len(inputs), size, model.width)
    for row, tokens in enumerate(inputs):
        trace: list[tuple[str, np.ndarray]] = []
        probe = Probe()
        want = naive_forward(model, tokens, trace=trace, probe=probe)
        assert [label for label, _ in trace] == labels
        if not well_separated(model, want, probe, margin=1e-6):
            continue
        for (label, got), (_, want) in zip(result.residuals, trace, strict=True):
            np.testing.assert_allclose(
                got[row, : len(tokens) + 1], want, rtol=TOLERANCE, atol=TOLERANCE, err_msg=label
            )
        final = result.residuals[-1][1][row]
        for out in model.outputs:
            np.testing.assert_allclose(result.outputs[out.name][row], final @ out.weights)


# ---------------------------------------------------------------- masks


# dims: 0 value (BOS 5, a 0, c 1), 1 one, 2 out
STRICT_EMBED = {BOS: [5.0, 1.0, 0.0], "a": [0.0, 1.0, 0.0], "c": [1.0, 1.0, 0.0]}


@pytest.mark.parametrize(
    ("weighting", "zero_query", "expected"),
    [
        ("softmax", False, [0, 5, 3, 2, 1.75]),
        ("softmax", True, [0, 5, 3, 2, 1.75]),
        ("hard", False, [0, 5, 3, 2, 1.75]),
        ("hard", True, [0, 5, 3, 2, 1.75]),
        ("hard-left", False, [0, 5, 5, 5, 5]),
        ("hard-right", False, [0, 5, 1, 0, 1]),
        ("hard-left", True, [0, 5, 5, 5, 5]),
        ("hard-right", True, [0, 5, 1, 0, 1]),
    ],
)
def test_strict_mask_reads_zero_at_bos(weighting, zero_query, expected):
    # every score is 1 (query and key read the constant dim), or 0 with a zero query
    h = head(3, None if zero_query else 1, 1, 0, 2, weighting=weighting, mask="strict")
    model = make_model(STRICT_EMBED, [Layer([h], None)], {"o": (2, "bool")})
    result = run_tokens(model, [["c", "a", "c", "c"], [], ["a"]])
    np.testing.assert_allclose(raw(result, "o", 0), expected, rtol=1e-12, atol=0)
    assert raw(result, "o", 1).tolist() == [0.0]
    np.testing.assert_allclose(raw(result, "o", 2), [0, 5], rtol=1e-12, atol=0)


@pytest.mark.parametrize("weighting", ["softmax", "hard"])
def test_mask_none_sees_own_sequence_only(weighting):
    """Mask ``none`` averages over all real positions of the sequence, later ones included,
    and never over padding (padding rows carry BOS's id, hence BOS's embedding)."""
    # dims: 0 one, 1 is-BOS, 2 position > 0 (1 − onehot:0), 3 is-b, 4..6 outputs
    embed = {
        BOS: [1, 1, 1, 0, 0, 0, 0],
        "a": [1, 0, 1, 0, 0, 0, 0],
        "b": [1, 0, 1, 1, 0, 0, 0],
    }
    heads = [
        head(7, None, None, 1, 4, weighting=weighting, mask="none"),  # mean of is-BOS
        head(7, 0, 1, 2, 5, weighting="hard-right", mask="none"),  # last BOS-like key's feature
        head(7, None, None, 3, 6, weighting=weighting, mask="none"),  # mean of is-b
    ]
    w_p = [[0], [0], [-1], [0], [0], [0], [0]]
    model = make_model(
        embed,
        [Layer(heads, None)],
        {"bos": (4, "bool"), "pick": (5, "bool"), "b": (6, "bool")},
        features=("onehot:0",),
        w_p=w_p,
    )
    inputs = [["a"], ["a", "b", "b", "b"], []]
    result = run_tokens(model, inputs)
    for row, tokens in enumerate(inputs):
        alone = run_tokens(model, [tokens])
        for name in ("bos", "pick", "b"):
            np.testing.assert_array_equal(raw(result, name, row), raw(alone, name))
    np.testing.assert_allclose(raw(result, "bos", 0), [0.5, 0.5], rtol=1e-12)
    np.testing.assert_allclose(raw(result, "bos", 1), [0.2] * 5, rtol=1e-12)
    assert raw(result, "bos", 2).tolist() == [1.0]
    assert raw(result, "pick", 0).tolist() == [0.0, 0.0]
    assert raw(result, "pick", 1).tolist() == [0.0] * 5
    np.testing.assert_allclose(raw(result, "b", 0), [0, 0], atol=1e-15)
    np.testing.assert_allclose(raw(result, "b", 1), [0.6] * 5, rtol=1e-12)


@pytest.mark.parametrize("weighting", ["softmax", "hard", "hard-left", "hard-right"])
def test_past_mask_sees_itself_and_later_positions(weighting):
    """Mask ``past`` (s ≥ t): a uniform head averages is-b over positions t..n of the
    query's own sequence, never over padding; unique-hard picks t (left) or n (right)."""
    embed = {BOS: [1, 0, 0], "a": [1, 0, 0], "b": [1, 1, 0]}  # dims: one, is-b, out
    model = make_model(
        embed,
        [Layer([head(3, None, None, 1, 2, weighting=weighting, mask="past")], None)],
        {"o": (2, "bool")},
    )
    inputs = [list("abbab"), list("ab"), []]
    result = run_tokens(model, inputs)
    for row, tokens in enumerate(inputs):
        is_b = [0.0] + [1.0 if x == "b" else 0.0 for x in tokens]
        n = len(is_b)
        if weighting in ("softmax", "hard"):
            want = [sum(is_b[t:]) / (n - t) for t in range(n)]
        elif weighting == "hard-left":
            want = is_b
        else:
            want = [is_b[-1]] * n
        np.testing.assert_allclose(raw(result, "o", row), want, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(raw(result, "o", row), raw(run_tokens(model, [tokens]), "o"))


@pytest.mark.parametrize("weighting", ["softmax", "hard", "hard-left", "hard-right"])
def test_strict_past_mask_sees_later_positions_only(weighting):
    """Mask ``strict-past`` (s > t): a uniform head averages is-b over positions
    t+1..n of the query's own sequence; the last position has no key and reads 0;
    unique-hard picks t + 1 (left) or n (right)."""
    embed = {BOS: [1, 0, 0], "a": [1, 0, 0], "b": [1, 1, 0]}  # dims: one, is-b, out
    model = make_model(
        embed,
        [Layer([head(3, None, None, 1, 2, weighting=weighting, mask="strict-past")], None)],
        {"o": (2, "bool")},
    )
    inputs = [list("abbab"), list("ba"), []]
    result = run_tokens(model, inputs)
    for row, tokens in enumerate(inputs):
        is_b = [0.0] + [1.0 if x == "b" else 0.0 for x in tokens]
        n = len(is_b)
        if weighting in ("softmax", "hard"):
            want = [sum(is_b[t + 1 :]) / (n - t - 1) if t < n - 1 else 0.0 for t in range(n)]
        elif weighting == "hard-left":
            want = [*is_b[1:], 0.0]
        else:
            want = [*[is_b[-1]] * (n - 1), 0.0]
        np.testing.assert_allclose(raw(result, "o", row), want, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(raw(result, "o", row), raw(run_tokens(model, [tokens]), "o"))


# ---------------------------------------------------------------- hard attention and ties

# dims: 0 one, 1 key (a and c), 2 value (c), 3 out. Input "c a a b c" at t = 1..5: the
# maximal keys up to t are the a's and c's; the BOS and b keys are 0.
TIE_EMBED = {
    BOS: [1, 0, 0, 0],
    "a": [1, 1, 0, 0],
    "b": [1, 0, 0, 0],
    "c": [1, 1, 1, 0],
}
TIE_INPUT = ["c", "a", "a", "b", "c"]
TIE_EXPECTED = {
    "causal": {
        "hard-left": [0, 1, 1, 1, 1, 1],
        "hard-right": [0, 1, 0, 0, 0, 1],
        "hard": [0, 1, 1 / 2, 1 / 3, 1 / 3, 1 / 2],
    },
    "none": {  # maximal keys 1, 2, 3, 5 at every query
        "hard-left": [1] * 6,
        "hard-right": [1] * 6,
        "hard": [1 / 2] * 6,
    },
}


def tie_model(weighting: str, mask: str, scale: float = 3.0) -> Model:
    h = head(4, 0, 1, 2, 3, weighting=weighting, mask=mask, scale=scale)
    return make_model(TIE_EMBED, [Layer([h], None)], {"o": (3, "bool")})


@pytest.mark.parametrize("mask", ["causal", "none"])
@pytest.mark.parametrize("weighting", ["hard-left", "hard-right", "hard"])
def test_hard_attention_ties(weighting, mask):
    # batched with a longer sequence so that TIE_INPUT has padding after it
    result = run_tokens(
        tie_model(weighting, mask), [TIE_INPUT, ["c", "b", "a", "c", "c", "b", "c", "c"]]
    )
    np.testing.assert_allclose(raw(result, "o"), TIE_EXPECTED[mask][weighting], rtol=1e-12, atol=0)


@pytest.mark.parametrize("mask", ["causal", "none"])
def test_softmax_with_large_scale_approaches_average_hard(mask):
    hard = TIE_EXPECTED[mask]["hard"]
    sharp = raw(run_tokens(tie_model("softmax", mask, scale=60.0), [TIE_INPUT]), "o")
    np.testing.assert_allclose(sharp, hard, rtol=0, atol=1e-12)
    soft = raw(run_tokens(tie_model("softmax", mask, scale=1.0), [TIE_INPUT]), "o")
    assert np.max(np.abs(soft - hard)) > 0.05


@pytest.mark.parametrize("weighting", ["hard-left", "hard-right"])
def test_uniform_unique_hard_head_picks_an_end(weighting):
    # dims: 0 is-BOS (the value), 1 out; every score is 0, so every key is maximal
    h = head(2, None, None, 0, 1, weighting=weighting, mask="causal")
    model = make_model({BOS: [1, 0], "a": [0, 0]}, [Layer([h], None)], {"o": (1, "bool")})
    expected = [1, 1, 1, 1] if weighting == "hard-left" else [1, 0, 0, 0]
    assert raw(run_tokens(model, [["a", "a", "a"]]), "o").tolist() == expected


# ---------------------------------------------------------------- relative bias

# dims: 0 value (BOS 5, a 0, c 1), 1 out; values along "c a c c a": 5 1 0 1 1 0
BIAS_EMBED = {BOS: [5.0, 0.0], "a": [0.0, 0.0], "c": [1.0, 0.0]}
BIAS_INPUT = ["c", "a", "c", "c", "a"]
BIAS_VALUES = [5.0, 1.0, 0.0, 1.0, 1.0, 0.0]


def bias_model(bias: dict[int, float], weighting: str, mask: str) -> Model:
    h = head(2, None, None, 0, 1, weighting=weighting, mask=mask, bias=bias)
    return make_model(BIAS_EMBED, [Layer([h], None)], {"o": (1, "bool")})


@pytest.mark.parametrize(
    ("bias", "mask", "expected"),
    [
        ({1: 1.0}, "causal", [5, 5, 1, 0, 1, 1]),  # the previous key; BOS alone at t = 0
        ({2: 1.0, 0: 0.5}, "causal", [5, 1, 5, 1, 0, 1]),  # t - 2 if it exists, else t
        ({-1: 1.0}, "none", [1, 0, 1, 1, 0, 8 / 6]),  # the next key; a tie of all at the end
        ({1: -1.0}, "strict", [0, 5, 5, 3, 2, 7 / 4]),  # all but t - 1, if any remain
    ],
)
def test_relative_bias_hard(bias, mask, expected):
    longer = ["a"] * 9  # padding after BIAS_INPUT
    result = run_tokens(bias_model(bias, "hard", mask), [BIAS_INPUT, longer])
    np.testing.assert_allclose(raw(result, "o"), expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize("bias", [{1: math.log(3.0)}, {0: -2.0, 2: 0.7}, {7: 50.0, -3: 50.0}])
def test_relative_bias_softmax(bias):
    """Softmax weights ∝ exp(bias(t − s)), with bias 0 at offsets not listed."""
    n = len(BIAS_VALUES)
    expected = []
    for t in range(n):
        weights = [math.exp(bias.get(t - s, 0.0)) for s in range(t + 1)]
        expected.append(
            sum(w * v for w, v in zip(weights, BIAS_VALUES, strict=False)) / sum(weights)
        )
    got = raw(run_tokens(bias_model(bias, "softmax", "causal"), [BIAS_INPUT, ["a"] * 9]), "o")
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0)
    if bias == {7: 50.0, -3: 50.0}:  # offsets never realised: the plain causal mean
        np.testing.assert_allclose(got, np.cumsum(BIAS_VALUES) / np.arange(1, n + 1), rtol=1e-12)


# ---------------------------------------------------------------- MLP activations


def mlp_model(w1, b1, w2, activations, embed, outputs, norm_groups=()) -> Model:
    mlp = MLP(
        w1=np.array(w1, dtype=np.float64),
        b1=np.array(b1, dtype=np.float64),
        w2=np.array(w2, dtype=np.float64),
        b2=np.zeros(len(w2)),
        activations=list(activations),
        norm_groups=[list(g) for g in norm_groups],
    )
    return make_model(embed, [Layer([], mlp)], outputs)


def test_heaviside_at_zero_is_one():
    # dims: 0 x (BOS 1.5, a 0), 1..4 outputs. Units: 2x - 3 (0 at BOS), 0, -tiny, +tiny
    tiny = 5e-324
    model = mlp_model(
        w1=[[2, 0, 0, 0, 0], [0] * 5, [0] * 5, [0] * 5],
        b1=[-3, 0, -tiny, tiny],
        w2=np.vstack([np.zeros((1, 4)), np.eye(4)]),
        activations=["heaviside"] * 4,
        embed={BOS: [1.5, 0, 0, 0, 0], "a": [0, 0, 0, 0, 0]},
        outputs={"x": (1, "bool"), "zero": (2, "bool"), "neg": (3, "bool"), "pos": (4, "bool")},
    )
    result = run_tokens(model, [["a"]])
    assert raw(result, "x").tolist() == [1.0, 0.0]  # 2·1.5 − 3 = 0 exactly at BOS; −3 at a
    assert raw(result, "zero").tolist() == [1.0, 1.0]
    assert raw(result, "neg").tolist() == [0.0, 0.0]
    assert raw(result, "pos").tolist() == [1.0, 1.0]


def test_gelu_and_relu_match_their_formulas():
    values = {BOS: 0.0, "a": -3.0, "b": -0.5, "c": 0.7, "d": 2.5, "e": 1e-3, "f": -12.0}
    embed = {s: [v, 0, 0] for s, v in values.items()}
    model = mlp_model(
        w1=[[1, 0, 0], [1, 0, 0]],
        b1=[0, 0],
        w2=[[0, 0], [1, 0], [0, 1]],
        activations=["gelu", "relu"],
        embed=embed,
        outputs={"gelu": (1, "bool"), "relu": (2, "bool")},
    )
    tokens = [s for s in values if s != BOS]
    result = run_tokens(model, [tokens])
    z = np.array([values[BOS]] + [values[s] for s in tokens])
    tanh_form = [
        0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))) for v in z
    ]
    np.testing.assert_allclose(raw(result, "gelu"), tanh_form, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(raw(result, "gelu"), [gelu(v) for v in z], rtol=1e-13, atol=1e-15)
    erf_form = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in z]
    assert np.max(np.abs(raw(result, "gelu") - erf_form)) > 1e-5  # the tanh form, not erf
    np.testing.assert_array_equal(raw(result, "relu"), np.maximum(z, 0))


# ---------------------------------------------------------------- selective layer norm


def test_layer_norm_on_a_pair_gives_signs():
    """Group (z, −z) → (sign z, −sign z) at any scale; z = 0 (zero variance) → (0, 0)."""
    values = {BOS: 0.0, "a": 1e-3, "b": -7.0, "c": 1e6, "d": -1e-5, "e": 3.0}
    # dims: 0 z, 1 signed (relu(n0) − relu(n1)), 2 code (heaviside(n2) + 2 heaviside(n3))
    embed = {s: [v, 0, 0] for s, v in values.items()}
    model = mlp_model(
        w1=[[1, 0, 0], [-1, 0, 0], [1, 0, 0], [-1, 0, 0]],
        b1=[0, 0, 0, 0],
        w2=[[0, 0, 0, 0], [1, -1, 0, 0], [0, 0, 1, 2]],
        activations=["relu", "relu", "heaviside", "heaviside"],
        embed=embed,
        outputs={"signed": (1, "bool"), "code": (2, "bool")},
        norm_groups=[[0, 1], [2, 3]],
    )
    tokens = [s for s in values if s != BOS]
    result = run_tokens(model, [tokens])
    z = [values[BOS]] + [values[s] for s in tokens]
    np.testing.assert_allclose(raw(result, "signed"), np.sign(z), rtol=1e-14, atol=0)
    # z > 0 → (1, −1) → 1; z < 0 → (−1, 1) → 2; z = 0 → (0, 0) → 1 + 2 (0, not NaN)
    assert raw(result, "code").tolist() == [1.0 if v > 0 else 2.0 if v < 0 else 3.0 for v in z]


def test_layer_norm_group_of_three():
    """(z − mean) / std with the population std; a zero-variance group → 0; a unit outside
    every group passes through."""
    rows = {BOS: (1.0, 2.0, 4.0), "a": (0.0, 0.0, 0.0), "b": (3.0, -1.0, 0.5), "c": (5.0, 5.0, 5.0)}
    d = 7  # dims: 0..2 z, 3..5 normalised z (signed), 6 pass-through relu(z0)
    embed = {s: [*v, 0, 0, 0, 0] for s, v in rows.items()}
    eye = np.eye(3, d)
    w1 = np.vstack([eye, -eye, eye[:1]])  # units 0..2: z, 3..5: −z, 6: z0
    w2 = np.zeros((d, 7))
    for i in range(3):
        w2[3 + i, i], w2[3 + i, 3 + i] = 1.0, -1.0  # relu(n) − relu(−n) = n
    w2[6, 6] = 1.0
    model = mlp_model(
        w1=w1,
        b1=np.zeros(7),
        w2=w2,
        activations=["relu"] * 7,
        embed=embed,
        outputs={"n0": (3, "bool"), "n1": (4, "bool"), "n2": (5, "bool"), "plain": (6, "bool")},
        norm_groups=[[0, 1, 2], [3, 4, 5]],
    )
    tokens = ["a", "b", "c"]
    result = run_tokens(model, [tokens])
    z = [rows[BOS]] + [rows[s] for s in tokens]
    for i in range(3):
        expected = []
        for group in z:
            mean = sum(group) / 3
            std = math.sqrt(sum((v - mean) ** 2 for v in group) / 3)
            expected.append(0.0 if std == 0 else (group[i] - mean) / std)
        np.testing.assert_allclose(raw(result, f"n{i}"), expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(raw(result, "n0")[0], (1 - 7 / 3) / math.sqrt(42 / 27), rtol=1e-12)
    assert raw(result, "plain").tolist() == [max(g[0], 0.0) for g in z]


# ---------------------------------------------------------------- decision rules


def test_decision_rules():
    # one dimension, 1 at every position; each output reads it with its own weight
    model = make_model({BOS: [1.0], "a": [1.0]}, [], {})
    model.outputs = [
        Output("count+", np.array([0.35]), "count"),
        Output("count-", np.array([-0.35]), "count"),
        Output("half", np.array([0.5]), "bool"),
        Output("above", np.array([0.5 + 1e-12]), "bool"),
        Output("neg", np.array([-3.0]), "bool"),
    ]
    result = run_tokens(model, [["a"] * 5, ["a"]])
    # 0.35 · (t + 1) = 0.35, 0.7, 1.05, 1.4, 1.75, 2.1
    assert result.values["count+"][0].tolist() == [0, 1, 1, 1, 2, 2]
    assert result.values["count-"][0].tolist() == [0, -1, -1, -1, -2, -2]
    assert result.values["count+"].dtype.kind == "i"
    assert result.values["half"].dtype == np.bool_
    assert not result.values["half"][0].any()  # strictly greater than 0.5
    assert result.values["above"][0].all()
    assert not result.values["neg"][0].any()
    assert result.lengths.tolist() == [5, 1]
    assert result.final("count+").tolist() == [2, 1]
    assert result.outputs["count+"].shape == (2, 6)
    for out in model.outputs:
        np.testing.assert_array_equal(
            result.values[out.name][0], decide(out.rule, raw(result, out.name))
        )


def test_a_vocabulary_of_bos_alone_runs_the_empty_input():
    """A model with no token but BOS reads only the empty input; every other is refused
    by name (the single-character fast path once took ``max`` of no tokens)."""
    model = make_model({BOS: [1.0]}, [], {"one": (0, "bool")})
    for result in (run_tokens(model, [[]]), run_tokens(model, [[], []], dtype=np.float32)):
        assert result.lengths.tolist() == [0] * len(result.lengths)
        assert result.values["one"].tolist() == [[True]] * len(result.lengths)
    with pytest.raises(CraspError, match="token 'a' at position 0 is not in the vocabulary"):
        run_tokens(model, [[], ["a"]])
    pytest.importorskip("torch")
    from crasp_compiler.runtime.torch_module import TorchTransformer

    assert TorchTransformer(model).run([[]])["one"].tolist() == [[True]]


# ---------------------------------------------------------------- float32


@dataclass
class OneSymbolModel(Model):
    """A model whose token lookup is O(1) Python steps on inputs of its one symbol (the
    generic per-token loop costs seconds at 2^24 tokens; it is not what is tested here)."""

    def token_ids(self, tokens: list[str]) -> list[int]:
        symbol = self.vocab[1]
        if len(self.vocab) == 2 and tokens.count(symbol) == len(tokens):
            return np.ones(len(tokens), dtype=np.int8)  # type: ignore[return-value]
        return super().token_ids(tokens)


LONG = 2**24 + 2


@pytest.fixture(scope="module")
def long_uniform_run() -> RunResult:
    """float32 run of a uniform causal head over "1 at every token" (0 at BOS), on 2^24 + 2
    tokens: the raw output at t is the mean t / (t + 1); its count is t."""
    h = head(2, None, None, 0, 1, weighting="softmax", mask="causal")
    model = OneSymbolModel(
        vocab=[BOS, "a"],
        w_e=np.array([[0.0, 0.0], [1.0, 0.0]]),
        features=[],
        w_p=np.zeros((2, 0)),
        layers=[Layer([h], None)],
        outputs=[Output("mean", np.array([0.0, 1.0]), "count")],
        residual=["token", "mean"],
        guarantee=Guarantee(None, "test"),
    )
    return run_tokens(model, [["a"] * LONG], dtype=np.float32)


LONG_POSITIONS = np.r_[0:5, 2**24 - 3 : LONG + 1, np.arange(5, LONG, 99991)]


def test_float32_uniform_head_keeps_an_exact_mean_past_2_24(long_uniform_run):
    """A float32 running sum would stop at 2^24 and give 2^24 / (2^24 + 2) at t = 2^24 + 1."""
    out = long_uniform_run.outputs["mean"][0]
    assert out.dtype == np.float32 and out.shape == (LONG + 1,)
    t = LONG_POSITIONS
    np.testing.assert_array_equal(out[t], (t / (t + 1.0)).astype(np.float32))
    # the float32 mean still determines the count: round(out · (t + 1)), multiplied exactly
    np.testing.assert_array_equal(np.rint(out[t].astype(np.float64) * (t + 1)), t)


def test_float32_count_rule_past_2_24(long_uniform_run):
    """The decided count is round(out · (t + 1)) = t (see the test above)."""
    t = LONG_POSITIONS
    np.testing.assert_array_equal(long_uniform_run.values["mean"][0][t], t)


@pytest.mark.parametrize("chunk", range(6))
def test_float32_decides_like_float64(chunk):
    compared = total = 0
    for seed in range(5000 + chunk * 10, 5000 + chunk * 10 + 10):
        rng = np.random.default_rng(seed)
        model = random_model(rng)
        inputs = draw_batch(rng, model)
        total += len(inputs)
        keep = []
        for tokens in inputs:
            probe = Probe()
            want = naive_forward(model, tokens, probe=probe)
            if well_separated(model, want, probe, margin=1e-2, tie=1e-9, max_top=50.0):
                keep.append(tokens)
        if not keep:
            continue
        compared += len(keep)
        r64, r32 = run_tokens(model, keep), run_tokens(model, keep, dtype=np.float32)
        for out in model.outputs:
            assert r32.outputs[out.name].dtype == np.float32
            for row, tokens in enumerate(keep):
                np.testing.assert_array_equal(
                    r32.values[out.name][row, : len(tokens) + 1],
                    r64.values[out.name][row, : len(tokens) + 1],
                    err_msg=f"seed {seed}: output {out.name} on {tokens}",
                )
    assert compared >= 0.25 * total


# ---------------------------------------------------------------- keys only at BOS


def bos_keyed_model(rng: np.random.Generator, weighting: str) -> Model:
    """One head whose key reads only the BOS dimension: scores are 0 except on BOS and at
    the bias offsets. Dimensions: 0 BOS, 1 token a, 2 token b, 3 constant 1, 4 output.
    Small integers make ties common under average-hard weighting."""
    d = 5
    w_q = rng.integers(-2, 3, size=(1, d)).astype(float)
    w_k = np.zeros((1, d))
    w_k[0, 0] = float(rng.integers(-2, 3))
    w_v = np.zeros((1, d))
    w_v[0, :3] = rng.integers(-3, 4, size=3)
    w_o = np.zeros((d, 1))
    w_o[4, 0] = 1.0
    offsets = rng.choice([0, 1, 2, 3, 5, 9], size=rng.integers(1, 4), replace=False)
    bias = {int(c): float(rng.integers(-2, 4)) for c in offsets}
    scale = float(rng.choice([1.0, 0.5, 3.0]))
    h = Head(w_q, w_k, w_v, w_o, scale, bias, weighting, "causal")
    return make_model(
        {BOS: [1, 0, 0, 1, 0], "a": [0, 1, 0, 1, 0], "b": [0, 0, 1, 1, 0]},
        [Layer([h], None)],
        {"o": (4, "bool")},
    )


def recorded(model: Model, kind: HeadKind) -> Model:
    """``model`` with every head recording ``kind`` (weights unchanged)."""
    layers = [
        Layer([replace(h, kind=kind) for h in layer.heads], layer.mlp) for layer in model.layers
    ]
    return replace(model, layers=layers)


@pytest.mark.parametrize("weighting", ["softmax", "hard"])
def test_keys_only_at_bos_fast_path(weighting):
    """The O(T) path against the naive reference, and against the chunked path (the same
    heads recorded as ``general``)."""
    rng = np.random.default_rng(7)
    keyed = 0
    for _ in range(40):
        model = bos_keyed_model(rng, weighting)
        (kind,) = derive_kinds(model)[0]
        assert kind in (HeadKind.BOS_KEYED, HeadKind.UNIFORM)  # uniform: no query, no bias
        keyed += kind is HeadKind.BOS_KEYED
        head = replace(model.layers[0].heads[0], kind=kind)
        assert head_path(head, fused=False) in (Path.BOS_KEYED, Path.PREFIX_SUMS)
        assert head_path(replace(head, kind=HeadKind.GENERAL), fused=False) is Path.CHUNKED
        words = [*random_inputs(rng, model, count=6, max_len=12), []]
        lengths = np.array([len(w) for w in words])
        fast = run_tokens(model, words).outputs["o"]
        for row, word in enumerate(words):
            expected = naive_forward(model, word)["o"]
            np.testing.assert_allclose(fast[row, : lengths[row] + 1], expected, atol=TOLERANCE)
        dense = run_tokens(recorded(model, HeadKind.GENERAL), words).outputs["o"]
        for row, n in enumerate(lengths):
            np.testing.assert_allclose(fast[row, : n + 1], dense[row, : n + 1], atol=TOLERANCE)
    assert keyed >= 30


def test_kinds_follow_the_structure_of_the_weights():
    """``derive_kinds``: a key that reads only dimensions no token writes is BOS-keyed;
    reading a token's embedding, a positional feature (other than onehot:0), a numeric
    input, or a dimension an earlier layer writes (head or MLP) makes it general."""
    model = bos_keyed_model(np.random.default_rng(1), "hard")
    head = model.layers[0].heads[0]
    head.w_q[0, 3] = 1.0
    head.w_k[0, 0] = 2.0
    head.bias = {1: 1.0}
    assert derive_kinds(model) == [[HeadKind.BOS_KEYED]]
    assert head.kind is None and head_kinds(model) == [[HeadKind.BOS_KEYED]]

    def kind_with(**changes) -> HeadKind:
        return derive_kinds(replace(model, **changes))[-1][-1]

    token_key = head.w_k.copy()
    token_key[0, 1] = 1.0
    assert kind_with(layers=[Layer([replace(head, w_k=token_key)], None)]) is HeadKind.GENERAL
    for feature, kind in (("onehot:0", HeadKind.BOS_KEYED), ("onehot:4", HeadKind.GENERAL)):
        w_p = np.zeros((5, 1))
        w_p[0, 0] = 1.0  # the feature writes the dimension the key reads
        assert kind_with(features=[feature], w_p=w_p) is kind
    w_x = np.zeros((5, 1))
    w_x[0, 0] = 1.0
    assert kind_with(inputs=["v"], w_x=w_x) is HeadKind.GENERAL
    writer = replace(head, w_o=np.eye(5)[:, :1])  # writes its output into dimension 0
    assert kind_with(layers=[Layer([writer], None), Layer([head], None)]) is HeadKind.GENERAL
    assert kind_with(layers=[Layer([writer, head], None)]) is HeadKind.BOS_KEYED  # same layer
    b2 = np.zeros(5)
    b2[0] = 0.5
    mlp = MLP(np.zeros((1, 5)), np.zeros(1), np.zeros((5, 1)), b2, ["relu"])
    assert kind_with(layers=[Layer([], mlp), Layer([head], None)]) is HeadKind.GENERAL
    mlp.b2 = np.zeros(5)
    assert kind_with(layers=[Layer([], mlp), Layer([head], None)]) is HeadKind.BOS_KEYED
    # uniform: every score 0 (no query, no key or scale 0) and no nonzero bias
    no_query = replace(head, w_q=np.zeros((1, 5)))
    assert kind_with(layers=[Layer([no_query], None)]) is HeadKind.BOS_KEYED  # the bias
    for uniform in (
        replace(no_query, bias={1: 0.0}),
        replace(head, w_k=np.zeros((1, 5)), bias={}),
        replace(head, scale=0.0, bias={}),
    ):
        assert kind_with(layers=[Layer([uniform], None)]) is HeadKind.UNIFORM
        assert uniform.is_uniform
    assert not head.is_uniform


def test_paths_follow_kind_weighting_and_mask():
    head = replace(bos_keyed_model(np.random.default_rng(1), "hard").layers[0].heads[0])
    for kind, path in (
        (HeadKind.UNIFORM, Path.PREFIX_SUMS),
        (HeadKind.BOS_KEYED, Path.BOS_KEYED),
        (HeadKind.GENERAL, Path.CHUNKED),
    ):
        assert head_path(replace(head, kind=kind), fused=False) is path
        # unique-hard weightings and other masks: the chunked path, whatever the kind
        for other in ("hard-left", "hard-right"):
            assert head_path(replace(head, kind=kind, weighting=other), fused=False) is Path.CHUNKED
        for mask in ("strict", "past", "strict-past", "none"):
            assert head_path(replace(head, kind=kind, mask=mask), fused=False) is Path.CHUNKED
        # the caller can refuse the fast paths; patterns need the chunked path
        assert (
            head_path(replace(head, kind=kind), fused=False, uniform_ok=False, keyed_ok=False)
            is Path.CHUNKED
        )
        assert head_path(replace(head, kind=kind), fused=False, patterns=True) is Path.CHUNKED
    softmax = replace(head, weighting="softmax", bias={}, kind=HeadKind.BOS_KEYED)
    assert head_path(softmax, fused=True) is Path.FUSED
    assert head_path(replace(softmax, kind=HeadKind.UNIFORM), fused=True) is Path.PREFIX_SUMS
    assert head_path(replace(softmax, bias={1: 1.0}), fused=True) is Path.BOS_KEYED


def test_recorded_kinds_are_trusted_not_recomputed():
    """A runtime reads the recorded kind, not the weights: a head with scores that records
    ``uniform`` runs as the running mean (the contract is the recording's to keep; model
    files refuse such a head, see tests/model/test_model_file.py)."""
    h = head(4, 0, 1, 2, 3, weighting="hard", mask="causal", scale=3.0)
    model = make_model(TIE_EMBED, [Layer([h], None)], {"o": (3, "bool")})
    scored = raw(run_tokens(model, [TIE_INPUT]), "o")
    np.testing.assert_allclose(scored, TIE_EXPECTED["causal"]["hard"], rtol=1e-12)
    claimed = raw(run_tokens(recorded(model, HeadKind.UNIFORM), [TIE_INPUT]), "o")
    is_c = np.array([0, 1, 0, 0, 0, 1])
    np.testing.assert_allclose(claimed, np.cumsum(is_c) / np.arange(1, 7), rtol=1e-12)


def test_observer_points_and_patterns():
    """The named points of the forward pass: residual points agree with the trace, each
    head's result sums to its layer's attention output, and with ``patterns=True`` every
    head's pattern is a distribution over its allowed keys (the strict mask's first row is
    empty) that reproduces the head's output."""
    rng = np.random.default_rng(1000)
    model = random_model(rng, layers=(2, 2), heads=(2, 2), p_mlp=1.0)
    inputs = draw_batch(rng, model, count=4)
    ids = np.zeros((len(inputs), 1 + max(map(len, inputs))), dtype=np.int64)
    for row, tokens in enumerate(inputs):
        ids[row, 1 : 1 + len(tokens)] = model.token_ids(tokens)
    lengths = np.array([len(t) for t in inputs])
    seen: dict[str, np.ndarray] = {}

    def hook(name: str, value: np.ndarray) -> None:
        seen[name] = value

    for patterns in (False, True):
        seen.clear()
        raw_out = forward(
            NUMPY,
            numpy_exec.NumpyParts(model, np.float64),
            ids,
            lengths,
            None,
            Observer(hook, patterns=patterns),
        )
        np.testing.assert_array_equal(seen["hook_outputs"], raw_out)
        trace = run_tokens(model, inputs, residuals=True).residuals
        assert trace is not None
        np.testing.assert_allclose(seen["blocks.0.hook_resid_pre"], trace[0][1], rtol=0, atol=1e-12)
        np.testing.assert_allclose(seen["hook_resid_final"], trace[-1][1], rtol=0, atol=1e-12)
        for index, layer in enumerate(model.layers):
            prefix = f"blocks.{index}."
            heads = [seen[f"{prefix}attn.heads.{h}.hook_result"] for h in range(len(layer.heads))]
            np.testing.assert_allclose(sum(heads), seen[f"{prefix}hook_attn_out"], atol=1e-12)
            np.testing.assert_allclose(
                seen[f"{prefix}hook_resid_pre"] + seen[f"{prefix}hook_attn_out"],
                seen[f"{prefix}hook_resid_mid"],
                atol=1e-12,
            )
            assert (f"{prefix}attn.heads.0.hook_pattern" in seen) == patterns
            if patterns:
                for h in range(len(layer.heads)):
                    pattern = seen[f"{prefix}attn.heads.{h}.hook_pattern"]
                    assert pattern.shape == (len(inputs), ids.shape[1], ids.shape[1])
                    z = seen[f"{prefix}attn.heads.{h}.hook_z"]
                    v = seen[f"{prefix}attn.heads.{h}.hook_v"]
                    np.testing.assert_allclose(pattern @ v, z, atol=1e-12)
                    totals = pattern.sum(-1)
                    assert np.all((np.abs(totals - 1) < 1e-12) | (totals == 0))
        hidden = seen["blocks.0.mlp.hook_post"]
        assert hidden.shape[-1] == model.layers[0].mlp.w1.shape[0]

    # a hook may replace a value: zeroing the final residual zeroes the outputs
    def zero_final(name: str, value: np.ndarray) -> np.ndarray | None:
        return value * 0 if name == "hook_resid_final" else None

    out = forward(
        NUMPY, numpy_exec.NumpyParts(model, np.float64), ids, lengths, None, Observer(zero_final)
    )
    assert not out.any()
