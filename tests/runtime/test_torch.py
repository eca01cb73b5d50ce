"""The torch runtime (:class:`crasp_compiler.runtime.torch_module.TorchTransformer`).

Checked here, on the CPU and (where torch sees one) on a CUDA device:

- every example in the three modes: decided values equal the reference interpreter at
  every position, on every string up to length 6 (alphabets of at most 3 symbols) or 4,
  and on sampled strings up to length 256 run as one right-padded batch; raw outputs
  within 1e-9 of the numpy executor's in float64 at every real position; float32 on
  inputs up to length 64 decides like the interpreter;
- random programs (``tests.support.strategies.programs``) of each relation class in the three
  modes, against the interpreter;
- random models of the whole family (``tests.support.reference_model.random_model``) against the
  naive reference, raw outputs to 1e-9, in padded batches of mixed lengths;
- padding (a mixed batch equals each input alone), hooks and parameter names,
  ``to_model()`` round trips, a gradient step, a 10 000-token input, and the refusals of
  ``run_tokens()``.

The module runs single-threaded: its tensors are small, and on a two-core machine
torch's intra-op threads cost more than they gain (several times slower when the cores
are busy).
"""

from __future__ import annotations

import functools
import itertools
import random
import time
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crasp_compiler import CraspError, Program, interpret_batch
from crasp_compiler.languages.crasp.compile import compile_program
from crasp_compiler.model.model import HeadKind, Layer, Model, derive_kinds
from crasp_compiler.runtime.forward import Path, head_path
from crasp_compiler.runtime.numpy_exec import run_tokens
from crasp_compiler.runtime.torch_module import TorchTransformer
from tests.languages.test_compiler import (
    EXAMPLE_FILES,
    MODES,
    RELATION_CLASSES,
    RELU_MAX_LEN,
    model,
    program,
    sampled,
)
from tests.model.test_model_file import assert_same_model
from tests.support.recognizers import REGISTRY
from tests.support.reference_model import (
    SEEDS,
    Probe,
    naive_forward,
    random_inputs,
    random_model,
    well_separated,
)
from tests.support.strategies import all_inputs, programs
from tests.support.strategies import random_inputs as random_words

TOLERANCE = 1e-9
SHORT_SMALL = 6  # every string up to this length, alphabets of <= 3 symbols
SHORT_LARGE = 4  # alphabets of 4-5 symbols
SAMPLED = 8  # random strings, and as many generated members, up to length 256
FLOAT32_MAX_LEN = 64

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param(
        "cuda",
        id="cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
        ],
    ),
]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------- helpers


@functools.cache
def module_for(name: str, mode: str) -> TorchTransformer:
    """A float64 CPU module of a compiled example (never mutated by the tests)."""
    return TorchTransformer(model(name, mode))


def on(module: TorchTransformer, device: str, dtype: torch.dtype) -> TorchTransformer:
    """``module`` on ``device`` in ``dtype`` (the cached CPU module itself when unchanged)."""
    if device == "cpu" and dtype == torch.float64:
        return module
    return TorchTransformer(module.to_model()).to(device=device, dtype=dtype)


@functools.cache
def short_words(name: str) -> tuple[tuple[str, ...], ...]:
    alphabet = program(name).alphabet
    limit = SHORT_SMALL if len(alphabet) <= 3 else SHORT_LARGE
    return tuple(word for n in range(limit + 1) for word in itertools.product(alphabet, repeat=n))


@functools.cache
def sampled_words(name: str, max_len: str, seed: str) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(w) for w in sampled(name, int(max_len), SAMPLED, seed))


def expected_values(prog: Program, words: Sequence[Sequence[str]]) -> dict[str, np.ndarray]:
    """The interpreter's outputs as right-padded arrays ``(B, 1 + longest)``; padding is -1."""
    size = 1 + max(map(len, words))
    out = {name: np.full((len(words), size), -1, dtype=np.int64) for name in prog.outputs}
    groups: dict[int, list[int]] = defaultdict(list)
    for k, word in enumerate(words):
        groups[len(word)].append(k)
    for n, rows in groups.items():
        values = interpret_batch(prog, [list(words[k]) for k in rows])
        for name in prog.outputs:
            out[name][rows, : n + 1] = np.asarray(values[name], dtype=np.int64)
    return out


