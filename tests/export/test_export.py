"""Torch exports (:mod:`crasp_compiler.export.torch_files`): round trips and bad exports.

An export directory holds ``config.json`` and ``model.safetensors`` or ``model.pt``.
Round trips must give back the model bit for bit (every array and header field), and a
torch module built from it must compute the same raw outputs. A bad export must raise
:class:`CraspError` naming the problem, never another exception; ``model.pt`` is read
with ``weights_only=True``, so pickled code is refused without running.
"""

from __future__ import annotations

import errno
import functools
import json
import pickle
import random
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from crasp_compiler import CraspError
from crasp_compiler.export.torch_files import export_model, load_export, state_dict_arrays
from crasp_compiler.model.model import Model
from crasp_compiler.runtime.torch_module import TorchTransformer
from tests.languages.test_compiler import MODES, model, program
from tests.model.test_model_file import assert_same_model
from tests.support.reference_model import random_model

FORMATS = ["safetensors", "torch"]
WEIGHTS = {"safetensors": "model.safetensors", "torch": "model.pt"}
ROUND_TRIP = ["dyck1.cr", "induction_head.crasp", "c_near_a.cr", "tomita7.crasp"]


def raw_outputs(compiled: Model, words: list[list[str]]) -> np.ndarray:
    module = TorchTransformer(compiled)
    ids, lengths = module.encode(words)
    with torch.no_grad():
        return module(ids, lengths).numpy()


def words_for(name: str) -> list[list[str]]:
    rng = random.Random(f"{name}-export")
    alphabet = program(name).alphabet
    return [[rng.choice(alphabet) for _ in range(n)] for n in (0, 1, 5, 17, 30)]


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ROUND_TRIP)
def test_round_trip(tmp_path, name, mode, fmt):
    compiled = model(name, mode)
    out = export_model(compiled, tmp_path / "export", fmt)
    assert out == tmp_path / "export"
    assert sorted(p.name for p in out.iterdir()) == sorted(["config.json", WEIGHTS[fmt]])
    config = json.loads((out / "config.json").read_text())
    assert (config["format"], config["version"], config["weights"]) == (
        "crasp-torch-export",
        1,
        WEIGHTS[fmt],
    )
    back = load_export(out)
    assert_same_model(compiled, back)
    assert_same_model(compiled, load_export(out / "config.json"))
    assert_same_model(compiled, load_export(str(out)))
    words = words_for(name)
    np.testing.assert_array_equal(raw_outputs(back, words), raw_outputs(compiled, words))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("seed", range(3))
def test_round_trip_random_models(tmp_path, seed, fmt):
    """Every weighting, mask, activation, layer norms, biases, positional features."""
    compiled = random_model(np.random.default_rng(8000 + seed), p_norm=1.0, p_bias=1.0)
    assert_same_model(compiled, load_export(export_model(compiled, tmp_path, fmt)))


@pytest.mark.parametrize("mode", MODES)
def test_safetensors_names_are_the_module_state_dict(tmp_path, mode):
    compiled = model("induction_head.crasp", mode)
    export_model(compiled, tmp_path / "s", "safetensors")
    export_model(compiled, tmp_path / "t", "torch")
    tensors = load_file(str(tmp_path / "s" / "model.safetensors"))
    module = TorchTransformer(compiled)
    state = module.state_dict()
    assert sorted(tensors) == sorted(state)
    assert sorted(state_dict_arrays(compiled)) == sorted(state)
    for key, value in tensors.items():
        assert value.dtype == torch.float64
        assert torch.equal(value, state[key]), key
    pickled = torch.load(tmp_path / "t" / "model.pt", weights_only=True)
    assert sorted(pickled) == sorted(state)
    # a fresh module (other weights, same architecture) loads them strictly
    fresh = TorchTransformer(compiled)
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    fresh.load_state_dict(tensors)
    for key, value in fresh.state_dict().items():
        assert torch.equal(value, state[key]), key
    words = words_for("induction_head.crasp")
    ids, lengths = module.encode(words)
    with torch.no_grad():
        assert torch.equal(fresh(ids, lengths), module(ids, lengths))
    fresh.load_state_dict(pickled)


