"""Residual allocation by liveness: a dead variable's dimension is cancelled and reused.

The allocator (:func:`~crasp_compiler.assemble.assemble.allocate`) must leave every value
the model reads as a one-dimension-per-variable model has it: a cancelled dimension is an
exact 0, so the only difference is the order in which a matrix product adds the terms of
a form (dimensions move). The tests compare reused models with ``reuse=False`` builds of
the same blocks — every decision equal, every value within float64 summation rounding —
on compiled programs (examples and random ones, every mode), and check the labels each
stage records, in the model, in files, in hooks and in traces.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp_compiler.assemble.assemble import allocate, schedule
from crasp_compiler.assemble.builder import Builder
from crasp_compiler.cookbook import attention, ffn
from crasp_compiler.cookbook.blocks import var
from crasp_compiler.errors import CraspError
from crasp_compiler.languages.crasp.lower import lower_program
from crasp_compiler.languages.crasp.program import load_program
from crasp_compiler.model.io import read_model, save_model
from crasp_compiler.model.model import FREE
from crasp_compiler.runtime.numpy_exec import run_tokens
from tests.support.strategies import random_inputs, random_program

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "crasp").iterdir())


def chain() -> Builder:
    """x = mean(a); y = [x ≥ 1/2]; z = mean(y); w = [z ≥ 1/2]: x dies in layer 1's MLP."""
    b = Builder(["a", "b"])
    x = b.add(attention.average(b.token("a"), "x", label="x"))
    y = b.add(ffn.ge_zero(x - 0.5 * b.one, "y", tolerance=0.0, label="y"))
    z = b.add(attention.average(y, "z", label="z"))
    b.add(ffn.ge_zero(z - 0.5 * b.one, "w", tolerance=0.0, label="w"))
    return b


def test_a_dead_variable_is_cancelled_and_its_dimension_reused():
    b = chain()
    inputs = {"BOS", "nonbos", "token:a", "token:b"}
    slots = schedule(b.blocks, inputs)
    assert slots == [1, 2, 3, 4]
    plan = allocate(b.blocks, slots, b.variables, len(inputs), {"w"})
    # x (last read at slot 2) is cancelled in that MLP; z, written at slot 3, takes its place
    assert plan.dims["z"] == plan.dims["x"] and plan.width == 4 + 3
    ((cancel, slot),) = [(c, s) for c, s in plan.cancels if "x" in c.writes]
    assert slot == 2 and cancel.in_place == frozenset({"x"})
    assert plan.occupants[plan.dims["x"]] == [(1, "x"), (2, ""), (3, "z")]
    plain = allocate(b.blocks, slots, b.variables, len(inputs), {"w"}, reuse=False)
    assert plain.width == 8 and not plain.cancels


def test_labels_follow_the_stages():
    model = chain().build({"w": var("w")}, reuse=True)
    assert model.occupants is not None and model.width == 7
    k = model.labels_at(1).index("x")
    assert [model.labels_at(stage)[k] for stage in range(5)] == [FREE, "x", FREE, "z", "z"]
    assert model.labels_at(-1) == model.labels_at(4)
    assert model.residual[k] == "x → z"
    with pytest.raises(IndexError, match="stage 5 out of range"):
        model.labels_at(5)
    assert chain().build({"w": var("w")}, reuse=False).occupants is None
    # by default the allocator keeps whichever plan stores fewer numbers
    default = chain().build({"w": var("w")})
    assert default.parameter_count() <= min(
        chain().build({"w": var("w")}, reuse=flag).parameter_count() for flag in (True, False)
    )
    words = [list("abba"), list("aaab"), []]
    for dtype in (np.float64, np.float32):
        assert raw_outputs(model, words, dtype)["w"].tolist() == [
            [0, 1, 1, 1, 1],
            [0, 1, 1, 1, 1],
            [0],
        ] or np.array_equal(
            raw_outputs(model, words, dtype)["w"],
            raw_outputs(chain().build({"w": var("w")}, reuse=False), words, dtype)["w"],
        )


def words_for(program, seed: int) -> list[list[str]]:
    return [list(w) for w in random_inputs(program, seed, count=12, max_len=9)] + [[]]


def raw_outputs(model, words, dtype=np.float64):
    result = run_tokens(model, words, dtype=dtype, on_overlength="ignore")
    return {name: np.asarray(v) for name, v in result.outputs.items()}


def assert_same(packed, plain, words) -> None:
    """Equal Boolean decisions in float64 and float32; every value equal up to the
    rounding of a sum taken in another order."""
    for dtype, tolerance in ((np.float64, 1e-12), (np.float32, 1e-5)):
        got = run_tokens(packed, words, dtype=dtype, on_overlength="ignore")
        want = run_tokens(plain, words, dtype=dtype, on_overlength="ignore")
        for name, decided in want.values.items():
            if decided.dtype == bool:
                np.testing.assert_array_equal(got.values[name], decided, str(dtype))
            np.testing.assert_allclose(
                got.outputs[name], want.outputs[name], tolerance, tolerance, err_msg=str(dtype)
            )


