"""The tables of docs/length-generalization.md, regenerated from the committed raw results.

Every table of the page sits between ``<!-- table: NAME -->`` and ``<!-- end table -->``
and is computed here from the per-run records under ``docs/results/length-generalization/``
(written by ``crasp sweep`` for the grids under ``benchmarks/grids/`` and by the scripts
``benchmarks/finetune_compiled.py``, ``positional_kernels.py`` and ``value_finetune.py``):

- (a) per task and positional encoding: accuracy per length bin, the compiled model's
  accuracy and the trained/compiled agreement, next to the C-RASP paper's prediction
  (``length_generalization.toml``, ``crasp_rest.toml``); the paper's random baseline, a
  two-layer MLP over the current token (``random_baseline.toml``); the best
  in-distribution checkpoint rule (``select_best.toml``) beside the last checkpoint;
- (b) per Chomsky task and encoding: per-token accuracy per length bin, next to the
  randomized-PE paper's Table 4, and where each cell trained (``chomsky.toml``,
  ``chomsky_rest.toml``);
- (c) per numeric task and model: MSE per value scale, next to the positional-attention
  papers' released results; V-only fine-tuning on 10× data, next to that paper's
  Table 1 (``value_finetune.py``);
- (d) fine-tuning the compiled models: how many seeds stay exact;
- the stopping rule on D₂, D₃ and D₄ (``early_stopping.toml``,
  ``early_stopping_d3_d4.toml``): stop at the first 100 % in
  distribution against the full budget, paired by seed;
- Tomita 4, (aa)* and (abab)* with 10 seeds on one machine (``ten_seeds.toml``), in
  the form of (a);
- the positional kernels of the C-RASP paper's Appendix G.2, made by
  ``benchmarks/positional_kernels.py`` from its records (``positional_kernels/``).

``--verify N`` retrains N records drawn at random on this machine and prints, per score,
whether the new value equals the record, falls within the range of its cell's recorded
seeds, or outside it: how far the page's numbers hold on another machine.

A cell of (a) and (b) is the mean over seeds with its 95 % Student-t interval
(:func:`interval`); a cell of (c), beside the papers' medians, is the median over seeds
with the 10th–90th percentile range (:func:`spread`); the per-seed values are in the
records.

Usage::

    python benchmarks/length_generalization_report.py           # rewrite the page's tables
    python benchmarks/length_generalization_report.py --check   # exit 1 if they differ
    python benchmarks/length_generalization_report.py --figures docs/figures
    python benchmarks/length_generalization_report.py --verify 5   # retrain 5 records
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import math
import re
import sys
import warnings
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

import numpy as np
from scipy import stats

from crasp_compiler.console import warnings_on_stderr
from crasp_compiler.errors import CraspError
from crasp_compiler.experiments.tasks.chomsky import ChomskyTask
from crasp_compiler.experiments.tasks.registry import get_task
from crasp_compiler.experiments.train.records import read_finetune_records
from crasp_compiler.experiments.train.sweep import collect, load_grid

ROOT = Path(__file__).resolve().parent.parent
GRIDS = ROOT / "benchmarks" / "grids"
PAGE = ROOT / "docs" / "length-generalization.md"
FINETUNE = ROOT / "docs" / "results" / "length-generalization" / "finetune.json"

# the C-RASP paper's prediction: does the encoding length-generalise on this class?
PREDICTION = {
    "C-RASP[∅]": {"ape": "yes", "nope": "yes"},
    "C-RASP[periodic,local]": {"ape": "yes", "nope": "no"},
    "none": {"ape": "no", "nope": "no"},
}
# Ruoss et al. (2023), Table 4: accuracy (%) averaged over test lengths 41-500, mean ± sd
# over 10 seeds at the best learning rate, every column (ours -> theirs: nope -> None,
# sin -> sin/cos, ape -> Learned, random -> R-sin/cos, random-X -> R-X)
RUOSS_COLUMNS = (
    "nope", "sin", "relative", "alibi", "rope", "ape",
    "random", "random-relative", "random-alibi", "random-rope", "random-learned",
)  # fmt: skip
RUOSS_TABLE4 = {
    task: dict(zip(RUOSS_COLUMNS, values, strict=True))
    for task, values in {
        "even_pairs": ("50.1 ± 0.1", "50.4 ± 0.2", "67.6 ± 15.3", "59.8 ± 3.2", "50.4 ± 0.3", "50.4 ± 0.2", "99.7 ± 0.3", "99.6 ± 0.6", "71.4 ± 5.6", "100.0 ± 0.0", "96.2 ± 0.7"),
        "modular_arithmetic": ("20.0 ± 0.0", "20.2 ± 0.2", "20.7 ± 0.5", "23.2 ± 0.9", "20.8 ± 0.5", "20.1 ± 0.1", "24.2 ± 1.4", "24.9 ± 1.7", "20.8 ± 0.3", "23.5 ± 1.6", "20.2 ± 0.4"),
        "parity_check": ("50.4 ± 0.8", "50.3 ± 0.2", "50.4 ± 0.6", "50.5 ± 0.6", "50.4 ± 0.4", "50.0 ± 0.1", "51.1 ± 1.3", "51.4 ± 0.5", "50.0 ± 0.2", "50.4 ± 1.0", "50.6 ± 0.9"),
        "cycle_navigation": ("33.9 ± 10.5", "23.8 ± 1.4", "21.7 ± 0.8", "31.1 ± 3.8", "22.3 ± 0.9", "21.0 ± 1.2", "30.3 ± 10.7", "45.9 ± 9.9", "26.3 ± 2.4", "52.9 ± 15.3", "31.9 ± 8.2"),
        "stack_manipulation": ("50.2 ± 0.1", "47.3 ± 1.9", "50.1 ± 3.3", "51.0 ± 8.0", "49.6 ± 3.0", "44.9 ± 3.7", "69.2 ± 3.2", "71.7 ± 4.7", "69.5 ± 1.1", "66.0 ± 2.0", "66.1 ± 2.5"),
        "reverse_string": ("52.7 ± 0.1", "50.4 ± 0.1", "54.2 ± 1.5", "56.3 ± 2.6", "51.2 ± 0.3", "50.4 ± 0.2", "72.9 ± 1.6", "77.1 ± 6.6", "75.1 ± 1.3", "67.7 ± 1.1", "52.7 ± 0.2"),
        "modular_arithmetic_brackets": ("31.0 ± 0.1", "24.3 ± 2.2", "26.1 ± 2.0", "28.1 ± 3.4", "24.0 ± 2.4", "22.3 ± 1.5", "29.6 ± 4.6", "28.8 ± 5.5", "29.3 ± 1.6", "28.6 ± 3.9", "30.3 ± 2.6"),
        "solve_equation": ("20.1 ± 0.0", "20.9 ± 0.2", "21.9 ± 0.7", "23.6 ± 1.9", "21.9 ± 0.6", "20.2 ± 0.2", "23.6 ± 0.5", "25.4 ± 1.8", "21.1 ± 0.7", "22.3 ± 1.6", "21.1 ± 0.7"),
        "duplicate_string": ("52.7 ± 0.1", "50.4 ± 0.2", "51.0 ± 0.4", "51.0 ± 0.2", "50.4 ± 0.2", "50.4 ± 0.2", "69.0 ± 2.9", "73.1 ± 1.5", "67.9 ± 1.4", "67.1 ± 2.0", "52.8 ± 0.1"),
        "missing_duplicate_string": ("51.4 ± 1.0", "50.1 ± 0.6", "51.1 ± 1.1", "53.5 ± 0.4", "53.9 ± 1.6", "50.1 ± 0.4", "50.4 ± 1.5", "91.4 ± 9.8", "75.2 ± 3.4", "73.2 ± 1.2", "51.2 ± 1.4"),
        "odds_first": ("52.7 ± 0.1", "51.3 ± 0.2", "51.5 ± 0.5", "51.1 ± 0.2", "50.8 ± 0.2", "50.5 ± 0.1", "62.5 ± 2.0", "65.9 ± 1.6", "62.2 ± 1.4", "62.9 ± 1.3", "52.7 ± 0.1"),
        "binary_addition": ("49.4 ± 0.3", "47.3 ± 3.8", "51.7 ± 1.3", "48.5 ± 3.6", "47.8 ± 5.4", "48.9 ± 0.8", "61.2 ± 1.7", "62.0 ± 1.1", "54.3 ± 1.5", "57.4 ± 1.2", "59.9 ± 1.3"),
        "binary_multiplication": ("49.8 ± 0.0", "48.8 ± 1.0", "50.2 ± 3.5", "49.9 ± 2.3", "49.6 ± 0.6", "48.7 ± 1.7", "51.8 ± 0.2", "39.1 ± 7.1", "49.2 ± 1.2", "45.7 ± 6.6", "51.6 ± 0.2"),
        "compute_sqrt": ("50.2 ± 0.0", "50.1 ± 0.0", "51.5 ± 0.4", "50.5 ± 0.2", "50.3 ± 0.1", "50.1 ± 0.1", "51.9 ± 0.5", "52.4 ± 0.6", "51.1 ± 0.1", "51.8 ± 0.3", "51.0 ± 0.8"),
        "bucket_sort": ("23.7 ± 0.0", "25.6 ± 2.6", "83.4 ± 6.6", "29.3 ± 6.7", "23.6 ± 3.8", "20.7 ± 2.9", "99.3 ± 0.4", "99.4 ± 0.3", "98.8 ± 0.7", "99.3 ± 0.3", "98.9 ± 0.4"),
    }.items()
}  # fmt: skip
# the encodings (b) trains, in the table's order
ENCODINGS = (
    "nope", "sin", "ape", "random", "rope", "alibi", "relative",
    "random-rope", "random-alibi", "random-relative",
)  # fmt: skip
# the positional-attention papers' released results (n = 8, 30,000 samples): median MSE
# over 10 runs at c = 1 and c = 10, positional / standard
PAPER_MSE = {
    "num_cumsum": {"positional": (1.7e-5, 5.9e-2), "standard": (1.1e-5, 8.8e1)},
    "num_cummin": {"positional": (1.3e-5, 4.3e-2), "standard": (1.5e-6, 2.0e1)},
    "num_median": {"positional": (6.1e-5, 2.3e-2), "standard": (1.0e-4, 2.2e1)},
    "num_sort": {"positional": (1.2e-4, 1.5e-1), "standard": (9.1e-4, 5.5e1)},
    "num_max_subarray": {"positional": (1.8e-4, 2.6e-1), "standard": (1.2e-4, 2.0e2)},
}
SCALES = ("1", "2", "5", "10")


def interval(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean of ``values`` and its 95 % Student-t interval over seeds,
    ``mean ± t(0.975, n − 1)·s/√n`` (s the sample standard deviation); one value, or
    equal values: (v, v, v). It covers the mean with probability 0.95 where the seeds'
    values are normal; a percentile bootstrap over 5 seeds covers about 0.83
    (``tests/experiments/test_report_statistics.py``)."""
    data = np.asarray(values, dtype=float)
    mean = float(data.mean())
    if len(data) < 2 or np.all(data == data[0]):
        return mean, float(data.min()), float(data.max())
    half = float(stats.t.ppf(0.975, len(data) - 1) * data.std(ddof=1) / math.sqrt(len(data)))
    return mean, mean - half, mean + half


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """Median of ``values`` and their 10th and 90th percentiles (linear interpolation):
    what a table beside the papers' medians shows."""
    data = np.asarray(values, dtype=float)
    low, median, high = np.percentile(data, [10, 50, 90])
    return float(median), float(low), float(high)


