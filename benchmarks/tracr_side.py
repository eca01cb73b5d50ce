"""The compiler side by side with DeepMind's tracr on the programs both express.

Dyck-1 and shuffle-Dyck-2, written for tracr as its library writes them
(``lib.make_shuffle_dyck``: non-causal; every position holds the decision for the whole
input, read here at the last position) and for this compiler as C-RASP
(``examples/crasp/dyck1.cr``; :func:`tests.support.shuffle_dyck.per_pair` for k = 2,
causal: the decision for the prefix, read at the last position). For each ``max_seq_len``
N tracr compiles within ``--budget`` CPU seconds (the largest such N is tracr's largest
compilable one here): compile CPU time, residual width, layers, parameters, how many of
the test inputs of length N each model decides wrongly (against this compiler's
interpreter; tracr's own RASP evaluator is checked against it too, so a tracr error is
its model's, not its program's), and tokens per second of one forward pass. This
compiler's model does not depend on N (its guarantee covers every length); it is
compiled once, and run by the numpy executor on the same inputs, one at a time as tracr
runs them and as one batch.

Test inputs of length N: 40 uniform random strings, 40 balanced strings (random walks
that never go below zero and end at zero, pairs shuffled for k = 2) and 40 balanced
strings with one symbol changed. tracr is not on PyPI: this script runs where it is
importable (e.g. a virtual environment with ``pip install jax dm-haiku chex einops
networkx`` and ``pip install --no-deps`` of a tracr checkout, plus this package's
dependencies and ``PYTHONPATH`` pointing at this repository); it exits with a message
where it is not.

Usage::

    python benchmarks/tracr_side.py --out docs/results/tracr_side.json
    python benchmarks/tracr_side.py --markdown docs/results/tracr_side.json
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402

from _common import EXAMPLES_DIR, ROOT, machine, provenance_line, revision  # noqa: E402

sys.path.insert(0, str(ROOT))  # tests.support: the shuffle-Dyck programs

import crasp_compiler  # noqa: E402
from crasp_compiler.runtime.numpy_exec import run  # noqa: E402
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


def side_by_side(ns: list[int], budget: float) -> list[dict]:
    from tracr.compiler import compiling, lib
    from tracr.rasp import rasp

    rows = []
    crasp_compiler.compile(ours("Dyck-1"))  # parser and grammar loaded before any timing
    for name, (pairs, to_ours) in PROGRAMS.items():
        program = ours(name)
        start = time.process_time()
        model = crasp_compiler.compile(program)
        our_compile = time.process_time() - start
        our_params = model.parameter_count()
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
            start = time.process_time()
            decided = [bool(tracr_model.apply(["BOS", *w]).decoded[-1]) for w in words]
            tracr_seconds = time.process_time() - start
            evaluated = [bool(rasp.evaluate(traced, w)[-1]) for w in words]
            mapped = [[to_ours[c] for c in w] for w in words]
            start = time.process_time()
            ours_one = [run(model, [w]).final(model.accept)[0] for w in mapped]
            ours_seconds = time.process_time() - start
            start = time.process_time()
            ours_batch = run(model, mapped).final(model.accept)
            batch_seconds = time.process_time() - start
            params = sum(
                int(leaf.size) for layer in tracr_model.params.values() for leaf in layer.values()
            )
            tokens = len(words) * n
            row = {
                "program": name,
                "max_seq_len": n,
                "inputs": len(words),
                "tracr": {
                    "compile_cpu_s": round(tracr_compile, 3),
                    "width": int(tracr_model.params["token_embed"]["embeddings"].shape[1]),
                    "layers": sum(key.endswith("/mlp/linear_1") for key in tracr_model.params),
                    "parameters": params,
                    "wrong": sum(d != t for d, t in zip(decided, truth, strict=True)),
                    "evaluator_wrong": sum(e != t for e, t in zip(evaluated, truth, strict=True)),
                    "tokens_per_s": round(tokens / tracr_seconds),
                },
                "ours": {
                    "compile_cpu_s": round(our_compile, 4),
                    "width": model.width,
                    "layers": len(model.layers),
                    "parameters": our_params,
                    "wrong": sum(bool(d) != t for d, t in zip(ours_one, truth, strict=True)),
                    "batch_wrong": sum(
                        bool(d) != t for d, t in zip(ours_batch, truth, strict=True)
                    ),
                    "tokens_per_s": round(tokens / ours_seconds),
                    "tokens_per_s_batch": round(tokens / batch_seconds),
                },
            }
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
            if tracr_compile > budget:
                break  # a larger N would compile longer still
    return rows


def markdown_rows(rows: list[dict]) -> str:
    lines = [
        "| program | N | system | compile CPU s | width | layers | parameters "
        "| wrong / inputs | tokens/s (one at a time) | tokens/s (batch) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        t, o = r["tracr"], r["ours"]
        wrong = f"{t['wrong']} / {r['inputs']}"
        if t["evaluator_wrong"]:
            wrong += f" (its RASP evaluator: {t['evaluator_wrong']})"
        lines.append(
            f"| {r['program']} | {r['max_seq_len']} | tracr | {t['compile_cpu_s']:.2f} "
            f"| {t['width']} | {t['layers']} | {t['parameters']:,} | {wrong} "
            f"| {t['tokens_per_s']:,} | – |"
        )
        lines.append(
            f"| {r['program']} | {r['max_seq_len']} | crasp_compiler | {o['compile_cpu_s']:.4f} "
            f"| {o['width']} | {o['layers']} | {o['parameters']:,} "
            f"| {o['wrong']} / {r['inputs']} | {o['tokens_per_s']:,} "
            f"| {o['tokens_per_s_batch']:,} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--markdown", type=Path, help="print the table of a results file")
    parser.add_argument("--ns", default="8,16,32,64", help="tracr max_seq_len values")
    parser.add_argument(
        "--budget", type=float, default=60.0, help="stop after a tracr compile this long (s)"
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
        "rows": side_by_side([int(n) for n in args.ns.split(",")], args.budget),
    }
    data["total_seconds"] = round(time.perf_counter() - started, 1)
    if args.out:
        args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(provenance_line(data) + "\n\n" + markdown_rows(data["rows"]))


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