@functools.cache
def expected_for(name: str, kind: str) -> dict[str, np.ndarray]:
    words = short_words(name) if kind == "short" else sampled_words(name, *kind.split(":"))
    return expected_values(program(name), words)


def real_positions(lengths: np.ndarray, size: int) -> np.ndarray:
    """(B, T) mask of the positions inside each sequence (BOS included)."""
    return np.arange(size)[None, :] <= np.asarray(lengths)[:, None]


def torch_forward(module: TorchTransformer, words, device: str):
    """Raw outputs ``(B, T, K)`` as float64 numpy, decided values as numpy, and lengths."""
    ids, lengths = module.encode([list(w) for w in words], device=device)
    assert ids.device.type == torch.device(device).type
    with torch.no_grad():
        raw = module(ids, lengths)
    assert raw.device.type == torch.device(device).type
    assert raw.dtype == module.embed.w_e.dtype
    decided = {k: v.cpu().numpy() for k, v in module.decide(raw).items()}
    return raw.double().cpu().numpy(), decided, lengths.cpu().numpy()


def assert_decides_like(
    names: Sequence[str],
    decided: dict[str, np.ndarray],
    expected: dict[str, np.ndarray],
    lengths: np.ndarray,
    words,
    what: str,
) -> None:
    real = real_positions(lengths, next(iter(decided.values())).shape[1])
    for name in names:
        wrong = np.argwhere(real & (decided[name] != expected[name]))
        if len(wrong):
            row, t = wrong[0]
            n = lengths[row]
            raise AssertionError(
                f"{what}: output {name} differs on {' '.join(words[row])!r} (length {n}) at "
                f"t={t}: torch {decided[name][row, : n + 1].tolist()} != interpreter "
                f"{expected[name][row, : n + 1].tolist()}"
            )


def assert_raw_close(compiled: Model, raw: np.ndarray, words, what: str) -> None:
    """Raw torch outputs within TOLERANCE of the numpy executor's at every real position."""
    result = run_tokens(compiled, [list(w) for w in words])
    real = real_positions(result.lengths, raw.shape[1])
    for k, out in enumerate(compiled.outputs):
        gap = np.where(real, np.abs(raw[..., k] - result.outputs[out.name]), 0.0)
        assert gap.max() <= TOLERANCE, (
            f"{what}: output {out.name}: |torch - numpy| = {gap.max():.3g} on "
            f"{' '.join(words[int(np.argmax(gap.max(axis=1)))])!r}"
        )


def check_example(name: str, mode: str, device: str, kind: str, dtype=torch.float64) -> None:
    prog = program(name)
    words = short_words(name) if kind == "short" else sampled_words(name, *kind.split(":"))
    module = on(module_for(name, mode), device, dtype)
    raw, decided, lengths = torch_forward(module, words, device)
    assert raw.shape == (len(words), 1 + max(map(len, words)), len(prog.outputs))
    what = f"{name} {mode} {device} {dtype}"
    assert_decides_like(prog.outputs, decided, expected_for(name, kind), lengths, words, what)
    if dtype == torch.float64:
        assert_raw_close(model(name, mode), raw, words, what)


# ---------------------------------------------------------------- examples


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_example_short_inputs(name, mode, device):
    check_example(name, mode, device, "short")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_example_sampled_up_to_256(name, mode, device):
    words = sampled_words(name, str(RELU_MAX_LEN), "torch")
    assert max(map(len, words)) == RELU_MAX_LEN and min(map(len, words)) == 0
    check_example(name, mode, device, f"{RELU_MAX_LEN}:torch")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_example_float32(name, mode, device):
    check_example(name, mode, device, f"{FLOAT32_MAX_LEN}:torch32", dtype=torch.float32)


def test_float32_module_computes_in_float32():
    module = on(module_for("c_near_a.cr", "relu"), "cpu", torch.float32)
    assert all(p.dtype == torch.float32 for p in module.parameters())
    ids, lengths = module.encode([["a", "c"], []])
    assert module(ids, lengths).dtype == torch.float32


# ---------------------------------------------------------------- random programs

