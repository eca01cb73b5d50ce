"""The pure helpers of benchmarks/standing.py: the paper's design point, the growth
exponents, the targets of issue 26 and the tables. None of this runs a measurement."""

from __future__ import annotations

from pathlib import Path

from tests.support.scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "standing.py"


def _load():
    return load_benchmark("standing")


def test_design_point_is_the_papers_width():
    standing = _load()
    # issue 26: ~580 at n = 64, ~1,280 at 128, 2,817 at 256
    assert [standing.design_point(n) for n in (64, 128, 256)] == [577, 1281, 2817]
    assert standing.design_point(100) == 100 * (2 + 7) + 101  # ⌈log₂ 100⌉ = 7


def _rows(ns, exponent):
    return [
        {"n": n, **{key: 3.0 * n**exponent for key in _load().GROWN}, "rss_growth_mib_compile": 0}
        for n in ns
    ]


def test_exponents_fit_and_per_doubling():
    standing = _load()
    grown = standing.exponents(_rows([8, 16, 32, 64, 128, 256], 1.5))
    assert grown["width"]["all"] == 1.5 and grown["width"]["from_64"] == 1.5
    assert grown["width"]["per_doubling"] == {f"{n}→{2 * n}": 1.5 for n in (8, 16, 32, 64, 128)}
    # a quantity that is zero has no exponent (no logarithm), not a crash
    assert grown["rss_growth_mib_compile"] == {"all": None, "from_64": None, "per_doubling": {}}


def _data(width_128=600, over_interpreter=50.0, ids_over_floor=3.0, startup=1.5):
    pcoc = [
        {
            "n": n,
            "width": width_128 * n // 128,
            "design_point": _load().design_point(n),
            "parameters": n * n,
            "nonzero": 60 * n,
            "layers": 3 + n.bit_length(),
            "compile_cpu_s": n / 1000,
            "peak_rss_mib_start": 45.0,
            "peak_rss_mib_compile": 45.0 + n,
            "rss_growth_mib_compile": float(n),
            "forward_cpu_s_8_inputs": n / 100,
            "interpreter_cpu_s_8_inputs": n / 100 / over_interpreter,
            "over_interpreter": over_interpreter,
            "peak_rss_mib_end": 50.0 + n,
            "float64_error_bound": 1e-3,
            "float64_error_measured": 1e-7,
        }
        for n in (64, 128, 256, 512, 1024)
    ]
    runtime_rows = [
        {"batch": b, "n": n, "runtime": case, "cpu_ms": 1.0, "over_floor": f, "over_interpreter": i}
        for b, n in ((8, 4096), (1, 1_000_000))
        for case, f, i in (
            ("floor (ids)", 1.0, 0.1),
            ("interpreter (tokens)", 10.0, 1.0),
            ("numpy float64 (ids)", ids_over_floor, 0.5),
            ("numpy float64 (tokens)", 8.0, 0.9),
            ("torch.compile float64 (ids)", 40.0, 4.0),  # beside the targets, not held to them
        )
    ]
    return {
        "machine": {
            "cpu": "x",
            "cores": 2,
            "python": "3",
            "numpy": "2",
            "load_average_start": [1, 1, 1],
        },
        "date": "today",
        "command": "python benchmarks/standing.py",
        "depth": [],
        "pcoc": {"rows": pcoc, "exponents": _load().exponents(pcoc)},
        "runtime": {
            "repeats": 3,
            "rows": runtime_rows,
            "peak": [
                {"runtime": "floor", "bytes_per_token": 20.0},
                {"runtime": "numpy float64", "bytes_per_token": 30.0},
            ],
        },
        "startup": {
            "rounds": 3,
            "rows": [
                {
                    "command": c,
                    "cpu_s_median": 0.1,
                    "cpu_s_min": 0.1,
                    "cpu_s_max": 0.1,
                    "over_import_numpy": r,
                }
                for c, r in (
                    ("import numpy", 1.0),
                    ('crasp run TMP "( )"', startup),
                    ("crasp compile examples/crasp/dyck1.cr -o TMP", startup),
                )
            ],
        },
    }


def test_targets_met_and_not_met():
    standing = _load()
    met = {t["target"]: t["met"] for t in standing.targets(_data())}
    assert all(met.values()), met
    assert len(met) == 16
    missed = {
        t["target"]
        for t in standing.targets(
            _data(width_128=3000, over_interpreter=150.0, ids_over_floor=5.0, startup=2.5)
        )
        if t["met"] is False
    }
    assert missed == {
        "permute width at n = 128 ≤ 2 × 1,281",
        "permute width at n = 256 ≤ 2 × 2,817",
        "routed forward at n = 128 ≤ 100 × the interpreter",
        "8 × 4,096: every runtime ≤ 4 × the floor from ids",
        '`crasp run TMP "( )"` ≤ 2 × `import numpy` (whole-process CPU)',
        "`crasp compile examples/crasp/dyck1.cr -o TMP` ≤ 2 × `import numpy` (whole-process CPU)",
    }


def test_targets_not_measured_where_a_section_is_absent():
    standing = _load()
    data = _data()
    del data["startup"], data["runtime"]
    data["pcoc"] = {"rows": [], "exponents": {}}
    assert {t["met"] for t in standing.targets(data)} == {None}


def test_markdown_shows_every_section():
    standing = _load()
    data = _data()
    data["targets"] = standing.targets(data)
    text = standing.markdown(data)
    for heading in (
        "### Runtime",
        "### PCOC sends",
        "### Start-up",
        "### tracr",
        "### The targets",
    ):
        assert heading in text
    assert "| numpy float64 (tokens) |" in text and "| 30 |" in text  # its peak bytes
    assert "| 1,024 | 4,800 | 13,313 |" in text  # width beside the design point
    assert "not importable" in text


def test_command_line_is_relative_to_the_checkout():
    standing = _load()
    line = standing.command_line([str(SCRIPT), "--out", str(ROOT / "docs" / "x.json"), "--ns", "8"])
    assert line == "python benchmarks/standing.py --out docs/x.json --ns 8"
