"""Trained models read against their compiled programs, inside (``crasp compare``), on
four programs × 5 seeds, and the page ``docs/inside.md`` made from the records.

    python benchmarks/inside.py run --work RUNS    # train (APE, quick preset) + compare
    python benchmarks/inside.py report             # docs/inside.md from the records
    python benchmarks/inside.py report --check     # the page matches the records

``run`` writes one record per (program, seed) to ``docs/results/inside/`` (the
``compare.json`` of that run, with the run's own results and provenance); the trained
models stay in ``--work``. CPU minutes per run on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "results" / "inside"
PAGE = ROOT / "docs" / "inside.md"
PROGRAMS = {
    "majority": "examples/crasp/majority.crasp",
    "dyck1": "examples/crasp/dyck1.cr",
    "contains_ab": "examples/crasp/contains_ab.crasp",
    "c_near_a": "examples/crasp/c_near_a.cr",
}
# Readings: the record's name, the run it reads (a key of PROGRAMS) and the program it is
# read against (None: the run's own).
READINGS = [
    *((name, name, None) for name in PROGRAMS),
    ("contains_ab_prefix", "contains_ab", "benchmarks/programs/contains_ab_prefix.cr"),
]
SEEDS = range(5)


def run(work: Path) -> None:
    """Train and compare every (program, seed); records to :data:`RECORDS`."""
    from crasp_compiler.experiments.compare import compare
    from crasp_compiler.experiments.tasks.program import ProgramTask
    from crasp_compiler.experiments.train.loop import TrainConfig, train
    from crasp_compiler.files import writable_dir, write_text

    writable_dir(RECORDS)
    for name, trained, against in READINGS:
        for seed in SEEDS:
            out = work / trained / f"seed{seed}"
            if not (out / "results.json").exists():
                task = ProgramTask.from_file(ROOT / PROGRAMS[trained])
                config = TrainConfig(task=task, seed=seed, out_dir=str(out), progress=False)
                train(config)
            record = compare(out, against=None if against is None else ROOT / against)
            record["run"] = f"{trained}/seed{seed}"
            record["program_file"] = against or PROGRAMS[trained]
            record["results"] = json.loads((out / "results.json").read_text())
            for key in ("loss_history", "eval_history"):
                record["results"].pop(key, None)
            for config in (record["train"], record["results"]["config"]):
                config["out_dir"] = f"RUNS/{trained}/seed{seed}"  # no machine's path
            write_text(RECORDS / f"{name}_seed{seed}.json", json.dumps(record, indent=1) + "\n")
            print(f"{name} seed {seed}: done", file=sys.stderr)


def _load() -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for name, _, _ in READINGS:
        files = sorted(RECORDS.glob(f"{name}_seed[0-9]*.json"))
        out[name] = [json.loads(f.read_text()) for f in files]
    return out


def _mean_range(values: Sequence[float | None]) -> str:
    xs = [v for v in values if v is not None]
    if not xs:
        return "–"
    if len(xs) == 1:
        return f"{xs[0]:.2f}"
    return f"{statistics.mean(xs):.2f} ({min(xs):.2f}–{max(xs):.2f})"


def _at(row: Sequence[float | None], stage: int) -> float | None:
    return row[stage] if stage < len(row) else None


def _best(row: Sequence[float | None]) -> float | None:
    xs = [v for v in row if v is not None]
    return max(xs) if xs else None


def _mode(values: Sequence[str | None]) -> str:
    xs = [v for v in values if v is not None]
    if not xs:
        return "–"
    top = max(set(xs), key=lambda v: (xs.count(v), -xs.index(v)))
    return f"{top} ({xs.count(top)}/{len(values)})"


def _first_at(row: Sequence[float | None], stages: Sequence[str], level: float) -> str:
    for stage, value in zip(stages, row, strict=True):
        if value is not None and value >= level:
            return stage
    return "–"


def _task_section(name: str, records: list[dict[str, Any]]) -> list[str]:
    first = records[0]
    bins = list(first["bins"])
    inside, last = bins[0], bins[-1]
    lines = [
        f"### {name}: runs of `{PROGRAMS[first['run'].split('/')[0]]}` read against "
        f"`{first['program_file']}`, {len(records)} seeds",
        "",
        "Output accuracy of the trained models (whole sequence right) on the probe inputs: "
        + ", ".join(
            f"LEN {b}: {_mean_range([r['output_accuracy'][b]['sequence'] for r in records])}"
            for b in bins
        )
        + ".",
        "",
        f"| variable | compiled: found from | best stage (seeds) | trained, LEN {inside} | "
        f"before training (best stage) | shuffled | trained, LEN {last} |",
        "|---|---|---|---|---|---|---|",
    ]
    for index, variable in enumerate(first["variables"]):
        rows = [r["variables"][index] for r in records]
        compiled = _first_at(variable["compiled"][inside], first["compiled_stages"], 0.97)
        stages = [row["best_stage"] for row in rows]
        at = [None if s is None else first["stages"].index(s) for s in stages]
        score = [
            None if i is None else _at(row["scores"][inside], i)
            for row, i in zip(rows, at, strict=True)
        ]
        control = [_best(row["random_init"][inside]) for row in rows]
        shuffled = [
            None if i is None else _at(row["shuffled"][inside], i)
            for row, i in zip(rows, at, strict=True)
        ]
        longer = [
            None if i is None else _at(row["scores"][last], i)
            for row, i in zip(rows, at, strict=True)
        ]
        kind = "balanced acc." if variable["kind"] == "bool" else "R²"
        lines.append(
            f"| `{variable['target']}` ({kind}) | {compiled} | {_mode(stages)} | "
            f"{_mean_range(score)} | {_mean_range(control)} | {_mean_range(shuffled)} | "
            f"{_mean_range(longer)} |"
        )
    lines += [
        "",
        "| intervention | at (seeds) | changed outputs | follow | random direction | unpatched | stay |",
        "|---|---|---|---|---|---|---|",
    ]
    targets = sorted(
        {iv["target"] for r in records for iv in r["interventions"]},
        key=[v["target"] for v in first["variables"]].index,
    )
    for target in targets:
        ivs = [iv for r in records for iv in r["interventions"] if iv["target"] == target]
        lines.append(
            f"| `{target}` | {_mode([iv['stage'] for iv in ivs])} | "
            f"{sum(iv['changed_positions'] for iv in ivs):,} | "
            f"{_mean_range([iv['follow'] for iv in ivs])} | "
            f"{_mean_range([iv['follow_random_direction'] for iv in ivs])} | "
            f"{_mean_range([iv['follow_unpatched'] for iv in ivs])} | "
            f"{_mean_range([iv['stay'] for iv in ivs])} |"
        )
    lines += [
        "",
        "| compiled head | closest trained head (seeds) | TV | before training | uniform causal |",
        "|---|---|---|---|---|",
    ]
    for j, head in enumerate(first["heads"]["compiled"]):
        matches = [r["heads"]["best_match"][j] for r in records]
        lines.append(
            f"| {head} | {_mode([m['trained'] for m in matches])} | "
            f"{_mean_range([m['tv'] for m in matches])} | "
            f"{_mean_range([m['tv_random_init'] for m in matches])} | "
            f"{_mean_range([m['tv_uniform'] for m in matches])} |"
        )
    return [*lines, ""]


HEAD = """# Inside the trained models: the compiled program as ground truth

