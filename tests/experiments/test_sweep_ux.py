"""What ``crasp sweep`` and ``crasp train`` show a person: the sweep's progress (one line
per run as it ends, the bar or progress lines), the grid file's error messages (key path,
line and column), one-line error texts (no literal ``\\n``, no doubled ``error:``), the
run sizes of the defaults and presets, and the time estimate of a long run.

Tiny runs: a few steps, ten test examples, bins up to LEN 16, d_model 8.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from crasp_compiler.errors import CraspError, Diagnostic, Span
from crasp_compiler.experiments.train import loop
from crasp_compiler.experiments.train.evaluate import one_line
from crasp_compiler.experiments.train.loop import PRESETS, TrainConfig
from crasp_compiler.experiments.train.sweep import (
    SweepProgress,
    finished,
    load_grid,
    run_sweep,
)
from tests.support.cli import invoke

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--steps", "3", "--eval-every", "3", "--test-size", "10", "--device", "cpu"]
GRID = """out = "runs"
workers = 1

[base]
task = "tomita2"
steps = 3
eval_every = 3
test_size = 10
bins = [[1, 8], [9, 16]]
train_max = 8
d_model = 8
device = "cpu"
compare_compiled = false

[grid]
pe = ["ape", "nope", "sin"]
"""


def user_error(*args) -> str:
    """Exit status 1 with a message on stderr: no traceback, no escaped newline, no
    doubled prefix; the stderr text."""
    result = invoke(*args)
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert "\\n" not in result.stderr and "error: error:" not in result.stderr
    return result.stderr


# ------------------------------------------------------------------ sweep progress


def test_sweep_prints_a_line_per_run_as_it_ends_and_the_progress(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text(GRID)
    result = invoke("sweep", path, "--workers", 2, "--no-bar")
    assert result.exit_code == 0, result.output
    runs, _ = load_grid(path)
    lines = result.stdout.splitlines()
    assert len(lines) == 4 and lines[-1] == "3 of 3 runs finished"
    assert sorted(line.split()[0] for line in lines[:3]) == sorted(run.name for run in runs)
    for line in lines[:3]:
        assert re.fullmatch(r"\S+ +3 steps  1-8: [01]\.\d{3}  9-16: [01]\.\d{3}  \(\d+ s\)", line)
    err = result.stderr.splitlines()
    assert err[0] == f"{path}: 3 runs, 0 finished earlier, 3 to train (2 workers)"
    assert [line.split(";")[0] for line in err[1:]] == [
        f"progress: {k} of 3 runs ended ({k} done, 0 failed, {3 - k} left)" for k in (1, 2, 3)
    ]
    assert re.search(r"; 0:\d\d elapsed, about 0:\d\d left$", err[1])
    # started again: every run finished earlier, nothing trains, no progress lines
    again = invoke("sweep", path, "--no-bar")
    assert again.stdout.count("(earlier)") == 3 and "progress:" not in again.stderr
    assert "3 finished earlier, 0 to train (1 worker)" in again.stderr


def test_run_sweep_reports_each_run_when_it_ends(tmp_path):
    """``on_finish`` is called as each run ends, not after the last one."""
    path = tmp_path / "grid.toml"
    path.write_text(GRID)
    seen = []

    def on_finish(run, error):
        done = len(list((tmp_path / "runs").glob("*/results.json")))
        seen.append((run.name, error, done, finished(run) is not None))

    run_sweep(path, workers=1, on_finish=on_finish)
    assert [(error, done, ok) for _, error, done, ok in seen] == [
        (None, 1, True),
        (None, 2, True),
        (None, 3, True),
    ]


def test_the_progress_bar_counts_done_failed_and_left(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text(GRID)
    runs, _ = load_grid(path)
    run_sweep(path, workers=1)
    out, err = io.StringIO(), io.StringIO()
    progress = SweepProgress([run.name for run in runs], 3, out=out, err=err, bar=True)
    progress.finished(runs[0], None)
    progress.finished(runs[1], "ValueError: boom")
    progress.finished(runs[2], None)
    progress.close()
    bar = err.getvalue()
    assert "0/3 runs [00:00<?, done 0, failed 0, left 3]" in bar
    assert re.search(r"100%\|#+\| 3/3 runs \[00:00<00:00, done 2, failed 1, left 0\]", bar)
    lines = out.getvalue().splitlines()
    width = max(len(run.name) for run in runs)
    assert lines[1] == f"{runs[1].name.ljust(width)}  failed: ValueError: boom"
    assert lines[0].startswith(runs[0].name) and lines[0].endswith("(1 s)")


def test_a_failed_run_is_a_line_as_it_ends_and_an_error_at_the_end(tmp_path):
    """tomita1 has strings of every length, d2 only even ones: bin [3, 3] fails d2."""
    path = tmp_path / "grid.toml"
    text = GRID.replace('task = "tomita2"', 'task = "tomita1"').replace("[9, 16]]", "[3, 3]]")
    path.write_text(text.replace('["ape", "nope", "sin"]', '["ape"]') + "task = ['tomita1', 'd2']")
    path.write_text(path.read_text().replace("bins = [[1, 8], [3, 3]]", "bins = [[3, 3]]"))
    stderr = user_error("sweep", path, "--no-bar")
    assert "progress: 2 of 2 runs ended (1 done, 1 failed, 0 left)" in stderr
    failure = r"error: run ape-d2-\w+ failed: task 'd2': no bin has a feasible length$"
    assert re.search(failure, stderr.splitlines()[-1]), stderr
    result = invoke("sweep", path, "--quiet")
    assert "failed: task 'd2': no bin has a feasible length" in result.stdout
    assert "1 of 2 runs finished, 1 failed" in result.stdout
    assert "progress:" not in result.stderr and "to train" not in result.stderr


# ------------------------------------------------------------------ grid validation

T2 = '[base]\ntask = "tomita2"\n'


@pytest.mark.parametrize(
    ("text", "first_line"),
    [
        (T2 + "bins = [[1, 8], [9]]", "3:1: error: [base] bins[1] = [9]: not a pair of integers"),
        (T2 + "bins = [[1]]", "3:1: error: [base] bins[0] = [1]: not a pair of integers [lo, hi]"),
        (T2 + "\n\nbins = [[9, 3]]", "5:1: error: [base] bins[0] = [9, 3]: lo is above hi"),
        (T2 + "bins = [[-1, 3]]", "3:1: error: [base] bins[0] = [-1, 3]: lo is negative"),
        (
            T2 + "[grid]\nbins = [[[1, 8]], [[1, 8], [16, 9]]]",
            "4:1: error: [grid] bins[1][1] = [16, 9]: lo is above hi",
        ),
        (T2 + "steps = -3", "3:1: error: [base] steps must be an integer >= 1, not -3"),
        (T2 + "  steps = 0", "3:3: error: [base] steps must be an integer >= 1, not 0"),
        (T2 + "lr = 'fast'", "3:1: error: [base] lr must be a number > 0, not 'fast'"),
        (
            T2 + '[grid]\nseed = [0, 1]\npe = ["ape", "xpos"]',
            "5:1: error: [grid] pe[1] must be one of ape, nope, sin, random, rope, alibi, relative, not 'xpos'",
        ),
        (
            '[grid]\ntask = ["num_sort"]\nnumeric_kind = ["positional", "rnn"]',
            "3:1: error: [grid] numeric_kind[1] must be one of positional, standard, not 'rnn'",
        ),
        ('[grid]\ntask = ["d2", "tomita9"]', "2:1: error: [grid] task[1]: unknown task 'tomita9'"),
        (T2 + "[grid]\nseed = []", "4:1: error: [grid] seed must be a non-empty list"),
        (T2 + "[grid]\nseed = [0, -1]", "4:1: error: [grid] seed[1] must be an integer >= 0"),
        (
            "colour = 3\n" + T2,
            "1:1: error: colour: unknown key; expected one of out, results, workers",
        ),
        (T2 + "stpes = 3", "3:1: error: [base] stpes: not a TrainConfig field"),
        (
            'preset = "huge"\n' + T2,
            "1:1: error: preset must be one of quick, paper, randomized-pe, not 'huge'",
        ),
        # dotted keys and inline tables: the line and column of the key
        ('base.task = "d2"\nbase.steps = -3', "2:6: error: [base] steps must be an integer"),
        ('base = {task = "d2", steps = -3}', "1:22: error: [base] steps must be an integer"),
        ("[base\nsteps = 3", "1:6: error: invalid TOML: "),
    ],
)
def test_a_bad_grid_names_the_key_and_its_line(tmp_path, text, first_line):
    path = tmp_path / "grid.toml"
    path.write_text(text)
    stderr = user_error("sweep", path)
    assert stderr.splitlines()[0].startswith(f"{path}:{first_line}"), stderr
    assert not (tmp_path / "grid").exists()  # nothing ran


def test_the_unknown_key_gets_a_suggestion(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text(T2 + "stpes = 3")
    assert "did you mean steps?" in user_error("sweep", path)


# ------------------------------------------------------------------ error texts


def test_one_line_has_no_newline_and_no_error_prefix():
    err = CraspError(
        [Diagnostic("bad\nthing", Span(2, 3, 2, 4), "try\nthis"), Diagnostic("other")],
        "a\nb = 1\n",
        "prog.cr",
    )
    assert "\n" in err.format() and "error:" in err.format()
    assert one_line(err) == "prog.cr:2:3: bad thing (try this); prog.cr: other"
    assert one_line(CraspError("plain")) == "plain"
    assert one_line(ValueError("a\nb")) == "a b"


def test_a_compiled_program_that_fails_is_one_line_in_the_report(tmp_path, monkeypatch):
    from crasp_compiler.experiments.train import evaluate

    def broken(*args, **kwargs):
        raise CraspError([Diagnostic("no such\nthing", Span(1, 1, 1, 2))], "x = 1", "p.cr")

    monkeypatch.setattr(evaluate, "compiled_predictions", broken)
    result = invoke("train", "tomita2", *TINY, "--bins", "1-8", "--quiet", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    assert "compiled program not evaluated: p.cr:1:1: no such thing\n" in result.stdout
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["compiled_error"] == "p.cr:1:1: no such thing"


# ------------------------------------------------------------------ sizes and estimate


def test_the_defaults_are_minutes_and_paper_is_one_flag_or_key_away(tmp_path, monkeypatch):
    config = TrainConfig(task="d2")
    assert (config.steps, config.test_size, config.eval_every) == (1000, 200, 200)
    assert PRESETS["paper"] == {"steps": 30_000, "test_size": 2_000, "eval_every": 500}
    seen = []

    def fake_train(config):
        seen.append(config)
        raise CraspError("stopped by the test")

    monkeypatch.setattr(loop, "train", fake_train)
    for args in ([], ["--preset", "paper"], ["--preset", "paper", "--steps", "7"]):
        user_error("train", "d2", "--quiet", "--out", tmp_path, *args)
    sizes = [(c.steps, c.test_size, c.eval_every) for c in seen]
    assert sizes == [(1000, 200, 200), (30_000, 2_000, 500), (7, 2_000, 500)]
    path = tmp_path / "grid.toml"
    path.write_text('preset = "paper"\n[base]\ntask = "d2"\n[grid]\nsteps = [5, 30000]')
    runs, _ = load_grid(path)
    assert [(r.config["steps"], r.config["test_size"]) for r in runs] == [(5, 2000), (30000, 2000)]


@pytest.mark.parametrize("name", ["length_generalization", "value_generalization", "chomsky"])
def test_the_report_grids_set_their_sizes_themselves(name):
    """docs/length-generalization.md's runs do not depend on the defaults."""
    text = (ROOT / "benchmarks" / "grids" / f"{name}.toml").read_text()
    base = text.split("[base]")[1].split("[grid]")[0]
    assert all(re.search(rf"^{key} = ", base, re.M) for key in PRESETS["quick"])
    runs, _ = load_grid(ROOT / "benchmarks" / "grids" / f"{name}.toml")
    expected = {"length_generalization": 1200, "value_generalization": 1500, "chomsky": 2000}
    assert {run.config["steps"] for run in runs} == {expected[name]}
    assert all(run.record is not None for run in runs)  # committed, so a clone resumes


