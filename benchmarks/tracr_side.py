"""The compiler side by side with DeepMind's tracr on the programs both express.

Dyck-1 and shuffle-Dyck-2, written for tracr as its library writes them
(``lib.make_shuffle_dyck``: non-causal; every position holds the decision for the whole
input, read here at the last position) and for this compiler as C-RASP
(``examples/crasp/dyck1.cr``; :func:`tests.support.shuffle_dyck.per_pair` for k = 2,
causal: the decision for the prefix, read at the last position). For each ``max_seq_len``
N tracr compiles within ``--budget`` CPU seconds (the largest such N is tracr's largest
compilable one here): compile CPU time, residual width, layers, parameters, and how many of
the test inputs of length N each model decides wrongly (against this compiler's
interpreter; tracr's own RASP evaluator is checked against it too, so a tracr error is
its model's, not its program's). This compiler's model does not depend on N (its
guarantee covers every length); it is compiled once.

Speed is compared like with like: the same batch (all the test inputs of length N at
once; every one has length N, so tracr's ``(inputs, N + 1)`` array, BOS first, needs no
padding) through tracr's forward **jitted** (``jax.jit`` of its haiku ``apply``, lowered
and compiled once for that shape; the compile and the first call are timed apart and
reported, not counted) and through this compiler's numpy executor and torch module
(float32, tracr's float type, and float64, this compiler's default), each from token
strings to the decision at the last position (tokenisation included: tracr's
``input_encoder`` and ``output_encoder`` around its forward; also timed without them,
"forward only", from encoded ids to output ids). Times are process CPU seconds, median
of ``--repeats`` interleaved samples (:func:`interleaved`), with one thread on every side
(``OMP``/``MKL``/``OPENBLAS_NUM_THREADS=1``, ``torch.set_num_threads(1)``, and
``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1`` set
before jax is imported; CPU time counts every thread of the process anyway). With
``--one-at-a-time``, also the previous comparison, kept apart and labelled as such:
tracr's ``apply`` (unjitted, one input per call, as tracr's README runs it) against the
numpy executor one input per call.

Test inputs of length N: 40 uniform random strings, 40 balanced strings (random walks
that never go below zero and end at zero, pairs shuffled for k = 2) and 40 balanced
strings with one symbol changed. tracr is not on PyPI: this script runs where it is
importable (e.g. a virtual environment made with ``--system-site-packages`` beside this
package's environment, ``pip install jax dm-haiku chex einops networkx`` and
``pip install --no-deps -e`` of a tracr checkout, and ``PYTHONPATH`` pointing at this
repository); it exits with a message where it is not.

Usage::

    python benchmarks/tracr_side.py --ns 8,16,32 --one-at-a-time \
        --out docs/results/tracr_side.json
    python benchmarks/tracr_side.py --markdown docs/results/tracr_side.json
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
if "intra_op_parallelism_threads" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + XLA_ONE_THREAD).strip()

import argparse  # noqa: E402
import functools  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402

from _common import (  # noqa: E402
    EXAMPLES_DIR,
    ROOT,
    load_average,
    machine,
    provenance_line,
    revision,
)

sys.path.insert(0, str(ROOT))  # tests.support: the shuffle-Dyck programs

import crasp_compiler  # noqa: E402
from crasp_compiler.runtime.numpy_exec import run_tokens  # noqa: E402
from tests.support.shuffle_dyck import per_pair  # noqa: E402

# tracr's symbols -> this compiler's, per program
PROGRAMS = {
    "Dyck-1": (["()"], {"(": "(", ")": ")"}),
    "shuffle-Dyck-2": (["()", "{}"], {"(": "(0", ")": ")0", "{": "(1", "}": ")1"}),
}
SAMPLES = 40


def ours(name: str):
    if name == "Dyck-1":
        return crasp_compiler.load(EXAMPLES_DIR / "dyck1.cr")
    return crasp_compiler.parse_program(per_pair(2))


def inputs(pairs: list[str], n: int, seed: int) -> list[list[str]]:
    """Uniform strings, balanced strings and balanced strings with one change (module
    docstring), over tracr's symbols."""
    rng = random.Random(seed)
    symbols = [c for pair in pairs for c in pair]
    out = [[rng.choice(symbols) for _ in range(n)] for _ in range(SAMPLES)]
    balanced = [_balanced(pairs, n, rng) for _ in range(SAMPLES)]
    out += balanced
    for word in balanced:
        changed = list(word)
        k = rng.randrange(n)
        changed[k] = rng.choice([s for s in symbols if s != word[k]])
        out.append(changed)
    return out


