"""Sweeps: a grid of training runs from a TOML file, run locally or as Ray tasks.

A grid file::

    out = "runs/length"        # one subdirectory per run (relative to the grid file)
    workers = 2                # local worker processes (one torch thread each)

    [base]                     # TrainConfig fields shared by every run
    steps = 2000
    test_size = 200

    [grid]                     # every combination of these lists
    task = ["tomita2", "d2"]
    pe = ["ape", "nope"]
    seed = [0, 1]

    [task.d2]                  # overrides for the runs of one task
    lr = 1e-4

Run directories: each run writes ``OUT/<name>-<hash>/`` (the files of
:func:`~crasp_compiler.experiments.train.loop.train`). ``name`` joins the run's grid values
(``d2-ape-seed0``; characters other than letters, digits and ``._+=-`` become ``_``), or
is the run's ``out_dir`` when a table gives one (a relative path inside ``OUT``; absolute
paths and ``..`` are refused). ``hash`` is the first 8 hex digits of the SHA-256 of the
run's full configuration (:func:`~crasp_compiler.experiments.train.loop.train_key` plus the given
``out_dir``). So runs of different configurations never share a directory (equal ones are
one run), and a changed ``[base]`` makes new directories instead of reusing stale
results.

A run is finished when its ``results.json`` reads as the results of the same
configuration; a missing or truncated one (an interrupted write) is not, and the run is
trained again, resuming from its checkpoint. So a sweep started again picks up where it
stopped. Ctrl-C (``KeyboardInterrupt``) stops a sweep: pending runs are cancelled, the
worker processes (which ignore SIGINT themselves) are terminated, and the interrupt is
raised again for the caller (``crasp sweep`` then lists the finished runs and exits with
status 130).

Given a Ray address, every run is one Ray task (one CPU, or one GPU when the task asks
for it with ``gpus``), so a large grid spreads over a cluster without code changes.

:func:`load_grid` checks the whole file before anything runs: unknown keys, values of the
wrong type or range, empty lists, tables that are not tables, unknown tasks; each error
names the key and, where it is found, its line.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import math
import re
import signal
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path, PurePosixPath

from crasp_compiler.errors import PROGRAM, CraspError, Diagnostic, Span, source_lines
from crasp_compiler.experiments.train.loop import TrainConfig, field_problem, train_key
from crasp_compiler.files import writable_dir

KEYS = ("out", "workers", "gpus", "base", "grid", "task")
FIELDS = [f.name for f in fields(TrainConfig)]
SET_BY_SWEEP = ("progress",)
MAX_RUNS = 10_000
MAX_WORKERS = 256
HASH_DIGITS = 8
MAX_NAME = 200  # bytes in one directory name of out_dir (file systems allow 255)


@dataclass
class Run:
    name: str  # its directory under the grid's out (``<name>-<hash>``)
    config: dict  # TrainConfig fields

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
        self, message: str, table: str | None = None, key: str | None = None, hint=None
    ) -> CraspError:
        span = self._span(table, key) if self.source is not None else None
        return CraspError([Diagnostic(message, span, hint)], self.source, str(self.path))

    def _span(self, table: str | None, key: str | None) -> Span | None:
        """Where ``key`` is set in ``[table]`` (top level: None), or the table's header
        when ``key`` is None; None when not found (dotted keys, inline tables)."""
        current = None
        for number, line in enumerate(source_lines(self.source), 1):
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
        return None


def _check_value(grid: _GridFile, table: str, key: str, value: object) -> None:
    """Refuse ``key = value`` in ``[table]`` unless it is a usable TrainConfig field."""
    from crasp_compiler.experiments.tasks.registry import get_task

    def fail(message: str, hint: str | None = None) -> CraspError:
        return grid.error(f"[{table}] {key}{message}", table, key, hint)

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
        raise fail(f" {problem}")
    if key == "out_dir":
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


def _readable(values: dict) -> str:
    """A run's name from its grid values: ``d2-ape-seed0``, safe as one file name."""
    parts = [f"seed{v}" if k == "seed" else str(v) for k, v in values.items()]
    text = "-".join(re.sub(r"[^A-Za-z0-9._+=-]+", "_", part).strip("_") for part in parts)
    return text[:80] or "run"


