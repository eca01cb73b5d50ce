"""Sweeps: a grid of training runs from a TOML file, run locally or as Ray tasks.

The grid format, every key with its type and default, is documented in ``docs/grids.md``.
In short::

    out = "runs/length"        # one subdirectory per run (relative to the grid file)
    results = "docs/results/l" # optional: each finished run's results, to commit
    workers = 2                # local worker processes (one torch thread each)
    preset = "quick"           # run sizes under [base]: quick (default) or paper

    [base]                     # TrainConfig fields shared by every run
    steps = 2000
    test_size = 200

    [grid]                     # every combination of these lists
    task = ["tomita2", "d2"]
    pe = ["ape", "nope"]
    seed = [0, 1]

    [task.d2]                  # overrides for the runs of one task
    lr = 1e-4

A run's configuration is, key by key, the first of: its ``[task.NAME]`` table, its
``[grid]`` values, ``[base]``, the ``preset``'s sizes
(:data:`~crasp_compiler.experiments.train.loop.PRESETS`), the TrainConfig defaults.

Run directories: each run writes ``OUT/<name>-<hash>/`` (the files of
:func:`~crasp_compiler.experiments.train.loop.train`). ``name`` joins the run's grid values
(``d2-ape-seed0``; characters other than letters, digits and ``._+=-`` become ``_``), or
is the run's ``out_dir`` when a table gives one (a relative path inside ``OUT``; absolute
paths and ``..`` are refused). ``hash`` is the first 8 hex digits of the SHA-256 of the
run's full configuration (:func:`~crasp_compiler.experiments.train.loop.train_key` plus the given
``out_dir``). So runs of different configurations never share a directory (equal ones are
one run), and a changed ``[base]`` makes new directories instead of reusing stale
results.

A run is finished when its record (``RESULTS/<name>-<hash>.json``, when the grid names a
``results`` directory) or its ``results.json`` reads as the results of the same
configuration; a missing, truncated (an interrupted write) or damaged one (a field
missing or of the wrong type: :mod:`.records`) is not, and the run is trained again,
resuming from its checkpoint (a damaged record of a run whose ``results.json`` is
complete is rewritten from it). So a sweep started again picks up where it
stopped, and one started on a fresh clone of a repository that commits the records
trains nothing that was recorded. A record is the run's ``results.json`` without its
``out_dir``, written (temporary file, then rename) as the run ends, and for runs finished
before the grid had a ``results`` directory when the sweep starts. Ctrl-C (``KeyboardInterrupt``) stops a sweep: pending runs are cancelled, the
worker processes (which ignore SIGINT themselves) are terminated, and the interrupt is
raised again for the caller (``crasp sweep`` then lists the finished runs and exits with
status 130).

Given a Ray address, every run is one Ray task (one CPU, or one GPU when the task asks
for it with ``gpus``), so a large grid spreads over a cluster without code changes. A
task returns its results to the driver through Ray, which writes them to the run's
``results.json`` under ``out`` and to its record: nothing is lost where the driver cannot
read the disk of the node that trained (a run that returns nothing is a failed run). The
run directories with the checkpoints and model files go to ``storage`` (a path every node
can write: node-local, or a shared one the cluster provides; default ``out``). A task
whose worker dies is run again up to ``max_retries`` times (default 2); an error of the
run itself is not retried.

Progress: :func:`run_sweep` calls ``on_finish(run, error)`` in the calling process as
each run ends, in the order they end, whether the runs go in this process, in local
worker processes (:func:`concurrent.futures.as_completed`) or as Ray tasks
(:func:`ray.wait`); :class:`SweepProgress` turns that into one line per run and the
progress bar of ``crasp sweep``.

:func:`load_grid` checks the whole file before anything runs: unknown keys, values of the
wrong type or range, empty lists, tables that are not tables, unknown tasks; each error
names the key path (``[grid] bins[1]``, ``[base] bins[0] = [9, 3]``) and the position in
the file: line and column from the TOML parser for syntax errors; for a bad value, the
line of the key's assignment, found by scanning the text (tomllib gives values no
positions): the first ``key =`` in the key's ``[table]`` section, else the first
``.key =``, ``{key =`` or ``, key =`` (dotted keys, inline tables) on a line naming the
table, else anywhere; with no such line the message names the key only.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib.util
import itertools
import json
import math
import re
import signal
import sys
import time
import tomllib
import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, TextIO, TypedDict

from crasp_compiler.errors import CraspError, Diagnostic, Span, source_lines
from crasp_compiler.experiments.train.evaluate import one_line
from crasp_compiler.experiments.train.loop import (
    MAX_LEN,
    PRESETS,
    TrainConfig,
    duration,
    field_problem,
    train_key,
)
from crasp_compiler.experiments.train.records import read_results, skipped
from crasp_compiler.files import replacing, writable_dir

if TYPE_CHECKING:
    from crasp_compiler.experiments.tasks.numeric import PcocNumericTask
    from crasp_compiler.experiments.tasks.program import ProgramTask

    ProgramTasks = dict[tuple[object, ...], ProgramTask | PcocNumericTask]

KEYS = (
    "out",
    "results",
    "workers",
    "gpus",
    "storage",
    "max_retries",
    "preset",
    "base",
    "grid",
    "task",
)
FIELDS = [f.name for f in fields(TrainConfig)]
SET_BY_SWEEP = ("progress",)
MAX_RUNS = 10_000
MAX_WORKERS = 256
MAX_RETRIES = 100
RETRIES = 2  # Ray's retries of a run whose worker died, unless the grid says
HASH_DIGITS = 8
MAX_NAME = 200  # bytes in one directory name of out_dir (file systems allow 255)


class GridSettings(TypedDict):
    """A grid's settings (:func:`load_grid`): its paths resolved, the rest as given."""

    out: Path
    results: Path | None
    workers: int
    gpus: float
    storage: Path | None
    max_retries: int


