"""Compiled weights as initialisation: does fine-tuning keep the compiled model exact?

Experiment (d) of docs/length-generalization.md. For each numeric task in ``--tasks``
(n = 8, softmax compiled model), each set of trained weights (all, or the heads' value
maps W_V, W_O), optimiser (AdamW and SGD, both without weight decay), learning rate
(``LRS``), declared bound (``BOUNDS``: the programs' own 1e9, 1e4, and the smallest
power of ten whose slots hold every value at c ≤ 10 — 1e2 for cummin and sort, whose
values stay within 20, 1e3 for cumsum, whose partial sums reach 8 · 20 = 160) and seed
0..4, fine-tune for ``--steps`` steps on values in [−2, 2] and record the largest error
at scales c = 1..10 before and after (:mod:`crasp_compiler.experiments.train.finetune`).

One small record per run goes to ``--out`` (the file is rewritten atomically after every
run; a rerun skips the runs already there, so an interrupted run resumes). The runs go
seed by seed, so a partial file has every cell with fewer seeds. At the end the script
prints, per cell, how many seeds stayed exact and the median worst error after.

Usage (one CPU thread; about 12 CPU minutes)::

    python benchmarks/finetune_compiled.py
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from crasp_compiler.experiments.train.finetune import FinetuneConfig, finetune_runs

OUT = Path("docs/results/length-generalization/finetune.json")
TASKS = ("num_cumsum", "num_cummin", "num_sort")
PARAMS = ("all", "values")
OPTIMIZERS = ("adamw", "sgd")
LRS = (1e-3, 1e-5, 1e-7)
TIGHT = {"num_cumsum": 1e3, "num_cummin": 1e2, "num_sort": 1e2}
BOUNDS = (1e9, 1e4, "tight")  # "tight": TIGHT[task]
SEEDS = range(5)


def configs(tasks: list[str], n: int, steps: int) -> list[FinetuneConfig]:
    """The experiment's runs, seed by seed."""
    return [
        FinetuneConfig(
            task=task,
            n=n,
            params=params,
            optimizer=optimizer,
            lr=lr,
            weight_decay=0.0,
            steps=steps,
            bound=TIGHT[task] if bound == "tight" else float(bound),
            seed=seed,
        )
        for seed in SEEDS
        for task in tasks
        for params in PARAMS
        for optimizer in OPTIMIZERS
        for lr in LRS
        for bound in BOUNDS
    ]


def table(records: list[dict[str, Any]]) -> str:
    """Per (task, params, optimiser, lr, bound): seeds exact after, of how many; the
    median worst error after (a diverged run, NaN, counts as the largest); diverged runs."""
    cells: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        c = r["config"]
        cells[(c["task"], c["params"], c["optimizer"], c["lr"], c["bound"])].append(r)
    lines = [
        "| task | trained | optimiser | lr | bound | exact after | median worst error after "
        "| diverged (NaN) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (task, params, optimizer, lr, bound), runs in cells.items():
        worst = [r["worst_error_after"] for r in runs]
        median = statistics.median_low([math.inf if math.isnan(w) else w for w in worst])
        nans = sum(math.isnan(w) for w in worst)
        exact = sum(r["exact_after"] for r in runs)
        shown = "NaN" if median == math.inf and nans else f"{median:.2g}"
        lines.append(
            f"| {task} | {params} | {optimizer} | {lr:g} | {bound:g} | {exact}/{len(runs)} "
            f"| {shown} | {nans} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    start = time.process_time()

    def progress(r: dict[str, Any]) -> None:
        c = r["config"]
        print(
            f"{c['task']:10} {c['params']:6} {c['optimizer']:5} lr={c['lr']:<6g} "
            f"bound={c['bound']:<6g} seed={c['seed']}  worst error "
            f"{r['worst_error_before']:.1e} -> {r['worst_error_after']:.1e}  exact after: "
            f"{r['exact_after']}  ({r['cpu_seconds']:.1f} CPU s)",
            flush=True,
        )

    records = finetune_runs(configs(args.tasks.split(","), args.n, args.steps), args.out, progress)
    print(table(records))
    print(
        f"{len(records)} runs, {sum(r['cpu_seconds'] for r in records):.0f} CPU s in all "
        f"({time.process_time() - start:.0f} CPU s in this invocation)"
    )


if __name__ == "__main__":
    main()
