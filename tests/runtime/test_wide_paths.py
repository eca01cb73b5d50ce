"""The numpy executor's paths for wide models keep the numbers of the general pass.

- heads whose queries and keys read only position features
  (:func:`~crasp_compiler.model.model.positional_patterns`: PCOC's routing heads) are
  found, and no head whose inputs a token, a numeric input or an earlier layer writes;
- such a head runs on its pattern, computed once per length (:class:`_FixedPattern`):
  the general path's numbers bit for bit on hard routing, within rounding in softmax
  mode, and the general path where the pattern would exceed the score budget;
- a model at least ``SLIM_WIDTH`` wide runs each layer on the residual columns it
  touches (:func:`_slim_block`): every output of the observed (general) pass, on
  permute, pairs and bitonic sort, hard and softmax, float64 and float32.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest

from crasp_compiler import load_program
from crasp_compiler.languages.crasp.compile import compile_program
from crasp_compiler.languages.pcoc import load_program as load_pcoc
from crasp_compiler.languages.pcoc.compile import compile_program as compile_pcoc
from crasp_compiler.languages.pcoc.compile import input_matrix
from crasp_compiler.model.model import Model, positional_patterns
from crasp_compiler.runtime import numpy_exec
from crasp_compiler.runtime.numpy_exec import NumpyParts, _FixedPattern, run_tokens

ROOT = Path(__file__).resolve().parents[2]
SENDS = ROOT / "examples" / "pcoc_sends"
PCOC = ROOT / "examples" / "pcoc"


@cache
def compiled(path: Path, n: int, mode: str = "hard") -> Model:
    options = {"tolerance": 1e-2} if mode == "softmax" else {}
    return compile_pcoc(load_pcoc(path), n, mode=mode, **options)


def inputs_for(model: Model, rng: np.random.Generator, batch: int) -> list[np.ndarray]:
    """Integer values within 1e6 and destinations that make a permutation (every
    destination input: at most one sender per machine, within every capacity)."""
    n = model.info["n"]
    out = []
    for _ in range(batch):
        rows = [
            rng.permutation(n).astype(float)
            if name in model.guarantee.destinations
            else rng.integers(-(10**6), 10**6, n).astype(float)
            for name in model.inputs
        ]
        out.append(np.array(rows))
    return out


def both_passes(model: Model, batch: list[np.ndarray], dtype: type = np.float64):
    """Outputs of the unobserved pass and of the observed (general) one."""
    tokens = [["m"] * model.info["n"]] * len(batch)
    values = [input_matrix(model, x) for x in batch]
    fast = run_tokens(model, tokens, dtype=dtype, values=values)
    general = run_tokens(model, tokens, dtype=dtype, values=values, residuals=True)
    return fast.outputs, general.outputs


def test_routing_heads_are_positional_and_counting_heads_are_not():
    model = compiled(SENDS / "permute.pcoc", 16)
    flags = positional_patterns(model)
    assert [len(row) for row in flags] == [len(layer.heads) for layer in model.layers]
    assert sum(map(sum, flags)) == sum(len(layer.heads) for layer in model.layers) > 0
    # uniform heads read no query or key: their pattern depends on the length alone
    dyck = compile_program(load_program(ROOT / "examples" / "crasp" / "dyck1.cr"))
    assert all(map(all, positional_patterns(dyck)))
    # relu mode's offset lookups: keys of positions, queries of what layers computed
    near = compile_program(
        load_program(ROOT / "examples" / "crasp" / "c_near_a.cr"), mode="relu", max_len=64
    )
    kinds = [[str(h.kind) for h in layer.heads] for layer in near.layers]
    flags = positional_patterns(near)
    pairs = [zip(kr, fr, strict=True) for kr, fr in zip(kinds, flags, strict=True)]
    general = [f for row in pairs for k, f in row if k == "general"]
    assert general and not any(general)


def test_a_head_reading_a_written_dimension_is_not_positional():
    model = compiled(SENDS / "permute.pcoc", 8)
    layer = next(k for k, layer in enumerate(model.layers) if layer.heads and k > 0)
    head = model.layers[layer].heads[0]
    column = int(np.flatnonzero(np.asarray(abs(head.w_q).sum(axis=0)).ravel())[0])
    earlier = next(layer_ for layer_ in model.layers[:layer] if layer_.mlp is not None)
    w2 = np.array(earlier.mlp.w2, dtype=float, copy=True)
    w2[column, 0] = 1.0  # an earlier MLP now writes a dimension the query reads
    earlier.mlp.w2 = w2
    try:
        assert positional_patterns(model)[layer][0] is False
    finally:
        w2[column, 0] = 0.0


@pytest.mark.parametrize("n", [4, 16, 40])
def test_fixed_pattern_heads_give_the_general_numbers(n):
    model = compiled(SENDS / "permute.pcoc", n)
    parts = NumpyParts(model, np.float64)
    fixed = [
        step for block in parts.blocks for step in _steps(block) if isinstance(step, _FixedPattern)
    ]
    assert fixed, "routing heads run on their patterns"
    batch = inputs_for(model, np.random.default_rng(n), 5)
    fast, general = both_passes(model, batch)
    for name in fast:
        assert np.array_equal(fast[name], general[name]), name
    # one pattern per (T, length, dtype), computed once; a hard routing head's is sparse
    step, size = fixed[0], n + 1
    pattern = step.pattern(size, n, np.float64)
    assert step.pattern(size, n, np.float64) is pattern and len(step.cache) == 1
    if n >= 16:
        assert pattern.nnz == size  # one key per query


def _steps(block):
    """The head steps inside a block (slim or general)."""
    slim = block.args[0] if block.func is numpy_exec._slim_block else None
    if slim is not None:
        return [step for _, _, step in slim.heads]
    attention = block.args[0]
    return list(attention.args[1]) if attention is not None else []


def test_patterns_past_the_score_budget_take_the_general_path(monkeypatch):
    model = compiled(SENDS / "permute.pcoc", 12)
    batch = inputs_for(model, np.random.default_rng(3), 3)
    want, _ = both_passes(model, batch)
    monkeypatch.setattr(numpy_exec, "SCORE_BUDGET", 12)
    parts = NumpyParts(model, np.float64)
    got, _ = both_passes(model, batch)
    for name in want:
        assert np.array_equal(got[name], want[name])
    steps = [s for block in parts.blocks for s in _steps(block) if isinstance(s, _FixedPattern)]
    assert steps and all(not step.cache for step in steps)


@pytest.mark.parametrize(
    ("path", "n", "mode"),
    [
        (SENDS / "permute.pcoc", 64, "hard"),
        (SENDS / "permute.pcoc", 100, "hard"),
        (SENDS / "pairs.pcoc", 16, "hard"),
        (SENDS / "permute.pcoc", 64, "softmax"),
        (PCOC / "bitonic_sort.pcoc", 64, "hard"),
    ],
)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_slim_layers_give_the_observed_numbers(path, n, mode, dtype):
    model = compiled(path, n, mode)
    if model.guarantee.dtypes.get(np.dtype(dtype).name, -1) < 0:
        pytest.skip("not covered in this float type")
    wide = model.width >= numpy_exec.SLIM_WIDTH
    parts = NumpyParts(model, dtype)
    assert any(block.func is numpy_exec._slim_block for block in parts.blocks) == wide
    batch = inputs_for(model, np.random.default_rng(n), 4)
    fast, general = both_passes(model, batch, dtype)
    for name in fast:
        if mode == "hard" and dtype == np.float64:
            assert np.array_equal(fast[name], general[name]), name
        else:  # the same terms in another order: within a rounding of the outputs
            scale = np.abs(general[name]).max() + 1.0
            eps = np.finfo(dtype).eps
            assert np.abs(fast[name] - general[name]).max() <= 64 * eps * scale, name


def test_pairs_is_wide_at_16():
    assert compiled(SENDS / "pairs.pcoc", 16).width >= numpy_exec.SLIM_WIDTH
