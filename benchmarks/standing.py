"""The standing benchmark of issues 16 and 26: how far compiled models are from the
program's own limits and from plain code, as ratios measured in one run on one commit.

1. **Depth.** For every C-RASP example and for shuffle-Dyck-k written per pair and with one
   violation count (k = 1 … 16): layers, the dependency bound the compiler reports, the
   program's count depth (the most ``#`` nested along a chain of references, a floor for
   any model that computes each count in its own attention sublayer), hidden units and
   compile time (which should grow linearly with k).
2. **Runtime.** Dyck-1 at 8 × 4096 and 1 × 10⁶ tokens (``benchmarks/throughput.py``'s
   :func:`near_floor` and :func:`peak_bytes`): the floor (plain numpy from token ids,
   :func:`floor_dyck1`), the reference interpreter, the numpy executor and the torch module
   (one thread; float64 and float32, from ids and from tokens; ``torch.compile`` beside
   them), as CPU-time ratios over the floor and over the interpreter from interleaved runs
   (the median of ``--repeats`` rounds), and the growth of peak resident memory per token
   of one 10⁶-token run (a fresh process each).
3. **PCOC sends.** ``examples/pcoc_sends/permute.pcoc`` for n in ``--ns`` (8 … 1,024 by
   doublings), each n in a fresh process: residual width beside the paper's design point
   (Lemma B.1: 2 tuple slots per machine of a valid bit, the payload and ⌈log₂ n⌉
   destination bits, plus the n + 1 positions: n(2 + ⌈log₂ n⌉) + n + 1 numbers), stored
   and nonzero parameters, layers, compile CPU time, the process's peak resident size
   after the compile and after the forward passes (``VmHWM``), the forward CPU time of 8
   random inputs (numpy, float64; x uniform within its declared bound, d a random
   permutation) beside the PCOC interpreter's on the same inputs (interleaved; medians),
   the largest measured |model − interpreter| beside the float64 bound the model records
   (``Guarantee.errors``), and growth exponents (least-squares fits of
   ``log y = a + e log n`` over all n and over n ≥ 64, and per doubling).
4. **Start-up.** Whole-process CPU time (user + system, ``getrusage`` of the children) of
   ``python -c "import numpy"``, ``crasp --help``, ``crasp compile examples/crasp/dyck1.cr
   -o TMP`` and ``crasp run TMP "( )"`` (``crasp`` run from the checkout as ``python -c
   "from crasp_compiler.cli import main; main()"``), interleaved, each command run once
   first (bytecode and parse tables cached); medians, and each over ``import numpy``.
5. **tracr.** Where ``tracr`` is importable, the like-with-like table of
   ``benchmarks/tracr_side.py`` (Dyck-1 and shuffle-Dyck-2: compile time, width,
   parameters, wrong decisions, and CPU ms per batch with tracr's forward jitted and the
   same batch on every side); elsewhere the section says to run that script in an
   environment that has tracr (it is not on PyPI).

Last, the targets of issue 26, each with the measured value and whether it is met
(:func:`targets`). BLAS and OpenMP run one thread (set here unless the environment says
otherwise); times are CPU times, which a loaded machine inflates less than wall time; the
load averages are recorded at the start, at each section and at the end.

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
import itertools  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from _common import (  # noqa: E402
    EXAMPLES_DIR,
    ROOT,
    example_names,
    load_average,
    machine,
    provenance_line,
    revision,
)

sys.path.insert(0, str(ROOT))  # tests.support: the shuffle-Dyck programs

import crasp_compiler  # noqa: E402
from crasp_compiler.languages.crasp.nodes import BoolRef, Count, CountRef, Node, children  # noqa: E402
from tests.support.shuffle_dyck import one_violation, per_pair  # noqa: E402

PERMUTE = ROOT / "examples" / "pcoc_sends" / "permute.pcoc"
KS = (1, 2, 4, 8, 12, 16)
NS = "8,16,32,64,128,256,512,1024"


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


def ceil_log2(n: int) -> int:
    return max(0, (n - 1).bit_length())


def design_point(n: int) -> int:
    """The paper's residual width for one send round on n machines (Lemma B.1): 2 tuple
    slots per machine, each a valid bit, the payload and ⌈log₂ n⌉ destination bits, and
    the n + 1 positions: n(2 + ⌈log₂ n⌉) + n + 1."""
    return n * (2 + ceil_log2(n)) + n + 1


GROWN = (
    "width",
    "nonzero",
    "parameters",
    "compile_cpu_s",
    "forward_cpu_s_8_inputs",
    "rss_growth_mib_compile",
)


def exponents(rows: list[dict], since: int = 64) -> dict[str, dict]:
    """Per quantity in :data:`GROWN`: the fitted exponent over every n and over n ≥
    ``since``, and per doubling (``"64→128"``: log₂ of the ratio of consecutive rows whose
    n doubles)."""
    out: dict[str, dict] = {}
    for key in GROWN:
        have = [r for r in rows if r.get(key) is not None]
        late = [r for r in have if r["n"] >= since]
        doublings = {
            f"{a['n']}→{b['n']}": round(math.log2(b[key] / a[key]), 2)
            for a, b in itertools.pairwise(have)
            if b["n"] == 2 * a["n"] and a[key] > 0 and b[key] > 0
        }
        out[key] = {
            "all": fit([r["n"] for r in have], [r[key] for r in have]),
            f"from_{since}": fit([r["n"] for r in late], [r[key] for r in late]),
            "per_doubling": doublings,
        }
    return out


def _peak_rss_mib() -> float | None:
    """The process's peak resident size so far (``VmHWM``), MiB (None off Linux)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def pcoc_case(n: int) -> dict:
    """One row of the PCOC table (module docstring, item 3), measured in this process:
    meant for a fresh one (``--pcoc-case N``), so that its peak resident size is this n's."""
    from crasp_compiler.languages.pcoc.interpret import interpret_batch

    program = crasp_compiler.load(PERMUTE)
    crasp_compiler.compile(program, n=4)  # the compiler's modules imported before timing
    rss_start = _peak_rss_mib()
    start = time.process_time()
    model = crasp_compiler.compile(program, n=n)
    compile_s = time.process_time() - start
    rss_compile = _peak_rss_mib()
    rng = np.random.default_rng(n)
    bound = model.guarantee.input_bounds["x"]
    inputs = np.array(
        [[rng.uniform(-bound, bound, size=n), rng.permutation(n).astype(float)] for _ in range(8)]
    )
    start = time.process_time()
    got = crasp_compiler.run(model, inputs)  # the first call: the execution plan is built
    first_s = time.process_time() - start
    want = interpret_batch(program, n, inputs).outputs["x"]
    error = float(np.abs(got.values["x"] - want).max())
    # interleaved rounds, about 3 CPU-s of forward passes in all (one at least); the
    # interpreter, about a thousandth of that, five samples a round
    rounds = max(1, min(7, math.ceil(3.0 / max(first_s, 1e-3))))
    forward, interpreter = [], []
    for _ in range(rounds):
        start = time.process_time()
        crasp_compiler.run(model, inputs)
        forward.append(time.process_time() - start)
        for _ in range(5):
            start = time.process_time()
            interpret_batch(program, n, inputs)
            interpreter.append(time.process_time() - start)
    forward_s, interpreter_s = statistics.median(forward), statistics.median(interpreter)
    return {
        "n": n,
        "width": model.width,
        "design_point": design_point(n),
        "parameters": model.parameter_count(),
        "nonzero": model.nonzero_count(),
        "layers": len(model.layers),
        "compile_cpu_s": round(compile_s, 3),
        "peak_rss_mib_start": rss_start,
        "peak_rss_mib_compile": rss_compile,
        "rss_growth_mib_compile": (
            round(rss_compile - rss_start, 1) if rss_compile and rss_start else None
        ),
        "first_forward_cpu_s": round(first_s, 4),
        "forward_cpu_s_8_inputs": round(forward_s, 4),
        "forward_rounds": rounds,
        "interpreter_cpu_s_8_inputs": round(interpreter_s, 6),
        "over_interpreter": round(forward_s / interpreter_s, 1),
        "peak_rss_mib_end": _peak_rss_mib(),
        "float64_error_bound": model.guarantee.errors.get("float64"),
        "float64_error_measured": error,
    }