def test_export_overwrites_and_creates_parents(tmp_path):
    compiled = model("dyck1.cr", "heaviside")
    target = tmp_path / "a" / "b"
    export_model(compiled, target, "safetensors")
    export_model(model("majority.crasp", "heaviside"), target, "safetensors")
    assert load_export(target).vocab == model("majority.crasp", "heaviside").vocab


def test_export_refuses_unknown_format(tmp_path):
    with pytest.raises(CraspError, match="unknown export format 'onnx'"):
        export_model(model("dyck1.cr", "heaviside"), tmp_path / "x", "onnx")
    assert not (tmp_path / "x").exists()


def test_export_to_unwritable_path(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(CraspError, match="cannot write export"):
        export_model(model("dyck1.cr", "heaviside"), blocker / "sub", "safetensors")


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_reexport_in_another_format_replaces_the_previous_export(tmp_path):
    """No stale weights file of the other format is left for a loader to pick up."""
    target = tmp_path / "out"
    dyck, majority = model("dyck1.cr", "heaviside"), model("majority.crasp", "heaviside")
    export_model(dyck, target, "safetensors")
    export_model(majority, target, "torch")
    assert listing(target) == ["config.json", "model.pt"]
    assert_same_model(load_export(target), majority)
    export_model(dyck, target, "safetensors")
    assert listing(target) == ["config.json", "model.safetensors"]
    assert_same_model(load_export(target), dyck)
    assert listing(tmp_path) == ["out"]  # no temporary directory left behind


def test_export_into_an_empty_directory(tmp_path):
    (tmp_path / "empty").mkdir()
    export_model(model("dyck1.cr", "heaviside"), tmp_path / "empty", "torch")
    assert listing(tmp_path / "empty") == ["config.json", "model.pt"]


def test_export_refuses_a_directory_that_is_not_an_export(tmp_path):
    compiled = model("dyck1.cr", "heaviside")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(CraspError, match="not empty") as err:
        export_model(compiled, mine, "safetensors")
    assert "notes.txt" in str(err.value) and str(mine) in str(err.value)
    assert listing(mine) == ["notes.txt"] and (mine / "notes.txt").read_text() == "keep me"
    # an export with a file of the user's next to it
    export_model(compiled, tmp_path / "e", "safetensors")
    (tmp_path / "e" / "notes.txt").write_text("mine")
    with pytest.raises(CraspError, match=r"notes\.txt"):
        export_model(compiled, tmp_path / "e", "torch")
    assert listing(tmp_path / "e") == ["config.json", "model.safetensors", "notes.txt"]
    # a config.json that is not an export's
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text('{"format": "something-else"}')
    with pytest.raises(CraspError, match="not empty"):
        export_model(compiled, other, "torch")
    assert (other / "config.json").read_text() == '{"format": "something-else"}'
    (tmp_path / "file").write_text("x")
    with pytest.raises(CraspError, match="not a directory"):
        export_model(compiled, tmp_path / "file", "torch")
    assert (tmp_path / "file").read_text() == "x"


def _disk_full(*args, **kwargs):
    """A save that writes part of its file, then runs out of space."""
    target = args[1] if len(args) > 1 else kwargs.get("filename", kwargs.get("f"))
    Path(target).write_bytes(b"\0" * 10)
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("where", ["weights", "config"])
def test_disk_full_keeps_the_previous_export(tmp_path, monkeypatch, fmt, where):
    import safetensors.torch

    target = tmp_path / "out"
    old = model("majority.crasp", "heaviside")
    export_model(old, target, "torch" if fmt == "safetensors" else "safetensors")
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    if where == "config":
        real = Path.write_text

        def write_text(self, *args, **kwargs):
            if self.name == "config.json":
                real(self, "{")
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(self, *args, **kwargs)

        monkeypatch.setattr(Path, "write_text", write_text)
    elif fmt == "safetensors":
        monkeypatch.setattr(safetensors.torch, "save_file", _disk_full)
    else:
        monkeypatch.setattr(torch, "save", _disk_full)
    with pytest.raises(CraspError, match="cannot write export") as err:
        export_model(model("dyck1.cr", "heaviside"), target, fmt)
    assert "No space left on device" in str(err.value) and str(target) in str(err.value)
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert_same_model(load_export(target), old)
    assert listing(tmp_path) == ["out"]
    # a new target: nothing is left behind
    with monkeypatch.context() as patch:
        patch.setattr(torch, "save", _disk_full)
        with pytest.raises(CraspError, match="No space left"):
            export_model(old, tmp_path / "new", "torch")
    assert listing(tmp_path) == ["out"]


# ---------------------------------------------------------------- bad exports


@functools.cache
def _pristine(fmt: str, root: str) -> Path:
    out = Path(root) / f"pristine-{fmt}"
    export_model(model("dyck1.cr", "heaviside"), out, fmt)
    return out


@pytest.fixture(params=FORMATS)
def export(request, tmp_path_factory, tmp_path) -> Path:
    """A fresh copy of an export of dyck1 (heaviside) in each format."""
    root = tmp_path_factory.getbasetemp()
    target = tmp_path / "export"
    shutil.copytree(_pristine(request.param, str(root)), target)
    return target


def weights_path(directory: Path) -> Path:
    return directory / json.loads((directory / "config.json").read_text())["weights"]


def refused(path: Path, *fragments: str) -> str:
    with pytest.raises(CraspError) as info:
        load_export(path)
    message = info.value.format()
    for fragment in fragments:
        assert fragment in message, message
    assert "Traceback" not in message
    return message


def edit_config(directory: Path, edit: Callable[[dict], object]) -> None:
    path = directory / "config.json"
    config = json.loads(path.read_text())
    edit(config)
    path.write_text(json.dumps(config))


def edit_tensors(directory: Path, edit: Callable[[dict], object]) -> None:
    path = weights_path(directory)
    if path.suffix == ".safetensors":
        tensors = load_file(str(path))
        edit(tensors)
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))
    else:
        tensors = torch.load(path, weights_only=True)
        edit(tensors)
        torch.save(tensors, path)


