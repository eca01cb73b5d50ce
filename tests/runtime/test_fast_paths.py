"""The pieces that make the runtimes fast keep their results and their errors.

- tokenisation is one C-level lookup per token, and a bad token is still reported with
  the token and its position (numpy executor and torch module alike);
- the uniform heads of a layer run together (one value product, one prefix sum, one
  output product) and give the numbers the heads give one by one (observed pass);
- MLP activations are applied to the units of each kind only, with the numbers of the
  elementwise formulas;
- offset lookups on absolute positions (relu mode) sum a band of keys in the numpy
  executor and give the numbers of the full softmax;
- single-character vocabularies are tokenised a sequence at a time, with the ids and
  errors of the token-by-token lookup;
- layers whose updates copy single residual columns take the column path, with the
  numbers of the observed pass, and only on a residual the pass owns.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from crasp_compiler import compile, load
from crasp_compiler.errors import CraspError
from crasp_compiler.model.model import BOS, MLP, Activation, Layer, positional_keys, token_ids
from crasp_compiler.runtime import forward as fw
from crasp_compiler.runtime.backend import NUMPY
from crasp_compiler.runtime.numpy_exec import (
    NumpyParts,
    encode,
    encode_vocab,
    prepared,
    run_tokens,
    units_by_kind,
)
from crasp_compiler.runtime.torch_module import TorchTransformer
from tests.runtime.test_executor import make_model
from tests.support.reference_model import random_inputs, random_model

DYCK = "examples/crasp/dyck1.cr"


# ---------------------------------------------------------------- tokenisation


def test_token_ids_are_int64_and_refuse_bos_and_strangers() -> None:
    vocab = [BOS, "(", ")"]
    ids = token_ids(vocab, ["(", ")", ")"])
    assert ids.dtype == np.int64 and ids.tolist() == [1, 2, 2]
    assert token_ids(vocab, []).tolist() == []
    with pytest.raises(ValueError, match=r"token '\[' at position 2 is not in the vocabulary"):
        token_ids(vocab, ["(", ")", "["])
    with pytest.raises(ValueError, match="at position 0"):
        token_ids(vocab, [BOS])
    with pytest.raises(ValueError, match=r"spaces|separate|\( \)"):
        token_ids(vocab, ["()"])  # the spacing hint survives
    with pytest.raises(ValueError, match="token 3 at position 1"):
        token_ids(vocab, ["(", 3])  # type: ignore[list-item]


def test_encode_pads_right_and_counts_lengths() -> None:
    model = compile(load(DYCK))
    ids, lengths = encode(model.token_ids, [list("(()"), [], tuple(")")])
    assert lengths.tolist() == [3, 0, 1]
    assert ids.tolist() == [[0, 1, 1, 2], [0, 0, 0, 0], [0, 2, 0, 0]]


@pytest.mark.parametrize("runtime", ["numpy", "torch"])
def test_bad_token_names_token_and_position(runtime: str) -> None:
    model = compile(load(DYCK))
    inputs = [list("(())"), ["(", ")", "x", "("]]
    with pytest.raises(CraspError, match=r"token 'x' at position 2 is not in the vocabulary"):
        if runtime == "numpy":
            run_tokens(model, inputs)
        else:
            TorchTransformer(model).run(inputs)


# ---------------------------------------------------------------- uniform heads together


def _layer_groups(parts: NumpyParts) -> list[fw.UniformGroup | None]:
    return [getattr(block.args[0], "keywords", {}).get("group") for block in parts.blocks]


def test_numpy_groups_are_prepared_once_per_parts() -> None:
    model = compile(load(DYCK))
    parts = NumpyParts(model, np.float64)
    groups = _layer_groups(parts)
    grouped = [g for g in groups if g is not None]
    assert grouped, "Dyck-1 has a layer of several uniform heads"
    for group in grouped:
        assert len(group.members) >= 2
        assert group.w_v.shape[0] == group.w_o.shape[1]
    assert _layer_groups(parts) == groups  # the same objects: nothing rebuilt per block call


def fast_equals_observed(model, sizes, seed: int, dtype: type):
    """Run random inputs of ``sizes`` (a ragged batch) unobserved (the fast paths) and
    observed (one by one), numpy and torch, and require each pair to agree exactly;
    return numpy's and torch's unobserved outputs."""
    rng = np.random.default_rng(seed)
    alphabet = [s for s in model.vocab if s != BOS]
    inputs = [list(rng.choice(alphabet, size=n)) for n in sizes]
    ids, lengths = encode(model.token_ids, inputs)
    parts = NumpyParts(model, dtype)
    plain = fw.forward(NUMPY, parts, ids, lengths, None)
    observed = fw.forward(NUMPY, parts, ids, lengths, None, fw.Observer(lambda n, v: None))
    np.testing.assert_array_equal(plain, observed)
    module = TorchTransformer(model).to(dtype=getattr(torch, np.dtype(dtype).name))
    t_ids, t_lengths = torch.from_numpy(ids), torch.from_numpy(lengths)
    with torch.no_grad():
        fast = module(t_ids, t_lengths)
        slow = module(t_ids, t_lengths, observe=fw.Observer(lambda n, v: None))
    assert torch.equal(fast, slow)
    return plain, fast


@pytest.mark.parametrize("path", [DYCK, "examples/crasp/copy8.cr", "examples/crasp/c_near_a.cr"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_grouped_heads_equal_heads_one_by_one(path: str, dtype: type) -> None:
    """The plain pass (grouped) and an observed pass (heads one by one) agree exactly."""
    fast_equals_observed(compile(load(path)), (0, 1, 7, 40), 0, dtype)


def test_grouped_heads_match_on_random_models() -> None:
    for seed in range(12):
        rng = np.random.default_rng(seed)
        model = random_model(rng, heads=(2, 4))
        inputs = random_inputs(rng, model, count=4, max_len=9)
        ids, lengths = encode(model.token_ids, inputs)
        parts = NumpyParts(model, np.float64)
        plain = fw.forward(NUMPY, parts, ids, lengths, None)
        observed = fw.forward(NUMPY, parts, ids, lengths, None, fw.Observer(lambda n, v: None))
        np.testing.assert_allclose(plain, observed, rtol=1e-12, atol=1e-12)


def test_module_hooks_on_a_head_still_fire() -> None:
    module = TorchTransformer(compile(load(DYCK)))
    seen: list[tuple[int, ...]] = []
    head = module.blocks[0].attn.heads[0]
    handle = head.register_forward_hook(lambda m, args, out: seen.append(tuple(out.shape)))
    try:
        ids, lengths = module.encode([list("(())")])
        with torch.no_grad():
            module(ids, lengths)
    finally:
        handle.remove()
    assert seen == [(1, 5, module.embed.w_e.shape[1])]


# ---------------------------------------------------------------- activations by kind


def test_units_by_kind() -> None:
    kinds = [Activation.RELU, Activation.GELU, Activation.RELU, Activation.HEAVISIDE]
    assert units_by_kind(kinds) == {
        Activation.RELU: [0, 2],
        Activation.GELU: [1],
        Activation.HEAVISIDE: [3],
    }


def test_mixed_activations_equal_their_formulas() -> None:
    values = {BOS: 0.0, "a": -3.0, "b": -0.5, "c": 0.7, "d": 2.5, "e": 1e-3, "f": -12.0}
    kinds = ["gelu", "relu", "heaviside", "relu", "gelu", "heaviside"]
    h = len(kinds)
    mlp = MLP(
        w1=np.hstack([np.arange(1.0, h + 1)[:, None], np.zeros((h, h))]),
        b1=np.linspace(-0.5, 0.5, h),
        w2=np.vstack([np.zeros((1, h)), np.eye(h)]),
        b2=np.zeros(h + 1),
        activations=[Activation(k) for k in kinds],
    )
    embed = {s: [v] + [0.0] * h for s, v in values.items()}
    outputs = {f"u{u}": (1 + u, "value") for u in range(h)}
    model = make_model(embed, [Layer([], mlp)], outputs)
    tokens = [s for s in values if s != BOS]
    z = np.array([values[BOS]] + [values[s] for s in tokens])[:, None] * mlp.w1[:, 0] + mlp.b1
    gelu = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z**3)))
    formulas = {"relu": np.maximum(z, 0), "heaviside": (z >= 0) * 1.0, "gelu": gelu}
    numpy_out = run_tokens(model, [tokens]).outputs
    module = TorchTransformer(model)
    ids, lengths = module.encode([tokens])
    with torch.no_grad():
        torch_out = module(ids, lengths)[0].numpy()
    for u, kind in enumerate(kinds):
        np.testing.assert_allclose(numpy_out[f"u{u}"][0], formulas[kind][:, u], rtol=1e-13)
        np.testing.assert_array_equal(torch_out[:, u], numpy_out[f"u{u}"][0])


# ---------------------------------------------------------------- banded offset lookups


@pytest.mark.parametrize("name", ["tomita7_local.cr", "c_near_a.cr", "copy8.cr"])
def test_banded_lookups_equal_the_general_path(name) -> None:
    """The relu lowering's offset lookups have keys ``a·s + b·s²``: the numpy executor
    sums each query over a band of keys (the others have weight exactly 0), the observed
    pass over every key; both give the same numbers, with padding and in float32."""
    model = compile(load(f"examples/crasp/{name}"), mode="relu", max_len=600)
    positional = positional_keys(model)
    banded = [keys is not None for row in positional for keys in row]
    assert any(banded) and not all(banded)  # the lookups, not the uniform heads
    heaviside = compile(load(f"examples/crasp/{name}"), mode="heaviside")
    assert all(keys is None for row in positional_keys(heaviside) for keys in row)
    rng = np.random.default_rng(len(name))
    alphabet = model.vocab[1:]
    words = [list(rng.choice(alphabet, size=n)) for n in (0, 1, 7, 200, 599)]
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 1e-5)):
        fast = run_tokens(model, words, dtype=dtype, on_overlength="ignore")
        general = run_tokens(model, words, dtype=dtype, residuals=True, on_overlength="ignore")
        for out in fast.outputs:
            np.testing.assert_allclose(fast.outputs[out], general.outputs[out], atol=tol)
            assert np.array_equal(fast.values[out], general.values[out])


# ---------------------------------------------------------------- vectorised tokenisation


def test_encode_vocab_equals_encode() -> None:
    model = compile(load(DYCK))
    cases = [[list("(()"), [], tuple(")"), "()()"], [[]], [], [list("((((")]]
    for inputs in cases:
        want = encode(model.token_ids, inputs)
        got = encode_vocab(model.vocab, inputs)
        for a, b in zip(got, want, strict=True):
            assert a.dtype == b.dtype and a.tolist() == b.tolist()


@pytest.mark.parametrize("bad", [["(", ""], ["", "()"], ["(", BOS], ["(", 3], [["("]]])
def test_encode_vocab_reports_bad_tokens_like_encode(bad: list) -> None:
    model = compile(load(DYCK))
    with pytest.raises(CraspError) as want:
        encode(model.token_ids, [list("()"), bad])
    with pytest.raises(CraspError) as got:
        encode_vocab(model.vocab, [list("()"), bad])
    assert str(got.value) == str(want.value)


# ---------------------------------------------------------------- the column path

COLUMN_EXAMPLES = [
    DYCK,
    "examples/crasp/majority.crasp",
    "examples/crasp/tomita2.crasp",
    "examples/crasp/copy8.cr",
]


def test_dyck_layers_take_the_column_path() -> None:
    model = compile(load(DYCK))
    parts = NumpyParts(model, np.float32)
    plans = [block.keywords["columns"] for block in parts.blocks]
    assert all(p is not None and p.values and p.outputs for p in plans)
    module = TorchTransformer(model)
    assert all(
        block.columns is not None and block.columns.values and block.columns.outputs
        for block in module.layers()
    )


@pytest.mark.parametrize("path", COLUMN_EXAMPLES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_column_path_equals_observed_path(path: str, dtype: type) -> None:
    """Unobserved (column path where the layer has one) and observed passes agree
    exactly, numpy and torch, on a ragged batch (padding included)."""
    plain, fast = fast_equals_observed(compile(load(path)), (0, 1, 5, 64, 300), 3, dtype)
    np.testing.assert_allclose(fast.numpy(), plain, rtol=1e-5 if dtype is np.float32 else 1e-12)


def test_column_path_leaves_a_block_input_alone_and_follows_weight_edits() -> None:
    model = compile(load(DYCK))
    module = TorchTransformer(model)
    ids, lengths = module.encode([list("(()())"), list(")(")])
    block = module.layers()[0]
    with torch.no_grad():
        x = module.embed(ids)
        before = x.clone()
        block(x, lengths)  # called directly: the general path, x unchanged
        assert torch.equal(x, before)
        head = block.attn.heads[0]
        head.w_v[0, 3] = 0.5  # two nonzeros in a row of W_V: no column path for the layer
        got = module(ids, lengths)
    assert block.columns is None or block.columns.values is None
    want = run_tokens(module.to_model(), [list("(()())"), list(")(")]).outputs
    np.testing.assert_allclose(got[..., 0].numpy(), want[module.output_names[0]], atol=1e-12)


# ---------------------------------------------------------------- lowered plans


PLAN_EXAMPLES = [DYCK, "examples/crasp/majority.crasp", "examples/crasp/tomita2.crasp"]


def test_prefix_sum_models_are_lowered_and_others_are_not() -> None:
    for path in PLAN_EXAMPLES:
        model = compile(load(path))
        assert NumpyParts(model, np.float64).plan is not None, path
        assert TorchTransformer(model).plan() is not None, path
    copy8 = compile(load("examples/crasp/copy8.cr"))  # its heads are not uniform
    assert NumpyParts(copy8, np.float64).plan is None
    assert TorchTransformer(copy8).plan() is None


@pytest.mark.parametrize("path", PLAN_EXAMPLES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_chunks_carry_the_prefix_sums_exactly(path: str, dtype: type, monkeypatch) -> None:
    """Chunks of 2 positions per sequence (ragged batch of 3) give the numbers of one
    chunk, bit for bit, numpy and torch."""
    model = compile(load(path))
    rng = np.random.default_rng(3)
    alphabet = [s for s in model.vocab if s != BOS]
    ids, lengths = encode(model.token_ids, [list(rng.choice(alphabet, n)) for n in (0, 9, 41)])
    parts = NumpyParts(model, dtype)
    module = TorchTransformer(model).to(dtype=getattr(torch, np.dtype(dtype).name))
    t_ids, t_lengths = torch.from_numpy(ids), torch.from_numpy(lengths)
    with torch.no_grad():
        whole = fw.forward(NUMPY, parts, ids, lengths, None), module(t_ids, t_lengths)
        monkeypatch.setattr(fw, "PLAN_ROWS", 6)
        chunked = fw.forward(NUMPY, parts, ids, lengths, None), module(t_ids, t_lengths)
    np.testing.assert_array_equal(chunked[0], whole[0])
    assert torch.equal(chunked[1], whole[1])
    observed = fw.forward(NUMPY, parts, ids, lengths, None, fw.Observer(lambda n, v: None))
    np.testing.assert_array_equal(chunked[0], observed)


def test_an_accelerator_takes_the_plan_in_few_large_chunks(monkeypatch) -> None:
    """On a GPU the plan's pass is chunked by ACCELERATOR_PLAN_ROWS, not by the CPU's
    cache-sized PLAN_ROWS (each operation is a kernel launch there): far fewer running
    sums for the same numbers, bit for bit. The accelerator is simulated by a backend
    that reports one for CPU tensors."""
    from crasp_compiler.runtime.torch_module import TorchBackend

    model = compile(load(DYCK))
    ids, lengths = encode(model.token_ids, [list("(()" * 30), list("()" * 40)])
    module = TorchTransformer(model)
    t_ids, t_lengths = torch.from_numpy(ids), torch.from_numpy(lengths)
    calls = []
    real = TorchBackend.cumsum

    def counted(self, x, axis):
        calls.append(axis)
        return real(self, x, axis)

    monkeypatch.setattr(TorchBackend, "cumsum", counted)
    monkeypatch.setattr(fw, "PLAN_ROWS", 6)
    with torch.no_grad():
        small = module(t_ids, t_lengths)
        on_cpu = len(calls)
        monkeypatch.setattr(TorchBackend, "accelerated", lambda self, like: True)
        calls.clear()
        large = module(t_ids, t_lengths)
    assert torch.equal(small, large)
    assert len(calls) * 10 < on_cpu  # one chunk instead of dozens


def test_chunked_running_sums_of_inexact_values_are_one_running_sum(monkeypatch) -> None:
    """A value weight of 0.1 makes the float64 running sums inexact, so
    they depend on the order of their additions: chunks of 3 positions still give the
    observed pass's sums (one cumsum over each sequence) bit for bit, where restarting
    the sum per chunk and adding the carry after it would not."""
    model = compile(load(DYCK))
    head = model.layers[0].heads[1]
    row, column = np.argwhere(head.w_v != 0)[0]
    head.w_v[row, column] = 0.1
    model.outputs[0].weights[:] = 0.0  # the output reads the head's running mean
    model.outputs[0].weights[np.argwhere(head.w_o != 0)[0][0]] = 1.0
    ids, lengths = encode(model.token_ids, [list("((()" * 40), list("()" * 33)])
    parts = NumpyParts(model, np.float64)
    assert parts.plan is not None
    monkeypatch.setattr(fw, "PLAN_ROWS", 6)
    chunked = fw.forward(NUMPY, parts, ids, lengths, None)
    observed = fw.forward(NUMPY, parts, ids, lengths, None, fw.Observer(lambda n, v: None))
    np.testing.assert_array_equal(chunked, observed)
    v = (ids == ids[0, 1]) * 0.1  # values of that kind
    whole = np.cumsum(v, axis=1)
    restarted = np.concatenate(
        [
            np.cumsum(v[:, s : s + 3], axis=1) + (whole[:, s - 1 : s] if s else 0)
            for s in range(0, v.shape[1], 3)
        ],
        axis=1,
    )
    assert not np.array_equal(restarted, whole)  # the order matters for these values


def plan_passes(model, inputs, dtype, monkeypatch) -> list[np.ndarray]:
    """The plan's outputs with integer running sums (whole and in chunks of 2 positions),
    without them (float64 running sums only), and the observed pass's, numpy and torch."""
    ids, lengths = encode(model.token_ids, inputs)
    parts = NumpyParts(model, dtype)
    module = TorchTransformer(model).to(dtype=getattr(torch, np.dtype(dtype).name))
    assert parts.plan is not None and module.plan() is not None

    def both() -> list[np.ndarray]:
        with torch.no_grad():
            raw = module(torch.from_numpy(ids), torch.from_numpy(lengths))
        return [fw.forward(NUMPY, parts, ids, lengths, None), raw.numpy()]

    passes = both()
    with monkeypatch.context() as patch:
        patch.setattr(fw, "PLAN_ROWS", 2 * len(inputs))
        passes += both()
        patch.setattr(fw, "PRECISION", {})  # no float type keeps integers exact: no int64 sums
        passes += both()
    observe = fw.Observer(lambda n, v: None)
    return [*passes, fw.forward(NUMPY, parts, ids, lengths, None, observe)]