def pcoc_rows(ns: list[int]) -> dict:
    """:func:`pcoc_case` for each n, each in a fresh process, and the exponents."""
    rows = []
    for n in ns:
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--pcoc-case", str(n)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            raise SystemExit(f"permute.pcoc at n = {n} failed:\n{done.stderr}")
        row = {**json.loads(done.stdout.splitlines()[-1]), "load_average": load_average()}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    return {"rows": rows, "exponents": exponents(rows)}


def runtime_section(repeats: int) -> dict:
    """Dyck-1 near the floor (``throughput.py``: :func:`near_floor`, :func:`peak_bytes`)."""
    import torch
    from throughput import near_floor, peak_bytes

    return {
        "torch": torch.__version__,
        "repeats": repeats,
        "rows": near_floor(repeats),
        "peak": peak_bytes(),
    }


# ---------------------------------------------------------------- start-up

STARTUP_COMMANDS = {
    "import numpy": ["-c", "import numpy"],
    "crasp --help": ["-c", "from crasp_compiler.cli import main; main()", "--help"],
    "crasp compile examples/crasp/dyck1.cr -o TMP": [
        "-c",
        "from crasp_compiler.cli import main; main()",
        "compile",
        "examples/crasp/dyck1.cr",
        "-o",
        "{model}",
    ],
    'crasp run TMP "( )"': [
        "-c",
        "from crasp_compiler.cli import main; main()",
        "run",
        "{model}",
        "( )",
    ],
}


