"""Damaged results records (:mod:`crasp_compiler.experiments.train.records`): every field of
a committed record deleted, renamed or given each JSON type, and the file nested too
deeply; ``crasp plot``, the sweep and ``benchmarks/length_generalization_report.py``
skip such a record with one warning line naming the file and the field, never a
traceback. No training: the records are the committed ones.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from matplotlib.figure import Figure

from crasp_compiler.cli import main
from crasp_compiler.errors import CraspError
from crasp_compiler.experiments.train.plots import (
    _draw_length_bins,
    _draw_value_scales,
    load_results,
)
from crasp_compiler.experiments.train.records import OPTIONAL, read_results
from crasp_compiler.experiments.train.sweep import collect, load_grid, unreadable

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results" / "length-generalization"
# one committed record of each shape: a C-RASP task with a compiled program, a Chomsky
# task (per-position fields), a numeric task
RECORDS = {
    "crasp_prediction": "aa_star-ape-seed0-",
    "chomsky": "even_pairs-ape-seed0-",
    "value_generalization": "num_cumsum-positional-seed0-",
}
# fields a complete record may lack: those recorded only since some commit
OPTIONAL_FIELDS = {*OPTIONAL, "last_accuracy", "last_metrics"}
JSON_VALUES = {"null": None, "string": "x", "integer": 3, "number": -0.5, "true": True}
JSON_VALUES |= {"list": [], "object": {}}
DEEP = "[" * 100_000 + "]" * 100_000


def _record(kind: str) -> dict:
    [path] = (RESULTS / kind).glob(RECORDS[kind] + "*.json")
    return json.loads(path.read_text())


def mutations(record: dict) -> Iterator[tuple[str, str, str]]:
    """``(what, field, text)``: each field deleted, renamed, set to each JSON type."""
    for key in record:
        edited = copy.deepcopy(record)
        del edited[key]
        yield f"delete {key}", key, json.dumps(edited)
        edited = {(k + "_" if k == key else k): v for k, v in record.items()}
        yield f"rename {key}", key, json.dumps(edited)
        for name, value in JSON_VALUES.items():
            yield f"{key} = {name}", key, json.dumps({**record, key: value})
    yield "nested too deeply", "nested too deeply", DEEP
    yield "a list", "(must be an object, not a list)", "[]"


def _draw(results: list[dict]) -> None:
    """Plot and tabulate accepted results the way ``crasp plot`` and the report do."""
    report = _report()
    task = results[0]["task"]
    if results[0]["kind"] == "sequence":
        _draw_length_bins(Figure().add_subplot(), task, results)
        table = report.chomsky_table if results[0]["family"] == "chomsky" else report.crasp_table
        assert f"`{task}`" in table(results)
    else:
        _draw_value_scales(Figure().add_subplot(), task, results)
        assert f"`{task}`" in report.value_table(results)


@pytest.mark.parametrize("kind", RECORDS)
def test_every_committed_record_fits_the_schema(kind):
    for path in (RESULTS / kind).glob("*.json"):
        read_results(path)


@pytest.mark.parametrize("kind", RECORDS)
def test_a_damaged_field_is_skipped_with_one_line_naming_file_and_field(kind, tmp_path):
    record = _record(kind)
    file = tmp_path / "run" / "results.json"
    file.parent.mkdir()
    skipped = 0
    for what, field, text in mutations(record):
        file.write_text(text)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = load_results([tmp_path])
        if results:  # still a complete record (e.g. an integer where a number goes)
            optional = field in OPTIONAL_FIELDS  # a record may lack it (older ones do)
            assert not caught and (optional or not what.startswith(("delete", "rename"))), what
            _draw(results)
            continue
        skipped += 1
        [warning] = caught
        message = str(warning.message)
        assert message.startswith(f"{file}: skipped, not a complete results.json ("), what
        assert field in message and "\n" not in message, (what, message)
    assert skipped > 7 * len(record)  # every field deleted or renamed, most retyped


def test_plot_skips_a_damaged_record_and_draws_the_rest(tmp_path):
    record = _record("crasp_prediction")
    for name, data in [("good", record), ("bad", {**record, "accuracy": "x"})]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(data))
    result = CliRunner().invoke(main, ["plot", str(tmp_path), "-o", str(tmp_path / "plots")])
    assert result.exit_code == 0 and result.exception is None, result.output
    bad = tmp_path / "bad" / "results.json"
    assert result.stderr == (
        f"warning: {bad}: skipped, not a complete results.json (field accuracy must be an "
        'object, not "x")\n'
    )
    assert [Path(line).name for line in result.stdout.splitlines()] == ["length_bins_aa_star.png"]


def test_plot_of_only_damaged_records_is_one_line_per_file(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text(DEEP)
    result = CliRunner().invoke(main, ["plot", str(tmp_path), "-o", str(tmp_path / "plots")])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.stderr.splitlines() == [
        f"warning: {tmp_path / 'run' / 'results.json'}: skipped, not a complete results.json "
        "(invalid JSON: nested too deeply)",
        f"{tmp_path}: error: no complete results.json here",
    ]


def test_a_record_too_deep_to_read_names_the_field(tmp_path):
    (tmp_path / "run").mkdir()
    record = json.dumps({"task": "aa_star", "accuracy": "@"}).replace('"@"', DEEP)
    (tmp_path / "run" / "results.json").write_text(record)
    result = CliRunner().invoke(main, ["plot", str(tmp_path), "-o", str(tmp_path / "plots")])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert "(invalid JSON: nested too deeply (in field accuracy[0][0]" in result.stderr


def test_results_and_config_must_agree(tmp_path):
    record = _record("crasp_prediction")
    file = tmp_path / "results.json"
    cases = {
        "task": {**record, "task": "tomita2"},
        "family": {**record, "family": "algorithmic"},
        "bins": {**record, "agreement": {**record["agreement"], "1-2": 1.0}},
        "compiled_accuracy and agreement": {**record, "agreement": None},
        "config: steps": {**record, "config": {**record["config"], "steps": 0}},
    }
    for field, data in cases.items():
        file.write_text(json.dumps(data))
        with pytest.raises(CraspError) as caught:
            read_results(file)
        assert field in str(caught.value) and str(file) in str(caught.value)


# ------------------------------------------------------------------ the report


def _report():
    spec = importlib.util.spec_from_file_location(
        "length_generalization_report", ROOT / "benchmarks" / "length_generalization_report.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def copied(tmp_path: Path, monkeypatch) -> tuple[object, Path]:
    """The report reading a copy of the grids and the committed records."""
    shutil.copytree(ROOT / "benchmarks" / "grids", tmp_path / "benchmarks" / "grids")
    shutil.copytree(RESULTS, tmp_path / "docs" / "results" / "length-generalization")
    report = _report()
    monkeypatch.setattr(report, "GRIDS", tmp_path / "benchmarks" / "grids")
    results = tmp_path / "docs" / "results" / "length-generalization"
    monkeypatch.setattr(report, "FINETUNE", results / "finetune.json")
    return report, results


def test_the_report_skips_damaged_records_with_one_line_each(copied, monkeypatch, capsys):
    report, results = copied
    damaged = {
        "crasp_prediction": lambda r: {k: v for k, v in r.items() if k != "steps"},
        "chomsky": lambda r: {**r, "position_accuracy": None},
        "value_generalization": lambda r: {**r, "metrics": "x"},
    }
    files = []
    for kind, damage in damaged.items():
        [file] = (results / kind).glob(RECORDS[kind] + "*.json")
        file.write_text(json.dumps(damage(json.loads(file.read_text()))))
        files.append(file)
    finetune = json.loads(report.FINETUNE.read_text())
    finetune[3] = {**finetune[3], "exact_after": "yes"}
    finetune.append([[[]]])
    report.FINETUNE.write_text(json.dumps(finetune))
    monkeypatch.setattr(sys, "argv", ["report", "--check"])
    with pytest.raises(SystemExit, match="tables differ"):
        report.main()
    lines = capsys.readouterr().err.splitlines()
    assert lines[:3] == [
        f"warning: {files[0]}: skipped, not a complete results.json (field steps is missing)",
        f"warning: {files[1]}: skipped, not a complete results.json (field position_accuracy "
        "must be an object, not null)",
        f"warning: {files[2]}: skipped, not a complete results.json (field metrics must be an "
        'object, not "x")',
    ]
    assert lines[3:] == [
        f"warning: {report.FINETUNE}: record 3 skipped (field exact_after must be true or "
        'false, not "yes")',
        f"warning: {report.FINETUNE}: record {len(finetune) - 1} skipped (must be an object, "
        "not a list)",
    ]


def test_an_unreadable_finetune_file_is_one_line(copied, monkeypatch):
    report, _ = copied
    report.FINETUNE.write_text("[" * 100_000)
    monkeypatch.setattr(sys, "argv", ["report", "--check"])
    with pytest.raises(SystemExit) as caught:
        report.main()
    assert caught.value.code == f"{report.FINETUNE}: error: invalid JSON: nested too deeply"


# ------------------------------------------------------------------ sweeps


GRID = """out = "runs"
results = "records"

