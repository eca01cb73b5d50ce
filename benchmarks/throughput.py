"""Tokens per second of the numpy executor and the torch module on the example models.

For each example (heaviside mode), runtime (numpy; torch on CPU; torch on CUDA when
present; ``--runtimes`` picks some), length n ∈ ``--lengths`` and batch size B ∈ ``--batches``: random inputs of
exactly n tokens, one warm-up run, then the median wall time of ``--repeats`` runs of the
whole forward pass (including embedding and decision rules), reported as B·n / time.
A configuration whose time, extrapolated from the previous length (quadratically, as
heads with scores cost O(n²)), would exceed ``--max-seconds`` is skipped and recorded as
such. Also times the target case: Dyck-1, n = 4096, batch 8, torch on CPU, float32 and
float64.

With ``--ratios``: each runtime's time over the reference interpreter's
(:func:`crasp_compiler.interpret_batch`), measured in one process on the same inputs
(Dyck-1 and a few other examples, n = 4096, batch 8, median of ``--repeats`` runs, CPU
time and wall time): the numpy executor (float64, float32) and the torch module on CPU
(float64, float32; one thread and torch's default threads), each from token strings to
decided outputs (tokenisation included, as the interpreter's input check is).

Usage::

    python benchmarks/throughput.py --out docs/results/throughput.json
    python benchmarks/throughput.py --markdown docs/results/throughput.json
    python benchmarks/throughput.py --ratios [--examples dyck1.cr ...] [--repeats 9]
    OPENBLAS_NUM_THREADS=1 python benchmarks/throughput.py --floor --repeats 41 \
        --out docs/results/throughput_floor.json

With ``--floor``: Dyck-1 against the floor (:func:`floor_dyck1`) and the interpreter at
n = 4096 × 8 and 10⁶ × 1, every runtime from ids and from tokens, and the peak memory
per token (:func:`near_floor`, :func:`peak_bytes`).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import numpy as np
import torch
from _common import EXAMPLES_DIR, example_names, machine, provenance_line, revision

from crasp_compiler import load_program
from crasp_compiler.languages.crasp.compile import compile_program
from crasp_compiler.runtime.numpy_exec import run_tokens
from crasp_compiler.runtime.torch_module import TorchTransformer


def timed(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def runner(kind: str, model, words, dtype: str):
    """A zero-argument function running ``words`` through one runtime."""
    if kind == "numpy":
        np_dtype = np.float64 if dtype == "float64" else np.float32
        return lambda: run_tokens(model, words, dtype=np_dtype, on_overlength="ignore")
    device = "cuda" if kind == "torch-cuda" else "cpu"
    module = TorchTransformer(model).to(
        device=device, dtype=torch.float64 if dtype == "float64" else torch.float32
    )
    ids, lengths = module.encode(words, device=device)

    def go():
        with torch.no_grad():
            values = module.decide(module(ids, lengths))
        if device == "cuda":
            torch.cuda.synchronize()
        return values

    return go


def measure(args) -> dict:
    kinds = ["numpy", "torch-cpu"] + (["torch-cuda"] if torch.cuda.is_available() else [])
    kinds = [kind for kind in kinds if not args.runtimes or kind in args.runtimes]
    rows = []
    names = args.examples or example_names()
    for name in names:
        program = load_program(EXAMPLES_DIR / name)
        model = compile_program(program)
        for kind in kinds:
            for batch in args.batches:
                previous: tuple[int, float] | None = None
                for n in args.lengths:
                    row = {"example": name, "runtime": kind, "batch": batch, "n": n}
                    row["dtype"] = args.dtype
                    if previous and previous[1] * (n / previous[0]) ** 2 > args.max_seconds:
                        row["skipped"] = f"estimated > {args.max_seconds:g} s"
                        rows.append(row)
                        print(json.dumps(row), file=sys.stderr)
                        continue
                    rng = random.Random(f"{name}-{n}-{batch}")
                    words = [[rng.choice(program.alphabet) for _ in range(n)] for _ in range(batch)]
                    seconds = timed(runner(kind, model, words, args.dtype), args.repeats)
                    previous = (n, seconds)
                    row["seconds"] = round(seconds, 5)
                    row["tokens_per_second"] = round(batch * n / seconds)
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr)
    target = []
    dyck = compile_program(load_program(EXAMPLES_DIR / "dyck1.cr"))
    rng = random.Random("target")
    words = [[rng.choice(["(", ")"]) for _ in range(4096)] for _ in range(8)]
    for dtype in ("float32", "float64"):
        seconds = timed(runner("torch-cpu", dyck, words, dtype), args.repeats)
        target.append({"dtype": dtype, "seconds": round(seconds, 4)})
    return {"rows": rows, "target_dyck1_4096x8_torch_cpu": target}


RATIO_EXAMPLES = ["dyck1.cr", "majority.crasp", "tomita2.crasp"]


def timed_both(fn, repeats: int) -> tuple[float, float]:
    """Median CPU time (``time.process_time``) and wall time of ``fn`` after a warm-up."""
    fn()
    cpu, wall = [], []
    for _ in range(repeats):
        c, w = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return statistics.median(cpu), statistics.median(wall)


def ratios(names: list[str], n: int, batch: int, repeats: int) -> list[dict]:
    """Runtime time / interpreter time for each example (module docstring)."""
    from crasp_compiler import interpret_batch

    default_threads = torch.get_num_threads()
    rows = []
    for name in names:
        program = load_program(EXAMPLES_DIR / name)
        model = compile_program(program)
        rng = random.Random(f"ratios-{name}")
        words = [[rng.choice(program.alphabet) for _ in range(n)] for _ in range(batch)]
        cases = {"interpreter": partial(interpret_batch, program, words)}
        for dtype in ("float64", "float32"):
            np_dtype = np.float64 if dtype == "float64" else np.float32
            cases[f"numpy {dtype}"] = partial(
                run_tokens, model, words, dtype=np_dtype, on_overlength="ignore"
            )
        modules = {
            dtype: TorchTransformer(model).to(dtype=getattr(torch, dtype))
            for dtype in ("float64", "float32")
        }
        timings = {case: timed_both(fn, repeats) for case, fn in cases.items()}
        for dtype, module in modules.items():
            for threads in sorted({1, default_threads}):
                torch.set_num_threads(threads)  # the benchmark's choice, not the library's
                try:
                    timings[f"torch {dtype} {threads} thread{'s' * (threads > 1)}"] = timed_both(
                        partial(module.run, words, on_overlength="ignore"), repeats
                    )
                finally:
                    torch.set_num_threads(default_threads)
        base_cpu, base_wall = timings["interpreter"]
        for case, (cpu, wall) in timings.items():
            row = {
                "example": name,
                "n": n,
                "batch": batch,
                "runtime": case,
                "cpu_ms": round(cpu * 1e3, 3),
                "wall_ms": round(wall * 1e3, 3),
                "cpu_ratio": round(cpu / base_cpu, 2),
                "wall_ratio": round(wall / base_wall, 2),
            }
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    return rows


def floor_dyck1(ids: np.ndarray) -> np.ndarray:
    """Dyck-1's decision at every position, the tightest plain numpy we know: integer
    prefix counts of the token ids and comparisons (ids: BOS 0, ``(`` 1, ``)`` 2)."""
    opened = np.cumsum(ids == 1, axis=1, dtype=np.int32)
    closed = np.cumsum(ids == 2, axis=1, dtype=np.int32)
    violations = np.cumsum(opened < closed, axis=1, dtype=np.int32)
    return (violations == 0) & (opened == closed)


FLOOR_SIZES = ((8, 4096), (1, 1_000_000))


def near_floor(repeats: int) -> list[dict]:
    """Dyck-1 at each of :data:`FLOOR_SIZES` (batch, n): every runtime's CPU time
    (``time.process_time``, median of ``repeats`` rounds that run every case once in turn)
    over the floor's (:func:`floor_dyck1`, from token ids) and over the interpreter's
    (from tokens): the numpy executor and the torch module (one thread) in float64 and
    float32, from ids (forward pass and decision rule) and from tokens (tokenisation and
    input checks included), and ``torch.compile`` of the module from ids. Peak memory:
    :func:`peak_bytes`."""
    from crasp_compiler import interpret_batch
    from crasp_compiler.runtime import forward as fw
    from crasp_compiler.runtime.backend import NUMPY
    from crasp_compiler.runtime.numpy_exec import decide, encode_vocab, prepared

    program = load_program(EXAMPLES_DIR / "dyck1.cr")
    model = compile_program(program)
    torch.set_num_threads(1)  # the benchmark's choice (module docstring of torch_module)
    rows = []
    for batch, n in FLOOR_SIZES:
        rng = random.Random(f"floor-{batch}-{n}")
        words = [[rng.choice("()") for _ in range(n)] for _ in range(batch)]
        ids, lengths = encode_vocab(model.vocab, words)
        tids, tlengths = torch.from_numpy(ids), torch.from_numpy(lengths)
        steps = np.arange(1, ids.shape[1] + 1, dtype=np.float64)[None]

        def numpy_ids(dtype: type, ids=ids, lengths=lengths, steps=steps) -> Callable[[], object]:
            def go() -> object:
                raw = fw.forward(NUMPY, prepared(model, dtype), ids, lengths, None)
                return decide(model.outputs[0].rule, raw[..., 0], steps)

            return go

        def torch_ids(module, decider, ids=tids, lengths=tlengths) -> Callable[[], object]:
            def go() -> object:
                with torch.no_grad():
                    return decider.decide(module(ids, lengths), lengths)

            return go

        cases: dict[str, Callable[[], object]] = {
            "floor (ids)": partial(floor_dyck1, ids),
            "interpreter (tokens)": partial(interpret_batch, program, words),
        }
        for dtype in ("float64", "float32"):
            np_dtype = np.float64 if dtype == "float64" else np.float32
            module = TorchTransformer(model).to(dtype=getattr(torch, dtype))
            cases[f"numpy {dtype} (ids)"] = numpy_ids(np_dtype)
            cases[f"numpy {dtype} (tokens)"] = partial(
                run_tokens, model, words, dtype=np_dtype, on_overlength="ignore"
            )
            cases[f"torch {dtype} (ids)"] = torch_ids(module, module)
            cases[f"torch {dtype} (tokens)"] = partial(module.run, words, on_overlength="ignore")
            try:
                compiled = torch.compile(module, dynamic=True)
                torch_ids(compiled, module)()
                cases[f"torch.compile {dtype} (ids)"] = torch_ids(compiled, module)
            except Exception as err:  # an environment without a compiler backend
                print(f"torch.compile {dtype}: {type(err).__name__}: {err}", file=sys.stderr)
        want = interpret_batch(program, words)["D"]
        assert np.array_equal(floor_dyck1(ids), want), "the floor computes Dyck-1"
        for fn in cases.values():
            fn()  # warm-up
        times: dict[str, list[float]] = {case: [] for case in cases}
        load = _common_load()
        for _ in range(repeats):
            for case, fn in cases.items():
                start = time.process_time()
                fn()
                times[case].append(time.process_time() - start)
        medians = {case: statistics.median(t) for case, t in times.items()}
        floor, interpreter = medians["floor (ids)"], medians["interpreter (tokens)"]
        for case, seconds in medians.items():
            row = {
                "batch": batch,
                "n": n,
                "runtime": case,
                "cpu_ms": round(seconds * 1e3, 3),
                "over_floor": round(seconds / floor, 2),
                "over_interpreter": round(seconds / interpreter, 2),
                "load_average": load,
            }
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    return rows


def _common_load() -> list[float] | None:
    from _common import load_average

    return load_average()


PEAK = """
import json, random, sys
import numpy as np
import torch
from crasp_compiler import interpret_batch, load_program
from crasp_compiler.languages.crasp.compile import compile_program
from crasp_compiler.runtime.numpy_exec import run_tokens
from crasp_compiler.runtime.torch_module import TorchTransformer
sys.path.insert(0, sys.argv[3])
from throughput import floor_dyck1
case, n = sys.argv[1], int(sys.argv[2])
program = load_program(sys.argv[4])
model = compile_program(program)
words = [[random.Random(0).choice("()") for _ in range(n)]]
small = [words[0][:1000]]
if case.startswith("torch"):
    module = TorchTransformer(model).to(dtype=getattr(torch, case.split()[1]))
    go = lambda w: module.run(w, on_overlength="ignore")
