"""Sparse weight matrices: a model assembled with CSR matrices computes exactly what the
dense one does (numpy executor and torch module), round-trips through the model file,
and malformed CSR members are refused with a clear error.

Every test forces sparse assembly by lowering ``DENSE_LIMIT`` (normally only matrices
above 65,536 entries are sparse: Beneš routing, large C-RASP programs).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest
from scipy import sparse

from crasp_compiler import Builder, CraspError, load_program
from crasp_compiler.cookbook import attention
from crasp_compiler.languages.crasp.compile import compile_program
from crasp_compiler.languages.pcoc.compile import compile_program as compile_pcoc
from crasp_compiler.languages.pcoc.compile import run_pcoc
from crasp_compiler.languages.pcoc.program import load_program as load_pcoc
from crasp_compiler.model import model as model_module
from crasp_compiler.model import read_model, save_model
from crasp_compiler.model.model import Model, dense
from crasp_compiler.runtime.numpy_exec import run_tokens
from tests.support.strategies import all_inputs

ROOT = Path(__file__).resolve().parents[2]
CRASP = ["dyck1.cr", "majority.crasp", "tomita4.crasp", "aa_star.crasp", "induction_head.crasp"]


@pytest.fixture
def sparse_everywhere(monkeypatch):
    monkeypatch.setattr(model_module, "DENSE_LIMIT", 0)


def matrices(model: Model) -> list[tuple[str, object]]:
    out = [("w_p", model.w_p)]
    for number, layer in enumerate(model.layers):
        for h, head in enumerate(layer.heads):
            out += [(f"{number}.{h}.{k}", getattr(head, k)) for k in ("w_q", "w_k", "w_v", "w_o")]
        if layer.mlp is not None:
            out += [(f"{number}.mlp.w1", layer.mlp.w1), (f"{number}.mlp.w2", layer.mlp.w2)]
    return out


def assert_same_weights(a: Model, b: Model) -> None:
    pairs = zip(matrices(a), matrices(b), strict=True)
    for (name, wa), (_, wb) in pairs:
        assert wa.shape == wb.shape, name
        np.testing.assert_array_equal(dense(wa), dense(wb), err_msg=name)


@pytest.mark.parametrize("mode", ["heaviside", "relu", "layernorm"])
@pytest.mark.parametrize("name", CRASP)
def test_sparse_crasp_model_equals_dense(monkeypatch, name, mode):
    program = load_program(ROOT / "examples" / "crasp" / name)
    max_len = 16 if mode == "relu" else None
    want = compile_program(program, mode=mode, max_len=max_len)
    monkeypatch.setattr(model_module, "DENSE_LIMIT", 0)
    got = compile_program(program, mode=mode, max_len=max_len)
    assert got.is_sparse() and not want.is_sparse()
    assert all(sparse.issparse(w) for _, w in matrices(got) if w.size)
    assert_same_weights(got, want)
    assert got.parameter_count() == want.parameter_count()
    assert got.nonzero_count() == want.nonzero_count() < want.parameter_count()
    words = all_inputs(program, 5)
    ra, rb = run_tokens(got, words), run_tokens(want, words)
    for out in want.outputs:  # sums in another order: the raw outputs agree to rounding
        np.testing.assert_array_equal(ra.values[out.name], rb.values[out.name])
        np.testing.assert_allclose(ra.outputs[out.name], rb.outputs[out.name], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["cumsum.pcoc", "sort.pcoc", "running_argmax.pcoc"])
def test_sparse_pcoc_model_equals_dense(monkeypatch, name):
    program = load_pcoc(ROOT / "examples" / "pcoc" / name)
    want = compile_pcoc(program, 8)
    monkeypatch.setattr(model_module, "DENSE_LIMIT", 0)
    got = compile_pcoc(program, 8)
    assert got.is_sparse()
    assert_same_weights(got, want)
    rng = np.random.default_rng(7)
    slots = got.inputs
    batch = [{s: rng.uniform(-1e3, 1e3, 8) for s in slots} for _ in range(5)]
    a, b = run_pcoc(got, batch), run_pcoc(want, batch)
    for key in a:
        # big-M selections (bound 1e9) round at ~1e-7, in another order when sparse
        np.testing.assert_allclose(a[key], b[key], rtol=0, atol=1e-6)


def test_sparse_model_file_round_trip(tmp_path, sparse_everywhere):
    program = load_program(ROOT / "examples" / "crasp" / "aa_star.crasp")  # has a feature
    model = compile_program(program)
    path = tmp_path / "m.npz"
    save_model(model, path)
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
    assert {"w_p.data.npy", "w_p.indices.npy", "w_p.indptr.npy"} <= names
    assert "layer0.mlp.w1.indptr.npy" in names and "layer0.mlp.w1.npy" not in names
    again = read_model(path)
    assert again.is_sparse()
    assert_same_weights(model, again)
    words = all_inputs(program, 6)
    for out in model.outputs:
        want, got = (
            run_tokens(model, words).values[out.name],
            run_tokens(again, words).values[out.name],
        )
        np.testing.assert_array_equal(got, want)


def _rewrite(path: Path, edit) -> Path:
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    edit(arrays)
    out = path.with_name("bad.npz")
    np.savez(out, **arrays)
    return out


def _set(name, value):
    def edit(arrays):
        arrays[name] = value(arrays[name])

    return edit


def _drop(name):
    def edit(arrays):
        del arrays[name]

    return edit


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (_set("layer0.mlp.w1.indptr", lambda a: a[:-1]), "is malformed"),
        (_set("layer0.mlp.w1.indptr", lambda a: a[::-1].copy()), "is malformed"),
        (_set("layer0.mlp.w1.indices", lambda a: a + 10_000), "column index outside"),
        (_set("layer0.mlp.w1.indices", lambda a: a.astype(np.float64)), "non-integer indices"),
        (_set("layer0.mlp.w1.data", lambda a: np.full_like(a, np.inf)), "non-finite"),
        (_set("layer0.mlp.w1.data", lambda a: a[:-1]), "is malformed"),
        (_drop("layer0.mlp.w1.indices"), "missing array 'layer0.mlp.w1.indices'"),
        (_drop("w_p.indptr"), "missing array 'w_p.indptr'"),
    ],
)
def test_malformed_sparse_members_are_refused(tmp_path, sparse_everywhere, edit, fragment):
    model = compile_program(load_program(ROOT / "examples" / "crasp" / "aa_star.crasp"))
    save_model(model, tmp_path / "m.npz")
    bad = _rewrite(tmp_path / "m.npz", edit)
    with pytest.raises(CraspError, match="invalid model file") as err:
        read_model(bad)
    assert fragment in str(err.value)


def test_dense_and_sparse_members_for_one_matrix_are_refused(tmp_path, sparse_everywhere):
    model = compile_program(load_program(ROOT / "examples" / "crasp" / "dyck1.cr"))
    save_model(model, tmp_path / "m.npz")

    def both(arrays):
        arrays["layer0.mlp.w1"] = dense(model.layers[0].mlp.w1)

    with pytest.raises(CraspError, match="unexpected array"):
        read_model(_rewrite(tmp_path / "m.npz", both))


def test_torch_module_runs_sparse_models(one_torch_thread, sparse_everywhere):
    from crasp_compiler.runtime.torch_module import TorchTransformer

    program = load_program(ROOT / "examples" / "crasp" / "dyck1.cr")
    model = compile_program(program)
    words = all_inputs(program, 5)
    module = TorchTransformer(model)
    got = module.run(words)["D"].numpy()
    np.testing.assert_array_equal(got, run_tokens(model, words).values["D"])


def test_dense_only_consumers_refuse_huge_models(monkeypatch, tmp_path, one_torch_thread):
    from crasp_compiler.export.lens import lens_state_dict
    from crasp_compiler.export.torch_files import export_model
    from crasp_compiler.runtime.torch_module import TorchTransformer

    model = compile_program(load_program(ROOT / "examples" / "crasp" / "dyck1.cr"))
    monkeypatch.setattr(model_module, "TORCH_DENSE_LIMIT", model.parameter_count() - 1)
    for attempt in (
        lambda: TorchTransformer(model),
        lambda: export_model(model, tmp_path / "out"),
        lambda: lens_state_dict(model, n_ctx=8),
    ):
        with pytest.raises(CraspError, match="numpy executor"):
            attempt()


def test_builder_includes_a_sparse_model(sparse_everywhere):
    program = load_program(ROOT / "examples" / "crasp" / "dyck1.cr")
    inner = compile_program(program)
    b = Builder(["(", ")"])
    outputs = b.include(inner, "dyck")
    form, rule = outputs["D"]
    share = b.add(attention.average(b.token("("), "share"))
    model = b.build({"D": (form, rule), "share": share})
    words = all_inputs(program, 5)
    np.testing.assert_array_equal(
        run_tokens(model, words).values["D"], run_tokens(inner, words).values["D"]
    )


def test_cli_reports_nonzero_weights_of_sparse_models(tmp_path, sparse_everywhere):
    from click.testing import CliRunner

    from crasp_compiler.cli import main

    path = tmp_path / "cumsum.npz"
    runner = CliRunner()
    made = runner.invoke(
        main, ["compile", str(ROOT / "examples" / "pcoc" / "cumsum.pcoc"), "--n", "4", "-o", path]
    )
    assert made.exit_code == 0, made.output
    model = read_model(path)
    assert f"({model.nonzero_count()} nonzero, sparse)" in made.output
    info = runner.invoke(main, ["info", str(path)])
    assert f"nonzero:     {model.nonzero_count()}" in info.output
    ran = runner.invoke(main, ["run", str(path)], input="1 2 3 4\n")
    assert ran.output.split() == ["1", "3", "6", "10"]
