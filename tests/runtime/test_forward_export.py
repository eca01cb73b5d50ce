"""The torch module traced: ``torch.export`` and ONNX graphs generic in the length, and
``torch.compile(fullgraph=True)``.

Each model is exported with a dynamic sequence length from an input of 9 tokens and the
exported program is run at 10 001 tokens (or the longest input the model's guarantee
covers, if shorter): Dyck-1 (uniform heads, prefix sums), c_near_a and tomita7_local
(offset lookups on the O(T) BOS-keyed path), a PCOC model (general heads, evaluated
in one chunk while traced) and tomita7_local in relu mode (softmax lookups on absolute
positions, fused attention; run at its max_len, 300). Outputs equal the eager module's (exactly for torch.export,
within 1e-12 for onnxruntime) and decide like the numpy executor.
"""

from __future__ import annotations

import functools
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from crasp_compiler import api, load_program  # noqa: E402
from crasp_compiler.languages.crasp.compile import compile_program  # noqa: E402
from crasp_compiler.model.model import HeadKind, Model, derive_kinds  # noqa: E402
from crasp_compiler.runtime.numpy_exec import run_tokens  # noqa: E402
from crasp_compiler.runtime.torch_module import TorchTransformer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test traces from an empty dynamo cache: torch.compile traces the module's
    forward again for every model (and gradient mode), and one process stops at 8 traces
    of one function (``recompile_limit``), which a worker running many tests would pass."""
    torch._dynamo.reset()


ROOT = Path(__file__).resolve().parents[2]
TRACED_LEN = 9
LONG = 10_001
CRASP = ["dyck1.cr", "c_near_a.cr", "tomita7_local.cr"]
PCOC = ("cumsum.pcoc", 16)
# relu mode: local relations as softmax lookups on absolute positions (fused attention),
# exact up to the max_len it is compiled for
RELU = ("tomita7_local.cr@relu", 300)


@functools.cache
def model_of(name: str) -> Model:
    if name.endswith(".pcoc"):
        return api.compile(api.load(ROOT / "examples" / "pcoc" / name), n=PCOC[1])
    if name == RELU[0]:
        path = ROOT / "examples" / "crasp" / name.removesuffix("@relu")
        return compile_program(load_program(path), mode="relu", max_len=RELU[1])
    return compile_program(load_program(ROOT / "examples" / "crasp" / name))


def longest(model: Model) -> int:
    limit = model.guarantee.limit("float64")
    return LONG if limit is None else min(LONG, limit)


def inputs(module: TorchTransformer, model: Model, length: int, seed: int):
    """A batch of two inputs, ``length`` tokens and fewer (padding), with numeric values
    for a model that reads them: ``(ids, lengths[, values])``."""
    rng = random.Random(seed)
    symbols = model.vocab[1:]
    words = [[rng.choice(symbols) for _ in range(n)] for n in (length, length // 2 + 1)]
    ids, lengths = module.encode(words)
    if not model.inputs:
        return (ids, lengths)
    generator = np.random.default_rng(seed)
    arrays = [generator.integers(-9, 10, size=(len(w), len(model.inputs))) for w in words]
    return (ids, lengths, module.encode_values([a.astype(float) for a in arrays], lengths))


def dynamic_shapes(args) -> dict:
    length = torch.export.Dim("length", min=2, max=1 << 20)
    shapes = {"ids": {1: length}, "lengths": None}
    if len(args) == 3:
        shapes["values"] = {1: length}
    return shapes


def numpy_values(model: Model, args) -> dict[str, np.ndarray]:
    ids, lengths = args[0].numpy(), args[1].numpy()
    words = [[model.vocab[i] for i in row[1 : n + 1]] for row, n in zip(ids, lengths, strict=True)]
    values = None
    if len(args) == 3:
        values = [args[2][b, 1 : n + 1].numpy() for b, n in enumerate(lengths)]
    return run_tokens(model, words, values=values).values


def assert_decides_like_numpy(
    module: TorchTransformer, model: Model, raw: torch.Tensor, args
) -> None:
    decided = module.decide(raw, args[1])
    want = numpy_values(model, args)
    real = np.arange(raw.shape[1])[None, :] <= args[1].numpy()[:, None]
    for name, values in decided.items():
        np.testing.assert_array_equal(
            np.where(real, values.numpy(), 0), np.where(real, want[name], 0), err_msg=name
        )


def eager(module: TorchTransformer, args) -> torch.Tensor:
    with torch.no_grad():
        return module(*args)


def test_models_cover_the_paths():
    kinds = {name: {k for row in derive_kinds(model_of(name)) for k in row} for name in CRASP}
    assert kinds["dyck1.cr"] == {HeadKind.UNIFORM}
    assert HeadKind.BOS_KEYED in kinds["c_near_a.cr"] & kinds["tomita7_local.cr"]
    assert HeadKind.GENERAL in {k for row in derive_kinds(model_of(PCOC[0])) for k in row}
    relu = model_of(RELU[0])
    assert not any(h.bias for layer in relu.layers for h in layer.heads)
    assert HeadKind.GENERAL in {k for row in derive_kinds(relu) for k in row}


@pytest.mark.parametrize("name", [*CRASP, PCOC[0], RELU[0]])
def test_torch_export_is_length_generic(name):
    model = model_of(name)
    module = TorchTransformer(model).eval()
    traced = inputs(module, model, TRACED_LEN, seed=1)
    with torch.no_grad():
        program = torch.export.export(module, traced, dynamic_shapes=dynamic_shapes(traced))
    args = inputs(module, model, longest(model), seed=2)
    with torch.no_grad():
        got = program.module()(*args)
    assert got.shape[1] == longest(model) + 1
    assert torch.equal(got, eager(module, args))
    assert_decides_like_numpy(module, model, got, args)


@pytest.mark.slow
@pytest.mark.parametrize("name", [*CRASP, PCOC[0], RELU[0]])
def test_onnx_export_is_length_generic(name, tmp_path):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    ort = pytest.importorskip("onnxruntime")
    model = model_of(name)
    module = TorchTransformer(model).eval()
    traced = inputs(module, model, TRACED_LEN, seed=1)
    names = ["ids", "lengths", "values"][: len(traced)]
    with torch.no_grad():
        program = torch.onnx.export(
            module,
            traced,
            dynamo=True,
            dynamic_shapes=dynamic_shapes(traced),
            input_names=names,
            output_names=["raw"],
            verbose=False,
        )
    save_onnx(program, tmp_path / "model.onnx")
    session = onnx_session(ort, str(tmp_path / "model.onnx"))
    args = inputs(module, model, longest(model), seed=2)
    (got,) = session.run(None, {n: a.numpy() for n, a in zip(names, args, strict=True)})
    want = eager(module, args).numpy()
    real = np.arange(want.shape[1])[None, :, None] <= args[1].numpy()[:, None, None]
    assert got.shape == want.shape
    np.testing.assert_allclose(np.where(real, got, 0), np.where(real, want, 0), rtol=0, atol=1e-12)
    assert_decides_like_numpy(module, model, torch.from_numpy(got), args)


def save_onnx(program, path) -> None:
    """``onnx.save`` of the program's proto, not ``program.save``: nnsight (imported by
    other tests in the same process) gives every object a ``save`` attribute, which hides
    the ``save`` that onnx_ir loads lazily, and ``program.save`` then fails."""
    import onnx

    onnx.save(program.model_proto, path)


def onnx_session(ort, path: str):
    """An onnxruntime CPU session. ``MatMulScaleFusion`` is off: onnxruntime 1.30 folds a
    constant factor into the ``alpha`` attribute of a fused MatMul, which is a float32
    attribute, so a head's scale such as 1.3412 loses its float64 digits there (seen as a
    1e-7 error; 1.32 keeps them). The exported graph itself holds the float64 value."""
    return ort.InferenceSession(
        path, providers=["CPUExecutionProvider"], disabled_optimizers=["MatMulScaleFusion"]
    )


def compiler_available() -> bool:
    return any(shutil.which(cc) for cc in ("cc", "gcc", "clang"))


@pytest.mark.slow
@pytest.mark.skipif(not compiler_available(), reason="inductor needs a C compiler on the CPU")
def test_torch_compile_fullgraph_dyck1():
    """The default backend (inductor) compiles the whole Dyck-1 module as one graph
    (fullgraph=True: a graph break would raise), for every length."""
    model = model_of("dyck1.cr")
    module = TorchTransformer(model).eval()
    compiled = torch.compile(module, fullgraph=True, dynamic=True)
    for length in (TRACED_LEN, 200, 3000):
        args = inputs(module, model, length, seed=length)
        with torch.no_grad():
            got = compiled(*args)
        real = (torch.arange(got.shape[1])[None, :] <= args[1][:, None])[..., None]
        want = eager(module, args)
        torch.testing.assert_close(torch.where(real, got, 0), torch.where(real, want, 0))
        assert_decides_like_numpy(module, model, got, args)


@pytest.mark.slow
@pytest.mark.parametrize("name", [*CRASP, PCOC[0]])
def test_torch_compile_fullgraph_traces_every_path(name):
    """``aot_eager`` traces the forward and backward graphs without compiling C: no graph
    break on any path (fullgraph=True would raise)."""
    model = model_of(name)
    module = TorchTransformer(model).eval()
    compiled = torch.compile(module, fullgraph=True, backend="aot_eager", dynamic=True)
    args = inputs(module, model, min(longest(model), 300), seed=3)
    with torch.no_grad():
        got = compiled(*args)
    assert torch.equal(got, eager(module, args))


def test_compiled_module_follows_refreshed_kinds():
    """After a weight edit and ``refresh_kinds()``, the compiled module retraces (the
    kinds are guarded attributes) and computes with the new kinds."""
    model = model_of("c_near_a.cr")
    module = TorchTransformer(model).eval()
    compiled = torch.compile(module, fullgraph=True, backend="aot_eager")
    args = inputs(module, model, 40, seed=4)
    with torch.no_grad():
        compiled(*args)
        module.embed.w_e[1, module.residual.index("BOS")] = 3.0
    module.refresh_kinds()
    assert HeadKind.BOS_KEYED not in {h.kind for row in module.head_rows() for h in row}
    with torch.no_grad():
        got = compiled(*args)
    assert torch.equal(got, eager(module, args))
    assert_decides_like_numpy(module, module.to_model(), got, args)


MATMULS = {"matmul", "mm", "bmm", "linear", "scaled_dot_product_attention"}


def traced_graphs(module, args_by_length, grad: bool = False):
    """The FX graphs ``torch.compile(dynamic=True)`` traces for ``module`` over the inputs
    given (a backend that keeps them and runs them as traced), and its outputs."""
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(module, fullgraph=True, backend=keep, dynamic=True)
    with torch.set_grad_enabled(grad):
        outs = [compiled(*args) for args in args_by_length]
    return graphs, outs


def called(graph) -> set[str]:
    """The names of the functions and methods a traced graph calls."""
    return {
        getattr(node.target, "__name__", str(node.target))
        for node in graph.graph.nodes
        if node.op in ("call_function", "call_method")
    }


def test_torch_compile_traces_the_plan_once_for_every_length():
    """Without gradients, torch.compile traces the lowered plan (column operations and
    running sums, no matrix product) as one graph for every length, whose outputs equal
    the eager module's bit for bit; with gradients it traces the layers."""
    model = model_of("dyck1.cr")
    module = TorchTransformer(model).eval()
    runs = [inputs(module, model, length, seed=length) for length in (5, 40, 300)]
    graphs, outs = traced_graphs(module, runs)
    assert len(graphs) == 1
    assert "cumsum" in called(graphs[0]) and not called(graphs[0]) & MATMULS
    for args, got in zip(runs, outs, strict=True):
        assert torch.equal(got, eager(module, args))
    graphs, _ = traced_graphs(module, runs[:1], grad=True)
    assert called(graphs[0]) & MATMULS


