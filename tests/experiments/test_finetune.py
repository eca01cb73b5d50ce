"""Fine-tuning from compiled weights: the compiled model starts exact, plain gradient steps
keep it exact (its gradient is ~0), and AdamW's normalised steps and weight decay move it;
re-bounded programs; the resumable file of run records."""

from __future__ import annotations

import json
import math

import pytest

from crasp_compiler.errors import CraspError
from crasp_compiler.experiments.tasks.registry import get_task
from crasp_compiler.experiments.train.finetune import (
    FinetuneConfig,
    dump_records,
    finetune,
    finetune_runs,
    load_records,
    rebound_program,
)
from crasp_compiler.experiments.train.records import finetune_problem
from crasp_compiler.languages.pcoc import parse_program
from crasp_compiler.languages.pcoc.nodes import For
from crasp_compiler.languages.pcoc.rebound import declared_bound

SMALL = {"n": 4, "steps": 20, "test_size": 32, "scales": [1.0, 10.0], "batch_size": 16}


def test_sgd_without_decay_keeps_the_compiled_model_exact(one_torch_thread):
    result = finetune(FinetuneConfig(optimizer="sgd", weight_decay=0.0, lr=1e-3, **SMALL))
    assert result["exact_before"] and result["exact_after"]
    assert result["loss_first"] < 1e-20
    assert result["largest_weight_change"] < 1e-9


def test_adamw_moves_the_weights_and_loses_exactness(one_torch_thread):
    result = finetune(FinetuneConfig(optimizer="adamw", lr=1e-3, **SMALL))
    assert result["exact_before"] and not result["exact_after"]
    assert result["largest_weight_change"] > 1e-4
    worst = max(s["max_abs_error"] for s in result["after"].values())
    assert worst > 10 * result["tolerance"]


def test_value_only_fine_tuning_trains_only_value_maps(one_torch_thread):
    result = finetune(FinetuneConfig(task="num_cummin", params="values", **SMALL))
    assert result["trainable"]
    assert all(name.endswith((".w_v", ".w_o")) for name in result["trainable"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"task": "tomita1"}, "not a numeric task"),
        ({"params": "keys"}, "params must be"),
        ({"optimizer": "lbfgs"}, "optimizer must be"),
    ],
)
def test_bad_configurations(change, message):
    with pytest.raises(CraspError, match=message):
        finetune(FinetuneConfig(**{**SMALL, **change}))


# ------------------------------------------------------------------ declared bounds


def _receives(rounds):
    """Every receive of a program's rounds and loops."""
    for item in rounds:
        yield from _receives(item.body) if isinstance(item, For) else item.receives


def test_rebound_program_replaces_the_bound_and_the_defaults_that_dominate():
    program = get_task("num_sort").pcoc_program()
    assert declared_bound(program) == 1e9
    rebounded = rebound_program(program, 100.0)
    assert rebounded.slot("x").bound == 100.0
    assert {r.default for r in _receives(rebounded.rounds)} == {100.0, -100.0}
    assert {r.default for r in _receives(program.rounds)} == {1e9, -1e9}


@pytest.mark.parametrize(
    ("text", "bound", "message"),
    [
        ("input x bound 10\nslot y bound 5 = 0\noutput x\nround { x = x + y }", 1.0, "one bound"),
        ("input x\noutput x\nround { x = x + 1 }", 1.0, "one bound"),
        ("input x bound 10\noutput x\nround { x = x + 1 }", 0.0, "finite number > 0"),
    ],
)
def test_rebound_program_refuses(text, bound, message):
    with pytest.raises(CraspError, match=message):
        rebound_program(parse_program(text), bound)


@pytest.mark.parametrize(("task", "bound"), [("num_cummin", 1e2), ("num_sort", 1e2)])
def test_a_rebounded_model_is_exact_before_fine_tuning_and_records_its_bound(
    one_torch_thread, task, bound
):
    config = FinetuneConfig(task=task, bound=bound, optimizer="sgd", lr=1e-7, **SMALL)
    result = finetune(config)
    assert result["exact_before"]
    assert result["bound"] == bound and result["config"]["bound"] == bound
    assert finetune(FinetuneConfig(task=task, **{**SMALL, "steps": 0}))["bound"] == 1e9


