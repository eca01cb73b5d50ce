"""Compile time and model shape of every example program.

For each example: the median compile time over ``--repeats`` runs in heaviside mode and
in relu mode (``max_len`` 256 by default), and the shape of both models: layers, the
dependency bound, attention heads per layer, residual width, MLP width (widest hidden
layer), parameter count, and the program's relation class.

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
from crasp_compiler.compiler import compile_program


def shape(model) -> dict:
    return {
        "layers": len(model.layers),
        "dependency_bound": model.info["dependency_bound"],
        "heads_per_layer": [len(layer.heads) for layer in model.layers],
        "width": model.width,
        "mlp_width": model.mlp_width,
        "parameters": model.parameter_count(),
    }


def stats(name: str, repeats: int, max_len: int) -> dict:
    program = load_program(EXAMPLES_DIR / name)
    entry = {"example": name, "class": program.relation_class}
    for mode, limit in (("heaviside", None), ("relu", max_len)):
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


def markdown(data: dict) -> str:
    lines = [
        "| example | class | compile ms (heaviside) | compile ms (relu) | layers "
        "| dep. bound | heads per layer | width | MLP width (h / r) | parameters (h / r) |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for e in data["results"]:
        h, r = e["heaviside"], e["relu"]
        layers = (
            str(h["layers"]) if h["layers"] == r["layers"] else f"{h['layers']} / {r['layers']}"
        )
        heads = " ".join(str(n) for n in h["heads_per_layer"])
        if r["heads_per_layer"] != h["heads_per_layer"]:
            heads += " / " + " ".join(str(n) for n in r["heads_per_layer"])
        width = str(h["width"]) if h["width"] == r["width"] else f"{h['width']} / {r['width']}"
        lines.append(
            f"| {e['example']} | {e['class']} | {h['compile_ms_median']:.1f} "
            f"| {r['compile_ms_median']:.1f} | {layers} | {h['dependency_bound']} | {heads} "
            f"| {width} | {h['mlp_width']} / {r['mlp_width']} "
            f"| {h['parameters']} / {r['parameters']} |"
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
        "config": {"repeats": args.repeats, "relu_max_len": args.max_len, "examples": names},
        "results": [],
    }
    for name in names:
        entry = stats(name, args.repeats, args.max_len)
        data["results"].append(entry)
        h, r = entry["heaviside"], entry["relu"]
        print(
            f"{name:22s} heaviside {h['compile_ms_median']:8.2f} ms  relu "
            f"{r['compile_ms_median']:8.2f} ms  layers {h['layers']} (bound "
            f"{h['dependency_bound']})  width {h['width']}  params {h['parameters']}",
            flush=True,
        )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    print()
    print(markdown(data))


if __name__ == "__main__":
    main()