def cpu_seconds(command: list[str]) -> float:
    """User + system CPU time of ``command`` run to completion in the checkout, with
    bytecode written and read as on any installed package (``PYTHONDONTWRITEBYTECODE``
    removed from its environment: a process that may not write bytecode recompiles every
    module of the package each time it starts)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, cwd=ROOT, env=env, capture_output=True, check=True, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def startup(rounds: int) -> dict:
    """Whole-process CPU of each of :data:`STARTUP_COMMANDS`, ``rounds`` interleaved rounds
    after one run each (bytecode and the parse tables cached); medians, and each command's
    median over ``import numpy``'s."""
    with tempfile.TemporaryDirectory() as folder:
        model = str(Path(folder) / "dyck1.npz")
        commands = {
            label: [sys.executable, *(a.replace("{model}", model) for a in args)]
            for label, args in STARTUP_COMMANDS.items()
        }
        for command in commands.values():  # in order: compile writes the model run reads
            cpu_seconds(command)
        times: dict[str, list[float]] = {label: [] for label in commands}
        for _ in range(rounds):
            for label, command in commands.items():
                times[label].append(cpu_seconds(command))
    numpy = statistics.median(times["import numpy"])
    rows = [
        {
            "command": label,
            "cpu_s_median": round(statistics.median(t), 4),
            "cpu_s_min": round(min(t), 4),
            "cpu_s_max": round(max(t), 4),
            "over_import_numpy": round(statistics.median(t) / numpy, 2),
        }
        for label, t in times.items()
    ]
    for row in rows:
        print(json.dumps(row), file=sys.stderr)
    return {"rounds": rounds, "rows": rows}


# ---------------------------------------------------------------- the targets of issue 26

OURS_RUNTIMES = ("numpy float64", "numpy float32", "torch float64", "torch float32")


def _pick(rows: list[dict], key: str, value: object) -> dict | None:
    return next((r for r in rows if r.get(key) == value), None)