def test_compiled_plan_follows_refreshed_weights():
    """The traced plan holds the weights as constants: after an edit and
    ``refresh_kinds()`` the compiled module retraces and computes with the new weights."""
    model = model_of("dyck1.cr")
    module = TorchTransformer(model).eval()
    compiled = torch.compile(module, fullgraph=True, backend="aot_eager", dynamic=True)
    args = inputs(module, model, 40, seed=5)
    with torch.no_grad():
        before = compiled(*args)
        module.readout.weight.mul_(2.0)
    module.refresh_kinds()
    with torch.no_grad():
        got = compiled(*args)
    assert torch.equal(got, eager(module, args))
    assert torch.equal(got, 2.0 * before)


def test_torch_export_keeps_the_weights_as_parameters():
    """An export traces the layers, not the plan: its weights stay parameters of the
    exported program."""
    model = model_of("dyck1.cr")
    module = TorchTransformer(model).eval()
    traced = inputs(module, model, TRACED_LEN, seed=1)
    with torch.no_grad():
        program = torch.export.export(module, traced, dynamic_shapes=dynamic_shapes(traced))
    assert "readout.weight" in program.graph_signature.parameters
    assert called(program.graph_module) & {"mm.default", "matmul.default", "linear.default"}


@pytest.mark.slow
def test_onnx_positional_features_are_length_generic(tmp_path):
    """Every kind of positional feature, ``ao`` hashes at negative positions included, is
    computed inside the ONNX graph at any length: a model whose outputs are its features."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    ort = pytest.importorskip("onnxruntime")
    from crasp_compiler.model.features import almost_orthogonal, feature_matrix
    from crasp_compiler.model.model import BOS, Guarantee, Output

    names = ["index", "index^2", "inverse", "alternating", "onehot:0", "onehot:7"]
    names += ["periodic:3:2", "periodic:5:0", almost_orthogonal(3, 16, 5)]
    names += [almost_orthogonal(2**63 - 1, 8, 7, -600), almost_orthogonal(11, 4, 1, 2**31 - 1)]
    d = len(names)
    model = Model(
        vocab=[BOS, "a"],
        w_e=np.zeros((2, d)),
        features=names,
        w_p=np.eye(d),
        layers=[],
        outputs=[Output(f"f{k}", np.eye(d)[k], "value") for k in range(d)],
        residual=[f"r{k}" for k in range(d)],
        guarantee=Guarantee(None, "features only"),
    )
    module = TorchTransformer(model).eval()
    traced = inputs(module, model, TRACED_LEN, seed=1)
    with torch.no_grad():
        program = torch.onnx.export(
            module, traced, dynamo=True, dynamic_shapes=dynamic_shapes(traced), verbose=False
        )
    save_onnx(program, tmp_path / "features.onnx")
    session = onnx_session(ort, str(tmp_path / "features.onnx"))
    ids, lengths = inputs(module, model, 1000, seed=2)
    input_names = [i.name for i in session.get_inputs()]
    feeds = dict(zip(input_names, [ids.numpy(), lengths.numpy()], strict=True))
    (got,) = session.run(None, feeds)
    np.testing.assert_array_equal(got[0], feature_matrix(names, 1001))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_onnx_export_of_random_models(seed, tmp_path):
    """Random models of the whole family (every weighting, mask, activation, bias, layer
    norm and path, constants that float32 cannot hold) export to ONNX faithfully."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    ort = pytest.importorskip("onnxruntime")
    from tests.support.reference_model import random_model

    model = random_model(np.random.default_rng(8300 + seed), layers=(2, 3), heads=(2, 3))
    module = TorchTransformer(model).eval()
    traced = inputs(module, model, TRACED_LEN, seed=1)
    with torch.no_grad():
        program = torch.onnx.export(
            module, traced, dynamo=True, dynamic_shapes=dynamic_shapes(traced), verbose=False
        )
    save_onnx(program, tmp_path / "random.onnx")
    session = onnx_session(ort, str(tmp_path / "random.onnx"))
    args = inputs(module, model, 70, seed=2)
    names = [i.name for i in session.get_inputs()]
    (got,) = session.run(None, dict(zip(names, [a.numpy() for a in args], strict=True)))
    want = eager(module, args).numpy()
    real = np.arange(want.shape[1])[None, :, None] <= args[1].numpy()[:, None, None]
    np.testing.assert_allclose(
        np.where(real, got, 0), np.where(real, want, 0), rtol=1e-9, atol=1e-9
    )