@dataclass
class Run:
    name: str  # its directory under the grid's out (``<name>-<hash>``)
    config: dict[str, Any]  # TrainConfig fields
    record: Path | None = None  # its results under the grid's ``results`` directory

    @property
    def out_dir(self) -> Path:
        return Path(self.config["out_dir"])


class _GridFile:
    """A grid file's text and TOML; :meth:`error` names the file and the key's line."""

    def __init__(self, path: Path) -> None:
        self.path, self.source = path, None
        try:
            self.source = path.read_bytes().decode("utf-8-sig")
        except OSError as err:
            raise self.error(f"cannot read the grid file: {err.strerror or err}") from None
        except UnicodeDecodeError as err:
            raise self.error(f"not UTF-8 text (byte {err.start}: {err.reason})") from None
        try:
            self.spec = tomllib.loads(self.source)
        except tomllib.TOMLDecodeError as err:
            text = str(err)
            at = re.search(r" \(at line (\d+), column (\d+)\)$", text)
            span = at and Span(int(at[1]), int(at[2]), int(at[1]), int(at[2]) + 1)
            message = f"invalid TOML: {text[: at.start()] if at else text}"
            raise CraspError([Diagnostic(message, span)], self.source, str(path)) from None
        except RecursionError:
            raise self.error("invalid TOML: nested too deeply") from None
        except ValueError as err:  # e.g. an integer of thousands of digits
            raise self.error(f"invalid TOML: {err}") from None

    def error(
        self,
        message: str,
        table: str | None = None,
        key: str | None = None,
        hint: str | None = None,
    ) -> CraspError:
        span = None if self.source is None else self._span(self.source, table, key)
        return CraspError([Diagnostic(message, span, hint)], self.source, str(self.path))

    def _span(self, source: str, table: str | None, key: str | None) -> Span | None:
        """Where ``key`` is set in ``[table]`` (top level: None), or the table's header
        when ``key`` is None; None when not found (dotted keys, inline tables)."""
        current = None
        for number, line in enumerate(source_lines(source), 1):
            header = re.match(r"\s*\[([^\[\]]+)\]", line)
            if header:
                current = re.sub(r"[\s\"']", "", header[1])
                if key is None and current == table:
                    return Span(number, header.start(1), number, header.end(1) + 2)
            elif key is not None and current == table:
                found = re.match(rf"\s*([\"']?){re.escape(key)}\1\s*=", line)
                if found:
                    start = len(line) - len(line.lstrip()) + 1
                    return Span(number, start, number, start + len(key) + 2 * len(found[1]))
        if key is None:
            return None
        # a dotted key (base.steps = 3) or an inline table (base = {steps = 3}): the first
        # line that assigns the key after a dot, a brace or a comma, or at a line's start
        pattern = rf"(^\s*|[.{{,]\s*)([\"']?){re.escape(key)}\2\s*="
        near = table.rsplit(".", 1)[-1] if table else ""
        lines = list(enumerate(source_lines(source), 1))
        for number, line in [(n, t) for n, t in lines if near in t] + lines:
            found = re.search(pattern, line)
            if found:
                start = found.start(2) + 1
                return Span(number, start, number, found.end(2) + len(key) + len(found[2]) + 1)
        return None


