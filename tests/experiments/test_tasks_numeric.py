"""The numeric tasks (crasp_compiler/experiments/tasks/numeric.py): targets against plain-Python
definitions, and each task's PCOC program (the interpreter and the compiled model, hard
and softmax) against the targets."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from crasp_compiler.errors import CraspError
from crasp_compiler.experiments.tasks.base import NumericExample
from crasp_compiler.experiments.tasks.numeric import TASKS
from crasp_compiler.languages.pcoc import interpret_batch

BY_NAME = {task.name: task for task in TASKS}
NAMES = sorted(BY_NAME)


def _prefixes(x: list[float]) -> list[list[float]]:
    return [x[: i + 1] for i in range(len(x))]


def _best_subarray(x: list[float]) -> float:
    """The largest sum of a non-empty contiguous run, by trying every (start, end)."""
    return max(sum(x[j : k + 1]) for j in range(len(x)) for k in range(j, len(x)))


REFERENCES = {
    "num_cumsum": lambda x: [sum(p) for p in _prefixes(x)],
    "num_cummin": lambda x: [min(p) for p in _prefixes(x)],
    "num_median": lambda x: [statistics.median(p) for p in _prefixes(x)],
    "num_sort": sorted,
    "num_max_subarray": lambda x: [_best_subarray(p) for p in _prefixes(x)],
}


def test_the_five_tasks():
    assert len(TASKS) == 5
    assert set(BY_NAME) == set(REFERENCES)
    for task in TASKS:
        assert task.family == "numeric"
        assert task.crasp_class == "PCOC"
        assert task.value_range == 2.0
        assert task.program == f"{task.name}.pcoc"
        assert task.program_path.is_file()


@pytest.mark.parametrize("name", NAMES)
def test_targets_match_the_definitions(name):
    task, reference = BY_NAME[name], REFERENCES[name]
    rng = np.random.default_rng(1)
    for n in (1, 2, 3, 4, 7, 8, 16):
        for scale in (1, 10):
            x = scale * rng.uniform(-2, 2, size=n)
            if n > 3:
                x[1] = x[3]  # a tie
            want = np.array(reference([float(v) for v in x]))
            got = task.target(x)
            assert got.shape == (n,)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    batch = rng.uniform(-2, 2, size=(5, 6))
    np.testing.assert_allclose(task.target(batch), [task.target(row) for row in batch])


def test_targets_by_hand():
    x = np.array([3.0, -1.0, 4.0, -5.0, 2.0, 2.0])
    np.testing.assert_allclose(BY_NAME["num_median"].target(x), [3, 1, 3, 1, 2, 2])
    np.testing.assert_allclose(BY_NAME["num_max_subarray"].target(x), [3, 3, 6, 6, 6, 6])
    y = np.array([-3.0, -1.0, -4.0])
    np.testing.assert_allclose(BY_NAME["num_max_subarray"].target(y), [-3, -1, -1])


@pytest.mark.parametrize("scale", [1, 3, 10])
def test_sample_draws_uniform_values_at_the_scale(scale):
    task = BY_NAME["num_cumsum"]
    rng = np.random.default_rng(2)
    samples = [task.sample(rng, 8, scale=scale) for _ in range(200)]
    values = np.concatenate([s.inputs for s in samples])
    assert all(isinstance(s, NumericExample) and s.inputs.shape == (8,) for s in samples)
    assert np.abs(values).max() <= 2 * scale
    assert np.abs(values).max() > 1.9 * scale
    assert abs(values.mean()) < 0.1 * scale
    for s in samples[:5]:
        np.testing.assert_array_equal(s.targets, task.target(s.inputs))
    again = task.sample(np.random.default_rng(2), 8, scale=scale)
    np.testing.assert_array_equal(again.inputs, samples[0].inputs)


def _inputs(rng: np.random.Generator, n: int, rows: int = 8) -> np.ndarray:
    """Rows at scales 1, 10 and 1000 (training range [-2, 2] times the scale), and rows
    of integers with ties."""
    scales = np.repeat([1.0, 10.0, 1000.0], rows)[:, None]
    x = scales * rng.uniform(-2, 2, size=(3 * rows, n))
    ties = np.round(rng.uniform(-3, 3, size=(rows, n)))
    return np.concatenate([x, ties])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", [8, 1, 2, 5, 16])
def test_programs_match_the_targets(name, n):
    task = BY_NAME[name]
    x = _inputs(np.random.default_rng(n), n)
    want = task.target(x)
    for backend, mode in [("interpreter", "hard"), ("compiled", "hard"), ("compiled", "softmax")]:
        got = task.compiled_values(x, mode=mode, backend=backend)
        assert got.shape == x.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=f"{backend} {mode}")


@pytest.mark.parametrize("name", NAMES)
def test_scale_1000_stays_within_the_declared_bounds(name):
    task = BY_NAME[name]
    x = _inputs(np.random.default_rng(3), 16)
    interpret_batch(task.pcoc_program(), 16, x, check_promises=True)


def test_compiled_models_are_cached_per_n_and_mode():
    task = BY_NAME["num_median"]
    hard = task.compiled_model(4, "hard")
    assert task.compiled_model(4, "hard") is hard
    soft = task.compiled_model(4, "softmax")
    assert soft is not hard and soft.info["temperature"] > 1
    assert hard.info["n"] == 4 and hard.info["rounds"] == 4 + 4 // 2 + 1


def test_round_counts():
    rounds = {
        "num_cumsum": 3,
        "num_cummin": 3,
        "num_median": 13,
        "num_sort": 8,
        "num_max_subarray": 11,
    }
    for name, count in rounds.items():
        assert BY_NAME[name].compiled_model(8).info["rounds"] == count


def test_bad_calls():
    task = BY_NAME["num_cumsum"]
    with pytest.raises(CraspError, match="backend"):
        task.compiled_values(np.zeros((1, 4)), backend="gpu")
    with pytest.raises(CraspError, match="shape"):
        task.compiled_values(np.zeros(4))
    assert task.compiled_values(np.zeros((0, 4))).shape == (0, 4)


def test_interval_sampling_is_the_papers():
    """§5.2: training vectors are uniform in a random sub-interval of [−2, 2]; at a test
    scale c > 1 the interval is redrawn until it leaves [−2, 2], so few test vectors are
    in range (the paper's bound p_in ≤ 0.0034 for n = 8, c = 10; ≤ 0.4375 for n = 2,
    c = 2); uniform sampling keeps the earlier scheme."""
    task = BY_NAME["num_cumsum"]
    rng = np.random.default_rng(0)
    train = np.stack([task.sample(rng, 8).inputs for _ in range(2000)])
    assert np.all(np.abs(train) <= 2.0)
    spans = train.max(axis=1) - train.min(axis=1)
    assert np.median(spans) < 2.0  # a sub-interval each, not the whole range (median 4·…)
    for n, c, bound in ((8, 10, 0.0034), (2, 2, 0.4375)):
        test = np.stack([task.sample(rng, n, c).inputs for _ in range(2000)])
        inside = np.mean(np.all(np.abs(test) <= 2.0, axis=1))
        assert inside <= bound + 0.03, (n, c, inside)
        assert np.all(np.abs(test) <= 2.0 * c)
    a = task.sample(np.random.default_rng(5), 8, 3.0, "uniform").inputs
    b = 3.0 * np.random.default_rng(5).uniform(-2.0, 2.0, size=8)
    assert np.array_equal(a, b)
    with pytest.raises(ValueError, match="sampling must be one of"):
        task.sample(rng, 8, 1.0, "gaussian")
