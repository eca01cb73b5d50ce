"""The seeded fuzz harness (tests/fuzz): no traceback, crash, hang or silent disagreement
on a small run of every family.

The fuzz run is marked ``slow`` and deselected by default (pyproject.toml); run it with::

    python3 -m pytest tests/fuzz/test_fuzz.py -m slow
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fuzz import ROOT, harness
from tests.fuzz.__main__ import case_counts
from tests.fuzz.case import FAILING, Case, Limits, rng_for, run_child
from tests.fuzz.crasp import crasp_text
from tests.fuzz.grids import _base_grid, _grid_mutation
from tests.fuzz.lens import mutate_lens_config
from tests.fuzz.pcoc import pcoc_text
from tests.fuzz.records import mutate_record, record_files
from tests.fuzz.show import _check_picture, show_spec


def test_cases_are_reproducible_from_family_seed_index():
    for family, make in (("crasp", crasp_text), ("pcoc", pcoc_text)):
        for index in range(20):
            first = make(rng_for(family, 7, index))
            second = make(rng_for(family, 7, index))
            assert first == second
    assert rng_for("crasp", 7, 1).random() != rng_for("crasp", 7, 2).random()
    spec_a, spec_b = _base_grid(random.Random(3)), _base_grid(random.Random(3))
    assert _grid_mutation(random.Random(5), spec_a) == _grid_mutation(random.Random(5), spec_b)
    assert spec_a == spec_b
    for index in range(20):
        rng_a, rng_b = rng_for("show", 7, index), rng_for("show", 7, index)
        assert show_spec(rng_a) == show_spec(rng_b)
        record = json.loads(record_files()[index].read_text())
        assert mutate_record(random.Random(index), json.loads(json.dumps(record))) == (
            mutate_record(random.Random(index), record)
        )
        config = {"cfg": {"act_fn": "relu", "n_ctx": 9}, "crasp": {"vocab": ["<bos>", "a"]}}
        first = mutate_lens_config(random.Random(index), json.loads(json.dumps(config)))
        assert first == mutate_lens_config(random.Random(index), config)


def test_cases_per_family():
    families = ["crasp", "pcoc", "show"]
    assert case_counts("7", families) == {"crasp": 7, "pcoc": 7, "show": 7}
    assert case_counts("crasp=14000, 5", families) == {"crasp": 14000, "pcoc": 5, "show": 5}
    assert case_counts("crasp=1,pcoc=2,show=3", families) == {"crasp": 1, "pcoc": 2, "show": 3}
    for bad in ("crasp=1", "lens=3,4", "crasp=x,4", "-1"):
        with pytest.raises(ValueError):
            case_counts(bad, families)


def test_show_pictures_are_checked(tmp_path):
    block = '<html><script type="application/json" id="data">{}</script></html>'
    findings = {}
    for name, data in {
        "escaped.html": block.format('{"t": "\\u003c!--\\u003cscript"}'),
        "raw.html": block.format('{"t": "<!--<script"}'),
        "nodata.html": "<html></html>",
        "empty.png": "",
        "text.png": "not a png",
        "ok.svg": '<?xml version="1.0"?><svg></svg>',
    }.items():
        (tmp_path / name).write_text(data)
        case = Case("show", 0, 0)
        _check_picture(case, tmp_path / name, Path(name).suffix)
        findings[name] = [(f.cls, f.kind) for f in case.findings]
    case = Case("show", 0, 0)
    _check_picture(case, tmp_path / "absent.svg", ".svg")
    findings["absent.svg"] = [(f.cls, f.kind) for f in case.findings]
    assert findings == {
        "escaped.html": [],
        "raw.html": [("bad_output", "raw < in the data block")],
        "nodata.html": [("bad_output", "no data block")],
        "empty.png": [("bad_output", "no picture")],
        "text.png": [("bad_output", "not a PNG")],
        "ok.svg": [],
        "absent.svg": [("bad_output", "no picture")],
    }


def test_lens_mutations_say_whether_they_change_the_model():
    config = {"cfg": {"model_name": "crasp", "act_fn": "relu", "n_ctx": 9}, "crasp": {"x": 1}}
    seen: dict[str, set[bool]] = {}
    for seed in range(300):
        mutated = json.loads(json.dumps(config))
        what, path, meaning = mutate_lens_config(random.Random(seed), mutated)
        if path[:1] != ("cfg",):
            assert not meaning, what
            continue
        if path == ("cfg",):  # the whole cfg replaced or deleted
            assert meaning, what
            continue
        field = path[1]
        old, new = config["cfg"][field], mutated["cfg"].get(field)
        changed = field not in mutated["cfg"] or type(new) is not type(old) or new != old
        assert meaning == (field != "model_name" and changed), what
        seen.setdefault(field, set()).add(meaning)
    assert seen["model_name"] == {False}
    assert True in seen["act_fn"] and True in seen["n_ctx"]


def _spin(case, rng):
    while True:
        pass


def _spin_deaf(case, rng):
    """Spins with the harness's timer signals blocked: only the kernel's RLIMIT_CPU stops it."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPROF, signal.SIGALRM})
    while True:
        pass


def _nap(case, rng):
    """Takes far more wall-clock time than CPU time, as any case does on a loaded machine."""
    time.sleep(1.5)
    case.ran.append("nap")


