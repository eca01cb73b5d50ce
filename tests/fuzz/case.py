"""One case: its limits, its findings and class, and the steps that run code under test
(a function, the ``crasp`` command in this process, or a child process)."""

from __future__ import annotations

import contextlib
import errno
import math
import os
import random
import resource
import signal
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fuzz import ROOT

FAILING = ("traceback", "crash", "hang", "disagree", "bad_output")
RANK = {
    "ok": 0,
    "refused": 1,
    "accepted_invalid": 2,
    "uncovered": 2,
    "unlocated": 2,
    "unsafe": 3,
    "slow": 4,
    "disagree": 5,
    "bad_output": 5,
    "traceback": 6,
    "hang": 7,
    "crash": 8,
}
TEXT_LIMIT = 1500


class SlowCase(BaseException):
    """Raised in the worker when a case passes its soft CPU limit (``clock`` "cpu",
    SIGPROF) or its wall-clock limit ("wall", SIGALRM)."""

    def __init__(self, clock: str) -> None:
        super().__init__(clock)
        self.clock = clock


@dataclass(frozen=True)
class Limits:
    """The limits of one case. ``cpu``: CPU seconds (the worker's and its waited-for
    children's) before the case is interrupted; ``hard_cpu``: CPU seconds before the kernel
    kills the worker (RLIMIT_CPU, for a loop that never returns to Python); ``wall``:
    wall-clock seconds before the case is interrupted as blocked (a sleep, a deadlock);
    ``grace``: seconds after ``wall`` before the parent kills a worker that did not answer.
    Load stretches wall-clock time, not CPU time, so ``wall`` is generous."""

    cpu: float = 8.0
    wall: float = 160.0
    hard_cpu: float = 34.0
    grace: float = 30.0

    @classmethod
    def from_cpu(cls, cpu: float, wall: float | None = None) -> Limits:
        """Limits for a soft CPU limit: hard CPU 3x + 10 s, wall-clock 20x (or ``wall``)."""
        return cls(cpu=cpu, wall=wall if wall is not None else 20 * cpu, hard_cpu=3 * cpu + 10)


def cpu_seconds() -> float:
    """CPU seconds used by this process and the children it has waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


DEADLINE: dict[str, float] = {}  # the running case's CPU and wall-clock deadlines


def run_child(case: Case, step: str, argv: list, stdin: bytes = b"") -> Any:
    """Run a child process for ``case`` within what is left of its limits: the child may
    use the CPU seconds the case has left (RLIMIT_CPU, at least 1) and the wall-clock
    seconds it has left; it imports this checkout's package. Returns the CompletedProcess,
    or None after noting a hang (a limit passed)."""
    import subprocess

    cpu_left = max(1, math.ceil(DEADLINE.get("cpu", math.inf) - cpu_seconds()))
    wall_left = max(1.0, DEADLINE.get("wall", math.inf) - time.perf_counter())
    cpu_left = min(cpu_left, 3600)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_left, cpu_left + 5))

    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    progress(step)
    try:
        proc = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            timeout=wall_left,
            cwd=ROOT,
            env=env,
            preexec_fn=limit,
        )
    except subprocess.TimeoutExpired:
        case.note("hang", step, f"the child process still ran after {wall_left:.0f} s wall-clock")
        return None
    except OSError as err:  # E2BIG: an argument longer than any command line can hold
        if err.errno != errno.E2BIG:
            raise
        case.note("refused", step, "the system refuses a command line this long (not an input)")
        return None
    if proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        case.note("hang", step, f"the child process passed its limit of {cpu_left} CPU-s")
        return None
    return proc


_PROGRESS = None  # the worker's connection: steps are announced so a crash names its step


def progress(step: str) -> None:
    if _PROGRESS is not None:
        _PROGRESS.send(("step", step))


def send_steps_to(conn) -> None:
    """Announce each step on ``conn`` (the worker's connection to the parent)."""
    global _PROGRESS
    _PROGRESS = conn


@dataclass
class Finding:
    cls: str
    step: str
    message: str
    kind: str = ""  # a short label that groups findings without an exception
    exc: str = ""
    where: str = ""
    where_pkg: str = ""
    tb: str = ""

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v}


