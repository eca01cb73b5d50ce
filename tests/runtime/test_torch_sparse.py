"""Weight matrices kept sparse in the torch module (:class:`SparseWeight`).

A matrix the model stores sparse and larger than ``DENSE_LIMIT`` stays sparse in
:class:`~crasp_compiler.runtime.torch_module.TorchTransformer` (its stored entries as
buffers), and its products sum in scipy's order, so the outputs are the numpy executor's
bit for bit: compiled PCOC routing (``examples/pcoc_sends/permute.pcoc``) at n = 128 and,
marked slow, at n = 1,024 (1.9·10⁸ entries dense, under 10⁵ nonzero); every C-RASP example
keeps dense parameters; hooks, ``to_model``, ``state_dict``, dtypes and gradients through
the activations work on sparse models; the dense-only exports keep refusing large models.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from scipy import sparse  # noqa: E402

from crasp_compiler import load_program  # noqa: E402
from crasp_compiler.errors import CraspError  # noqa: E402
from crasp_compiler.languages.crasp.compile import compile_program  # noqa: E402
from crasp_compiler.languages.pcoc import interpret_batch as interpret_pcoc_batch  # noqa: E402
from crasp_compiler.languages.pcoc import load_program as load_pcoc  # noqa: E402
from crasp_compiler.languages.pcoc.compile import compile_program as compile_pcoc  # noqa: E402
from crasp_compiler.languages.pcoc.compile import run_pcoc  # noqa: E402
from crasp_compiler.model import model as model_module  # noqa: E402
from crasp_compiler.model.model import Model, is_sparse, kept_sparse  # noqa: E402
from crasp_compiler.runtime import numpy_exec  # noqa: E402
from crasp_compiler.runtime import torch_module as tm  # noqa: E402
from crasp_compiler.runtime.torch_module import SparseWeight, TorchTransformer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROOT = Path(__file__).resolve().parents[2]
PERMUTE = ROOT / "examples" / "pcoc_sends" / "permute.pcoc"
DYCK = ROOT / "examples" / "crasp" / "dyck1.cr"
WORDS = [list("(()())"), [], list(")("), list("((()"), list("()" * 5)]


def permutations(rng: np.random.Generator, n: int, batch: int) -> np.ndarray:
    """(batch, 2, n): integer values and destinations (the last row a partial
    permutation, some destinations out of range)."""
    xs = rng.integers(-(10**6), 10**6, (batch, n)).astype(float)
    ds = np.array([rng.permutation(n) for _ in range(batch)], dtype=float)
    drop = rng.random(n) < 0.3
    ds[-1, drop] = rng.choice([-1.0, float(n), n + 999.0], int(drop.sum()))
    return np.stack([xs, ds], axis=1)


def permuted(inputs: np.ndarray) -> np.ndarray:
    """out[d_i] = x_i, 0 elsewhere."""
    batch, _, n = inputs.shape
    out = np.zeros((batch, n))
    for b in range(batch):
        for x, d in zip(inputs[b, 0], inputs[b, 1], strict=True):
            if 0 <= d < n:
                out[b, int(d)] = x
    return out


@pytest.fixture(scope="module")
def permute128() -> Model:
    """n = 128: the smallest power of two whose routing has matrices above
    ``DENSE_LIMIT`` entries (the residual is 4n + 4 wide)."""
    return compile_pcoc(load_pcoc(PERMUTE), 128)


@pytest.fixture(scope="module")
def dyck_sparse() -> Model:
    """Dyck-1 with every weight matrix stored sparse (``DENSE_LIMIT`` = 0)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(model_module, "DENSE_LIMIT", 0)
        return compile_program(load_program(DYCK))