def _check_value(
    grid: _GridFile, table: str, key: str, value: object, index: int | None = None
) -> None:
    """Refuse ``key = value`` in ``[table]`` (``index``: the value is that element of a
    ``[grid]`` list) unless it is a usable TrainConfig field or program key
    (:data:`PROGRAM_KEYS`: the program or generator it names is loaded)."""
    from crasp_compiler.experiments.tasks.registry import get_task

    path = key if index is None else f"{key}[{index}]"

    def fail(message: str, hint: str | None = None) -> CraspError:
        return grid.error(f"[{table}] {path}{message}", table, key, hint)

    if key in PROGRAM_KEYS:
        if key == "program" and table.startswith("task."):
            raise fail(": cannot be overridden in a [task.NAME] table")
        try:
            problem = _program_value_problem(grid, key, value)
        except CraspError as err:
            raise fail(f": {one_line(err)}") from None
        if problem:
            raise fail(f" {problem}")
        return
    if key not in FIELDS:
        close = difflib.get_close_matches(key, FIELDS, n=1)
        raise fail(": not a TrainConfig field", f"did you mean {close[0]}?" if close else None)
    if key in SET_BY_SWEEP:
        raise fail(": set by the sweep")
    if key == "task":
        if table.startswith("task."):
            raise fail(": cannot be overridden in a [task.NAME] table")
        if not isinstance(value, str):
            raise fail(f" must be a task name (a string), not {value!r}")
        try:
            get_task(value)
        except CraspError as err:
            raise fail(f": {err.diagnostics[0].message}", err.diagnostics[0].hint) from None
        return
    problem = field_problem(key, value)
    if problem:
        bad = _bad_bin(value) if key == "bins" else None
        if bad:  # name the bin: bins[1] = [9, 3]: lo is above hi
            raise fail(f"{bad[0]}: {bad[1]}", f"bins {problem.partition(', not ')[0]}")
        raise fail(f" {problem}")
    if key == "out_dir" and isinstance(value, str):  # a str: TOML has no null
        parts = PurePosixPath(value).parts
        if not parts or parts == (".",):
            raise fail(f": {value!r} names no directory inside the grid's out directory")
        if PurePosixPath(value).is_absolute() or ".." in parts:
            raise fail(
                f": {value!r} is outside the grid's out directory; give a relative path "
                "without '..'"
            )
        if any(len(part.encode()) > MAX_NAME for part in parts):
            raise fail(f": a directory name in it is longer than {MAX_NAME} bytes")


def _bad_bin(value: object) -> tuple[str, str] | None:
    """The first bad bin of a ``bins`` list: its index path (``[1]``) and what is wrong."""
    if not isinstance(value, list):
        return None
    for k, bin_ in enumerate(value):
        where = f"[{k}] = {bin_!r}"
        if not (isinstance(bin_, list) and len(bin_) == 2 and all(type(x) is int for x in bin_)):
            return where, "not a pair of integers [lo, hi]"
        if bin_[0] < 0:
            return where, "lo is negative"
        if bin_[0] > bin_[1]:
            return where, "lo is above hi"
        if bin_[1] > MAX_LEN:
            return where, f"hi is above {MAX_LEN}"
    return None


def _readable(values: dict[str, object]) -> str:
    """A run's name from its grid values: ``d2-ape-seed0``, safe as one file name."""
    parts = [f"seed{v}" if k == "seed" else str(v) for k, v in values.items()]
    text = "-".join(re.sub(r"[^A-Za-z0-9._+=-]+", "_", part).strip("_") for part in parts)
    return text[:80] or "run"


PROGRAM_KEYS = ("program", "alphabet", "lengths", "generator")  # a program file as the task
_PROGRAM_RULES: dict[str, tuple[str, Callable[[object], bool]]] = {
    "program": (
        "a path to a .cr, .crasp or .pcoc file (a string)",
        lambda v: isinstance(v, str) and bool(v) and "\0" not in v,
    ),
    "alphabet": (
        "a non-empty list of symbols (non-empty strings)",
        lambda v: isinstance(v, list) and bool(v) and all(isinstance(s, str) and s for s in v),
    ),
    "lengths": (
        f"[lo, hi] with 0 <= lo <= hi <= {MAX_LEN}",
        lambda v: (
            isinstance(v, list)
            and len(v) == 2
            and all(type(x) is int for x in v)
            and 0 <= v[0] <= v[1] <= MAX_LEN
        ),
    ),
    "generator": (
        "MODULE:FUNCTION or FILE.py:FUNCTION (a string)",
        lambda v: isinstance(v, str) and "\0" not in v,
    ),
}


def _program_value_problem(grid: _GridFile, key: str, value: object) -> str | None:
    """``must be ..., not ...`` when ``value`` is of the wrong shape for the program key
    ``key``; a ``program`` or ``generator`` is loaded (relative to the grid file), so a
    missing file or a program with errors raises its CraspError."""
    from crasp_compiler.experiments.tasks.program import UserGenerator, load_program_task

    what, ok = _PROGRAM_RULES[key]
    if not ok(value):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:59] + "…"
        return f"must be {what}, not {shown}"
    if key == "program":
        load_program_task(grid.path.parent / str(value))
    elif key == "generator":
        UserGenerator(str(value), grid.path.parent)
    return None


def _task_name(config: dict[str, Any]) -> str:
    """The name a run's ``[task.NAME]`` table and its results use: the task's, or the
    program file's stem."""
    task = config.get("task")
    if task is None:
        return Path(str(config.get("program", ""))).stem
    return task if isinstance(task, str) else str(task.name)


