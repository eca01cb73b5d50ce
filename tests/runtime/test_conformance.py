"""One conformance suite for every runtime of the model family.

Each runtime in :data:`RUNTIMES` runs random models of the whole family
(:func:`tests.support.reference_model.random_model`: every weighting, mask, bias,
activation, layer norm, positional feature and decision rule) and compiled models, and
must agree with the naive reference :func:`~tests.support.reference_model.naive_forward`:
raw outputs to 1e-9, decided values exactly, on every sequence whose discrete choices are
well separated. A new runtime is one entry in :data:`RUNTIMES`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from crasp_compiler.model import Model
from crasp_compiler.runtime import run_tokens
from tests.support.reference_model import (
    SEEDS,
    Probe,
    decide,
    naive_forward,
    random_inputs,
    random_model,
    well_separated,
)

TOLERANCE = 1e-9
Raw = dict[str, np.ndarray]  # output name -> (batch, T) raw outputs, BOS first


def _numpy(model: Model, inputs: list[list[str]]) -> tuple[Raw, Raw]:
    result = run_tokens(model, inputs)
    return result.outputs, result.values


def _torch(model: Model, inputs: list[list[str]], device: str = "cpu") -> tuple[Raw, Raw]:
    torch = pytest.importorskip("torch")
    from crasp_compiler.runtime.torch_module import TorchTransformer

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    module = TorchTransformer(model).to(device)
    ids, lengths = module.encode(inputs, device=device)
    with torch.no_grad():
        raw = module(ids, lengths)
    decided = {name: v.cpu().numpy() for name, v in module.decide(raw, lengths).items()}
    return {o.name: raw[..., k].cpu().numpy() for k, o in enumerate(model.outputs)}, decided


def _torch_cuda(model: Model, inputs: list[list[str]]) -> tuple[Raw, Raw]:
    return _torch(model, inputs, "cuda")


def _torch_observed(model: Model, inputs: list[list[str]]) -> tuple[Raw, Raw]:
    """The torch module with every observation point on (the path hooks will take)."""
    torch = pytest.importorskip("torch")
    from crasp_compiler.runtime import forward
    from crasp_compiler.runtime.torch_module import TorchTransformer

    seen: list[str] = []
    module = TorchTransformer(model)
    ids, lengths = module.encode(inputs)
    with torch.no_grad():
        raw = module(ids, lengths, observe=forward.Observer(lambda name, x: seen.append(name)))
    assert "hook_embed" in seen and any(name.endswith("hook_resid_post") for name in seen)
    decided = {name: v.numpy() for name, v in module.decide(raw, lengths).items()}
    return {o.name: raw[..., k].numpy() for k, o in enumerate(model.outputs)}, decided


RUNTIMES: dict[str, Callable[[Model, list[list[str]]], tuple[Raw, Raw]]] = {
    "numpy": _numpy,
    "torch": _torch,
    "torch-observed": _torch_observed,
    "torch-cuda": _torch_cuda,
}
CHUNKS = 8  # each runtime runs the random models of SEEDS in 8 tests


def _conform(runtime: str, model: Model, inputs: list[list[str]]) -> int:
    raws, decided = RUNTIMES[runtime](model, inputs)
    compared = 0
    for row, tokens in enumerate(inputs):
        probe = Probe()
        want = naive_forward(model, tokens, probe=probe)
        if not well_separated(model, want, probe, margin=1e-6):
            continue
        compared += 1
        n = len(tokens) + 1
        for out in model.outputs:
            where = f"{runtime}: output {out.name} on {tokens}"
            got = np.asarray(raws[out.name][row, :n], dtype=np.float64)
            np.testing.assert_allclose(
                got, want[out.name], rtol=TOLERANCE, atol=TOLERANCE, err_msg=where
            )
            np.testing.assert_array_equal(
                decided[out.name][row, :n], decide(out.rule, want[out.name]), err_msg=where
            )
    return compared


@pytest.mark.parametrize(
    "runtime",
    [pytest.param(name, marks=[pytest.mark.gpu] if "cuda" in name else []) for name in RUNTIMES],
)
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_random_models_conform(runtime, chunk):
    compared = total = 0
    for seed in SEEDS[chunk::CHUNKS]:
        rng = np.random.default_rng(seed)
        model = random_model(rng)
        inputs = random_inputs(rng, model, count=4, max_len=9)
        compared += _conform(runtime, model, inputs)
        total += len(inputs)
    assert compared >= 0.8 * total  # near-threshold inputs are rare


@pytest.mark.parametrize(
    "runtime",
    [pytest.param(name, marks=[pytest.mark.gpu] if "cuda" in name else []) for name in RUNTIMES],
)
@pytest.mark.parametrize("example", ["dyck1.cr", "c_near_a.cr", "tomita7_local.cr"])
def test_compiled_models_conform(runtime, example):
    from crasp_compiler import compile, load

    model = compile(load(f"examples/crasp/{example}"))
    rng = np.random.default_rng(0)
    inputs = random_inputs(rng, model, count=6, max_len=12)
    assert _conform(runtime, model, inputs) == len(inputs)  # compiled margins are wide