elif case.startswith("numpy"):
    dtype = np.float64 if case.endswith("float64") else np.float32
    go = lambda w: run_tokens(model, w, dtype=dtype, on_overlength="ignore")
elif case == "interpreter":
    go = lambda w: interpret_batch(program, w)
else:
    table = np.array([0, 1, 2], dtype=np.int64)
    go = lambda w: floor_dyck1(np.concatenate([[0], table[1 + (np.array(w[0]) == ")")]])[None])
go(small)
def peak():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) << 10
before = peak()
go(words)
print(json.dumps({"bytes_per_token": (peak() - before) / n}))
"""


def peak_bytes(n: int = 1_000_000) -> list[dict]:
    """Growth of the peak resident size (``VmHWM``, a fresh process each) of one run on
    one Dyck-1 input of n tokens, per token, from tokens (the floor from ids)."""
    import subprocess

    rows = []
    cases = ["floor", "interpreter"] + [
        f"{kind} {dtype}" for kind in ("numpy", "torch") for dtype in ("float64", "float32")
    ]
    for case in cases:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                PEAK,
                case,
                str(n),
                str(Path(__file__).parent),
                str(EXAMPLES_DIR / "dyck1.cr"),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        row = {"runtime": case, "n": n, **json.loads(done.stdout.splitlines()[-1])}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    return rows


def floor_markdown(rows: list[dict], peaks: list[dict]) -> str:
    lines = [
        "| batch × n | runtime | CPU ms | × floor | × interpreter |",
        "|---|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['batch']} × {r['n']:,} | {r['runtime']} | {r['cpu_ms']:.3f} "
            f"| {r['over_floor']:.1f} | {r['over_interpreter']:.2f} |"
        )
    lines += ["", "| runtime | peak bytes per token (n = 10⁶) |", "|---|---:|"]
    lines += [f"| {p['runtime']} | {p['bytes_per_token']:.0f} |" for p in peaks]
    return "\n".join(lines)


def ratios_markdown(rows: list[dict]) -> str:
    lines = [
        "| example | runtime | CPU ms | wall ms | CPU ratio | wall ratio |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['example']} | {r['runtime']} | {r['cpu_ms']:.2f} | {r['wall_ms']:.2f} "
            f"| {r['cpu_ratio']:.2f} | {r['wall_ratio']:.2f} |"
        )
    return "\n".join(lines)


def markdown(data: dict) -> str:
    lines = [provenance_line(data), ""]
    if "ratios" in data:
        lines += ["Time over the interpreter's (goal ≤ 1.5):", "", ratios_markdown(data["ratios"])]
        if "rows" not in data:
            return "\n".join(lines)
        lines.append("")
    lines.append("Target — Dyck-1, n = 4096, batch 8, torch on CPU (goal < 1 s):")
    lines.append("")
    for t in data["target_dyck1_4096x8_torch_cpu"]:
        lines.append(f"- {t['dtype']}: {t['seconds']:.3f} s")
    lines.append("")
    lengths = sorted({r["n"] for r in data["rows"]})
    header = "| example | runtime | batch | " + " | ".join(f"n={n}" for n in lengths) + " |"
    lines += [header, "|" + "---|" * (3 + len(lengths))]
    table: dict[tuple, dict[int, str]] = {}
    for r in data["rows"]:
        key = (r["example"], r["runtime"], r["batch"])
        cell = "skipped" if "skipped" in r else f"{r['tokens_per_second']:,}"
        table.setdefault(key, {})[r["n"]] = cell
    for (name, kind, batch), cells in table.items():
        values = " | ".join(cells.get(n, "") for n in lengths)
        lines.append(f"| {name} | {kind} | {batch} | {values} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="Write the results as JSON here.")
    parser.add_argument("--markdown", type=Path, help="Print a results JSON as markdown.")
    parser.add_argument("--examples", nargs="*", help="Example file names (default: all).")
    parser.add_argument("--lengths", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--runtimes",
        nargs="*",
        choices=["numpy", "torch-cpu", "torch-cuda"],
        help="Only these runtimes (default: every one present).",
    )
    parser.add_argument("--max-seconds", type=float, default=20.0)
    parser.add_argument(
        "--floor",
        action="store_true",
        help="Only time Dyck-1 against the floor and the interpreter (near_floor, peak_bytes).",
    )
    parser.add_argument(
        "--ratios",
        action="store_true",
        help="Only time each runtime against the interpreter (n = 4096, batch 8).",
    )
    args = parser.parse_args()
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text())))
        return
    data = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python " + " ".join(sys.argv),
        "machine": {
            **machine(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
        },
        "revision": revision(),
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "markdown")},
    }
    if args.floor:
        data["floor"] = near_floor(args.repeats)
        data["peak"] = peak_bytes()
        print(floor_markdown(data["floor"], data["peak"]), file=sys.stderr)
    elif args.ratios:
        data["ratios"] = ratios(args.examples or RATIO_EXAMPLES, 4096, 8, args.repeats)
        print(ratios_markdown(data["ratios"]), file=sys.stderr)
    else:
        data.update(measure(args))
    text = json.dumps(data, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