@dataclass
class Case:
    """One case: its reproducer (``repro``) and the findings of its steps; its class is the
    worst finding's."""

    family: str
    seed: int
    index: int
    repro: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    cpu: float = 0.0
    ran: list[str] = field(default_factory=list)  # steps that completed
    dry: bool = False  # only generate the case and fill in its reproducer

    @property
    def cls(self) -> str:
        return max((f.cls for f in self.findings), key=RANK.__getitem__, default="ok")

    def note(
        self,
        cls: str,
        step: str,
        message: str,
        err: BaseException | None = None,
        kind: str = "",
    ) -> None:
        finding = Finding(cls, step, shorten(message, 600), kind=kind)
        if err is not None and cls not in ("refused",):
            finding.exc = type(err).__name__
            finding.where, finding.where_pkg, finding.tb = locate(err)
        elif err is not None:
            finding.exc = type(err).__name__
        self.findings.append(finding)

    def attempt(self, step: str, fn, *args, **kw) -> tuple[bool, Any]:
        """Run one step: CraspError and click usage errors are refusals, any other
        exception a traceback. Returns (succeeded, value)."""
        from crasp_compiler.errors import CraspError

        progress(step)
        try:
            value = fn(*args, **kw)
        except SlowCase:
            raise
        except CraspError as err:
            self.note("refused", step, str(err), err)
            return False, None
        except Exception as err:
            if _is_click_usage(err):
                self.note("refused", step, str(err), err)
                return False, None
            self.note("traceback", step, f"{type(err).__name__}: {err}", err)
            return False, None
        self.ran.append(step)
        return True, value

    def to_json(self) -> dict:
        return {
            "family": self.family,
            "seed": self.seed,
            "index": self.index,
            "class": self.cls,
            "seconds": round(self.seconds, 3),
            "repro": self.repro,
            "findings": [f.to_json() for f in self.findings],
            "ran": self.ran,
        }


def _is_click_usage(err: BaseException) -> bool:
    import click

    return isinstance(err, click.exceptions.UsageError | click.exceptions.BadParameter)


def shorten(text: Any, limit: int = TEXT_LIMIT) -> str:
    """``text`` (made a string) cut to about ``limit`` characters, head and tail kept."""
    if not isinstance(text, str):
        text = repr(text)
    if len(text) <= limit:
        return text
    head, tail = text[: limit * 2 // 3], text[-limit // 4 :]
    return f"{head}…[{len(text) - len(head) - len(tail)} more characters]…{tail}"


def _frame_name(filename: str, lineno: int, name: str) -> str:
    path = Path(filename)
    try:
        shown = str(path.resolve().relative_to(ROOT))
    except ValueError:
        parts = path.parts
        shown = "/".join(parts[-3:]) if "site-packages" in parts else filename
    return f"{shown}:{lineno} in {name}"


def locate(err: BaseException) -> tuple[str, str, str]:
    """Where ``err`` was raised (innermost frame), the innermost frame inside the
    package, and the last lines of the traceback."""
    frames = traceback.extract_tb(err.__traceback__)
    where = _frame_name(frames[-1].filename, frames[-1].lineno, frames[-1].name) if frames else ""
    pkg = ""
    for frame in reversed(frames):
        if "crasp_compiler" in frame.filename:
            pkg = _frame_name(frame.filename, frame.lineno, frame.name)
            break
    lines = traceback.format_exception(type(err), err, err.__traceback__)
    text = "".join(lines[-8:]) if len(lines) > 8 else "".join(lines)
    return where, pkg if pkg != where else "", shorten(text, 2500)


def classify_cli(case: Case, step: str, result) -> str:
    """The class of a CliRunner result, recorded on ``case``: exit 0 is ok; exit 1/2 with
    a message refused; an exception other than SystemExit, "Traceback" in the output, or
    another exit status (or no message) a traceback."""
    output = result.output or ""
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        if isinstance(exc, SlowCase):
            raise exc
        case.note("traceback", step, f"{type(exc).__name__}: {exc}", exc)
        return "traceback"
    if "Traceback (most recent call last)" in output:
        case.note("traceback", step, "traceback in the output: " + output[-800:])
        return "traceback"
    if result.exit_code == 0:
        case.ran.append(step)
        return "ok"
    if result.exit_code in (1, 2) and output.strip():
        case.note("refused", step, output.strip().splitlines()[-1])
        return "refused"
    case.note("traceback", step, f"exit status {result.exit_code} with output {output[-300:]!r}")
    return "traceback"


def invoke(case: Case, step: str, args: list[str], stdin: bytes | str | None = None):
    """Run the ``crasp`` command in this process and classify it; returns (class, result)."""
    from click.testing import CliRunner

    from crasp_compiler.cli import main

    runner = CliRunner()
    progress(step)
    with quiet_warnings():
        result = runner.invoke(main, args, input=stdin, catch_exceptions=True)
    return classify_cli(case, step, result), result


@contextlib.contextmanager
def quiet_warnings():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def rng_for(family: str, seed: int, index: int) -> random.Random:
    return random.Random(f"{family}:{seed}:{index}")