def sparse_module(model: Model) -> TorchTransformer:
    """The torch module of a model compiled with ``DENSE_LIMIT`` = 0 (kept sparse)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(model_module, "DENSE_LIMIT", 0)
        return TorchTransformer(model)


def raw(module: TorchTransformer, words: list[list[str]]) -> np.ndarray:
    ids, lengths = module.encode(words)
    with torch.no_grad():
        out: np.ndarray = module(ids, lengths).double().numpy()
    return out


def numpy_raw(model: Model, words: list[list[str]], dtype: type = np.float64) -> np.ndarray:
    result = numpy_exec.run_tokens(model, words, dtype=dtype)
    return np.stack([result.outputs[o.name] for o in model.outputs], axis=-1)


# ---------------------------------------------------------------- PCOC routing


def test_permute_keeps_large_matrices_sparse_and_matches_numpy(permute128):
    module = TorchTransformer(permute128)
    kept = module.sparse_weights()
    assert kept and len(kept) == sum(kept_sparse(w) for w in permute128.weights())
    parameters = {id(p) for p in module.parameters()}
    assert all(id(w.values) not in parameters for w in kept)
    rng = np.random.default_rng(128)
    inputs = permutations(rng, 128, 4)
    batch = [list(row) for row in inputs]
    want = run_pcoc(permute128, batch)
    got = run_pcoc(permute128, batch, runtime="torch")
    assert np.array_equal(got["x"], want["x"])
    assert np.array_equal(got["x"], permuted(inputs))


def test_permute_to_model_gives_back_the_sparse_matrices(permute128):
    back = TorchTransformer(permute128).to_model()
    for before, after in zip(permute128.weights(), back.weights(), strict=True):
        assert is_sparse(after) == kept_sparse(before)
        if is_sparse(after):
            csr = sparse.csr_array(before)
            assert np.array_equal(after.indptr, csr.indptr)
            assert np.array_equal(after.indices, csr.indices)
            assert np.array_equal(after.data, csr.data)
        else:
            assert np.array_equal(np.asarray(after), model_module.dense(before))
    assert back.is_sparse()


def test_dense_only_exports_still_refuse_what_the_module_runs(permute128, monkeypatch, tmp_path):
    from crasp_compiler.export.lens import lens_state_dict
    from crasp_compiler.export.torch_files import export_model

    held = sum(int(np.prod(w.shape)) for w in permute128.weights() if not kept_sparse(w))
    assert held < permute128.parameter_count()
    monkeypatch.setattr(model_module, "TORCH_DENSE_LIMIT", held)
    TorchTransformer(permute128)  # what it holds dense is within the limit
    for attempt in (
        lambda: export_model(permute128, tmp_path / "out"),
        lambda: lens_state_dict(permute128, n_ctx=129),
    ):
        with pytest.raises(CraspError, match="numpy executor"):
            attempt()
    monkeypatch.setattr(model_module, "TORCH_DENSE_LIMIT", held - 1)
    with pytest.raises(CraspError, match=r"but for its large sparse matrices.*numpy executor"):
        TorchTransformer(permute128)


# ---------------------------------------------------------------- a model sparse everywhere


def test_sparse_everywhere_matches_numpy_with_hooks(dyck_sparse):
    module = sparse_module(dyck_sparse)
    assert len(module.sparse_weights()) == sum(is_sparse(w) for w in dyck_sparse.weights())
    want = numpy_raw(dyck_sparse, WORDS)
    assert np.array_equal(raw(module, WORDS), want)
    ids, lengths = module.encode(WORDS)
    out, cache = module.run_with_cache(ids, lengths)
    assert np.array_equal(out.detach().numpy(), want)
    dense = TorchTransformer(dyck_sparse)  # the same matrices held dense
    assert not dense.sparse_weights()
    _, dense_cache = dense.run_with_cache(ids, lengths)
    names = set(cache.keys())
    assert names == set(dense_cache.keys())
    for name in names:
        torch.testing.assert_close(cache[name], dense_cache[name], rtol=0, atol=1e-12)
    doubled = module.run_with_hooks(
        ids, lengths, fwd_hooks=[("hook_resid_final", lambda value, hook: 2 * value)]
    )
    assert np.array_equal(doubled.detach().numpy(), 2 * out.detach().numpy())


def test_sparse_everywhere_in_float32(dyck_sparse):
    module = sparse_module(dyck_sparse).float()
    for weight in module.sparse_weights():
        assert weight.values.dtype == torch.float32 and weight.rows.dtype == torch.int64
    got = raw(module, WORDS)
    np.testing.assert_allclose(got, numpy_raw(dyck_sparse, WORDS, np.float32), rtol=0, atol=1e-5)


def test_state_dict_round_trip_and_in_place_updates(dyck_sparse):
    source = sparse_module(dyck_sparse)
    target = sparse_module(dyck_sparse)
    state = source.state_dict()
    assert any(name.endswith(".values") for name in state)
    weight = target.sparse_weights()[0]
    with torch.no_grad():
        weight.values.mul_(3.0)  # an in-place update: the version counters see it
    assert target._parameter_versions() != target._versions
    target.load_state_dict(state)
    assert np.array_equal(raw(target, WORDS), raw(source, WORDS))
    back = target.to_model()
    assert np.array_equal(numpy_raw(back, WORDS), numpy_raw(dyck_sparse, WORDS))


def test_gradients_flow_through_sparse_weights_to_the_activations(dyck_sparse):
    """The kept-sparse entries get no gradient (buffers); the dense parameters get the
    gradients the all-dense module gives them."""
    grads = []
    for module in (sparse_module(dyck_sparse), TorchTransformer(dyck_sparse)):
        ids, lengths = module.encode(WORDS)
        module(ids, lengths).square().sum().backward()
        grads.append({n: p.grad for n, p in module.named_parameters() if p.grad is not None})
    kept, dense = grads
    assert kept and set(kept) <= set(dense)
    for name, grad in kept.items():
        torch.testing.assert_close(grad, dense[name], rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------- the pieces


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_sparse_product_sums_in_scipys_order(dtype, monkeypatch):
    rng = np.random.default_rng(7)
    w = sparse.random_array((300, 500), density=0.05, rng=rng, format="csr")
    w.data = rng.uniform(-3, 3, w.nnz)
    x = rng.uniform(-1e3, 1e3, (2, 37, 500))
    as_np = np.float64 if dtype == torch.float64 else np.float32
    want = numpy_exec.NUMPY.matmul_t(x.astype(as_np), w.astype(as_np))
    weight = SparseWeight.of(w).to(dtype)
    for budget in (tm.SPARSE_BUDGET, w.nnz * 5):  # whole, and in chunks of 5 columns
        monkeypatch.setattr(tm, "SPARSE_BUDGET", budget)
        got = tm.TORCH.matmul_t(torch.tensor(x, dtype=dtype), weight)
        assert np.array_equal(got.numpy(), want)


@pytest.mark.parametrize("axis", [0, 1])
def test_stacked_weights_in_numpys_order(axis):
    rng = np.random.default_rng(axis)
    shape = (40, 30)
    blocks = [
        sparse.random_array(shape, density=0.1, rng=rng, format="csr"),
        rng.integers(-1, 2, shape).astype(float),
        sparse.random_array(shape, density=0.2, rng=rng, format="csr"),
    ]
    want = sparse.csr_array(numpy_exec._stack(blocks, axis))
    weights = [SparseWeight.of(b) if is_sparse(b) else torch.tensor(b) for b in blocks]
    got = tm._stack(weights, axis)
    assert isinstance(got, SparseWeight)
    back = sparse.csr_array(got.to_scipy())
    assert np.array_equal(back.indptr, want.indptr)
    assert np.array_equal(back.indices, want.indices)
    assert np.array_equal(back.data, want.data)
    dense = [torch.tensor(model_module.dense(b)) for b in blocks]
    assert isinstance(tm._stack(dense, axis), torch.Tensor)


@pytest.mark.parametrize(
    "name", ["dyck1.cr", "c_near_a.cr", "copy8.cr", "abab_star.cr", "dyck_d3.cr"]
)
def test_crasp_examples_keep_dense_parameters(name):
    module = TorchTransformer(compile_program(load_program(ROOT / "examples" / "crasp" / name)))
    assert not module.sparse_weights()
    for block in module.layers():
        for head in block.attn.head_list():
            for w in (head.w_q, head.w_k, head.w_v, head.w_o):
                assert isinstance(w, torch.nn.Parameter) and w.requires_grad
        if block.mlp is not None:
            assert isinstance(block.mlp.w1, torch.nn.Parameter)
            assert isinstance(block.mlp.w2, torch.nn.Parameter)


# ---------------------------------------------------------------- n = 1,024


@pytest.fixture(scope="module")
def permute1024() -> Model:
    return compile_pcoc(load_pcoc(PERMUTE), 1024)


@pytest.mark.slow
def test_permute_at_n1024_in_torch(permute1024):
    """n = 1,024: 1.9·10⁸ entries dense; the torch module keeps them sparse and routes two
    random permutations exactly as the numpy executor does."""
    module = TorchTransformer(permute1024)
    assert permute1024.parameter_count() > model_module.TORCH_DENSE_LIMIT
    rng = np.random.default_rng(1024)
    inputs = permutations(rng, 1024, 2)
    batch = [list(row) for row in inputs]
    want = run_pcoc(permute1024, batch)["x"]
    start = time.perf_counter()
    got = run_pcoc(permute1024, batch, runtime="torch")["x"]
    assert time.perf_counter() - start < 60  # about 20 s here (10⁶ attention scores a head)
    assert np.array_equal(got, want)
    assert np.array_equal(got, permuted(inputs))
    program = load_pcoc(PERMUTE)
    assert np.array_equal(got, interpret_pcoc_batch(program, 1024, inputs).outputs["x"])
    assert module.sparse_weights()
