"""The exactness horizon of compiled models under floating point.

For every example program, every compile mode (``--modes``; by default heaviside and
layernorm, the two modes claimed exact at every length in real arithmetic) and every
dtype, the compiled model is run on K sampled inputs of each length L = 16, 32, 64, ...
up to ``--max-len`` and its outputs at the last position are compared with the reference
interpreter's. The horizon is the largest L at which every output of every sample agrees.
The search for a (mode, dtype) pair stops at the first disagreement, at ``--max-len``, or
when the next length is not expected to finish inside the per-run time limit.

Samples of length L: half come from the example's generator of positive strings
(``tests/support/recognizers.py``); where the generator cannot make length L (e.g. ``a^n b^n c^n``
when 3 does not divide L) its nearest string is padded to L with random symbols at random
places, so these are near-misses instead of positives. The other half are uniformly
random strings over the program's alphabet. Up to ``--all-positions-up-to``, every
position is compared as well (recorded separately; the horizon uses the last position).

Usage::

    python benchmarks/horizon.py --out docs/results/horizon.json
    python benchmarks/horizon.py --examples majority.crasp,dyck1.cr --dtypes float32
    python benchmarks/horizon.py --modes relu --relu-max-len 64 --max-len 1024
    python benchmarks/horizon.py --markdown docs/results/horizon.json

``OPENBLAS_NUM_THREADS`` (and the OMP/MKL equivalents) default to 1 here: on a small
shared machine threaded BLAS makes the executor's tall, thin matrix products several
times slower. Set them explicitly to override.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
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

sys.path.insert(0, str(ROOT))  # for tests.support.recognizers

from crasp_compiler import interpret_batch, load_program  # noqa: E402
from crasp_compiler.languages.crasp.compile import compile_program  # noqa: E402
from crasp_compiler.runtime import run_tokens  # noqa: E402
from tests.support.recognizers import REGISTRY  # noqa: E402

DTYPES = {"float64": np.float64, "float32": np.float32}
MODES = ("heaviside", "layernorm", "relu")
# Failing inputs longer than this are not stored; (seed, example, length, index) redraws them.
MAX_STORED_INPUT = 64


def lengths_up_to(min_len: int, max_len: int) -> list[int]:
    out, length = [], min_len
    while length <= max_len:
        out.append(length)
        length *= 2
    return out


def pad_to(rng: random.Random, word: list[str], length: int, alphabet: tuple[str, ...]):
    """``word`` cut or padded to ``length`` by inserting random symbols at random places."""
    word = list(word[:length])
    while len(word) < length:
        word.insert(rng.randint(0, len(word)), rng.choice(alphabet))
    return word


def sample_inputs(name: str, alphabet: tuple[str, ...], length: int, count: int, seed: int):
    """``count`` inputs of exactly ``length``: the first half from the generator (padded
    where it cannot make that length), the rest uniformly random. Also returns how many
    generator strings had the right length already."""
    rng = random.Random(f"{seed}:{name}:{length}")
    nprng = np.random.default_rng(rng.getrandbits(64))
    generate = REGISTRY[name].generate
    symbols = np.array(alphabet, dtype=object)
    inputs, exact = [], 0
    for k in range(count):
        if k < count // 2:
            word = generate(rng, length)
            exact += len(word) == length
            word = pad_to(rng, word, length, alphabet)
        else:
            word = list(symbols[nprng.integers(0, len(alphabet), size=length)])
        inputs.append(word)
    return inputs, exact


def readout_error(raw: np.ndarray, expected: np.ndarray, is_bool: bool, t: int) -> float:
    """Distance of the model's raw output from the exact value it encodes: for a Boolean
    output, from the nearest integer (a compiled readout is an exact integer, 0/1 or,
    where it absorbs a final and/or, decided ``> 1/2``; the decision is checked apart)."""
    if is_bool:
        raw = raw.astype(np.float64)
        return float(np.max(np.abs(raw - np.rint(raw))))
    return float(np.max(np.abs(raw.astype(np.float64) * (t + 1) - expected.astype(np.float64))))


def check_length(program, model, name, length, args, dtype):
    """Run the K samples of one length; return a record of what was found."""
    start = time.perf_counter()
    inputs, exact = sample_inputs(name, program.alphabet, length, args.samples, args.seed)
    batch_size = max(1, min(args.samples, args.batch_positions // (length + 1)))
    all_positions = length <= args.all_positions_up_to
    bool_outputs = {out.name: out.rule == "bool" for out in model.outputs}
    bad = np.zeros(args.samples, dtype=bool)
    bad_positions = np.zeros(args.samples, dtype=bool)
    bad_by_output = dict.fromkeys(program.outputs, 0)
    accepted = 0
    error = 0.0
    for lo in range(0, args.samples, batch_size):
        chunk = inputs[lo : lo + batch_size]
        want = interpret_batch(program, chunk)
        got = run_tokens(model, chunk, dtype=dtype, on_overlength="ignore")
        if program.accept is not None:
            accepted += int(want[program.accept][:, -1].sum())
        for out in program.outputs:
            w = want[out][:, -1].astype(np.int64)
            g = got.final(out).astype(np.int64)
            differ = w != g
            bad[lo : lo + len(chunk)] |= differ
            bad_by_output[out] += int(differ.sum())
            raw = got.outputs[out][:, -1]
            error = max(error, readout_error(raw, w, bool_outputs[out], length))
            if all_positions:
                every = got.values[out].astype(np.int64) != want[out].astype(np.int64)
                bad_positions[lo : lo + len(chunk)] |= every.any(axis=1)
    record = {
        "length": length,
        "samples": args.samples,
        "generator_exact_length": exact,
        "accepted": accepted if program.accept is not None else None,
        "disagreements": int(bad.sum()),
        "disagreements_by_output": bad_by_output,
        "all_positions_checked": all_positions,
        "position_disagreements": int(bad_positions.sum()) if all_positions else None,
        "max_readout_error": error,
        "seconds": round(time.perf_counter() - start, 3),
    }
    failing = np.flatnonzero(bad | bad_positions)
    if len(failing):
        record["failing_samples"] = [
            {
                "index": int(k),
                "kind": "generator" if k < args.samples // 2 else "uniform",
                "input": list(inputs[k]) if length <= MAX_STORED_INPUT else None,
            }
            for k in failing[:5]
        ]
    return record


def horizon(name: str, mode: str, dtype_name: str, args) -> dict:
    program = load_program(EXAMPLES_DIR / name)
    max_len = args.relu_max_len if mode == "relu" else None
    model = compile_program(program, mode=mode, max_len=max_len)
    local = program.uses_local
    limit = args.local_time_limit if local else args.time_limit
    growth = 4.0 if local else 2.0  # local heads are O(n^2) in the executor, others O(n)
    result = {
        "example": name,
        "dtype": dtype_name,
        "mode": mode,
        "relu_max_len": max_len,
        "class": program.relation_class,
        "uses_local": local,
        "time_limit_s": limit,
        "exact_through": None,
        "first_failure": None,
        "stopped": None,
        "lengths": [],
    }
    start = time.perf_counter()
    previous = None
    for length in lengths_up_to(args.min_len, args.max_len):
        elapsed = time.perf_counter() - start
        if previous is not None and elapsed + growth * previous > limit:
            result["stopped"] = "time limit"
            break
        record = check_length(program, model, name, length, args, DTYPES[dtype_name])
        result["lengths"].append(record)
        previous = record["seconds"]
        bad = record["disagreements"] or record["position_disagreements"]
        print(
            f"  {name:22s} {mode:9s} {dtype_name:8s} L={length:<7d} "
            f"disagree={record['disagreements']}/{args.samples}"
            + (
                f" (any position: {record['position_disagreements']})"
                if record["all_positions_checked"]
                else ""
            )
            + f" err={record['max_readout_error']:.2e} {record['seconds']:.1f}s",
            flush=True,
        )
        if bad:
            result["first_failure"] = record
            result["stopped"] = "disagreement"
            break
        result["exact_through"] = length
    else:
        result["stopped"] = "max length"
    result["seconds"] = round(time.perf_counter() - start, 2)
    return result


def summary(entry: dict) -> str:
    through = entry["exact_through"]
    head = f"exact through {through}" if through else "no tested length exact"
    failure = entry["first_failure"]
    if failure is not None:
        count = failure["disagreements"]
        text = f"{head}; first disagreement at {failure['length']}: {count}/{failure['samples']}"
        if not count:
            text += f" at the last position, {failure['position_disagreements']} at some position"
        return text
    if entry["stopped"] == "time limit":
        return f"{head} (time limit)"
    return f"{head} (max length)"


def entry_mode(data: dict, entry: dict) -> str:
    """The compile mode of one run; files written before ``--modes`` existed record it
    once in the config, or (the oldest) not at all, meaning heaviside."""
    return entry.get("mode") or data["config"].get("mode") or "heaviside"


def markdown(data: dict) -> str:
    """One row per example, one column per (mode, dtype) run."""
    dtypes = data["config"]["dtypes"]
    modes = list(dict.fromkeys(entry_mode(data, e) for e in data["results"]))
    columns = [(mode, dtype) for mode in modes for dtype in dtypes]
    lines = [
        "| example | class | " + " | ".join(f"{m} {d}" for m, d in columns) + " |",
        "|---|---|" + "---|" * len(columns),
    ]
    by_key = {(e["example"], entry_mode(data, e), e["dtype"]): e for e in data["results"]}
    names = list(dict.fromkeys(e["example"] for e in data["results"]))
    for name in names:
        cells, cls = [], ""
        for mode, dtype in columns:
            entry = by_key.get((name, mode, dtype))
            if entry is None:
                cells.append("—")
                continue
            cls = entry["class"]
            cells.append(summary(entry))
        lines.append(f"| {name} | {cls} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def detail_markdown(data: dict) -> str:
    """Per length: seconds, accepted samples, generator strings of exact length, error."""
    lines = [
        "| example | mode | dtype | longest L tested | accepted at L | generator exact at L "
        "| max readout error at L | seconds (all lengths) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for entry in data["results"]:
        if not entry["lengths"]:
            continue
        last = entry["lengths"][-1]
        accepted = "—" if last["accepted"] is None else f"{last['accepted']}/{last['samples']}"
        lines.append(
            f"| {entry['example']} | {entry_mode(data, entry)} | {entry['dtype']} "
            f"| {last['length']} | {accepted} "
            f"| {last['generator_exact_length']}/{last['samples'] // 2} "
            f"| {last['max_readout_error']:.2g} | {entry['seconds']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", help="comma-separated file names (default: all)")
    parser.add_argument("--dtypes", default="float64,float32", help="comma-separated")
    parser.add_argument("--min-len", type=int, default=16, help="first length (then doubled)")
    parser.add_argument("--max-len", type=int, default=1 << 17)
    parser.add_argument(
        "--time-limit", type=float, default=60.0, help="seconds per example per dtype"
    )
    parser.add_argument(
        "--local-time-limit",
        type=float,
        default=None,
        help="seconds per example per dtype for local-relation programs (default: --time-limit)",
    )
    parser.add_argument(
        "--modes",
        default="heaviside,layernorm",
        help="comma-separated compile modes out of " + ", ".join(MODES) + " (relu is exact only "
        "up to --relu-max-len: a check that the harness sees failures past it)",
    )
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # old spelling
    parser.add_argument("--relu-max-len", type=int, default=64, help="max_len for relu mode")
    parser.add_argument("--samples", type=int, default=200, help="K inputs per length")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--batch-positions",
        type=int,
        default=1 << 19,
        help="positions (batch size x (length + 1)) per executor call",
    )
    parser.add_argument(
        "--all-positions-up-to",
        type=int,
        default=1024,
        help="also compare every position for lengths up to this",
    )
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument(
        "--markdown", metavar="JSON", help="print the markdown tables of a saved run and exit"
    )
    args = parser.parse_args(argv)

    if args.markdown:
        data = json.loads(Path(args.markdown).read_text())
        print(provenance_line(data))
        print()
        print(markdown(data))
        print()
        print(detail_markdown(data))
        return

    if args.local_time_limit is None:
        args.local_time_limit = args.time_limit
    names = args.examples.split(",") if args.examples else example_names()
    dtypes = args.dtypes.split(",")
    for dtype in dtypes:
        if dtype not in DTYPES:
            parser.error(f"unknown dtype {dtype!r}")
    modes = [args.mode] if args.mode else args.modes.split(",")
    for mode in modes:
        if mode not in MODES:
            parser.error(f"unknown mode {mode!r} (choose from {', '.join(MODES)})")
    for name in names:
        if name not in REGISTRY:
            parser.error(f"no generator for {name!r} in tests/support/recognizers.py")

    config = {
        key: getattr(args, key)
        for key in (
            "min_len",
            "max_len",
            "time_limit",
            "local_time_limit",
            "samples",
            "seed",
            "batch_positions",
            "all_positions_up_to",
            "relu_max_len",
        )
    }
    config["modes"] = modes
    config["dtypes"] = dtypes
    config["examples"] = names
    data = {
        "benchmark": "horizon",
        "command": " ".join(["python", *sys.argv]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "revision": revision(),
        "config": config,
        "results": [],
    }
    total = time.perf_counter()
    for name in names:
        for mode in modes:
            for dtype in dtypes:
                entry = horizon(name, mode, dtype, args)
                data["results"].append(entry)
                print(
                    f"{name} {mode} {dtype}: {summary(entry)} [{entry['seconds']:.1f}s]",
                    flush=True,
                )
                if args.out:  # keep partial results if interrupted
                    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                    Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    data["total_seconds"] = round(time.perf_counter() - total, 1)
    data["load_average_end"] = load_average()
    if args.out:
        Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    print(f"total {data['total_seconds']}s")
    print()
    print(markdown(data))


if __name__ == "__main__":
    main()
