"""V-only fine-tuning on 10× data: Table 1 of the positional-attention paper (App. D.1.8).

For cumulative sum, cumulative min and sorting at n = 8, positional and standard
attention, seeds 0–4: train on values at scale c = 1 exactly as the (c) grid does
(``benchmarks/grids/value_generalization.toml``: 1,500 steps of batch 64, AdamW lr 1e-3,
no weight decay), then freeze every parameter except the value projections' weights
(``layers.*.attn.v.weight``: the paper fixes "all their model parameters except the
weight parameters in the V projection matrices") and train those on values at c = 10
(``train_scale = 10``) for ``FINETUNE_STEPS`` steps of batch 64 at lr 1e-3. Scores, as the
paper's Table 1 gives them, are test MSEs normalised by the scale factor: MSE_c / c²
(the factor by which an error of the values' own scale grows):

    in-dist      the pretrained model at c = 1
    10x OOD      the pretrained model at c = 10, / 100
    after        the fine-tuned model at c = 10, / 100 (and at c = 1, to see what it cost)

The paper pretrains 2,000 epochs of 30,000 samples and fine-tunes 20 epochs (600,000
samples, 1 % of pretraining); here 300 steps × 64 = 19,200 samples, 20 % of our 96,000
pretraining samples: a different ratio, stated on the page.

``run`` trains every (task, kind, seed) without a record under
``docs/results/length-generalization/value_finetune/`` and writes its record (with
provenance); ``report`` prints the table the report script puts in the page.

Usage (one torch thread)::

    python benchmarks/value_finetune.py run
    python benchmarks/value_finetune.py report
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results" / "length-generalization" / "value_finetune"
TASKS = ("num_cumsum", "num_cummin", "num_sort")
KINDS = ("positional", "standard")
SEEDS = (0, 1, 2, 3, 4)
SCALE = 10
FINETUNE_STEPS = 300
# the pretraining of the (c) grid, benchmarks/grids/value_generalization.toml
PRETRAIN = {
    "steps": 1500,
    "eval_every": 500,
    "lr": 1e-3,
    "weight_decay": 0.0,
    "batch_size": 64,
    "test_size": 500,
    "numeric_n": 8,
    "numeric_sampling": "interval",
    "scales": [1, SCALE],
    "compare_compiled": False,
    "progress": False,
}
# the positional-attention paper, Table 1 (App. D.1.8): median MSE / scale over 10 runs
PAPER = {
    ("num_cumsum", "positional"): ("6.07e-06", "1.31e-03", "1.32e-05"),
    ("num_cumsum", "standard"): ("5.20e-06", "1.09e+00", "1.23e-01"),
    ("num_cummin", "positional"): ("1.03e-05", "3.92e-04", "2.19e-05"),
    ("num_cummin", "standard"): ("1.74e-06", "1.39e-01", "4.00e-02"),
    ("num_sort", "positional"): ("1.20e-04", "7.37e-04", "1.23e-04"),
    ("num_sort", "standard"): ("9.05e-04", "5.18e-01", "6.90e-02"),
}
FIELDS = ("in_dist", "ood", "ood_after", "in_dist_after")


def _mse(results: dict[str, Any], scale: int) -> float:
    for key, value in results["metrics"].items():
        if float(key) == scale:
            return float(value["mse"])
    raise KeyError(scale)


def value_weights(name: str, _parameter: object) -> bool:
    """The parameters fine-tuning trains: the value projections' weights only."""
    return name.startswith("layers.") and name.endswith(".attn.v.weight")


