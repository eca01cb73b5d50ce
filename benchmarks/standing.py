"""The standing benchmark of issue 16: how far compiled models are from the program's own
limits, as ratios measured in one run.

1. **Depth.** For every C-RASP example and for shuffle-Dyck-k written per pair and with one
   violation count (k = 1 … 16): layers, the dependency bound the compiler reports, the
   program's count depth (the most ``#`` nested along a chain of references, a floor for
   any model that computes each count in its own attention sublayer), hidden units and
   compile time (which should grow linearly with k).
2. **Runtime.** Dyck-1, n = 4096, batch 8: the numpy executor and the torch module (float64
   and float32; torch with one thread and the default) over the reference interpreter,
   CPU and wall time (``benchmarks/throughput.py``'s ``ratios``).
3. **PCOC sends.** ``examples/pcoc_sends/permute.pcoc`` for n in ``--ns``: residual width,
   stored and nonzero parameters, layers, compile CPU time, one forward pass over 8 random
   inputs (numpy, float64), with the exponent of a least-squares fit ``log y = a + e log n``.
4. **tracr.** Where ``tracr`` is importable, the side-by-side table of
   ``benchmarks/tracr_side.py`` (Dyck-1 and shuffle-Dyck-2: compile time, width,
   parameters, wrong decisions, tokens/s at each N tracr compiles); elsewhere the section
   says to run that script in an environment that has tracr (it is not on PyPI).

Usage::

    python benchmarks/standing.py --out docs/results/standing.json
    python benchmarks/standing.py --markdown docs/results/standing.json
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from _common import EXAMPLES_DIR, ROOT, example_names, machine, provenance_line, revision  # noqa: E402
from throughput import ratios, ratios_markdown  # noqa: E402

sys.path.insert(0, str(ROOT))  # tests.support: the shuffle-Dyck programs

import crasp_compiler  # noqa: E402
from crasp_compiler.languages.crasp.nodes import BoolRef, Count, CountRef, Node, children  # noqa: E402
from tests.support.shuffle_dyck import one_violation, per_pair  # noqa: E402

PERMUTE = ROOT / "examples" / "pcoc_sends" / "permute.pcoc"
KS = (1, 2, 4, 8, 12, 16)


def count_depth(program) -> int:
    """The most ``#`` nested along any chain of references of an output."""
    defs = {d.name: d.expr for d in program.definitions}
    memo: dict[Node, int] = {}

    def depth(node: Node) -> int:
        if node not in memo:
            match node:
                case BoolRef(name) | CountRef(name):
                    memo[node] = depth(defs[name])
                case Count(arg):
                    memo[node] = 1 + depth(arg)
                case _:
                    memo[node] = max((depth(c) for c in children(node)), default=0)
        return memo[node]

    for definition in program.definitions:  # in order: references find theirs made
        depth(definition.expr)
    return max((depth(defs[name]) for name in program.outputs), default=0)


def depth_row(name: str, program) -> dict:
    start = time.process_time()
    model = crasp_compiler.compile(program)
    seconds = time.process_time() - start
    units = sum(layer.mlp.w1.shape[0] for layer in model.layers if layer.mlp is not None)
    return {
        "program": name,
        "layers": len(model.layers),
        "bound": model.info["dependency_bound"],
        "count_depth": count_depth(program),
        "hidden_units": units,
        "width": model.width,
        "compile_cpu_ms": round(seconds * 1e3, 2),
    }


def depth_rows() -> list[dict]:
    rows = [depth_row(name, crasp_compiler.load(EXAMPLES_DIR / name)) for name in example_names()]
    for form, make in (("per pair", per_pair), ("one violation", one_violation)):
        for k in KS:
            program = crasp_compiler.load(make(k), language="crasp")
            rows.append(depth_row(f"shuffle-Dyck-{k} ({form})", program))
    for row in rows:
        print(json.dumps(row), file=sys.stderr)
    return rows


