"""``crasp train --program PROG.pcoc``, programs in grid files, and plots of program runs.

A PCOC program of one input and one output slot is a numeric task (``PcocNumericTask``,
the class of the registered numeric tasks): targets from the interpreter, the compiled
model evaluated on the same test sets, trained MSE, compiled MSE and their agreement per
scale; scales beyond the declared input bound, other shapes of program and other file
types are refused. Grid files take ``program`` (and ``alphabet``, ``lengths``,
``generator``) with located errors; ``crasp plot`` draws program runs with the agreement.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from crasp_compiler.errors import CraspError
from crasp_compiler.experiments.tasks.numeric import PcocNumericTask
from crasp_compiler.experiments.tasks.program import ProgramTask, load_program_task
from crasp_compiler.experiments.tasks.registry import get_task
from crasp_compiler.experiments.train.loop import TrainConfig, train_key
from crasp_compiler.experiments.train.plots import (
    _draw_length_bins,
    _draw_value_scales,
    load_results,
)
from crasp_compiler.experiments.train.sweep import load_grid, run_sweep
from crasp_compiler.languages.pcoc import interpret_batch
from tests.support.cli import invoke

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CUMMAX = """// cumulative maximum: machine i ends with max(x_0, ..., x_i)
input x bound 100
output x

