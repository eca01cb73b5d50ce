"""The training commands ``crasp tasks``, ``train``, ``sweep``, ``finetune`` and ``plot``,
and the plots of :mod:`crasp_compiler.experiments.train.plots`.

Tiny runs (a few steps, ten test examples, bins up to LEN 16) check what the commands
print against the files they write; user errors exit 1 with a message, misuse exits 2.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import click
import numpy as np
import pytest
import torch
from click.testing import Result
from matplotlib.figure import Figure

from crasp_compiler.cli import main
from crasp_compiler.experiments.tasks.registry import all_tasks
from crasp_compiler.experiments.train.loop import TrainConfig
from crasp_compiler.experiments.train.plots import (
    MSE_FLOOR,
    _draw_length_bins,
    _draw_value_scales,
    load_results,
    plot_length_bins,
    plot_value_scales,
)
from crasp_compiler.experiments.train.sweep import load_grid
from tests.support.cli import invoke

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


def ok(*args) -> Result:
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert result.exception is None
    return result


def user_error(*args) -> Result:
    """Exit status 1: a message on stderr, no traceback, no escaped newlines or doubled
    prefixes in it."""
    result = invoke(*args)
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "error:" in result.stderr
    assert "Traceback" not in result.output
    assert "\\n" not in result.stderr and "error: error:" not in result.stderr
    return result


def misuse(*args) -> Result:
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert "Error: " in result.stderr
    return result


def run_dir(out: Path, name: str) -> Path:
    """The directory of the run ``name`` (``name-<config hash>``) under ``out``."""
    (found,) = [p for p in out.iterdir() if p.name.rsplit("-", 1)[0] == name]
    return found


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
    header, *lines = ok("tasks").output.splitlines()
    assert header.split() == ["name", "family", "class", "program", "description"]
    assert [line.split()[0] for line in lines] == list(all_tasks())
    assert len(lines) == 45
    table = rows(ok("tasks").output)
    assert table["tomita2"][:3] == ["regular", "C-RASP[∅]", "next_tomita2.cr"]
    assert table["tomita3"][:3] == ["regular", "none", "-"]
    assert table["num_sort"][:3] == ["numeric", "PCOC", "num_sort.pcoc"]


def test_tasks_filters_by_family():
    table = rows(ok("tasks", "--family", "numeric").output)
    assert table.pop("name") == ["family", "class", "program", "description"]
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
        (["tomita2", "--pe", "xpos"], "unknown positional encoding 'xpos'"),
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


@pytest.mark.parametrize(
    ("device", "message"),
    [("meta", "meta tensors hold no values"), ("hpu", "torch cannot compute there")],
)
def test_train_refuses_devices_torch_cannot_compute_on(tmp_path, device, message):
    """``--device meta`` / ``hpu`` gave tracebacks once training had started."""
    result = user_error("train", "tomita2", *TINY, "--device", device, "--out", tmp_path / "r")
    assert message in result.stderr
    assert not (tmp_path / "r").exists()


def test_train_misuse():
    assert "--pe: only for sequence tasks" in misuse("train", "num_cumsum", "--pe", "nope").stderr
    assert "--n: only for numeric tasks" in misuse("train", "tomita2", "--n", "4").stderr
    assert "is not LO-HI" in misuse("train", "tomita2", "--bins", "1-8,9").stderr


@pytest.mark.parametrize("bins", ["1-\u00b2", "\u0661-\u0665", "1-8,+9-16", " -3"])
def test_train_refuses_bins_that_are_not_ascii_digits(bins):
    result = misuse("train", "tomita2", "--bins", bins)
    assert "is not LO-HI" in result.stderr and "Traceback" not in result.output


def test_train_checks_the_output_directory_first(tmp_path, monkeypatch):
    from crasp_compiler.experiments.train import loop

    monkeypatch.setattr(loop, "_fit", lambda *a, **k: pytest.fail("training started"))
    (tmp_path / "file").write_text("x")
    result = user_error("train", "tomita2", *TINY, "--out", tmp_path / "file" / "run")
    assert f"{tmp_path / 'file' / 'run'}: error: cannot write to the output directory" in (
        result.stderr
    )


def fill_disk(patch: pytest.MonkeyPatch) -> None:
    """Every file write lands half its bytes, then fails: the disk is full."""
    real = Path.write_bytes

    def full(self, data):
        real(self, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    patch.setattr(Path, "write_bytes", full)


def test_train_resumes_an_interrupted_run(tmp_path, monkeypatch):
    from crasp_compiler.experiments.train import loop

    args = ["train", "tomita2", *TINY, "--eval-every", 1, "--bins", "1-8", "--no-early-stop"]
    args += ["--out", tmp_path]
    calls, real = [], loop.sample_examples

    def ctrl_c_at_the_third_batch(*a, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*a, **kw)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loop, "sample_examples", ctrl_c_at_the_third_batch)
        result = invoke(*args)
    assert result.exit_code == 130
    assert f"interrupted; the same command resumes from the checkpoint in {tmp_path}" in (
        result.stderr
    )
    result = ok(*args)
    assert "steps: 3 (no early stop; resumed from the checkpoint at step 2)" in result.output
    assert json.loads((tmp_path / "results.json").read_text())["resumed_from"] == 2
    assert not (tmp_path / "checkpoint.pt").exists()


def test_train_on_a_full_disk_names_the_file(tmp_path, monkeypatch):
    fill_disk(monkeypatch)
    result = user_error("train", "tomita2", *TINY, "--bins", "1-8", "--out", tmp_path / "r")
    checkpoint = tmp_path / "r" / "checkpoint.pt"  # the first file written
    assert f"{checkpoint}: error: cannot write: No space left on device" in result.stderr
    assert list((tmp_path / "r").iterdir()) == []  # no partial file


def test_train_defaults_are_train_configs():
    command = main.get_command(click.Context(main), "train")  # found in experiments.cli
    assert command is not None
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
    files = [run_dir(out, name) / "results.json" for name in ("ape", "nope")]
    stamps = [file.stat().st_mtime_ns for file in files]
    result = ok("sweep", sweep_grid, "--workers", 1)
    assert [file.stat().st_mtime_ns for file in files] == stamps
    table = rows(result.output)
    for file in files:
        accuracy = json.loads(file.read_text())["accuracy"]
        cells = ["3", "steps", "1-8:", f"{accuracy['1-8']:.3f}"]
        line = [*cells, "9-16:", f"{accuracy['9-16']:.3f}", "(earlier)"]
        assert table[file.parent.name] == line
    assert "2 of 2 runs finished" in result.output


T2 = '[base]\ntask = "tomita2"\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[base\nsteps = 3", "grid.toml:1:6: error: invalid TOML: "),
        (T2 + "step = 3\n[grid]\npe = ['ape']", "grid.toml:3:1: error: [base] step: not a"),
        (T2 + "[grid]\npe = 'ape'", "grid.toml:4:1: error: [grid] pe must be a non-empty list"),
        (T2 + "[grid]\npe = []", "[grid] pe must be a non-empty list"),
        ('[grid]\ntask = ["tomita2", "tomita9"]', "[grid] task[1]: unknown task 'tomita9'"),
        ('[grid]\ntask = ["tomita2"]\npe = ["xpos"]', "[grid] pe[0] must be one of ape,"),
        (T2 + 'steps = "3"', "grid.toml:3:1: error: [base] steps must be an integer >= 1, not"),
        (T2 + "[grid]\nbins = [[1, 8], [9, 16]]", "4:1: error: [grid] bins[0][0] = 1: not a pair"),
        (T2 + "bins = [1, 8]", "grid.toml:3:1: error: [base] bins[0] = 1: not a pair of integers"),
        (T2 + "bins = [[8, 1]]", "grid.toml:3:1: error: [base] bins[0] = [8, 1]: lo is above hi"),
        (T2 + "[task.tomita2]\nlr = 'fast'", "grid.toml:4:1: error: [task.tomita2] lr must be"),
        (T2 + "[task.d2]\nlr = 0.1", "[task.d2]: no run of the grid has task 'd2'"),
        (T2 + "[task.tomita2]\ntask = 'd2'", "[task.tomita2] task: cannot be overridden"),
        (T2 + "progress = true", "[base] progress: set by the sweep"),
        ("base = 3", "grid.toml:1:1: error: base must be a table"),
        ('task = "d2"\n[grid]\ntask = ["d2"]', "grid.toml:1:1: error: task must be a table"),
        ("grid = [1]\n" + T2, "grid must be a table"),
        (T2 + "[task]\ntomita2 = 3", "[task] tomita2 must be a table"),
        ("colour = 3\n" + T2, "grid.toml:1:1: error: colour: unknown key; expected one of"),
        ("workers = 0\n" + T2, "workers must be an integer in [1, 256], not 0"),
        ("gpus = 'x'\n" + T2, "gpus must be a number >= 0"),
        ("out = 3\n" + T2, "out must be a path (a string)"),
        (
            "[base]\nsteps = 3",
            "no task: give [base] task or program, or a [grid] task or program list",
        ),
        ('[grid]\nout_dir = ["../../x"]\ntask = ["tomita2"]', "[grid] out_dir[0]: '../../x' is"),
        (T2 + 'out_dir = "/tmp/x"', "[base] out_dir: '/tmp/x' is outside the grid's out"),
        (T2 + '[task.tomita2]\nout_dir = "a/../../b"', "[task.tomita2] out_dir: 'a/../../b'"),
        (T2 + f"out_dir = 'a/{'b' * 201}'", "[base] out_dir: a directory name in it is longer"),
        (T2 + "out_dir = '.'", "[base] out_dir: '.' names no directory inside the grid's out"),
    ],
)
def test_sweep_bad_grid_files(tmp_path, text, message):
    path = tmp_path / "grid.toml"
    path.write_text(text)
    result = user_error("sweep", path)
    assert message in result.stderr
    assert result.stderr.startswith(f"{path}:")
    assert not (tmp_path / "grid").exists()  # nothing ran
    assert not (tmp_path.parent / "x").exists() and not (tmp_path.parent / "b").exists()


def test_grid_runs_live_inside_out_keyed_by_their_config(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text(GRID + "lr = [0.01, 1e-2, 0.02]\n[task.tomita2]\nout_dir = 'sub/t2'\n")
    runs, settings = load_grid(path)
    assert len(runs) == 4  # 0.01 and 1e-2 are one configuration: one run
    out = settings["out"]
    assert all(run.out_dir.parent == out / "sub" for run in runs)
    assert len({run.out_dir for run in runs}) == 4
    assert all(run.name.startswith("sub/t2-") for run in runs)
    path.write_text(GRID)
    names = sorted(run.name for run in load_grid(path)[0])
    assert [name.rsplit("-", 1)[0] for name in names] == ["ape", "nope"]
    path.write_text(GRID.replace("steps = 3", "steps = 4"))  # [base] changed: new runs
    assert not set(names) & {run.name for run in load_grid(path)[0]}
    path.write_text(GRID.replace("[grid]", "[grid]\nbins = [[[1, 8]], [[1, 8], [9, 16]]]"))
    names = sorted(run.name for run in load_grid(path)[0])
    assert all("/" not in name and " " not in name for name in names)
    assert len(names) == 4


def test_sweep_does_not_reuse_results_of_another_base(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text(GRID.replace('pe = ["ape", "nope"]', 'pe = ["ape"]'))
    ok("sweep", path)
    path.write_text(GRID.replace('pe = ["ape", "nope"]', 'pe = ["ape"]').replace("= 3", "= 2"))
    result = ok("sweep", path)
    runs = sorted((tmp_path / "runs").glob("*/results.json"))
    assert len(runs) == 2
    (new,) = [json.loads(p.read_text()) for p in runs if p.parent.name in result.output]
    assert new["steps"] == 2


def test_sweep_reruns_a_run_whose_results_are_truncated(sweep_grid, tmp_path):
    path = tmp_path / "grid.toml"
    shutil.copytree(sweep_grid.parent / "runs", tmp_path / "runs")
    path.write_text(GRID)
    file = run_dir(tmp_path / "runs", "ape") / "results.json"
    file.write_text(file.read_text()[:100])  # what an interrupted in-place write left
    other = run_dir(tmp_path / "runs", "nope") / "results.json"
    stamp = other.stat().st_mtime_ns
    result = ok("sweep", path)
    assert json.loads(file.read_text())["steps"] == 3
    assert other.stat().st_mtime_ns == stamp
    assert "2 of 2 runs finished" in result.output


def test_sweep_reports_failed_runs_one_per_line(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text(GRID.replace("bins = [[1, 8], [9, 16]]", "bins = [[3, 3]]") + "task = ['d2']")
    result = user_error("sweep", path, "--quiet")
    lines = result.stderr.splitlines()
    assert len(lines) == 3 and lines[-1] == "2 errors"
    assert all(
        ": error: run " in line and "no bin has a feasible length" in line for line in lines[:2]
    )


def test_sweep_refuses_an_unwritable_out_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    path = tmp_path / "grid.toml"
    path.write_text(GRID.replace('out = "runs"', 'out = "file/runs"'))
    result = user_error("sweep", path)
    assert f"{tmp_path / 'file' / 'runs'}: error: cannot write to the output directory" in (
        result.stderr
    )


INTERRUPTED_GRID = """out = "runs"
workers = 2