Generated by `python benchmarks/inside.py report` from the records in
`docs/results/inside/` (made by `python benchmarks/inside.py run`; each record holds its
code commit, library versions, CPU and platform). Do not edit by hand.

Four programs, 5 seeds each, trained with `crasp train --program` defaults (APE, 2
layers, 2 heads, width 64, LEN 1–50, at most 1,000 steps, stopping at 100%
in-distribution accuracy), then read with `crasp compare` defaults (probes fitted on 256
inputs of LEN 1–50, scored on 128 held-out inputs per bin; 64 intervention pairs).
`crasp compare --help` and the module docstring of `crasp_compiler/experiments/compare.py`
define every column. Cells: mean over seeds (lowest–highest). Scores: balanced accuracy
for Booleans (chance 0.5), R² for counts (chance 0; negative: worse than the mean).
"compiled: found from" is where the same probes first reach 0.97 on the compiled
model's own residual (its layers, not the trained model's).

## What it shows, and what it cannot

{findings}

A linear probe that finds a variable shows that the residual holds it linearly, not that
the model uses it; the "before training" column (the same network at its initialisation,
rebuilt from the run's seed) shows how much of a score the architecture gives for free
(near-uniform attention averages tokens, so prefix fractions are linear in an untrained
model too; a random position table gives position facts such as parity). The
interventions are the causal evidence, and they too test one direction at one stage: a
variable the model spreads over several directions or stages can be used and still not
follow. Five seeds give a spread, not an interval.

"""


def report(check: bool) -> int:
    records = _load()
    missing = [name for name, rs in records.items() if not rs]
    if missing:
        print(f"no records for {', '.join(missing)} in {RECORDS}", file=sys.stderr)
        return 1
    findings = (ROOT / "benchmarks" / "inside_findings.md").read_text().strip()
    lines = [HEAD.format(findings=findings)]
    for name, rs in records.items():
        lines += _task_section(name, rs)
    commits = sorted(
        {(r["provenance"].get("commit") or "?")[:10] for rs in records.values() for r in rs}
    )
    cpus = sorted({r["provenance"].get("cpu", "?") for rs in records.values() for r in rs})
    lines.append(f"Records made on commit(s) {', '.join(commits)}; CPU: {'; '.join(cpus)}.")
    text = "\n".join(lines).rstrip() + "\n"
    if check:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(
                f"{PAGE.relative_to(ROOT)} does not match the records: rerun `report`",
                file=sys.stderr,
            )
            return 1
        return 0
    PAGE.write_text(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    go = sub.add_parser("run")
    go.add_argument("--work", type=Path, required=True, help="where the trained runs go")
    page = sub.add_parser("report")
    page.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "run":
        run(args.work)
        return 0
    return report(args.check)


if __name__ == "__main__":
    sys.exit(main())