for k in 0 .. ceil_log2(n) {
  round {
    left = recv x from i - 2**k default -100
    x = max(x, left)
  }
}
"""
TWO_INPUTS = "input x\ninput y\noutput x\nround { x = x + y }\n"
DYCK1 = 'C_open = # "("\nC_close = # ")"\nV = C_open < C_close\nCV = # V\nD = (CV == 0) && (C_open == C_close)\n'
TINY = ["--steps", "4", "--eval-every", "4", "--test-size", "16", "--device", "cpu", "--quiet"]


def user_error(*args) -> str:
    """Exit status 1 with one ``error:`` line (and perhaps a hint), no traceback."""
    result = invoke(*args)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.stderr.count("error:") == 1, result.stderr
    return result.stderr


@pytest.fixture
def cummax(tmp_path: Path) -> Path:
    path = tmp_path / "cummax.pcoc"
    path.write_text(CUMMAX)
    return path


# ------------------------------------------------------------------ the task


def test_a_pcoc_file_is_a_numeric_task_with_the_interpreters_targets(cummax):
    task = load_program_task(cummax)
    assert isinstance(task, PcocNumericTask) and task.family == "program"
    assert task.name == "cummax" and task.output == "x" and task.value_range == 2.0
    rng = np.random.default_rng(0)
    examples = [task.sample(rng, 8, scale) for scale in (1, 3, 7)]
    inputs = np.stack([ex.inputs for ex in examples])
    expected = interpret_batch(task.pcoc_program(), 8, inputs).outputs["x"]
    np.testing.assert_array_equal(np.stack([ex.targets for ex in examples]), expected)
    np.testing.assert_allclose(expected, np.maximum.accumulate(inputs, axis=1))
    compiled = task.compiled_values(inputs)
    np.testing.assert_allclose(compiled, expected, atol=1e-9)
    assert np.abs(examples[2].inputs).max() <= 14  # R c = 2 * 7


def test_the_registered_tasks_and_a_file_share_one_code_path():
    """num_cummin's own file made into a task draws the same data as the registered task
    (numpy reference vs interpreter), under its own name and digest."""
    registered = get_task("num_cummin")
    made = PcocNumericTask.from_file(registered.program_path)
    assert type(made) is type(registered)
    for scale in (1, 5):
        a = registered.sample(np.random.default_rng(1), 8, scale)
        b = made.sample(np.random.default_rng(1), 8, scale)
        np.testing.assert_array_equal(a.inputs, b.inputs)
        np.testing.assert_allclose(a.targets, b.targets)
    assert registered.identity == "num_cummin"  # registered runs keep their keys
    assert train_key(TrainConfig(task="num_cummin"))["task"] == "num_cummin"
    assert made.identity.startswith("num_cummin@")


def test_an_edited_pcoc_program_is_another_run(cummax):
    first = PcocNumericTask.from_file(cummax)
    assert first.identity == PcocNumericTask.from_file(cummax).identity
    cummax.write_text(CUMMAX.replace("max(x, left)", "max(left, x)"))
    edited = PcocNumericTask.from_file(cummax)
    keys = [train_key(TrainConfig(task=task))["task"] for task in (first, edited)]
    assert keys[0] != keys[1] and keys[0].startswith("cummax@")


def test_a_small_bound_narrows_the_range_and_a_scale_beyond_it_is_refused(tmp_path):
    path = tmp_path / "small.pcoc"
    path.write_text(CUMMAX.replace("bound 100", "bound 1.5").replace("-100", "-1.5"))
    task = PcocNumericTask.from_file(path)
    assert task.value_range == 1.5
    task.check_scales([1])
    with pytest.raises(CraspError, match="scale 2 draws values up to 3, beyond the declared"):
        task.sample(np.random.default_rng(0), 8, 2)


# ------------------------------------------------------------------ crasp train


def test_train_on_a_pcoc_program_reports_trained_compiled_and_agreement(cummax, tmp_path):
    out = tmp_path / "run"
    result = invoke(
        "train", "--program", cummax, "--n", "4", "--scales", "1,5", *TINY, "--out", out
    )
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    assert results["task"] == "cummax" and results["family"] == "program"
    assert results["kind"] == "numeric" and results["n"] == 4
    assert results["config"]["task"].startswith("cummax@")
    assert set(results["metrics"]) == set(results["compiled_metrics"]) == {"1", "5"}
    assert set(results["agreement"]) == {"1", "5"}
    lines = {line.split()[0]: line.split()[1:] for line in result.output.splitlines() if line}
    assert lines["cummax"][:2] == ["(PCOC", "program,"]
    assert lines["scale"] == ["mse", "trained", "mse", "compiled", "agreement", "close", "trained", "close", "compiled"]  # fmt: skip
    for scale in ("1", "5"):
        trained = results["metrics"][scale]["mse"]
        compiled = results["compiled_metrics"][scale]["mse"]
        agreement = results["agreement"][scale]
        assert compiled < 1e-12  # the compiled program is exact within the bound
        # against an exact reference, the agreement is the trained model's own error
        assert agreement == pytest.approx(trained, rel=1e-6) and agreement > 0
        shown = lines[scale][:3]
        assert shown == [f"{trained:.3g}", f"{compiled:.3g}", f"{agreement:.3g}"]


def test_pcoc_program_errors(cummax, tmp_path):
    two = tmp_path / "two.pcoc"
    two.write_text(TWO_INPUTS)
    error = user_error("train", "--program", two, *TINY)
    assert f"{two}: error: the program has 2 input slots (x, y)" in error
    error = user_error("train", "--program", cummax, "--scales", "1,60", *TINY)
    assert f"{cummax}: error: scale 60 draws values up to 120" in error
    broken = tmp_path / "broken.pcoc"
    broken.write_text("input x\noutput y\n")
    assert f"{broken}:" in user_error("train", "--program", broken, *TINY)
    other = tmp_path / "prog.txt"
    other.write_text(CUMMAX)
    assert "unknown program file type '.txt'" in user_error("train", "--program", other, *TINY)
    for args in (["--alphabet", "a,b"], ["--lengths", "1-8"], ["--pe", "nope"]):
        result = invoke("train", "--program", cummax, *args, *TINY)
        assert result.exit_code == 2 and "Traceback" not in result.output, (args, result.output)


# ------------------------------------------------------------------ grid files


def write_grid(tmp_path: Path, text: str) -> Path:
    (tmp_path / "progs").mkdir(exist_ok=True)
    (tmp_path / "progs" / "cummax.pcoc").write_text(CUMMAX)
    (tmp_path / "progs" / "dyck1.cr").write_text(DYCK1)
    (tmp_path / "progs" / "bad.cr").write_text("A := #[j <= i] Q_a(j)\nB := A >\n")
    (tmp_path / "gens.py").write_text("def opens(rng, length):\n    return ['('] * length\n")
    path = tmp_path / "grid.toml"
    path.write_text(text)
    return path


GRID = """out = "runs"
[base]
steps = 4
eval_every = 4
test_size = 8
device = "cpu"
scales = [1, 2]
bins = [[1, 6], [7, 10]]

[grid]
program = ["progs/dyck1.cr", "progs/cummax.pcoc"]
seed = [0, 1]