def test_the_fixture_loads(export):
    assert_same_model(load_export(export), model("dyck1.cr", "heaviside"))


def test_missing_config(export, tmp_path):
    (export / "config.json").unlink()
    refused(export, "cannot read export config")
    refused(tmp_path / "nowhere", "cannot read export config")


@pytest.mark.parametrize("text", ["", "{", "not json", "\xff\xfe"])
def test_config_not_json(export, text):
    (export / "config.json").write_text(text, encoding="latin-1")
    refused(export, "cannot read export config")


@pytest.mark.parametrize("config", [[], "text", 3, None])
def test_config_not_an_object(export, config):
    (export / "config.json").write_text(json.dumps(config))
    refused(export, "not a crasp torch export")


def test_wrong_format_name(export):
    edit_config(export, lambda c: c.update(format="crasp-model"))
    refused(export, "not a crasp torch export", "format")
    edit_config(export, lambda c: c.pop("format"))
    refused(export, "not a crasp torch export")


@pytest.mark.parametrize("version", [2, 0, "1", None])
def test_wrong_version(export, version):
    edit_config(export, lambda c: c.update(version=version))
    refused(export, "unsupported export version", repr(version))


@pytest.mark.parametrize("name", ["model.bin", "../model.safetensors", "/etc/passwd", None, 3])
def test_unknown_weights_file_name(export, name):
    edit_config(export, lambda c: c.update(weights=name))
    refused(export, "unknown weights file", repr(name))


def test_missing_weights_file(export):
    weights_path(export).unlink()
    refused(export, "cannot read export weights")


def test_weights_file_of_the_other_format(export):
    """config.json names a file that exists but holds the other format."""
    path = weights_path(export)
    other = "model.pt" if path.suffix == ".safetensors" else "model.safetensors"
    path.rename(export / other)
    edit_config(export, lambda c: c.update(weights=other))
    refused(export, "cannot read export weights")