def targets(data: dict) -> list[dict]:
    """Each target of issue 26 the run measures: what it asks, the measured value and
    whether it is met (None: not measured in this run). Runtime targets cover the numpy
    executor and the torch module (float64 and float32); ``torch.compile``, the floor and
    the interpreter are measured beside them, not held to them."""
    out: list[dict] = []

    def add(target: str, value: float | None, limit: float, shown: str) -> None:
        out.append(
            {
                "target": target,
                "value": value,
                "limit": limit,
                "shown": shown if value is not None else "not measured",
                "met": None if value is None else bool(value <= limit),
            }
        )

    pcoc = data.get("pcoc", {})
    rows = pcoc.get("rows", [])
    for n in (128, 256):
        r = _pick(rows, "n", n)
        limit = 2 * design_point(n)
        add(
            f"permute width at n = {n} ≤ 2 × {design_point(n):,}",
            r and r["width"],
            limit,
            r and f"{r['width']:,} ({r['width'] / design_point(n):.2f} × the design point)",
        )
    r = _pick(rows, "n", 256)
    add(
        "compile at n = 256 ≤ 30 CPU-s",
        r and r["compile_cpu_s"],
        30.0,
        r and f"{r['compile_cpu_s']:.2f} s",
    )
    add(
        "compile at n = 256 ≤ 2 GB (peak resident size of the process)",
        r and r["peak_rss_mib_compile"] and r["peak_rss_mib_compile"] * 2**20 / 1e9,
        2.0,
        r and f"{r['peak_rss_mib_compile']:,.0f} MiB",
    )
    r = _pick(rows, "n", 1024)
    add(
        "compile at n = 1,024 ≤ 10 CPU-min",
        r and r["compile_cpu_s"],
        600.0,
        r and f"{r['compile_cpu_s']:.2f} s",
    )
    for n in (256, 1024):
        r = _pick(rows, "n", n)
        ok = r and r["float64_error_bound"] is not None
        add(
            f"a float64 guarantee at n = {n:,} (measured error within the recorded bound)",
            ok and r["float64_error_measured"] / r["float64_error_bound"],
            1.0,
            ok and f"{r['float64_error_measured']:.2g} ≤ {r['float64_error_bound']:.2g}",
        )
    r = _pick(rows, "n", 128)
    add(
        "routed forward at n = 128 ≤ 100 × the interpreter",
        r and r["over_interpreter"],
        100.0,
        r and f"{r['over_interpreter']:.0f} ×",
    )
    grown = pcoc.get("exponents", {})
    for key in ("width", "nonzero"):
        e = grown.get(key, {}).get("from_64")
        add(f"{key} ∝ n^e over 64 … 1,024, e ≤ 1.3", e, 1.3, f"n^{e}")

    runtime = data.get("runtime", {})
    floor_rows = runtime.get("rows", [])

    def worst(n: int, source: str, key: str) -> tuple[float | None, str]:
        cells = [
            r
            for r in floor_rows
            if r["n"] == n and r["runtime"] in {f"{k} ({source})" for k in OURS_RUNTIMES}
        ]
        if not cells:
            return None, ""
        top = max(cells, key=lambda r: r[key])
        return top[key], f"{top[key]:.2f} × (worst: {top['runtime']})"

    value, shown = worst(4096, "ids", "over_floor")
    add("8 × 4,096: every runtime ≤ 4 × the floor from ids", value, 4.0, shown)
    value, shown = worst(4096, "tokens", "over_interpreter")
    add("8 × 4,096: every runtime ≤ 1.0 × the interpreter from tokens", value, 1.0, shown)
    value, shown = worst(1_000_000, "tokens", "over_interpreter")
    add("1 × 10⁶: every runtime ≤ 1.2 × the interpreter", value, 1.2, shown)
    peaks = [p for p in runtime.get("peak", []) if p["runtime"] in OURS_RUNTIMES]
    top = max(peaks, key=lambda p: p["bytes_per_token"]) if peaks else None
    add(
        "peak memory ≤ 60 bytes per token (n = 10⁶)",
        top and top["bytes_per_token"],
        60.0,
        top and f"{top['bytes_per_token']:.0f} (worst: {top['runtime']})",
    )
    start_rows = data.get("startup", {}).get("rows", [])
    for label in ('crasp run TMP "( )"', "crasp compile examples/crasp/dyck1.cr -o TMP"):
        r = _pick(start_rows, "command", label)
        add(
            f"`{label}` ≤ 2 × `import numpy` (whole-process CPU)",
            r and r["over_import_numpy"],
            2.0,
            r and f"{r['over_import_numpy']:.2f} ×",
        )
    return out


# ---------------------------------------------------------------- tables


def _mark(met: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "not measured"}[met]


