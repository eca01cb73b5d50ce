"""Hook points of the torch module (TransformerLens names): cache, patterns, patching,
labels, nnsight."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import crasp_compiler as cc  # noqa: E402
from crasp_compiler.languages.crasp.program import parse_program  # noqa: E402
from crasp_compiler.model.model import HeadKind, Mask  # noqa: E402
from crasp_compiler.runtime.forward import Observer  # noqa: E402
from crasp_compiler.runtime.hooks import HookPoint  # noqa: E402
from crasp_compiler.runtime.torch_module import TorchTransformer  # noqa: E402
from tests.support.reference_model import random_inputs, random_model  # noqa: E402

DYCK = "examples/crasp/dyck1.cr"
DYCK_INPUTS = ["(()))(", "()", "(()())", "))((", ""]
HEAD_POINTS = ("hook_q", "hook_k", "hook_v", "hook_pattern", "hook_z", "hook_result")


def _module(path: str, **options: object) -> TorchTransformer:
    return TorchTransformer(cc.compile(cc.load(path), **options))


def _expected_names(module: TorchTransformer) -> set[str]:
    names = {"hook_embed", "hook_pos_embed", "hook_resid_final", "hook_outputs"}
    for layer, block in enumerate(module.layers()):
        names |= {f"blocks.{layer}.hook_resid_pre", f"blocks.{layer}.hook_resid_post"}
        heads = block.attn.head_list()
        if heads:
            names |= {f"blocks.{layer}.hook_attn_out", f"blocks.{layer}.hook_resid_mid"}
        for h in range(len(heads)):
            names |= {f"blocks.{layer}.attn.heads.{h}.{p}" for p in HEAD_POINTS}
        if block.mlp is not None:
            names |= {f"blocks.{layer}.mlp.hook_pre", f"blocks.{layer}.mlp.hook_post"}
            if block.mlp.norm_groups:
                names.add(f"blocks.{layer}.mlp.hook_normalized")
    return names


@pytest.mark.parametrize("path", [DYCK, "examples/crasp/copy8.cr", "examples/crasp/majority.crasp"])
def test_cache_has_every_point(path: str) -> None:
    module = _module(path)
    alphabet = [t for t in module.vocab[1:]]
    ids, lengths = module.encode([alphabet * 3, alphabet[:1]])
    raw, cache = module.run_with_cache(ids, lengths)
    expected = _expected_names(module)
    assert expected <= set(cache)
    assert set(cache) <= set(module.hook_dict)
    for name in cache:
        # every name is a real submodule, reachable by its path
        point = module.get_submodule(name)
        assert isinstance(point, HookPoint) and point.name == name
        assert len(cache.labels(name)) == cache[name].shape[-1]
    for block in module.blocks:  # empty layers have an (empty) attention module too
        assert block.attn is not None
    assert raw.shape == (2, ids.shape[1], len(module.output_names))


def test_names_filter_and_fast_paths_by_default() -> None:
    module = _module(DYCK)
    ids, lengths = module.encode([list(s) for s in DYCK_INPUTS])
    seen: list[str] = []
    with torch.no_grad():
        module(ids, lengths, observe=Observer(lambda n, v: seen.append(n)))
    # no pattern asked: uniform heads run on prefix sums (no q, k, pattern)
    assert not any(n.endswith(("hook_pattern", "hook_q")) for n in seen)
    _, cache = module.run_with_cache(ids, lengths, names_filter="blocks.1.hook_resid_post")
    assert list(cache) == ["blocks.1.hook_resid_post"]
    _, cache = module.run_with_cache(ids, lengths, names_filter=lambda n: n.endswith("pattern"))
    assert set(cache) == {
        f"blocks.{layer}.attn.heads.{h}.hook_pattern"
        for layer, heads in enumerate(module.head_rows())
        for h in range(len(heads))
    }


def _check_patterns(
    module: TorchTransformer, inputs: list[list[str]], kinds: set[HeadKind]
) -> None:
    ids, lengths = module.encode(inputs)
    _, cache = module.run_with_cache(ids, lengths, names_filter=lambda n: n.endswith("pattern"))
    size = ids.shape[1]
    t = np.arange(size)[:, None]
    s = np.arange(size)[None, :]
    found = set()
    for layer, heads in enumerate(module.head_rows()):
        for h, head in enumerate(heads):
            found.add(head.kind)
            pattern = cache[f"blocks.{layer}.attn.heads.{h}.hook_pattern"].numpy()
            allowed = {
                Mask.CAUSAL: s <= t,
                Mask.STRICT: s < t,
                Mask.PAST: s >= t,
                Mask.STRICT_PAST: s > t,
                Mask.NONE: np.ones((size, size), dtype=bool),
            }[head.mask]
            assert (pattern >= 0).all()
            for b, length in enumerate(lengths.tolist()):
                keys = allowed & (s <= length)
                assert not pattern[b][~keys].any()
                rows = keys.any(-1)[: length + 1]
                sums = pattern[b, : length + 1].sum(-1)
                np.testing.assert_allclose(sums[rows], 1.0, atol=1e-12)
                assert not sums[~rows].any()
    assert kinds <= found


def test_patterns_of_uniform_and_bos_keyed_heads() -> None:
    for path in (DYCK, "examples/crasp/copy8.cr", "examples/crasp/tomita7_local.cr"):
        module = _module(path)
        alphabet = module.vocab[1:]
        rng = np.random.default_rng(0)
        inputs = [list(rng.choice(alphabet, size=n)) for n in (9, 4, 0, 8)]
        kinds = {HeadKind.UNIFORM} if path == DYCK else {HeadKind.UNIFORM, HeadKind.BOS_KEYED}
        _check_patterns(module, inputs, kinds)
    module = _module(DYCK)
    ids, lengths = module.encode([list("(()")])
    _, cache = module.run_with_cache(ids, lengths)
    uniform = cache["blocks.0.attn.heads.0.hook_pattern"][0].numpy()
    np.testing.assert_allclose(uniform, np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None])


def test_patterns_of_general_heads() -> None:
    for seed in range(6):
        rng = np.random.default_rng(seed)
        model = random_model(rng, heads=(1, 3))
        module = TorchTransformer(model)
        _check_patterns(module, random_inputs(rng, model, count=4, max_len=7), set())


def test_outputs_with_hooks_equal_outputs_without() -> None:
    module = _module("examples/crasp/copy8.cr")
    ids, lengths = module.encode([list("abbaabab"), list("abba"), []])
    with torch.no_grad():
        plain = module(ids, lengths)
        calls: list[str] = []

        def keep(activation: torch.Tensor, hook: HookPoint) -> None:
            calls.append(hook.name)

        everywhere = [(name, keep) for name in module.hook_dict if not name.endswith("pattern")]
        hooked = module.run_with_hooks(ids, lengths, fwd_hooks=everywhere)
        assert torch.equal(hooked, plain)  # the same paths, the same numbers
        assert "blocks.0.attn.heads.1.hook_z" in calls
        raw, _ = module.run_with_cache(ids, lengths)  # patterns: the general path
        np.testing.assert_allclose(raw.numpy(), plain.numpy(), atol=1e-12)
        for name in module.output_names:
            decided = module.decide(raw, lengths)[name]
            assert torch.equal(decided, module.decide(plain, lengths)[name])
    assert not any(point.hooked() for point in module.hook_dict.values())  # hooks removed


def _closing_head(module: TorchTransformer) -> str:
    (name,) = [
        f"blocks.{layer}.attn.heads.{h}.hook_z"
        for layer, heads in enumerate(module.head_rows())
        for h, head in enumerate(heads)
        if head.label == '# ")"'
    ]
    return name


def _dyck_without_closing() -> list[np.ndarray]:
    """D at every prefix when C_close is forced to 0, by the interpreter."""
    text = Path(DYCK).read_text().replace('C_close = # ")"', "C_close = 0")
    program = parse_program(text, alphabet=["(", ")"])
    return [np.asarray(cc.interpret(program, list(s)).values["D"]) for s in DYCK_INPUTS]


@pytest.mark.parametrize("mode", ["heaviside", "relu", "layernorm"])
def test_zeroing_the_closing_count_flips_acceptance_as_predicted(mode: str) -> None:
    module = _module(DYCK, mode=mode, max_len=16)
    ids, lengths = module.encode([list(s) for s in DYCK_INPUTS])
    target = _closing_head(module)
    with torch.no_grad():
        plain = module.decide(module(ids, lengths), lengths)["D"]
        patched_raw = module.run_with_hooks(
            ids, lengths, fwd_hooks=[(target, lambda z, hook: torch.zeros_like(z))]
        )
    patched = module.decide(patched_raw, lengths)["D"]
    predicted = _dyck_without_closing()
    flips = 0
    for b, s in enumerate(DYCK_INPUTS):
        n = len(s) + 1
        assert patched[b, :n].tolist() == predicted[b].tolist()
        original = np.asarray(cc.interpret(cc.load(DYCK), list(s)).values["D"])
        assert plain[b, :n].tolist() == original.tolist()
        flips += int((original != predicted[b]).sum())
    assert flips > 0  # the patch changes the output where the program says


def test_labels_are_source_expressions() -> None:
    module = _module(DYCK)
    ids, lengths = module.encode([list("(())")])
    _, cache = module.run_with_cache(ids, lengths)
    heads = [head.label for row in module.head_rows() for head in row]
    assert '# "("' in heads and '# ")"' in heads and "# V" in heads
    assert cache.labels("blocks.0.attn.heads.1.hook_z") == ['# ")"']
    units = cache.labels("blocks.0.mlp.hook_post")
    assert "C_open < C_close" in units and "C_open == C_close (<= half)" in units
    assert "CV == 0 (>= half)" in cache.labels("blocks.1.mlp.hook_pre")
    assert cache.labels("blocks.1.hook_resid_post") == module.residual
    assert "C_open" in module.residual and "CV" in module.residual
    assert cache.labels("hook_outputs") == ["D"]
    internal = ("count#", "cmp#", "bool#", "local#", "prev", "->")
    assert "CV == 0 (>= half)" in module.residual  # compiled dimensions: source expressions
    for name in cache:
        assert not any(bad in label for label in cache.labels(name) for bad in internal), name


def test_nnsight_reads_and_patches() -> None:
    nnsight = pytest.importorskip("nnsight")
    module = _module(DYCK)
    ids, lengths = module.encode([list(s) for s in DYCK_INPUTS])
    target = _closing_head(module)
    _, cache = module.run_with_cache(ids, lengths, names_filter=target)
    expected = module.run_with_hooks(
        ids, lengths, fwd_hooks=[(target, lambda z, hook: torch.zeros_like(z))]
    )
    traced = nnsight.NNsight(module)
    layer, head = int(target.split(".")[1]), int(target.split(".")[4])
    with torch.no_grad(), traced.trace(ids, lengths):
        point = traced.blocks[layer].attn.heads[head].hook_z
        seen = point.output.save()
        point.output = torch.zeros_like(point.output)
        out = traced.output.save()
    assert torch.equal(seen, cache[target])
    assert torch.equal(out, expected)


def test_plain_forward_hooks_on_points() -> None:
    module = _module(DYCK)
    ids, lengths = module.encode([list("(()")])
    seen: list[tuple[int, ...]] = []
    point = module.blocks[1].hook_resid_post
    handle = point.register_forward_hook(lambda mod, inputs, out: seen.append(tuple(out.shape)))
    with torch.no_grad():
        plain = module(ids, lengths)
        handle.remove()
        assert seen == [(1, 4, len(module.residual))]
        assert torch.equal(module(ids, lengths), plain)
    assert seen == [(1, 4, len(module.residual))]  # removed: no more calls
    # a hook on a pattern point materialises that head's pattern only
    pattern = module.get_submodule("blocks.1.attn.heads.0.hook_pattern")
    rows: list[torch.Tensor] = []
    pattern.register_forward_hook(lambda mod, inputs, out: rows.append(out))
    with torch.no_grad():
        module(ids, lengths)
    (only,) = rows
    np.testing.assert_allclose(only.sum(-1).numpy(), 1.0)


def test_pcoc_labels_name_the_statement() -> None:
    module = _module("examples/pcoc/compare_vectors.pcoc", n=4)
    units = {label for block in module.layers() if block.mlp for label in block.mlp.labels}
    assert "max in `m = max(a, b)`" in units
    assert "> margin 0.5 in `wins = a > b margin 0.5`" in units
    assert not any("#" in label or "->" in label for label in units)
    heads = [head.label for row in module.head_rows() for head in row]
    assert heads and all(label.startswith("round ") for label in heads)


def test_cache_stacks_heads_under_transformer_lens_short_names() -> None:
    module = _module(DYCK)
    ids, lengths = module.encode([list("(()"), list("()")])
    _, cache = module.run_with_cache(ids, lengths)
    heads = len(module.head_rows()[0])
    stacked = cache["pattern", 0]
    assert stacked.shape == (2, heads, 4, 4)
    assert torch.equal(stacked, cache["blocks.0.attn.hook_pattern"])
    for h in range(heads):
        assert torch.equal(stacked[:, h], cache[f"blocks.0.attn.heads.{h}.hook_pattern"])
    assert cache.labels(("pattern", 0)) == ["key 0", "key 1", "key 2", "key 3"]
    assert torch.equal(cache["resid_post", 1], cache["blocks.1.hook_resid_post"])
    assert torch.equal(cache["post", 0], cache["blocks.0.mlp.hook_post"])
    assert torch.equal(cache["embed"], cache["hook_embed"])
    result = cache["result", 0]  # every head writes the whole residual: one width
    assert result.shape == (2, 4, heads, len(module.residual))
    assert torch.equal(result[:, :, 1], cache["blocks.0.attn.heads.1.hook_result"])
    with pytest.raises(KeyError, match="unknown activation name"):
        cache["nonsense", 0]
    _, partial = module.run_with_cache(ids, lengths, names_filter="blocks.0.attn.heads.0.hook_z")
    with pytest.raises(KeyError, match=r"not cached for \['blocks.0.attn.heads.1.hook_z"):
        partial["z", 0]
    assert "blocks.0.attn.hook_z" not in list(partial)  # stacks are views, not entries