def _balanced(pairs: list[str], n: int, rng: random.Random) -> list[str]:
    """A random nested word of length n over ``pairs`` (each bracket closed by its own
    pair), balanced for even n; for odd n a balanced word of n − 1 and one more symbol."""
    word: list[str] = []
    stack: list[int] = []
    length = n - n % 2
    for t in range(length):
        left = length - t
        if stack and (len(stack) == left or rng.random() < 0.5):
            word.append(pairs[stack.pop()][1])
        else:
            stack.append(rng.randrange(len(pairs)))
            word.append(pairs[stack[-1]][0])
    if n % 2:
        word.append(rng.choice([c for pair in pairs for c in pair]))
    return word


def interleaved(
    cases: dict[str, Callable[[], object]],
    repeats: int,
    min_sample_s: float = 0.02,
    clock: Callable[[], float] = time.process_time,
) -> dict[str, float]:
    """Median CPU seconds per call of each case, from interleaved samples.

    Each case is called once first (a warm-up, not counted); then ``repeats`` rounds, each
    taking one sample of every case, the order rotated by one per round, so that a busy
    spell of the machine falls on all cases alike. A sample is ``k`` calls in a row, ``k``
    chosen from the warm-up so that a sample lasts about ``min_sample_s`` (the clock's
    resolution and a call's fixed costs amortised); its time divided by ``k`` is one
    observation."""
    names = list(cases)
    inner = {}
    for name in names:
        started = clock()
        cases[name]()
        once = clock() - started
        inner[name] = max(1, math.ceil(min_sample_s / max(once, 1e-6)))
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            fn, k = cases[name], inner[name]
            started = clock()
            for _ in range(k):
                fn()
            samples[name].append((clock() - started) / k)
    return {name: statistics.median(values) for name, values in samples.items()}


def ratios(seconds: dict[str, float], reference: str) -> dict[str, float]:
    """``reference``'s time over each other case's (how many times faster each is)."""
    return {
        name: round(seconds[reference] / value, 1)
        for name, value in seconds.items()
        if name != reference and not name.startswith("tracr")
    }


def span(values: list[float]) -> str:
    """``lo–hi`` of rounded values (one number where they round alike)."""
    lo, hi = f"{min(values):,.0f}", f"{max(values):,.0f}"
    return lo if lo == hi else f"{lo}–{hi}"


OURS = ("numpy float32", "numpy float64", "torch float32", "torch float64")