def runtime_markdown(runtime: dict) -> str:
    """One row per runtime: CPU ms, × floor and × interpreter at each size, and the peak
    bytes per token at 10⁶ (from tokens; the floor from ids)."""
    rows = runtime["rows"]
    sizes = sorted({(r["batch"], r["n"]) for r in rows}, key=lambda s: s[1])
    peak = {p["runtime"]: p["bytes_per_token"] for p in runtime.get("peak", [])}
    header = "| runtime | " + " | ".join(
        f"{b} × {n:,}: CPU ms | × floor | × interpreter" for b, n in sizes
    )
    lines = [
        header + " | peak bytes/token (10⁶) |",
        "|---|" + "---:|---:|---:|" * len(sizes) + "---:|",
    ]
    for case in dict.fromkeys(r["runtime"] for r in rows):
        cells = []
        for b, n in sizes:
            r = next(r for r in rows if (r["batch"], r["n"], r["runtime"]) == (b, n, case))
            cells.append(f"{r['cpu_ms']:.3g} | {r['over_floor']:.1f} | {r['over_interpreter']:.2f}")
        name = case.split(" (")[0]
        bytes_ = peak.get(name) if case.endswith("(tokens)") or name == "floor" else None
        shown = f"{bytes_:.0f}" if bytes_ is not None else ""
        lines.append(f"| {case} | " + " | ".join(cells) + f" | {shown} |")
    return "\n".join(lines)


