"""Matplotlib pictures of one input's pass through a compiled model.

matplotlib is imported inside the functions (it is optional: ``pip install
'crasp-compiler[train]'``), so importing this module costs nothing without it.

A figure is at most :data:`MAX_INCHES` a side (``MAX_INCHES × --dpi`` pixels): a model
with more stages or heads than one figure holds is drawn in parts, one file each
(:func:`pictures`). Layers, heads and positions are numbered as in ``crasp info`` and the
traces (``L1 head 1``; BOS at −1).
"""

from __future__ import annotations

import functools
import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import numpy as np

from crasp_compiler.errors import CraspError
from crasp_compiler.files import replacing
from crasp_compiler.model.model import Model
from crasp_compiler.show.data import (
    FIRST,
    Intervention,
    Trace,
    head_label,
    program_graph,
    row_group,
    row_scales,
    short,
    stage_count,
    trace,
)

# Residual rows drawn at most; beyond that only rows that are ever nonzero, then the first.
MAX_ROWS = 80
# Positions labelled on an axis at most; a longer input has every k-th position labelled
# by its number (the image itself keeps every position).
MAX_TICKS = 40
# Panels (residual stages, attention heads) side by side at most.
PANEL_COLUMNS = 6
# Characters of a row or definition label drawn at most (its start and end kept).
MAX_LABEL = 40
# Characters of a head's title kept (a list keeps its first names and says how many
# more), then wrapped to the panel's width.
MAX_TITLE = 240
# A figure is at most this many inches a side (6,400 pixels at the default --dpi 100);
# more panels go to further parts, each its own file.
MAX_INCHES = 64.0
# Agg draws at most this many pixels a side.
MAX_SIDE = 1 << 16
# Bytes per pixel counted for a figure drawn and saved: a generous bound on the RGBA
# canvas (4), its resampled image copies and the encoder's copy.
BYTES_PER_PIXEL = 24
# Cells outputs_figure writes a value into at most (beyond, the shading alone); the
# residual picture writes counts into its cells up to as many per panel.
MAX_ANNOTATED = 400
# Inches a line of a head's title takes (7 points and spacing).
TITLE_LINE = 0.13
# Inches between two depths of the program graph.
COLUMN = 2.3

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


def shown_rows(run: Trace, limit: int = MAX_ROWS) -> list[int]:
    """The residual rows a picture draws: all when few, else those ever nonzero (at most
    ``limit``)."""
    if len(run.rows) <= limit:
        return list(range(len(run.rows)))
    active = np.zeros(len(run.rows), dtype=bool)
    for stage in run.stages:
        active |= np.any(np.abs(stage.values) > 0, axis=0)
    return [int(k) for k in np.flatnonzero(active)[:limit]]


