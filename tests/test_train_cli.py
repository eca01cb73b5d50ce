"""The training commands ``crasp tasks``, ``train``, ``sweep``, ``finetune`` and ``plot``,
and the plots of :mod:`crasp_compiler.train.plots`.

Tiny runs (a few steps, ten test examples, bins up to LEN 16) check what the commands
print against the files they write; user errors exit 1 with a message, misuse exits 2.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner, Result
from matplotlib.figure import Figure

from crasp_compiler.cli import main
from crasp_compiler.tasks.registry import all_tasks
from crasp_compiler.train.loop import TrainConfig
from crasp_compiler.train.plots import (
    MSE_FLOOR,
    _draw_length_bins,
    _draw_value_scales,
    load_results,
    plot_length_bins,
    plot_value_scales,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PNG = b"\x89PNG\r\n\x1a\n"
TINY = ["--steps", "3", "--eval-every", "3", "--test-size", "10", "--device", "cpu", "--quiet"]

GRID = """out = "runs"
workers = 1

[base]
task = "tomita2"
steps = 3
eval_every = 3
test_size = 10
bins = [[1, 8], [9, 16]]
train_max = 8
device = "cpu"

[grid]
pe = ["ape", "nope"]
"""


def invoke(*args) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def ok(*args) -> Result:
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert result.exception is None
    return result


def user_error(*args) -> Result:
    """Exit status 1: a message on stderr, no traceback."""
    result = invoke(*args)
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "error:" in result.stderr
    assert "Traceback" not in result.output
    return result


def misuse(*args) -> Result:
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert "Error: " in result.stderr
    return result


def rows(text: str) -> dict[str, list[str]]:
    """The whitespace-separated cells of each output line, by first cell."""
    return {line.split()[0]: line.split()[1:] for line in text.splitlines() if line.strip()}


@pytest.fixture(scope="module")
def sweep_grid(tmp_path_factory) -> Path:
    """A finished two-run sweep (tomita2, APE and NoPE)."""
    path = tmp_path_factory.mktemp("sweep") / "grid.toml"
    path.write_text(GRID)
    ok("sweep", path, "--workers", 1)
    return path


@pytest.fixture(scope="module")
def numeric_run(tmp_path_factory) -> tuple[Path, str]:
    """A tiny num_cumsum run: its directory and what ``crasp train`` printed."""
    out = tmp_path_factory.mktemp("numeric") / "cumsum"
    result = ok("train", "num_cumsum", *TINY, "--n", 4, "--scales", "1,10", "--out", out)
    return out, result.output


# ------------------------------------------------------------------ tasks


def test_tasks_lists_every_task_with_its_class_and_program():
    lines = ok("tasks").output.splitlines()
    assert [line.split()[0] for line in lines] == list(all_tasks())
    assert len(lines) == 45
    table = rows(ok("tasks").output)
    assert table["tomita2"][:3] == ["regular", "C-RASP[∅]", "next_tomita2.cr"]
    assert table["tomita3"][:3] == ["regular", "none", "-"]
    assert table["num_sort"][:3] == ["numeric", "PCOC", "num_sort.pcoc"]


def test_tasks_filters_by_family():
    table = rows(ok("tasks", "--family", "numeric").output)
    expected = [name for name, task in all_tasks().items() if task.family == "numeric"]
    assert list(table) == expected and len(expected) == 5
    assert all(cells[0] == "numeric" for cells in table.values())
    misuse("tasks", "--family", "context_free")


# ------------------------------------------------------------------ train


def test_train_writes_the_files_and_prints_the_table(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default output directory is relative: runs/...
    result = ok("train", "tomita2", *TINY, "--pe", "nope", "--seed", 3, "--bins", "1-8,9-16")
    out = Path("runs/tomita2-nope-seed3")
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "model.safetensors",
        "results.json",
    ]
    results = json.loads((out / "results.json").read_text())
    assert results["steps"] == 3
    assert results["config"]["pe"] == "nope" and results["config"]["seed"] == 3
    assert results["config"]["train_max"] == 8  # capped at the end of the first bin
    assert results["config"]["progress"] is False
    table = rows(result.output)
    assert table["bin"] == ["trained", "compiled", "agreement"]
    for name in ("1-8", "9-16"):
        expected = [results[key][name] for key in ("accuracy", "compiled_accuracy", "agreement")]
        assert table[name] == [f"{value:.3f}" for value in expected]
    assert results["compiled_accuracy"]["9-16"] == 1.0  # the program is exact
    assert "steps: 3 (no early stop)" in result.output
    assert str(out) in result.output


def test_train_numeric_prints_mse_per_scale(numeric_run):
    out, output = numeric_run
    results = json.loads((out / "results.json").read_text())
    assert results["n"] == 4 and results["scales"] == [1, 10]
    assert results["config"]["numeric_kind"] == "positional"
    assert "num_cumsum (numeric, n=4), positional model, seed 0" in output
    table = rows(output)
    assert " ".join(table["scale"]) == "mse trained mse compiled close trained close compiled"
    for scale in ("1", "10"):
        trained, compiled = results["metrics"][scale], results["compiled_metrics"][scale]
        assert table[scale][0] == f"{trained['mse']:.3g}"
        assert float(table[scale][1]) == pytest.approx(compiled["mse"], abs=1e-12)
        assert table[scale][3] == "1.000"  # the compiled program is close everywhere


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tomita9"], "unknown task 'tomita9'"),
        (["tomita2", "--pe", "alibi"], "unknown positional encoding 'alibi'"),
        (["tomita2", "--device", "gpu0"], "--device 'gpu0'"),
    ],
)
def test_train_user_errors(args, message, tmp_path):
    result = user_error("train", *TINY, *args, "--out", tmp_path / "run")
    assert message in result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available")
def test_train_refuses_cuda_without_it(tmp_path):
    result = user_error("train", "tomita2", *TINY, "--device", "cuda", "--out", tmp_path / "r")
    assert "CUDA is not available" in result.stderr


def test_train_misuse():
    assert "--pe: only for sequence tasks" in misuse("train", "num_cumsum", "--pe", "nope").stderr
    assert "--n: only for numeric tasks" in misuse("train", "tomita2", "--n", "4").stderr
    assert "is not LO-HI" in misuse("train", "tomita2", "--bins", "1-8,9").stderr


def test_train_defaults_are_train_configs():
    command = main.commands["train"]
    options = {p.name: p.default for p in command.params}
    defaults = {f.name: f.default for f in fields(TrainConfig)}
    pairs = {
        "pe": "pe",
        "steps": "steps",
        "seed": "seed",
        "lr": "lr",
        "d_model": "d_model",
        "heads": "n_heads",
        "batch_size": "batch_size",
        "test_size": "test_size",
        "eval_every": "eval_every",
        "device": "device",
        "numeric_kind": "numeric_kind",
        "n": "numeric_n",
    }
    assert {k: options[k] for k in pairs} == {k: defaults[v] for k, v in pairs.items()}


# ------------------------------------------------------------------ sweep


def test_sweep_runs_the_grid_and_then_skips_it(sweep_grid):
    out = sweep_grid.parent / "runs"
    files = [out / name / "results.json" for name in ("ape", "nope")]
    stamps = [file.stat().st_mtime_ns for file in files]
    result = ok("sweep", sweep_grid, "--workers", 1)
    assert [file.stat().st_mtime_ns for file in files] == stamps
    table = rows(result.output)
    for name, file in zip(("ape", "nope"), files, strict=True):
        accuracy = json.loads(file.read_text())["accuracy"]
        cells = ["3", "steps", "1-8:", f"{accuracy['1-8']:.3f}"]
        assert table[name] == [*cells, "9-16:", f"{accuracy['9-16']:.3f}"]
    assert "2 of 2 runs finished" in result.output


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[base\nsteps = 3", "invalid TOML"),
        ('[base]\ntask = "tomita2"\nstep = 3\n[grid]\npe = ["ape"]', "not TrainConfig fields"),
        ('[base]\ntask = "tomita2"\n[grid]\npe = "ape"', "pe must be a non-empty list"),
        ('[grid]\ntask = ["tomita2", "tomita9"]', "unknown task 'tomita9'"),
        ('[grid]\ntask = ["tomita2"]\npe = ["alibi"]', "unknown positional encoding 'alibi'"),
    ],
)
def test_sweep_bad_grid_files(tmp_path, text, message):
    path = tmp_path / "grid.toml"
    path.write_text(text)
    assert message in user_error("sweep", path).stderr
    assert not (tmp_path / "grid").exists()  # nothing ran


@pytest.mark.skipif(importlib.util.find_spec("ray") is not None, reason="ray is installed")
def test_sweep_ray_address_without_ray(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text(GRID)
    assert "ray is not installed" in user_error("sweep", path, "--ray-address", "auto").stderr


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")
def test_sweep_as_ray_tasks(tmp_path):
    """With ray installed (the `ray` extra), each run is a task on a local Ray instance."""
    path = tmp_path / "grid.toml"
    path.write_text(GRID)
    result = ok("sweep", path, "--ray-address", "local")
    runs = sorted(p.parent.name for p in (tmp_path / "runs").glob("*/results.json"))
    assert len(runs) == 2
    assert "2 of 2 runs finished" in result.output


# ------------------------------------------------------------------ finetune


@pytest.mark.parametrize(
    ("args", "verdict"),
    [(["--optimizer", "sgd", "--weight-decay", "0"], "survived"), (["--lr", "1e-2"], "lost")],
)
def test_finetune_reports_before_and_after(tmp_path, args, verdict):
    out = tmp_path / "finetune.json"
    common = ["--n", 4, "--steps", 5, "--test-size", 16, "--scales", "1,10", "-o", out]
    result = ok("finetune", "num_cumsum", *common, *args)
    results = json.loads(out.read_text())
    assert results["config"]["n"] == 4 and results["config"]["steps"] == 5
    table = rows(result.output)
    for scale in ("1.0", "10.0"):
        before, after = results["before"][scale], results["after"][scale]
        assert table[scale][:2] == [
            f"{before['max_abs_error']:.3g}",
            f"{after['max_abs_error']:.3g}",
        ]
    assert result.output.splitlines()[-2].endswith(verdict)
    assert results["exact_after"] == (verdict == "survived")


def test_finetune_refuses_a_sequence_task():
    assert "not a numeric task" in user_error("finetune", "tomita1", "--steps", 1).stderr


# ------------------------------------------------------------------ plots


def test_plot_writes_pngs_for_a_sweep_and_a_numeric_run(sweep_grid, numeric_run, tmp_path):
    result = ok("plot", sweep_grid, numeric_run[0], "-o", tmp_path / "plots")
    paths = [Path(line) for line in result.output.splitlines()]
    assert [p.name for p in paths] == ["length_bins_tomita2.png", "value_scales_num_cumsum.png"]
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(PNG) and len(data) > 5000


def test_plot_loads_each_results_file_once(sweep_grid):
    results = load_results([sweep_grid, sweep_grid.parent, sweep_grid.parent / "runs" / "ape"])
    assert sorted(r["config"]["pe"] for r in results) == ["ape", "nope"]


def test_plot_errors(tmp_path):
    assert "no results.json" in user_error("plot", tmp_path, "-o", tmp_path / "p").stderr
    assert "no such file" in user_error("plot", tmp_path / "missing", "-o", tmp_path).stderr


def sequence_result(task: str, pe: str, seed: int, accuracy: list[float]) -> dict:
    bins = {"1-8": [1, 8], "9-16": [9, 16]}
    return {
        "task": task,
        "kind": "sequence",
        "config": {"pe": pe, "seed": seed},
        "bins": bins,
        "accuracy": dict(zip(bins, accuracy, strict=True)),
        "compiled_accuracy": {"1-8": 1.0, "9-16": 1.0},
    }


def numeric_result(kind: str, seed: int, mse: list[float]) -> dict:
    def metrics(values):
        return {c: {"mse": m} for c, m in zip(("1", "10"), values, strict=True)}

    return {
        "task": "num_cumsum",
        "kind": "numeric",
        "n": 4,
        "config": {"numeric_kind": kind, "seed": seed},
        "metrics": metrics(mse),
        "compiled_metrics": metrics([0.0, 1e-30]),
    }


def test_length_bins_plot_draws_means_bands_and_the_compiled_reference(tmp_path):
    runs = [
        sequence_result("d2", "ape", 0, [1.0, 0.2]),
        sequence_result("d2", "ape", 1, [0.8, 0.4]),
        sequence_result("d2", "nope", 0, [0.5, 0.0]),
    ]
    axes = Figure().add_subplot()
    _draw_length_bins(axes, "d2", runs)
    lines = {line.get_label(): line for line in axes.get_lines()}
    assert set(lines) == {"ape (mean, min–max of 2 seeds)", "nope (1 seed)", "compiled program"}
    np.testing.assert_allclose(lines["ape (mean, min–max of 2 seeds)"].get_ydata(), [0.9, 0.3])
    assert lines["compiled program"].get_linestyle() == "--"
    assert len(axes.collections) == 1  # one band: only APE has several seeds
    assert axes.get_title() == "d2 — C-RASP[∅]"
    written = plot_length_bins([*runs, sequence_result("parity", "ape", 0, [0.5, 0.5])], tmp_path)
    assert [p.name for p in written] == [
        "length_bins_d2.png",
        "length_bins_parity.png",
        "length_bins.png",
    ]


def test_value_scales_plot_floors_a_zero_compiled_mse(tmp_path):
    runs = [numeric_result("positional", 0, [1.0, 100.0]), numeric_result("standard", 0, [2, 300])]
    axes = Figure().add_subplot()
    _draw_value_scales(axes, "num_cumsum", runs)
    lines = {line.get_label(): line for line in axes.get_lines()}
    compiled = f"compiled program (MSE ≤ {MSE_FLOOR:g} drawn at {MSE_FLOOR:g})"
    assert set(lines) == {"positional (1 seed)", "standard (1 seed)", compiled}
    np.testing.assert_allclose(lines[compiled].get_ydata(), [MSE_FLOOR, MSE_FLOOR])
    np.testing.assert_allclose(lines["standard (1 seed)"].get_xdata(), [1.0, 10.0])
    assert axes.get_yscale() == "log"
    assert plot_value_scales(runs, tmp_path) == [tmp_path / "value_scales_num_cumsum.png"]
    assert plot_length_bins(runs, tmp_path) == []  # no sequence results
