"""Plots of training results (the ``results.json`` dicts that
:func:`~crasp_compiler.experiments.train.loop.train` writes), drawn off screen with the Agg canvas:

- :func:`plot_length_bins`: sequence tasks, accuracy per length bin, one line per
  positional encoding (mean over seeds, min–max band), the compiled model dashed;
- :func:`plot_value_scales`: numeric tasks, MSE per value scale c on a log axis, one line
  per numeric model kind, the compiled model dashed (zero errors drawn at ``MSE_FLOOR``).

Runs of a program file (``crasp train --program``, family ``program``) also get, dotted,
the trained model's agreement with the compiled one: per length bin the fraction of
sequences on which they agree (C-RASP), per scale the MSE between their outputs (PCOC).

Each writes one PNG per task and, for several tasks, one overview grid (each replaced
whole: a failed write keeps the old file). :func:`load_results` gathers the results of
grid files and run directories.
"""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from crasp_compiler.errors import CraspError
from crasp_compiler.experiments.train.records import read_results, skipped
from crasp_compiler.files import writable_dir, write_bytes

MSE_FLOOR = 1e-16  # where an MSE of 0 (or below) is drawn on the log axis
PE_COLORS = {"ape": "C0", "nope": "C1", "sin": "C2", "random": "C3"}
KIND_COLORS = {"positional": "C0", "standard": "C1"}
GRID_COLUMNS = 4  # overview figures: subplots per row
Item = TypeVar("Item")
Key = TypeVar("Key")


def load_results(sources: Iterable[str | Path]) -> list[dict[str, Any]]:
    """The results of every finished run under ``sources``: grid TOML files (each run's
    record in the grid's ``results`` directory, else its ``results.json``), ``results.json``
    files, run directories, or directories searched recursively for ``results.json``. Each
    dict gets its directory under ``"run_dir"``; a file reached twice is read once. A file
    that is not a complete ``results.json`` (an interrupted write, a field missing or of
    the wrong type: :func:`~.records.read_results`) is skipped with a warning naming it
    and the field."""
    from crasp_compiler.experiments.train.sweep import load_grid

    files: dict[Path, None] = {}
    for source in sources:
        path = Path(source)
        if path.is_dir():
            found = sorted(path.rglob("results.json"))
        elif path.name == "results.json":
            found = [path]
        elif path.is_file():  # a run's record, else its results.json
            runs, _ = load_grid(path)
            found = [
                run.record
                if run.record is not None and run.record.exists()
                else run.out_dir / "results.json"
                for run in runs
            ]
            found = [file for file in found if file.exists()]
        else:
            raise CraspError("no such file or directory", filename=str(path))
        files.update((file.resolve(), None) for file in found)
    results = []
    for file in files:
        try:
            data = read_results(file)
        except CraspError as err:
            warnings.warn(skipped(err), stacklevel=2)
            continue
        results.append({**data, "run_dir": str(file.parent)})
    return results


def plot_length_bins(results: list[dict[str, Any]], out: Path) -> list[Path]:
    """Accuracy per length bin of the sequence-task results, one figure per task in ``out``
    (``length_bins_<task>.png``) plus ``length_bins.png`` with every task when there are
    several; returns the written paths."""
    by_task = _group([r for r in results if r.get("kind") == "sequence"], lambda r: r["task"])
    return _figures(by_task, _draw_length_bins, Path(out), "length_bins")


def plot_value_scales(results: list[dict[str, Any]], out: Path) -> list[Path]:
    """MSE per value scale of the numeric-task results, one figure per task in ``out``
    (``value_scales_<task>.png``) plus ``value_scales.png`` with every task when there
    are several; returns the written paths."""
    by_task = _group([r for r in results if r.get("kind") == "numeric"], lambda r: r["task"])
    return _figures(by_task, _draw_value_scales, Path(out), "value_scales")


def _group(items: Iterable[Item], key: Callable[[Item], Key]) -> dict[Key, list[Item]]:
    """Items by ``key``, in the order keys first appear."""
    groups: dict[Key, list[Item]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def _title(task: str, runs: list[dict[str, Any]]) -> str:
    """``task — class``: the registered task's C-RASP class, or the program's language."""
    from crasp_compiler.experiments.tasks.base import PROGRAM_FAMILY
    from crasp_compiler.experiments.tasks.registry import all_tasks

    if runs[0].get("family") == PROGRAM_FAMILY:
        kind = "C-RASP" if runs[0].get("kind") == "sequence" else "PCOC"
        return f"{task} — {kind} program"
    found = all_tasks().get(task)
    return f"{task} — {'unregistered task' if found is None else found.crasp_class}"


def _agreement(runs: list[dict[str, Any]]) -> bool:
    """Whether to draw the trained model's agreement with the compiled one: program runs."""
    from crasp_compiler.experiments.tasks.base import PROGRAM_FAMILY

    return any(r.get("family") == PROGRAM_FAMILY and r.get("agreement") for r in runs)


def _figures(
    by_task: dict[str, list[dict[str, Any]]],
    draw: Callable[[Axes, str, list[dict[str, Any]]], None],
    out: Path,
    prefix: str,
) -> list[Path]:
    """One figure per task, and an overview grid of every task when there are several."""
    if not by_task:
        return []
    writable_dir(out)
    paths = []
    for task, runs in by_task.items():
        figure = Figure(figsize=(6.4, 4.2), layout="constrained")
        axes = figure.add_subplot()
        draw(axes, task, runs)
        axes.legend(fontsize="small")
        paths.append(_save(figure, out / f"{prefix}_{task}.png"))
    if len(by_task) > 1:
        columns = min(GRID_COLUMNS, len(by_task))
        rows = math.ceil(len(by_task) / columns)
        figure = Figure(figsize=(4.2 * columns, 3.2 * rows), layout="constrained")
        handles: dict[str, Artist] = {}
        for index, (task, runs) in enumerate(by_task.items()):
            axes = figure.add_subplot(rows, columns, index + 1)
            draw(axes, task, runs)
            for handle, label in zip(*axes.get_legend_handles_labels(), strict=True):
                handles.setdefault(label, handle)
        figure.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=4)
        paths.append(_save(figure, out / f"{prefix}.png"))
    return paths