def _program_task(
    grid: _GridFile,
    config: dict[str, Any],
    origin: Callable[[str], tuple[str, int | None]],
    made: ProgramTasks,
) -> None:
    """Replace the program keys of a run's ``config`` by the task of its program (made
    once per program settings, in ``made``); for a C-RASP program ``train_max`` becomes the
    end of ``lengths``, for a PCOC one every scale is checked against the input bound.
    ``origin(key)``: the table (and ``[grid]`` index) that gave the key, for errors."""
    from crasp_compiler.experiments.tasks.numeric import PcocNumericTask
    from crasp_compiler.experiments.tasks.program import UserGenerator, load_program_task

    def fail(key: str, message: str, hint: str | None = None) -> CraspError:
        table, index = origin(key)
        path = key if index is None else f"{key}[{index}]"
        return grid.error(f"[{table}] {path}{message}", table, key, hint)

    settings = {key: config.pop(key) for key in PROGRAM_KEYS if key in config}
    if "program" not in settings:
        raise fail(next(iter(settings)), ': only with a program (program = "PROG.cr")')
    alphabet, lengths = settings.get("alphabet"), settings.get("lengths")
    generator = settings.get("generator")
    made_key = (
        settings["program"],
        None if alphabet is None else tuple(alphabet),
        None if lengths is None else tuple(lengths),
        generator,
    )
    if made_key not in made:
        try:
            made[made_key] = load_program_task(
                grid.path.parent / settings["program"],
                alphabet,
                None if lengths is None else (lengths[0], lengths[1]),
                None if generator is None else UserGenerator(generator, grid.path.parent),
            )
        except CraspError as err:
            blame = next((k for k in ("alphabet", "lengths", "generator") if k in settings), None)
            raise fail(blame or "program", f": {one_line(err)}") from None
    task = made[made_key]
    if isinstance(task, PcocNumericTask):
        scales = TrainConfig.from_dict({**config, "task": task}).scales
        try:
            task.check_scales(scales)
        except CraspError as err:
            raise fail(
                "scales" if "scales" in config else "program", f": {one_line(err)}"
            ) from None
    elif "train_max" in config:
        raise fail("train_max", ": with a C-RASP program, give the range as lengths = [lo, hi]")
    else:
        config["train_max"] = task.train_max
    config["task"] = task


def _named(values: dict[str, Any]) -> dict[str, Any]:
    """A run's grid values for its name: a program by its file's stem."""
    return {k: Path(v).stem if k == "program" else v for k, v in values.items()}


def _origin(
    key: str,
    values: dict[str, Any],
    grid: dict[str, list[Any]],
    name: str,
    per_task: dict[str, dict[str, Any]],
) -> tuple[str, int | None]:
    """The table that gives a run ``key`` (with the index of its value in a ``[grid]`` list)."""
    if key in per_task.get(name, {}):
        return f"task.{name}", None
    if key in values:
        return "grid", grid[key].index(values[key])
    return "base", None


