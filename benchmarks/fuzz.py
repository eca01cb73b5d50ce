"""Seeded fuzz harness: no user input produces a traceback, a crash, a hang or a silent
disagreement (issue 13).

Run it from the repository root::

    nice -n 10 python benchmarks/fuzz.py --families crasp,pcoc,inputs,models,grids \\
        --cases 500 --seed 0 --out fuzz-results.json [--time-limit 600]

    # replay one case in this process, with full tracebacks
    python benchmarks/fuzz.py --repro crasp:0:123

``--cases`` is per family, or ``FAMILY=N,...`` (``--cases crasp=14000,pcoc=7500``).
Limits are CPU time, so a loaded machine does not turn slow cases into hangs:
``--case-cpu S`` (default 8) CPU seconds per case, counted by ITIMER_PROF in the worker
(a child process the case waits for gets what is left, by RLIMIT_CPU); past it a case is
interrupted. At 3x + 10 CPU-s the kernel kills the worker (RLIMIT_CPU: a loop in C that
never returns to Python). ``--case-wall W`` (default 20x the CPU limit) wall-clock seconds
catch a case that sleeps or deadlocks; the parent kills a worker 30 s after that.
``--memory-gib G`` (default 4) is the worker's address-space limit (so a huge allocation is
a MemoryError, not the OOM killer), ``--start I`` the first case index.

Families (one function each, ``fuzz_<family>``):

- ``crasp``  C-RASP program text: mutated examples, hostile templates (huge integers,
  10**9 nesting, deep nesting, long definition chains, windows, ``"<bos>"``, unicode
  operators) and random well-formed programs (``tests/support/strategies.py``). Valid programs
  are interpreted (and checked against the naive evaluator of ``tests/support/naive.py`` on short
  inputs), printed and re-parsed, compiled (heaviside; relu with a small ``max_len`` and
  layernorm on subsets) and run by the numpy executor (float64, float32) and, on a
  subset, the torch module; every output at every position must equal the interpreter's
  wherever ``model.guarantee.covers(length, dtype)``. Uncovered inputs must be refused
  (or agree).
- ``pcoc``   PCOC program text: mutated examples, hostile statics and random valid
  programs; ``interpret_pcoc`` vs ``compile_pcoc``/``run_pcoc`` (hard; softmax on a
  subset; torch on a subset) on inputs within the declared bounds (relative agreement
  1e-6, plus the bound the model records) and outside them (refusal, warning or agreement).
- ``inputs`` hostile input lines for ``crasp interpret`` / ``crasp run`` (CliRunner,
  argv or stdin bytes, a few as real subprocesses); ``interpret`` and ``run`` must print
  the same answers when both succeed.
- ``models`` mutated model files (byte flips, truncation, header JSON, array dtypes and
  shapes, CSR index arrays, extra/missing/non-npy members, compressed bombs) through
  ``crasp info``, ``crasp run`` and ``crasp check --samples 5 --max-len 8``.
- ``grids``  TOML grid files through ``load_grid`` and (a subset) ``crasp sweep`` with
  training replaced by a no-op.
- ``show``   small programs over hostile tokens (``<!--<script``, ``</script>``,
  ``$\\foo$``, ``$x^$``, ``&``, RTL, emoji, 5,000 characters), some with hostile labels
  (control characters, lone surrogates) edited into the model file, through ``crasp show``
  to HTML, PNG and SVG, into a folder, a missing folder or under a file: a picture written
  (of its kind; HTML: no raw ``<`` in the JSON data block) or a one-line error.
- ``records`` committed training records with fields deleted, renamed, retyped or nested
  deeply (or the whole record replaced) through ``crasp plot`` and the tables of
  ``benchmarks/length_generalization_report.py`` (reading a private copy of the records).
- ``lens``   TransformerLens exports with ``config.json`` mutated (each ``cfg`` field given
  other values and types, ``crasp`` fields, the whole file) through ``crasp info``,
  ``run`` (must print the unmutated export's answer) and ``check``.

Every case runs in a worker child process (one at a time) that is restarted when it dies:
a case that kills it by a signal is a ``crash``, one past its CPU or wall-clock limits a
``hang`` (crasp/pcoc past the CPU limit: ``slow``). A case is reproducible from (family,
seed, index) alone. Classes: ``ok``, ``refused`` (CraspError, click usage error, CLI exit
1/2 with a message), ``traceback`` (any other exception, or "Traceback" in CLI output),
``crash``, ``hang``, ``disagree`` (valid and covered, outputs differ), ``bad_output``
(exit 0 but a picture missing or malformed, or a refusal that leaves an empty file); notes
that do not fail the run: ``slow`` (crasp/pcoc case over the CPU limit), ``uncovered``
(PCOC input that breaks a promise of the program, e.g. a slot bound, and disagrees),
``accepted_invalid`` (a grid value of the wrong type accepted; a lens ``cfg`` field that
changes the TransformerLens model accepted by ``run`` or ``check``), ``unsafe`` (a grid run
directory outside the grid's ``out``), ``unlocated`` (a lens field mutation refused without
naming the field).

Output: ``--out PATH`` gets a JSON summary (counts per family and class, every finding
with its reproducer, and the findings grouped by kind); stdout gets a short summary.
Exit status 1 if any traceback, crash, hang or disagreement.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import json
import math
import multiprocessing
import os
import random
import re
import resource
import shutil
import signal
import struct
import sys
import tempfile
import time
import traceback
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # tests.support.naive / tests.support.strategies
    sys.path.insert(0, str(ROOT))

FAMILIES = ("crasp", "pcoc", "inputs", "models", "grids", "show", "records", "lens")
FAILING = ("traceback", "crash", "hang", "disagree", "bad_output")
NOTES = ("slow", "uncovered", "accepted_invalid", "unsafe", "unlocated")
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
# A case past its soft CPU limit is interrupted (SIGPROF) and recorded as slow (crasp,
# pcoc) or hang (the CLI families); past the hard CPU limit (RLIMIT_CPU) the kernel kills
# the worker, past the wall-clock limit (SIGALRM) or the parent's kill a little later: hang.
TIMEOUT_IS_HANG = {"inputs", "models", "grids", "show", "records", "lens"}
TEXT_LIMIT = 1500

# ====================================================================== outcomes


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


_DEADLINE: dict[str, float] = {}  # the running case's CPU and wall-clock deadlines


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


def run_child(case: Case, step: str, argv: list, stdin: bytes = b"") -> Any:
    """Run a child process for ``case`` within what is left of its limits: the child may
    use the CPU seconds the case has left (RLIMIT_CPU, at least 1) and the wall-clock
    seconds it has left; it imports this checkout's package. Returns the CompletedProcess,
    or None after noting a hang (a limit passed)."""
    import subprocess

    cpu_left = max(1, math.ceil(_DEADLINE.get("cpu", math.inf) - cpu_seconds()))
    wall_left = max(1.0, _DEADLINE.get("wall", math.inf) - time.perf_counter())
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
    with _quiet_warnings():
        result = runner.invoke(main, args, input=stdin, catch_exceptions=True)
    return classify_cli(case, step, result), result


@contextlib.contextmanager
def _quiet_warnings():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def rng_for(family: str, seed: int, index: int) -> random.Random:
    return random.Random(f"{family}:{seed}:{index}")


# ====================================================================== shared text tools

TOKEN_RE = re.compile(r'Q_"[^"\n]*"|"[^"\n]*"|\'[^\'\n]*\'|\w+|\s+|[^\w\s]')
UNICODE_POOL = [
    "\u2212",  # minus sign
    "≤",
    "≥",
    "∧",
    "∨",
    "¬",
    "≡",
    "≠",
    "⊤",
    "⊥",
    "∃←",
    "←",
    "ε",
    "\u00a0",
    "\u3000",
    "\u2028",
    "\u2029",
    "\u0085",
    "\ufeff",
    "\u200b",
    "\u202e",
    "\x00",
    "\x0b",
    "\x0c",
    "\r",
    "\t",
    "\u0301",  # combining acute
    "é",
    "ß",
    "字",
    "🙂",
    "\U0001f600",
    "\ud800",  # lone surrogate
    "١",  # Arabic-indic digit one
    "Ⅻ",
    "ｉ",  # fullwidth i
]


def random_unicode(rng: random.Random) -> str:
    if rng.random() < 0.6:
        return rng.choice(UNICODE_POOL)
    lo, hi = rng.choice(
        [
            (0x20, 0x7E),
            (0x80, 0x2FF),
            (0x370, 0x3FF),
            (0x2000, 0x2BFF),
            (0x4E00, 0x4E80),
            (0x1F300, 0x1F64F),
            (0xE000, 0xE010),
        ]
    )
    return chr(rng.randint(lo, hi))


def huge_int(rng: random.Random) -> str:
    choice = rng.randrange(9)
    if choice == 0:
        return "9" * rng.choice([20, 309, 4299, 4300, 4301, 5000])
    return str(
        rng.choice(
            [0, 1, 10**9, 10**9 + 1, 999_999_999, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**30]
        )
    )


def mutate_tokens(
    text: str, rng: random.Random, pool: list[str], count: int
) -> tuple[str, list[str]]:
    """Apply ``count`` token-level mutations; returns the text and a description."""
    tokens = TOKEN_RE.findall(text) or [""]
    described = []
    for _ in range(count):
        op = rng.choice(
            ["delete", "insert", "insert", "swap", "replace", "duplicate", "unicode", "int"]
        )
        k = rng.randrange(len(tokens))
        if op == "delete" and len(tokens) > 1:
            described.append(f"delete {tokens[k]!r}@{k}")
            del tokens[k]
        elif op == "insert":
            new = rng.choice(pool + [t for t in tokens if t.strip()][:50])
            tokens.insert(k, new)
            described.append(f"insert {new!r}@{k}")
        elif op == "swap":
            j = rng.randrange(len(tokens))
            tokens[k], tokens[j] = tokens[j], tokens[k]
            described.append(f"swap @{k}<->@{j}")
        elif op == "replace":
            new = rng.choice(pool)
            described.append(f"replace {tokens[k]!r}@{k} by {new!r}")
            tokens[k] = new
        elif op == "duplicate":
            j = rng.randrange(len(tokens))
            span = tokens[min(k, j) : max(k, j) + 1][:40]
            tokens[k:k] = span
            described.append(f"duplicate {len(span)} tokens @{k}")
        elif op == "unicode":
            new = random_unicode(rng)
            tokens.insert(k, new)
            described.append(f"insert {new!r}@{k}")
        else:
            numbers = [i for i, t in enumerate(tokens) if t.isdigit()]
            j = rng.choice(numbers) if numbers else k
            new = huge_int(rng)
            described.append(f"int {tokens[j]!r}@{j} -> {shorten(new, 40)}")
            tokens[j] = new
    return "".join(tokens), described


# ====================================================================== crasp

CRASP_POOL = [
    '"<bos>"',
    'Q_"<bos>"',
    '"a"',
    '"b"',
    "Q_a(j)",
    "#",
    "#[",
    "]",
    "(",
    ")",
    "[",
    "{",
    "}",
    "==",
    "=",
    ":=",
    "<=",
    ">=",
    "<",
    ">",
    "!=",
    "!",
    "&&",
    "||",
    "+",
    "-",
    "*",
    "%",
    "?",
    ":",
    ",",
    ";",
    "\n",
    "//",
    "i",
    "j",
    "k'",
    "mod",
    "if",
    "else",
    "min(",
    "max(",
    "true",
    "false",
    "not",
    "and",
    "or",
    "#import",
    "pred",
    "alphabet",
    "accept",
    "output",
    "predicate",
    "1000000000",
    "10000000000",
    "-1",
    "0",
    "(i)",
    "j = i - 1",
    "j >= i - 50",
    "i % 2 == 0",
    *UNICODE_POOL[:12],
]


@cache
def crasp_corpus() -> list[tuple[str, str]]:
    """(name, text) of the example and task programs."""
    paths = sorted((ROOT / "examples" / "crasp").glob("*.cr*")) + sorted(
        (ROOT / "crasp_compiler" / "tasks" / "programs").glob("*.cr")
    )
    return [(p.name, p.read_text(encoding="utf-8")) for p in paths]


def _chain_program(rng: random.Random) -> str:
    length = rng.choice([10, 50, 100, 200, 299, 300, 301, 500, 1000])
    step = rng.choice(
        [
            "A{p} + 1",
            "A{p} + A{p}",
            "2 * A{p}",
            'A{p} - # "b"',
            'max(A{p}, # "a")',
            "A{p} if A{p} > 2 else 0",
        ]
    )
    lines = ['A0 = # "a"'] + [f"A{k} = " + step.format(p=k - 1) for k in range(1, length)]
    if rng.random() < 0.3:  # a Boolean chain instead
        lines = ['B0 = "a"'] + [f'B{k} = !B{k - 1} || "b"' for k in range(1, length)]
        lines.append(f"Acc = B{length - 1}")
    else:
        lines.append(f"Acc = A{length - 1} > {rng.choice([0, 3, 10**9])}")
    return "\n".join(lines) + "\n"


def _big_program(rng: random.Random) -> str:
    c = rng.choice(["1000000000", "999999999", "1000000001", "3"])
    depth = rng.choice([1, 2, 3, 5, 10, 40])
    expr = '# "a"'
    for _ in range(depth):
        expr = f"{c} * ({expr})"
    rhs = rng.choice(["0", c, "-" + c, f"{c} * {c}"])
    return f'A = {expr}\nB = A - {c} * # "b"\nAcc = B {rng.choice(["<", ">=", "==", "!="])} {rhs}\n'


def _digits_program(rng: random.Random) -> str:
    digits = rng.choice([10, 19, 20, 100, 4299, 4300, 4301, 5000, 20000])
    number = str(rng.randint(1, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(digits - 1))
    where = rng.choice(["const", "scale", "compare", "modulus", "offset"])
    if where == "const":
        return f'A = # "a" + {number}\nAcc = A > 2\n'
    if where == "scale":
        return f'A = {number} * # "a"\nAcc = A > 2\n'
    if where == "compare":
        return f'A = # "a"\nAcc = A < {number}\n'
    if where == "modulus":
        return f'P(i) := i % {number} == 1\nAcc = P && "a"\n'
    return f"A(i) := #[j <= i, j = i - {number}] Q_a(j)\nAcc = A >= 1\n"


def _deep_program(rng: random.Random) -> str:
    depth = rng.choice([10, 50, 98, 99, 100, 101, 200, 1000, 5000])
    kind = rng.choice(["paren", "not", "neg", "min", "count", "cond", "and"])
    if kind == "paren":
        return "A = " + "(" * depth + '# "a"' + ")" * depth + "\nAcc = A > 1\n"
    if kind == "not":
        return "Acc = " + "!" * depth + '"a"\n'
    if kind == "neg":
        return "A = " + "- " * depth + '# "a"\nAcc = A > 1\n'
    if kind == "min":
        return "A = " + "min(" * depth + '# "a"' + ', # "b")' * depth + "\nAcc = A > 1\n"
    if kind == "count":
        return "A = " + "# (" * depth + '"a"' + " > 0)" * depth + "\nAcc = A > 1\n"
    if kind == "cond":
        return "A = " + '1 if "a" else (' * depth + "0" + ")" * depth + "\nAcc = A > 0\n"
    return "Acc = " + ' && ("a"' * depth + ")" * depth + "\n"


def _window_program(rng: random.Random) -> str:
    w = rng.choice([0, 1, 2, 5, 50, 99, 999, 5000, 9999, 10000, 10001, 100000, 10**9])
    form = rng.choice(
        [
            "A(i) := #[j <= i, j >= i - {w}] Q_a(j)",
            "A(i) := #[j <= i, j > i - {w}] Q_a(j)",
            "A(i) := #[j <= i, j = i - {w}] Q_a(j)",
            "A(i) := #[j <= i, j \u2265 i \u2212 {w}] Q_a(j)",
            "A(i) := #[j <= i, j == i - {w} || j == i - 1] Q_a(j)",
            'predicate near(i, j) := j >= i - {w}\nA = #[near] "a"',
            "A(i) := #[j < i, j >= i - {w}] Q_a(j) \u2227 \u00acQ_b(j)",
            "A(i) := #[j <= i, j <= i - {w}] Q_a(j)",
        ]
    )
    return (
        form.format(w=w) + f"\nAcc = A {rng.choice(['>', '>=', '=='])} {rng.choice([0, 1, 2, w])}\n"
    )


def _bos_program(rng: random.Random) -> str:
    return rng.choice(
        [
            'A = # "<bos>"\nAcc = A > 0\n',
            'alphabet "<bos>", "a"\nA = # "a"\nAcc = A > 0\n',
            'Acc = Q_"<bos>"(i)\n',
            'alphabet "a", "<bos>"\nAcc = "<bos>" || "a"\n',
            'A(i) := #[j <= i, j = i - 1] Q_"<bos>"(j)\nAcc = A == 0\n',
            'alphabet "a", "b", "a"\nAcc = # "a" > # "b"\n',
            'alphabet ""\nAcc = true\n',
            'alphabet "a b"\nAcc = "a b"\n',
            'Acc = "\\u0000" || "a"\n',
        ]
    )


def _periodic_program(rng: random.Random) -> str:
    moduli = [
        rng.choice([1, 2, 3, 7, 97, 9973, 9999, 10000, 10001, 10**9])
        for _ in range(rng.randint(1, 5))
    ]
    parts = [f"i % {m} == {rng.randrange(min(m, 5))}" for m in moduli]
    body = rng.choice([" || ", " && "]).join(parts)
    paper = rng.random() < 0.3
    if paper:
        m = moduli[0]
        return (
            f"P(i) := i \u2261 {rng.randrange(min(m, 3))} (mod {m})\nAcc(i) := P(i) \u2227 Q_a(i)\n"
        )
    return f'predicate per(i) := {body}\nA = #[j <= i] "a"\nAcc = (A > 0 && per) || ({body})\n'


def _paper_program(rng: random.Random) -> str:
    minus = rng.choice(["-", "\u2212"])
    return (
        f"C(i) := #[j \u2264 i] Q_a(j)\n"
        f"D(i) := #[j \u2264 i, j = i {minus} 1] Q_b(j)\n"
        f"E(i) := #[j < i] Q_a(j) \u2227 \u00acQ_b(j)\n"
        f"F(i) := C(i) \u2265 D(i) \u2228 E(i) \u2260 {rng.randint(0, 3)}\n"
        f"G(i) := F(i) ? C(i) : {minus}{rng.randint(0, 10**9)}\n"
        f"H(i) := \u2203\u2190 (Q_a(i) \u2227 F(i))\n"
        f"Acc(i) := H(i) \u2227 G(i) {rng.choice(['≤', '≥', '=', '<'])} {rng.randint(-3, 3)}\n"
    )


def _many_outputs(rng: random.Random) -> str:
    k = rng.choice([2, 10, 100, 500])
    lines = [f'C{j} = # "a" - {j} * # "b"' for j in range(k)]
    lines.append(
        "output " + ", ".join(f"C{j}" for j in range(k)) + rng.choice(["", ", C0", ", Nope"])
    )
    if rng.random() < 0.5:
        lines.append(rng.choice(["accept C0", "accept B", "B = C0 > 0\naccept B"]))
    return "\n".join(lines) + "\n"


HOSTILE_CRASP = [
    _chain_program,
    _big_program,
    _digits_program,
    _deep_program,
    _window_program,
    _bos_program,
    _periodic_program,
    _paper_program,
    _many_outputs,
]


def _random_wellformed(rng: random.Random) -> str | None:
    """Text of a random well-typed program from tests/support/strategies.py (None without it)."""
    try:
        from tests.support.strategies import random_program
    except ImportError:
        return None
    from crasp_compiler import format_program

    shape = dict(
        local=rng.random() < 0.6,
        periodic=rng.random() < 0.6,
        max_definitions=rng.choice([3, 6, 12, 30]),
        max_depth=rng.choice([2, 3, 4, 6]),
    )
    program = random_program(rng, **shape)
    return format_program(program)


def crasp_text(rng: random.Random) -> tuple[str, dict]:
    """One program text and how it was made."""
    roll = rng.random()
    if roll < 0.40:
        name, text = rng.choice(crasp_corpus())
        count = rng.choice([1, 1, 2, 3, 5])
        text, described = mutate_tokens(text, rng, CRASP_POOL, count)
        return text, {"kind": "mutation", "base": name, "mutations": described}
    if roll < 0.65:
        text = _random_wellformed(rng)
        if text is not None:
            return text, {"kind": "random"}
    gen = rng.choice(HOSTILE_CRASP)
    return gen(rng), {"kind": gen.__name__.lstrip("_")}


def _count_depth(node) -> int:
    from crasp_compiler.languages.crasp.nodes import Count, children

    best, stack = 0, [(node, 0)]
    while stack:
        current, depth = stack.pop()
        depth += isinstance(current, Count)
        best = max(best, depth)
        stack.extend((child, depth) for child in children(current))
    return best


def _naive_viable(program) -> bool:
    return len(program.definitions) <= 400 and all(
        _count_depth(d.expr) <= 3 for d in program.definitions
    )


def _draw_words(rng: random.Random, alphabet: tuple[str, ...], text: str) -> list[list[str]]:
    lengths = [0, 1] + [rng.randint(2, 10) for _ in range(4)]
    if rng.random() < 0.3:
        lengths.append(rng.choice([30, 60, 130, 257]))
    windows = [int(w) for w in re.findall(r"i\s*[-\u2212]\s*(\d{1,4})\b", text)]
    for w in windows[:2]:
        if w <= 300:
            lengths += [w, w + 1, w + 2]
    return [[rng.choice(alphabet) for _ in range(n)] for n in lengths]


def _covers(model, length: int, dtype: str) -> bool:
    try:
        return bool(model.guarantee.covers(length, dtype))
    except TypeError:  # a Guarantee without per-dtype limits: float64 is the reference
        return dtype == "float64" and bool(model.guarantee.covers(length))


def _value_list(array, length: int) -> list:
    return [array[t].item() if hasattr(array[t], "item") else array[t] for t in range(length + 1)]


def compare_outputs(case: Case, step: str, program, outputs: dict, words, traces) -> bool:
    """Compare decided outputs ``outputs[name]`` (B, T) with the interpreter's traces at
    every position; records the first difference. True when all agree."""
    for row, (tokens, trace) in enumerate(zip(words, traces, strict=True)):
        n = len(tokens)
        for name in program.outputs:
            want = trace.values[name]
            got = outputs[name][row]
            boolean = want.dtype == bool
            for t in range(n + 1):
                w = bool(want[t]) if boolean else int(want[t])
                try:
                    g = bool(got[t]) if boolean else int(got[t])
                except (OverflowError, ValueError):
                    g = got[t]
                if w != g:
                    case.note(
                        "disagree",
                        step,
                        kind=step,
                        message=f"output {name} at t={t} (position {t - 1}) of input "
                        f"{shorten(' '.join(tokens), 200)!r} (length {n}): interpreter {shorten(w, 60)}, "
                        f"model {shorten(g, 60)}",
                    )
                    case.repro.setdefault("disagreeing_input", shorten(" ".join(tokens), 400))
                    return False
    return True


def _run_model(case: Case, step: str, program, model, words, traces, dtype: str, runtime: str):
    """Run covered inputs through one runtime and compare; run one uncovered input (if any)
    and expect a refusal or agreement."""
    import numpy as np

    covered = [k for k, w in enumerate(words) if _covers(model, len(w), dtype)]
    uncovered = [k for k, w in enumerate(words) if not _covers(model, len(w), dtype)]
    np_dtype = np.float64 if dtype == "float64" else np.float32

    def execute(rows: list[int], overlength: str):
        batch = [words[k] for k in rows]
        if runtime == "numpy":
            from crasp_compiler.runtime import run

            return run(model, batch, dtype=np_dtype, on_overlength=overlength).values
        from crasp_compiler.runtime.torch_module import TorchTransformer

        module = TorchTransformer(model)
        if dtype == "float32":
            module = module.float()
        with _torch_no_grad():
            decided = module.run(batch, on_overlength=overlength)
        return {k: v.cpu().numpy() for k, v in decided.items()}

    if covered:
        ok, values = case.attempt(f"{step}", execute, covered, "error")
        if ok:
            compare_outputs(
                case,
                step,
                program,
                values,
                [words[k] for k in covered],
                [traces[k] for k in covered],
            )
    if uncovered:
        k = uncovered[0]
        from crasp_compiler.errors import CraspError

        try:
            with _quiet_warnings():
                values = execute([k], "error")
        except SlowCase:
            raise
        except CraspError:
            return  # the clean refusal
        except Exception as err:
            case.note("traceback", f"{step}-uncovered", f"{type(err).__name__}: {err}", err)
            return
        compare_outputs(
            case, f"{step}-uncovered(not refused)", program, values, [words[k]], [traces[k]]
        )


@contextlib.contextmanager
def _torch_no_grad():
    import torch

    with torch.no_grad():
        yield


def fuzz_crasp(case: Case, rng: random.Random) -> None:
    from crasp_compiler import format_program, interpret, parse_program
    from crasp_compiler.languages.crasp.compile import compile_program

    text, how = crasp_text(rng)
    case.repro.update(how)
    case.repro["text"] = shorten(text)
    if case.dry:
        return
    ok, program = case.attempt("parse", parse_program, text, "fuzz.cr")
    if not ok:
        return
    # print / re-parse: the printed program must read back as the same program
    ok, printed = case.attempt("print", format_program, program)
    if ok:
        ok, again = case.attempt("reparse-printed", parse_program, printed, "printed.cr")
        if ok and again != program:
            case.note(
                "disagree",
                "roundtrip",
                "the printed program parses to a different program: " + shorten(printed, 400),
            )
        elif not ok and case.findings and case.findings[-1].cls == "refused":
            case.findings[-1].cls = "disagree"
            case.findings[-1].message = (
                "the printed program does not parse: " + case.findings[-1].message
            )
    words = _draw_words(rng, program.alphabet, text)
    traces = []
    for tokens in words:
        ok, trace = case.attempt("interpret", interpret, program, tokens)
        if not ok:
            return
        traces.append(trace)
    # an out-of-alphabet token must be refused
    stranger = rng.choice(["<bos>", "ε", "", "zz", "\x00", "\u2212"])
    if stranger not in program.alphabet:
        ok, _ = case.attempt("interpret-stranger", interpret, program, [*words[-1], stranger])
        if ok:
            case.note(
                "disagree",
                "interpret-stranger",
                f"token {stranger!r} outside the alphabet was accepted",
            )
        elif case.findings[-1].cls == "refused":
            case.findings.pop()  # the expected refusal
    _check_naive(case, program, words, traces)
    modes = [("heaviside", None)]
    if rng.random() < 0.35:
        modes.append(("relu", rng.choice([0, 1, 3, 8, 12])))
    if rng.random() < 0.25:
        modes.append(("layernorm", None))
    use_torch = rng.random() < 0.15
    for mode, max_len in modes:
        ok, model = case.attempt(
            f"compile-{mode}", compile_program, program, mode=mode, max_len=max_len
        )
        if not ok:
            continue
        if mode == "relu":  # inputs around the guarantee
            extra = [
                [rng.choice(program.alphabet) for _ in range(n)] for n in (max_len, max_len + 1)
            ]
            extra_traces = []
            for w in extra:
                ok, trace = case.attempt("interpret", interpret, program, w)
                if not ok:
                    return
                extra_traces.append(trace)
            run_words, run_traces = words + extra, traces + extra_traces
        else:
            run_words, run_traces = words, traces
        _run_model(
            case, f"numpy-{mode}-float64", program, model, run_words, run_traces, "float64", "numpy"
        )
        if rng.random() < 0.3:
            _run_model(
                case,
                f"numpy-{mode}-float32",
                program,
                model,
                run_words,
                run_traces,
                "float32",
                "numpy",
            )
        if use_torch:
            _run_model(
                case,
                f"torch-{mode}-float64",
                program,
                model,
                run_words,
                run_traces,
                "float64",
                "torch",
            )


def _check_naive(case: Case, program, words, traces) -> None:
    """The interpreter against the naive evaluator of tests/support/naive.py on short inputs."""
    if not _naive_viable(program):
        return
    try:
        from tests.support.naive import naive_values
    except ImportError:
        return
    for tokens, trace in zip(words, traces, strict=True):
        if len(tokens) > 6:
            continue
        try:
            expected = naive_values(program, tokens)
        except (RecursionError, ValueError):
            return
        for name in program.names:
            got = [
                bool(v) if trace.values[name].dtype == bool else int(v) for v in trace.values[name]
            ]
            if got != list(expected[name]):
                t = next(
                    t for t, (a, b) in enumerate(zip(got, expected[name], strict=True)) if a != b
                )
                case.note(
                    "disagree",
                    "interpret-vs-naive",
                    kind="interpreter differs from the naive evaluator",
                    message=f"{name} at t={t} on {' '.join(tokens)!r}: interpreter {shorten(got[t], 60)}, "
                    f"naive {shorten(expected[name][t], 60)}",
                )
                return


# ====================================================================== pcoc

PCOC_POOL = [
    "recv",
    "send",
    "from",
    "to",
    "default",
    "round",
    "for",
    "in",
    "..",
    "if",
    "else",
    "margin",
    "bound",
    "input",
    "slot",
    "output",
    "{",
    "}",
    "(",
    ")",
    "=",
    "==",
    "<",
    ">=",
    "+",
    "-",
    "*",
    "**",
    "div",
    "%",
    "i",
    "n",
    "r",
    "k",
    "x",
    "0",
    "1",
    "2**k",
    "2**1024",
    "10**400",
    "1e308",
    "1e309",
    "1e-400",
    "0.5",
    "clamp(x, -1, 1e300)",
    "abs(",
    "relu(",
    "min(",
    "max(",
    "log2(",
    "ceil_log2(",
    "\n",
    ";",
    "//",
    "not",
    "and",
    "or",
    *UNICODE_POOL[:8],
]


@cache
def pcoc_corpus() -> list[tuple[str, str]]:
    paths = sorted((ROOT / "examples" / "pcoc").glob("*.pcoc")) + sorted(
        (ROOT / "examples" / "pcoc_sends").glob("*.pcoc")
    )
    return [(p.name, p.read_text(encoding="utf-8")) for p in paths]


def _pcoc_random(rng: random.Random) -> str:
    """A random (mostly valid) PCOC program."""
    bound = rng.choice(["1e6", "1e9", "100"])
    two = rng.random() < 0.3
    lines = [f"input x bound {bound}"]
    if two:
        lines.append(f"input y bound {bound}")
    lines.append(f"slot s bound {rng.choice(['1e6', '1e9', '1e12'])}")
    lines.append("output x, s" if rng.random() < 0.7 else "output s")
    patterns = [
        "i - 1",
        "i + 1",
        "n - 1 - i",
        "(i + 1) % n",
        "i div 2",
        "2 * i",
        "i",
        "0",
        "i - 2**k",
        "(i + n div 3) % n",
    ]
    exprs = [
        "x + t",
        "x - t",
        "2 * x",
        "0.5 * x",
        "min(x, t)",
        "max(x, t)",
        "abs(x - t)",
        "relu(x - t)",
        "clamp(x, -3, 3)",
        "x if x > t margin 0.5 else t",
        "x > t margin 0.5",
        "x + i",
        "s + t",
        "-x",
    ]
    body_rounds = []
    for _ in range(rng.randint(1, 3)):
        looped = rng.random() < 0.4
        pattern = rng.choice(patterns if looped else [p for p in patterns if "k" not in p])
        stmts = [
            f"t = recv {rng.choice(['x', 's'])} from {pattern} default {rng.choice(['0', '-1e6', '1e6', '0.5'])}"
        ]
        if two and rng.random() < 0.5:
            stmts.append("u = recv y from i - 1 default 0")
            stmts.append("x = x + u")
        target = rng.choice(["x", "s"])
        stmts.append(f"{target} = {rng.choice(exprs)}")
        if rng.random() < 0.4:
            cond = rng.choice(["i % 2 == 0", "(i + r) % 2 == 1", "i >= 1", "x > 0 margin 0.5"])
            stmts = [*stmts[:1], f"if {cond} {{ " + "; ".join(stmts[1:]) + " } else { s = s - 1 }"]
        round_text = "round {\n  " + "\n  ".join(stmts) + "\n}"
        if looped:
            stop = rng.choice(["ceil_log2(n)", "2", "n", "0"])
            round_text = f"for k in 0 .. {stop} {{\n{round_text}\n}}"
        body_rounds.append(round_text)
    return "\n".join(lines + body_rounds) + "\n"


def _pcoc_hostile(rng: random.Random) -> str:
    choices = [
        "input x bound 1e9\noutput x\nround {\n  t = recv x from i - 2**1024 default 0\n  x = x + t\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = clamp(x, -1, 1e300)\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = x + 2**1024\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = x * 10**400\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = 1e308 * x + 1e308\n}\n",
        "input x bound 1e400\noutput x\nround {\n  t = recv x from i - 1 default 0\n  x = t\n}\n",
        "input x bound 1e9\noutput x\nround {\n  t = recv x from i - 1 default 1e309\n  x = min(x, t)\n}\n",
        "input x bound 1e9\noutput x\nfor k in 0 .. 10**9 {\n round {\n  x = x + 1\n }\n}\n",
        "input x bound 1e9\noutput x\nfor k in 0 .. n**n**n {\n round {\n  x = x\n }\n}\n",
        "input x bound 1e9\noutput x\nfor k in 0 .. 2000 {\n round {\n  t = recv x from i - 1 default 0\n  x = max(x, t)\n }\n}\n",
        "input x bound 1e9\noutput x\nround {\n  t = recv x from i div 0 default 0\n  x = t\n}\n",
        "input x bound 1e9\noutput x\nround {\n  t = recv x from i % 0 default 0\n  x = t\n}\n",
        "input x bound 1e9\noutput x\nround {\n  t = recv x from log2(0) default 0\n  x = t\n}\n",
        "input x bound 1e9\noutput x\nround {\n  t = recv x from 2**-1 default 0\n  x = t\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = " + "(" * 300 + "x" + ")" * 300 + "\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = " + "-" * 500 + "x\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = x if x > 0 margin 0 else -x\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = x if x > 0 margin 1e300 else -x\n}\n",
        "input x bound 1e-300\noutput x\nround {\n  x = x if x > 0 margin 1e-300 else -x\n}\n",
        "input x bound 1e9\nslot y bound 1e9 = 1e400\noutput y\nround {\n  y = y + x\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = x + "
        + "9" * rng.choice([400, 4301, 5000])
        + "\n}\n",
        "input x bound 1e9\noutput x\nround {\n  t = recv x from i - "
        + "9" * 5000
        + " default 0\n  x = t\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = 0.5 ** 2000 * x\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = x ** 2\n}\n",
        "input x bound 1e9\ninput x bound 1\noutput x\nround { x = x }\n",
        "input x bound 1e9\noutput x, x\nround { x = x }\n",
        "input i bound 1e9\noutput i\nround { i = i }\n",
        "input x bound 1e9\ninput d bound 1e6\noutput x\nround {\n  got = send x to d default 0\n  x = got + 2**1024\n}\n",
        "input x bound 1e9\ninput d bound 1e300\noutput x\nround {\n  got = send x to d default 0\n  x = got\n}\n",
        "input x bound 1e9\noutput x\n"
        + "round { t = recv x from i - 1 default 0; x = x + t }\n" * rng.choice([50, 300]),
        "output x\nslot x bound 1\nround { x = n }\n",
        "input x\noutput x\nround { t = recv x from i - 1 default 0; x = t }\n",
    ]
    return rng.choice(choices)


def pcoc_text(rng: random.Random) -> tuple[str, dict]:
    roll = rng.random()
    if roll < 0.35:
        name, text = rng.choice(pcoc_corpus())
        count = rng.choice([1, 1, 2, 3])
        text, described = mutate_tokens(text, rng, PCOC_POOL, count)
        return text, {"kind": "mutation", "base": name, "mutations": described}
    if roll < 0.55:
        name, text = rng.choice(pcoc_corpus())
        return text, {"kind": "example", "base": name}
    if roll < 0.85:
        return _pcoc_random(rng), {"kind": "random"}
    return _pcoc_hostile(rng), {"kind": "hostile"}


def _pcoc_inputs(rng: random.Random, program, n: int, inside: bool):
    """Input vectors (k, n): small values (inside) or some beyond a declared bound."""
    import numpy as np

    k = len(program.inputs)
    values = np.zeros((k, n))
    for row, name in enumerate(program.inputs):
        bound = program.slot(name).bound
        scale = min(bound if bound is not None else 100.0, 100.0)
        if name == "d":  # destinations of sends: a partial permutation
            perm = list(range(n))
            rng.shuffle(perm)
            values[row] = [p if rng.random() < 0.85 else rng.choice([-1, n, n + 5]) for p in perm]
            continue
        if rng.random() < 0.5:
            values[row] = [rng.randint(-int(scale), int(scale)) for _ in range(n)]
        else:
            values[row] = [rng.uniform(-scale, scale) for _ in range(n)]
        if not inside and bound is not None and math.isfinite(bound):
            j = rng.randrange(n)
            values[row, j] = rng.choice([1.5, 10.0, 1e6]) * bound * rng.choice([1, -1])
    return values


def _pcoc_agree(a, b, tol: float) -> bool:
    import numpy as np

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    same = (a == b) | (np.isnan(a) & np.isnan(b))  # equal infinities agree
    with np.errstate(invalid="ignore", over="ignore"):
        scale = np.maximum(1.0, np.maximum(np.abs(a), np.abs(b)))
        close = np.abs(a - b) <= 1e-6 * scale + tol
    return bool(np.all(same | close))


def fuzz_pcoc(case: Case, rng: random.Random) -> None:
    import warnings

    import numpy as np

    from crasp_compiler.errors import CraspError
    from crasp_compiler.languages.pcoc.compile import compile_pcoc, run_pcoc
    from crasp_compiler.languages.pcoc.interpret import check_pcoc, interpret_pcoc
    from crasp_compiler.languages.pcoc.parse import parse_pcoc

    text, how = pcoc_text(rng)
    case.repro.update(how)
    case.repro["text"] = shorten(text)
    ok, program = case.attempt("parse", parse_pcoc, text, "fuzz.pcoc")
    if not ok:
        return
    sends = "send" in text
    n = rng.choice([1, 2, 3, 4, 5, 7, 8] if not sends else [1, 2, 4, 5, 8])
    if rng.random() < 0.1:
        n = rng.choice([16, 33])
    case.repro["n"] = n
    if case.dry:
        return
    ok, _ = case.attempt("check", check_pcoc, program, n)
    if not ok:
        return
    mode = "softmax" if rng.random() < 0.2 else "hard"
    tolerance = rng.choice([1e-6, 1e-3]) if mode == "softmax" else 0.0
    case.repro["mode"] = mode
    ok, model = case.attempt(
        f"compile-{mode}", compile_pcoc, program, n, mode=mode, tolerance=tolerance or 1e-6
    )
    if not ok:
        # the interpreter still has to run (or refuse) cleanly
        vectors = _pcoc_inputs(rng, program, n, True)
        case.attempt("interpret", interpret_pcoc, program, n, vectors)
        return
    runtimes = ["numpy"] + (["torch"] if rng.random() < 0.1 else [])
    for trial in range(4):
        inside = trial < 3
        vectors = _pcoc_inputs(rng, program, n, inside)
        label = "inside" if inside else "outside"
        try:
            expected = interpret_pcoc(program, n, vectors, check_promises=True)
            promised = True
            case.ran.append(f"interpret-{label}-promised")
        except SlowCase:
            raise
        except CraspError:
            promised = False
            ok, expected = case.attempt(f"interpret-{label}", interpret_pcoc, program, n, vectors)
            if not ok:
                if case.findings and case.findings[-1].cls == "refused":
                    case.findings.pop()  # an input the reference itself refuses: nothing to compare
                continue
        except Exception as err:
            case.note("traceback", f"interpret-{label}", f"{type(err).__name__}: {err}", err)
            continue
        for runtime in runtimes:
            step = f"run-{runtime}-{mode}-{label}"
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    got = run_pcoc(model, [vectors], runtime=runtime)
            except SlowCase:
                raise
            except CraspError:
                continue  # a clean refusal (e.g. an input outside its bound)
            except Exception as err:
                case.note("traceback", step, f"{type(err).__name__}: {err}", err)
                continue
            case.ran.append(step)
            # a warning addressed to the user (not numpy's overflow RuntimeWarning)
            warned = any(
                not issubclass(w.category, RuntimeWarning | DeprecationWarning) for w in caught
            )
            # within the bound the model records against the interpreter (softmax: its
            # tolerance, rounding included)
            stated = model.guarantee.errors.get("float64", 0.0)
            for name in program.outputs:
                slack = stated
                if _pcoc_agree(expected.outputs[name], got[name][0], slack):
                    continue
                message = (
                    f"slot {name} on inputs {np.array2string(vectors, precision=6, separator=',')}: "
                    f"interpreter {np.array2string(np.asarray(expected.outputs[name]), precision=9, separator=',')}, "
                    f"model {np.array2string(got[name][0], precision=9, separator=',')}"
                )
                if not inside and not warned:
                    case.note(
                        "disagree",
                        step,
                        message,
                        kind="input outside its declared bound: no refusal or warning",
                    )
                elif inside and promised:
                    case.note("disagree", step, message, kind="covered input")
                elif inside and not warned:
                    case.note("uncovered", step, message, kind="a promise of the program is broken")
                break


# ====================================================================== shared model cache


@cache
def workdir() -> Path:
    path = Path(tempfile.mkdtemp(prefix="crasp-fuzz-"))
    return path


@cache
def base_models() -> dict[str, dict]:
    """Models compiled from a few examples, saved once per worker:
    name -> {path, input (argv for run), kind}."""
    from crasp_compiler import load_program
    from crasp_compiler.languages.crasp.compile import compile_program
    from crasp_compiler.languages.pcoc.compile import compile_pcoc
    from crasp_compiler.languages.pcoc.parse import load_pcoc
    from crasp_compiler.model import save_model

    out = {}
    specs = [
        ("dyck1", "examples/crasp/dyck1.cr", dict(mode="heaviside"), "( ( ) )"),
        ("c_near_a_ln", "examples/crasp/c_near_a.cr", dict(mode="layernorm"), None),
        ("aa_star_relu8", "examples/crasp/aa_star.crasp", dict(mode="relu", max_len=8), None),
    ]
    for name, path, options, line in specs:
        program = load_program(ROOT / path)
        model = compile_program(program, **options)
        target = workdir() / f"{name}.npz"
        save_model(model, target)
        if line is None:
            line = " ".join(program.alphabet[k % len(program.alphabet)] for k in range(4))
        out[name] = {"path": target, "input": line, "kind": "crasp", "alphabet": program.alphabet}
    pcoc_specs = [
        ("cumsum4", "examples/pcoc/cumsum.pcoc", 4, "hard"),
        ("sort4_softmax", "examples/pcoc/sort.pcoc", 4, "softmax"),
        ("permute8", "examples/pcoc_sends/permute.pcoc", 8, "hard"),  # sparse matrices
    ]
    for name, path, n, mode in pcoc_specs:
        program = load_pcoc(ROOT / path)
        model = compile_pcoc(program, n, mode=mode)
        target = workdir() / f"{name}.npz"
        save_model(model, target)
        vectors = workdir() / f"{name}.txt"
        if name == "permute8":
            vectors.write_text(
                " ".join(str(v) for v in range(n))
                + " "
                + " ".join(str((v + 3) % n) for v in range(n))
                + "\n"
            )
        else:
            vectors.write_text(" ".join(str(v * 3 - 5) for v in range(n)) + "\n")
        out[name] = {"path": target, "input": str(vectors), "kind": "pcoc", "n": n, "program": path}
    return out


# ====================================================================== inputs

HOSTILE_TOKENS = [
    "(())",
    "ε",
    "<bos>",
    "BOS",
    '""',
    '"("',
    "a",
    "((",
    "\u2212",
    "\x00",
    "\ufeff",
    "\u202e(",
    "🙂",
    "\u0301",
    "(\u0301",
    "//",
    "#",
    "\ud800",
    "\udcff",
]


def _input_line(rng: random.Random, alphabet: tuple[str, ...]) -> str:
    kind = rng.randrange(10)
    if kind == 0:
        return rng.choice(
            [
                "",
                " ",
                "\t",
                "\n",
                "//",
                "// comment",
                "ε",
                "(())",
                "\u3000",
                "\u2028",
                "\x85",
                "\x00",
                "<bos>",
            ]
        )
    if kind == 1:  # very long
        n = rng.choice([1000, 10_000, 50_000, 200_000])
        return " ".join(rng.choice(alphabet) for _ in range(n))
    if kind == 2:  # very long single token
        return rng.choice(alphabet) * rng.choice([1000, 100_000])
    if kind == 3:
        return "".join(random_unicode(rng) for _ in range(rng.randint(1, 30)))
    tokens = [rng.choice(alphabet) for _ in range(rng.randint(0, 12))]
    if kind >= 7:  # a clean line over the alphabet (both commands must answer alike)
        return rng.choice([" ", "  ", "\t"]).join(tokens)
    for _ in range(rng.randint(1, 3)):
        tokens.insert(
            rng.randint(0, len(tokens)), rng.choice([*HOSTILE_TOKENS, random_unicode(rng)])
        )
    sep = rng.choice([" ", "  ", "\t", "\u3000", "\u00a0", "\u2009", " \r "])
    return sep.join(tokens)


def _stdin_bytes(rng: random.Random, lines: list[str]) -> bytes:
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    kind = rng.randrange(6)
    if kind == 0:
        bad = rng.choice(
            [b"\xff", b"\xc3\x28", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80"]
        )
        pos = rng.randint(0, len(data))
        data = data[:pos] + bad + data[pos:]
    elif kind == 1:
        data = data.replace(b"\n", b"\r\n")
    elif kind == 2:
        data = b"\xef\xbb\xbf" + data
    elif kind == 3:
        data = data + b"\x00" * rng.randint(1, 5)
    return data


def _vector_line(rng: random.Random, n: int) -> str:
    words = [str(rng.randint(-9, 9)) for _ in range(n)]
    for _ in range(rng.randint(0, 3)):
        bad = rng.choice(
            [
                "1e999",
                "-1e999",
                "nan",
                "inf",
                "0x10",
                "1_000",
                "١٢",
                "\u22121",
                "+-1",
                "1e-400",
                "9" * 5000,
                "1.",
                ".5",
                "1e",
                "",
                "ε",
                "\x00",
                "1e308",
                "-0",
            ]
        )
        words[rng.randrange(n)] = bad
    if rng.random() < 0.2:
        words = words[: rng.randint(0, n)] + words[: rng.randint(0, 3)]
    return rng.choice([" ", "\t", "  "]).join(words)


def fuzz_inputs(case: Case, rng: random.Random) -> None:
    models = base_models()
    if rng.random() < 0.25:
        return _fuzz_pcoc_inputs(case, rng, models)
    name = rng.choice(["dyck1", "dyck1", "c_near_a_ln", "aa_star_relu8"])
    info = models[name]
    program = {
        "dyck1": "examples/crasp/dyck1.cr",
        "c_near_a_ln": "examples/crasp/c_near_a.cr",
        "aa_star_relu8": "examples/crasp/aa_star.crasp",
    }[name]
    lines = [_input_line(rng, info["alphabet"]) for _ in range(rng.choice([1, 1, 3]))]
    via = rng.choice(["argv", "stdin", "stdin"])
    flags = [
        f
        for f in ("--trace", "--outputs", "--float32", "--beyond-guarantee warn")
        if rng.random() < 0.12
    ]
    if any(len(line) > 20000 for line in lines):
        flags = [f for f in flags if f not in ("--trace", "--outputs")]
    case.repro.update(
        {
            "model": name,
            "program": program,
            "via": via,
            "flags": flags,
            "lines": [shorten(repr(x), 300) for x in lines],
        }
    )
    argv = [lines[0]] if via == "argv" else []
    stdin = _stdin_bytes(rng, lines) if via == "stdin" else None
    if stdin is not None:
        case.repro["stdin"] = shorten(repr(stdin), 400)
    interp_flags = [f for f in flags if f in ("--trace", "--outputs")]
    run_flags = [w for f in flags for w in f.split()]
    if case.dry:
        return None
    if rng.random() < 0.04:  # a real process: argv bytes, real stdout encoding
        return _subprocess_inputs(
            case,
            ["interpret", program, *interp_flags],
            ["run", str(info["path"]), *run_flags],
            argv,
            stdin,
        )
    c1, r1 = invoke(case, "interpret", ["interpret", program, *interp_flags, *argv], stdin)
    c2, r2 = invoke(case, "run", ["run", str(info["path"]), *run_flags, *argv], stdin)
    if c1 == "ok" and c2 == "ok" and not flags and r1.stdout.split() != r2.stdout.split():
        case.note(
            "disagree",
            "interpret-vs-run",
            f"interpret printed {shorten(r1.stdout, 200)!r}, run printed {shorten(r2.stdout, 200)!r}",
        )


def _subprocess_inputs(
    case: Case, interp: list[str], run: list[str], argv: list[str], stdin: bytes | None
) -> None:
    case.repro["subprocess"] = True
    exe = [sys.executable, "-c", "from crasp_compiler.cli import main; main()"]
    outputs = []
    for step, args in (("interpret(subprocess)", interp), ("run(subprocess)", run)):
        full = [
            *exe,
            *args,
            # argv holds bytes: a lone surrogate becomes invalid UTF-8 (surrogatepass), and
            # a NUL, which no argument can hold, is dropped
            *(x.encode("utf-8", "surrogatepass").replace(b"\0", b"") for x in argv),
        ]
        proc = run_child(case, step, full, stdin if stdin is not None else b"")
        if proc is None:
            continue
        text = (proc.stdout + proc.stderr).decode("utf-8", "replace")
        if proc.returncode < 0:
            case.note("crash", step, f"killed by signal {-proc.returncode}: {text[-300:]}")
        elif "Traceback (most recent call last)" in text:
            case.note("traceback", step, text[-1200:])
        elif proc.returncode == 0:
            outputs.append(proc.stdout.split())
        elif proc.returncode in (1, 2) and text.strip():
            case.note("refused", step, text.strip().splitlines()[-1])
        else:
            case.note("traceback", step, f"exit status {proc.returncode}: {text[-300:]}")
    if (
        len(outputs) == 2
        and "--trace" not in interp
        and "--outputs" not in interp
        and len(run) == 2
        and outputs[0] != outputs[1]
    ):
        case.note(
            "disagree", "interpret-vs-run(subprocess)", f"{outputs[0][:20]} vs {outputs[1][:20]}"
        )


def _fuzz_pcoc_inputs(case: Case, rng: random.Random, models: dict) -> None:
    name = rng.choice(["cumsum4", "sort4_softmax", "permute8"])
    info = models[name]
    n = info["n"]
    width = 2 * n if name == "permute8" else n
    lines = [_vector_line(rng, width) for _ in range(rng.choice([1, 2, 4]))]
    if rng.random() < 0.1:
        lines.append(" ".join("1" for _ in range(rng.choice([10_000, 100_000]))))
    data = _stdin_bytes(rng, lines)
    case.repro.update(
        {"model": name, "program": info["program"], "stdin": shorten(repr(data), 500)}
    )
    via_file = rng.random() < 0.3
    case.repro["via"] = "file" if via_file else "stdin"
    if case.dry:
        return
    args_in = []
    stdin = data
    if via_file:
        path = workdir() / "vectors.txt"
        path.write_bytes(data)
        args_in, stdin = [str(path)], None
    c1, r1 = invoke(
        case, "interpret-pcoc", ["interpret", info["program"], "--n", str(n), *args_in], stdin
    )
    c2, r2 = invoke(case, "run-pcoc", ["run", str(info["path"]), *args_in], stdin)
    if c1 == "ok" and c2 == "ok":
        a, b = r1.stdout.split("\n"), r2.stdout.split("\n")
        try:
            va = [[float(x) for x in line.split()] for line in a if line.strip()]
            vb = [[float(x) for x in line.split()] for line in b if line.strip()]
        except ValueError:
            case.note(
                "disagree",
                "interpret-vs-run-pcoc",
                f"unparsable output {shorten(r1.stdout, 200)!r} / {shorten(r2.stdout, 200)!r}",
            )
            return
        tol = 2e-6 if "softmax" in name else 0.0
        if len(va) != len(vb) or any(
            len(x) != len(y) or not _pcoc_agree(x, y, tol) for x, y in zip(va, vb, strict=False)
        ):
            case.note(
                "disagree",
                "interpret-vs-run-pcoc",
                f"interpret {shorten(r1.stdout, 300)!r} vs run {shorten(r2.stdout, 300)!r}",
            )


# ====================================================================== models


def _npz_members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {info.filename: archive.read(info.filename) for info in archive.infolist()}


def _npy(array, allow_pickle: bool = False) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.asanyarray(array), allow_pickle=allow_pickle)
    return buffer.getvalue()


def _load_npy(data: bytes):
    import numpy as np

    return np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)


def _write_npz(path: Path, members: dict[str, bytes], compress: set[str] = frozenset()) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            kind = zipfile.ZIP_DEFLATED if name in compress else zipfile.ZIP_STORED
            archive.writestr(zipfile.ZipInfo(name), data, compress_type=kind)


def _json_paths(node, prefix=()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _json_paths(v, (*prefix, k))
    elif isinstance(node, list):
        for k, v in enumerate(node[:6]):
            out += _json_paths(v, (*prefix, k))
    return out


def _set_path(node, path, value):
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        if isinstance(node, dict):
            del node[path[-1]]
        else:
            node.pop(path[-1])
    else:
        node[path[-1]] = value


_DELETE = object()
DEEP = "__DEEP__"


def _hostile_json(rng: random.Random):
    return rng.choice(
        [
            None,
            True,
            False,
            0,
            -1,
            1.5,
            "x",
            "",
            [],
            {},
            [1, 2],
            {"a": 1},
            1e308,
            -1e308,
            float("nan"),
            float("inf"),
            10**400,
            2**63,
            -(2**63) - 1,
            "9" * 5000,
            "\u0000",
            "\ud800",
            "<bos>",
            "x" * 100_000,
            DEEP,
        ]
    )


def _dump_header(header) -> str:
    text = json.dumps(header, allow_nan=True)
    if DEEP in text:
        depth = 100_000
        text = text.replace(json.dumps(DEEP), "[" * depth + "]" * depth, 1)
    return text


def _header_lie(rng: random.Random, header: dict, base: dict, models: dict) -> str:
    """Plausible-looking but false header content; returns a description."""
    lies = [
        ("guarantee.max_len=None", lambda h: h["guarantee"].__setitem__("max_len", None)),
        ("guarantee.max_len=10**30", lambda h: h["guarantee"].__setitem__("max_len", 10**30)),
        ("guarantee.max_len=-1", lambda h: h["guarantee"].__setitem__("max_len", -1)),
        ("guarantee.max_len=True", lambda h: h["guarantee"].__setitem__("max_len", True)),
        (
            "guarantee.dtypes={float32: 10**9}",
            lambda h: h["guarantee"].__setitem__("dtypes", {"float32": 10**9}),
        ),
        (
            "guarantee.dtypes={float16: 3}",
            lambda h: h["guarantee"].__setitem__("dtypes", {"float16": 3}),
        ),
        (
            "guarantee.input_bounds={x: -1}",
            lambda h: h["guarantee"].__setitem__("input_bounds", {"x": -1}),
        ),
        (
            "guarantee.input_bounds={x: 1e-300}",
            lambda h: h["guarantee"].__setitem__("input_bounds", {"x": 1e-300}),
        ),
        ("options.mode=relu", lambda h: h["options"].__setitem__("mode", "relu")),
        (
            "options.mode=heaviside,max_len=None",
            lambda h: h["options"].update(mode="heaviside", max_len=None),
        ),
        ("options=None", lambda h: h.__setitem__("options", None)),
        ("info.language=PCOC", lambda h: h["info"].__setitem__("language", "PCOC")),
        ("info.language=PCOC,n='x'", lambda h: h["info"].update(language="PCOC", n="x")),
        ("info.language=PCOC,n=10**9", lambda h: h["info"].update(language="PCOC", n=10**9)),
        ("info.language=PCOC,n=0", lambda h: h["info"].update(language="PCOC", n=0)),
        ("info.n=-3", lambda h: h["info"].__setitem__("n", -3)),
        ("info.n=[1]", lambda h: h["info"].__setitem__("n", [1])),
        ("info.language=C-RASP", lambda h: h["info"].__setitem__("language", "C-RASP")),
        ("info=None", lambda h: h.__setitem__("info", None)),
        ("info.theorem=5", lambda h: h["info"].__setitem__("theorem", 5)),
        ("info.benes='x'", lambda h: h["info"].__setitem__("benes", "x")),
        ("info.temperature='hot'", lambda h: h["info"].__setitem__("temperature", "hot")),
        (
            "source=other example",
            lambda h: h.__setitem__("source", (ROOT / "examples/crasp/majority.crasp").read_text()),
        ),
        ("source=garbage", lambda h: h.__setitem__("source", "A = = =\x00")),
        (
            "source=dyck with outputs renamed",
            lambda h: h.__setitem__(
                "source", (ROOT / "examples/crasp/dyck1.cr").read_text().replace("D =", "E =")
            ),
        ),
        ("vocab duplicated", lambda h: h.__setitem__("vocab", h["vocab"] + h["vocab"][1:2])),
        ("vocab without BOS", lambda h: h.__setitem__("vocab", [*h["vocab"][1:], "zz"])),
        ("vocab ints", lambda h: h.__setitem__("vocab", ["<bos>", *range(1, len(h["vocab"]))])),
        (
            "vocab with ''/space",
            lambda h: h.__setitem__("vocab", ["<bos>", "", " ", *h["vocab"][3:]]),
        ),
        ("vocab [<bos>,<bos>...]", lambda h: h.__setitem__("vocab", ["<bos>"] * len(h["vocab"]))),
        ("residual +1", lambda h: h["residual"].append("extra")),
        ("residual -1", lambda h: h["residual"].pop()),
        (
            "accept=count output",
            lambda h: (
                h.__setitem__("accept", h["outputs"][0]["name"])
                or h["outputs"][0].__setitem__("rule", "count")
            ),
        ),
        ("accept=missing", lambda h: h.__setitem__("accept", "nope")),
        ("outputs rule=value", lambda h: [o.__setitem__("rule", "value") for o in h["outputs"]]),
        (
            "outputs duplicated names",
            lambda h: [o.__setitem__("name", "same") for o in h["outputs"]],
        ),
        ("outputs name=int", lambda h: h["outputs"][0].__setitem__("name", 5)),
        ("features += onehot:10**12", lambda h: h["features"].append("onehot:1000000000000")),
        ("features += periodic:0:0", lambda h: h["features"].append("periodic:0:0")),
        ("features += ao:x", lambda h: h["features"].append("ao:1:2:3:4")),
        ("features = [index^9]", lambda h: h.__setitem__("features", ["index^9"])),
        ("inputs = ['x','x']", lambda h: h.__setitem__("inputs", ["x", "x"])),
        ("inputs = [5]", lambda h: h.__setitem__("inputs", [5])),
        ("inputs = []", lambda h: h.__setitem__("inputs", [])),
        ("version=2", lambda h: h.__setitem__("version", 2)),
        ("version=1.0", lambda h: h.__setitem__("version", 1.0)),
        ("version=True", lambda h: h.__setitem__("version", True)),
    ]
    layer_lies = [
        ("head bias {'x': 1}", lambda hd: hd.__setitem__("bias", {"x": 1})),
        ("head bias {10**30: 1}", lambda hd: hd.__setitem__("bias", {str(10**30): 1.0})),
        ("head bias {-5: 1e308}", lambda hd: hd.__setitem__("bias", {"-5": 1e308})),
        ("head bias {1: NaN}", lambda hd: hd.__setitem__("bias", {"1": float("nan")})),
        ("head bias [1,2]", lambda hd: hd.__setitem__("bias", [1, 2])),
        ("head bias {'1': '2'}", lambda hd: hd.__setitem__("bias", {"1": "2"})),
        ("head scale 1e308", lambda hd: hd.__setitem__("scale", 1e308)),
        ("head scale '1e400'", lambda hd: hd.__setitem__("scale", "1e400")),
        ("head scale True", lambda hd: hd.__setitem__("scale", True)),
        ("head scale 1e-320", lambda hd: hd.__setitem__("scale", 1e-320)),
        ("head weighting hard-left", lambda hd: hd.__setitem__("weighting", "hard-left")),
        ("head weighting max", lambda hd: hd.__setitem__("weighting", "max")),
        ("head mask none", lambda hd: hd.__setitem__("mask", "none")),
        ("head mask strict-past", lambda hd: hd.__setitem__("mask", "strict-past")),
        ("head label 5", lambda hd: hd.__setitem__("label", 5)),
    ]
    mlp_lies = [
        (
            "mlp activations gelu",
            lambda m: m.__setitem__("activations", ["gelu"] * len(m["activations"])),
        ),
        ("mlp activations +1", lambda m: m["activations"].append("relu")),
        ("mlp activations []", lambda m: m.__setitem__("activations", [])),
        ("mlp norm_groups [[0,0]]", lambda m: m.__setitem__("norm_groups", [[0, 0]])),
        ("mlp norm_groups [[10**9]]", lambda m: m.__setitem__("norm_groups", [[10**9]])),
        ("mlp norm_groups [[True]]", lambda m: m.__setitem__("norm_groups", [[True]])),
        (
            "mlp norm_groups all",
            lambda m: m.__setitem__("norm_groups", [list(range(len(m["activations"])))]),
        ),
        ("mlp labels 5", lambda m: m.__setitem__("labels", 5)),
        ("mlp = []", None),
    ]
    roll = rng.random()
    heads = [hd for layer in header.get("layers", []) for hd in layer.get("heads", [])]
    mlps = [layer for layer in header.get("layers", []) if layer.get("mlp")]
    if roll < 0.5 or (not heads and not mlps):
        name, fn = rng.choice(lies)
        fn(header)
        return name
    if roll < 0.75 and heads:
        name, fn = rng.choice(layer_lies)
        fn(rng.choice(heads))
        return name
    if mlps:
        name, fn = rng.choice(mlp_lies)
        layer = rng.choice(mlps)
        if fn is None:
            layer["mlp"] = []
        else:
            fn(layer["mlp"])
        return name
    return "none"


def _array_mutation(rng: random.Random, members: dict[str, bytes]) -> str:
    import numpy as np

    names = [m for m in members if m.endswith(".npy") and m != "header.npy"]
    target = rng.choice(names)
    array = _load_npy(members[target])
    label = target[:-4]
    sparse_parts = [m for m in names if m.endswith(".indptr.npy") or m.endswith(".indices.npy")]
    kind = rng.randrange(12)
    if kind <= 5 and sparse_parts:
        target = rng.choice(sparse_parts)
        label = target[:-4]
        array = _load_npy(members[target])
        choice = rng.choice(
            [
                "uint64",
                "uint64-huge",
                "uint64-nonmonotone",
                "uint64-nonmonotone",
                "int64-nonmonotone",
                "int32",
                "float",
                "negative",
                "out-of-range",
                "decreasing",
                "short",
                "2d",
                "int8",
                "overflow-last",
            ]
        )
        if choice == "uint64":
            new = array.astype(np.uint64)
        elif choice == "uint64-huge":
            new = array.astype(np.uint64)
            new[rng.randrange(len(new))] = np.uint64(2**64 - 1 - rng.randrange(3))
        elif choice.endswith("nonmonotone") and len(array) >= 3:
            # a middle entry above the next one: np.diff of uint64 wraps around
            new = array.astype(np.uint64 if choice.startswith("uint64") else np.int64)
            k = rng.randrange(1, len(array) - 1)
            new[k] = rng.choice([int(new[k + 1]) + 1, 2**62, 2**63 + 5]) % (
                2**64 if choice.startswith("uint64") else 2**63
            )
        elif choice == "int32":
            new = array.astype(np.int32)
        elif choice == "float":
            new = array.astype(np.float64) + 0.5
        elif choice == "negative":
            new = array.copy()
            new[rng.randrange(len(new))] = -rng.choice([1, 2**62, 2**63 - 1])
        elif choice == "out-of-range":
            new = array.copy()
            new[rng.randrange(len(new))] = rng.choice([10**6, 2**31, 2**62])
        elif choice == "decreasing":
            new = array[::-1].copy()
        elif choice == "short":
            new = array[: max(0, len(array) - rng.randint(1, 3))]
        elif choice == "2d":
            new = array.reshape(1, -1)
        elif choice == "int8":
            new = array.astype(np.int8)
        else:
            new = array.copy()
            new[-1] = np.iinfo(np.int64).max
        members[target] = _npy(new)
        return f"{label}: {choice}"
    choice = rng.choice(
        [
            "int64",
            "uint64",
            "float32",
            "float16",
            "complex",
            "bool",
            "str",
            "object",
            "transpose",
            "flat",
            "3d",
            "empty",
            "nan",
            "inf",
            "1e308",
            "1e200",
            "subnormal",
            "fortran",
            "bigendian",
            "0d",
        ]
    )
    if choice in ("int64", "uint64", "float32", "float16", "bool"):
        new = array.astype(choice)
    elif choice == "complex":
        new = array.astype(np.complex128)
    elif choice == "str":
        new = array.astype(str)
    elif choice == "object":
        members[target] = _npy(array.astype(object), allow_pickle=True)
        return f"{label}: object (pickled)"
    elif choice == "transpose":
        new = array.T.copy()
    elif choice == "flat":
        new = array.ravel()
    elif choice == "3d":
        new = array[None]
    elif choice == "empty":
        new = np.zeros((0, *array.shape[1:]))
    elif choice == "0d":
        new = np.array(1.0)
    elif choice == "fortran":
        new = np.asfortranarray(array)
    elif choice == "bigendian":
        new = array.astype(">f8")
    else:
        new = array.astype(np.float64).copy()
        if new.size:
            value = {
                "nan": np.nan,
                "inf": np.inf,
                "1e308": 1e308,
                "1e200": 1e200,
                "subnormal": 5e-324,
            }[choice]
            flat = new.reshape(-1)
            for _ in range(rng.randint(1, 3)):
                flat[rng.randrange(flat.size)] = value * rng.choice([1, -1])
    members[target] = _npy(new)
    return f"{label}: {choice}"


BOMB_FLOATS = 2**25  # 256 MiB of zeros


@cache
def _bomb_member() -> bytes:
    """A compressed .npy member: BOMB_FLOATS float64 zeros (256 MiB) in about 0.25 MiB."""

    import zlib

    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate, as in a zip member
    chunk = b"\0" * (1 << 22)
    parts = [compressor.compress(_npy_header_bytes())]
    for _ in range(BOMB_FLOATS * 8 // len(chunk)):
        parts.append(compressor.compress(chunk))
    parts.append(compressor.flush())
    return b"".join(parts)


def _write_with_bomb(path: Path, members: dict[str, bytes], target: str) -> None:
    """``members`` with ``target`` replaced by the pre-compressed bomb."""
    _write_npz(path, {name: data for name, data in members.items() if name != target})
    crc, size = _bomb_crc()
    _append_raw_member(path, target, _bomb_member(), crc, size)


@cache
def _npy_header_bytes() -> bytes:
    import numpy as np

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (BOMB_FLOATS,)}
    )
    return header.getvalue()


@cache
def _bomb_crc() -> tuple[int, int]:
    import zlib

    header = _npy_header_bytes()
    crc = zlib.crc32(header)
    chunk = b"\0" * (1 << 22)
    for _ in range(BOMB_FLOATS * 8 // len(chunk)):
        crc = zlib.crc32(chunk, crc)
    return crc, len(header) + BOMB_FLOATS * 8


def _append_raw_member(path: Path, name: str, payload: bytes, crc: int, size: int) -> None:
    """Rewrite the archive at ``path`` with one more member whose deflated bytes are
    ``payload`` (local header, data, then a new central directory)."""
    with zipfile.ZipFile(path) as archive:
        existing = [(info, archive.read(info.filename)) for info in archive.infolist()]
    out = io.BytesIO()
    central = []
    entries = [
        (info.filename, data, zipfile.ZIP_STORED, zlib_crc(data), len(data), len(data))
        for info, data in existing
    ]
    entries.append((name, payload, zipfile.ZIP_DEFLATED, crc, len(payload), size))
    for fname, data, method, crc32, csize, usize in entries:
        offset = out.tell()
        encoded = fname.encode("utf-8")
        out.write(
            struct.pack(
                "<4sHHHHHIIIHH",
                b"PK\x03\x04",
                20,
                0,
                method,
                0,
                0,
                crc32,
                csize,
                usize,
                len(encoded),
                0,
            )
        )
        out.write(encoded)
        out.write(data)
        central.append(
            struct.pack(
                "<4sHHHHHHIIIHHHHHII",
                b"PK\x01\x02",
                20,
                20,
                0,
                method,
                0,
                0,
                crc32,
                csize,
                usize,
                len(encoded),
                0,
                0,
                0,
                0,
                0,
                offset,
            )
            + encoded
        )
    start = out.tell()
    for entry in central:
        out.write(entry)
    end = out.tell()
    out.write(
        struct.pack(
            "<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(central), len(central), end - start, start, 0
        )
    )
    path.write_bytes(out.getvalue())


def zlib_crc(data: bytes) -> int:
    import zlib

    return zlib.crc32(data)


def mutate_model(rng: random.Random, base: dict, models: dict, target: Path) -> str:
    """Write a mutated copy of ``base``'s model file to ``target``; returns what changed."""
    import numpy as np

    raw = base["path"].read_bytes()
    roll = rng.random()
    if roll < 0.12:  # byte flips
        data = bytearray(raw)
        flips = []
        for _ in range(rng.randint(1, 8)):
            k = rng.randrange(len(data))
            value = rng.randrange(256)
            flips.append(f"@{k}={value}")
            data[k] = value
        target.write_bytes(bytes(data))
        return "byte flips " + " ".join(flips)
    if roll < 0.2:
        cut = rng.choice([0, 1, 4, 30, rng.randrange(len(raw)), len(raw) - 1, len(raw) - 22])
        target.write_bytes(raw[:cut])
        return f"truncated to {cut} of {len(raw)} bytes"
    members = _npz_members(base["path"])
    header = json.loads(str(_load_npy(members["header.npy"])))
    if roll < 0.5:
        if rng.random() < 0.55:
            what = _header_lie(rng, header, base, models)
        else:
            paths = [p for p in _json_paths(header) if p]
            path = rng.choice(paths)
            if rng.random() < 0.3:
                _set_path(header, path, _DELETE)
                what = f"delete header{list(path)}"
            else:
                value = _hostile_json(rng)
                _set_path(header, path, value)
                what = f"header{list(path)} = {shorten(repr(value), 40)}"
        members["header.npy"] = _npy(np.array(_dump_header(header)))
        _write_npz(target, members)
        return "header: " + what
    if roll < 0.62:
        choice = rng.choice(
            [
                "not-json",
                "json-list",
                "bytes",
                "2d",
                "int",
                "bom",
                "deep",
                "huge-string",
                "trailing",
                "nan",
            ]
        )
        text = json.dumps(header)
        value = {
            "not-json": np.array(text[: len(text) // 2]),
            "json-list": np.array(json.dumps([header])),
            "bytes": np.array(text.encode()),
            "2d": np.array([[text]]),
            "int": np.array(7),
            "bom": np.array("\ufeff" + text),
            "deep": np.array("[" * 100_000 + "]" * 100_000),
            "huge-string": np.array(json.dumps({**header, "source": "x" * 5_000_000})),
            "trailing": np.array(text + " garbage"),
            "nan": np.array(text.replace('"version": 1', '"version": NaN')),
        }[choice]
        members["header.npy"] = _npy(value)
        _write_npz(target, members)
        return f"header member: {choice}"
    if roll < 0.85:
        what = _array_mutation(rng, members)
        _write_npz(target, members, compress=set(members) if rng.random() < 0.3 else set())
        return "array " + what
    choice = rng.choice(
        [
            "extra",
            "extra-declared",
            "missing",
            "missing-header",
            "non-npy",
            "dotdot",
            "duplicate",
            "huge-shape",
            "bomb",
            "empty-zip",
            "dir-entry",
        ]
    )
    names = [m for m in members if m != "header.npy"]
    if choice == "extra":
        members["junk.npy"] = _npy(np.zeros(3))
    elif choice == "extra-declared":
        members["layer99.head0.w_q.npy"] = _npy(np.zeros((1, 1)))
    elif choice == "missing":
        del members[rng.choice(names)]
    elif choice == "missing-header":
        del members["header.npy"]
    elif choice == "non-npy":
        members[rng.choice(names)] = b"this is not an npy file"
    elif choice == "dotdot":
        members["../../evil.npy"] = _npy(np.zeros(2))
    elif choice == "duplicate":
        name = rng.choice(names)
        with zipfile.ZipFile(target, "w") as archive, _quiet_warnings():
            for member, data in members.items():
                archive.writestr(zipfile.ZipInfo(member), data)
            archive.writestr(zipfile.ZipInfo(name), _npy(np.zeros(1)))
        return f"members: duplicate {name}"
    elif choice == "huge-shape":
        name = rng.choice(names)
        header_bytes = io.BytesIO()
        shape = rng.choice([(2**40,), (2**31, 2**31), (10**6, 10**6)])
        np.lib.format.write_array_header_1_0(
            header_bytes, {"descr": "<f8", "fortran_order": False, "shape": shape}
        )
        members[name] = header_bytes.getvalue() + b"\0" * 64
        _write_npz(target, members)
        return f"members: {name} claims shape {shape}"
    elif choice == "bomb":
        name = rng.choice(names)
        _write_with_bomb(target, members, name)
        return f"members: {name} is a 256 MiB compressed bomb"
    elif choice == "empty-zip":
        members = {}
    elif choice == "dir-entry":
        members["dir/"] = b""
    _write_npz(target, members)
    return f"members: {choice}"


def fuzz_models(case: Case, rng: random.Random) -> None:
    models = base_models()
    name = rng.choice([*sorted(models), "permute8", "permute8"])  # permute8: sparse CSR
    base = models[name]
    target = workdir() / f"mutated-{case.index % 4}.npz"
    what = mutate_model(rng, base, models, target)
    case.repro.update({"base_model": name, "mutation": shorten(what, 300)})
    if case.dry:
        return
    if base["kind"] == "pcoc":
        run_args = ["run", str(target), base["input"]]
    else:
        run_args = ["run", str(target), base["input"]]
    invoke(case, "info", ["info", str(target)])
    invoke(case, "run", run_args)
    if rng.random() < 0.5 or base["kind"] == "crasp":
        invoke(case, "check", ["check", str(target), "--samples", "5", "--max-len", "8"])


# ====================================================================== grids

TRAIN_TYPES: dict[str, tuple] = {
    "task": (str,),
    "pe": (str,),
    "steps": (int,),
    "seed": (int,),
    "batch_size": (int,),
    "lr": (int, float),
    "weight_decay": (int, float),
    "d_model": (int,),
    "n_layers": (int, type(None)),
    "n_heads": (int,),
    "dropout": (int, float),
    "max_positions": (int, type(None)),
    "random_base": (str,),
    "warmup_steps": (int,),
    "grad_clip": (int, float, type(None)),
    "eval_every": (int,),
    "early_stop": (bool,),
    "test_size": (int,),
    "test_seed": (int,),
    "eval_batch_size": (int,),
    "bins": (list, type(None)),
    "train_max": (int, type(None)),
    "test_offsets": (bool,),
    "numeric_kind": (str,),
    "numeric_n": (int,),
    "scales": (list, tuple),
    "compare_compiled": (bool,),
    "compiled_backend": (str,),
    "compiled_mode": (str,),
    "device": (str,),
}
POSITIVE = {
    "steps",
    "batch_size",
    "d_model",
    "n_heads",
    "eval_every",
    "test_size",
    "eval_batch_size",
    "numeric_n",
    "lr",
}


def _config_problem(config: dict) -> str | None:
    """A value in an accepted run's config that training cannot use, or None."""
    for key, value in config.items():
        types = TRAIN_TYPES.get(key)
        if types is None:
            continue
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            return f"{key} = {shorten(repr(value), 60)} (expected {' or '.join(t.__name__ for t in types)})"
        if key in POSITIVE and isinstance(value, int | float) and not value > 0:
            return f"{key} = {value!r} (must be > 0)"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{key} = {value!r} (not finite)"
        if key == "dropout" and not 0 <= value < 1:
            return f"dropout = {value!r}"
        if key == "bins" and value is not None:
            ok = (
                all(
                    isinstance(b, list | tuple)
                    and len(b) == 2
                    and all(type(x) is int for x in b)
                    and 0 <= b[0] <= b[1]
                    for b in value
                )
                and value
            )
            if not ok:
                return f"bins = {shorten(repr(value), 80)}"
        if key == "scales" and not all(
            isinstance(s, int | float) and not isinstance(s, bool) and math.isfinite(s)
            for s in value
        ):
            return f"scales = {shorten(repr(value), 80)}"
        if key == "numeric_kind" and value not in ("positional", "standard"):
            return f"numeric_kind = {value!r}"
        if key == "compiled_mode" and value not in ("hard", "softmax"):
            return f"compiled_mode = {value!r}"
    return None


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string is JSON-compatible for these
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items())
            + "}"
        )
    raise TypeError(type(value))


