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

Each run writes ``OUT/<name>/`` (:func:`~crasp_compiler.train.loop.train`'s files) where
``name`` joins the grid values (``d2-ape-seed0``); a run whose ``results.json`` exists is
skipped, so an interrupted sweep resumes. Given a Ray address, every run is one Ray task
(one CPU, or one GPU when the task asks for it with ``gpus``), so a large grid spreads
over a cluster without code changes.
"""

from __future__ import annotations

import itertools
import json
import tomllib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path

from crasp_compiler.errors import CraspError
from crasp_compiler.train.loop import TrainConfig

KEYS = {"out", "workers", "base", "grid", "task", "gpus"}


@dataclass
class Run:
    name: str
    config: dict  # TrainConfig fields

    @property
    def out_dir(self) -> Path:
        return Path(self.config["out_dir"])


def load_grid(path: str | Path) -> tuple[list[Run], dict]:
    """The runs of a grid file and its settings (``out``, ``workers``, ``gpus``)."""
    path = Path(path)
    try:
        spec = tomllib.loads(path.read_text())
    except OSError as err:
        raise CraspError(f"cannot read grid file: {err}", filename=str(path)) from None
    except tomllib.TOMLDecodeError as err:
        raise CraspError(f"invalid TOML: {err}", filename=str(path)) from None
    unknown = sorted(set(spec) - KEYS)
    if unknown:
        raise CraspError(f"unknown keys {unknown}; expected {sorted(KEYS)}", filename=str(path))
    names = {f.name for f in fields(TrainConfig)}
    base, grid, per_task = spec.get("base", {}), spec.get("grid", {}), spec.get("task", {})
    for where, table in [("base", base), ("grid", grid), *per_task.items()]:
        bad = sorted(set(table) - names)
        if bad:
            raise CraspError(f"[{where}]: not TrainConfig fields: {bad}", filename=str(path))
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise CraspError(f"[grid] {key} must be a non-empty list", filename=str(path))
    if "task" not in grid and "task" not in base:
        raise CraspError("no task: give [base] task or a [grid] task list", filename=str(path))
    workers = spec.get("workers", 1)
    if type(workers) is not int or workers < 1:
        raise CraspError(f"workers must be an integer >= 1, not {workers!r}", filename=str(path))
    out = (path.parent / spec.get("out", path.stem)).resolve()
    runs = []
    keys = list(grid)
    for combo in itertools.product(*(grid[k] for k in keys)):
        values = dict(zip(keys, combo, strict=True))
        config = {**base, **values}
        config.update(per_task.get(str(config.get("task")), {}))
        name = "-".join(f"{k}{v}" if k == "seed" else str(v) for k, v in values.items())
        config["out_dir"] = str(out / name)
        config["progress"] = False
        try:  # refuse bad values before anything runs
            _check(TrainConfig.from_dict(config))
        except (CraspError, TypeError, ValueError) as err:
            raise CraspError(f"run {name}: {err}", filename=str(path)) from None
        runs.append(Run(name, config))
    settings = {"out": out, "workers": workers, "gpus": spec.get("gpus", 0)}
    return runs, settings


def _check(config: TrainConfig) -> None:
    """The task exists and the positional encoding is known (CraspError otherwise)."""
    from crasp_compiler.tasks.registry import get_task
    from crasp_compiler.train.models import PES

    if isinstance(config.task, str):
        get_task(config.task)
    if config.pe not in PES:
        raise CraspError(f"unknown positional encoding {config.pe!r} (one of {', '.join(PES)})")


def _run_one(config: dict) -> str | None:
    """Train one run (in a worker: one torch thread); the error message if it failed."""
    import torch

    from crasp_compiler.train.loop import train

    torch.set_num_threads(1)
    try:
        train(TrainConfig.from_dict(config))
    except Exception as err:  # one failed run must not stop the sweep; reported at the end
        return f"{Path(config['out_dir']).name}: {type(err).__name__}: {err}"
    return None


def run_sweep(
    path: str | Path, ray_address: str | None = None, workers: int | None = None
) -> list[Path]:
    """Run every run of the grid file not finished yet; returns the run directories.

    Locally with ``workers`` processes (default: the file's ``workers``), or, given
    ``ray_address`` (``"auto"``, ``"local"`` or ``"ray://host:port"``), as Ray tasks."""
    runs, settings = load_grid(path)
    todo = [run for run in runs if not (run.out_dir / "results.json").exists()]
    configs = [run.config for run in todo]
    if ray_address is not None:
        errors = _run_ray(configs, ray_address, settings["gpus"])
    else:
        count = workers or settings["workers"]
        if count <= 1:
            errors = [_run_one(config) for config in configs]
        else:
            with ProcessPoolExecutor(max_workers=count) as pool:
                errors = list(pool.map(_run_one, configs))
    failed = [error for error in errors if error]
    if failed:
        raise CraspError(f"{len(failed)} of {len(configs)} runs failed:\n" + "\n".join(failed))
    return [run.out_dir for run in runs]


def _run_ray(configs: list[dict], address: str, gpus: float) -> list[str | None]:
    try:
        import ray
    except ImportError:
        raise CraspError(
            "a Ray address was given but ray is not installed (pip install 'crasp-compiler[ray]')"
        ) from None
    ray.init(address=None if address == "local" else address, ignore_reinit_error=True)
    remote = ray.remote(num_cpus=1, num_gpus=gpus)(_run_one)
    return ray.get([remote.remote(config) for config in configs])


def collect(path: str | Path) -> list[dict]:
    """The results of every finished run of a grid file (``results.json`` contents, with
    the run's name under ``"run"``)."""
    runs, _ = load_grid(path)
    out = []
    for run in runs:
        file = run.out_dir / "results.json"
        if file.exists():
            out.append({"run": run.name, **json.loads(file.read_text())})
    return out
