"""Numeric inputs (``Model.inputs``, ``W_X``): x_t += W_X · v_t at tokens, 0 at BOS, in the
numpy executor, the torch module, model files and exports."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from crasp_compiler.assemble.builder import Builder
from crasp_compiler.cookbook import attention, ffn
from crasp_compiler.errors import CraspError
from crasp_compiler.export.lens import lens_state_dict
from crasp_compiler.export.torch_files import export_model, load_export
from crasp_compiler.model.io import read_model, save_model
from crasp_compiler.runtime.numpy_exec import run_tokens
from crasp_compiler.runtime.torch_module import TorchTransformer
from tests.model.test_model_file import assert_same_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def running_max_model():
    """Two channels u, v: the prefix average of u and max(u, v) at each token."""
    b = Builder(["m"])
    u, v = b.numeric("u"), b.numeric("v")
    avg = b.add(attention.average(u, "avg"))
    top = b.add(ffn.maximum(u, v, "top"))
    return b.build({"avg": avg, "top": top, "double": 2 * v})


def reference(u, v):
    padded = np.concatenate([[0.0], u])
    avg = np.cumsum(padded) / np.arange(1, len(padded) + 1)
    top = np.concatenate([[0.0], np.maximum(u, v)])
    return {"avg": avg, "top": top, "double": np.concatenate([[0.0], 2 * v])}


def batch(rng, count=5):
    lengths = [0, 1, *rng.integers(1, 12, size=count - 2)]
    tokens = [["m"] * n for n in lengths]
    values = [rng.normal(scale=1e3, size=(n, 2)) for n in lengths]
    return tokens, values


def test_numpy_and_torch_read_numeric_inputs():
    model = running_max_model()
    assert model.inputs == ["u", "v"] and model.numeric_weights.shape == (model.width, 2)
    rng = np.random.default_rng(0)
    tokens, values = batch(rng)
    result = run_tokens(model, tokens, values=values)
    module = TorchTransformer(model)
    ids, lengths = module.encode(tokens)
    with torch.no_grad():
        raw = module(ids, lengths, module.encode_values(values, lengths)).numpy()
    for row, array in enumerate(values):
        want = reference(array[:, 0], array[:, 1])
        n = len(array) + 1
        for k, out in enumerate(model.outputs):
            np.testing.assert_allclose(
                result.outputs[out.name][row, :n], want[out.name], rtol=1e-12
            )
            np.testing.assert_allclose(raw[row, :n, k], want[out.name], rtol=1e-12)


def test_single_channel_takes_flat_arrays():
    b = Builder(["m"])
    x = b.numeric("x")
    model = b.build({"x": x})
    got = run_tokens(model, [["m"] * 3], values=[np.array([1.5, -2.0, 7.0])]).outputs["x"][0]
    assert got.tolist() == [0.0, 1.5, -2.0, 7.0]


@pytest.mark.parametrize(
    "values, message",
    [
        (None, "reads numeric inputs"),
        ([np.zeros((2, 2))], "expected \\(3, 2\\)"),
        ([np.zeros((3, 2)), np.zeros((3, 2))], "for 2 sequences"),
        ([np.full((3, 2), np.nan)], "not all finite"),
    ],
)
def test_bad_numeric_inputs_are_clear_errors(values, message):
    model = running_max_model()
    with pytest.raises(CraspError, match=message):
        run_tokens(model, [["m"] * 3], values=values)
    with pytest.raises(CraspError, match=message):
        TorchTransformer(model).run([["m"] * 3], values=values)


def test_numeric_inputs_survive_files_exports_and_to_model(tmp_path):
    model = running_max_model()
    save_model(model, tmp_path / "m.npz")
    assert_same_model(model, read_model(tmp_path / "m.npz"))
    for fmt in ("safetensors", "torch"):
        export_model(model, tmp_path / fmt, fmt)
        assert_same_model(model, load_export(tmp_path / fmt))
    assert_same_model(model, TorchTransformer(model).to_model())
    tokens, values = batch(np.random.default_rng(1))
    a = run_tokens(model, tokens, values=values)
    b = run_tokens(read_model(tmp_path / "m.npz"), tokens, values=values)
    for out in model.outputs:
        np.testing.assert_array_equal(a.outputs[out.name], b.outputs[out.name])


def test_lens_export_refuses_numeric_inputs():
    with pytest.raises(CraspError, match="numeric inputs"):
        lens_state_dict(running_max_model())


def test_crasp_check_feeds_numeric_inputs():
    from crasp_compiler.verify import check_model

    report = check_model(running_max_model(), samples=30, max_len=20)
    assert report.runtimes == ["numpy", "torch"] and report.disagreements == 0
    assert report.max_raw_difference < 1e-9
