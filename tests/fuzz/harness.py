"""Running cases: each in a worker child process under CPU, wall-clock and memory limits,
classified, and summed up in the JSON summary."""

from __future__ import annotations

import contextlib
import json
import math
import multiprocessing
import os
import re
import resource
import shutil
import signal
import sys
import time
from collections import Counter

from tests.fuzz.case import (
    DEADLINE,
    FAILING,
    RANK,
    Case,
    Limits,
    SlowCase,
    cpu_seconds,
    rng_for,
    send_steps_to,
)
from tests.fuzz.crasp import fuzz_crasp
from tests.fuzz.grids import fuzz_grids
from tests.fuzz.inputs import fuzz_inputs
from tests.fuzz.lens import fuzz_lens, lens_exports
from tests.fuzz.models import bomb_crc, bomb_member, fuzz_models
from tests.fuzz.pcoc import fuzz_pcoc
from tests.fuzz.records import fuzz_records, report_module
from tests.fuzz.show import fuzz_show
from tests.fuzz.workspace import base_models, workdir

FAMILIES = ("crasp", "pcoc", "inputs", "models", "grids", "show", "records", "lens")
# A case past its soft CPU limit is interrupted (SIGPROF) and recorded as slow (crasp,
# pcoc) or hang (the CLI families); past the hard CPU limit (RLIMIT_CPU) the kernel kills
# the worker, past the wall-clock limit (SIGALRM) or the parent's kill a little later: hang.
TIMEOUT_IS_HANG = {"inputs", "models", "grids", "show", "records", "lens"}


def _on_cpu(signum, frame):
    raise SlowCase("cpu")


def _on_wall(signum, frame):
    raise SlowCase("wall")


def limit_hard_cpu(seconds: float) -> None:
    """Let this process use ``seconds`` more CPU seconds before the kernel kills it
    (SIGXCPU): the soft RLIMIT_CPU, the hard one left alone so the next case can raise it."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    used = own.ru_utime + own.ru_stime
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = math.ceil(used + seconds)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


FUZZERS = {
    "crasp": fuzz_crasp,
    "pcoc": fuzz_pcoc,
    "inputs": fuzz_inputs,
    "models": fuzz_models,
    "grids": fuzz_grids,
    "show": fuzz_show,
    "records": fuzz_records,
    "lens": fuzz_lens,
}


def prepare(family: str) -> None:
    """Build what a family's cases share (compiled models, the bomb) outside the timer."""
    if family in ("inputs", "models"):
        base_models()
    if family == "models":
        bomb_member()
        bomb_crc()
    if family == "records":
        report_module()
    if family == "lens":
        lens_exports()


def run_case(family: str, seed: int, index: int, limits: Limits, dry: bool = False) -> dict:
    """Run one case in this process (the worker) under ``limits.cpu`` (ITIMER_PROF: this
    process's CPU time; a child gets what is left, see :func:`run_child`) and
    ``limits.wall`` (ITIMER_REAL); returns its JSON outcome. ``dry``: only generate it (its
    reproducer), without running anything under test."""
    case = Case(family, seed, index, dry=dry)
    rng = rng_for(family, seed, index)
    try:
        prepare(family)
    except Exception as err:  # the shared models do not compile: every case says so
        case.note("traceback", "prepare", f"{type(err).__name__}: {err}", err)
        return case.to_json()
    start, cpu = time.perf_counter(), cpu_seconds()
    DEADLINE.update(cpu=cpu + limits.cpu, wall=start + limits.wall)
    previous = {
        signal.SIGPROF: signal.signal(signal.SIGPROF, _on_cpu),
        signal.SIGALRM: signal.signal(signal.SIGALRM, _on_wall),
    }
    signal.setitimer(signal.ITIMER_PROF, limits.cpu)
    signal.setitimer(signal.ITIMER_REAL, limits.wall)
    try:
        FUZZERS[family](case, rng)
    except SlowCase as err:
        done = case.ran[-1] if case.ran else "start"
        if err.clock == "cpu":
            cls = "hang" if family in TIMEOUT_IS_HANG else "slow"
            message = f"used {limits.cpu:g} CPU-s (last completed step: {done})"
        else:
            cls = "hang"
            used = cpu_seconds() - cpu
            message = (
                f"still running after {limits.wall:g} s wall-clock, {used:.1f} CPU-s used:"
                f" blocked (last completed step: {done})"
            )
        case.note(cls, "timeout", message)
    except Exception as err:  # an exception outside any step: a harness bug or unwrapped call
        case.note("traceback", "harness", f"{type(err).__name__}: {err}", err)
    finally:
        while True:  # a timer may go off just as the case ends: it finished, so ignore it
            try:
                signal.setitimer(signal.ITIMER_PROF, 0)
                signal.setitimer(signal.ITIMER_REAL, 0)
                for signum, handler in previous.items():
                    signal.signal(signum, handler)
                break
            except SlowCase:
                continue
        DEADLINE.clear()
    case.seconds = time.perf_counter() - start
    case.cpu = cpu_seconds() - cpu
    outcome = case.to_json()
    outcome["cpu"] = round(case.cpu, 3)
    return outcome