def test_duration_and_estimate_message():
    assert [loop.duration(s) for s in (0.2, 40, 89, 200, 5400, 7500)] == [
        "1 s",
        "40 s",
        "89 s",
        "3 min",
        "1 h 30 min",
        "2 h 05 min",
    ]
    assert loop.estimate_message("d2", 1200, 7, 10) == (
        "d2: about 3 min of training (1,200 steps at ~7 steps/s, timed on its first 10 "
        "steps; less if it stops early, plus the evaluations)"
    )


def test_a_long_run_says_how_long_before_it_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr(loop, "LONG_RUN_S", 0.0)  # every run counts as long
    args = ["--steps", "15", "--eval-every", "15", "--test-size", "10", "--device", "cpu"]
    result = invoke("train", "tomita2", *args, "--bins", "1-8", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    message = re.search(
        r"tomita2: about \d+ s of training \(4 steps at ~[\d.e+]+ steps/s, "
        r"timed on its first 10 steps;",
        result.stderr,
    )
    assert message, result.stderr
    quiet = invoke("train", "tomita2", *args, "--bins", "1-8", "--quiet", "--out", tmp_path / "q")
    assert "of training" not in quiet.output
    monkeypatch.setattr(loop, "LONG_RUN_S", 1e9)  # a short run says nothing
    short = invoke("train", "tomita2", *args, "--bins", "1-8", "--out", tmp_path / "s")
    assert "of training" not in short.output


def test_docs_grids_documents_every_key_and_its_example_loads(tmp_path):
    from crasp_compiler.experiments.train.sweep import FIELDS, KEYS

    text = (ROOT / "docs" / "grids.md").read_text()
    for key in (*KEYS, *FIELDS):
        assert f"| `{key}` |" in text or key == "progress", key
    example = text.split("```toml\n")[1].split("```")[0]
    (tmp_path / "example.toml").write_text(example)
    runs, settings = load_grid(tmp_path / "example.toml")
    assert len(runs) == 8 and settings["workers"] == 2
    assert {run.config["lr"] for run in runs if run.config["task"] == "d2"} == {3e-4}


def test_ray_runs_are_reported_as_ray_returns_them(tmp_path, monkeypatch):
    """With a stand-in for ray (not a dependency of the tests): the runs end in the order
    ``ray.wait`` gives, each reported then; a task Ray fails is a failed run."""
    import sys
    import types

    from crasp_compiler.experiments.train import sweep

    calls = []

    class Ref:
        def __init__(self, config):
            self.config = config

    def remote(**resources):
        calls.append(resources)
        return lambda fn: types.SimpleNamespace(remote=Ref)

    def wait(pending, num_returns):
        return pending[-1:], pending[:-1]  # the last submitted ends first

    def get(ref):
        if ref.config["pe"] == "nope":
            raise RuntimeError("worker died")
        if ref.config["pe"] == "sin":
            return None, None  # "succeeded" but sent nothing back: a failed run
        return None, {"returned": ref.config["pe"]}  # the run's results, through Ray

    kept = []
    monkeypatch.setattr(sweep, "keep_results", lambda run, results: kept.append(results))

    fake = types.SimpleNamespace(init=lambda **kw: None, remote=remote, wait=wait, get=get)
    fake.cancel = lambda ref, force: None
    monkeypatch.setitem(sys.modules, "ray", fake)
    path = tmp_path / "grid.toml"
    path.write_text(GRID)
    seen = []
    with pytest.raises(CraspError) as caught:
        sweep.run_sweep(path, ray_address="auto", on_finish=lambda r, e: seen.append((r, e)))
    assert [run.config["pe"] for run, _ in seen] == ["sin", "nope", "ape"]
    assert [error for _, error in seen] == [
        "the run returned no results",
        "RuntimeError: worker died",
        None,
    ]
    assert kept == [{"returned": "ape"}]  # what came back is what the driver keeps
    assert "failed: RuntimeError: worker died" in str(caught.value)
    assert "failed: the run returned no results" in str(caught.value)
    assert calls == [{"num_cpus": 1, "num_gpus": 0, "max_retries": 2, "retry_exceptions": False}]


def _fake_ray(monkeypatch, init):
    """A stand-in ``ray`` module whose ``init`` is ``init`` (ray is not a test dependency)."""
    import sys
    import types

    fake = types.SimpleNamespace(init=init, remote=None, wait=None, get=None, cancel=None)
    monkeypatch.setitem(sys.modules, "ray", fake)


def test_a_ray_client_address_without_ray_client_is_one_line_naming_the_package(
    tmp_path, monkeypatch
):
    """``--ray-address ray://host:10001`` (the form the help gives) without ``ray[client]``
    (grpc): one line saying what to install, before any connection is tried."""
    import sys

    tried = []
    _fake_ray(monkeypatch, lambda **kw: tried.append(kw))
    monkeypatch.setitem(sys.modules, "grpc", None)  # find_spec("grpc") is None: not installed
    path = tmp_path / "grid.toml"
    path.write_text(GRID)
    line = user_error("sweep", path, "--ray-address", "ray://host:10001", "--quiet")
    assert "--ray-address ray://host:10001" in line and 'pip install "ray[client]"' in line
    assert tried == []


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        (  # what ray itself raises when Ray Client's packages are missing
            ValueError(
                "Ray Client requires pip package `ray[client]`. If you installed the minimal "
                "Ray (e.g. `pip install ray`), please reinstall by executing `pip install "
                "ray[client]`."
            ),
            'pip install "ray[client]"',
        ),
        (ConnectionError("ray client connection timeout"), "ray client connection timeout"),
        (
            ConnectionError("Could not find any running Ray instance.\nPlease specify one"),
            "Could not find any running Ray instance. Please specify one",
        ),
        (ValueError("Invalid address nowhere::1"), "Invalid address nowhere::1"),
    ],
)
def test_ray_connection_failures_are_one_line(tmp_path, monkeypatch, error, shown):
    """An unreachable or unreadable Ray address: one line naming the address, exit 1."""

    def init(**kw):
        raise error

    _fake_ray(monkeypatch, init)
    path = tmp_path / "grid.toml"
    path.write_text(GRID)
    line = user_error("sweep", path, "--ray-address", "nowhere:1", "--quiet")
    assert "--ray-address nowhere:1" in line and shown in line
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("results.json"))