def fit(ns: list[int], ys: list[float]) -> float | None:
    """The exponent e of the least-squares line log y = a + e log n."""
    if len(ns) < 2 or min(ys) <= 0:
        return None
    return round(float(np.polyfit(np.log(ns), np.log(ys), 1)[0]), 2)


def pcoc_rows(ns: list[int]) -> dict:
    program = crasp_compiler.load(PERMUTE)
    rows = []
    for n in ns:
        start = time.process_time()
        model = crasp_compiler.compile(program, n=n)
        compile_s = time.process_time() - start
        rng = np.random.default_rng(n)
        inputs = [[rng.normal(size=n), rng.permutation(n).astype(float)] for _ in range(8)]
        start = time.process_time()
        crasp_compiler.run(model, inputs)
        forward_s = time.process_time() - start
        row = {
            "n": n,
            "width": model.width,
            "parameters": model.parameter_count(),
            "nonzero": model.nonzero_count(),
            "layers": len(model.layers),
            "compile_cpu_s": round(compile_s, 3),
            "forward_cpu_s_8_inputs": round(forward_s, 3),
        }
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    exponents = {
        key: fit([r["n"] for r in rows], [r[key] for r in rows])
        for key in ("width", "nonzero", "compile_cpu_s", "forward_cpu_s_8_inputs")
    }
    return {"rows": rows, "exponents": exponents}


def markdown(data: dict) -> str:
    lines = [provenance_line(data), "", "### Depth", ""]
    lines += [
        "| program | layers | dependency bound | count depth | hidden units | width | compile ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in data["depth"]:
        lines.append(
            f"| {r['program']} | {r['layers']} | {r['bound']} | {r['count_depth']} "
            f"| {r['hidden_units']} | {r['width']} | {r['compile_cpu_ms']:.1f} |"
        )
    lines += ["", "### Runtime over the interpreter (goal ≤ 1.5)", ""]
    lines.append(ratios_markdown(data["ratios"]))
    pcoc = data["pcoc"]
    lines += ["", "### PCOC sends: permute.pcoc", ""]
    lines += [
        "| n | width | parameters | nonzero | layers | compile CPU s | forward CPU s (8 inputs) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in pcoc["rows"]:
        lines.append(
            f"| {r['n']} | {r['width']:,} | {r['parameters']:,} | {r['nonzero']:,} "
            f"| {r['layers']} | {r['compile_cpu_s']:.2f} | {r['forward_cpu_s_8_inputs']:.2f} |"
        )
    fitted = ", ".join(f"{k} ∝ n^{v}" for k, v in pcoc["exponents"].items() if v is not None)
    lines += ["", f"Fitted exponents: {fitted}.", "", "### tracr", ""]
    if data.get("tracr"):
        from tracr_side import markdown_rows

        lines.append(markdown_rows(data["tracr"]))
    else:
        lines.append(
            "not importable in this environment (not on PyPI): run "
            "`benchmarks/tracr_side.py` where it is"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--markdown", type=Path, help="print the tables of a results file")
    parser.add_argument("--ns", default="8,16,32", help="PCOC sizes (comma-separated)")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text())))
        return
    started = time.perf_counter()
    data = {
        "benchmark": "standing",
        "command": "python " + " ".join(sys.argv),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "revision": revision(),
        "depth": depth_rows(),
        "ratios": ratios(["dyck1.cr"], 4096, 8, args.repeats),
        "pcoc": pcoc_rows([int(n) for n in args.ns.split(",")]),
        "tracr_importable": importlib.util.find_spec("tracr") is not None,
    }
    if data["tracr_importable"]:
        from tracr_side import side_by_side

        data["tracr"] = side_by_side([8, 16, 32], budget=60.0)
    data["total_seconds"] = round(time.perf_counter() - started, 1)
    text = json.dumps(data, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(markdown(data))


if __name__ == "__main__":
    main()
