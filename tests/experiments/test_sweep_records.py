"""A grid's ``results`` directory: each finished run's results copied there (without its
machine-specific ``out_dir``), a sweep on a fresh clone (no ``runs/``) finding its runs
finished from those records, damaged records retrained, an unwritable directory reported
per run; and docs/length-generalization.md matching the committed records.

Tiny runs: three steps, ten test examples, bins up to LEN 16, d_model 8.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from crasp_compiler.cli import main
from crasp_compiler.errors import CraspError
from crasp_compiler.experiments.train.plots import load_results
from crasp_compiler.experiments.train.sweep import collect, finished, load_grid, run_sweep

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROOT = Path(__file__).resolve().parents[2]
GRID = """out = "runs"
results = "records"

[base]
task = "tomita2"
steps = 3
eval_every = 3
test_size = 10
bins = [[1, 8], [9, 16]]
train_max = 8
d_model = 8
device = "cpu"

[grid]
pe = ["ape", "nope"]
"""


def _sweep(path: Path) -> list[str]:
    """Run the grid; the names of the runs that were trained."""
    trained: list[str] = []
    run_sweep(path, on_finish=lambda run, error: trained.append(run.name))
    return trained


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    path = tmp_path / "grid.toml"
    path.write_text(GRID)
    return path


def test_finished_runs_are_recorded_and_a_fresh_clone_resumes_from_the_records(grid):
    runs, settings = load_grid(grid)
    assert settings["results"] == grid.parent / "records"
    assert sorted(_sweep(grid)) == sorted(run.name for run in runs)
    for run in runs:
        record = json.loads(run.record.read_text())
        assert "out_dir" not in record["config"] and record["task"] == "tomita2"
        assert (
            record["accuracy"] == json.loads((run.out_dir / "results.json").read_text())["accuracy"]
        )
    saved = runs[0].record.read_text()
    runs[0].record.unlink()
    assert [r["run"] for r in collect(grid, records_only=True)] == [runs[1].name]
    assert len(collect(grid)) == 2  # the run directory still has it
    runs[0].record.write_text(saved)
    shutil.rmtree(grid.parent / "runs")  # a fresh clone: the records only
    assert _sweep(grid) == []
    assert sorted(r["run"] for r in collect(grid)) == sorted(run.name for run in runs)
    assert len(load_results([grid])) == 2  # crasp plot draws them too


def test_runs_finished_before_the_grid_had_records_are_copied(grid):
    grid.write_text(GRID.replace('results = "records"\n', ""))
    _sweep(grid)
    grid.write_text(GRID)
    runs, _ = load_grid(grid)
    assert not any(run.record.exists() for run in runs)
    assert _sweep(grid) == []  # nothing retrained, every record written
    assert all(finished(run) is not None and run.record.exists() for run in runs)


def test_a_damaged_or_foreign_record_is_not_a_finished_run(grid):
    _sweep(grid)
    shutil.rmtree(grid.parent / "runs")
    runs, _ = load_grid(grid)
    text = runs[0].record.read_text()
    runs[0].record.write_text(text[: len(text) // 2])  # an interrupted copy
    other = json.loads(runs[1].record.read_text())
    other["config"]["steps"] = 4  # results of another configuration
    runs[1].record.write_text(json.dumps(other))
    assert [finished(run) for run in runs] == [None, None]
    assert sorted(_sweep(grid)) == sorted(run.name for run in runs)
    assert all(finished(run) is not None for run in runs)


def test_a_record_with_a_damaged_field_is_named_and_rewritten_from_its_run(grid):
    _sweep(grid)
    runs, _ = load_grid(grid)
    record = json.loads(runs[0].record.read_text())
    del record["accuracy"]
    runs[0].record.write_text(json.dumps(record))
    result = CliRunner().invoke(main, ["sweep", str(grid), "--quiet"])
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        f"warning: {runs[0].record}: skipped, not a complete results.json (field accuracy is "
        "missing)\n"
    )
    assert all(line.endswith("(earlier)") for line in result.stdout.splitlines()[:2])
    assert json.loads(runs[0].record.read_text())["accuracy"] == record_accuracy(runs[0])


def record_accuracy(run) -> dict:
    return json.loads((run.out_dir / "results.json").read_text())["accuracy"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_an_unwritable_results_directory_is_refused_before_training(grid):
    (grid.parent / "records").mkdir()
    (grid.parent / "records").chmod(0o500)
    try:
        with pytest.raises(CraspError, match="cannot write"):
            _sweep(grid)
    finally:
        (grid.parent / "records").chmod(0o700)


def test_a_record_that_cannot_be_written_fails_its_run_with_one_line(grid, monkeypatch):
    write = Path.write_text

    def full_disk(self, *args, **kwargs):  # only the records' disk is full
        if self.name.endswith(".tmp"):
            raise OSError(28, "No space left on device")
        return write(self, *args, **kwargs)

    errors: list[str | None] = []
    monkeypatch.setattr(Path, "write_text", full_disk)
    with pytest.raises(CraspError) as caught:
        run_sweep(grid, on_finish=lambda run, error: errors.append(error))
    monkeypatch.undo()
    assert len(errors) == 2
    assert all(e and "cannot write the results" in e and "No space left" in e for e in errors)
    assert "\n" not in errors[0] and len(caught.value.diagnostics) == 2
    runs, _ = load_grid(grid)
    assert not any(run.record.exists() for run in runs)  # no partial record left
    assert not list((grid.parent / "records").iterdir())  # no temporary file either


@pytest.mark.parametrize("bad", ["3", "''"])
def test_a_bad_results_key_is_named(grid, bad):
    grid.write_text(GRID.replace('results = "records"', f"results = {bad}"))
    with pytest.raises(CraspError) as caught:
        load_grid(grid)
    assert "results must be a path" in caught.value.diagnostics[0].message
    assert caught.value.diagnostics[0].span.line == 2


def _report():
    spec = importlib.util.spec_from_file_location(
        "length_generalization_report", ROOT / "benchmarks" / "length_generalization_report.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_report_page_matches_the_committed_records():
    """Every table of docs/length-generalization.md is what the committed records give."""
    report = _report()
    page = report.PAGE.read_text()
    assert page.count("<!-- table:") >= 6
    assert report.regenerate(page, report.tables()) == page


def test_intervals_hold_the_mean_and_are_reproducible():
    report = _report()
    assert report.interval([0.5]) == (0.5, 0.5, 0.5)
    assert report.interval([1.0] * 5) == (1.0, 1.0, 1.0)
    mean, low, high = report.interval([0.0, 0.2, 0.9, 1.0, 1.0])
    assert mean == pytest.approx(0.62) and 0.0 < low < mean < 1.0 < high  # t: unbounded
    assert report.interval([0.0, 0.2, 0.9, 1.0, 1.0]) == (mean, low, high)
    assert report._fraction([0.0, 0.2, 0.9, 1.0, 1.0]) == "0.62 [0.02, 1.00]"  # clipped


def test_a_table_the_script_does_not_make_is_an_error():
    report = _report()
    with pytest.raises(SystemExit, match="no table named 'x'"):
        report.regenerate("<!-- table: x -->\nold\n<!-- end table -->\n", {})


def test_every_committed_training_record_says_where_it_was_made():
    """Every run behind docs/length-generalization.md (sweep records, fine-tuning runs,
    kernel fits, V-only fine-tuning) carries provenance that fits the schema, with the
    commit of the code that made it."""
    from crasp_compiler.experiments.train.records import PROVENANCE

    folder = ROOT / "docs" / "results" / "length-generalization"
    records = []
    for path in sorted(folder.rglob("*.json")):
        data = json.loads(path.read_text())
        records += [(path, r) for r in (data if isinstance(data, list) else [data])]
    assert len(records) > 1500
    for path, record in records:
        name = path.relative_to(folder)
        assert "provenance" in record, f"{name}: no provenance"
        assert PROVENANCE(record["provenance"], "provenance") is None, name
        commit = record["provenance"]["commit"]
        assert isinstance(commit, str) and len(commit) == 40, f"{name}: commit {commit!r}"