def test_the_randomized_pe_preset_is_the_papers_model_and_options_override_it(
    tmp_path, monkeypatch
):
    seen = []

    def fake_train(config):
        seen.append(config)
        raise CraspError("stopped by the test")

    monkeypatch.setattr(loop, "train", fake_train)
    base = ["train", "reverse_string", "--pe", "random", "--quiet", "--out", tmp_path]
    user_error(*base, "--preset", "randomized-pe")
    user_error(*base, "--preset", "randomized-pe", "--steps", "50", "--layers", "3")
    user_error(*base, "--dropout", "0.2", "--weight-decay", "0")
    paper, budget, plain = seen
    model = (paper.n_layers, paper.n_heads, paper.d_model, paper.dropout, paper.batch_size)
    assert model == (5, 8, 64, 0.1, 128)
    assert (paper.lr, paper.weight_decay, paper.max_positions) == (3e-4, 0.0, 2048)
    assert paper.bins == [(1, 40), (41, 500)] and not paper.early_stop
    assert (budget.steps, budget.n_layers, budget.n_heads) == (50, 3, 8)
    assert (plain.dropout, plain.weight_decay, plain.n_heads) == (0.2, 0.0, 2)
    path = tmp_path / "grid.toml"
    path.write_text('preset = "randomized-pe"\n[base]\ntask = "even_pairs"\nsteps = 9')
    (run,), _ = load_grid(path)
    assert (run.config["steps"], run.config["n_layers"], run.config["dropout"]) == (9, 5, 0.1)