def _save(figure: Figure, path: Path) -> Path:
    buffer = io.BytesIO()
    figure.savefig(buffer, dpi=120, format="png")
    write_bytes(path, buffer.getvalue())
    return path


def _spread(rows: list[list[float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, minimum and maximum over the rows (seeds), ignoring missing (NaN) entries;
    NaN where a column has no value."""
    values = np.array(rows, dtype=float)
    present = ~np.isnan(values)
    count = present.sum(axis=0)
    total = np.where(present, values, 0.0).sum(axis=0)
    mean = np.divide(total, count, out=np.full(values.shape[1], np.nan), where=count > 0)
    low = np.where(count > 0, np.where(present, values, np.inf).min(axis=0), np.nan)
    high = np.where(count > 0, np.where(present, values, -np.inf).max(axis=0), np.nan)
    return mean, low, high


def _seeds(count: int) -> str:
    return "1 seed" if count == 1 else f"mean, min–max of {count} seeds"


def _draw_length_bins(axes: Axes, task: str, runs: list[dict[str, Any]]) -> None:
    """x: the length bins (in order of their lower end); y: fraction of sequences right."""
    bins: dict[str, list[int]] = {}
    for run in runs:
        bins.update(run["bins"])
    names = sorted(bins, key=lambda name: tuple(bins[name]))
    x = np.arange(len(names))
    agreement = _agreement(runs)
    for pe, group in _group(runs, lambda r: r["config"]["pe"]).items():
        mean, low, high = _spread([[r["accuracy"].get(b, np.nan) for b in names] for r in group])
        color = PE_COLORS.get(pe)
        line = axes.plot(x, mean, marker="o", color=color, label=f"{pe} ({_seeds(len(group))})")
        if len(group) > 1:
            axes.fill_between(x, low, high, color=color, alpha=0.2, linewidth=0)
        if agreement:
            rows = [[(r.get("agreement") or {}).get(b, np.nan) for b in names] for r in group]
            mean, _, _ = _spread(rows)
            label = f"{pe}: agreement with compiled"
            axes.plot(x, mean, ":", marker=".", color=line[0].get_color(), label=label)
    compiled = [r["compiled_accuracy"] for r in runs if r.get("compiled_accuracy")]
    if compiled:
        mean, _, _ = _spread([[c.get(b, np.nan) for b in names] for c in compiled])
        axes.plot(x, mean, "k--", marker="x", label="compiled program")
    axes.set_xticks(x, names)
    axes.set_ylim(-0.03, 1.03)
    axes.set_xlabel("length bin (LEN)")
    axes.set_ylabel(
        "accuracy / agreement (sequences)" if agreement else "accuracy (sequences exactly right)"
    )
    axes.set_title(_title(task, runs))
    axes.grid(alpha=0.3)


def _draw_value_scales(axes: Axes, task: str, runs: list[dict[str, Any]]) -> None:
    """x: the scale factor c of the test values; y: MSE (log), floored at ``MSE_FLOOR``."""
    scales = sorted({float(c) for run in runs for c in run["metrics"]})
    several_n = len({run.get("n") for run in runs}) > 1

    def on_axis(values: dict[str, float]) -> list[float]:
        by_scale = {float(c): value for c, value in values.items()}
        return [max(by_scale.get(c, np.nan), MSE_FLOOR) for c in scales]

    def mse(metrics: dict[str, dict[str, float]]) -> list[float]:
        return on_axis({c: m["mse"] for c, m in metrics.items()})

    def key(run: dict[str, Any]) -> str:
        kind = run["config"].get("numeric_kind", "?")
        return f"{kind}, n={run.get('n')}" if several_n else kind

    agreement = _agreement(runs)
    for label, group in _group(runs, key).items():
        mean, low, high = _spread([mse(r["metrics"]) for r in group])
        color = KIND_COLORS.get(group[0]["config"].get("numeric_kind")) if not several_n else None
        line = axes.plot(
            scales, mean, marker="o", color=color, label=f"{label} ({_seeds(len(group))})"
        )
        if len(group) > 1:
            axes.fill_between(scales, low, high, color=color, alpha=0.2, linewidth=0)
        rows = [on_axis(r["agreement"]) for r in group if r.get("agreement")]
        if agreement and rows:
            mean, _, _ = _spread(rows)
            shade = line[0].get_color()
            axes.plot(scales, mean, ":", marker=".", color=shade, label=f"{label}: MSE to compiled")
    compiled = [r["compiled_metrics"] for r in runs if r.get("compiled_metrics")]
    if compiled:
        mean, _, _ = _spread([mse(c) for c in compiled])
        floored = bool(np.any(mean <= MSE_FLOOR))
        label = f"compiled program (MSE ≤ {MSE_FLOOR:g} drawn at {MSE_FLOOR:g})"
        axes.plot(scales, mean, "k--", marker="x", label=label if floored else "compiled program")
    axes.set_yscale("log")
    axes.set_xlabel("value scale c (test inputs × c)")
    axes.set_ylabel("MSE")
    axes.set_title(_title(task, runs))
    axes.grid(alpha=0.3, which="both")
