"""Compiled weights as initialisation: does fine-tuning keep the compiled model exact?

For each numeric task in ``--tasks`` (n = ``--n``, softmax compiled model) and each
setting (weights trained: all or the value maps only; optimiser: AdamW with weight decay
0.01 as in training, AdamW without decay, plain SGD without decay), fine-tune for
``--steps`` steps on values in [−2, 2] and record the largest error at scales c = 1..10
before and after (see :mod:`crasp_compiler.experiments.train.finetune`).

Usage::

    python benchmarks/finetune_compiled.py --out docs/results/finetune.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from crasp_compiler.experiments.train.finetune import FinetuneConfig, finetune

SETTINGS = [
    {"optimizer": "adamw", "weight_decay": 0.01, "lr": 1e-3},
    {"optimizer": "adamw", "weight_decay": 0.0, "lr": 1e-3},
    {"optimizer": "sgd", "weight_decay": 0.0, "lr": 1e-3},
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="num_cumsum,num_cummin,num_sort")
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for task in args.tasks.split(","):
        for params in ("all", "values"):
            for setting in SETTINGS:
                config = FinetuneConfig(
                    task=task, n=args.n, params=params, steps=args.steps, **setting
                )
                result = finetune(config)
                worst = {
                    phase: max(s["max_abs_error"] for s in result[phase].values())
                    for phase in ("before", "after")
                }
                print(
                    f"{task:12} {params:6} {setting['optimizer']:5} wd={setting['weight_decay']:<5}"
                    f" max error {worst['before']:.2e} -> {worst['after']:.2e}"
                    f"  exact after: {result['exact_after']}"
                    f"  weight change {result['largest_weight_change']:.1e}",
                    flush=True,
                )
                rows.append(result)
    args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
