"""The command line: ``python -m tests.fuzz --families ... --cases ... --seed ... --out ...``
runs cases in a worker and writes the summary; ``--repro FAMILY:SEED:INDEX`` replays one
case in this process."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import tests.fuzz
from tests.fuzz import ROOT
from tests.fuzz.case import FAILING, Limits, cpu_seconds
from tests.fuzz.harness import FAMILIES, Worker, print_summary, run_case, summarize
from tests.support.scripts import load_benchmark


def _package_file() -> str:
    """Where the package the workers import lives, relative to this checkout (ROOT) so
    that no record names a machine's folders; ``outside this checkout`` otherwise."""
    import crasp_compiler

    package = Path(crasp_compiler.__file__).resolve().parent
    return (
        str(package.relative_to(ROOT)) if package.is_relative_to(ROOT) else "outside this checkout"
    )


def _provenance() -> dict:
    """The commit (and whether the tree differs from it) and the machine of the run."""
    common = load_benchmark("_common")
    return {"revision": common.revision(), "machine": common.machine()}


def _relative(argument: str) -> str:
    """A command-line argument with this checkout's folder left out (``--out`` paths)."""
    path = Path(argument)
    if path.is_absolute() and path.resolve().is_relative_to(ROOT):
        return str(path.resolve().relative_to(ROOT))
    return argument if not path.is_absolute() else path.name


def case_counts(text: str, families: list[str]) -> dict[str, int]:
    """``--cases``: ``N`` for every family, or ``FAMILY=N`` items and at most one ``N`` for
    the families not named."""
    default, named = None, {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, number = item.rpartition("=")
        if not number.isdigit():
            raise ValueError(f"{item!r} is not a number of cases")
        if not name:
            default = int(number)
        elif name in families:
            named[name] = int(number)
        else:
            raise ValueError(f"{name!r} is not one of the families run ({', '.join(families)})")
    missing = [f for f in families if f not in named]
    if missing and default is None:
        raise ValueError(f"no number of cases for {', '.join(missing)}")
    return {f: named.get(f, default or 0) for f in families}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.fuzz",
        description=tests.fuzz.__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--families", default=",".join(FAMILIES), help="comma-separated: " + ",".join(FAMILIES)
    )
    parser.add_argument(
        "--cases",
        default="200",
        help="cases per family: N, or FAMILY=N,... with an optional N for the others",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", type=int, default=0, help="first case index")
    parser.add_argument("--out", help="JSON summary path")
    parser.add_argument(
        "--time-limit",
        type=float,
        help="wall-clock seconds for the whole run (split over the families)",
    )
    parser.add_argument(
        "--case-cpu",
        type=float,
        default=8.0,
        help="per-case CPU seconds (the worker's and its children's) before the case is"
        " interrupted (slow for crasp/pcoc, hang otherwise); the kernel kills the worker"
        " at 3x + 10 CPU-s (hang)",
    )
    parser.add_argument(
        "--case-wall",
        type=float,
        help="per-case wall-clock seconds before a case counts as blocked (hang; default"
        " 20x --case-cpu, so a loaded machine does not turn slow cases into hangs)",
    )
    parser.add_argument(
        "--memory-gib", type=float, default=4.0, help="address-space limit of the worker (0: none)"
    )
    parser.add_argument(
        "--repro",
        metavar="FAMILY:SEED:INDEX",
        help="run one case here, print its outcome and tracebacks",
    )
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)

    if args.repro:
        family, seed, index = args.repro.split(":")
        limits = Limits.from_cpu(args.case_cpu * 10, args.case_wall)
        outcome = run_case(family, int(seed), int(index), limits)
        print(json.dumps(outcome, indent=2, default=str, ensure_ascii=False))
        return 1 if outcome["class"] in FAILING else 0

    families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        parser.error(f"unknown families {unknown}; choose from {', '.join(FAMILIES)}")
    try:
        cases = case_counts(args.cases, families)
    except ValueError as err:
        parser.error(f"--cases {args.cases}: {err}")
    limits = Limits.from_cpu(args.case_cpu, args.case_wall)
    worker = Worker(args.memory_gib)
    outcomes: list[dict] = []
    started = time.perf_counter()
    done_per_family = {}
    cpu: Counter[str] = Counter()
    try:
        for position, family in enumerate(families):
            family_start = time.perf_counter()
            budget = None
            if args.time_limit is not None:
                left = args.time_limit - (family_start - started)
                budget = left / (len(families) - position)
            done = 0
            for index in range(args.start, args.start + cases[family]):
                if budget is not None and time.perf_counter() - family_start > budget:
                    break
                outcome = worker.run(family, args.seed, index, limits)
                cpu[family] += outcome.get("cpu", 0.0)
                outcomes.append(outcome)
                done += 1
                if not args.quiet and outcome["class"] in FAILING:
                    first = next(
                        (f for f in outcome["findings"] if f["cls"] == outcome["class"]), {}
                    )
                    print(
                        f"[{family} {index}] {outcome['class']}: {first.get('exc', '')} {first.get('where', '')} {first.get('message', '')[:120]!r}",
                        flush=True,
                    )
            done_per_family[family] = done
    finally:
        worker.stop()
    meta = {
        "seed": args.seed,
        "cases": cases,
        "start": args.start,
        "families": families,
        "cases_run": done_per_family,
        "seconds": time.perf_counter() - started,
        "cpu_seconds": round(cpu_seconds(), 1),  # this process and the workers it joined
        "worker_cpu_seconds": round(sum(cpu.values()), 1),
        "worker_cpu_seconds_per_family": {f: round(c, 1) for f, c in cpu.items()},
        "limits": {
            "cpu_s": limits.cpu,
            "hard_cpu_s": limits.hard_cpu,
            "wall_s": limits.wall,
            "kill_after_s": limits.wall + limits.grace,
        },
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "package": _package_file(),
        **_provenance(),
        "argv": [_relative(a) for a in (sys.argv[1:] if argv is None else argv)],
        "reproduce": "python -m tests.fuzz --repro FAMILY:SEED:INDEX",
    }
    summary = summarize(outcomes, families, meta)
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1, default=str, ensure_ascii=False))
    print_summary(summary)
    return 1 if summary["failing"] else 0


if __name__ == "__main__":
    sys.exit(main())