def load_grid(path: str | Path) -> tuple[list[Run], GridSettings]:
    """The runs of a grid file and its settings (``out``, ``workers``, ``gpus``); a
    CraspError naming the key (and its line) for anything wrong in the file. A run with
    a ``program`` (relative to the grid file) has that program's task as its ``task``
    (:func:`_program_task`) and is named by the file's stem."""
    path = Path(path)
    grid_file = _GridFile(path)
    spec, error = grid_file.spec, grid_file.error
    for key in spec:
        if key not in KEYS:
            raise error(f"{key}: unknown key; expected one of {', '.join(KEYS)}", None, key)
    out = spec.get("out", path.stem)
    if not isinstance(out, str) or not out or "\0" in out:
        raise error(f"out must be a path (a string), not {out!r}", None, "out")
    saved = spec.get("results")
    if saved is not None and (not isinstance(saved, str) or not saved or "\0" in saved):
        raise error(f"results must be a path (a string), not {saved!r}", None, "results")
    workers = spec.get("workers", 1)
    if type(workers) is not int or not 1 <= workers <= MAX_WORKERS:
        what = f"an integer in [1, {MAX_WORKERS}]"
        raise error(f"workers must be {what}, not {workers!r}", None, "workers")
    gpus = spec.get("gpus", 0)
    if isinstance(gpus, bool) or not isinstance(gpus, int | float) or not 0 <= gpus < math.inf:
        raise error(f"gpus must be a number >= 0, not {gpus!r}", None, "gpus")
    storage = spec.get("storage")
    if storage is not None and (not isinstance(storage, str) or not storage or "\0" in storage):
        raise error(f"storage must be a path (a string), not {storage!r}", None, "storage")
    retries = spec.get("max_retries", RETRIES)
    if type(retries) is not int or not 0 <= retries <= MAX_RETRIES:
        what = f"an integer in [0, {MAX_RETRIES}]"
        raise error(f"max_retries must be {what}, not {retries!r}", None, "max_retries")
    preset = spec.get("preset", "quick")
    if not isinstance(preset, str) or preset not in PRESETS:
        raise error(f"preset must be one of {', '.join(PRESETS)}, not {preset!r}", None, "preset")
    for key in ("base", "grid", "task"):
        if not isinstance(spec.get(key, {}), dict):
            raise error(f"{key} must be a table ([{key}]), not {spec[key]!r}", None, key)
    base, grid, per_task = spec.get("base", {}), spec.get("grid", {}), spec.get("task", {})
    for name, table in per_task.items():
        if not isinstance(table, dict):
            raise error(f"[task] {name} must be a table ([task.{name}])", "task", name)
    for table, values in [("base", base), *((f"task.{t}", v) for t, v in per_task.items())]:
        for key, value in values.items():
            _check_value(grid_file, table, key, value)
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise error(f"[grid] {key} must be a non-empty list", "grid", key)
        for index, value in enumerate(values):
            _check_value(grid_file, "grid", key, value, index)
    declared = {**base, **grid}
    if "task" in declared and "program" in declared:
        table = "grid" if "program" in grid else "base"
        raise error(f"[{table}] program: give task or program, not both", table, "program")
    if "task" not in declared and "program" not in declared:
        raise error("no task: give [base] task or program, or a [grid] task or program list")
    count = math.prod(len(values) for values in grid.values())
    if count > MAX_RUNS:
        raise error(f"the grid has {count} runs, more than {MAX_RUNS}: split it into several")
    try:
        root = (path.parent / out).resolve()
    except (OSError, RuntimeError) as err:
        raise error(f"out: cannot resolve {out!r}: {err}", None, "out") from None
    try:
        records = None if saved is None else (path.parent / saved).resolve()
    except (OSError, RuntimeError) as err:
        raise error(f"results: cannot resolve {saved!r}: {err}", None, "results") from None
    try:  # not checked here: the nodes that run the tasks write there, not this one
        stored = None if storage is None else (path.parent / storage).resolve()
    except (OSError, RuntimeError) as err:
        raise error(f"storage: cannot resolve {storage!r}: {err}", None, "storage") from None
    blockers: dict[str, Path | None] = {}
    for key, value, target in (("out", out, root), ("results", saved, records)):
        try:  # a name the file system refuses (too long) is refused now, by its key
            blockers[key] = None if target is None else _file_in_the_way(target)
        except OSError as err:
            shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
            raise error(f"{key}: cannot use {shown}: {err.strerror or err}", None, key) from None
    blocker = blockers["results"]
    if blocker is not None:  # refused now, not once the first run has trained
        where = "is" if blocker == records else f"is inside {blocker}, which is"
        raise error(f"results: {saved!r} {where} a file, not a directory", None, "results")
    runs: dict[Path, Run] = {}
    programs: ProgramTasks = {}  # the task of each program setting, made once
    for combo in itertools.product(*grid.values()):
        values = dict(zip(grid, combo, strict=True))
        config = {**PRESETS[preset], **base, **values}
        task_name = _task_name(config)
        config.update(per_task.get(task_name, {}))
        if any(key in config for key in PROGRAM_KEYS):
            origin = functools.partial(
                _origin, values=values, grid=grid, name=task_name, per_task=per_task
            )
            _program_task(grid_file, config, origin, programs)
        given = config.pop("out_dir", None)
        run_key = train_key({**config, "progress": False})  # every field was checked above
        text = json.dumps({**run_key, "out_dir": given}, sort_keys=True)
        digest = hashlib.sha256(text.encode()).hexdigest()[:HASH_DIGITS]
        name = f"{given if given is not None else _readable(_named(values))}-{digest}"
        directory = root / name
        if directory in runs:
            if train_key(runs[directory].config) != run_key:  # a hash collision: never seen
                raise error(f"two runs of different configurations would share {name}")
            continue  # the same configuration twice: one run
        record = None if records is None else records / f"{name}.json"
        runs[directory] = Run(
            name, {**config, "out_dir": str(directory), "progress": False}, record
        )
    unused = sorted(set(per_task) - {_task_name(run.config) for run in runs.values()})
    if unused:
        table = f"task.{unused[0]}"
        raise error(f"[{table}]: no run of the grid has task {unused[0]!r}", table)
    settings: GridSettings = {
        "out": root,
        "results": records,
        "workers": workers,
        "gpus": gpus,
        "storage": stored,
        "max_retries": retries,
    }
    return list(runs.values()), settings


def _file_in_the_way(directory: Path) -> Path | None:
    """The nearest existing path of ``directory`` and its parents when it is not a
    directory (so ``directory`` cannot be one), else None."""
    for path in (directory, *directory.parents):
        if path.exists():
            return None if path.is_dir() else path
    return None