def _sleep_forever(case, rng):
    time.sleep(3600)


def _sleep_deaf(case, rng):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPROF, signal.SIGALRM})
    time.sleep(3600)


def _spinning_child(case, rng):
    assert run_child(case, "child", [sys.executable, "-c", "while True: pass"]) is None


def _run_in_worker(monkeypatch, function, limits) -> dict:
    """One case of a family that runs ``function``, in the harness's worker process."""
    monkeypatch.setitem(harness.FUZZERS, "test", function)
    worker = harness.Worker(memory_gib=0)
    if "fork" not in worker.context.get_start_method():
        pytest.skip("the test family reaches the worker only when it is forked")
    try:
        return worker.run("test", 0, 0, limits)
    finally:
        worker.stop()


def _message(outcome: dict) -> str:
    return " ".join(f["message"] for f in outcome["findings"])


def test_a_spinning_case_is_a_hang_by_cpu_time(monkeypatch):
    outcome = _run_in_worker(monkeypatch, _spin, Limits(cpu=0.3, wall=600, hard_cpu=60))
    assert outcome["class"] == "slow"  # not a CLI family: a slow case, interrupted
    assert "used 0.3 CPU-s" in _message(outcome)
    monkeypatch.setattr(harness, "TIMEOUT_IS_HANG", {"test"})
    outcome = _run_in_worker(monkeypatch, _spin, Limits(cpu=0.3, wall=600, hard_cpu=60))
    assert outcome["class"] == "hang"
    assert "used 0.3 CPU-s" in _message(outcome)


def test_a_case_deaf_to_the_timers_is_killed_at_the_hard_cpu_limit(monkeypatch):
    limits = Limits(cpu=0.3, wall=600, hard_cpu=1)
    outcome = _run_in_worker(monkeypatch, _spin_deaf, limits)
    assert outcome["class"] == "hang"
    assert "hard limit of 1 CPU-s" in _message(outcome)


def test_a_child_that_spins_is_a_hang_by_cpu_time(monkeypatch):
    limits = Limits(cpu=1, wall=600, hard_cpu=60)
    outcome = _run_in_worker(monkeypatch, _spinning_child, limits)
    assert outcome["class"] == "hang"
    assert "passed its limit of 1 CPU-s" in _message(outcome)


def test_a_case_slowed_by_load_is_not_a_hang(monkeypatch):
    # 1.5 s of wall-clock time on 0.3 CPU-s of limit: fine, however busy the machine
    outcome = _run_in_worker(monkeypatch, _nap, Limits(cpu=0.3, wall=600, hard_cpu=60))
    assert outcome["class"] == "ok", outcome
    assert outcome["ran"] == ["nap"]
    assert outcome["seconds"] >= 1.5 > outcome["cpu"]


def test_a_blocked_case_is_a_hang_by_wall_clock(monkeypatch):
    limits = Limits(cpu=60, wall=0.5, hard_cpu=120)
    outcome = _run_in_worker(monkeypatch, _sleep_forever, limits)
    assert outcome["class"] == "hang"
    assert "still running after 0.5 s wall-clock" in _message(outcome)
    outcome = _run_in_worker(
        monkeypatch, _sleep_deaf, Limits(cpu=60, wall=0.5, hard_cpu=120, grace=0.5)
    )
    assert outcome["class"] == "hang"
    assert "no result after 1 s" in _message(outcome)
    assert "worker killed" in _message(outcome)


@pytest.mark.slow
def test_small_fuzz_run_has_no_failures(tmp_path):
    """Every family, new seeds each release: no traceback, crash, hang, disagreement or
    bad output; a refused lens config names its field and none that changes the model is
    accepted (the lens family's notes)."""
    out = tmp_path / "fuzz.json"
    counts = {"crasp": 50, "pcoc": 50, "inputs": 50, "models": 50, "grids": 50}
    counts |= {"show": 20, "records": 20, "lens": 20}
    command = [sys.executable, "-m", "tests.fuzz", "--families", ",".join(counts), "--cases"]
    command += [",".join(f"{k}={v}" for k, v in counts.items()), "--seed", "0"]
    command += ["--out", str(out), "--quiet"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(out.read_text())
    assert summary["meta"]["cases_run"] == counts
    for family, count in counts.items():
        assert sum(summary["counts"][family].values()) == count
        assert "ok" in summary["counts"][family]  # some cases get through every step
    failing = [
        k
        for k in summary["kinds"]
        if k["class"] in FAILING
        or (k["family"] == "lens" and k["class"] in ("unlocated", "accepted_invalid"))
        or k["step"] in ("harness", "worker", "prepare")
    ]
    report = "\n".join(
        f"{k['family']} {k['class']} {k['exc']} {k['where'] or k['step']} x{k['count']}: "
        f"{k['example']['message'][:200]} (repro: python -m tests.fuzz --repro "
        f"{k['family']}:0:{k['example']['index']})"
        for k in failing
    )
    assert failing == [] and summary["failing"] == 0, report
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert summary["meta"]["package"] == "crasp_compiler"  # this checkout's, named relative
    assert summary["meta"]["revision"]["crasp_compiler_file"] == "crasp_compiler/__init__.py"
    assert all(not Path(a).is_absolute() for a in summary["meta"]["argv"])