def pcoc_markdown(pcoc: dict) -> str:
    lines = [
        "| n | width | design point | stored parameters | nonzero | layers | compile CPU s "
        "| peak RSS MiB (before / after compile / end) | forward CPU s (8 inputs) | interpreter CPU ms "
        "| × interpreter | float64 error: measured / bound |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in pcoc["rows"]:
        lines.append(
            f"| {r['n']:,} | {r['width']:,} | {r['design_point']:,} | {r['parameters']:,} "
            f"| {r['nonzero']:,} | {r['layers']} | {r['compile_cpu_s']:.2f} "
            f"| {r['peak_rss_mib_start']:,.0f} / {r['peak_rss_mib_compile']:,.0f} "
            f"/ {r['peak_rss_mib_end']:,.0f} "
            f"| {r['forward_cpu_s_8_inputs']:.3g} | {r['interpreter_cpu_s_8_inputs'] * 1e3:.2f} "
            f"| {r['over_interpreter']:,.0f} "
            f"| {r['float64_error_measured']:.1e} / {r['float64_error_bound']:.1e} |"
        )
    grown = pcoc["exponents"]
    steps = list(dict.fromkeys(k for g in grown.values() for k in g["per_doubling"]))
    ns = [r["n"] for r in pcoc["rows"]]
    lines += [
        "",
        "Growth exponents e of y ∝ n^e: least-squares fits and per doubling:",
        "",
        f"| quantity | fit {ns[0]} … {ns[-1]:,} | fit 64 … {ns[-1]:,} | "
        + " | ".join(steps)
        + " |",
        "|---|---:|---:|" + "---:|" * len(steps),
    ]
    for key, g in grown.items():
        cells = " | ".join(_exponent(g["per_doubling"].get(step)) for step in steps)
        lines.append(f"| {key} | {_exponent(g['all'])} | {_exponent(g['from_64'])} | {cells} |")
    return "\n".join(lines)


def _exponent(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def startup_markdown(start: dict) -> str:
    lines = [
        "| command | CPU s (median) | min – max | × `import numpy` |",
        "|---|---:|---:|---:|",
    ]
    for r in start["rows"]:
        lines.append(
            f"| `{r['command']}` | {r['cpu_s_median']:.3f} | {r['cpu_s_min']:.3f} – "
            f"{r['cpu_s_max']:.3f} | {r['over_import_numpy']:.2f} |"
        )
    return "\n".join(lines)


def markdown(data: dict) -> str:
    lines = [provenance_line(data), ""]
    loads = data["machine"].get("load_average_start"), data.get("load_average_end")
    if all(loads):
        lines += [
            f"Load average (1, 5, 15 min) at the start {loads[0]}, at the end {loads[1]} "
            f"({data['machine']['cores']} cores).",
            "",
        ]
    lines += ["### Depth", ""]
    lines += [
        "| program | layers | dependency bound | count depth | hidden units | width | compile ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in data["depth"]:
        lines.append(
            f"| {r['program']} | {r['layers']} | {r['bound']} | {r['count_depth']} "
            f"| {r['hidden_units']} | {r['width']} | {r['compile_cpu_ms']:.1f} |"
        )
    if "runtime" in data:
        lines += [
            "",
            "### Runtime: Dyck-1 against the floor and the interpreter",
            "",
            f"CPU time, median of {data['runtime']['repeats']} interleaved rounds; torch one "
            "thread; peak bytes per token from tokens (the floor from ids), a fresh process "
            "each.",
            "",
            runtime_markdown(data["runtime"]),
        ]
    pcoc = data["pcoc"]
    lines += ["", "### PCOC sends: permute.pcoc", "", pcoc_markdown(pcoc)]
    if "startup" in data:
        lines += [
            "",
            "### Start-up: whole-process CPU",
            "",
            f"Median of {data['startup']['rounds']} interleaved rounds.",
            "",
            startup_markdown(data["startup"]),
        ]
    lines += ["", "### tracr", ""]
    if data.get("tracr"):
        from tracr_side import markdown_rows

        lines += [
            "Like with like: tracr's forward jitted (compiled once for the batch's shape, "
            "not counted) and the same batch through every system, CPU time, one thread "
            "on every side.",
            "",
            markdown_rows(data["tracr"]),
        ]
    else:
        lines.append(
            "not importable in this environment (not on PyPI): run "
            "`benchmarks/tracr_side.py` where it is (section (g): tracr's forward jitted, "
            "the same batch on every side)"
        )
    if "targets" in data:
        lines += ["", "### The targets of issue 26", "", "| target | measured | |", "|---|---|---|"]
        for t in data["targets"]:
            lines.append(f"| {t['target']} | {t['shown']} | {_mark(t['met'])} |")
    return "\n".join(lines)


def command_line(argv: list[str]) -> str:
    """``python ARGV`` with paths inside the checkout written relative to it."""

    def relative(arg: str) -> str:
        path = Path(arg)
        if path.is_absolute() and path.resolve().is_relative_to(ROOT):
            return str(path.resolve().relative_to(ROOT))
        return arg

    return "python " + " ".join(relative(a) for a in argv)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--markdown", type=Path, help="print the tables of a results file")
    parser.add_argument("--ns", default=NS, help="PCOC sizes (comma-separated)")
    parser.add_argument(
        "--repeats", type=int, default=21, help="interleaved rounds of the runtime section"
    )
    parser.add_argument(
        "--startup-rounds", type=int, default=15, help="interleaved rounds of the start-up"
    )
    parser.add_argument("--pcoc-case", type=int, help=argparse.SUPPRESS)  # pcoc_rows' child
    args = parser.parse_args()
    if args.pcoc_case is not None:
        print(json.dumps(pcoc_case(args.pcoc_case)))
        return
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text())))
        return
    started = time.perf_counter()
    data: dict = {
        "benchmark": "standing",
        "command": command_line(sys.argv),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "revision": revision(),
        "settings": {"ns": args.ns, "repeats": args.repeats, "startup_rounds": args.startup_rounds},
        "loads": {},
    }
    sections = {
        "depth": depth_rows,
        "runtime": lambda: runtime_section(args.repeats),
        "pcoc": lambda: pcoc_rows([int(n) for n in args.ns.split(",")]),
        "startup": lambda: startup(args.startup_rounds),
    }
    for name, section in sections.items():
        data["loads"][name] = load_average()
        begun = time.perf_counter()
        data[name] = section()
        print(f"{name}: {time.perf_counter() - begun:.0f} s", file=sys.stderr)
    data["tracr_importable"] = importlib.util.find_spec("tracr") is not None
    if data["tracr_importable"]:
        from tracr_side import side_by_side

        data["loads"]["tracr"] = load_average()
        data["tracr"] = side_by_side([8, 16, 32], budget=60.0)
    data["targets"] = targets(data)
    data["load_average_end"] = load_average()
    data["total_seconds"] = round(time.perf_counter() - started, 1)
    text = json.dumps(data, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(markdown(data))


if __name__ == "__main__":
    main()
