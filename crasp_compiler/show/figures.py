"""Matplotlib pictures of one input's pass through a compiled model.

matplotlib is imported inside the functions (it is optional: ``pip install
'crasp-compiler[train]'``), so importing this module costs nothing without it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import numpy as np

from crasp_compiler.errors import CraspError
from crasp_compiler.files import replacing
from crasp_compiler.model.model import Model
from crasp_compiler.show.data import Trace, program_graph, site_order, stage_count, trace

# Residual rows drawn at most; beyond that only rows that are ever nonzero, then the first.
MAX_ROWS = 80
# Positions labelled on an axis at most; a longer input has every k-th position labelled
# by its index (the image itself keeps every position).
MAX_TICKS = 40
# Panels (residual stages, attention heads) one figure draws at most, the first ones
# (the HTML page has them all), PANEL_COLUMNS of them side by side.
MAX_PANELS = 48
PANEL_COLUMNS = 6
# Characters of a label drawn at most.
MAX_LABEL = 32
# Agg draws at most this many pixels a side.
MAX_SIDE = 1 << 16
# Bytes per pixel counted for a figure drawn and saved: a generous bound on the RGBA
# canvas (4), its resampled image copies and the encoder's copy.
BYTES_PER_PIXEL = 24
# Cells outputs_figure writes a value into at most (beyond, the shading alone).
MAX_ANNOTATED = 400

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError:
        raise CraspError("pictures need matplotlib: pip install 'crasp-compiler[train]'") from None
    return plt


def _verbatim(build: Callable[_P, _R]) -> Callable[_P, _R]:
    """``build`` with every text it creates drawn as written (``$`` is no mathtext)."""

    @functools.wraps(build)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with _pyplot().rc_context({"text.parse_math": False}):
            return build(*args, **kwargs)

    return wrapper


def _trace(model: Model, item: Any) -> Trace:
    return item if isinstance(item, Trace) else trace(model, item)


def _clip(text: str, limit: int = MAX_LABEL) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shown_rows(run: Trace, limit: int = MAX_ROWS) -> list[int]:
    """The residual rows a picture draws: all when few, else those ever nonzero (at most
    ``limit``)."""
    if len(run.rows) <= limit:
        return list(range(len(run.rows)))
    active = np.zeros(len(run.rows), dtype=bool)
    for stage in run.stages:
        active |= np.any(np.abs(stage.values) > 0, axis=0)
    return [int(k) for k in np.flatnonzero(active)[:limit]]


def _position_ticks(ax: Any, axis: str, labels: list[str], fontsize: float) -> None:
    """Label the positions on ``axis``: each by its label when few, else every k-th by
    its index."""
    step = -(-len(labels) // MAX_TICKS)
    where = list(range(0, len(labels), step))
    text = [_clip(labels[k]) if step == 1 else str(k) for k in where]
    (ax.set_xticks if axis == "x" else ax.set_yticks)(where, text, fontsize=fontsize)


def _grid(count: int) -> tuple[int, int]:
    """(lines, columns) of panels for ``count`` panels."""
    columns = max(1, min(count, PANEL_COLUMNS))
    return -(-count // columns), columns


def _residual_size(stages: int, rows: int, positions: int, reused: bool) -> tuple[float, float]:
    lines, columns = _grid(min(stages, MAX_PANELS))
    width = max(1.6, 0.28 * min(positions, MAX_TICKS) + 0.4) + 2.2 * reused
    return width * columns + 2.2, max(2.5, 0.2 * rows + 1.3) * lines + 0.4


def _attention_size(panels: int, positions: int) -> tuple[float, float]:
    lines, columns = _grid(panels)
    size = max(2.2, 0.25 * min(positions, MAX_TICKS) + 1.0)
    return size * columns, size * lines + 0.4


def _outputs_size(names: int, columns: int) -> tuple[float, float]:
    return max(3.0, 0.5 * min(columns, MAX_TICKS) + 1.5), 0.45 * min(names, MAX_ROWS) + 1.0


def _program_size(model: Model) -> tuple[float, float]:
    nodes, _ = program_graph(model)
    columns = {site for _, site in nodes}
    tallest = max((sum(site == s for _, site in nodes) for s in columns), default=0)
    return 1.9 * len(columns) + 1, 0.8 * tallest + 1.4


def figure_sizes(model: Model, positions: int, picture: str) -> dict[str, tuple[float, float]]:
    """The size in inches of each figure ``crasp show --picture PICTURE`` draws for
    ``model`` on an input of ``positions`` positions (BOS included), from the model
    alone, before anything is computed: a name (``residual``, ``attention``,
    ``outputs``, ``program``) per figure; ``all`` names those the model has."""
    stages = stage_count(model)
    heads = sum(len(layer.heads) for layer in model.layers)
    reused = model.occupants is not None
    names = max(1, len(model.outputs))
    sizes = {
        "residual": _residual_size(stages, min(model.width, MAX_ROWS), positions, reused),
        "attention": _attention_size(min(heads, MAX_PANELS), positions),
        "outputs": _outputs_size(names, positions),
    }
    if picture != "all":
        return {picture: _program_size(model) if picture == "program" else sizes[picture]}
    if not heads:
        del sizes["attention"]
    if not model.outputs:
        del sizes["outputs"]
    if program_graph(model)[0]:
        sizes["program"] = _program_size(model)
    return sizes


def require_drawable(sizes: dict[str, tuple[float, float]], dpi: int, filename: str) -> float:
    """The peak bytes of drawing and saving the largest figure of ``sizes`` (inches) at
    ``dpi``; CraspError, before anything is drawn, when one exceeds what Agg draws
    (:data:`MAX_SIDE` pixels a side)."""
    for name, (width, height) in sizes.items():
        if max(width, height) * dpi >= MAX_SIDE:
            raise CraspError(
                f"the {name} picture would be {math.ceil(width * dpi):,} × "
                f"{math.ceil(height * dpi):,} pixels at --dpi {dpi} (at most "
                f"{MAX_SIDE - 1:,} a side); lower --dpi",
                filename=filename,
            )
    return max(w * h * dpi * dpi * BYTES_PER_PIXEL for w, h in sizes.values())


def save(figure: Any, path: str | Path, dpi: int) -> None:
    """Write ``figure`` to ``path`` (its suffix names the format) whole or not at all
    (:func:`crasp_compiler.files.replacing`), text as written, and close it."""
    plt = _pyplot()
    try:
        with plt.rc_context({"text.parse_math": False}), replacing(path, "picture") as tmp:
            figure.savefig(tmp, dpi=dpi, format=Path(path).suffix[1:].lower())
    finally:
        plt.close(figure)


@_verbatim
def residual_figure(model: Model, item: Any) -> Any:
    """The residual stream after the embedding and every sublayer, one heatmap each
    (the first :data:`MAX_PANELS`, :data:`PANEL_COLUMNS` a line): residual labels as rows,
    positions as columns; the rows a sublayer changed are framed in gold."""
    plt = _pyplot()
    run = _trace(model, item)
    rows = shown_rows(run)
    stages = run.stages[:MAX_PANELS]
    reused = any(stage.rows != run.rows for stage in run.stages)  # rows relabelled per stage
    lines, columns = _grid(len(stages))
    fig, axes = plt.subplots(
        lines,
        columns,
        figsize=_residual_size(len(run.stages), len(rows), len(run.positions), reused),
        sharey=not reused,
        squeeze=False,
        layout="constrained",
    )
    scale = max(1e-9, max(float(np.max(np.abs(s.values[:, rows]))) for s in stages))
    image = None
    for ax in axes.flat[len(stages) :]:
        ax.set_visible(False)
    for k, (ax, stage) in enumerate(zip(axes.flat, stages, strict=False)):
        data = stage.values[:, rows].T
        image = ax.imshow(data, cmap="RdBu_r", vmin=-scale, vmax=scale, aspect="auto")
        ax.set_title(_clip(stage.label, 40), fontsize=9)
        _position_ticks(ax, "x", run.positions, 7)
        changed = [r for r, row in enumerate(rows) if stage.changed[row]]
        for r in changed:
            ax.add_patch(
                plt.Rectangle((-0.5, r - 0.5), len(run.positions), 1, fill=False, ec="gold", lw=1.2)
            )
        ax.set_xlabel(f"{len(changed)} row(s) changed", fontsize=7)
        if reused or k % columns == 0:
            ax.set_yticks(range(len(rows)), [_clip(stage.rows[r]) for r in rows], fontsize=7)
    notes = []
    if len(rows) < len(run.rows):
        notes.append(f"{len(rows)} of {len(run.rows):,} residual rows (nonzero ones)")
    if len(stages) < len(run.stages):
        notes.append(f"the first {len(stages)} of {len(run.stages)} stages")
    if notes:
        fig.suptitle("; ".join(notes), fontsize=8)
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, pad=0.01)
    return fig


@_verbatim
def attention_figure(model: Model, item: Any) -> Any:
    """Every head's attention pattern on the input: queries as rows, keys as columns,
    one panel per head (the first :data:`MAX_PANELS`, :data:`PANEL_COLUMNS` a line)."""
    plt = _pyplot()
    run = _trace(model, item)
    if not run.patterns:
        raise CraspError("the model has no attention heads")
    patterns = run.patterns[:MAX_PANELS]
    lines, columns = _grid(len(patterns))
    fig, axes = plt.subplots(
        lines,
        columns,
        figsize=_attention_size(len(patterns), len(run.positions)),
        squeeze=False,
    )
    for ax in axes.flat[len(patterns) :]:
        ax.set_visible(False)
    for ax, pattern in zip(axes.flat, patterns, strict=False):
        ax.imshow(pattern.weights, cmap="Greys", vmin=0, vmax=1)
        ax.set_title(
            _clip(f"L{pattern.layer + 1} h{pattern.head}: {pattern.label}", 40), fontsize=7
        )
        _position_ticks(ax, "x", run.positions, 6)
        _position_ticks(ax, "y", run.positions, 6)
        ax.set_xlabel("key", fontsize=6)
        ax.set_ylabel("query", fontsize=6)
    if len(patterns) < len(run.patterns):
        fig.suptitle(f"the first {len(patterns)} of {len(run.patterns)} heads", fontsize=8)
    fig.tight_layout()
    return fig


@_verbatim
def outputs_figure(model: Model, item: Any) -> Any:
    """Each named output's decided value at every position, as a shaded grid, each cell
    labelled with its value up to :data:`MAX_ANNOTATED` cells."""
    plt = _pyplot()
    run = _trace(model, item)
    names = list(run.outputs)
    columns = run.output_labels
    fig, ax = plt.subplots(figsize=_outputs_size(len(names), len(columns)))
    shade = np.zeros((len(names), len(columns)))
    annotate = len(names) * len(columns) <= MAX_ANNOTATED
    for r, name in enumerate(names):
        for c, value in enumerate(run.outputs[name]):
            shade[r, c] = 1.0 if _truthy(value) else 0.0
            if annotate:
                ax.text(c, r, _text(value), ha="center", va="center", fontsize=7)
    ax.imshow(shade, cmap="Greens", vmin=0, vmax=2.5, aspect="auto")
    _position_ticks(ax, "x", columns, 7)
    ax.set_yticks(range(len(names)), [_clip(name) for name in names], fontsize=8)
    ax.set_title("decided outputs per position", fontsize=9)
    fig.tight_layout()
    return fig


def _truthy(value: Any) -> bool:
    try:
        return bool(value) and not (isinstance(value, float) and np.isnan(value))
    except (TypeError, ValueError):
        return False


def _text(value: Any) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "T" if value else "F"
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.3g}"
    return str(value)


@_verbatim
def program_figure(model: Model) -> Any:
    """The program graph: each definition in the column of the sublayer that computes it
    (embedding, layer/head, layer MLP), arrows from the definitions it uses."""
    plt = _pyplot()
    nodes, edges = program_graph(model)
    if not nodes:
        raise CraspError("the model records no definitions (the program graph is for C-RASP)")
    columns = [s for s in site_order(model) if any(site == s for _, site in nodes)]
    x = {s: k for k, s in enumerate(columns)}
    depth: dict[str, int] = {}
    place: dict[str, tuple[float, float]] = {}
    for name, site in nodes:
        row = depth.get(site, 0)
        depth[site] = row + 1
        place[name] = (float(x.get(site, 0)), -float(row))
    tallest = max(depth.values())
    fig, ax = plt.subplots(figsize=_program_size(model))
    for used, user in edges:
        (x0, y0), (x1, y1) = place[used], place[user]
        ax.annotate(
            "",
            xy=(x1, y1),
            xytext=(x0, y0),
            arrowprops={
                "arrowstyle": "->",
                "color": "#888",
                "shrinkA": 14,
                "shrinkB": 14,
                "connectionstyle": "arc3,rad=0.15",
            },
        )
    for name, (px, py) in place.items():
        ax.text(
            px,
            py,
            _clip(name),
            ha="center",
            va="center",
            fontsize=8,
            bbox={"boxstyle": "round", "fc": "#eef4ff", "ec": "#4060a0"},
        )
    ax.set_xticks(range(len(columns)), columns, fontsize=8, rotation=30)
    ax.set_yticks([])
    ax.set_xlim(-0.7, len(columns) - 0.3)
    ax.set_ylim(-tallest + 0.4, 0.6)
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    ax.set_title("definitions by the sublayer that computes them", fontsize=9)
    fig.tight_layout()
    return fig


def all_figures(model: Model, item: Any) -> list[Any]:
    """The residual, attention (when the model has heads), output and program (when the
    model records definitions) pictures."""
    run = _trace(model, item)
    out = [residual_figure(model, run)]
    if run.patterns:
        out.append(attention_figure(model, run))
    if run.outputs:
        out.append(outputs_figure(model, run))
    if program_graph(model)[0]:
        out.append(program_figure(model))
    return out