def side_by_side(
    ns: list[int], budget: float, repeats: int = 15, one_at_a_time: bool = False
) -> list[dict]:
    import numpy as np
    import torch
    from tracr.compiler import compiling, lib
    from tracr.rasp import rasp

    from crasp_compiler.runtime.torch_module import TorchTransformer

    torch.set_num_threads(1)  # the benchmark's choice: one thread on every side
    rows = []
    crasp_compiler.compile(ours("Dyck-1"))  # parser and grammar loaded before any timing
    for name, (pairs, to_ours) in PROGRAMS.items():
        program = ours(name)
        start = time.process_time()
        model = crasp_compiler.compile(program)
        our_compile = time.process_time() - start
        our_params = model.parameter_count()
        modules = {
            dtype: TorchTransformer(model).to(dtype=getattr(torch, dtype))
            for dtype in ("float32", "float64")
        }
        traced = lib.make_shuffle_dyck(pairs=pairs)
        vocab = {c for pair in pairs for c in pair}
        for n in ns:
            start = time.process_time()
            tracr_model = compiling.compile_rasp_to_model(
                traced, vocab=vocab, max_seq_len=n, compiler_bos="BOS", compiler_pad="PAD"
            )
            tracr_compile = time.process_time() - start
            words = inputs(pairs, n, seed=n)
            truth = [bool(crasp_compiler.accepts(program, [to_ours[c] for c in w])) for w in words]
            evaluated = [bool(rasp.evaluate(traced, w)[-1]) for w in words]
            mapped = [[to_ours[c] for c in w] for w in words]

            tracr_batch, tracr_forward, jit_compile, first_call = _tracr_jitted(tracr_model, words)
            cases: dict[str, Callable[[], object]] = {
                "tracr jit": tracr_batch,
                "tracr jit forward only": tracr_forward,
            }
            for dtype in ("float32", "float64"):
                np_dtype = getattr(np, dtype)
                cases[f"numpy {dtype}"] = functools.partial(_numpy_batch, model, mapped, np_dtype)
                cases[f"torch {dtype}"] = functools.partial(
                    _torch_batch, modules[dtype], model.accept, mapped
                )
            decided = {case: cases[case]() for case in ("tracr jit", *OURS)}
            seconds = interleaved(cases, repeats)
            params_count = sum(
                int(leaf.size) for layer in tracr_model.params.values() for leaf in layer.values()
            )
            tokens = len(words) * n

            def wrong(decisions, truth=truth):
                return sum(bool(d) != t for d, t in zip(decisions, truth, strict=True))

            row = {
                "program": name,
                "max_seq_len": n,
                "inputs": len(words),
                "batch_shape": [len(words), n + 1],
                "tracr": {
                    "compile_cpu_s": round(tracr_compile, 3),
                    "jit_compile_cpu_s": round(jit_compile, 3),
                    "first_call_cpu_s": round(first_call, 4),
                    "dtype": str(tracr_model.params["token_embed"]["embeddings"].dtype),
                    "width": int(tracr_model.params["token_embed"]["embeddings"].shape[1]),
                    "layers": sum(key.endswith("/mlp/linear_1") for key in tracr_model.params),
                    "parameters": params_count,
                    "wrong": wrong(decided["tracr jit"]),
                    "evaluator_wrong": wrong(evaluated),
                },
                "ours": {
                    "compile_cpu_s": round(our_compile, 4),
                    "width": model.width,
                    "layers": len(model.layers),
                    "parameters": our_params,
                    "wrong": {case: wrong(decided[case]) for case in OURS},
                },
                "batch_cpu_ms": {case: round(s * 1e3, 4) for case, s in seconds.items()},
                "tokens_per_cpu_s": {case: round(tokens / s) for case, s in seconds.items()},
                "tracr_jit_over": ratios(seconds, "tracr jit"),
                "tracr_forward_only_over": ratios(seconds, "tracr jit forward only"),
            }
            if one_at_a_time:
                start = time.process_time()
                applied = [bool(tracr_model.apply(["BOS", *w]).decoded[-1]) for w in words]
                tracr_seconds = time.process_time() - start
                start = time.process_time()
                ours_one = [run_tokens(model, [w]).final(model.accept)[0] for w in mapped]
                ours_seconds = time.process_time() - start
                row["one_at_a_time"] = {
                    "tracr_apply_unjitted_tokens_per_cpu_s": round(tokens / tracr_seconds),
                    "tracr_apply_wrong": wrong(applied),
                    "numpy_float64_tokens_per_cpu_s": round(tokens / ours_seconds),
                    "numpy_float64_wrong": wrong(ours_one),
                }
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
            if tracr_compile > budget:
                break  # a larger N would compile longer still
    return rows


def _tracr_jitted(tracr_model, words: list[list[str]]):
    """tracr's forward jitted for this batch's shape: ``(batch, forward_only,
    jit_compile_cpu_s, first_call_cpu_s)``. Every input has length N, so the
    ``(inputs, N + 1)`` id array (BOS first) needs no padding. ``batch`` runs token
    strings to decisions (tracr's encoders around the forward), ``forward_only`` encoded
    ids to output ids; the jit compile and the first call are timed apart."""
    import jax
    import numpy as np

    encode, decode = tracr_model.input_encoder.encode, tracr_model.output_encoder.decode
    params = tracr_model.params
    ids = jax.numpy.asarray(np.array([encode(["BOS", *w]) for w in words], dtype=np.int32))
    start = time.process_time()
    forward = (
        jax.jit(lambda p, t: tracr_model.forward(p, t).unembedded_output)
        .lower(params, ids)
        .compile()
    )
    jit_compile = time.process_time() - start
    start = time.process_time()
    forward(params, ids).block_until_ready()
    first_call = time.process_time() - start

    def batch() -> list[bool]:
        tokens = np.array([encode(["BOS", *w]) for w in words], dtype=np.int32)
        last = np.asarray(forward(params, jax.numpy.asarray(tokens))[:, -1])
        return [bool(d) for d in decode(last.tolist())]

    def forward_only() -> object:
        return forward(params, ids).block_until_ready()

    return batch, forward_only, jit_compile, first_call


def _numpy_batch(model, words, dtype) -> list[bool]:
    return [bool(d) for d in run_tokens(model, words, dtype=dtype).final(model.accept)]


def _torch_batch(module, accept: str, words) -> list[bool]:
    import torch

    with torch.no_grad():
        decided = module.run(words)[accept]
    lengths = [len(w) for w in words]
    return [bool(decided[i, t]) for i, t in enumerate(lengths)]


