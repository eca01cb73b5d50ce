"""Compile time and model shape of every example program.

For each example and each compile mode (heaviside, layernorm, and relu with ``max_len``
256 by default): the median compile time over ``--repeats`` runs, and the shape of the
model: layers, the dependency bound, attention heads per layer, residual width, MLP width
(widest hidden layer), parameter count, layer-normalised groups; and the program's
relation class.

Usage::

    python benchmarks/compile_stats.py --out docs/results/compile_stats.json
    python benchmarks/compile_stats.py --markdown docs/results/compile_stats.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from _common import EXAMPLES_DIR, example_names, machine, provenance_line, revision

from crasp_compiler import load_program
from crasp_compiler.languages.crasp.compile import compile_program

MODES = ("heaviside", "layernorm", "relu")
SHORT = {"heaviside": "h", "layernorm": "l", "relu": "r"}


def shape(model) -> dict:
    return {
        "layers": len(model.layers),
        "dependency_bound": model.info["dependency_bound"],
        "heads_per_layer": [len(layer.heads) for layer in model.layers],
        "width": model.width,
        "mlp_width": model.mlp_width,
        "parameters": model.parameter_count(),
        "norm_groups": sum(len(layer.mlp.norm_groups) for layer in model.layers if layer.mlp),
    }


def stats(name: str, repeats: int, max_len: int) -> dict:
    program = load_program(EXAMPLES_DIR / name)
    entry = {"example": name, "class": program.relation_class}
    for mode in MODES:
        limit = max_len if mode == "relu" else None
        times, model = [], None
        for _ in range(repeats):
            start = time.perf_counter()
            model = compile_program(program, mode=mode, max_len=limit)
            times.append(time.perf_counter() - start)
        entry[mode] = {
            "max_len": limit,
            "compile_ms_median": round(1000 * statistics.median(times), 3),
            "compile_ms_min": round(1000 * min(times), 3),
            **shape(model),
        }
    return entry


def per_mode(values: list) -> str:
    """One value where all modes agree, else the values separated by " / "."""
    return str(values[0]) if len(set(values)) == 1 else " / ".join(str(v) for v in values)


def markdown(data: dict) -> str:
    """One row per example; "a / b / c" cells list the modes in the header's order (files
    written before layernorm mode existed have heaviside and relu only)."""
    first = data["results"][0]
    modes = [m for m in MODES if m in first]
    tag = " / ".join(SHORT[m] for m in modes)
    lines = [
        f"| example | class | compile ms ({tag}) | layers | dep. bound | heads per layer "
        f"| width | MLP width ({tag}) | parameters ({tag}) |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    for e in data["results"]:
        runs = [e[m] for m in modes]
        heads = per_mode([" ".join(str(n) for n in r["heads_per_layer"]) for r in runs])
        ms = " / ".join(f"{r['compile_ms_median']:.1f}" for r in runs)
        lines.append(
            f"| {e['example']} | {e['class']} | {ms} | {per_mode([r['layers'] for r in runs])} "
            f"| {runs[0]['dependency_bound']} | {heads} | {per_mode([r['width'] for r in runs])} "
            f"| {' / '.join(str(r['mlp_width']) for r in runs)} "
            f"| {' / '.join(str(r['parameters']) for r in runs)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", help="comma-separated file names (default: all)")
    parser.add_argument("--repeats", type=int, default=7, help="compiles per mode (median)")
    parser.add_argument("--max-len", type=int, default=256, help="max_len for relu mode")
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument(
        "--markdown", metavar="JSON", help="print the markdown table of a saved run and exit"
    )
    args = parser.parse_args(argv)
    if args.markdown:
        data = json.loads(Path(args.markdown).read_text())
        print(provenance_line(data))
        print()
        print(markdown(data))
        return

    names = args.examples.split(",") if args.examples else example_names()
    compile_program(load_program(EXAMPLES_DIR / names[0]))  # warm imports and caches
    data = {
        "benchmark": "compile_stats",
        "command": " ".join(["python", *sys.argv]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "revision": revision(),
        "config": {
            "repeats": args.repeats,
            "modes": list(MODES),
            "relu_max_len": args.max_len,
            "examples": names,
        },
        "results": [],
    }
    for name in names:
        entry = stats(name, args.repeats, args.max_len)
        data["results"].append(entry)
        h = entry["heaviside"]
        times = "  ".join(f"{m} {entry[m]['compile_ms_median']:7.2f} ms" for m in MODES)
        params = " / ".join(str(entry[m]["parameters"]) for m in MODES)
        print(
            f"{name:22s} {times}  layers {h['layers']} (bound {h['dependency_bound']})  "
            f"width {h['width']}  params {params}",
            flush=True,
        )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    print()
    print(markdown(data))


if __name__ == "__main__":
    main()
