"""PCOC examples: model shape against the simulation theorem, and the softmax error.

For every example in ``examples/pcoc`` and every n in ``--ns`` (combinations that fail
the program's static checks for that n are skipped and listed):

- shape of the hard-mode model: rounds R, layers, heads per layer (max and total),
  residual width, MLP width (widest hidden layer), parameters; the theorem's counts
  (R layers, s heads per layer for a memory of s words, from ``model.info["theorem"]``);
  the median compile time of each mode over ``--repeats`` compiles;
- the softmax-mode model at ``--tolerance`` (default: none, the compiler's own, twice the
  float64 rounding): its temperature T, the real-arithmetic softmax error (``A·e^{−T}``
  per output, ``info["leak_bound"]``) and the bound it records against the interpreter,
  rounding included (``Guarantee.errors``);
- on ``--samples`` random inputs per scale (every input number drawn uniformly from
  [−scale, scale]; a scale is skipped where it exceeds an input's declared bound), run by
  the numpy executor in float64: max |softmax output − hard output| (against the sum of
  both models' recorded bounds) and max |hard output − interpreter|. Inputs
  that break a promise of the program (a data comparison within its margin, a slot past
  its bound, as ``interpret(..., check_promises=True)`` reports) are redrawn; the
  number redrawn is recorded.

Usage::

    python benchmarks/pcoc.py --out docs/results/pcoc.json
    python benchmarks/pcoc.py --markdown docs/results/pcoc.json --table-ns 8,64

``OPENBLAS_NUM_THREADS`` (and the OMP/MKL equivalents) default to 1, as in horizon.py.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import zlib  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from _common import ROOT, load_average, machine, provenance_line, revision  # noqa: E402

from crasp_compiler.errors import CraspError  # noqa: E402
from crasp_compiler.languages.pcoc.check import check_pcoc  # noqa: E402
from crasp_compiler.languages.pcoc.compile import compile_program, run_pcoc  # noqa: E402
from crasp_compiler.languages.pcoc.interpret import interpret_batch, interpret_program  # noqa: E402
from crasp_compiler.languages.pcoc.program import load_program  # noqa: E402

PCOC_DIR = ROOT / "examples" / "pcoc"
NS = (4, 8, 16, 32, 64)
SCALES = (1e3, 1e6)
MAX_DRAWS = 20  # batches drawn at most per scale before giving up on the promises


def pcoc_names() -> list[str]:
    return sorted(p.name for p in PCOC_DIR.iterdir() if p.suffix == ".pcoc")


def timed_compile(program, n: int, mode: str, repeats: int, tolerance: float | None):
    times, model = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        model = compile_program(program, n, mode=mode, tolerance=tolerance)
        times.append(time.perf_counter() - start)
    return model, round(1000 * statistics.median(times), 3)


def shape(model) -> dict:
    heads = [len(layer.heads) for layer in model.layers]
    theorem = model.info["theorem"]
    return {
        "rounds": model.info["rounds"],
        "layers": len(model.layers),
        "extra_depth": model.info["extra_depth"],
        "heads_per_layer": heads,
        "heads_per_round": model.info["heads_per_round"],
        "heads_max": max(heads, default=0),
        "heads_total": sum(heads),
        "width": model.width,
        "mlp_width": model.mlp_width,
        "mlp_units": sum(layer.mlp.w1.shape[0] if layer.mlp else 0 for layer in model.layers),
        "parameters": model.parameter_count(),
        "theorem_layers": theorem["layers"],
        "theorem_heads_per_layer": theorem["heads_per_layer"],
    }


def _satisfies(program, n: int, x: np.ndarray) -> bool:
    try:
        interpret_program(program, n, x, check_promises=True)
    except CraspError:
        return False
    return True


def draw(program, n: int, scale: float, samples: int, rng) -> tuple[np.ndarray | None, int]:
    """``samples`` inputs of shape (k, n) uniform in [−scale, scale] that keep every promise
    of the program; returns them (None if MAX_DRAWS batches did not yield enough) and the
    number of inputs rejected on the way."""
    k = len(program.inputs)
    kept, rejected = [], 0
    for _ in range(MAX_DRAWS):
        batch = rng.uniform(-scale, scale, size=(samples, k, n))
        try:
            interpret_batch(program, n, batch, check_promises=True)
            good = list(batch)
        except CraspError:
            good = [x for x in batch if _satisfies(program, n, x)]
        rejected += samples - len(good)
        kept.extend(good)
        if len(kept) >= samples:
            return np.stack(kept[:samples]), rejected
    return None, rejected


def measure(program, n, hard, soft, scale, samples, seed) -> dict:
    entry: dict = {"scale": scale}
    bounds = [s.bound for s in program.slots if s.name in program.inputs]
    if any(b is not None and b < scale for b in bounds):
        entry["skipped"] = "scale exceeds a declared input bound"
        return entry
    rng = np.random.default_rng(seed)
    x, rejected = draw(program, n, scale, samples, rng)
    entry["rejected"] = rejected
    if x is None:
        entry["skipped"] = f"fewer than {samples} inputs keep the promises in {MAX_DRAWS} draws"
        return entry
    start = time.perf_counter()
    out_hard = run_pcoc(hard, list(x), dtype=np.float64)
    out_soft = run_pcoc(soft, list(x), dtype=np.float64)
    entry["run_s"] = round(time.perf_counter() - start, 3)
    reference = interpret_batch(program, n, x).outputs
    per_output = {}
    for name in program.outputs:
        soft_err = float(np.max(np.abs(out_soft[name] - out_hard[name])))
        hard_err = float(np.max(np.abs(out_hard[name] - reference[name])))
        # soft and hard are each within their recorded bound of the interpreter
        bound = soft.info["error_bounds"]["float64"][name] + hard.guarantee.errors["float64"]
        per_output[name] = {
            "soft_vs_hard": soft_err,
            "hard_vs_interpreter": hard_err,
            "soft_vs_interpreter": float(np.max(np.abs(out_soft[name] - reference[name]))),
            "max_abs_output": float(np.max(np.abs(reference[name]))),
            "bound": bound,
            "ratio_to_bound": soft_err / bound if bound > 0 else None,
        }
    entry["outputs"] = per_output
    entry["soft_vs_hard"] = max(o["soft_vs_hard"] for o in per_output.values())
    entry["hard_vs_interpreter"] = max(o["hard_vs_interpreter"] for o in per_output.values())
    entry["soft_vs_interpreter"] = max(o["soft_vs_interpreter"] for o in per_output.values())
    ratios = [o["ratio_to_bound"] for o in per_output.values() if o["ratio_to_bound"] is not None]
    entry["max_ratio_to_bound"] = max(ratios, default=None)
    tol = soft.info["tolerance"]
    entry["above_bound"] = [
        k for k, o in per_output.items() if o["bound"] > 0 and o["soft_vs_hard"] > o["bound"]
    ]
    entry["above_tolerance"] = [k for k, o in per_output.items() if o["soft_vs_interpreter"] > tol]
    return entry


def row(name: str, n: int, args, seed_base: int) -> dict:
    program = load_program(PCOC_DIR / name)
    entry: dict = {"example": name, "n": n}
    try:
        check_pcoc(program, n)
    except CraspError as err:
        entry["skipped"] = f"static check failed: {str(err).splitlines()[0]}"
        return entry
    hard, hard_ms = timed_compile(program, n, "hard", args.repeats, args.tolerance)
    entry.update(shape(hard))
    entry["compile_ms_hard"] = hard_ms
    try:
        soft, soft_ms = timed_compile(program, n, "softmax", args.repeats, args.tolerance)
    except CraspError as err:
        entry["softmax"] = {"skipped": str(err).splitlines()[0]}
        return entry
    info = soft.info
    entry["softmax"] = {
        "compile_ms": soft_ms,
        "tolerance": info["tolerance"],
        "temperature": info["temperature"],
        "leak_bound": info["leak_bound"],
        "leak_bound_max": max(info["leak_bound"].values(), default=0.0),
        "error_bound_max": soft.guarantee.errors["float64"],
        "hard_error_bound": hard.guarantee.errors["float64"],
        "same_shape_as_hard": shape(soft) == shape(hard),
        "measured": [
            measure(program, n, hard, soft, scale, args.samples, [seed_base, n, int(scale)])
            for scale in args.scales
        ],
    }
    return entry


def _e(x: float | None) -> str:
    if x is None:
        return "–"
    return "0" if x == 0 else f"{x:.1e}"


def _scale_tag(scale: float) -> str:
    return (
        f"1e{round(np.log10(scale))}"
        if scale > 0 and np.log10(scale).is_integer()
        else f"{scale:g}"
    )


def _ratio(measured: list[dict]) -> str:
    """The largest measured |soft − hard| / bound over the outputs and scales."""
    ratios = [m["max_ratio_to_bound"] for m in measured if m.get("max_ratio_to_bound") is not None]
    return f"{max(ratios):.2g}" if ratios else "–"


def markdown(data: dict, ns: list[int] | None = None) -> str:
    """One row per (example, n); ``ns`` picks the n shown (default: all). "a / b" cells
    give the input scales in the header's order; the leak is the largest over the
    outputs, the ratio is per output (each against its own bound)."""
    tags = " / ".join(f"±{_scale_tag(s)}" for s in data["config"]["scales"])
    header = [
        "example", "n", "R", "layers", "heads max / total", "theorem s", "width",
        "MLP units", "params", "compile ms (hard)", "T", "softmax leak", "recorded bound",
        f"max \\|soft − hard\\| ({tags})", "max ratio to bound",
        f"max \\|hard − interp\\| ({tags})",
    ]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for e in data["results"]:
        if ns and e["n"] not in ns:
            continue
        if "skipped" in e:
            cells = [e["example"], e["n"], e["skipped"]] + [""] * (len(header) - 3)
            lines.append("| " + " | ".join(map(str, cells)) + " |")
            continue
        cells = [
            e["example"], e["n"], e["rounds"], e["layers"],
            f"{e['heads_max']} / {e['heads_total']}", e["theorem_heads_per_layer"], e["width"],
            e["mlp_units"], e["parameters"], f"{e['compile_ms_hard']:.1f}",
        ]  # fmt: skip
        sm = e["softmax"]
        if "skipped" in sm:
            cells += [f"softmax: {sm['skipped']}"] + [""] * (len(header) - len(cells) - 1)
        else:
            meas = sm["measured"]
            cells += [
                f"{sm['temperature']:.1f}",
                _e(sm["leak_bound_max"]),
                _e(sm["error_bound_max"]),
                " / ".join(_e(m.get("soft_vs_hard")) for m in meas),
                _ratio(meas),
                " / ".join(_e(m.get("hard_vs_interpreter")) for m in meas),
            ]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", help="comma-separated file names (default: all)")
    parser.add_argument("--ns", default=",".join(map(str, NS)), help="comma-separated n")
    parser.add_argument("--repeats", type=int, default=3, help="compiles per mode (median)")
    parser.add_argument("--samples", type=int, default=64, help="random inputs per scale")
    parser.add_argument("--tolerance", type=float, default=None, help="softmax tolerance")
    parser.add_argument("--scales", default=",".join(f"{s:g}" for s in SCALES), help="input scales")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument(
        "--markdown", metavar="JSON", help="print the markdown table of a saved run and exit"
    )
    parser.add_argument("--table-ns", help="with --markdown: the n to show (default: all)")
    args = parser.parse_args(argv)
    if args.markdown:
        data = json.loads(Path(args.markdown).read_text())
        ns = [int(v) for v in args.table_ns.split(",")] if args.table_ns else None
        print(provenance_line(data))
        print()
        print(markdown(data, ns))
        return

    args.scales = [float(v) for v in args.scales.split(",")]
    ns = [int(v) for v in args.ns.split(",")]
    names = args.examples.split(",") if args.examples else pcoc_names()
    wall = time.perf_counter()
    data = {
        "benchmark": "pcoc",
        "command": " ".join(["python", *sys.argv]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "revision": revision(),
        "config": {
            "examples": names,
            "ns": ns,
            "repeats": args.repeats,
            "samples": args.samples,
            "tolerance": args.tolerance,
            "scales": args.scales,
            "seed": args.seed,
            "dtype": "float64",
            "runtime": "numpy",
            "inputs": "uniform in [-scale, scale]; inputs breaking a promise are redrawn",
        },
        "results": [],
    }
    for name in names:
        seed_base = [args.seed, zlib.crc32(name.encode())]
        for n in ns:
            entry = row(name, n, args, seed_base)
            data["results"].append(entry)
            if "skipped" in entry:
                print(f"{name:22s} n={n:3d}  skipped: {entry['skipped']}", flush=True)
                continue
            sm = entry["softmax"]
            text = (
                f"{name:22s} n={n:3d}  R {entry['rounds']:3d}  layers {entry['layers']:3d}  "
                f"heads {entry['heads_max']}/{entry['heads_total']}  width {entry['width']}  "
                f"params {entry['parameters']}"
            )
            if "skipped" in sm:
                text += f"  softmax skipped: {sm['skipped']}"
            else:
                text += f"  T {sm['temperature']:.1f}  bound {sm['error_bound_max']:.1e}"
                for m in sm["measured"]:
                    tag = _scale_tag(m["scale"])
                    if "skipped" in m:
                        text += f"  [{tag}: skipped]"
                    else:
                        text += (
                            f"  [{tag}: soft-hard {m['soft_vs_hard']:.1e} "
                            f"hard-interp {m['hard_vs_interpreter']:.1e}]"
                        )
                        if m["above_bound"] or m["above_tolerance"]:
                            text += f" ABOVE bound {m['above_bound']} tol {m['above_tolerance']}"
            print(text, flush=True)
    data["wall_s"] = round(time.perf_counter() - wall, 1)
    data["load_average_end"] = load_average()
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    print()
    print(markdown(data))
    print(f"\nwall time {data['wall_s']} s")


if __name__ == "__main__":
    main()