def _read_results(path: Path, run: Run) -> dict[str, Any] | None:
    """``path`` as the results of ``run``'s configuration; a missing file, one that is not
    a complete results.json (:func:`~.records.read_results`) or a foreign one: None."""
    try:
        if not path.exists():
            return None
    except OSError:  # a path the file system refuses (too long): no results there
        return None
    try:
        data = read_results(path)
    except CraspError:
        return None
    return data if train_key(data["config"]) == train_key(run.config) else None


def unreadable(run: Run, records_only: bool = False) -> list[str]:
    """A warning line (:func:`~.records.skipped`: file and field) for each of ``run``'s
    files, its record and (unless ``records_only``) its ``results.json``, that exists but
    is not a complete results.json; such a file does not make the run finished."""
    lines = []
    files = [run.record] if records_only else [run.record, run.out_dir / "results.json"]
    for path in files:
        if path is not None and path.exists():
            try:
                read_results(path)
            except CraspError as err:
                lines.append(skipped(err))
    return lines


def recorded(run: Run) -> dict[str, Any] | None:
    """The results in ``run``'s record (the grid's ``results`` directory), or None."""
    return None if run.record is None else _read_results(run.record, run)


def finished(run: Run) -> dict[str, Any] | None:
    """The results of ``run`` when it is finished: its record under the grid's
    ``results`` directory, else its ``results.json``, reads as the results of the same
    configuration. None otherwise."""
    return recorded(run) or _read_results(run.out_dir / "results.json", run)


def save_record(run: Run) -> bool:
    """Copy a finished run's results to its record (the grid's ``results`` directory),
    without the machine-specific ``out_dir``; the record is replaced whole
    (:func:`~crasp_compiler.files.replacing`). False when there is nothing to copy; a
    CraspError when the record cannot be written (a full disk)."""
    if run.record is None or (data := _read_results(run.out_dir / "results.json", run)) is None:
        return False
    config = {k: v for k, v in data["config"].items() if k not in ("out_dir", "progress")}
    text = json.dumps({**data, "config": config}, indent=1) + "\n"
    with replacing(run.record, f"the results of {run.name}") as partial:
        partial.write_text(text)
    return True


def _flat(text: str) -> str:
    return " ".join(text.split())


# What a run's worker sends back: what went wrong (None: nothing) and its results.
Outcome = tuple[str | None, dict[str, Any] | None]


def _run_one(config: dict[str, Any]) -> Outcome:
    """Train one run (in a worker: one torch thread); what went wrong if it failed, and
    its results (returned, so that a run on another machine loses nothing where the
    driver cannot read that machine's disk)."""
    import torch

    from crasp_compiler.experiments.train.loop import train

    torch.set_num_threads(1)
    try:
        results = train(TrainConfig.from_dict(config))
    except CraspError as err:
        return one_line(err), None
    except Exception as err:  # one failed run must not stop the sweep; reported at the end
        return _flat(f"{type(err).__name__}: {err}"), None
    return None, results


def keep_results(run: Run, results: dict[str, Any]) -> None:
    """Write the results a run returned to its ``results.json`` under the grid's ``out``
    (unless that file already holds this configuration's results: the run wrote it
    there) and to its record. A CraspError when they cannot be written."""
    path = run.out_dir / "results.json"
    if _read_results(path, run) is None:
        writable_dir(run.out_dir)
        with replacing(path, f"the results of {run.name}") as partial:
            partial.write_text(json.dumps(results, indent=2) + "\n")
    save_record(run)


OnFinish = Callable[[Run, "str | None"], None]


def run_sweep(
    path: str | Path,
    ray_address: str | None = None,
    workers: int | None = None,
    on_finish: OnFinish | None = None,
) -> list[Path]:
    """Run every run of the grid file not finished yet; returns the run directories.

    Locally with ``workers`` processes (default: the file's ``workers``), or, given
    ``ray_address`` (``"auto"``, ``"local"`` or ``"ray://host:port"``), as Ray tasks.
    ``on_finish(run, error)`` is called in this process as each run ends, in the order
    they end (``error``: None, or what went wrong), e.g. :class:`SweepProgress`'s
    :meth:`~SweepProgress.finished`. Failed runs are reported together at the end (a
    CraspError, one line per run)."""
    runs, settings = load_grid(path)
    writable_dir(settings["out"])
    if settings["results"] is not None:
        writable_dir(settings["results"])
        for run in runs:  # runs finished before the grid had a results directory
            if run.record is not None and recorded(run) is None:  # (or a damaged record)
                save_record(run)
    todo = [run for run in runs if finished(run) is None]
    count = workers or settings["workers"]
    errors: dict[int, str | None] = {}

    def done(index: int, outcome: Outcome) -> None:
        error, results = outcome
        if error is None and results is None:  # nothing came back: not a finished run
            error = "the run returned no results"
        elif error is None and results is not None:
            try:
                keep_results(todo[index], results)
            except CraspError as err:
                error = one_line(err)
        errors[index] = error
        if on_finish is not None:
            on_finish(todo[index], error)

    configs = [run.config for run in todo]
    if ray_address is not None:
        if settings["storage"] is not None:  # where the nodes write the run directories
            configs = [
                {**config, "out_dir": str(settings["storage"] / run.out_dir.name)}
                for config, run in zip(configs, todo, strict=True)
            ]
        _run_ray(configs, ray_address, settings["gpus"], settings["max_retries"], done)
    elif count <= 1 or len(configs) <= 1:
        for index, config in enumerate(configs):
            done(index, _run_one(config))
    else:
        _run_pool(configs, count, done)
    failed = [
        Diagnostic(f"run {run.name} failed: {errors[index]}")
        for index, run in enumerate(todo)
        if errors.get(index)
    ]
    if failed:
        raise CraspError(failed, filename=str(path))
    return [run.out_dir for run in runs]