def _fraction(values: Sequence[float]) -> str:
    """Mean [t-interval] of fractions, the interval clipped to [0, 1]."""
    mean, low, high = interval(values)
    shown = [f"{v:.2f}" for v in (mean, max(low, 0.0), min(high, 1.0))]
    return shown[0] if len(set(shown)) == 1 else f"{shown[0]} [{shown[1]}, {shown[2]}]"


def _percent(values: Sequence[float]) -> str:
    """Mean [t-interval] of fractions, in percent, the interval clipped to [0, 100]."""
    mean, low, high = (100 * v for v in interval(values))
    shown = [f"{v:.1f}" for v in (mean, max(low, 0.0), min(high, 100.0))]
    return shown[0] if len(set(shown)) == 1 else f"{shown[0]} [{shown[1]}, {shown[2]}]"


def _scientific(values: Sequence[float]) -> str:
    """Median (10–90 % range over seeds)."""
    median, low, high = spread(values)
    return f"{median:.1e}" if low == high else f"{median:.1e} ({low:.1e}–{high:.1e})"


def _rows(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _grouped(results: list[dict], key: Callable[[dict], tuple]) -> dict[tuple, list[dict]]:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for result in sorted(results, key=lambda r: r["config"]["seed"]):
        groups[key(result)].append(result)
    return groups


def _expected(grid: str) -> int:
    return len(load_grid(GRIDS / f"{grid}.toml")[0])


def crasp_table(results: list[dict]) -> str:
    """(a): accuracy per bin, mean [95 % t-interval] over seeds, per task and encoding."""
    if not results:
        return "No finished runs yet."
    groups = _grouped(results, lambda r: (r["task"], r["config"]["pe"]))
    order = {name: k for k, name in enumerate(dict.fromkeys(r["task"] for r in results))}
    bins = list(dict.fromkeys(b for r in results for b in r["accuracy"]))
    head = ["task", "class", "PE", "predicted", "seeds", *bins]
    head += [f"seeds ≥ 0.9 on {bins[2]}", "steps", "compiled", f"agreement {bins[-1]}"]
    rows = []
    for (task, pe), group in sorted(groups.items(), key=lambda kv: (order[kv[0][0]], kv[0][1])):
        cls = get_task(task).crasp_class
        row = [f"`{task}`", cls, pe.upper(), PREDICTION[cls][pe], str(len(group))]
        row += [  # a bin the task cannot sample (no feasible length) is left out of its runs
            _fraction([g["accuracy"][b] for g in group]) if b in group[0]["accuracy"] else "–"
            for b in bins
        ]
        row.append(f"{sum(g['accuracy'][bins[2]] >= 0.9 for g in group)} of {len(group)}")
        row.append(_steps(group))
        compiled = [g.get("compiled_accuracy") for g in group]
        if all(c is not None for c in compiled):
            row.append(f"{min(min(c.values()) for c in compiled):.2f} (lowest)")
            last = list(group[0]["agreement"])[-1]  # bins[-1], or the task's longest
            value = _fraction([g["agreement"][last] for g in group])
            row.append(value if last == bins[-1] else f"{value} (on {last})")
        else:
            row += ["no program", "–"]
        rows.append(row)
    return _rows(head, rows)


def _steps(group: list[dict]) -> str:
    """The steps the seeds trained for (``lo–hi``), ``*`` when some stopped early (100%
    in distribution)."""
    steps = [g["steps"] for g in group]
    text = f"{min(steps)}" if min(steps) == max(steps) else f"{min(steps)}–{max(steps)}"
    return text + ("*" if any(g.get("early_stopped") for g in group) else "")


def _devices(group: list[dict]) -> str:
    """Where a cell's seeds trained, from their records' provenance: ``CPU``, the GPU's
    name, or the count of each (``CPU 4, NVIDIA H200 1``); records made before provenance
    was recorded were all trained on CPUs (the project had no GPU then)."""
    where = [
        "CPU (before provenance)"
        if "provenance" not in g
        else g["provenance"].get("device_name", "CPU")
        if str(g["provenance"]["device"]).startswith("cuda")
        else "CPU"
        for g in group
    ]
    counts = {name: where.count(name) for name in dict.fromkeys(where)}
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{name} {count}" for name, count in counts.items())


def baseline_table(results: list[dict]) -> str:
    """(a): the random baseline (a two-layer MLP over the current token's embedding):
    accuracy per bin, mean [95 % t-interval] over seeds, per task."""
    if not results:
        return "No finished runs yet."
    groups = _grouped(results, lambda r: (r["task"],))
    bins = list(dict.fromkeys(b for r in results for b in r["accuracy"]))
    head = ["task", "class", "seeds", *bins, f"seeds ≥ 0.9 on {bins[2]}", "steps"]
    rows = []
    for (task,), group in groups.items():
        row = [f"`{task}`", get_task(task).crasp_class, str(len(group))]
        row += [
            _fraction([g["accuracy"][b] for g in group]) if b in group[0]["accuracy"] else "–"
            for b in bins
        ]
        row.append(f"{sum(g['accuracy'][bins[2]] >= 0.9 for g in group)} of {len(group)}")
        row.append(_steps(group))
        rows.append(row)
    return _rows(head, rows)


def select_table(best: list[dict]) -> str:
    """(a): the C-RASP paper's checkpoint rule beside ours on the same runs
    (``select_best.toml``): accuracy on the test bins of the last checkpoint (the record's
    ``last_accuracy``, or its ``accuracy`` where the best evaluation was the last) and of
    the best in-distribution one (the first of equal ones), the seeds ≥ 0.9 on the third
    bin under each rule, and the steps the best ones were taken at."""
    if not best:
        return "No finished runs yet."
    groups = _grouped(best, lambda r: (r["task"], r["config"]["pe"]))
    bins = list(dict.fromkeys(b for r in best for b in r["accuracy"]))
    head = ["task", "PE", "seeds", "checkpoint", *bins[1:], f"seeds ≥ 0.9 on {bins[2]}"]
    head.append("best taken at step (of)")
    rows = []
    for (task, pe), group in groups.items():
        for rule in ("last", "best"):
            scores = [
                g.get("last_accuracy", g["accuracy"]) if rule == "last" else g["accuracy"]
                for g in group
            ]
            row = [f"`{task}`", pe.upper(), str(len(group)), rule]
            row += [_fraction([a[b] for a in scores]) if b in scores[0] else "–" for b in bins[1:]]
            row.append(f"{sum(a[bins[2]] >= 0.9 for a in scores)} of {len(scores)}")
            steps = [f"{g.get('selected_step', g['steps'])} ({g['steps']})" for g in group]
            row.append(", ".join(steps) if rule == "best" else "")
            rows.append(row)
    return _rows(head, rows)


def _encoding(config: dict) -> str:
    """A run's encoding as (b) names it: ``random`` is the sinusoidal randomized one,
    ``random-BASE`` the others (``random-rope``, ``random-alibi``, ...)."""
    base = config.get("random_base", "sin")
    return config["pe"] if config["pe"] != "random" or base == "sin" else f"random-{base}"


def chomsky_table(results: list[dict]) -> str:
    """(b): per-token accuracy per bin and Ruoss et al.'s Table 4 number, per task and PE."""
    if not results:
        return "No finished runs yet."
    groups = _grouped(results, lambda r: (r["task"], _encoding(r["config"])))
    bins = list(results[0]["accuracy"])
    head = ["task", "level", "PE", "seeds", "trained on", *(f"per token {b} (%)" for b in bins)]
    head += [f"sequences {bins[-1]} (%)", "paper (Table 4, 41–500, %)"]
    rows = []
    for task in RUOSS_TABLE4:  # the benchmark's order: R, DCF, CS
        for pe in ENCODINGS:
            group = groups.get((task, pe))
            if not group:
                continue
            level = cast(ChomskyTask, get_task(task)).level
            row = [f"`{task}`", level, pe, str(len(group)), _devices(group)]
            row += [_percent([g["position_accuracy"][b] for g in group]) for b in bins]
            row.append(_percent([g["accuracy"][bins[-1]] for g in group]))
            row.append(RUOSS_TABLE4[task][pe])
            rows.append(row)
    return _rows(head, rows)


def _mse(result: dict, scale: str, metrics: str = "metrics") -> float:
    for key, value in (result.get(metrics) or {}).items():
        if float(key) == float(scale):
            return float(value["mse"])
    return math.nan


def value_table(results: list[dict]) -> str:
    """(c): MSE per value scale, median (10–90 % range) over seeds, per task and model."""
    if not results:
        return "No finished runs yet."
    groups = _grouped(results, lambda r: (r["task"], r["config"]["numeric_kind"]))
    head = ["task", "model", "seeds", *(f"MSE c={c}" for c in SCALES)]
    head += ["compiled MSE (c=10, worst seed)", "paper c=1 / c=10 (median of 10)"]
    rows = []
    for task, papers in PAPER_MSE.items():
        for kind, paper in papers.items():
            group = groups.get((task, kind))
            if not group:
                continue
            row = [f"`{task}`", kind, str(len(group))]
            row += [_scientific([_mse(g, c) for g in group]) for c in SCALES]
            row.append(f"{max(_mse(g, '10', 'compiled_metrics') for g in group):.1e}")
            row.append(f"{paper[0]:.1e} / {paper[1]:.1e}")
            rows.append(row)
    return _rows(head, rows)


def ratio_table(results: list[dict]) -> str:
    """(c): standard over positional MSE at c = 10, as the papers' ratio is formed (a
    ratio of medians), with the lowest and highest ratio of a standard seed's MSE to a
    positional seed's over every pair (a range, not an interval)."""
    groups = _grouped(results, lambda r: (r["task"], r["config"]["numeric_kind"]))
    rows = []
    for task, papers in PAPER_MSE.items():
        pos, std = groups.get((task, "positional")), groups.get((task, "standard"))
        if not pos or not std:
            continue
        a = np.array([_mse(g, "10") for g in std])
        b = np.array([_mse(g, "10") for g in pos])
        pairs = a[:, None] / b[None, :]
        paper = papers["standard"][1] / papers["positional"][1]
        ours = float(np.median(a) / np.median(b))
        rows.append(
            [f"`{task}`", f"{ours:.0f}× ({pairs.min():.0f}–{pairs.max():.0f})", f"{paper:.0f}×"]
        )
    head = ["task", "standard / positional median MSE at c=10 (range over seed pairs)", "paper"]
    return _rows(head, rows) if rows else "No finished runs yet."


def stopping_table(results: list[dict]) -> str:
    """The stopping rule on D₂: per encoding and rule (stop at the first 100 % in
    distribution, or train the full budget), accuracy per bin (mean [95 % t-interval]),
    the seeds reaching 0.9 on the third bin, and the steps; then, per encoding, the
    paired difference (full − early) on that bin over the seeds both rules ran: its mean
    [95 % t-interval] and how many seeds gained or lost."""
    if not results:
        return "No finished runs yet."
    groups = _grouped(results, lambda r: (r["config"]["pe"], r["config"]["early_stop"]))
    bins = list(results[0]["accuracy"])
    head = ["PE", "rule", "seeds", *bins, f"seeds ≥ 0.9 on {bins[2]}", "steps"]
    rows = []
    for (pe, early), group in sorted(groups.items(), key=lambda kv: (kv[0][0], not kv[0][1])):
        rule = "stop at 100 % in distribution" if early else "full budget"
        row = [pe.upper(), rule, str(len(group))]
        row += [  # a bin the task cannot sample (no feasible length) is left out of its runs
            _fraction([g["accuracy"][b] for g in group]) if b in group[0]["accuracy"] else "–"
            for b in bins
        ]
        row.append(f"{sum(g['accuracy'][bins[2]] >= 0.9 for g in group)} of {len(group)}")
        row.append(_steps(group))
        rows.append(row)
    lines = [_rows(head, rows), ""]
    paired = ["PE", f"full − early on {bins[2]} (paired seeds)", "gained", "lost", "same"]
    pair_rows = []
    for pe in sorted({pe for pe, _ in groups}):
        early = {g["config"]["seed"]: g["accuracy"][bins[2]] for g in groups.get((pe, True), [])}
        full = {g["config"]["seed"]: g["accuracy"][bins[2]] for g in groups.get((pe, False), [])}
        seeds = sorted(set(early) & set(full))
        if len(seeds) < 2:
            continue
        diff = [full[k] - early[k] for k in seeds]
        mean, low, high = interval(diff)
        pair_rows.append(
            [
                pe.upper(),
                f"{mean:+.2f} [{low:+.2f}, {high:+.2f}] over {len(seeds)} seeds",
                str(sum(d > 0 for d in diff)),
                str(sum(d < 0 for d in diff)),
                str(sum(d == 0 for d in diff)),
            ]
        )
    lines.append(_rows(paired, pair_rows) if pair_rows else "No paired seeds yet.")
    return "\n".join(lines)


def _number(value: object) -> float:
    """A record's number: a float, or the strings "nan" / "inf" / "-inf" JSON cannot hold."""
    return float(value)  # type: ignore[arg-type]


def finetune_table(records: list[dict]) -> str:
    """(d): per task, optimiser, learning rate and trained weights, for each declared bound
    (the program's 1e9, 1e4, and the smallest the task's values allow): the seeds that
    stay exact, and the median over seeds of the largest error after fine-tuning (a
    diverged seed, NaN outputs, counts as the largest)."""
    if not records:
        return "No finished runs yet."

    def key(r: dict) -> tuple:
        c = r["config"]
        return (c["task"], c["optimizer"], -c["lr"], c["params"])

    groups = _grouped(records, key)
    ranks = ["bound 1e9 (the programs')", "bound 1e4", "smallest bound (1e3 cumsum, 1e2 others)"]
    head = ["task", "optimiser", "lr", "trained", *(f"{r}: exact · median error" for r in ranks)]
    rows = []
    for (task, optimizer, lr, params), group in sorted(groups.items()):
        row = [f"`{task}`", "AdamW" if optimizer == "adamw" else "SGD", f"{-lr:g}"]
        row.append("W_V, W_O" if params == "values" else "all")
        bounds = sorted({_number(g["bound"]) for g in group}, reverse=True)
        if len(bounds) != len(ranks):
            raise CraspError(
                f"{task}: {len(bounds)} bounds, not {len(ranks)}", filename=str(FINETUNE)
            )
        for bound in bounds:
            runs = [g for g in group if _number(g["bound"]) == bound]
            if not all(g["exact_before"] for g in runs):
                raise CraspError(f"{task}: a compiled model was not exact", filename=str(FINETUNE))
            worst = [_number(g["worst_error_after"]) for g in runs]
            median = float(np.median([math.inf if math.isnan(w) else w for w in worst]))
            shown = "diverged" if math.isinf(median) else f"{median:.1e}"
            row.append(f"{sum(g['exact_after'] for g in runs)}/{len(runs)} · {shown}")
        rows.append(row)
    return _rows(head, rows)


@functools.cache
def _script(name: str):
    """``benchmarks/NAME.py`` as a module: the experiments run by their own script
    (positional_kernels: Appendix G.2; value_finetune: the positional paper's Table 1)
    make their tables there."""
    script = ROOT / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"crasp_{name}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tables() -> dict[str, str]:
    """Every table of the page by name, computed from the committed records."""
    crasp = collect(GRIDS / "length_generalization.toml", records_only=True)
    rest = collect(GRIDS / "crasp_rest.toml", records_only=True)
    chomsky4 = collect(GRIDS / "chomsky.toml", records_only=True)
    chomsky11 = collect(GRIDS / "chomsky_rest.toml", records_only=True)
    attention = collect(GRIDS / "chomsky_attention.toml", records_only=True)
    relative = collect(GRIDS / "chomsky_relative.toml", records_only=True)
    random_alibi = collect(GRIDS / "chomsky_random_alibi.toml", records_only=True)
    chomsky = chomsky4 + chomsky11 + attention + relative + random_alibi
    baseline = collect(GRIDS / "random_baseline.toml", records_only=True)
    best = collect(GRIDS / "select_best.toml", records_only=True)
    value = collect(GRIDS / "value_generalization.toml", records_only=True)
    stopping = collect(GRIDS / "early_stopping.toml", records_only=True)
    stopping34 = collect(GRIDS / "early_stopping_d3_d4.toml", records_only=True)
    ten = collect(GRIDS / "ten_seeds.toml", records_only=True)
    records = read_finetune_records(FINETUNE) if FINETUNE.exists() else []
    counts = {
        "runs": "\n".join(
            f"- `{grid}.toml`: {len(found)} of {_expected(grid)} runs finished"
            for grid, found in [
                ("length_generalization", crasp),
                ("crasp_rest", rest),
                ("random_baseline", baseline),
                ("select_best", best),
                ("chomsky", chomsky4),
                ("chomsky_rest", chomsky11),
                ("chomsky_attention", attention),
                ("chomsky_relative", relative),
                ("chomsky_random_alibi", random_alibi),
                ("value_generalization", value),
                ("early_stopping", stopping),
                ("early_stopping_d3_d4", stopping34),
                ("ten_seeds", ten),
            ]
        )
        + f"\n- `finetune.json`: {len(records)} fine-tuning runs"
    }
    return {
        **counts,
        "a": crasp_table(crasp),
        "a-rest": crasp_table(rest),
        "a-baseline": baseline_table(baseline),
        "a-select": select_table(best),
        "b": chomsky_table(chomsky),
        "c": value_table(value),
        "c-ratio": ratio_table(value),
        "stopping": stopping_table(stopping),
        "stopping-d3-d4": "\n\n".join(
            f"**{name}**\n\n" + stopping_table([r for r in stopping34 if r["task"] == task])
            for task, name in (("d3", "D₃"), ("d4", "D₄"))
        ),
        "ten": crasp_table(ten),
        "d": finetune_table(records),
        "positional-kernels": _script("positional_kernels").table(
            _script("positional_kernels").read_records(FINETUNE.parent / "positional_kernels")
        ),
        "c-finetune": _script("value_finetune").table(
            _script("value_finetune").read_records(FINETUNE.parent / "value_finetune")
        ),
    }


MARK = re.compile(r"(<!-- table: ([\w-]+) -->\n)(.*?)(<!-- end table -->)", re.DOTALL)


def regenerate(page: str, computed: dict[str, str]) -> str:
    """``page`` with every marked table replaced by its computed text; an unknown name
    is an error (a table the script no longer makes)."""

    def replace(match: re.Match) -> str:
        name = match[2]
        if name not in computed:
            raise SystemExit(f"{PAGE}: no table named {name!r} is computed")
        return f"{match[1]}{computed[name]}\n{match[4]}"

    return MARK.sub(replace, page)


VERIFIED_GRIDS = (
    "length_generalization",
    "crasp_rest",
    "random_baseline",
    "select_best",
    "chomsky",
    "chomsky_rest",
    "chomsky_attention",
    "chomsky_relative",
    "chomsky_random_alibi",
    "value_generalization",
    "early_stopping",
    "early_stopping_d3_d4",
    "ten_seeds",
)


def _scores(record: dict) -> dict[str, float]:
    """What a record's cell shows: accuracy per bin (per token for the Chomsky tasks),
    or MSE per value scale."""
    if record["kind"] == "numeric":
        return {f"c={k}": float(v["mse"]) for k, v in record["metrics"].items()}
    field = "position_accuracy" if record["family"] == "chomsky" else "accuracy"
    return {k: float(v) for k, v in record[field].items()}


def _cell(record: dict) -> tuple:
    config = record["config"]
    return (
        record["task"],
        config.get("pe"),
        config.get("numeric_kind"),
        config.get("early_stop"),
    )


def verify(count: int, seed: int, train: Callable[[dict, int], dict] | None = None) -> str:
    """Retrain ``count`` records drawn at random (``seed``) from the page's grids on this
    machine, with the record's torch thread count (one, a sweep's, where the record does
    not say), and say for each score where the new value falls: equal to the record,
    within the range of the recorded seeds of its cell, or outside it. ``train`` (a
    config dict and a thread count to results) defaults to the harness's."""
    import random

    if train is None:
        import torch

        from crasp_compiler.experiments.train.loop import TrainConfig
        from crasp_compiler.experiments.train.loop import train as run

        def train(config: dict, threads: int = 1) -> dict:
            torch.set_num_threads(threads)  # the record's: the last bits depend on it
            return run(TrainConfig.from_dict({**config, "out_dir": None, "progress": False}))

    records = {grid: collect(GRIDS / f"{grid}.toml", records_only=True) for grid in VERIFIED_GRIDS}
    pool = [(grid, r) for grid, found in records.items() for r in found]
    picks = random.Random(seed).sample(pool, min(count, len(pool)))
    head = ["record", "score", "recorded", "retrained", "recorded seeds (range)", "where"]
    rows = []
    for grid, record in picks:
        # a sweep trains with one torch thread; a record with provenance says its count
        threads = record.get("provenance", {}).get("torch_threads", 1)
        fresh = _scores(train(record["config"], threads))
        peers = [r for r in records[grid] if _cell(r) == _cell(record)]
        config = record["config"]
        variant = config.get("numeric_kind") if record["kind"] == "numeric" else config.get("pe")
        name = f"{record['task']} {variant} seed {config['seed']}"
        if grid.startswith("early_stopping"):
            name += " early stop" if record["config"]["early_stop"] else " full budget"
        for key, recorded in _scores(record).items():
            values = [_scores(p)[key] for p in peers]
            low, high = min(values), max(values)
            new = fresh.get(key, math.nan)
            where = (
                "equal"
                if new == recorded
                else f"within the {len(values)} seeds' range"
                if low <= new <= high
                else f"outside the {len(values)} seeds' range"
            )
            rows.append(
                [name, key, f"{recorded:.3g}", f"{new:.3g}", f"{low:.3g}–{high:.3g}", where]
            )
    return _rows(head, rows) if rows else "No records to verify."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    parser.add_argument("--figures", type=Path, help="also draw the figures into this folder")
    parser.add_argument(
        "--verify",
        type=int,
        metavar="N",
        help="retrain N records drawn at random and say where the new scores fall",
    )
    parser.add_argument("--seed", type=int, default=0, help="which records --verify draws")
    args = parser.parse_args()
    try:
        if args.verify is not None:
            print(verify(args.verify, args.seed))
            return
        report(args.check, args.figures)
    except CraspError as err:  # an unreadable finetune.json, a full disk: one line
        sys.exit(err.format())


def report(check: bool, figures: Path | None) -> None:
    """Rewrite (or with ``check``, compare) the page's tables; draw the figures into
    ``figures``. A damaged record is skipped with a one-line warning naming it."""
    page = PAGE.read_text()
    with warnings_on_stderr():
        fresh = regenerate(page, tables())
    if check:
        if fresh != page:
            sys.exit(f"{PAGE}: tables differ from the committed results; rerun {__file__}")
        print(f"{PAGE}: every table matches the committed results")
    elif fresh != page:
        PAGE.write_text(fresh)
        print(f"rewrote the tables of {PAGE}")
    if figures:
        from crasp_compiler.experiments.train.plots import plot_length_bins, plot_value_scales

        figures.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():  # the damaged records were named with the tables
            warnings.simplefilter("ignore")
            length = collect(GRIDS / "length_generalization.toml", records_only=True)
            value = collect(GRIDS / "value_generalization.toml", records_only=True)
        for path in plot_length_bins(length, figures / "length") + plot_value_scales(
            value, figures / "value"
        ):
            print(path)


if __name__ == "__main__":
    main()