@pytest.mark.parametrize("keep", [0, 4, 8, 40, 0.5, 0.9, -1])
def test_truncated_weights(export, keep):
    path = weights_path(export)
    data = path.read_bytes()
    cut = int(len(data) * keep) if isinstance(keep, float) else keep % len(data)
    path.write_bytes(data[:cut])
    refused(export, "cannot read export weights")


@pytest.mark.parametrize("span", [(0, 8), (8, 40), (0, 64)], ids=["length", "json", "both"])
def test_corrupted_weights_header(export, span):
    """Garbage over the start of the file: the safetensors header (its length and JSON),
    or the zip entry header of ``model.pt``."""
    path = weights_path(export)
    data = bytearray(path.read_bytes())
    low, high = span
    data[low:high] = random.Random(f"{span}").randbytes(high - low)
    path.write_bytes(bytes(data))
    refused(export, "cannot read export weights")


def test_corrupted_zip_directory(tmp_path):
    """Garbage over the end of ``model.pt`` (the zip central directory)."""
    export_model(model("dyck1.cr", "heaviside"), tmp_path, "torch")
    path = tmp_path / "model.pt"
    data = bytearray(path.read_bytes())
    data[-64:] = random.Random(1).randbytes(64)
    path.write_bytes(bytes(data))
    refused(tmp_path, "cannot read export weights")


@pytest.mark.parametrize("seed", range(3))
def test_random_bytes_as_weights(export, seed):
    weights_path(export).write_bytes(random.Random(seed).randbytes(2000))
    refused(export, "cannot read export weights")


def test_unexpected_tensor_name(export):
    edit_tensors(export, lambda t: t.update({"blocks.0.attn.heads.0.w_x": torch.zeros(2)}))
    refused(export, "unexpected tensor", "blocks.0.attn.heads.0.w_x")


@pytest.mark.parametrize("key", ["blocks.0.attn.heads.9.w_q", "blocks.7.mlp.b1"])
def test_tensor_for_a_part_that_does_not_exist(export, key):
    edit_tensors(export, lambda t: t.update({key: torch.zeros(1, 14, dtype=torch.float64)}))
    refused(export, "invalid")


def test_missing_tensor(export):
    edit_tensors(export, lambda t: t.pop("blocks.0.mlp.w1"))
    refused(export, "invalid", "layer0.mlp.w1")


@pytest.mark.parametrize(
    "shape", [(2, 14), (0, 14), (14,), (1, 14, 1)], ids=["rows", "none", "1d", "3d"]
)
def test_wrong_readout_shape(export, shape):
    edit_tensors(export, lambda t: t.update({"readout.weight": torch.zeros(shape)}))
    refused(export, "readout.weight", "shape")


def test_readout_with_wrong_width(export):
    edit_tensors(export, lambda t: t.update({"readout.weight": torch.zeros(1, 7)}))
    refused(export, "invalid", "shape")


@pytest.mark.parametrize(
    "key",
    ["embed.w_e", "pos.w_p", "blocks.0.attn.heads.0.w_q", "blocks.0.mlp.w1", "blocks.1.mlp.b1"],
)
def test_weight_with_wrong_shape(export, key):
    def edit(tensors):
        shape = tensors[key].shape
        tensors[key] = torch.zeros(shape[0] + 1, *shape[1:], dtype=torch.float64)

    edit_tensors(export, edit)
    refused(export, "invalid model file", "shape")


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_weight(export, bad):
    def edit(tensors):
        tensors["blocks.0.mlp.w2"][0, 0] = bad

    edit_tensors(export, edit)
    refused(export, "invalid model file")


def test_header_field_invalid(export):
    edit_config(export, lambda c: c["model"].update(vocab=["a", "b"]))
    refused(export, "invalid model file")


@pytest.mark.parametrize("header", [None, [], "x"])
def test_header_missing_or_not_an_object(export, header):
    edit_config(export, lambda c: c.update(model=header))
    refused(export, "invalid")
    edit_config(export, lambda c: c.pop("model"))
    refused(export, "invalid")


def _marker_path() -> Path:
    return Path(__file__).with_name("_export_unpickled_marker")