def toml_text(spec: dict) -> str:
    """A TOML document for ``spec`` (top-level scalars, then tables, nested one level)."""
    lines = []
    tables = []
    for key, value in spec.items():
        if (
            isinstance(value, dict)
            and value
            and all(not isinstance(v, dict) for v in value.values())
        ):
            tables.append((key, value))
        elif isinstance(value, dict) and value:
            for sub, subvalue in value.items():
                if isinstance(subvalue, dict):
                    tables.append((f"{json.dumps(key)}.{json.dumps(str(sub))}", subvalue))
                else:
                    lines.append(
                        f"{json.dumps(key)}.{json.dumps(str(sub))} = {toml_value(subvalue)}"
                    )
        else:
            lines.append(f"{json.dumps(key)} = {toml_value(value)}")
    for name, table in tables:
        lines.append(
            f"\n[{name if '.' in name and name.startswith(chr(34)) else json.dumps(name)}]"
        )
        for key, value in table.items():
            lines.append(f"{json.dumps(str(key))} = {toml_value(value)}")
    return "\n".join(lines) + "\n"


def _base_grid(rng: random.Random) -> dict:
    if rng.random() < 0.5:
        return {
            "out": "runs/fuzz",
            "workers": 1,
            "base": {"steps": 10, "eval_every": 5, "test_size": 10, "bins": [[1, 10], [11, 20]]},
            "grid": {"task": ["tomita2", "d2"], "pe": ["ape", "nope"], "seed": [0, 1]},
            "task": {"d2": {"lr": 1e-4}},
        }
    return {
        "out": "runs/value",
        "workers": 1,
        "base": {"steps": 10, "numeric_n": 8, "test_size": 10},
        "grid": {
            "task": ["num_cumsum", "num_sort"],
            "numeric_kind": ["positional", "standard"],
            "seed": [0],
        },
    }