def load_grid(path: str | Path) -> tuple[list[Run], dict]:
    """The runs of a grid file and its settings (``out``, ``workers``, ``gpus``); a
    CraspError naming the key (and its line) for anything wrong in the file."""
    path = Path(path)
    grid_file = _GridFile(path)
    spec, error = grid_file.spec, grid_file.error
    for key in spec:
        if key not in KEYS:
            raise error(f"{key}: unknown key; expected one of {', '.join(KEYS)}", None, key)
    out = spec.get("out", path.stem)
    if not isinstance(out, str) or not out or "\0" in out:
        raise error(f"out must be a path (a string), not {out!r}", None, "out")
    workers = spec.get("workers", 1)
    if type(workers) is not int or not 1 <= workers <= MAX_WORKERS:
        what = f"an integer in [1, {MAX_WORKERS}]"
        raise error(f"workers must be {what}, not {workers!r}", None, "workers")
    gpus = spec.get("gpus", 0)
    if isinstance(gpus, bool) or not isinstance(gpus, int | float) or not 0 <= gpus < math.inf:
        raise error(f"gpus must be a number >= 0, not {gpus!r}", None, "gpus")
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
        for value in values:
            _check_value(grid_file, "grid", key, value)
    if "task" not in grid and "task" not in base:
        raise error("no task: give [base] task or a [grid] task list")
    count = math.prod(len(values) for values in grid.values())
    if count > MAX_RUNS:
        raise error(f"the grid has {count} runs, more than {MAX_RUNS}: split it into several")
    try:
        root = (path.parent / out).resolve()
    except (OSError, RuntimeError) as err:
        raise error(f"out: cannot resolve {out!r}: {err}", None, "out") from None
    runs: dict[Path, Run] = {}
    for combo in itertools.product(*grid.values()):
        values = dict(zip(grid, combo, strict=True))
        config = {**base, **values}
        config.update(per_task.get(config["task"], {}))
        given = config.pop("out_dir", None)
        key = train_key({**config, "progress": False})  # every field was checked above
        text = json.dumps({**key, "out_dir": given}, sort_keys=True)
        digest = hashlib.sha256(text.encode()).hexdigest()[:HASH_DIGITS]
        name = f"{given if given is not None else _readable(values)}-{digest}"
        directory = root / name
        if directory in runs:
            if train_key(runs[directory].config) != key:  # a hash collision: never seen
                raise error(f"two runs of different configurations would share {name}")
            continue  # the same configuration twice: one run
        runs[directory] = Run(name, {**config, "out_dir": str(directory), "progress": False})
    unused = sorted(set(per_task) - {run.config["task"] for run in runs.values()})
    if unused:
        table = f"task.{unused[0]}"
        raise error(f"[{table}]: no run of the grid has task {unused[0]!r}", table)
    return list(runs.values()), {"out": root, "workers": workers, "gpus": gpus}


def finished(run: Run) -> dict | None:
    """The results of ``run`` when it is finished: its ``results.json`` reads as the
    results of the same configuration. A missing, truncated or foreign file: None."""
    try:
        data = json.loads((run.out_dir / "results.json").read_text())
        same = train_key(data["config"]) == train_key(run.config)
    except (OSError, ValueError, KeyError, TypeError, CraspError):
        return None
    return data if same else None


def _flat(text: str) -> str:
    return " ".join(text.split())


def _run_one(config: dict) -> str | None:
    """Train one run (in a worker: one torch thread); what went wrong if it failed."""
    import torch

    from crasp_compiler.experiments.train.loop import train

    torch.set_num_threads(1)
    try:
        train(TrainConfig.from_dict(config))
    except CraspError as err:
        where = "" if err.filename == PROGRAM else f"{err.filename}: "
        return where + "; ".join(
            _flat(d.message + (f" ({d.hint})" if d.hint else "")) for d in err.diagnostics
        )
    except Exception as err:  # one failed run must not stop the sweep; reported at the end
        return _flat(f"{type(err).__name__}: {err}")
    return None


def run_sweep(
    path: str | Path, ray_address: str | None = None, workers: int | None = None
) -> list[Path]:
    """Run every run of the grid file not finished yet; returns the run directories.

    Locally with ``workers`` processes (default: the file's ``workers``), or, given
    ``ray_address`` (``"auto"``, ``"local"`` or ``"ray://host:port"``), as Ray tasks.
    Failed runs are reported together at the end (a CraspError, one line per run)."""
    runs, settings = load_grid(path)
    writable_dir(settings["out"])
    todo = [run for run in runs if finished(run) is None]
    configs = [run.config for run in todo]
    count = workers or settings["workers"]
    if ray_address is not None:
        errors = _run_ray(configs, ray_address, settings["gpus"])
    elif count <= 1 or len(configs) <= 1:
        errors = [_run_one(config) for config in configs]
    else:
        errors = _run_pool(configs, count)
    failed = [
        Diagnostic(f"run {run.name} failed: {error}")
        for run, error in zip(todo, errors, strict=True)
        if error
    ]
    if failed:
        raise CraspError(failed, filename=str(path))
    return [run.out_dir for run in runs]


def _ignore_sigint() -> None:
    """Workers leave Ctrl-C to the parent, which stops them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run_pool(configs: list[dict], count: int) -> list[str | None]:
    """The runs on ``count`` worker processes. A KeyboardInterrupt cancels the pending
    runs and terminates the workers before it propagates; a worker that dies (killed,
    e.g. out of memory) fails its run and those still pending instead of hanging."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    pool = ProcessPoolExecutor(min(count, len(configs)), initializer=_ignore_sigint)
    try:
        futures = [pool.submit(_run_one, config) for config in configs]
        errors = []
        for future in futures:
            try:
                errors.append(future.result())
            except BrokenProcessPool:
                errors.append("a worker process died (killed, out of memory?)")
    except BaseException:
        # no public way to stop running workers before Python 3.14's terminate_workers()
        for process in list(getattr(pool, "_processes", {}).values()):
            process.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    return errors


def _run_ray(configs: list[dict], address: str, gpus: float) -> list[str | None]:
    try:
        import ray
    except ImportError:
        raise CraspError(
            "a Ray address was given but ray is not installed (pip install 'crasp-compiler[ray]')"
        ) from None
    ray.init(address=None if address == "local" else address, ignore_reinit_error=True)
    remote = ray.remote(num_cpus=1, num_gpus=gpus)(_run_one)
    refs = [remote.remote(config) for config in configs]
    try:
        return ray.get(refs)
    except KeyboardInterrupt:
        for ref in refs:
            ray.cancel(ref, force=True)
        raise


def collect(path: str | Path) -> list[dict]:
    """The results of every finished run of a grid file (``results.json`` contents, with
    the run's name under ``"run"``)."""
    runs, _ = load_grid(path)
    return [{"run": run.name, **data} for run in runs if (data := finished(run)) is not None]
