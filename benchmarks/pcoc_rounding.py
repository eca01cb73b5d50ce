"""PCOC float guarantees: the recorded bound against the largest error measured.

For every PCOC example (``examples/pcoc/*.pcoc`` and ``examples/pcoc_sends/permute.pcoc``):

- hard mode at every n in ``--ns``: the bound the model records per float type
  (``Guarantee.errors``: every output within it of the interpreter's float64 output), and
  the largest |model output − interpreter output| over ``--samples`` random inputs within
  the bounds, run by the numpy executor in float64 and in float32 (where the model is
  covered; ``Guarantee.dtypes`` says −1 where a data comparison is not provably decided);
- softmax mode at every n in ``--softmax-ns`` and tolerance in ``--tolerances`` (float64):
  the model's temperature and recorded bound and the largest error measured the same way,
  or the refusal and the tolerance it names as compiling.

Inputs: every input number uniform in [−B·s, B·s] (B its declared bound; a destination
``d``: a permutation of 0..n−1), with s = 1, 1/2, 1/4, … the largest scale at which at
least half of a trial batch keeps every promise of the program (data comparisons outside
their margins, slots within their bounds: ``interpret(..., check_promises=True)``);
inputs that break one are redrawn. The scale is recorded.

Usage::

    python benchmarks/pcoc_rounding.py --out docs/results/pcoc_rounding.json
    python benchmarks/pcoc_rounding.py --markdown docs/results/pcoc_rounding.json

``OPENBLAS_NUM_THREADS`` (and the OMP/MKL equivalents) default to 1, as in horizon.py.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import zlib  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from _common import ROOT, load_average, machine, provenance_line, revision  # noqa: E402

from crasp_compiler.errors import CraspError  # noqa: E402
from crasp_compiler.languages.pcoc.compile import compile_program, run_pcoc  # noqa: E402
from crasp_compiler.languages.pcoc.interpret import interpret_batch  # noqa: E402
from crasp_compiler.languages.pcoc.program import load_program  # noqa: E402

EXAMPLES = [
    *sorted((ROOT / "examples" / "pcoc").glob("*.pcoc")),
    ROOT / "examples" / "pcoc_sends" / "permute.pcoc",
]
DTYPES = {"float64": np.float64, "float32": np.float32}


def keeps_promises(program, n: int, batch: np.ndarray) -> list[np.ndarray]:
    """The inputs of ``batch`` on which the interpreter keeps every promise (the whole
    batch at once where it can, else by halves)."""
    if len(batch) == 0:
        return []
    try:
        interpret_batch(program, n, batch, check_promises=True)
    except CraspError:
        if len(batch) == 1:
            return []
        half = len(batch) // 2
        return keeps_promises(program, n, batch[:half]) + keeps_promises(program, n, batch[half:])
    return list(batch)


def draw(program, n: int, rng: np.random.Generator, count: int, scale: float) -> np.ndarray:
    bounds = {slot.name: slot.bound for slot in program.slots}
    batch = np.zeros((count, len(program.inputs), n))
    for k, name in enumerate(program.inputs):
        if name == "d":
            batch[:, k] = [rng.permutation(n) for _ in range(count)]
        else:
            bound = bounds[name] * scale
            batch[:, k] = rng.uniform(-bound, bound, (count, n))
    return batch


def inputs_within_bounds(
    program, n: int, samples: int, seed: list[int]
) -> tuple[np.ndarray, float, int]:
    """``samples`` inputs within the bounds keeping every promise, the scale s, and the
    number of inputs redrawn."""
    rng = np.random.default_rng(seed)
    scale = 1.0
    while len(keeps_promises(program, n, draw(program, n, rng, 64, scale))) < 32:
        scale /= 2
    kept: list[np.ndarray] = []
    drawn = 0
    while len(kept) < samples:
        batch = draw(program, n, rng, samples, scale)
        drawn += len(batch)
        kept += keeps_promises(program, n, batch)
    return np.stack(kept[:samples]), scale, drawn - samples


# Inputs run through a model at once (a wide model's hidden layers hold batch × (n + 1)
# × width numbers).
CHUNK = 50


def largest_error(model, program, n: int, x: np.ndarray, dtype: str) -> float:
    want = interpret_batch(program, n, x).outputs
    worst = 0.0
    for start in range(0, len(x), CHUNK):
        got = run_pcoc(model, list(x[start : start + CHUNK]), dtype=DTYPES[dtype])
        for k in want:
            worst = max(worst, float(np.max(np.abs(got[k] - want[k][start : start + CHUNK]))))
    return worst


def hard_row(path: Path, n: int, samples: int, seed: int) -> dict:
    program = load_program(path)
    entry: dict = {"example": path.name, "n": n, "mode": "hard"}
    start = time.process_time()
    model = compile_program(program, n)
    entry["compile_cpu_s"] = round(time.process_time() - start, 2)
    x, scale, redrawn = inputs_within_bounds(
        program, n, samples, [seed, n, zlib.crc32(path.name.encode())]
    )
    entry.update({"scale": scale, "redrawn": redrawn, "samples": len(x), "dtypes": {}})
    for dtype in DTYPES:
        covered = model.guarantee.dtypes.get(dtype, -1) >= 0
        row: dict = {"covered": covered}
        if covered:
            bound = model.guarantee.errors.get(dtype)
            error = largest_error(model, program, n, x, dtype)
            row.update(
                {
                    "bound": bound,
                    "measured": error,
                    "ratio": None if not error else bound / error,
                    "below": bool(error <= bound),
                }
            )
        entry["dtypes"][dtype] = row
    return entry


def softmax_row(path: Path, n: int, tolerance: float, samples: int, seed: int) -> dict:
    program = load_program(path)
    entry: dict = {"example": path.name, "n": n, "mode": "softmax", "tolerance": tolerance}
    start = time.process_time()
    try:
        model = compile_program(program, n, mode="softmax", tolerance=tolerance)
    except CraspError as err:
        lines = str(err).replace(f"{ROOT}/", "").splitlines()  # no machine paths
        entry["refused"], entry["hint"] = lines[0], lines[-1].strip()
        entry["compile_cpu_s"] = round(time.process_time() - start, 2)
        return entry
    entry["compile_cpu_s"] = round(time.process_time() - start, 2)
    x, scale, redrawn = inputs_within_bounds(
        program, n, samples, [seed, n, zlib.crc32(path.name.encode())]
    )
    error = largest_error(model, program, n, x, "float64")
    entry.update(
        {
            "temperature": model.options["temperature"],
            "layers": len(model.layers),
            "bound": model.guarantee.errors["float64"],
            "measured": error,
            "within_tolerance": bool(error <= tolerance),
            "scale": scale,
            "redrawn": redrawn,
            "samples": len(x),
        }
    )
    return entry


def _e(value: float | None) -> str:
    return "—" if value is None else ("0" if value == 0 else f"{value:.2g}")


def markdown(data: dict) -> str:
    lines = [
        "| example | n | scale | float64 bound | float64 measured | ratio | float32 bound | "
        "float32 measured | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in data["hard"]:
        cells = [row["example"], row["n"], f"{row['scale']:g}"]
        for dtype in DTYPES:
            d = row["dtypes"][dtype]
            if not d["covered"]:
                cells += ["not covered", "", ""]
            else:
                cells += [_e(d["bound"]), _e(d["measured"]), _e(d["ratio"])]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    lines += [
        "",
        "| example | n | tolerance | T | layers | bound | measured | or refused: tolerance that compiles |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in data["softmax"]:
        if "refused" in row:
            hint = row["hint"].split(" or more")[0].removeprefix("a tolerance of ")
            cells = [row["example"], row["n"], f"{row['tolerance']:g}", "", "", "", "", hint]
        else:
            cells = [
                row["example"],
                row["n"],
                f"{row['tolerance']:g}",
                f"{row['temperature']:.1f}",
                row["layers"],
                _e(row["bound"]),
                _e(row["measured"]),
                "",
            ]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ns", default="16,64", help="hard mode: comma-separated n")
    parser.add_argument("--softmax-ns", default="4,8,16", help="softmax: comma-separated n")
    parser.add_argument("--tolerances", default="1e-3,1e-6", help="softmax tolerances")
    parser.add_argument("--samples", type=int, default=1000, help="random inputs per model")
    parser.add_argument("--examples", help="comma-separated file names (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--markdown", metavar="JSON", help="print the tables of a saved run")
    args = parser.parse_args(argv)
    if args.markdown:
        data = json.loads(Path(args.markdown).read_text())
        print(provenance_line(data))
        print()
        print(markdown(data))
        return
    paths = [p for p in EXAMPLES if not args.examples or p.name in args.examples.split(",")]
    rev = revision()  # repository-relative: no machine paths in a committed record
    wall = time.perf_counter()
    data: dict = {
        "benchmark": "pcoc_rounding",
        "command": " ".join(["python", *sys.argv]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "revision": rev,
        "config": {
            "examples": [p.name for p in paths],
            "ns": args.ns,
            "softmax_ns": args.softmax_ns,
            "tolerances": args.tolerances,
            "samples": args.samples,
            "seed": args.seed,
            "runtime": "numpy",
            "inputs": "uniform in [-B s, B s], s the largest power of 1/2 at which half of a "
            "trial batch keeps the promises; destinations d: permutations; inputs breaking a "
            "promise are redrawn",
        },
        "hard": [],
        "softmax": [],
    }
    for path in paths:
        for n in map(int, args.ns.split(",")):
            row = hard_row(path, n, args.samples, args.seed)
            data["hard"].append(row)
            text = "  ".join(
                f"{dtype}: "
                + (
                    f"bound {_e(d['bound'])} measured {_e(d['measured'])} ratio {_e(d['ratio'])}"
                    if d["covered"]
                    else "not covered"
                )
                for dtype, d in row["dtypes"].items()
            )
            print(f"{path.name:22s} n={n:3d} hard  {text}", flush=True)
    for path in paths:
        for n in map(int, args.softmax_ns.split(",")):
            for tolerance in map(float, args.tolerances.split(",")):
                row = softmax_row(path, n, tolerance, args.samples, args.seed)
                data["softmax"].append(row)
                if "refused" in row:
                    text = f"refused; {row['hint']}"
                else:
                    text = (
                        f"T {row['temperature']:.1f} bound {_e(row['bound'])} "
                        f"measured {_e(row['measured'])}"
                    )
                print(f"{path.name:22s} n={n:3d} softmax {tolerance:g}  {text}", flush=True)
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