[base]
task = "tomita2"
steps = 3
bins = [[1, 8], [9, 16]]
train_max = 8
"""


def test_a_damaged_record_is_an_unfinished_run_named_with_its_field(tmp_path):
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    [run], _ = load_grid(grid)
    run.record.parent.mkdir()
    run.record.write_text(json.dumps({"kind": "sequence"}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert collect(grid, records_only=True) == []
    expected = f"{run.record}: skipped, not a complete results.json (field task is missing)"
    assert [str(w.message) for w in caught] == [expected]
    assert unreadable(run) == [expected]


@pytest.mark.parametrize("key", ["out", "results"])
def test_a_directory_name_too_long_for_the_file_system_is_refused_by_its_key(tmp_path, key):
    """A 5,000-character ``out`` ended ``crasp sweep`` in an OSError traceback (ENAMETOOLONG
    from a path check); it is refused when the grid is read, naming the key."""
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID.replace(f'{key} = "', f'{key} = "{"a" * 5000}', 1))
    with pytest.raises(CraspError) as caught:
        load_grid(grid)
    [diagnostic] = caught.value.diagnostics
    assert diagnostic.message.startswith(f"{key}: cannot use 'aaaa"), diagnostic.message
    assert "File name too long" in diagnostic.message and len(diagnostic.message) < 200


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("grid.toml", "results: 'grid.toml' is a file, not a directory"),
        ("grid.toml/records", "results: 'grid.toml/records' is inside "),
    ],
)
def test_a_results_directory_that_is_a_file_is_refused_with_its_line(tmp_path, value, message):
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID.replace('results = "records"', f'results = "{value}"'))
    with pytest.raises(CraspError) as caught:
        load_grid(grid)
    [diagnostic] = caught.value.diagnostics
    assert diagnostic.message.startswith(message) and diagnostic.span.line == 2


PROVENANCE = {
    "commit": "0" * 40,
    "modified": False,
    "package_version": "0.1.0",
    "python": "3.11.7",
    "numpy": "2.4.6",
    "torch": "2.13.0+cpu",
    "cpu": "a CPU",
    "platform": "Linux",
    "device": "cpu",
    "torch_threads": 2,
    "dtype": "float32",
}
THEORY = {"source": "program", "class": "C-RASP[∅]", "ape": "yes", "nope": None, "text": []}


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("provenance", {**PROVENANCE, "torch_threads": -1}, "provenance.torch_threads"),
        ("provenance", {**PROVENANCE, "commit": 7}, "provenance.commit"),
        ("provenance", {k: v for k, v in PROVENANCE.items() if k != "cpu"}, "provenance.cpu"),
        ("provenance", [], "provenance"),
        ("theory", {**THEORY, "ape": "maybe"}, "theory.ape"),
        ("theory", {**THEORY, "text": [1]}, "theory.text"),
    ],
)
def test_provenance_and_theory_are_checked_where_present(tmp_path, field, value, named):
    """Records written since provenance and the theory's reading were recorded carry
    them (optional: older records have neither); a malformed one is named."""
    record = _record("crasp_prediction")
    path = tmp_path / "results.json"
    path.write_text(json.dumps({**record, "provenance": PROVENANCE, "theory": THEORY}))
    assert read_results(path)["provenance"]["commit"] == "0" * 40
    path.write_text(
        json.dumps({**record, "provenance": PROVENANCE, "theory": THEORY, field: value})
    )
    with pytest.raises(CraspError, match=rf"field {named}\b"):
        read_results(path)