RANDOM = settings(
    max_examples=15,
    suppress_health_check=[HealthCheck.filter_too_much],
)
RANDOM_MAX_LEN = 12


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["heaviside", "relu", "layernorm"])
@pytest.mark.parametrize(("local", "periodic"), RELATION_CLASSES)
@RANDOM
@given(data=st.data())
def test_random_programs(local, periodic, mode, device, data):
    prog = data.draw(
        programs(local=local, periodic=periodic, max_definitions=6, max_depth=3), label="program"
    )
    compiled = compile_program(prog, mode=mode, max_len=RANDOM_MAX_LEN if mode == "relu" else None)
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    words = all_inputs(prog, 4) + random_words(prog, seed, count=20, max_len=RANDOM_MAX_LEN)
    module = TorchTransformer(compiled).to(device)
    raw, decided, lengths = torch_forward(module, words, device)
    what = f"random {mode} {device}"
    assert_decides_like(prog.outputs, decided, expected_values(prog, words), lengths, words, what)
    assert_raw_close(compiled, raw, words, what)


# ---------------------------------------------------------------- random models


def draw_batch(rng: np.random.Generator, model: Model, count: int = 8) -> list[list[str]]:
    """``count`` random inputs of mixed lengths, 0 and 10 always among them."""
    inputs = random_inputs(rng, model, count=count - 2, max_len=10)
    inputs += [*random_inputs(rng, model, count=1, min_len=10, max_len=10), []]
    return [inputs[k] for k in rng.permutation(len(inputs))]


def test_random_models_cover_the_family():
    """The random models above have every weighting, mask and activation, layer norms,
    relative biases, and heads on the prefix-sum (uniform causal), fused (causal softmax
    without bias) and chunked paths of the torch module."""
    seen: set[str] = set()
    for seed in SEEDS:  # the seeds of the conformance suite
        compiled = random_model(np.random.default_rng(seed))
        for layer, kinds in zip(compiled.layers, derive_kinds(compiled), strict=True):
            for head, kind in zip(layer.heads, kinds, strict=True):
                seen |= {head.weighting, head.mask, "bias" if head.bias else "no bias"}
                seen.add(head_path(replace(head, kind=kind), fused=True).value)
            if layer.mlp is not None:
                seen |= set(layer.mlp.activations)
                if layer.mlp.norm_groups:
                    seen.add("norm")
    expected = {
        "softmax",
        "hard",
        "hard-left",
        "hard-right",
        "causal",
        "strict",
        "past",
        "strict-past",
        "none",
    }
    expected |= {"bias", "no bias", "prefix-sums", "fused", "chunked"}
    expected |= {"relu", "heaviside", "gelu", "norm"}
    assert expected <= seen, expected - seen


def with_bos_keys(model: Model, rng: np.random.Generator) -> Model:
    """``model`` with one more residual dimension, 1 at BOS and 0 at every token, that no
    sublayer writes; every causal softmax / average-hard head's keys read only it, so
    they vanish at tokens (the offset-lookup shape of compiled local relations)."""
    d = model.width

    def column(a: np.ndarray, values: np.ndarray | None = None) -> np.ndarray:
        extra = np.zeros((a.shape[0], 1)) if values is None else values[:, None]
        return np.hstack([a, extra])

    def row(a: np.ndarray) -> np.ndarray:
        return np.concatenate([a, np.zeros((1, *a.shape[1:]))])

    w_e = column(model.w_e, np.eye(len(model.vocab))[0])
    layers = []
    for layer in model.layers:
        heads = []
        for head in layer.heads:
            w_k = column(head.w_k)
            if head.mask == "causal" and head.weighting in ("softmax", "hard"):
                w_k = np.zeros_like(w_k)
                w_k[:, d] = rng.choice([-2.0, -1.0, 1.0, 2.0], size=w_k.shape[0])
            heads.append(
                replace(
                    head,
                    w_q=column(head.w_q),
                    w_k=w_k,
                    w_v=column(head.w_v, rng.normal(size=head.w_v.shape[0])),
                    w_o=row(head.w_o),
                )
            )
        mlp = layer.mlp
        if mlp is not None:
            mlp = replace(mlp, w1=column(mlp.w1), w2=row(mlp.w2), b2=row(mlp.b2))
        layers.append(Layer(heads, mlp))
    return replace(
        model,
        w_e=w_e,
        w_p=row(model.w_p),
        layers=layers,
        outputs=[replace(o, weights=np.append(o.weights, 0.0)) for o in model.outputs],
        residual=[*model.residual, "bos"],
    )


