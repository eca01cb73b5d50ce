"""Fuzz the float guarantee of compiled C-RASP models at the horizons it proves.

For each seed a random program (tests/support/strategies.py: every construction, local and
periodic relations, factors and constants drawn from one of several ranges, up to 10^6) is
compiled in every mode (relu with ``--relu-max-len``). For each float type whose proven
horizon H is at least 1, adversarial inputs of exactly L = min(H, ``--max-len``) tokens
(tests/support/attacks.py: one symbol throughout, two blocks split near the middle and the
ends, alternations, random runs) are run and two things are checked:

- every residual variable, at every token, lies within the bound the rounding analysis
  derived for it (bits within their errors when 0 and 1, counts within err(t) + rel·X);
- the decided outputs of the numpy executor and the torch module equal the interpreter's.

A failure of either is a counterexample to the analysis (exit status 1, reproducible from
its seed). The summary counts programs, attacked (program, mode, dtype) cases — at the
horizon itself, or capped at ``--max-len`` — the positions checked, and the failures.

Usage::

    nice -n 10 python benchmarks/guarantee_fuzz.py --seeds 300 --out docs/results/guarantee_fuzz.json
    python benchmarks/guarantee_fuzz.py --repro 17        # one seed, with the traceback
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
from _common import ROOT, load_average, machine, provenance_line, revision  # noqa: E402

sys.path.insert(0, str(ROOT))  # for tests.support

from crasp_compiler import CraspError  # noqa: E402
from crasp_compiler.languages.crasp.compile import compile_program  # noqa: E402
from tests.support.attacks import (  # noqa: E402
    adversarial,
    assert_decisions_agree,
    assert_within_bounds,
)
from tests.support.strategies import random_program  # noqa: E402

MODES = ("heaviside", "layernorm", "relu")
DTYPES = {"float32": np.float32, "float64": np.float64}
# (factor range, constant range) per seed, in turn: small, mid, large, huge coefficients
RANGES = [
    ((-3, 3), (-5, 5)),
    ((-100, 100), (-1000, 1000)),
    ((-(10**4), 10**4), (-(10**5), 10**5)),
    ((-(10**6), 10**6), (-(10**6), 10**6)),
]


def fuzz_seed(seed: int, max_len: int, relu_max_len: int, counts: dict) -> list[dict]:
    """Attack one random program in every mode and float type; the failures found."""
    rng = random.Random(seed)
    scale, const = RANGES[seed % len(RANGES)]
    program = random_program(seed, max_definitions=6, scale_range=scale, const_range=const)
    counts["programs"] += 1
    failures = []
    for mode in MODES:
        cap = relu_max_len if mode == "relu" else None
        try:
            model = compile_program(program, mode=mode, max_len=cap)
        except CraspError:
            counts["refused"] += 1
            continue
        for name, dtype in DTYPES.items():
            horizon = model.guarantee.limit(name)
            if horizon is None or horizon < 1:
                continue
            length = min(horizon, max_len)
            words = adversarial(program.alphabet, length, rng, extra=4)
            case = {"seed": seed, "mode": mode, "dtype": name, "length": length}
            try:
                assert_within_bounds(program, mode, cap, words, dtype)
                assert_decisions_agree(program, model, words, dtype)
            except AssertionError as err:
                failures.append({**case, "error": str(err).splitlines()[0][:300]})
            key = f"{mode}/{name}/" + ("at the horizon" if length == horizon else "capped")
            counts["attacked"][key] = counts["attacked"].get(key, 0) + 1
            counts["positions"] += len(words) * length
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=200, help="programs to draw")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--max-len", type=int, default=2000, help="longest input attacked")
    parser.add_argument("--relu-max-len", type=int, default=256, help="relu mode's max-len")
    parser.add_argument("--repro", type=int, help="run one seed, raising its failure")
    parser.add_argument("--out", help="write the summary as JSON here")
    args = parser.parse_args()
    counts: dict = {"programs": 0, "refused": 0, "attacked": {}, "positions": 0}
    if args.repro is not None:
        failures = fuzz_seed(args.repro, args.max_len, args.relu_max_len, counts)
        print(json.dumps({"counts": counts, "failures": failures}, indent=1))
        return 1 if failures else 0
    data = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python benchmarks/guarantee_fuzz.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "revision": revision(),
    }
    start = time.process_time()
    failures: list[dict] = []
    for seed in range(args.start, args.start + args.seeds):
        failures += fuzz_seed(seed, args.max_len, args.relu_max_len, counts)
        if seed % 20 == 0:
            print(f"seed {seed}: {counts['attacked']} failures {len(failures)}", flush=True)
    data.update(
        counts=counts,
        failures=failures,
        cpu_seconds=round(time.process_time() - start, 1),
        load_average_end=load_average(),
    )
    print(provenance_line(data))
    print(
        f"{counts['programs']} programs, {counts['refused']} refused compiles, attacked "
        f"{counts['attacked']}, {counts['positions']:,} positions: {len(failures)} failures"
    )
    if args.out:
        Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