def _grid_mutation(rng: random.Random, spec: dict) -> str:
    fields_ = list(TRAIN_TYPES)
    kind = rng.randrange(10)
    if kind == 0:  # wrong type in base
        key = rng.choice(fields_)
        value = rng.choice(
            [
                "x",
                1.5,
                -1,
                0,
                True,
                [],
                [1],
                {"a": 1},
                10**30,
                float("nan"),
                float("inf"),
                "../../etc",
                "",
            ]
        )
        spec["base"][key] = value
        return f"base.{key} = {value!r}"
    if kind == 1:  # wrong grid list
        key = rng.choice(fields_)
        value = rng.choice(
            [
                [],
                "x",
                5,
                [[1]],
                [{"a": 1}],
                [None],
                ["x", 1],
                [1.5],
                ["../../../tmp/escape"],
                ["/abs"],
                ["a/../../b"],
            ]
        )
        spec["grid"][key] = value
        return f"grid.{key} = {value!r}"
    if kind == 2:  # bins
        value = rng.choice(
            [
                [[1]],
                [[5, 1]],
                [[-1, 2]],
                "abc",
                [[1, 2, 3]],
                [],
                [[0, 0]],
                [[1.5, 2]],
                [[1, 10**30]],
                [["a", "b"]],
                [[True, False]],
                [[1, 2], "x"],
            ]
        )
        spec["base"]["bins"] = value
        return f"bins = {value!r}"
    if kind == 3:  # unknown keys
        where = rng.choice(["top", "base", "grid", "task"])
        if where == "top":
            spec["surprise"] = 1
        elif where == "task":
            spec.setdefault("task", {})[rng.choice(["d2", "nope", "../x"])] = {
                rng.choice(["lr", "bogus", "out_dir"]): 1
            }
        else:
            spec[where]["bogus"] = [1] if where == "grid" else 1
        return f"unknown key in {where}"
    if kind == 4:  # out / out_dir / paths
        value = rng.choice(
            [
                "../../../../tmp/fuzz-escape",
                "/",
                "",
                ".",
                "\u0000",
                "a" * 5000,
                "~",
                123,
                True,
                [1],
                {"a": 1},
                "runs/\u202e",
                "/dev/null",
                "x/../../..",
            ]
        )
        if rng.random() < 0.7:
            spec["out"] = value
            return f"out = {value!r}"
        spec["base"]["out_dir"] = value
        return f"base.out_dir = {value!r}"
    if kind == 5:  # huge lists
        size = rng.choice([1000, 10_000, 100_000])
        key = rng.choice(["seed", "task", "lr"])
        if key == "seed":
            spec["grid"]["seed"] = list(range(size))
        elif key == "task":
            spec["grid"]["task"] = ["tomita2"] * size
        else:
            spec["grid"]["seed"] = list(range(300))
            spec["grid"]["lr"] = [1e-3] * 300
            spec["grid"]["batch_size"] = [8] * (size // 100)
            return f"grid seed x lr x batch_size = 300 x 300 x {size // 100}"
        return f"grid.{key} has {size} values"
    if kind == 6:  # workers / gpus
        key = rng.choice(["workers", "gpus"])
        value = rng.choice([0, -1, True, "2", 10**30, 1.5, None, [1], float("nan")])
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
        return f"{key} = {value!r}"
    if kind == 7:  # tables of the wrong kind
        key = rng.choice(["base", "grid", "task"])
        value = rng.choice([5, "x", [1, 2], True, {"d2": 5}, {"d2": [1]}])
        spec[key] = value
        return f"{key} = {value!r}"
    if kind == 8:  # task names
        value = rng.choice(
            [["nope"], [""], [5], ["d2", "d2"], ["../../etc/passwd"], ["\u0000"], [["d2"]], "d2"]
        )
        spec["grid"]["task"] = value
        return f"grid.task = {value!r}"
    spec.get("grid", {}).pop("task", None)
    spec.get("base", {}).pop("task", None)
    return "no task"


def _invalid_toml(rng: random.Random, text: str) -> tuple[bytes, str]:
    choice = rng.choice(
        [
            "flip",
            "truncate",
            "unclosed",
            "duplicate",
            "deep-array",
            "deep-table",
            "bad-utf8",
            "nul",
            "bom",
            "huge-int",
            "datetime",
            "empty",
        ]
    )
    data = text.encode()
    if choice == "flip":
        data = bytearray(data)
        for _ in range(rng.randint(1, 5)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data), "byte flips"
    if choice == "truncate":
        return data[: rng.randrange(len(data))], "truncated"
    if choice == "unclosed":
        return data + b'\nx = "unclosed\n', choice
    if choice == "duplicate":
        return data + b"\nworkers = 2\nworkers = 3\n", choice
    if choice == "deep-array":
        depth = rng.choice([100, 1000, 100_000])
        return data + b"\nbogus = " + b"[" * depth + b"]" * depth + b"\n", f"deep array {depth}"
    if choice == "deep-table":
        depth = rng.choice([100, 1000, 50_000])
        return (
            data + b"\nbogus = " + b"{a = " * depth + b"1" + b"}" * depth + b"\n",
            f"deep inline table {depth}",
        )
    if choice == "bad-utf8":
        return data + b"\n# \xff\xfe\n", choice
    if choice == "nul":
        return data + b"\n\x00\n", choice
    if choice == "bom":
        return b"\xef\xbb\xbf" + data, choice
    if choice == "huge-int":
        return data.replace(b"workers = 1", b"workers = " + b"9" * 5000), choice
    if choice == "datetime":
        return data.replace(b"workers = 1", b"workers = 1979-05-27T07:32:00Z"), choice
    return b"", choice


def fuzz_grids(case: Case, rng: random.Random) -> None:
    from crasp_compiler.experiments.train import sweep

    spec = _base_grid(rng)
    described = []
    for _ in range(rng.choice([1, 1, 2])):
        try:
            described.append(_grid_mutation(rng, spec))
        except (AttributeError, TypeError, KeyError):  # an earlier mutation replaced a table
            described.append("(mutation skipped: table replaced)")
    try:
        text = toml_text(spec)
    except (TypeError, ValueError) as err:
        text = f"# not expressible: {err}\n"
    data = text.encode("utf-8", "surrogatepass")
    if rng.random() < 0.2:
        data, what = _invalid_toml(rng, text)
        described.append("invalid TOML: " + what)
    folder = workdir() / "grids" / f"g{case.index % 3}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "grid.toml"
    path.write_bytes(data)
    case.repro.update(
        {"mutations": described, "toml": shorten(data.decode("utf-8", "backslashreplace"), 1200)}
    )
    if case.dry:
        return
    ok, loaded = case.attempt("load_grid", sweep.load_grid, path)
    if not ok:
        return
    runs, settings = loaded
    out = Path(settings["out"])
    for run in runs[:2000]:
        try:
            inside = Path(run.config["out_dir"]).resolve().is_relative_to(out)
        except (OSError, ValueError):
            inside = False
        if not inside:
            case.note(
                "unsafe",
                "load_grid",
                f"run {run.name!r} writes to {run.config['out_dir']!r}, outside out = {str(out)!r}",
                kind="run directory outside out",
            )
            break
    for run in runs[:2000]:
        problem = _config_problem(run.config)
        if problem:
            case.note(
                "accepted_invalid",
                "load_grid",
                f"run {run.name!r}: {problem}",
                kind=problem.split(" ")[0],
            )
            break
    if rng.random() < 0.25 and len(runs) <= 50:
        with _fake_training():
            invoke(case, "crasp sweep", ["sweep", str(path), "--workers", "1"])


@contextlib.contextmanager
def _fake_training():
    """``crasp sweep`` with every run's training replaced by a config round trip."""
    from crasp_compiler.experiments.train import sweep
    from crasp_compiler.experiments.train.loop import TrainConfig

    def fake(config: dict) -> tuple[str | None, dict | None]:
        TrainConfig.from_dict(config)
        return None, {"config": config, "fuzz": "training skipped"}  # what a run returns

    real = sweep._run_one
    sweep._run_one = fake
    try:
        yield
    finally:
        sweep._run_one = real


# ====================================================================== show

SHOW_TOKENS = [
    "<!--<script",
    "</script>",
    "<script>alert(1)</script>",
    "<!--",
    "-->",
    "]]>",
    "$\\foo$",
    "$x^$",
    "$$",
    "$",
    "\\",
    "&",
    "&amp;",
    "&lt;",
    "{{x}}",
    "%s",
    "null",
    "NaN",
    "א",
    "שלום",
    "مرحبا",
    "🙂",
    "x" * 5000,
]
SHOW_LABELS = [
    *SHOW_TOKENS,
    "👩\u200d👩\u200d👧",
    "e\u0301",
    "$x^$",
    "\u202eab",
    "\x01",
    "\x1b[31mred",
    "\x7f",
    "a\nb",
    "\u2028",
    "",
    " ",
    "\ud800",
]
SHOW_PROGRAMS = [
    "A = # {0}\nB = # {1}\nD = A > B\n",
    "C_open = # {0}\nC_close = # {1}\nV = C_open < C_close\nCV = # V\nD = (CV == 0) && (C_open == C_close)\n",
    "P = i % 2 == 1\nA = # {0}\nD = P && A > 0\n",
    "A = # ({0} || {1})\nD = A >= 1\n",
]


def _token_literal(token: str) -> str:
    return '"' + re.sub(r'([\\"])', r"\\\1", token) + '"'


def show_spec(rng: random.Random) -> dict:
    """One ``crasp show`` case: a small program over hostile tokens (compiled in
    ``options``; ``labels`` are then edited into the model file's header), an input, and
    where the picture goes."""
    tokens = list(dict.fromkeys(rng.choice(SHOW_TOKENS) for _ in range(rng.randint(2, 5))))
    if len(tokens) < 2:
        tokens.append("b")
    if rng.random() < 0.2:
        tokens.append(random_unicode(rng))
    text = "alphabet " + " ".join(_token_literal(t) for t in tokens) + "\n"
    text += rng.choice(SHOW_PROGRAMS).format(*(_token_literal(t) for t in tokens[:2]))
    mode = rng.choice(["heaviside", "heaviside", "relu", "layernorm"])
    labels = []
    if rng.random() < 0.3:
        labels = [rng.choice(SHOW_LABELS) for _ in range(rng.randint(1, 3))]
    suffix = rng.choice([".html", ".html", ".png", ".svg"])
    flags = []
    if suffix != ".html":
        flags = ["--dpi", str(rng.choice([10, 30, 50]))]
        flags += ["--picture", rng.choice(["all", "residual", "attention", "outputs", "program"])]
    if rng.random() < 0.2:
        flags += ["--beyond-guarantee", "warn"]
    return {
        "program": text,
        "options": {"mode": mode, "max_len": 16} if mode == "relu" else {"mode": mode},
        "labels": labels,
        "relabel_seed": rng.randrange(2**32),
        "input": _show_input(rng, tokens),
        "where": rng.choice(["here", "here", "here", "missing", "under-a-file"]),
        "name": rng.choice(["x", "x", "a b", "ü", "<x>"]) + suffix,
        "flags": flags,
    }


def _relabel(rng: random.Random, path: Path, labels: list[str]) -> None:
    """Put ``labels`` into the model file's header: residual rows, head and MLP labels,
    definition names."""
    import numpy as np

    members = _npz_members(path)
    header = json.loads(str(_load_npy(members["header.npy"])))
    for label in labels:
        spots = [("residual", k) for k in range(len(header["residual"]))]
        for layer in header["layers"]:
            spots += [(head, "label") for head in layer["heads"]]
        definitions = header["info"].get("definitions") or {}
        where, key = rng.choice([*spots, ("definitions", None)] if definitions else spots)
        if where == "residual":
            header["residual"][key] = label
        elif where == "definitions":
            name = rng.choice(sorted(definitions))
            definitions[label] = definitions.pop(name)
        else:
            where[key] = label
    members["header.npy"] = _npy(np.array(json.dumps(header)))
    _write_npz(path, members)


def _show_input(rng: random.Random, alphabet: tuple[str, ...]) -> str:
    roll = rng.random()
    if roll < 0.02:
        return " ".join(rng.choice(alphabet) for _ in range(rng.choice([500, 2000])))
    words = [rng.choice(alphabet) for _ in range(rng.randint(0, 8))]
    if roll < 0.15:
        words.insert(rng.randint(0, len(words)), rng.choice(SHOW_LABELS))
    return " ".join(words)


def _check_picture(case: Case, path: Path, suffix: str) -> None:
    """A picture ``crasp show`` said it wrote: present, of its kind, and (HTML) with no raw
    ``<`` in its JSON data block."""
    if not path.is_file() or path.stat().st_size == 0:
        case.note("bad_output", "output", f"{path.name} missing or empty", kind="no picture")
        return
    data = path.read_bytes()
    if suffix == ".png" and not data.startswith(b"\x89PNG"):
        case.note("bad_output", "output", f"{path.name} is not a PNG", kind="not a PNG")
    elif suffix == ".svg" and b"<svg" not in data[:2000]:
        case.note("bad_output", "output", f"{path.name} is not an SVG", kind="not an SVG")
    elif suffix == ".html":
        text = data.decode("utf-8", "replace")
        match = re.search(r'<script type="application/json" id="data">(.*?)</script>', text, re.S)
        if match is None:
            case.note("bad_output", "output", "no JSON data block", kind="no data block")
        elif "<" in match.group(1):
            at = match.group(1).index("<")
            case.note(
                "bad_output",
                "output",
                f"raw '<' in the JSON data block: {match.group(1)[max(0, at - 40) : at + 40]!r}",
                kind="raw < in the data block",
            )


def fuzz_show(case: Case, rng: random.Random) -> None:
    from crasp_compiler.languages.crasp.compile import compile_program
    from crasp_compiler.languages.crasp.program import parse_program
    from crasp_compiler.model import save_model

    spec = show_spec(rng)
    case.repro.update({k: shorten(v, 600) if isinstance(v, str) else v for k, v in spec.items()})
    if case.dry:
        return
    folder = workdir() / "show" / str(case.index % 3)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    model_path = folder / "m.npz"
    ok, program = case.attempt("parse", parse_program, spec["program"])
    if not ok:
        return
    ok, model = case.attempt("compile", compile_program, program, **spec["options"])
    if not ok:
        return
    save_model(model, model_path)
    if spec["labels"]:
        _relabel(random.Random(spec["relabel_seed"]), model_path, spec["labels"])
    name = spec["name"]
    target = {
        "here": folder / name,
        "missing": folder / "missing" / "deeper" / name,
        "under-a-file": model_path / name,
    }[spec["where"]]
    args = ["show", str(model_path), spec["input"], "-o", str(target), *spec["flags"]]
    cls, result = invoke(case, "show", args)
    if cls == "ok":
        for written in (result.stdout or "").splitlines():
            _check_picture(case, Path(written), target.suffix)
    elif target.is_file() and target.stat().st_size == 0:
        case.note("bad_output", "output", f"refused, but left an empty {name}", kind="empty file")


# ====================================================================== records

RECORDS = ROOT / "docs" / "results" / "length-generalization"
REPORT = ROOT / "benchmarks" / "length_generalization_report.py"
GRID_NAMES = ("length_generalization", "chomsky", "value_generalization")
NEST = "__NEST__"


@cache
def record_files() -> list[Path]:
    """The committed training records (every sequence and numeric task kind)."""
    return sorted(RECORDS.glob("*/*.json"))


def mutate_record(rng: random.Random, record: Any) -> tuple[str, list[str]]:
    """A mutated training record: its JSON text and what changed (fields deleted,
    renamed, retyped or deeply nested; or the whole record replaced)."""
    described = []
    if rng.random() < 0.1:
        choice = rng.choice(["list", "string", "null", "truncated", "empty", "nan", "deep"])
        text = json.dumps(record)
        whole = {
            "list": json.dumps([record]),
            "string": json.dumps(text[:50]),
            "null": "null",
            "truncated": text[: rng.randrange(len(text))],
            "empty": "",
            "nan": re.sub(r"\d+\.\d+", "NaN", text, count=1),
            "deep": "[" * 100_000 + "]" * 100_000,
        }[choice]
        return whole, [f"record: {choice}"]
    nested = None  # (depth, value) of the field nested in lists, written as text
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        paths = [p for p in _json_paths(record) if p]
        if not paths:
            break
        top = [p for p in paths if len(p) == 1]
        path = rng.choice(top if rng.random() < 0.5 else paths)
        parent = record
        for key in path[:-1]:
            parent = parent[key]
        op = rng.choice(["delete", "rename", "retype", "retype", "nest"])
        if op == "delete":
            _set_path(record, path, _DELETE)
        elif op == "rename" and isinstance(parent, dict):
            new = rng.choice([str(path[-1]) + "_old", str(path[-1]).upper(), "", "\u0000"])
            parent[new] = parent.pop(path[-1])
        elif op == "nest" and nested is None:
            nested = (rng.choice([2, 20, 500, 100_000]), parent[path[-1]])
            _set_path(record, path, NEST)
            op = f"nest x{nested[0]}"
        else:
            value = _hostile_json(rng)
            _set_path(record, path, value)
            op = f"retype to {shorten(repr(value), 40)}"
        described.append(f"{op} {list(path)}")
    text = _dump_header(record)
    if nested is not None:
        depth, value = nested
        inner = "[" * depth + _dump_header(value) + "]" * depth
        text = text.replace(json.dumps(NEST), inner, 1)
    return text, described


@cache
def report_module() -> Any:
    """benchmarks/length_generalization_report.py reading a private copy of the records."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("crasp_report", REPORT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    copy = workdir() / "report"
    shutil.copytree(RECORDS, copy / "records")
    (copy / "grids").mkdir()
    for name in GRID_NAMES:
        text = (module.GRIDS / f"{name}.toml").read_text()
        folder = re.search(r'^results = "[^"]*/([^/"]+)"', text, re.M)
        assert folder is not None
        text = re.sub(r'^out = ".*"', f"out = {json.dumps(str(copy / 'runs'))}", text, flags=re.M)
        results = json.dumps(str(copy / "records" / folder.group(1)))
        text = re.sub(r'^results = ".*"', f"results = {results}", text, flags=re.M)
        (copy / "grids" / f"{name}.toml").write_text(text)
    module.GRIDS = copy / "grids"
    module.FINETUNE = copy / "records" / "finetune.json"
    return module


def _call(case: Case, step: str, fn, *args) -> None:
    """A script's function as a step: SystemExit 0 is ok, another exit status with a
    message a refusal."""
    progress(step)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), _quiet_warnings():
            case.attempt(step, fn, *args)
    except SystemExit as err:
        if err.code in (0, None):
            case.ran.append(step)
        elif isinstance(err.code, str) or stderr.getvalue().strip():
            message = err.code if isinstance(err.code, str) else stderr.getvalue()
            case.note("refused", step, message.strip().splitlines()[-1])
        else:
            case.note("traceback", step, f"exit status {err.code} without a message")


def fuzz_records(case: Case, rng: random.Random) -> None:
    files = record_files()
    source = rng.choice(files)
    data = json.loads(source.read_text())
    if isinstance(data, list):  # finetune.json: a list of records
        index = rng.randrange(len(data))
        text, described = mutate_record(rng, data[index])
        data[index] = "__RECORD__"
        text = json.dumps(data).replace('"__RECORD__"', text, 1)
    else:
        text, described = mutate_record(rng, data)
    target = rng.choice(["plot", "plot", "report"])
    good = target == "plot" and source.name != "finetune.json" and rng.random() < 0.5
    case.repro.update(
        {
            "record": str(source.relative_to(ROOT)),
            "mutations": described,
            "through": target + (" (beside the unmutated record)" if good else ""),
            "text": shorten(text, 800),
        }
    )
    if case.dry:
        return
    if target == "plot":
        folder = workdir() / "plot" / str(case.index % 3)
        shutil.rmtree(folder, ignore_errors=True)
        (folder / "runs" / "bad").mkdir(parents=True)
        (folder / "runs" / "bad" / "results.json").write_text(text, "utf-8", "surrogatepass")
        if good:
            (folder / "runs" / "good").mkdir()
            shutil.copy(source, folder / "runs" / "good" / "results.json")
        invoke(case, "crasp plot", ["plot", str(folder / "runs"), "-o", str(folder / "figures")])
        return
    report = report_module()
    copy = workdir() / "report" / "records" / source.relative_to(RECORDS)
    original = copy.read_bytes()
    try:
        copy.write_text(text, "utf-8", "surrogatepass")
        _call(case, "report tables", report.tables)
    finally:
        copy.write_bytes(original)


# ====================================================================== lens configs

LENS_BASES = {
    "aa_star_relu8": ("examples/crasp/aa_star.crasp", {"mode": "relu", "max_len": 8}, "a a a a"),
    "dyck1_relu8": ("examples/crasp/dyck1.cr", {"mode": "relu", "max_len": 8}, "( ( ) ) ("),
}
LENS_VALUES: dict[str, list[Any]] = {
    "act_fn": ["gelu", "gelu_new", "solu_ln", "silu", "Relu", "relu "],
    "normalization_type": ["LN", "LNPre", "RMS", "RMSPre", ""],
    "positional_embedding_type": ["rotary", "shortformer", "alibi", "Standard"],
    "attn_only": [True, 1, "false"],
    "use_attn_scale": [False, 0, "true"],
    "default_prepend_bos": [False, 0, "true"],
    "n_ctx": [1, 2, 10**6, 0, -1, 9.0, "9"],
    "n_layers": [0, 2, 100, -1, 1.5],
    "d_model": [0, 1, 7, 9, 10**9],
    "d_head": [0, 2, 64],
    "n_heads": [0, 1, 3, 10**9],
    "d_mlp": [0, 1, 4096],
    "d_vocab": [0, 1, 3, 50257],
    "d_vocab_out": [0, 2, 50257],
    "model_name": ["gpt2", "", 5],
    "dtype": ["float32", "float16", "bfloat16", "int8"],
    "bos_id": [1, -1, 10**9, "0"],
    "version": [1, 3, True, 2.0, "2"],
    "format": ["crasp-model", "", None],
    "mode": ["heaviside", "layernorm", "softmax"],
    "accept": ["nope", None, 5],
}
MEANINGLESS = {"model_name"}  # cfg fields a TransformerLens model does not depend on


@cache
def lens_exports() -> dict[str, dict]:
    """Each LENS_BASES model exported for TransformerLens (a directory) and what ``crasp
    run`` prints for its input."""
    from click.testing import CliRunner

    from crasp_compiler import load_program
    from crasp_compiler.cli import main as cli
    from crasp_compiler.languages.crasp.compile import compile_program
    from crasp_compiler.model import save_model

    out = {}
    for name, (path, options, line) in LENS_BASES.items():
        model_path = workdir() / f"lens-{name}.npz"
        save_model(compile_program(load_program(ROOT / path), **options), model_path)
        folder = workdir() / f"lens-{name}"
        runner = CliRunner()
        result = runner.invoke(
            cli, ["export", "--format", "lens", "-o", str(folder), str(model_path)]
        )
        if result.exit_code != 0:
            raise RuntimeError(f"lens export of {path} failed: {result.output}")
        answer = runner.invoke(cli, ["run", str(folder), line])
        if answer.exit_code != 0:
            raise RuntimeError(f"crasp run of the lens export of {path} failed: {answer.output}")
        config = json.loads((folder / "config.json").read_text())
        out[name] = {"folder": folder, "input": line, "answer": answer.stdout, "config": config}
    return out


def mutate_lens_config(rng: random.Random, config: dict) -> tuple[str, tuple, bool]:
    """Mutate a lens export's ``config.json`` (a dict, in place). Returns what changed, the
    path of the field (empty for the whole file) and whether the change is one a
    TransformerLens model built from ``cfg`` would differ by (a ``cfg`` field, other than
    its name, given another value or type)."""
    roll = rng.random()
    if roll < 0.08:
        return rng.choice(["not-json", "list", "empty", "deep", "bom", "nan"]), (), False
    if roll < 0.7:
        path: tuple = ("cfg", rng.choice(sorted(config["cfg"])))
    elif roll < 0.9:
        path = ("crasp", rng.choice(sorted(config["crasp"])))
    else:
        path = (rng.choice(sorted(config)),)
    parent = config
    for key in path[:-1]:
        parent = parent[key]
    old = parent.get(path[-1])
    if rng.random() < 0.15:
        del parent[path[-1]]
        return f"delete {'.'.join(path)}", path, path[0] == "cfg" and path[-1] not in MEANINGLESS
    candidates = LENS_VALUES.get(path[-1], [])
    value = rng.choice(candidates) if candidates and rng.random() < 0.7 else _hostile_json(rng)
    parent[path[-1]] = value
    changed = type(value) is not type(old) or value != old
    meaning = path[0] == "cfg" and path[-1] not in MEANINGLESS and changed
    return f"{'.'.join(path)} = {shorten(repr(value), 40)}", path, meaning


def _lens_text(what: str, config: dict) -> str:
    whole = {
        "not-json": lambda: json.dumps(config)[:100],
        "list": lambda: json.dumps([config]),
        "empty": lambda: "",
        "deep": lambda: "[" * 100_000 + "]" * 100_000,
        "bom": lambda: "\ufeff" + json.dumps(config),
        "nan": lambda: json.dumps(config).replace('"version": 2', '"version": NaN'),
    }
    if what in whole:
        return whole[what]()
    return _dump_header(config)


def fuzz_lens(case: Case, rng: random.Random) -> None:
    exports = lens_exports()
    name = rng.choice(sorted(exports))
    base = exports[name]
    config = json.loads(json.dumps(base["config"]))
    what, path, meaning = mutate_lens_config(rng, config)
    check = rng.random() < 0.4
    case.repro.update({"base": name, "mutation": what, "check": check})
    if case.dry:
        return
    folder = workdir() / "lens" / str(case.index % 3)
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(base["folder"], folder)
    (folder / "config.json").write_text(_lens_text(what, config), "utf-8", "surrogatepass")
    classes = [invoke(case, "info", ["info", str(folder)])[0]]
    cls, result = invoke(case, "run", ["run", str(folder), base["input"]])
    classes.append(cls)
    if cls == "ok" and result.stdout != base["answer"]:
        case.note(
            "disagree",
            "run",
            f"answered {shorten(result.stdout, 200)!r}, the unmutated export {base['answer']!r}",
        )
    if check:
        classes.append(
            invoke(case, "check", ["check", str(folder), "--samples", "5", "--max-len", "8"])[0]
        )
    field_name = str(path[-1]) if path else ""
    if meaning and "ok" in classes[1:]:
        case.note(
            "accepted_invalid",
            "run/check",
            f"{what}: accepted, though a TransformerLens model built from cfg differs",
            kind=f"{'.'.join(path)} accepted",
        )
    for finding in case.findings:
        if finding.cls == "refused" and field_name and field_name not in finding.message:
            case.note(
                "unlocated",
                finding.step,
                f"{what}: refused without naming {field_name!r}: {finding.message}",
                kind=f"refusal without {'.'.join(path)}",
            )
            break


# ====================================================================== running cases

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
        _bomb_member()
        _bomb_crc()
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
    _DEADLINE.update(cpu=cpu + limits.cpu, wall=start + limits.wall)
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
        _DEADLINE.clear()
    case.seconds = time.perf_counter() - start
    case.cpu = cpu_seconds() - cpu
    outcome = case.to_json()
    outcome["cpu"] = round(case.cpu, 3)
    return outcome


def _worker_main(conn, memory_gib: float) -> None:
    global _PROGRESS
    _PROGRESS = conn
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
        outcome["repro"]["replay"] = f"python benchmarks/fuzz.py --repro {family}:{seed}:{index}"
        return outcome


# ====================================================================== summary


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
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import machine, revision

    return {"revision": revision(), "machine": machine()}


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
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
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
        "reproduce": "python benchmarks/fuzz.py --repro FAMILY:SEED:INDEX",
    }
    summary = summarize(outcomes, families, meta)
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1, default=str, ensure_ascii=False))
    print_summary(summary)
    return 1 if summary["failing"] else 0


if __name__ == "__main__":
    sys.exit(main())