def _ignore_sigint() -> None:
    """Workers leave Ctrl-C to the parent, which stops them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run_pool(
    configs: list[dict[str, Any]], count: int, done: Callable[[int, Outcome], None]
) -> None:
    """The runs on ``count`` worker processes, ``done(index, error)`` as each ends. A
    KeyboardInterrupt cancels the pending runs and terminates the workers before it
    propagates; a worker that dies (killed, e.g. out of memory) fails its run and those
    still pending instead of hanging."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    pool = ProcessPoolExecutor(min(count, len(configs)), initializer=_ignore_sigint)
    try:
        futures = {pool.submit(_run_one, config): k for k, config in enumerate(configs)}
        for future in as_completed(futures):
            try:
                outcome = future.result()
            except BrokenProcessPool:
                outcome = ("a worker process died (killed, out of memory?)", None)
            done(futures[future], outcome)
    except BaseException:
        # no public way to stop running workers before Python 3.14's terminate_workers()
        for process in list(getattr(pool, "_processes", {}).values()):
            process.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()


RAY_CLIENT_HINT = 'Ray Client is not installed: pip install "ray[client]"'


def _connect_ray(address: str) -> Any:
    """The ``ray`` module, connected to ``address``; a :class:`CraspError` in one line when
    ray is missing, a ``ray://`` address finds no Ray Client (``ray[client]``: grpc), or
    the connection fails (no cluster there, an address Ray cannot read)."""
    try:
        import ray
    except ImportError:
        raise CraspError(
            "a Ray address was given but ray is not installed (pip install 'crasp-compiler[ray]')"
        ) from None
    where = f"--ray-address {address}"
    if address.startswith("ray://") and importlib.util.find_spec("grpc") is None:
        raise CraspError(f"{where}: {RAY_CLIENT_HINT}")
    try:
        ray.init(address=None if address == "local" else address, ignore_reinit_error=True)
    except Exception as err:  # ray raises ValueError, ConnectionError, RuntimeError, grpc's
        if "ray[client]" in str(err):
            raise CraspError(f"{where}: {RAY_CLIENT_HINT}") from None
        reason = _flat(str(err)) or type(err).__name__
        raise CraspError(f"{where}: cannot connect to Ray: {reason[:300]}") from None
    return ray


def _run_ray(
    configs: list[dict[str, Any]],
    address: str,
    gpus: float,
    retries: int,
    done: Callable[[int, Outcome], None],
) -> None:
    """The runs as Ray tasks, ``done(index, outcome)`` as each ends (:func:`ray.wait`);
    a task whose worker dies is run again up to ``retries`` times (an error the run
    itself raises is its outcome, not retried)."""
    ray = _connect_ray(address)
    remote = ray.remote(num_cpus=1, num_gpus=gpus, max_retries=retries, retry_exceptions=False)(
        _run_one
    )
    refs = [remote.remote(config) for config in configs]
    index = {ref: k for k, ref in enumerate(refs)}
    pending = list(refs)
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                try:
                    outcome = ray.get(ref)
                except KeyboardInterrupt:
                    raise
                except Exception as err:  # the task's worker died, or Ray failed it
                    outcome = (_flat(f"{type(err).__name__}: {err}")[:2000], None)
                done(index[ref], outcome)
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise


def _scale_metrics(
    metrics: dict[str, dict[str, float]] | None, scale: float
) -> dict[str, float] | None:
    """The metrics of one scale factor (keys are ``str(c)``: "1" or "1.0")."""
    for key, value in (metrics or {}).items():
        if float(key) == scale:
            return value
    return None