@pytest.mark.parametrize("path", PLAN_EXAMPLES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_integer_running_sums_are_the_float_sums(path: str, dtype: type, monkeypatch) -> None:
    """Compiled C-RASP models count with integer values: every running sum of the plan is
    an int64 sum, and the outputs are those of float64 running sums and of the observed
    pass, bit for bit (whole, in chunks, numpy and torch)."""
    model = compile(load(path))
    plan = NumpyParts(model, dtype).plan
    assert plan is not None
    assert all(bound is not None for layer in plan.layers for bound in layer.exact)
    rng = np.random.default_rng(5)
    alphabet = [s for s in model.vocab if s != BOS]
    inputs = [list(rng.choice(alphabet, n)) for n in (0, 3, 17, 64)]
    first, *others = plan_passes(model, inputs, dtype, monkeypatch)
    for other in others:
        np.testing.assert_array_equal(other, first)


def test_integer_bounds_follow_the_columns() -> None:
    """Dyck-1's value rows read one-hot token columns and a Heaviside unit (bound 1); a
    non-integer weight, or a running mean read as a value, has none."""
    model = compile(load(DYCK))
    plan = NumpyParts(model, np.float64).plan
    assert plan is not None
    assert [layer.exact for layer in plan.layers] == [[1, 1, 1], [1]]
    head = model.layers[0].heads[0]
    row, column = np.argwhere(head.w_v != 0)[0]
    head.w_v[row, column] = 3.0
    later = model.layers[1].heads[0]
    mean = np.argwhere(head.w_o != 0)[0][0]  # the column head 0 writes its running mean to
    later.w_v[np.argwhere(later.w_v != 0)[0][0], mean] = 1.0
    plan = NumpyParts(model, np.float64).plan
    assert plan is not None
    assert plan.layers[0].exact[0] == 3 and plan.layers[1].exact == [None]
    head.w_v[row, column] = 0.5
    plan = NumpyParts(model, np.float64).plan
    assert plan is not None and plan.layers[0].exact[0] is None


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_cancelled_dimension_is_zero_and_a_doubled_one_is_not(dtype: type, monkeypatch) -> None:
    """Tomita 2 frees the dimension of a running mean with two ReLU units,
    ``x + relu(−x) − relu(x) = 0``, and reuses it for an integer that a later head
    counts: that head sums in int64. With the two output weights swapped the dimension
    holds ``2x``, not an integer, and the head sums in float64; both as observed."""
    model = compile(load("examples/crasp/tomita2.crasp"))
    assert NumpyParts(model, dtype).plan.layers[2].exact == [138]  # type: ignore[union-attr]
    rng = np.random.default_rng(2)
    inputs = [list(rng.choice(["0", "1"], n)) for n in (5, 30, 2)] + [list("10" * 12)]
    first, *others = plan_passes(model, inputs, dtype, monkeypatch)
    for other in others:
        np.testing.assert_array_equal(other, first)
    w2 = model.layers[0].mlp.w2  # type: ignore[union-attr]
    (units,) = [np.flatnonzero(row) for row in w2 if np.count_nonzero(row) == 2][1:]
    target = int(np.flatnonzero(w2[:, units[0]])[0])
    w2[target, units] = -w2[target, units]  # x + relu(x) − relu(−x) = 2x
    assert NumpyParts(model, dtype).plan.layers[2].exact == [None]  # type: ignore[union-attr]
    first, *others = plan_passes(model, inputs, dtype, monkeypatch)
    for other in others:
        np.testing.assert_array_equal(other, first)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_integers_whose_sums_leave_float64_take_the_float_sum(dtype: type, monkeypatch) -> None:
    """A token counted with weight 2^52 + 1: its running sum passes 2^53 at the third
    token, where float64 rounds and int64 would not. The plan takes the float64 sum
    there (and in float32 for any count: the weight is not exact in float32), and gives
    the observed pass's numbers."""
    model = compile(load(DYCK))
    head = model.layers[0].heads[0]
    row, column = np.argwhere(head.w_v != 0)[0]
    head.w_v[row, column] = 2.0**52 + 1
    model.outputs[0].weights[:] = 0.0  # the output reads the head's running mean
    model.outputs[0].weights[np.argwhere(head.w_o != 0)[0][0]] = 1.0
    plan = NumpyParts(model, np.float64).plan
    assert plan is not None and plan.layers[0].exact[0] == 2**52 + 1
    counted = model.vocab[int(np.argwhere(model.w_e[:, column] != 0)[0][0])]
    inputs = [[counted] * 6, [counted]]
    first, *others = plan_passes(model, inputs, dtype, monkeypatch)
    for other in others:
        np.testing.assert_array_equal(other, first)
    if dtype is np.float64:
        sums = np.cumsum(np.full(7, 2.0**52 + 1) * (np.arange(7) > 0))
        assert int(sums[3]) != 3 * (2**52 + 1)  # rounded, where an int64 sum is not
        np.testing.assert_array_equal(first[0, :, 0], sums / np.arange(1, 8))


def test_prepared_parts_are_reused_until_a_weight_changes() -> None:
    model = compile(load(DYCK))
    parts = prepared(model, np.float64)
    assert prepared(model, np.float64) is parts
    assert prepared(model, np.float32) is not parts
    inputs = [list("(()"), list("()")]
    before = run_tokens(model, inputs).outputs["D"]
    model.outputs[0].weights[0] += 0.25  # in place: the next run sees it
    assert prepared(model, np.float64) is not parts
    after = run_tokens(model, inputs).outputs["D"]
    np.testing.assert_array_equal(after[:, 0], before[:, 0] + 0.25)


def test_torch_plans_follow_dtype_and_weight_edits() -> None:
    model = compile(load(DYCK))
    module = TorchTransformer(model)
    ids, lengths = module.encode([list("(()())"), list(")(")])
    plan = module.plan()
    assert plan is not None and plan.like.dtype == torch.float64
    module.to(dtype=torch.float32)
    plan32 = module.plan()
    assert plan32 is not None and plan32.like.dtype == torch.float32
    module.to(dtype=torch.float64)
    with torch.no_grad():
        module.readout.weight[0, 0] += 0.25
        got = module(ids, lengths)
    want = run_tokens(module.to_model(), [list("(()())"), list(")(")]).outputs["D"]
    np.testing.assert_array_equal(got[..., 0].numpy(), want)


# found by the fuzz harness (tests/fuzz) (crasp:25:1026): a hidden unit of mixed
# activations that reads a residual column only the positional features write
POSITIONAL_UNITS = """alphabet "a", "b", "c"
B0 = !"c"
B1 = B0
C2 = min(4 if false || (B1 || i % 3 == 1) else # ("b" && B0), (-5 + -1 if false else max(1, # false)) if false else min(4, # B0) if # B0 == -1 else min(# B1, 0))
B3 = i % 5 == 4 && B1
C4 = # (i % 5 == 0 || i % 5 == 2)
B5 = # false == # "b"
B6 = (i % 4 == 1 && "b" && ("c" || (i % 4 == 1 || i % 4 == 2))) && !(false || true) || (# "c" if 3 > -4 else # (i % 6 < 2) + 4) != min(# (i % 4 == 1), # false)
C7 = min(min(-2, 1 * -3), # (B5 && "b")) if false || !"c" || !true else max(# B6 - # B1, # false * -1) * -1
accept B6
output B1, C7
"""


def test_a_column_only_positions_write_is_a_column_of_the_batch(tmp_path) -> None:
    """It was ``(1, c)`` beside the batch's ``(B, c)`` columns, and stacking the hidden
    units of a batch of several inputs failed; the plan equals the observed pass."""
    path = tmp_path / "p.cr"
    path.write_text(POSITIONAL_UNITS)
    model = compile(load(path))
    parts = NumpyParts(model, np.float64)
    assert parts.plan is not None
    ids, lengths = encode(model.token_ids, [list("abcab" * 5), list("cc"), []])
    planned = fw.forward(NUMPY, parts, ids, lengths, None)
    observed = fw.forward(NUMPY, parts, ids, lengths, None, fw.Observer(lambda n, v: None))
    np.testing.assert_array_equal(planned, observed)
    module = TorchTransformer(model)
    assert module.plan() is not None
    with torch.no_grad():
        raw = module(torch.from_numpy(ids), torch.from_numpy(lengths))
    np.testing.assert_array_equal(raw.numpy(), observed)