@pytest.mark.parametrize("device", DEVICES)
def test_heads_keyed_at_bos_match_reference(device):
    compared = total = keyed = 0
    for seed in range(7200, 7230):
        rng = np.random.default_rng(seed)
        compiled = with_bos_keys(
            random_model(rng, masks=("causal",), weightings=("softmax", "hard"), p_bias=0.7),
            rng,
        )
        keyed += sum(kind is HeadKind.BOS_KEYED for row in derive_kinds(compiled) for kind in row)
        assert all(
            head_path(head, fused=False) in (Path.BOS_KEYED, Path.PREFIX_SUMS)
            for row in TorchTransformer(compiled).head_rows()
            for head in row
        )
        inputs = draw_batch(rng, compiled)
        raw, _, _ = torch_forward(TorchTransformer(compiled).to(device), inputs, device)
        for row, tokens in enumerate(inputs):
            total += 1
            probe = Probe()
            want = naive_forward(compiled, tokens, probe=probe)
            if not well_separated(compiled, want, probe, margin=1e-6):
                continue
            compared += 1
            for k, out in enumerate(compiled.outputs):
                where = f"seed {seed}: output {out.name} on {tokens}"
                np.testing.assert_allclose(
                    raw[row, : len(tokens) + 1, k],
                    want[out.name],
                    rtol=TOLERANCE,
                    atol=TOLERANCE,
                    err_msg=where,
                )
    assert keyed >= 20
    assert compared >= 0.8 * total


# ---------------------------------------------------------------- padding


def raw_alone_and_batched(module: TorchTransformer, words):
    batched, _, _ = torch_forward(module, words, "cpu")
    alone = [torch_forward(module, [w], "cpu")[0][0] for w in words]
    return batched, alone


@pytest.mark.parametrize(
    ("name", "mode"),
    [
        ("c_near_a.cr", "relu"),
        ("no_repeat.cr", "relu"),
        ("induction_head.crasp", "heaviside"),
        ("tomita7_local.cr", "layernorm"),
        ("dyck1.cr", "heaviside"),
    ],
)
def test_padding_equals_running_alone(name, mode):
    rng = random.Random(f"{name}-padding")
    alphabet = program(name).alphabet
    words = [[rng.choice(alphabet) for _ in range(n)] for n in (0, 1, 7, 40, 3, 40, 19)]
    module = module_for(name, mode)
    batched, alone = raw_alone_and_batched(module, words)
    decided = module.decide(torch.from_numpy(batched))
    for row, word in enumerate(words):
        n = len(word)
        np.testing.assert_allclose(batched[row, : n + 1], alone[row], rtol=0, atol=1e-12)
        single = module.decide(torch.from_numpy(alone[row])[None])
        for key, values in decided.items():
            assert values[row, : n + 1].tolist() == single[key][0].tolist()


@pytest.mark.parametrize("seed", range(6))
def test_padding_random_models(seed):
    """Masks ``none`` and ``strict``, hard ties: padding never reaches a real position."""
    rng = np.random.default_rng(7500 + seed)
    compiled = random_model(rng, masks=("none", "strict", "causal"))
    words = draw_batch(rng, compiled)
    batched, alone = raw_alone_and_batched(TorchTransformer(compiled), words)
    for row, word in enumerate(words):
        probe = Probe()
        want = naive_forward(compiled, word, probe=probe)
        if well_separated(compiled, want, probe, margin=1e-6):
            n = len(word)
            np.testing.assert_allclose(batched[row, : n + 1], alone[row], rtol=0, atol=1e-9)


def test_default_lengths_mean_no_padding():
    module = module_for("c_near_a.cr", "heaviside")
    ids, lengths = module.encode([["a", "b", "c", "a"], ["c", "a", "a", "b"]])
    with torch.no_grad():
        assert torch.equal(module(ids), module(ids, lengths))