def _worker_main(conn, memory_gib: float) -> None:
    send_steps_to(conn)
    if memory_gib > 0:
        limit = int(memory_gib * 2**30)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import warnings

    warnings.simplefilter("ignore", RuntimeWarning)  # overflow in hostile programs: noise
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    try:
        while True:
            message = conn.recv()
            if message is None:
                break
            family, seed, index, limits, dry = message
            try:
                limit_hard_cpu(limits.hard_cpu)
                outcome = run_case(family, seed, index, limits, dry)
            except BaseException as err:  # escaped run_case (e.g. a late signal): report it
                signal.setitimer(signal.ITIMER_PROF, 0)
                signal.setitimer(signal.ITIMER_REAL, 0)
                case = Case(family, seed, index)
                case.note("traceback", "worker", f"{type(err).__name__}: {err}", err)
                outcome = case.to_json()
            conn.send(outcome)
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        if workdir.cache_info().currsize:
            shutil.rmtree(workdir(), ignore_errors=True)


class Worker:
    """One child process that runs cases one at a time; restarted after a crash or hang."""

    def __init__(self, memory_gib: float) -> None:
        methods = multiprocessing.get_all_start_methods()
        self.context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        self.memory_gib = memory_gib
        self.process = None
        self.conn = None

    def _start(self) -> None:
        parent, child = self.context.Pipe()
        self.process = self.context.Process(
            target=_worker_main, args=(child, self.memory_gib), daemon=True
        )
        self.process.start()
        child.close()
        self.conn = parent

    def stop(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(OSError, BrokenPipeError):
            self.conn.send(None)
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.process = None

    def _kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.join()
            self.process = None

    def run(self, family: str, seed: int, index: int, limits: Limits, dry: bool = False) -> dict:
        """Run one case in the worker; a worker that does not answer within the wall-clock
        limit and its grace is killed (hang), one that dies by a signal is a crash, or a
        hang when the signal is the hard CPU limit's."""
        if self.process is None or not self.process.is_alive():
            self._start()
        hard = limits.wall + limits.grace
        start = time.perf_counter()
        self.conn.send((family, seed, index, limits, dry))
        step = "start"
        ready = False
        try:
            while (left := hard - (time.perf_counter() - start)) > 0 and self.conn.poll(left):
                message = self.conn.recv()
                if isinstance(message, tuple) and message[0] == "step":
                    step = message[1]
                    continue
                return message
        except (EOFError, OSError):
            ready = True
        case = Case(family, seed, index)
        case.seconds = time.perf_counter() - start
        if not ready:
            self._kill()
            case.note("hang", step, f"no result after {hard:g} s (in step {step}); worker killed")
        else:
            self.process.join(5)
            code = self.process.exitcode
            self.process = None
            if code == -signal.SIGXCPU:
                case.note(
                    "hang",
                    step,
                    f"worker passed the hard limit of {limits.hard_cpu:g} CPU-s in step {step}"
                    " (killed by SIGXCPU)",
                )
            elif code is not None and code < 0:
                try:
                    name = signal.Signals(-code).name
                except ValueError:
                    name = str(-code)
                case.note("crash", step, f"worker killed by signal {name} in step {step}")
            else:
                case.note("crash", step, f"worker exited with status {code} in step {step}")
        outcome = case.to_json()
        if not dry:  # rebuild the reproducer in a fresh worker, running nothing under test
            described = self.run(family, seed, index, limits, dry=True)
            outcome["repro"] = described["repro"] or {"note": "the description failed too"}
        outcome["repro"]["replay"] = f"python -m tests.fuzz --repro {family}:{seed}:{index}"
        return outcome


def summarize(outcomes: list[dict], families: list[str], meta: dict) -> dict:
    counts = {f: Counter() for f in families}
    for outcome in outcomes:
        counts[outcome["family"]][outcome["class"]] += 1
    groups: dict[tuple, dict] = {}
    for outcome in outcomes:
        for finding in outcome["findings"]:
            if finding["cls"] in ("ok", "refused"):
                continue
            label = finding.get("kind") or (
                "" if finding.get("where") else re.sub(r"\d+", "N", finding.get("message", ""))[:60]
            )
            key = (
                outcome["family"],
                finding["cls"],
                finding.get("exc", ""),
                finding.get("where", "") or finding["step"],
                label,
            )
            group = groups.setdefault(
                key,
                {
                    "family": outcome["family"],
                    "class": finding["cls"],
                    "exc": finding.get("exc", ""),
                    "where": finding.get("where", ""),
                    "where_pkg": finding.get("where_pkg", ""),
                    "step": finding["step"],
                    "count": 0,
                    "cases": [],
                    "example": {
                        "index": outcome["index"],
                        "message": finding.get("message", ""),
                        "repro": outcome["repro"],
                    },
                },
            )
            group["count"] += 1
            if len(group["cases"]) < 20:
                group["cases"].append(outcome["index"])

            # keep the shortest reproducer
            def size(r):
                return len(json.dumps(r, default=str))

            if size(outcome["repro"]) < size(group["example"]["repro"]):
                group["example"] = {
                    "index": outcome["index"],
                    "message": finding.get("message", ""),
                    "repro": outcome["repro"],
                }
    steps = {f: Counter() for f in families}
    for outcome in outcomes:
        steps[outcome["family"]].update(outcome.pop("ran", []))
    failures = [o for o in outcomes if o["class"] not in ("ok", "refused")]
    return {
        "meta": meta,
        "counts": {
            f: dict(sorted(c.items(), key=lambda kv: RANK[kv[0]])) for f, c in counts.items()
        },
        "steps_completed": {f: dict(c.most_common()) for f, c in steps.items()},
        "failing": sum(1 for o in outcomes if o["class"] in FAILING),
        "kinds": sorted(
            groups.values(), key=lambda g: (g["family"], -RANK[g["class"]], -g["count"])
        ),
        "cases": failures,
    }


def print_summary(summary: dict) -> None:
    meta = summary["meta"]
    print(
        f"crasp fuzz: seed {meta['seed']}, {meta['cpu_seconds']:.0f} CPU-s,"
        f" {meta['seconds']:.0f} s (load average {meta['load_average'][0]:g})"
    )
    for family, counts in summary["counts"].items():
        done = sum(counts.values())
        parts = ", ".join(f"{cls} {n}" for cls, n in counts.items())
        print(f"  {family:<7} {done:>5} cases: {parts}")
    if summary["kinds"]:
        print("distinct findings (family, class, exception, where: count):")
        for group in summary["kinds"]:
            where = group["where"] or group["step"]
            message = group["example"]["message"].replace("\n", " ")[:110]
            print(
                f"  {group['family']:<7} {group['class']:<16} {group['exc'] or '-':<22} {where}: {group['count']}  [{message}]"
            )
    status = "FAIL" if summary["failing"] else "PASS"
    print(f"{status}: {summary['failing']} case(s) with a traceback, crash, hang or disagreement")