class _RunsCode:
    def __reduce__(self):
        return (Path.touch, (_marker_path(),))


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(lambda: [torch.zeros(3)], id="list"),
        pytest.param(lambda: {"embed.w_e": 3}, id="int-value"),
        pytest.param(lambda: {1: torch.zeros(3)}, id="int-key"),
        pytest.param(lambda: torch.zeros(3), id="tensor"),
        pytest.param(lambda: {"embed.w_e": _RunsCode()}, id="code"),
        pytest.param(lambda: _RunsCode(), id="code-top"),
    ],
)
def test_pickle_other_than_a_dict_of_tensors(tmp_path, payload):
    export_model(model("dyck1.cr", "heaviside"), tmp_path, "torch")
    marker = _marker_path()
    marker.unlink(missing_ok=True)
    torch.save(payload(), tmp_path / "model.pt")
    if "Runs" in repr(payload()):
        torch.load(tmp_path / "model.pt", weights_only=False)  # runs code when unsafe
        assert marker.exists()
        marker.unlink()
    try:
        refused(tmp_path, "export")
        assert not marker.exists(), "loading ran pickled code"
    finally:
        marker.unlink(missing_ok=True)


def test_plain_pickle_is_refused(tmp_path):
    """A ``model.pt`` written by ``pickle`` (not torch's zip format) with code in it."""
    export_model(model("dyck1.cr", "heaviside"), tmp_path, "torch")
    marker = _marker_path()
    marker.unlink(missing_ok=True)
    payload = pickle.dumps(_RunsCode(), protocol=2)
    pickle.loads(payload)  # the payload does run code when unpickled unsafely
    assert marker.exists()
    marker.unlink()
    (tmp_path / "model.pt").write_bytes(payload)
    try:
        refused(tmp_path, "cannot read export weights")
        assert not marker.exists(), "loading ran pickled code"
    finally:
        marker.unlink(missing_ok=True)


def test_zip_that_is_not_a_torch_file(tmp_path):
    export_model(model("dyck1.cr", "heaviside"), tmp_path, "torch")
    with zipfile.ZipFile(tmp_path / "model.pt", "w") as archive:
        archive.writestr("hello.txt", "hi")
    refused(tmp_path, "cannot read export weights")


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_sparse_tensor_in_a_torch_export_is_refused(tmp_path, layout):
    export_model(model("dyck1.cr", "heaviside"), tmp_path, "torch")
    tensors = torch.load(tmp_path / "model.pt", weights_only=True)
    w1 = tensors["blocks.0.mlp.w1"]
    tensors["blocks.0.mlp.w1"] = w1.to_sparse() if layout == "coo" else w1.to_sparse_csr()
    torch.save(tensors, tmp_path / "model.pt")
    refused(tmp_path, "invalid export", "'blocks.0.mlp.w1'", "sparse")


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
def test_non_floating_tensor_is_refused(export, dtype):
    """Integer weights would be a silently different model (0.5 -> 0): refused by name."""
    edit_tensors(export, lambda t: t.update({"embed.w_e": t["embed.w_e"].to(dtype)}))
    refused(export, "invalid export", "'embed.w_e'", "not floating point")


def test_complex_tensor_is_refused(tmp_path):
    export_model(model("dyck1.cr", "heaviside"), tmp_path, "torch")
    edit_tensors(tmp_path, lambda t: t.update({"pos.w_p": t["pos.w_p"].to(torch.complex128)}))
    refused(tmp_path, "'pos.w_p'", "not floating point")


def test_safetensors_with_other_dtypes_load(tmp_path):
    """float32 weights are widened to float64 (the values survive exactly)."""
    compiled = model("dyck1.cr", "heaviside")
    export_model(compiled, tmp_path, "safetensors")
    edit_tensors(tmp_path, lambda t: t.update({k: v.float() for k, v in t.items()}))
    back = load_export(tmp_path)
    assert back.w_e.dtype == np.float64
    np.testing.assert_array_equal(back.w_e, compiled.w_e.astype(np.float32).astype(np.float64))
