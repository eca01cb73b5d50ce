"""Head kinds in the torch module, and the shared forward pass seen from torch.

- ``forward`` reads no tensor value on the host (no ``.any()``, ``.item()``, ``bool()``)
  and never re-derives kinds while the weights stay as they are;
- weights that leave a head's kind (an optimizer step, an in-place edit, a loaded state
  dict, ``refresh_kinds()`` after a ``.data`` assignment) make it fall back to a path that
  is right for any weights, checked once per update;
- while gradients flow, the fast paths are taken only where they compute every gradient
  the general path computes (compared, gradient for gradient);
- the observation points of the torch pass equal the numpy executor's.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from crasp_compiler import load_program  # noqa: E402
from crasp_compiler.languages.crasp.compile import compile_program  # noqa: E402
from crasp_compiler.model.model import HeadKind, Model, derive_kinds  # noqa: E402
from crasp_compiler.runtime import forward as fw  # noqa: E402
from crasp_compiler.runtime import numpy_exec  # noqa: E402
from crasp_compiler.runtime.backend import NUMPY  # noqa: E402
from crasp_compiler.runtime.forward import Observer  # noqa: E402
from crasp_compiler.runtime.numpy_exec import run_tokens  # noqa: E402
from crasp_compiler.runtime.torch_module import TorchTransformer  # noqa: E402
from tests.support.reference_model import random_inputs, random_model  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "crasp"
TOLERANCE = 1e-9
WORDS = [list("abcab"), [], list("cabbage"[:5]) * 3, list("bca")]


@functools.cache
def compiled(name: str) -> Model:
    return compile_program(load_program(EXAMPLES / name))


def module_kinds(module: TorchTransformer) -> list[list[HeadKind]]:
    return [[head.kind for head in row] for row in module.head_rows()]


def raw_of(module: TorchTransformer, words: list[list[str]]) -> np.ndarray:
    ids, lengths = module.encode(words)
    with torch.no_grad():
        return module(ids, lengths).numpy()


def assert_like_numpy(module: TorchTransformer, words: list[list[str]]) -> None:
    """The module's raw outputs equal the numpy executor's on its current weights (whose
    kinds ``to_model`` derives from those weights) at every real position."""
    model = module.to_model()
    result = run_tokens(model, words)
    raw = raw_of(module, words)
    for k, out in enumerate(model.outputs):
        for row, word in enumerate(words):
            n = len(word) + 1
            np.testing.assert_allclose(
                raw[row, :n, k], result.outputs[out.name][row, :n], rtol=0, atol=TOLERANCE
            )


def bos_dimension(module: TorchTransformer) -> int:
    return module.residual.index("BOS")


@pytest.fixture
def paths(monkeypatch) -> Iterator[list[fw.Path]]:
    """The paths the heads take, in call order."""
    taken: list[fw.Path] = []
    original = fw.head_path

    def spy(*args, **kwargs):
        path = original(*args, **kwargs)
        taken.append(path)
        return path

    monkeypatch.setattr(fw, "head_path", spy)
    yield taken


# ---------------------------------------------------------------- no host reads in forward


@pytest.mark.parametrize("name", ["dyck1.cr", "c_near_a.cr", "induction_head.crasp"])
def test_forward_reads_no_tensor_on_the_host(name, monkeypatch):
    """With the weights unchanged, ``forward`` neither syncs (no ``bool``, ``item``,
    ``tolist`` of a tensor) nor re-derives kinds."""
    module = TorchTransformer(compiled(name))
    symbols = module.vocab[1:]
    ids, lengths = module.encode([symbols * 20, symbols[:1]])
    refreshes = []
    monkeypatch.setattr(module, "refresh_kinds", lambda: refreshes.append(1))

    def forbidden(*args, **kwargs):
        raise AssertionError("forward read a tensor value on the host")

    with monkeypatch.context() as patch:
        for method in ("__bool__", "item", "tolist", "__int__", "__float__", "__index__"):
            patch.setattr(torch.Tensor, method, forbidden)
        with torch.no_grad():
            for _ in range(3):
                module(ids, lengths)
    assert not refreshes


def test_kinds_are_checked_once_per_weight_update(monkeypatch):
    module = TorchTransformer(compiled("dyck1.cr"))
    calls = []
    refresh = module.refresh_kinds

    def counted() -> None:
        calls.append(1)
        refresh()

    monkeypatch.setattr(module, "refresh_kinds", counted)
    ids, lengths = module.encode([list("(()())"), list(")(")])
    with torch.no_grad():
        module(ids, lengths)
        module(ids, lengths)
        assert not calls
        module.blocks[0].attn.heads[0].w_v.mul_(1.0)  # an in-place update, same values
        module(ids, lengths)
        module(ids, lengths)
    assert len(calls) == 1


# ---------------------------------------------------------------- weights leaving their kind


def test_an_optimizer_step_that_leaves_the_kind_falls_back(paths):
    """c_near_a's offset lookups key on the BOS dimension; a step that writes that
    dimension at a token makes them general, and the module computes what the numpy
    executor computes on the new weights."""
    module = TorchTransformer(compiled("c_near_a.cr"))
    assert HeadKind.BOS_KEYED in {k for row in module_kinds(module) for k in row}
    raw_of(module, WORDS)
    assert fw.Path.BOS_KEYED in paths
    w_e = module.embed.w_e
    opt = torch.optim.SGD([w_e], lr=0.5)
    w_e.grad = torch.zeros_like(w_e)
    w_e.grad[1, bos_dimension(module)] = -6.0  # token 1 now carries 3 in the BOS dimension
    opt.step()
    paths.clear()
    assert_like_numpy(module, WORDS)
    assert fw.Path.BOS_KEYED not in paths
    assert module_kinds(module) == derive_kinds(module.to_model())
    assert HeadKind.BOS_KEYED not in {k for row in module_kinds(module) for k in row}


def test_stale_kinds_would_be_wrong():
    """The check above matters: with the stale kind the O(T) path ignores the new keys
    (the attention output of the first layer differs)."""
    module = TorchTransformer(compiled("c_near_a.cr"))
    stale = module_kinds(module)
    with torch.no_grad():  # token 1's keys now outscore the offset key (2) and BOS (1)
        module.embed.w_e[1, bos_dimension(module)] = 3.0

    def attention_out() -> np.ndarray:
        seen = {}
        ids, lengths = module.encode(WORDS)
        with torch.no_grad():
            module(ids, lengths, observe=Observer(lambda n, v: seen.setdefault(n, v.clone())))
        return seen["blocks.0.hook_attn_out"].numpy()

    fresh = attention_out()
    for row, kinds in zip(module.head_rows(), stale, strict=True):
        for head, kind in zip(row, kinds, strict=True):
            head.kind = kind
    assert np.abs(attention_out() - fresh).max() > 0.1


def test_load_state_dict_refreshes_kinds():
    target = TorchTransformer(compiled("c_near_a.cr"))
    source = TorchTransformer(compiled("c_near_a.cr"))
    with torch.no_grad():
        source.embed.w_e[1, bos_dimension(source)] = 0.5
    source.refresh_kinds()
    target.load_state_dict(source.state_dict())
    assert module_kinds(target) == module_kinds(source) != derive_kinds(compiled("c_near_a.cr"))
    assert_like_numpy(target, WORDS)


def test_refresh_kinds_after_a_data_assignment():
    """``p.data = …`` bypasses the version counter: ``refresh_kinds()`` is the explicit
    check (the module docstring says so)."""
    module = TorchTransformer(compiled("c_near_a.cr"))
    before = module_kinds(module)
    changed = module.embed.w_e.detach().clone()
    changed[1, bos_dimension(module)] = 0.5
    module.embed.w_e.data = changed
    assert module_kinds(module) == before
    module.refresh_kinds()
    assert module_kinds(module) != before
    assert_like_numpy(module, WORDS)


def test_edited_uniform_head_becomes_general():
    module = TorchTransformer(compiled("dyck1.cr"))
    head = module.blocks[0].attn.heads[0]
    assert head.kind is HeadKind.UNIFORM
    with torch.no_grad():
        head.w_q.fill_(1.0)
        head.w_k.fill_(1.0)
    assert_like_numpy(module, [list("(()()"), list("))(")])
    assert head.kind is HeadKind.GENERAL


# ---------------------------------------------------------------- gradients on fast paths


def gradients(module: TorchTransformer, trainable: str) -> dict[str, torch.Tensor]:
    """Gradients of a fixed loss with respect to the parameters whose names contain one
    of the comma-separated fragments of ``trainable`` ("" : all)."""
    for name, parameter in module.named_parameters():
        parameter.requires_grad_(any(part in name for part in trainable.split(",")))
        parameter.grad = None
    ids, lengths = module.encode(WORDS)
    (module(ids, lengths) ** 2).sum().backward()
    return {n: p.grad for n, p in module.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(
    ("trainable", "fast"),
    [
        (".w_v,.w_o", {fw.Path.PREFIX_SUMS, fw.Path.BOS_KEYED}),  # value maps only
        ("embed.w_e", {fw.Path.PREFIX_SUMS}),  # the residual wants gradients: no O(T) path
        (".w_k", set()),  # keys want gradients: neither fast path
        ("", set()),
    ],
)
def test_fast_paths_keep_every_gradient(trainable, fast, paths):
    """While gradients flow, each head takes a fast path only if it loses no gradient:
    the gradients equal those of the same module with every head on the general path."""
    module = TorchTransformer(compiled("c_near_a.cr"))
    got = gradients(module, trainable)
    taken = set(paths)
    assert fast <= taken
    assert not (taken & {fw.Path.PREFIX_SUMS, fw.Path.BOS_KEYED}) - fast
    general = TorchTransformer(compiled("c_near_a.cr"))
    for row in general.head_rows():
        for head in row:
            head.kind = HeadKind.GENERAL
    want = gradients(general, trainable)
    assert got.keys() == want.keys() and got
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-9, atol=1e-12, err_msg=name)


# ---------------------------------------------------------------- observation points


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("patterns", [False, True])
def test_observation_points_match_numpy(seed, patterns):
    rng = np.random.default_rng(8100 + seed)
    model = random_model(rng, layers=(2, 3), heads=(1, 3), p_mlp=0.8)
    words = [*random_inputs(rng, model, count=3, max_len=9), []]
    module = TorchTransformer(model)
    ids, lengths = module.encode(words)
    seen_torch: dict[str, np.ndarray] = {}
    seen_numpy: dict[str, np.ndarray] = {}

    def record(into):
        def hook(name, value):
            into[name] = np.asarray(value.detach() if hasattr(value, "detach") else value)

        return hook

    with torch.no_grad():
        module(ids, lengths, observe=Observer(record(seen_torch), patterns=patterns))
    fw.forward(
        NUMPY,
        numpy_exec.NumpyParts(model, np.float64),
        ids.numpy(),
        lengths.numpy(),
        None,
        Observer(record(seen_numpy), patterns=patterns),
    )
    assert seen_torch.keys() == seen_numpy.keys()
    real = np.arange(ids.shape[1])[None, :] <= lengths.numpy()[:, None]
    for name, want in seen_numpy.items():
        got = seen_torch[name]
        assert got.shape == want.shape, name
        if got.ndim >= 2 and got.shape[:2] == real.shape:  # (B, T, ...): real positions
            mask = real.reshape(*real.shape, *[1] * (got.ndim - 2))
            got, want = np.where(mask, got, 0), np.where(mask, want, 0)
        np.testing.assert_allclose(got, want, rtol=TOLERANCE, atol=TOLERANCE, err_msg=name)
    assert any(".hook_pattern" in name for name in seen_torch) == patterns