def both_builds(program, mode: str):
    lowered = lower_program(program, mode, 12 if mode == "relu" else None)
    outputs = {name: lowered.forms[name] for name in program.outputs}
    return (
        lowered.builder.build(outputs, reuse=True),
        lowered.builder.build(outputs, reuse=False),
    )


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("mode", ["heaviside", "layernorm", "relu"])
def test_reused_examples_compute_what_unshared_ones_do(path, mode):
    program = load_program(path)
    packed, plain = both_builds(program, mode)
    assert packed.width <= plain.width
    if packed.occupants is not None:
        assert packed.width < plain.width
    assert_same(packed, plain, words_for(program, 3))


@settings(max_examples=40)
@given(seed=st.integers(0, 10**6), mode=st.sampled_from(["heaviside", "layernorm", "relu"]))
def test_random_programs_reused_and_unshared_agree(seed, mode):
    program = random_program(seed)
    try:
        packed, plain = both_builds(program, mode)
    except CraspError:
        return  # refused programs (rounding, budget) are the compiler's tests
    assert_same(packed, plain, words_for(program, seed))


def reused_example():
    for path in EXAMPLES:
        packed, _ = both_builds(load_program(path), "heaviside")
        if packed.occupants is not None:
            return packed
    raise AssertionError("no example reuses a dimension")


def test_occupants_survive_the_model_file(tmp_path):
    model = reused_example()
    save_model(model, tmp_path / "m.npz")
    loaded = read_model(tmp_path / "m.npz")
    assert loaded.occupants == model.occupants and loaded.residual == model.residual
    for stage in range(model.stages + 1):
        assert loaded.labels_at(stage) == model.labels_at(stage)


@pytest.mark.parametrize(
    ("occupants", "message"),
    [
        ("many", "must list every dimension"),
        ("empty", "dimension 0 is malformed"),
        (None, None),
    ],
)
def test_malformed_occupants_are_refused_by_field(tmp_path, occupants, message):
    model = reused_example()
    save_model(model, tmp_path / "m.npz")
    with zipfile.ZipFile(tmp_path / "m.npz") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    header = json.loads(np.load(tmp_path / "m.npz")["header"].item())
    width = len(header["residual"])
    bad = {"many": [[[0, "x"]]] * (width + 1), "empty": [[]] * width, None: None}
    header["occupants"] = bad[occupants]
    _rewrite_header(tmp_path / "bad.npz", members, header)
    if message is None:
        assert read_model(tmp_path / "bad.npz").occupants is None
        return
    with pytest.raises(CraspError, match=message):
        read_model(tmp_path / "bad.npz")


def test_stages_out_of_order_are_refused(tmp_path):
    model = reused_example()
    save_model(model, tmp_path / "m.npz")
    with zipfile.ZipFile(tmp_path / "m.npz") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    header = json.loads(np.load(tmp_path / "m.npz")["header"].item())
    header["occupants"] = [[[3, "a"], [1, "b"]], *header["occupants"][1:]]
    _rewrite_header(tmp_path / "bad.npz", members, header)
    with pytest.raises(CraspError, match="stages out of order"):
        read_model(tmp_path / "bad.npz")
    header["occupants"] = [[[0, 7]], *header["occupants"][1:]]
    _rewrite_header(tmp_path / "bad.npz", members, header)
    with pytest.raises(CraspError, match=r"not \[stage, label\]"):
        read_model(tmp_path / "bad.npz")


def _rewrite_header(path: Path, members: dict[str, bytes], header: dict) -> None:
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.array(json.dumps(header)))
    members = dict(members, **{"header.npy": buffer.getvalue()})
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def test_hooks_and_traces_label_each_stage():
    pytest.importorskip("torch")
    from crasp_compiler.runtime.torch_module import TorchTransformer
    from crasp_compiler.show.data import trace

    model = reused_example()
    module = TorchTransformer(model)
    word = [model.vocab[1]] * 3
    ids, lengths = module.encode([word])
    _, cache = module.run_with_cache(ids, lengths)
    for index in range(len(model.layers)):
        assert cache.labels(f"blocks.{index}.hook_resid_pre") == model.labels_at(2 * index)
        if model.layers[index].heads:
            mid = cache.labels(f"blocks.{index}.hook_resid_mid")
            assert mid == model.labels_at(2 * index + 1)
        assert cache.labels(f"blocks.{index}.hook_resid_post") == model.labels_at(2 * index + 2)
    assert cache.labels("hook_resid_final") == model.labels_at(-1)
    assert module.to_model().occupants == model.occupants
    shown = trace(model, word)
    assert shown.stages[0].rows == model.labels_at(0)
    assert any(stage.rows != shown.rows for stage in shown.stages)