def test_encode():
    module = module_for("dyck1.cr", "heaviside")
    ids, lengths = module.encode([["(", ")", "("], [], [")"]])
    assert ids.dtype == torch.long and lengths.dtype == torch.long
    assert lengths.tolist() == [3, 0, 1]
    index = {s: k for k, s in enumerate(module.vocab)}
    assert ids.tolist() == [
        [0, index["("], index[")"], index["("]],
        [0, 0, 0, 0],
        [0, index[")"], 0, 0],
    ]


def test_empty_batch():
    values = module_for("dyck1.cr", "heaviside").run([])
    assert values["D"].shape == (0, 1)


@pytest.mark.parametrize(("name", "mode"), [("contains_ab.crasp", "heaviside")])
def test_empty_batch_with_offset_heads(name, mode):
    values = module_for(name, mode).run([])
    for out in model(name, mode).outputs:
        assert values[out.name].shape == (0, 1)


# ---------------------------------------------------------------- hooks and names


def test_forward_hooks_fire_with_expected_shapes():
    name = "dyck1.cr"
    compiled = model(name, "heaviside")
    assert compiled.layers[0].heads and compiled.layers[-1].mlp is not None
    module = TorchTransformer(compiled)
    seen: dict[str, tuple] = {}

    def hook(label):
        def record(mod, inputs, output):
            seen[label] = (tuple(inputs[0].shape), tuple(output.shape), output.detach().clone())

        return record

    handles = [
        module.blocks[0].attn.heads[0].register_forward_hook(hook("head")),
        module.blocks[-1].mlp.register_forward_hook(hook("mlp")),
    ]
    words = [["(", ")", "("], ["(", "(", ")", ")", ")"]]
    ids, lengths = module.encode(words)
    with torch.no_grad():
        module(ids, lengths)
    d = compiled.width
    assert seen["head"][:2] == ((2, 6, d), (2, 6, d))
    assert seen["mlp"][:2] == ((2, 6, d), (2, 6, d))
    # the head's contribution is what it writes: W_O (Σ α W_V x), zero outside its rows
    head = compiled.layers[0].heads[0]
    written = np.flatnonzero(np.abs(head.w_o).sum(axis=1))
    contribution = seen["head"][2].numpy()
    assert np.all(contribution[..., np.setdiff1d(np.arange(d), written)] == 0)
    for handle in handles:
        handle.remove()
    seen.clear()
    with torch.no_grad():
        module(ids, lengths)
    assert not seen


def test_parameter_names():
    compiled = model("induction_head.crasp", "relu")
    module = TorchTransformer(compiled)
    names = dict(module.named_parameters())
    for key in ("embed.w_e", "pos.w_p", "blocks.0.attn.heads.0.w_q", "readout.weight"):
        assert key in names
    assert names["readout.weight"].shape == (len(compiled.outputs), compiled.width)
    assert names["embed.w_e"].shape == compiled.w_e.shape
    for i, layer in enumerate(compiled.layers):
        for h, head in enumerate(layer.heads):
            for key in ("w_q", "w_k", "w_v", "w_o"):
                assert names[f"blocks.{i}.attn.heads.{h}.{key}"].shape == getattr(head, key).shape
        if layer.mlp is not None:
            for key in ("w1", "b1", "w2", "b2"):
                assert names[f"blocks.{i}.mlp.{key}"].shape == getattr(layer.mlp, key).shape
    assert sum(p.numel() for p in module.parameters()) == compiled.parameter_count()
    assert all(p.requires_grad and p.dtype == torch.float64 for p in module.parameters())
    assert set(module.state_dict()) == set(names)  # activation masks are not saved


# ---------------------------------------------------------------- conversion and training


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["dyck1.cr", "induction_head.crasp", "c_near_a.cr"])
def test_to_model_round_trip(name, mode):
    compiled = model(name, mode)
    back = TorchTransformer(compiled).to_model()
    assert_same_model(compiled, back)
    words = list(map(list, sampled_words(name, "32", "round-trip")))
    a, b = run_tokens(compiled, words), run_tokens(back, words)
    for out in compiled.outputs:
        np.testing.assert_array_equal(a.outputs[out.name], b.outputs[out.name])


