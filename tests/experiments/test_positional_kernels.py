"""``benchmarks/positional_kernels.py`` (the C-RASP paper's Appendix G.2): the targets,
the fit, its records, and the table of docs/length-generalization.md."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch

from tests.support.scripts import load_benchmark

kernels = load_benchmark("positional_kernels")
V = 2 * math.log(50)


def test_the_targets_are_functions_of_the_distance_on_the_causal_pairs():
    target = kernels.FUNCTIONS["eq3"].target(8)
    assert target[5, 2] == pytest.approx(V) and target[2, 5] == 0.0  # i = 5, j = 2
    assert np.count_nonzero(target) == 5  # i = 3 … 7
    prime = kernels.FUNCTIONS["prime"].target(12)
    assert [k for k in range(12) if prime[11, 11 - k]] == [2, 3, 5, 7, 11]
    combined = kernels.FUNCTIONS["combined"].target(20)
    parts = kernels.FUNCTIONS["eq3"].target(20) + kernels.FUNCTIONS["mod3-1"].target(20)
    assert np.array_equal(combined, parts)
    assert np.all(np.triu(kernels.FUNCTIONS["lt3"].target(10), 1) == 0)


def test_predicting_zero_scores_the_targets_mean_square():
    zero = torch.zeros(200, 4)
    weights = torch.zeros(4, 4)
    for name, function in kernels.FUNCTIONS.items():
        for length in (50, 150):
            assert kernels.window_mse(zero, weights, weights, function, length) == pytest.approx(
                kernels.zero_mse(function, length), rel=1e-6
            ), name


def test_a_short_fit_lowers_the_train_mse_and_records_every_field(tmp_path, monkeypatch):
    settings = kernels.Settings(steps=200, eval_every=50)
    threads = torch.get_num_threads()
    try:
        kernels.run(["mod3-1"], [16], [0], settings, tmp_path)
    finally:
        torch.set_num_threads(threads)
    [path] = tmp_path.glob("*.json")
    assert path.name == "mod3-1-d16-seed0.json"
    record = json.loads(path.read_text())
    for field in ("label", "kind", "train_mse", "curve", "norms", "cpu_seconds", "provenance"):
        assert field in record
    assert (record["function"], record["d"], record["seed"]) == ("mod3-1", 16, 0)
    assert record["settings"]["steps"] == 200 and record["settings"]["lr"] == 1e-3
    assert record["provenance"]["dtype"] == "float32"
    assert record["provenance"]["torch_threads"] == 1
    assert set(record["test_mse"]) == {"50", "100", "150"}
    curve = [mse for _, mse in record["curve"]]
    assert [step for step, _ in record["curve"]] == [0, 50, 100, 150, 200]
    assert all(b < a for a, b in itertools.pairwise(curve))  # the train MSE falls
    assert curve[-1] < 0.5 * curve[0]
    assert record["test_mse"]["50"] == pytest.approx(curve[-1])
    assert kernels._problem(record) is None
    # a second run skips it; a run of other settings refuses to overwrite it
    before = path.read_text()
    kernels.run(["mod3-1"], [16], [0], settings, tmp_path)
    assert path.read_text() == before
    with pytest.raises(SystemExit, match="other settings"):
        kernels.run(["mod3-1"], [16], [0], kernels.Settings(steps=10), tmp_path)


def test_a_fit_is_the_same_for_a_seed():
    settings = kernels.Settings(steps=20, eval_every=10)
    first, second = (kernels.fit("gt3", 4, 3, settings) for _ in range(2))
    assert first["test_mse"] == second["test_mse"] and first["curve"] == second["curve"]


def test_damaged_records_are_skipped_with_a_warning(tmp_path):
    (tmp_path / "a.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "b.json").write_text(json.dumps({"function": "eq3", "d": 8, "seed": 0}))
    with pytest.warns(UserWarning) as caught:
        assert kernels.read_records(tmp_path) == []
    assert len(caught) == 2


def test_the_page_table_matches_the_committed_records():
    """docs/length-generalization.md holds what ``positional_kernels.py report`` makes."""
    page = kernels.PAGE.read_text()
    match = kernels.MARK.search(page)
    assert match is not None
    records = kernels.read_records()
    assert len(records) == len(kernels.FUNCTIONS) * len(kernels.DIMS) * len(kernels.SEEDS)
    assert match[2] == kernels.table(records) + "\n"