def summary_line(results: dict[str, Any]) -> str:
    """A finished run in one line: steps, then accuracy per bin (sequence tasks) or MSE at
    c = 1 and 10 (numeric tasks, with the compiled model's)."""
    steps = f"{results['steps']:>6} steps"
    if results["kind"] == "sequence":
        return f"{steps}  " + "  ".join(
            f"{name}: {value:.3f}" for name, value in results["accuracy"].items()
        )
    parts = []
    for c in (1, 10):
        trained = _scale_metrics(results["metrics"], c)
        compiled = _scale_metrics(results.get("compiled_metrics"), c)
        if trained is not None:
            ref = "" if compiled is None else f" (compiled {compiled['mse']:.3g})"
            parts.append(f"mse c={c}: {trained['mse']:.3g}{ref}")
    return f"{steps}  " + "  ".join(parts)


def _clock(seconds: float) -> str:
    """``m:ss`` or ``h:mm:ss``."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class SweepProgress:
    """What ``crasp sweep`` shows while it runs: one line per run on ``out`` as it
    finishes (``NAME  STEPS  RESULTS  TIME``, or ``NAME  failed: WHY``), and the whole
    sweep's state on ``err``: a tqdm bar (runs done / failed / left, elapsed, estimated
    time left) when ``bar`` (default: ``err`` is a terminal), else a ``progress:`` line
    after every run (logs). ``quiet``: the lines of the runs only.

    The estimate is elapsed × left / ended (tqdm's rate for the bar): rough until a few
    runs have ended, since runs of one sweep differ in length."""

    def __init__(
        self,
        names: list[str],
        todo: int,
        *,
        out: TextIO | None = None,
        err: TextIO | None = None,
        bar: bool | None = None,
        quiet: bool = False,
    ) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.width = max((len(name) for name in names), default=0)
        self.todo, self.ok, self.failed = todo, 0, 0
        self.reported: set[str] = set()  # runs with a line already
        self.start = time.monotonic()
        if bar is None:
            bar = bool(getattr(self.err, "isatty", lambda: False)())
        self.bar = None
        self.plain = not quiet and not bar
        if bar and not quiet and todo:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=todo,
                unit="run",
                desc="sweep",
                file=self.err,
                dynamic_ncols=True,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} runs "
                "[{elapsed}<{remaining}{postfix}]",
            )
            self._postfix()

    def _postfix(self, refresh: bool = True) -> None:
        if self.bar is not None:
            left = self.todo - self.ok - self.failed
            text = f"done {self.ok}, failed {self.failed}, left {left}"
            self.bar.set_postfix_str(text, refresh=refresh)

    def line(self, name: str, text: str) -> None:
        """Print ``name  text`` on ``out`` (above the bar)."""
        row = f"{name.ljust(self.width)}  {text}"
        if self.bar is not None:
            self.bar.write(row, file=self.out)
        else:
            print(row, file=self.out)
        self.out.flush()

    def earlier(self, run: Run, results: dict[str, Any]) -> None:
        """A run finished by an earlier sweep."""
        self.reported.add(run.name)
        self.line(run.name, f"{summary_line(results)}  (earlier)")

    def finished(self, run: Run, error: str | None) -> None:
        """A run of this sweep ended (``error``: None, or why it failed)."""
        self.reported.add(run.name)
        results = None if error else finished(run)
        if results is None:
            self.failed += 1
            self.line(run.name, f"failed: {error or 'no results.json written'}")
        else:
            self.ok += 1
            took = results.get("wall_time_s", 0) + results.get("eval_time_s", 0)
            self.line(run.name, f"{summary_line(results)}  ({duration(took)})")
        if self.bar is not None:
            self._postfix(refresh=False)
            self.bar.update(1)
            self.bar.refresh()
        elif self.plain:
            ended = self.ok + self.failed
            elapsed = time.monotonic() - self.start
            left = self.todo - ended
            estimate = f", about {_clock(elapsed * left / ended)} left" if left else ""
            print(
                f"progress: {ended} of {self.todo} runs ended ({self.ok} done, {self.failed} "
                f"failed, {left} left); {_clock(elapsed)} elapsed{estimate}",
                file=self.err,
            )
            self.err.flush()

    def catch_up(self, runs: list[Run]) -> None:
        """A line for every run that finished but has none yet: after an interrupt, a
        run whose worker wrote its results just before the parent heard of it."""
        for run in runs:
            if run.name not in self.reported and finished(run) is not None:
                self.finished(run, None)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def collect(path: str | Path, records_only: bool = False) -> list[dict[str, Any]]:
    """The results of every finished run of a grid file (``results.json`` contents, with
    the run's name under ``"run"``); with ``records_only``, of the recorded runs only
    (what a fresh clone of a repository committing the records has). A file that is not
    a complete results.json is skipped with a warning naming it and the field."""
    runs, _ = load_grid(path)
    read = recorded if records_only else finished
    results = []
    for run in runs:
        data = read(run)
        if data is not None:
            results.append({"run": run.name, **data})
            continue
        for line in unreadable(run, records_only):
            warnings.warn(line, stacklevel=2)
    return results