@pytest.mark.parametrize("seed", range(5))
def test_to_model_round_trip_random_models(seed):
    compiled = random_model(np.random.default_rng(7600 + seed), p_norm=1.0, p_bias=1.0)
    assert_same_model(compiled, TorchTransformer(compiled).to_model())


@pytest.mark.parametrize("name", ["dyck1.cr", "c_near_a.cr", "no_repeat.cr"])
def test_gradient_step(name):
    """Fine-tuning: parameters get finite gradients, a small step lowers the loss, and the
    tuned weights convert back to a model the numpy executor runs alike. While gradients
    flow, uniform heads take the general path, so every parameter gets a gradient."""
    module = TorchTransformer(model(name, "relu"))
    rng = random.Random(name)
    alphabet = program(name).alphabet
    words = [[rng.choice(alphabet) for _ in range(n)] for n in (3, 9, 17, 0, 12)]
    ids, lengths = module.encode(words)
    real = torch.from_numpy(real_positions(lengths.numpy(), ids.shape[1]))[..., None]

    def loss() -> torch.Tensor:
        raw = module(ids, lengths)
        return ((raw - 0.25) ** 2 * real).sum() / real.sum()

    before = loss()
    before.backward()
    grads = {k: p.grad for k, p in module.named_parameters()}
    missing = [k for k, g in grads.items() if g is None]
    assert not missing
    assert all(torch.isfinite(g).all() for g in grads.values() if g is not None)

    def moved(fragment: str) -> bool:
        return any(fragment in k and g is not None and g.abs().sum() > 0 for k, g in grads.items())

    # Value maps reach these Boolean outputs only through comparators, which are flat
    # where they are exact: their true gradient is 0 (see the count-output test below).
    for fragment in ("readout.weight", "embed.w_e", ".mlp.w1", ".mlp.b2", ".w_o"):
        assert moved(fragment), fragment
    norm = torch.sqrt(sum((g**2).sum() for g in grads.values() if g is not None))
    with torch.no_grad():
        for p in module.parameters():
            if p.grad is not None:
                p -= 1e-6 / norm * p.grad
        after = loss()
    assert after < before
    tuned = module.to_model()
    result = run_tokens(tuned, words)
    with torch.no_grad():
        raw = module(ids, lengths).numpy()
    for k, out in enumerate(tuned.outputs):
        for row, word in enumerate(words):
            np.testing.assert_allclose(
                raw[row, : len(word) + 1, k],
                result.outputs[out.name][row, : len(word) + 1],
                rtol=TOLERANCE,
                atol=TOLERANCE,
            )


def test_value_maps_get_gradients_through_count_outputs():
    """A count output reads attention outputs linearly, so the loss moves the value maps."""
    from crasp_compiler import parse_program

    source = 'alphabet "a", "b"\nC(i) := #[j ≤ i] Q_a(j)\noutput C\n'
    module = TorchTransformer(compile_program(parse_program(source), "relu", max_len=20))
    ids, lengths = module.encode([list("abba"), list("ba")])
    (module(ids, lengths) ** 2).sum().backward()
    w_v = [p.grad for k, p in module.named_parameters() if k.endswith(".w_v")]
    assert w_v and all(g is not None for g in w_v)
    assert any(g.abs().sum() > 1e-3 for g in w_v)


def test_edited_uniform_head_is_not_frozen():
    module = TorchTransformer(model("dyck1.cr", "relu"))
    head = module.blocks[0].attn.heads[0]
    with torch.no_grad():
        head.w_q.fill_(1.0)
        head.w_k.fill_(1.0)
    words = [list("(()()"), list("))(")]
    ids, lengths = module.encode(words)
    seen = {}

    def record(mod, inputs, output) -> None:
        seen["x"] = (inputs[0] + output).detach().numpy()

    module.blocks[0].attn.register_forward_hook(record)
    with torch.no_grad():
        module(ids, lengths)
    label, want = run_tokens(module.to_model(), words, residuals=True).residuals[1]
    assert label == "layer 1 attention"
    for row, word in enumerate(words):  # padding positions are unspecified
        real = len(word) + 1
        np.testing.assert_allclose(seen["x"][row, :real], want[row, :real], rtol=0, atol=TOLERANCE)