@pytest.mark.parametrize(
    ("task", "bound", "message"),
    [  # inputs reach 2 · 10 = 20; partial sums of 4 such values reach 80
        ("num_cummin", 19.0, r"bound 19 is smaller than the largest value drawn \(20"),
        ("num_cumsum", 30.0, "bound 30 is too small for num_cumsum at c = 10: .*exceeds"),
    ],
)
def test_a_too_small_bound_is_refused(task, bound, message):
    with pytest.raises(CraspError, match=message):
        finetune(FinetuneConfig(task=task, bound=bound, **SMALL))


# ------------------------------------------------------------------ resumable records

TINY = {"n": 2, "steps": 2, "test_size": 4, "scales": [1.0, 2.0], "batch_size": 4}


def test_records_round_trip_non_finite_values_as_strict_json(tmp_path):
    records = [{"a": math.nan, "b": [math.inf, -math.inf, 1.5], "c": {"d": "text"}}]
    text = dump_records(records)

    def refuse(constant):
        raise AssertionError(f"not strict JSON: {constant}")

    assert json.loads(text, parse_constant=refuse)[0]["b"] == ["inf", "-inf", 1.5]
    path = tmp_path / "records.json"
    path.write_text(text)
    [back] = load_records(path)
    assert math.isnan(back["a"]) and back["b"] == [math.inf, -math.inf, 1.5]
    assert back["c"] == {"d": "text"}


def test_a_diverged_run_is_stored_as_nan_not_as_a_number(tmp_path, one_torch_thread):
    """SGD at lr 1e-3 on cummin with the declared bound 1e9 diverges within 5 steps."""
    path = tmp_path / "runs.json"
    config = FinetuneConfig(task="num_cummin", optimizer="sgd", lr=1e-3, **{**TINY, "steps": 5})
    finetune_runs([config], path)
    assert '"worst_error_after": "nan"' in path.read_text()
    [record] = load_records(path)
    assert record["exact_before"] and not record["exact_after"]
    assert math.isnan(record["worst_error_after"])
    assert record["largest_weight_change"] > 1e6
    assert record["provenance"]["dtype"] == "float64"  # the compiled weights' type
    assert record["provenance"]["device"] == "cpu" and record["provenance"]["torch"]
    assert finetune_problem(json.loads(path.read_text())[0]) is None  # the report reads it


def test_finetune_runs_resumes_an_interrupted_file(tmp_path, one_torch_thread):
    path = tmp_path / "runs.json"
    configs = [FinetuneConfig(optimizer="sgd", seed=seed, **TINY) for seed in range(3)]

    def interrupt(record):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # stopped after the first run was written
        finetune_runs(configs, path, interrupt)
    [first] = load_records(path)
    assert first["config"]["seed"] == 0 and first["exact_before"]
    assert set(first["after"]) == {"1.0", "2.0"}
    first["cpu_seconds"] = -1.0  # a mark: a recomputed record would not carry it
    path.write_text(dump_records([first]))

    seen = []
    records = finetune_runs(configs, path, seen.append)
    assert [r["config"]["seed"] for r in records] == [0, 1, 2]
    assert records[0]["cpu_seconds"] == -1.0
    assert [r["config"]["seed"] for r in seen] == [1, 2]
    assert load_records(path) == records
    assert finetune_runs(configs, path, seen.append) == records and len(seen) == 2


def test_unreadable_records_are_refused_not_overwritten(tmp_path):
    path = tmp_path / "runs.json"
    path.write_text('[{"config": ')
    with pytest.raises(CraspError, match="cannot read fine-tuning records"):
        finetune_runs([FinetuneConfig(**TINY)], path)
    assert path.read_text() == '[{"config": '