[base]
steps = 1000000
eval_every = 1000000
test_size = 2
bins = [[1, 4]]
d_model = 8
device = "cpu"
compare_compiled = false

[grid]
task = ["tomita2", "tomita1", "parity"]

[task.tomita2]
steps = 1
"""


def wait_for(condition, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def ctrl_c(args: list, ready, send=None) -> subprocess.CompletedProcess:
    """Run ``crasp ARGS`` in its own process group, wait until ``ready()``, then send
    SIGINT to the whole group (what Ctrl-C in a terminal does), or call ``send(pid)``;
    after the command exits no process of the group may be left."""
    command = [sys.executable, "-m", "crasp_compiler.cli", *map(str, args)]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # even if ignored here
    )
    try:
        wait_for(ready)
        (send or (lambda pid: os.killpg(pid, signal.SIGINT)))(process.pid)
        stdout, stderr = process.communicate(timeout=20)
        wait_for(lambda: group_is_gone(process.pid), 5)  # no worker is left running
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def group_is_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_ctrl_c_stops_a_sweep_and_reports_what_finished(tmp_path):
    """The workers stop, the pending run never starts, the finished one is listed."""
    path = tmp_path / "grid.toml"
    path.write_text(INTERRUPTED_GRID)
    out = tmp_path / "runs"

    def ready():  # tomita2 finished, tomita1 and parity training
        return len(list(out.glob("*/results.json"))) == 1 and len(list(out.glob("*"))) == 3

    done = ctrl_c(["sweep", path], ready)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr
    assert "interrupted; the same command resumes the unfinished runs" in done.stderr
    assert rows(done.stdout)[run_dir(out, "tomita2").name][:2] == ["1", "steps"]
    assert "1 of 3 runs finished" in done.stdout
    assert not list(out.glob("*/.*.tmp"))


def test_a_killed_worker_fails_its_runs_instead_of_hanging(tmp_path):
    """A worker killed outright (the out-of-memory killer) ends the sweep with errors."""
    path = tmp_path / "grid.toml"
    path.write_text(INTERRUPTED_GRID)
    out = tmp_path / "runs"

    def kill_a_worker(pid: int) -> None:
        workers = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
        os.kill(int(workers.stdout.split()[0]), signal.SIGKILL)

    def ready():
        return len(list(out.glob("*/results.json"))) == 1 and len(list(out.glob("*"))) == 3

    done = ctrl_c(["sweep", path], ready, kill_a_worker)
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if not line.startswith("progress: ")]
    assert lines[-1] == "2 errors" and "Traceback" not in done.stderr
    assert all("failed: a worker process died" in line for line in lines[1:-1])
    assert done.stdout.count("failed: a worker process died") == 2  # as they ended


def test_ctrl_c_stops_train_and_says_where_it_resumes(tmp_path):
    out = tmp_path / "run"
    args = ["train", "tomita2", *TINY, "--steps", 10**6, "--eval-every", 1, "--test-size", 2]
    args += ["--bins", "1-4", "--d-model", 8, "--no-compiled", "--no-early-stop", "--out", out]
    done = ctrl_c(args, lambda: (out / "checkpoint.pt").exists())
    assert done.returncode == 130, done.stderr
    assert done.stderr == f"interrupted; the same command resumes from the checkpoint in {out}\n"
    assert not (out / "results.json").exists()


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


def test_finetune_one_machine():
    """n = 1: no attention at all (the compiled model is exact); only --params values has
    nothing to train."""
    args = ["finetune", "num_cumsum", "--n", 1, "--steps", 2, "--test-size", 4, "--scales", "1"]
    output = ok(*args).output
    assert "adamw on all weights (3 tensors)" in output and "exactness (max error" in output
    result = user_error(*args, "--params", "values")
    assert "nothing to train: the compiled model of num_cumsum at n=1 has no attention" in (
        result.stderr
    )


def test_finetune_checks_the_output_path_first(tmp_path, monkeypatch):
    from crasp_compiler.experiments.train import finetune

    monkeypatch.setattr(finetune, "_evaluate", lambda *a: pytest.fail("fine-tuning started"))
    (tmp_path / "file").write_text("x")
    result = user_error("finetune", "num_cumsum", "-o", tmp_path / "file" / "out.json")
    assert str(tmp_path / "file") in result.stderr


# ------------------------------------------------------------------ plots


def test_plot_writes_pngs_for_a_sweep_and_a_numeric_run(sweep_grid, numeric_run, tmp_path):
    result = ok("plot", sweep_grid, numeric_run[0], "-o", tmp_path / "plots")
    paths = [Path(line) for line in result.output.splitlines()]
    assert [p.name for p in paths] == ["length_bins_tomita2.png", "value_scales_num_cumsum.png"]
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(PNG) and len(data) > 5000


def test_plot_loads_each_results_file_once(sweep_grid):
    ape = run_dir(sweep_grid.parent / "runs", "ape")
    results = load_results([sweep_grid, sweep_grid.parent, ape])
    assert sorted(r["config"]["pe"] for r in results) == ["ape", "nope"]


def test_plot_errors(tmp_path):
    result = user_error("plot", tmp_path, "-o", tmp_path / "p")
    assert f"{tmp_path}: error: no complete results.json here" in result.stderr
    assert "no such file" in user_error("plot", tmp_path / "missing", "-o", tmp_path).stderr


def test_plot_skips_a_truncated_results_json_with_a_warning(sweep_grid, tmp_path):
    shutil.copytree(sweep_grid.parent / "runs", tmp_path / "runs")
    file = run_dir(tmp_path / "runs", "ape") / "results.json"
    file.write_text(file.read_text()[:100])
    result = ok("plot", tmp_path / "runs", "-o", tmp_path / "plots")
    assert f"warning: {file}: skipped, not a complete results.json" in result.stderr
    assert [Path(line).name for line in result.stdout.splitlines()] == ["length_bins_tomita2.png"]


def test_plot_on_a_full_disk_names_the_file_and_keeps_the_old_plot(sweep_grid, tmp_path):
    plots = tmp_path / "plots"
    ok("plot", sweep_grid, "-o", plots)
    png = plots / "length_bins_tomita2.png"
    before = png.read_bytes()

    with pytest.MonkeyPatch.context() as patch:
        fill_disk(patch)
        result = user_error("plot", sweep_grid, "-o", plots)
    assert f"{png}: error: cannot write: No space left on device" in result.stderr
    assert png.read_bytes() == before
    assert sorted(p.name for p in plots.iterdir()) == ["length_bins_tomita2.png"]


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


def test_chomsky_runs_report_per_token_accuracy(tmp_path):
    """The randomized-PE paper scores per output token: Chomsky runs report it per bin
    (in results.json and in the table), next to whole-sequence accuracy."""
    out = tmp_path / "parity"
    result = ok("train", "parity_check", *TINY, "--out", out)
    results = json.loads((out / "results.json").read_text())
    tokens = results["position_accuracy"]
    assert set(tokens) == set(results["accuracy"]) and all(0 <= v <= 1 for v in tokens.values())
    # parity has one output position per sequence: per token is per sequence here
    assert all(tokens[b] == pytest.approx(results["accuracy"][b]) for b in tokens)
    header = next(line for line in result.output.splitlines() if line.startswith("bin"))
    assert header.split()[:4] == ["bin", "trained", "per", "token"]


def test_train_the_token_mlp_baseline(tmp_path):
    """--model token_mlp trains the random baseline (positions: none, without --pe);
    with another --pe, or on a numeric task, it is refused in one line."""
    ok("train", "tomita2", *TINY, "--model", "token_mlp", "--out", tmp_path / "b")
    results = json.loads((tmp_path / "b" / "results.json").read_text())
    assert results["config"]["model"] == "token_mlp" and results["config"]["pe"] == "nope"
    assert (
        "pe must be 'nope'"
        in user_error(
            "train",
            "tomita2",
            *TINY,
            "--model",
            "token_mlp",
            "--pe",
            "sin",
            "--out",
            tmp_path / "c",
        ).stderr
    )
    assert "only for sequence tasks" in misuse("train", "num_cumsum", "--model", "token_mlp").stderr


def test_train_a_randomized_base_and_its_position_range(tmp_path, monkeypatch):
    """--random-base picks what reads the randomized positions (every base the models
    know) and --max-positions their range; both are recorded, the default folder names
    the base, and --random-base without --pe random is refused in one line."""
    from crasp_compiler.experiments.cli import train_command
    from crasp_compiler.experiments.train.models import RANDOM_BASES

    choices = next(p for p in train_command.params if p.name == "random_base")
    assert tuple(choices.type.choices) == RANDOM_BASES
    monkeypatch.chdir(tmp_path)
    args = ["--pe", "random", "--random-base", "relative", "--max-positions", "600"]
    result = ok("train", "even_pairs", *TINY, *args)
    assert "pe random (relative at the sampled positions)" in result.output
    results = json.loads(Path("runs/even_pairs-random-relative-seed0/results.json").read_text())
    assert results["config"]["random_base"] == "relative"
    assert results["config"]["max_positions"] == 600
    assert "only with --pe random" in misuse("train", "even_pairs", "--random-base", "rope").stderr
    assert "only for sequence tasks" in misuse("train", "num_cumsum", "--max-positions", "9").stderr