# ---------------------------------------------------------------- long inputs and refusals

LONG = 10_000


def test_long_input_dyck1():
    name = "dyck1.cr"
    prog = program(name)
    rng = random.Random("torch-long")
    member = REGISTRY[name].generate(rng, LONG)
    assert len(member) == LONG
    other = [rng.choice(prog.alphabet) for _ in range(LONG - 1)]
    module = module_for(name, "heaviside")
    start = time.perf_counter()
    values = module.run([member, other])
    elapsed = time.perf_counter() - start
    assert values["D"].shape == (2, LONG + 1)
    assert values["D"][0, -1].item() is True
    for row, word in enumerate([member, other]):
        want = np.asarray(interpret_batch(prog, [word])["D"][0])
        got = values["D"][row, : len(word) + 1].numpy()
        np.testing.assert_array_equal(got, want)
    assert elapsed < 30, f"{LONG} tokens took {elapsed:.1f} s"


def test_run_refuses_inputs_beyond_the_guarantee():
    module = module_for("majority.crasp", "relu")
    assert module.guarantee.max_len == RELU_MAX_LEN
    assert module.run([["1"] * RELU_MAX_LEN])["M"][0, -1].item() is True
    with pytest.raises(CraspError, match=r"input length 257 exceeds .*length <= 256"):
        module.run([["0"] * (RELU_MAX_LEN + 1)])
    with pytest.raises(CraspError, match="exceeds"):
        module.run([["1"], ["0"] * (RELU_MAX_LEN + 1)])  # the longest input decides
    values = module.run([["0"] * (RELU_MAX_LEN + 1)], on_overlength="ignore")
    assert values["M"].shape == (1, RELU_MAX_LEN + 2)
    unlimited = module_for("majority.crasp", "heaviside")
    assert unlimited.run([["1"] * 600])["M"][0, -1].item() is True


def test_run_on_overlength_like_numpy():
    module = module_for("majority.crasp", "relu")
    too_long = [["0"] * (RELU_MAX_LEN + 1)]
    with pytest.raises(ValueError, match="on_overlength"):
        module.run(too_long, on_overlength="nope")
    with pytest.warns(UserWarning, match="input length 257 exceeds"):
        module.run(too_long, on_overlength="warn")


def test_run_refuses_tokens_outside_the_vocabulary():
    module = module_for("dyck1.cr", "heaviside")
    with pytest.raises(CraspError, match="'x' at position 1 is not in the vocabulary"):
        module.run([["(", "x"]])
    with pytest.raises(CraspError, match="not in the vocabulary"):
        module.run([["(", ")"], ["<bos>"]])
    with pytest.raises(CraspError, match="not in the vocabulary"):
        module.encode([["a"]])


def test_run_matches_numpy_values():
    name = "induction_head.crasp"
    module = module_for(name, "heaviside")
    words = list(map(list, sampled_words(name, "40", "values")))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        values = module.run(words)
    result = run_tokens(model(name, "heaviside"), words)
    for key, array in values.items():
        real = real_positions(result.lengths, array.shape[1])
        np.testing.assert_array_equal(
            np.where(real, array.numpy(), 0), np.where(real, result.values[key], 0)
        )


def test_final_reads_each_sequence_at_its_own_end():
    """A naive ``[:, -1]`` of the decisions read True for ")" (the padding after it);
    ``final`` reads position ``lengths[b]``, and ``decide(raw, lengths)`` marks padding."""
    module = module_for("dyck1.cr", "heaviside")
    words = [[")"], ["(", ")", "(", ")"], []]
    ids, lengths = module.encode(words)
    with torch.no_grad():
        raw = module(ids, lengths)
    assert module.final(raw, lengths)["D"].tolist() == [False, True, True]
    assert module.decide(raw)["D"][0, -1].item() is True  # the padding, not the answer
    decided = module.decide(raw, lengths)["D"]
    assert decided[0].tolist() == [True, False, False, False, False]
    assert module.run(words)["D"][0].tolist() == decided[0].tolist()