[task.dyck1]
lengths = [1, 6]
generator = "gens.py:opens"
"""


def test_a_grid_of_programs(tmp_path):
    runs, _ = load_grid(write_grid(tmp_path, GRID))
    assert [run.name.rsplit("-", 1)[0] for run in runs] == [
        "dyck1-seed0", "dyck1-seed1", "cummax-seed0", "cummax-seed1"
    ]  # fmt: skip
    dyck, cummax = runs[0].config["task"], runs[2].config["task"]
    assert isinstance(dyck, ProgramTask) and isinstance(cummax, PcocNumericTask)
    assert runs[0].config["train_max"] == 6 and dyck.generator is not None
    assert " generator=gens.py@" in dyck.identity
    assert "train_max" not in runs[2].config
    assert runs[1].config["task"] is dyck  # made once per program setting
    again, _ = load_grid(tmp_path / "grid.toml")
    assert [run.out_dir for run in again] == [run.out_dir for run in runs]


@pytest.mark.parametrize(
    ("old", "new", "messages"),
    [
        ('"progs/dyck1.cr"', '"progs/missing.cr"', [":11:1: error: [grid] program[0]: ", "cannot read program"]),
        ('"progs/dyck1.cr"', '"progs/bad.cr"', [":11:1: error: [grid] program[0]: ", "bad.cr:2:9: unexpected end of line"]),
        ('"progs/dyck1.cr"', "3", ["[grid] program[0] must be a path to a .cr, .crasp or .pcoc file"]),
        ("gens.py:opens", "gens.py:absent", [":16:1: error: [task.dyck1] generator: ", "has no 'absent'"]),
        ("gens.py:opens", "no_such_mod_q:f", ["[task.dyck1] generator: ", "cannot import no_such_mod_q"]),
        ("scales = [1, 2]", "scales = [1, 60]", [":7:1: error: [base] scales: ", "scale 60 draws values up to 120"]),
        ("lengths = [1, 6]", "lengths = [6, 1]", ["[task.dyck1] lengths must be [lo, hi]"]),
        ("lengths = [1, 6]", "alphabet = []", ["[task.dyck1] alphabet must be a non-empty list"]),
        ("lengths = [1, 6]", 'alphabet = ["("]', [":15:1: error: [task.dyck1] alphabet: ", "lacks token(s)"]),
        ("[task.dyck1]", "[task.cummax]", ["[task.cummax] lengths: ", "only for C-RASP programs"]),
        ("seed = [0, 1]", 'task = ["d2"]', ["[grid] program: give task or program, not both"]),
        ('device = "cpu"', 'device = "cpu"\ntrain_max = 5', ["[base] train_max: with a C-RASP program"]),
        ("[task.dyck1]", '[task.dyck1]\nprogram = "x.cr"', ["[task.dyck1] program: cannot be overridden"]),
    ],
)  # fmt: skip
def test_a_bad_program_in_a_grid_is_a_located_error(tmp_path, old, new, messages):
    assert old in GRID
    error = user_error("sweep", write_grid(tmp_path, GRID.replace(old, new)))
    for message in messages:
        assert message in error, error
    assert "\\n" not in error


def test_a_program_key_without_a_program_is_refused(tmp_path):
    text = '[base]\nsteps = 4\nalphabet = ["a", "b"]\n[grid]\ntask = ["tomita2"]\n'
    error = user_error("sweep", write_grid(tmp_path, text))
    assert ":3:1: error: [base] alphabet: only with a program" in error


# ------------------------------------------------------------------ sweep and plot


def test_sweep_and_plot_program_runs(tmp_path):
    grid = write_grid(tmp_path, GRID.replace("seed = [0, 1]", "seed = [0]"))
    run_sweep(grid)
    figures = tmp_path / "figures"
    result = invoke("plot", grid, "-o", figures)
    assert result.exit_code == 0, result.output
    assert sorted(Path(line).name for line in result.output.split()) == [
        "length_bins_dyck1.png", "value_scales_cummax.png"
    ]  # fmt: skip
    assert all(path.stat().st_size > 0 for path in figures.iterdir())
    results = {r["task"]: r for r in load_results([grid])}
    axes = Figure().add_subplot()
    _draw_length_bins(axes, "dyck1", [results["dyck1"]])
    lines = {line.get_label(): line for line in axes.get_lines()}
    assert axes.get_title() == "dyck1 — C-RASP program"
    agreement = lines["ape: agreement with compiled"]
    assert agreement.get_linestyle() == ":"
    expected = [results["dyck1"]["agreement"][b] for b in ("1-6", "7-10")]
    np.testing.assert_allclose(agreement.get_ydata(), expected)
    axes = Figure().add_subplot()
    _draw_value_scales(axes, "cummax", [results["cummax"]])
    lines = {line.get_label(): line for line in axes.get_lines()}
    assert axes.get_title() == "cummax — PCOC program"
    expected = [results["cummax"]["agreement"][c] for c in ("1", "2")]
    np.testing.assert_allclose(lines["positional: MSE to compiled"].get_ydata(), expected)
    assert "compiled program (MSE ≤ 1e-16 drawn at 1e-16)" in lines