def one(task: str, kind: str, seed: int) -> dict[str, Any]:
    """Pretrain, fine-tune and score one (task, kind, seed); the record."""
    from crasp_compiler.experiments.train.loop import TrainConfig, load, train

    config = TrainConfig(task=task, numeric_kind=kind, seed=seed, **PRETRAIN)
    start = time.process_time()
    with tempfile.TemporaryDirectory() as folder:
        pre = train(replace(config, out_dir=str(Path(folder) / "pre")))
        model = load(Path(folder) / "pre")
        tuned = replace(config, steps=FINETUNE_STEPS, eval_every=100, train_scale=SCALE)
        tuned = replace(tuned, scales=[SCALE, 1])  # the check during fine-tuning: c = 10
        after = train(tuned, model=model, param_filter=value_weights)
    return {
        "task": task,
        "kind": kind,
        "seed": seed,
        "in_dist": _mse(pre, 1),
        "ood": _mse(pre, SCALE) / SCALE**2,
        "ood_after": _mse(after, SCALE) / SCALE**2,
        "in_dist_after": _mse(after, 1),
        "trained_after": after["n_trainable"],
        "parameters": after["n_parameters"],
        "pretrain": config.to_dict(),
        "finetune": {"steps": FINETUNE_STEPS, "train_scale": SCALE, "params": "attn.v.weight"},
        "cpu_seconds": round(time.process_time() - start, 1),
        "provenance": after["provenance"],
    }


def run(out: Path = RESULTS) -> None:
    """Every (task, kind, seed) without a record in ``out``."""
    import torch

    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    for task in TASKS:
        for kind in KINDS:
            for seed in SEEDS:
                path = out / f"{task}-{kind}-seed{seed}.json"
                if path.exists():
                    print(f"{path.name}: recorded, skipped", flush=True)
                    continue
                record = one(task, kind, seed)
                temporary = path.with_suffix(".tmp")
                temporary.write_text(json.dumps(record, indent=1) + "\n")
                temporary.replace(path)
                shown = ", ".join(f"{f} {record[f]:.2e}" for f in FIELDS)
                print(f"{path.name}: {shown} ({record['cpu_seconds']:.0f} CPU s)", flush=True)


def read_records(folder: Path = RESULTS) -> list[dict[str, Any]]:
    """The records in ``folder``; one that cannot be read is skipped with a warning."""
    kept = []
    for path in sorted(folder.glob("*.json")):
        try:
            record = json.loads(path.read_text())
            ok = (record.get("task"), record.get("kind")) in PAPER and all(
                isinstance(record.get(f), float) for f in FIELDS
            )
        except (OSError, ValueError, RecursionError, AttributeError):
            ok = False
        if ok:
            kept.append(record)
        else:
            warnings.warn(f"{path}: record skipped (unreadable or a field missing)", stacklevel=2)
    return kept


def _cell(values: Sequence[float]) -> str:
    """Median (10–90 % range) over seeds, as the page's (c)."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return f"{ordered[0]:.1e}"
    deciles = statistics.quantiles(ordered, n=10, method="inclusive")
    return f"{statistics.median(ordered):.1e} ({deciles[0]:.1e}–{deciles[-1]:.1e})"


def table(records: Sequence[dict[str, Any]]) -> str:
    """Per task and kind: the four scores, median (10–90 % range) over seeds, beside the
    paper's Table 1."""
    if not records:
        return "No finished runs yet."
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in sorted(records, key=lambda r: r["seed"]):
        groups[record["task"], record["kind"]].append(record)
    head = ["task", "attention", "seeds", "in-dist (c=1)", "10× OOD", "10× OOD after V-only"]
    head += ["c=1 after", "after / before at 10×", "paper: in-dist / 10× OOD / after"]
    rows = []
    for key, paper in PAPER.items():
        group = groups.get(key)
        if not group:
            continue
        gain = statistics.median(g["ood_after"] / g["ood"] for g in group)
        rows.append(
            [f"`{key[0]}`", key[1], str(len(group))]
            + [_cell([g[f] for g in group]) for f in FIELDS]
            + [f"{gain:.2g}", " / ".join(paper)]
        )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["run", "report"])
    args = parser.parse_args()
    if args.mode == "run":
        run()
    else:
        print(table(read_records()))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
