"""Tables and plots for docs/length-generalization.md from the finished sweeps.

Reads every finished run of the grids (``benchmarks/grids/*.toml``; run them first with
``crasp sweep``), prints the markdown tables of the report, and draws the figures into
``--figures``:

- (a) per task and positional encoding: accuracy per length bin (mean over seeds, with
  the per-seed values), the compiled model's accuracy and the agreement between the
  trained and the compiled model, next to the C-RASP paper's prediction;
- (b) per numeric task and model kind: MSE at every scale c (mean over seeds), the
  compiled model's MSE.

Usage::

    python benchmarks/length_generalization_report.py --figures docs/figures
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import numpy as np

from crasp_compiler.experiments.tasks.registry import get_task
from crasp_compiler.experiments.train.plots import load_results, plot_length_bins, plot_value_scales

GRIDS = Path(__file__).parent / "grids"
# the C-RASP paper's prediction: does the encoding length-generalise on this class?
PREDICTION = {
    "C-RASP[∅]": {"ape": "yes", "nope": "yes"},
    "C-RASP[periodic,local]": {"ape": "yes", "nope": "no"},
    "none": {"ape": "no", "nope": "no"},
}


def _mean(values: list[float]) -> str:
    return f"{np.mean(values):.2f}" + (
        f" ({'/'.join(f'{v:.2f}' for v in values)})" if len(values) > 1 else ""
    )


def length_table(results: list[dict]) -> str:
    runs: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in results:
        runs[(r["task"], r["config"]["pe"])].append(r)
    bins = list(next(iter(runs.values()))[0]["accuracy"])
    head = ["task", "class", "PE", "predicted", *bins, "steps", "compiled", "agreement (last bin)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    order = {name: k for k, name in enumerate(r["task"] for r in results)}
    for (task, pe), group in sorted(runs.items(), key=lambda kv: (order[kv[0][0]], kv[0][1])):
        cls = get_task(task).crasp_class
        cells = [task, cls, pe.upper(), PREDICTION[cls][pe]]
        cells += [_mean([g["accuracy"][b] for g in group]) for b in bins]
        cells.append("/".join(str(g["steps"]) for g in group))
        compiled = [g.get("compiled_accuracy") for g in group]
        if all(c is not None for c in compiled):
            low = min(min(c.values()) for c in compiled)
            cells.append(f"{low:.2f} in every bin")
            cells.append(_mean([g["agreement"][bins[-1]] for g in group]))
        else:
            cells += ["no program", "–"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def value_table(results: list[dict]) -> str:
    runs: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in results:
        runs[(r["task"], r["config"]["numeric_kind"])].append(r)
    scales = ["1", "2", "5", "10"]
    head = ["task", "model", *[f"MSE c={c}" for c in scales], "compiled MSE c=10"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (task, kind), group in sorted(runs.items()):
        cells = [task, kind]
        for c in scales:
            values = [_metric(g["metrics"], c)["mse"] for g in group]
            cells.append(f"{np.mean(values):.3g}")
        compiled = _metric(group[0]["compiled_metrics"], "10")
        cells.append(f"{compiled['mse']:.1e}" if compiled else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _metric(metrics: dict | None, scale: str) -> dict | None:
    for key, value in (metrics or {}).items():
        if float(key) == float(scale):
            return value
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figures", type=Path, required=True)
    args = parser.parse_args()
    args.figures.mkdir(parents=True, exist_ok=True)
    length = load_results([GRIDS / "length_generalization.toml"])
    value = load_results([GRIDS / "value_generalization.toml"])
    print(f"## (a) {len(length)} runs\n")
    print(length_table(length))
    print(f"\n## (b) {len(value)} runs\n")
    print(value_table(value))
    written = plot_length_bins(length, args.figures / "length") + plot_value_scales(
        value, args.figures / "value"
    )
    print("\n" + "\n".join(str(p) for p in written))


if __name__ == "__main__":
    main()
