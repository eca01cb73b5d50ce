"""nnsight and the torch module's attention patterns: a trace reads ``hook_pattern`` after
``module.patterns = True``; without it the error names that switch (not nnsight's
``OutOfOrderError``), and a trace that reads no pattern computes what it did before, bit
for bit."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nnsight = pytest.importorskip("nnsight")

import crasp_compiler as cc  # noqa: E402
from crasp_compiler.errors import CraspError  # noqa: E402
from crasp_compiler.runtime.torch_module import TorchTransformer  # noqa: E402

DYCK = "examples/crasp/dyck1.cr"
INPUTS = [list("(()))("), list("()"), list("(()())")]


def _setup():
    module = TorchTransformer(cc.compile(cc.load(DYCK)))
    ids, lengths = module.encode(INPUTS)
    return module, nnsight.NNsight(module), ids, lengths


def test_reading_a_pattern_without_the_switch_names_it():
    _, traced, ids, lengths = _setup()
    switch = r"heads\.0\.hook_pattern was read but not computed.*module\.patterns = True"
    with (
        pytest.raises(CraspError, match=switch),
        torch.no_grad(),
        traced.trace(ids, lengths),
    ):
        traced.blocks[1].attn.heads[0].hook_pattern.output.save()
    # after an earlier read too: the pass never reaches a pattern it does not compute
    with (
        pytest.raises(CraspError, match=switch),
        torch.no_grad(),
        traced.trace(ids, lengths),
    ):
        traced.blocks[0].attn.heads[0].hook_z.output.save()
        traced.blocks[1].attn.heads[0].hook_pattern.output.save()


def test_with_the_switch_nnsight_reads_the_patterns_the_cache_has():
    module, traced, ids, lengths = _setup()
    name = "blocks.1.attn.heads.0.hook_pattern"
    _, cache = module.run_with_cache(ids, lengths, names_filter=name)
    module.patterns = True
    with torch.no_grad(), traced.trace(ids, lengths):
        pattern = traced.blocks[1].attn.heads[0].hook_pattern.output.save()
    assert torch.equal(pattern, cache[name])
    assert torch.allclose(pattern.sum(-1)[0], torch.ones(ids.shape[1], dtype=pattern.dtype))


def test_a_trace_without_patterns_changes_no_value():
    """The check runs after the pass: every other point, and the output, are those of a
    plain run (the fast paths kept)."""
    module, traced, ids, lengths = _setup()
    names = ["blocks.0.attn.heads.0.hook_z", "blocks.1.hook_resid_post"]
    with torch.no_grad():
        plain = module(ids, lengths)
        _, cache = module.run_with_cache(ids, lengths, names_filter=names)
        with traced.trace(ids, lengths):
            z = traced.blocks[0].attn.heads[0].hook_z.output.save()
            resid = traced.blocks[1].hook_resid_post.output.save()
            out = traced.output.save()
    assert torch.equal(z, cache[names[0]])
    assert torch.equal(resid, cache[names[1]])
    assert torch.equal(out, plain)
