"""The seeded fuzz harness (benchmarks/fuzz.py): no traceback, crash, hang or silent
disagreement on a small run of every family.

The fuzz run is marked ``slow`` and deselected by default (pyproject.toml); run it with::

    python3 -m pytest tests/cli/test_fuzz.py -m slow
"""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "fuzz.py"


def _load_fuzz():
    spec = importlib.util.spec_from_file_location("crasp_fuzz", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_cases_are_reproducible_from_family_seed_index():
    fuzz = _load_fuzz()
    for family, make in (("crasp", fuzz.crasp_text), ("pcoc", fuzz.pcoc_text)):
        for index in range(20):
            first = make(fuzz.rng_for(family, 7, index))
            second = make(fuzz.rng_for(family, 7, index))
            assert first == second
    assert fuzz.rng_for("crasp", 7, 1).random() != fuzz.rng_for("crasp", 7, 2).random()
    spec_a, spec_b = fuzz._base_grid(random.Random(3)), fuzz._base_grid(random.Random(3))
    assert fuzz._grid_mutation(random.Random(5), spec_a) == fuzz._grid_mutation(
        random.Random(5), spec_b
    )
    assert spec_a == spec_b


@pytest.mark.slow
def test_small_fuzz_run_has_no_failures(tmp_path):
    out = tmp_path / "fuzz.json"
    command = [
        sys.executable,
        str(SCRIPT),
        "--families",
        "crasp,pcoc,inputs,models,grids",
        "--cases",
        "50",
        "--seed",
        "0",
        "--out",
        str(out),
        "--quiet",
    ]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(out.read_text())
    assert all(
        summary["meta"]["cases_run"][family] == 50
        for family in ("crasp", "pcoc", "inputs", "models", "grids")
    )
    failing = [
        k for k in summary["kinds"] if k["class"] in ("traceback", "crash", "hang", "disagree")
    ]
    report = "\n".join(
        f"{k['family']} {k['class']} {k['exc']} {k['where'] or k['step']} x{k['count']}: "
        f"{k['example']['message'][:200]} (repro: python benchmarks/fuzz.py --repro "
        f"{k['family']}:0:{k['example']['index']})"
        for k in failing
    )
    assert summary["failing"] == 0, report
    assert proc.returncode == 0, proc.stdout[-3000:]