def _position_ticks(ax: Any, axis: str, labels: list[str], fontsize: float, first: int) -> None:
    """Label the positions on ``axis`` (column k is position ``k + first``): each by its
    label when few, else every k-th position by its number."""
    step = -(-len(labels) // MAX_TICKS)
    if step == 1:
        where = list(range(len(labels)))
        text = [short(label, MAX_LABEL) for label in labels]
    else:
        where = [k for k in range(len(labels)) if k + first >= 0 and (k + first) % step == 0]
        text = [str(k + first) for k in where]
    (ax.set_xticks if axis == "x" else ax.set_yticks)(where, text, fontsize=fontsize)


# ---------------------------------------------------------------- what is drawn where


@dataclass(frozen=True)
class Picture:
    """One figure file: the picture (``residual``, ``attention``, ``outputs``,
    ``program``), the panels it draws (stages or heads, by index) and how many side by
    side, which part of the picture it is and its size in inches."""

    name: str
    panels: range
    part: int
    parts: int
    size: tuple[float, float]
    columns: int = 1

    def path(self, output: str, beside: bool) -> str:
        """The file for ``crasp show -o output``: ``output`` for the first part of the
        residual (or of the one picture asked for), else ``.attention``, ``.outputs``,
        ``.program`` (``beside``) and ``.part2``, … before the suffix."""
        middle = f".{self.name}" if beside and self.name != "residual" else ""
        middle += f".part{self.part}" if self.part > 1 else ""
        return str(Path(output).with_suffix(middle + Path(output).suffix)) if middle else output


def _parts(
    name: str, count: int, panel: tuple[float, float], extra: tuple[float, float]
) -> list[Picture]:
    """``count`` panels of ``panel`` inches, :data:`PANEL_COLUMNS` a line at most, in as
    many figures as keep each (with ``extra`` inches of margins) within
    :data:`MAX_INCHES` a side."""
    width, height = panel
    columns = max(1, min(PANEL_COLUMNS, count, int((MAX_INCHES - extra[0]) // width)))
    lines = max(1, min(-(-count // columns), int((MAX_INCHES - extra[1]) // height)))
    per_part = columns * lines
    parts = max(1, -(-count // per_part))
    out = []
    for part in range(parts):
        panels = range(part * per_part, min(count, (part + 1) * per_part))
        across, down = min(columns, len(panels)), -(-len(panels) // columns)
        size = (
            min(MAX_INCHES, width * across + extra[0]),
            min(MAX_INCHES, height * down + extra[1]),
        )
        out.append(Picture(name, panels, part + 1, parts, size, across))
    return out


def _residual_parts(model: Model, positions: int) -> list[Picture]:
    reused = model.occupants is not None
    rows = min(model.width, MAX_ROWS)
    width = max(1.6, 0.28 * min(positions, MAX_TICKS) + 0.4) + 2.4 * reused
    panel = (width, max(2.5, 0.2 * rows + 1.3))
    return _parts("residual", stage_count(model), panel, (3.2 + 0.4 * (not reused), 0.6))


def _title_lines(title: str, width: float) -> list[str]:
    """A head's title in lines fitting ``width`` inches at 7 points."""
    return textwrap.wrap(short(title, MAX_TITLE), max(12, int(width * 16)))


def _head_titles(model: Model) -> list[str]:
    return [
        f"L{index + 1} head {h + 1}: {head_label(model, head.label)}"
        for index, layer in enumerate(model.layers)
        for h, head in enumerate(layer.heads)
    ]


def _attention_parts(model: Model, positions: int) -> list[Picture]:
    titles = _head_titles(model)
    size = max(2.2, 0.25 * min(positions, MAX_TICKS) + 1.0)
    lines = max((len(_title_lines(t, size)) for t in titles), default=1)
    return _parts("attention", len(titles), (size, size + TITLE_LINE * lines), (0.2, 0.5))


def _outputs_size(names: int, columns: int, compared: bool) -> tuple[float, float]:
    width = max(3.0, 0.5 * min(columns, MAX_TICKS) + 1.5)
    return width * (1 + compared) + 0.5 * compared, 0.45 * min(names, MAX_ROWS) + 1.3


def _layers(model: Model) -> tuple[dict[str, tuple[int, int]], int, int]:
    """The program graph laid out in layers by dependency depth: each definition's
    ``(layer, row)``, the number of layers and of rows in the fullest one."""
    nodes, edges = program_graph(model)
    uses: dict[str, list[str]] = {name: [] for name, _ in nodes}
    for used, user in edges:
        uses[user].append(used)
    depth = dict.fromkeys(uses, 0)
    for _ in nodes:  # longest paths in the acyclic graph: at most one pass per node
        deeper = {n: max((depth[u] + 1 for u in uses[n]), default=0) for n in uses}
        if deeper == depth:
            break
        depth = deeper
    layers: dict[int, list[str]] = {}
    for name, _ in nodes:
        layers.setdefault(depth[name], []).append(name)
    row: dict[str, int] = {}
    for level in sorted(layers):  # each layer ordered by the mean row of what it uses
        members = layers[level]
        key = {
            n: float(np.mean([row[u] for u in uses[n]])) if uses[n] else float(k)
            for k, n in enumerate(members)
        }
        members.sort(key=key.__getitem__)
        row |= {name: k for k, name in enumerate(members)}
    place = {name: (depth[name], row[name]) for name, _ in nodes}
    return place, len(layers), max((len(m) for m in layers.values()), default=0)


def _program_size(model: Model) -> tuple[float, float]:
    _, columns, tallest = _layers(model)
    return min(MAX_INCHES, COLUMN * columns + 0.8), min(MAX_INCHES, 0.6 * tallest + 1.2)


def pictures(model: Model, positions: int, picture: str, compared: bool = False) -> list[Picture]:
    """The figure files ``crasp show --picture PICTURE`` writes for ``model`` on an input
    of ``positions`` positions (BOS included), from the model alone, before anything is
    computed; ``all`` gives those the model has, ``compared`` an intervention's outputs
    beside the compiled ones."""
    heads = sum(len(layer.heads) for layer in model.layers)
    names = max(1, len(model.outputs))
    out = _residual_parts(model, positions) if picture in ("all", "residual") else []
    if picture == "attention" or (picture == "all" and heads):
        out += _attention_parts(model, positions)
    if picture == "outputs" or (picture == "all" and model.outputs):
        out.append(Picture("outputs", range(1), 1, 1, _outputs_size(names, positions, compared)))
    if picture == "program" or (picture == "all" and program_graph(model)[0]):
        out.append(Picture("program", range(1), 1, 1, _program_size(model)))
    return out


def require_drawable(shown: list[Picture], dpi: int, filename: str) -> float:
    """The peak bytes of drawing and saving the largest figure of ``shown`` at ``dpi``;
    CraspError, before anything is drawn, when one exceeds what Agg draws
    (:data:`MAX_SIDE` pixels a side)."""
    for picture in shown:
        width, height = picture.size
        if max(width, height) * dpi >= MAX_SIDE:
            raise CraspError(
                f"the {picture.name} picture would be {math.ceil(width * dpi):,} × "
                f"{math.ceil(height * dpi):,} pixels at --dpi {dpi} (at most "
                f"{MAX_SIDE - 1:,} a side); lower --dpi",
                filename=filename,
            )
    return max(w * h * dpi * dpi * BYTES_PER_PIXEL for w, h in (p.size for p in shown))


def save(figure: Any, path: str | Path, dpi: int) -> None:
    """Write ``figure`` to ``path`` (its suffix names the format) whole or not at all
    (:func:`crasp_compiler.files.replacing`), text as written, and close it."""
    plt = _pyplot()
    try:
        with plt.rc_context({"text.parse_math": False}), replacing(path, "picture") as tmp:
            figure.savefig(tmp, dpi=dpi, format=Path(path).suffix[1:].lower())
    finally:
        plt.close(figure)


def draw(
    model: Model, run: Trace, picture: Picture, intervention: Intervention | None = None
) -> Any:
    """The figure of one :class:`Picture` of :func:`pictures`."""
    if picture.name == "residual":
        return residual_figure(model, run, picture.part)
    if picture.name == "attention":
        return attention_figure(model, run, picture.part)
    if picture.name == "outputs":
        return outputs_figure(model, run, intervention)
    return program_figure(model)


def _part(shown: list[Picture], part: int, what: str) -> Picture:
    if not 1 <= part <= len(shown):
        raise CraspError(f"the {what} picture has {len(shown)} part(s), not part {part}")
    return shown[part - 1]


def _notes(picture: Picture, total: int, what: str) -> list[str]:
    if picture.parts == 1:
        return []
    first, last = picture.panels[0] + 1, picture.panels[-1] + 1
    held = f"{what} {first}–{last}" if last > first else f"{what.removesuffix('s')} {first}"
    return [f"{held} of {total} (part {picture.part} of {picture.parts})"]


# ---------------------------------------------------------------- the residual stream


def _row_label(name: str, count: bool, scale: float) -> str:
    text = short(name, MAX_LABEL) + (" (count)" if count else "")
    return text if math.isclose(scale, 1.0) else f"{text} ±{scale:.3g}"


@_verbatim
def residual_figure(model: Model, item: Any, part: int = 1) -> Any:
    """The residual stream after the embedding and every sublayer, one heatmap each
    (``part`` of the parts :func:`pictures` splits them into): rows as the program names
    them, positions as columns (BOS at −1), colours scaled per row group (the scale after
    a row's name unless 1), counts written as counts in their cells; the rows a sublayer
    changed are framed in gold."""
    plt = _pyplot()
    run = _trace(model, item)
    picture = _part(_residual_parts(model, len(run.positions)), part, "residual")
    rows = shown_rows(run)
    stages = [run.stages[k] for k in picture.panels]
    reused = model.occupants is not None  # rows relabelled per stage
    columns = picture.columns
    lines = -(-len(stages) // columns)
    fig, axes = plt.subplots(
        lines,
        columns,
        figsize=picture.size,
        sharey=not reused,
        squeeze=False,
        layout="constrained",
    )
    scales = row_scales(run, rows)
    annotate = len(run.positions) <= MAX_TICKS
    image = None
    for ax in axes.flat[len(stages) :]:
        ax.set_visible(False)
    for k, (ax, stage) in enumerate(zip(axes.flat, stages, strict=False)):
        groups = [row_group(stage.rows[row], bool(stage.counts[row])) for row in rows]
        data = np.stack(
            [stage.values[:, row] / scales[g] for row, g in zip(rows, groups, strict=True)]
        )
        image = ax.imshow(data, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
        ax.set_title(stage.label, fontsize=9)
        _position_ticks(ax, "x", run.positions, 7, FIRST)
        changed = [r for r, row in enumerate(rows) if stage.changed[row]]
        for r in changed:
            ax.add_patch(
                plt.Rectangle((-0.5, r - 0.5), len(run.positions), 1, fill=False, ec="gold", lw=1.2)
            )
        for r, row in enumerate(rows):
            if annotate and stage.counts[row] and np.any(data[r]):
                for c, value in enumerate(stage.count_values(row)):
                    ink = "white" if abs(data[r, c]) > 0.6 else "black"
                    ax.text(c, r, f"{value:g}", ha="center", va="center", fontsize=6, color=ink)
        ax.set_xlabel(f"{len(changed)} row(s) changed", fontsize=7)
        if reused or k % columns == 0:
            labels = [
                _row_label(stage.names[row], bool(stage.counts[row]), scales[g])
                for row, g in zip(rows, groups, strict=True)
            ]
            ax.set_yticks(range(len(rows)), labels, fontsize=7)
    notes = []
    if len(rows) < len(run.rows):
        notes.append(f"{len(rows)} of {len(run.rows):,} residual rows (nonzero ones)")
    notes += _notes(picture, len(run.stages), "stages")
    if notes:
        fig.suptitle("; ".join(notes), fontsize=8)
    bar = fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, pad=0.01)
    bar.set_label("value ÷ its row group's scale (±scale after a row's name, else 1)", fontsize=7)
    return fig


# ---------------------------------------------------------------- attention


@_verbatim
def attention_figure(model: Model, item: Any, part: int = 1) -> Any:
    """Every head's attention pattern on the input (``part`` of the parts
    :func:`pictures` splits them into): queries as rows, keys as columns, positions
    numbered from BOS at −1, one panel per head titled with its full label, wrapped."""
    plt = _pyplot()
    run = _trace(model, item)
    if not run.patterns:
        raise CraspError("the model has no attention heads")
    picture = _part(_attention_parts(model, len(run.positions)), part, "attention")
    patterns = [run.patterns[k] for k in picture.panels]
    size = max(2.2, 0.25 * min(len(run.positions), MAX_TICKS) + 1.0)
    columns = picture.columns
    lines = -(-len(patterns) // columns)
    fig, axes = plt.subplots(
        lines, columns, figsize=picture.size, squeeze=False, layout="constrained"
    )
    for ax in axes.flat[len(patterns) :]:
        ax.set_visible(False)
    for ax, pattern in zip(axes.flat, patterns, strict=False):
        ax.imshow(pattern.weights, cmap="Greys", vmin=0, vmax=1)
        ax.set_title("\n".join(_title_lines(pattern.title, size)), fontsize=7)
        _position_ticks(ax, "x", run.positions, 6, FIRST)
        _position_ticks(ax, "y", run.positions, 6, FIRST)
        ax.set_xlabel("key", fontsize=6)
        ax.set_ylabel("query", fontsize=6)
    notes = _notes(picture, len(run.patterns), "heads")
    if notes:
        fig.suptitle(notes[0], fontsize=8)
    return fig


# ---------------------------------------------------------------- outputs


@_verbatim
def outputs_figure(model: Model, item: Any, intervention: Intervention | None = None) -> Any:
    """Each named output's decided value at every position, as a shaded grid, each cell
    labelled with its value up to :data:`MAX_ANNOTATED` cells; with an ``intervention``,
    the outputs as compiled and with it side by side, the cells it changed framed in
    red."""
    plt = _pyplot()
    run = _trace(model, item)
    names = list(run.outputs)
    columns = run.output_labels
    panels = [("decided outputs per position", run.outputs)]
    if intervention is not None:
        panels = [("as compiled", intervention.before), (intervention.what, intervention.after)]
    fig, axes = plt.subplots(
        1,
        len(panels),
        figsize=_outputs_size(len(names), len(run.positions), intervention is not None),
        squeeze=False,
        layout="constrained",
    )
    annotate = len(names) * len(columns) <= MAX_ANNOTATED
    changed = 0
    for k, (ax, (title, values)) in enumerate(zip(axes.flat, panels, strict=True)):
        shade = np.zeros((len(names), len(columns)))
        for r, name in enumerate(names):
            for c, value in enumerate(values[name]):
                shade[r, c] = 1.0 if _truthy(value) else 0.0
                if annotate:
                    ax.text(c, r, _text(value), ha="center", va="center", fontsize=7)
                if k and not _same(value, run.outputs[name][c]):
                    changed += 1
                    ax.add_patch(
                        plt.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, ec="red", lw=1.5)
                    )
        ax.imshow(shade, cmap="Greens", vmin=0, vmax=2.5, aspect="auto")
        _position_ticks(ax, "x", columns, 7, run.output_first)
        ax.set_yticks(range(len(names)), [short(name, MAX_LABEL) for name in names], fontsize=8)
        ax.set_title("\n".join(textwrap.wrap(title, 48)), fontsize=9)
    if intervention is not None:
        fig.suptitle(f"{changed} decided output(s) changed", fontsize=8)
    return fig


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) or bool(np.isnan(a) and np.isnan(b))
    except (TypeError, ValueError):
        return False


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


# ---------------------------------------------------------------- the program graph


@_verbatim
def program_figure(model: Model) -> Any:
    """The program graph in layers by dependency depth: a definition one column right
    of the deepest definition it uses, each boxed with the sublayer that computes it,
    arrows from the definitions it uses; the figure grows with the graph."""
    plt = _pyplot()
    nodes, edges = program_graph(model)
    if not nodes:
        raise CraspError("the model records no definitions (the program graph is for C-RASP)")
    place, columns, tallest = _layers(model)
    site = dict(nodes)
    fig, ax = plt.subplots(figsize=_program_size(model), layout="constrained")
    texts = {name: f"{short(name, 24)}\n{site[name]}" for name in place}
    # half a box's width in columns (COLUMN inches each): 7-point characters, padding
    half = {n: (0.055 * max(map(len, t.split("\n"))) + 0.12) / 2 / COLUMN for n, t in texts.items()}
    for used, user in edges:
        (x0, y0), (x1, y1) = place[used], place[user]
        ax.annotate(
            "",
            xy=(x1 - half[user], -y1),
            xytext=(x0 + half[used], -y0),
            arrowprops={
                "arrowstyle": "->",
                "color": "#8899bb",
                "lw": 0.8,
                "shrinkA": 0,
                "shrinkB": 0,
                "connectionstyle": "arc3,rad=0.0" if x1 - x0 == 1 else "arc3,rad=0.12",
            },
            zorder=1,
        )
    for name, (px, py) in place.items():
        ax.text(
            px,
            -py,
            texts[name],
            ha="center",
            va="center",
            fontsize=7,
            zorder=2,
            bbox={"boxstyle": "round", "fc": "#eef4ff", "ec": "#4060a0"},
        )
    ax.set_xticks(range(columns), [f"depth {k}" for k in range(columns)], fontsize=8)
    ax.set_yticks([])
    ax.set_xlim(-0.6, columns - 0.4)
    ax.set_ylim(-tallest + 0.4, 0.6)
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    ax.set_title(
        f"{len(nodes)} definitions by dependency depth, each with the sublayer computing it",
        fontsize=9,
    )
    return fig


def all_figures(model: Model, item: Any, intervention: Intervention | None = None) -> list[Any]:
    """Every figure ``crasp show`` writes for ``model`` on ``item``: the residual and
    attention (when the model has heads) parts, the outputs (beside an
    ``intervention``'s) and the program graph (when the model records definitions)."""
    run = _trace(model, item)
    shown = pictures(model, len(run.positions), "all", intervention is not None)
    return [draw(model, run, picture, intervention) for picture in shown]