def markdown_rows(rows: list[dict]) -> str:
    """The size and correctness table, the like-with-like speed table (CPU ms per batch,
    and tracr's jitted time over each of ours), and, where measured, the one-at-a-time
    table."""
    lines = [
        "| program | N | system | compile CPU s | width | layers | parameters | wrong / inputs |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        t, o = r["tracr"], r["ours"]
        wrong = f"{t['wrong']} / {r['inputs']}"
        if t["evaluator_wrong"]:
            wrong += f" (its RASP evaluator: {t['evaluator_wrong']})"
        lines.append(
            f"| {r['program']} | {r['max_seq_len']} | tracr | {t['compile_cpu_s']:.2f} "
            f"(+ jit {t['jit_compile_cpu_s']:.2f}) | {t['width']} | {t['layers']} "
            f"| {t['parameters']:,} | {wrong} |"
        )
        ours_wrong = max(o["wrong"].values())
        lines.append(
            f"| {r['program']} | {r['max_seq_len']} | crasp_compiler | {o['compile_cpu_s']:.4f} "
            f"| {o['width']} | {o['layers']} | {o['parameters']:,} "
            f"| {ours_wrong} / {r['inputs']} |"
        )
    lines += [
        "",
        "CPU ms per batch (all inputs of the row at once, from token strings to decisions; "
        "tracr's forward jitted, compiled once, warm-up excluded) and tracr's time over ours:",
        "",
        "| program | N | batch | tracr jit | tracr jit, forward only | numpy f32 | numpy f64 "
        "| torch f32 | torch f64 | tracr jit ÷ ours | tracr forward only ÷ ours |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ms = r["batch_cpu_ms"]
        cells = " | ".join(
            f"{ms[case]:.2f}" for case in ("tracr jit", "tracr jit forward only", *OURS)
        )
        b, t = r["batch_shape"]
        lines.append(
            f"| {r['program']} | {r['max_seq_len']} | {b} × {t} | {cells} "
            f"| {span(list(r['tracr_jit_over'].values()))}× "
            f"| {span(list(r['tracr_forward_only_over'].values()))}× |"
        )
    if all("one_at_a_time" in r for r in rows):
        lines += [
            "",
            "One input at a time (not like with like: tracr's `apply`, unjitted, as tracr's "
            "README runs it, against the numpy executor, float64), tokens per CPU second:",
            "",
            "| program | N | tracr `apply` (unjitted) | numpy f64 | ratio |",
            "|---|---:|---:|---:|---:|",
        ]
        for r in rows:
            one = r["one_at_a_time"]
            a, b = (
                one["tracr_apply_unjitted_tokens_per_cpu_s"],
                one["numpy_float64_tokens_per_cpu_s"],
            )
            lines.append(f"| {r['program']} | {r['max_seq_len']} | {a:,} | {b:,} | {b / a:,.0f}× |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--markdown", type=Path, help="print the table of a results file")
    parser.add_argument("--ns", default="8,16,32,64", help="tracr max_seq_len values")
    parser.add_argument(
        "--budget", type=float, default=60.0, help="stop after a tracr compile this long (s)"
    )
    parser.add_argument(
        "--repeats", type=int, default=15, help="interleaved samples per case (median)"
    )
    parser.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="also time tracr's unjitted apply and the numpy executor one input per call",
    )
    args = parser.parse_args()
    if args.markdown:
        data = json.loads(args.markdown.read_text())
        print(provenance_line(data) + "\n\n" + markdown_rows(data["rows"]))
        return
    if importlib.util.find_spec("tracr") is None:
        print("tracr is not importable here (it is not on PyPI; see the module docstring)")
        return
    started = time.perf_counter()
    data = {
        "benchmark": "tracr_side",
        "command": "python " + " ".join(sys.argv),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "revision": revision(),
        "tracr_revision": _tracr_revision(),
        "versions": _versions(),
        "threads": {
            var: os.environ.get(var)
            for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "XLA_FLAGS")
        }
        | {"torch": 1},
        "rows": side_by_side(
            [int(n) for n in args.ns.split(",")],
            args.budget,
            repeats=args.repeats,
            one_at_a_time=args.one_at_a_time,
        ),
    }
    data["machine"]["load_average_end"] = load_average()
    data["total_seconds"] = round(time.perf_counter() - started, 1)
    if args.out:
        args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(provenance_line(data) + "\n\n" + markdown_rows(data["rows"]))


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for package in ("jax", "jaxlib", "dm-haiku", "torch"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "absent"
    return out


def _tracr_revision() -> str | None:
    """The tracr checkout's commit, where the package sits in one."""
    import subprocess

    import tracr

    where = Path(tracr.__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True
        )
    except OSError:
        return None
    return out.stdout.strip() or None


if __name__ == "__main__":
    main()
