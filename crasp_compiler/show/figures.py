"""Matplotlib pictures of one input's pass through a compiled model.

matplotlib is imported inside the functions (it is optional: ``pip install
'crasp-compiler[train]'``), so importing this module costs nothing without it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from crasp_compiler.errors import CraspError
from crasp_compiler.model.model import Model
from crasp_compiler.show.data import Trace, program_graph, site_order, trace

# Residual rows drawn at most; beyond that only rows that are ever nonzero, then the first.
MAX_ROWS = 80


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError:
        raise CraspError("pictures need matplotlib: pip install 'crasp-compiler[train]'") from None
    return plt


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


def residual_figure(model: Model, item: Any) -> Any:
    """The residual stream after the embedding and every sublayer, one heatmap each:
    residual labels as rows, positions as columns; the rows a sublayer changed are framed
    in gold."""
    plt = _pyplot()
    run = _trace(model, item)
    rows = shown_rows(run)
    stages = run.stages
    height = max(2.5, 0.2 * len(rows) + 1.3)
    width = max(1.6, 0.28 * len(run.positions) + 0.4)
    reused = any(stage.rows != run.rows for stage in stages)  # rows relabelled per stage
    fig, axes = plt.subplots(
        1,
        len(stages),
        figsize=((width + 2.2 * reused) * len(stages) + 2.2, height),
        sharey=not reused,
        squeeze=False,
        layout="constrained",
    )
    scale = max(1e-9, max(float(np.max(np.abs(s.values[:, rows]))) for s in stages))
    image = None
    for ax, stage in zip(axes[0], stages, strict=True):
        data = stage.values[:, rows].T
        image = ax.imshow(data, cmap="RdBu_r", vmin=-scale, vmax=scale, aspect="auto")
        ax.set_title(stage.label, fontsize=9)
        ax.set_xticks(range(len(run.positions)), run.positions, fontsize=7)
        for r, k in enumerate(rows):
            if stage.changed[k]:
                ax.add_patch(
                    plt.Rectangle(
                        (-0.5, r - 0.5), len(run.positions), 1, fill=False, ec="gold", lw=1.2
                    )
                )
    for ax, stage in zip(axes[0] if reused else axes[0][:1], stages, strict=False):
        ax.set_yticks(range(len(rows)), [stage.rows[k] for k in rows], fontsize=7)
    for ax, stage in zip(axes[0], stages, strict=True):
        changed = [r for r, k in enumerate(rows) if stage.changed[k]]
        ax.set_xlabel(f"{len(changed)} row(s) changed", fontsize=7)
    if len(rows) < len(run.rows):
        fig.suptitle(f"{len(rows)} of {len(run.rows):,} residual rows (nonzero ones)", fontsize=8)
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8, pad=0.01)
    return fig


def attention_figure(model: Model, item: Any) -> Any:
    """Every head's attention pattern on the input: queries as rows, keys as columns,
    one panel per head, layers as rows of panels."""
    plt = _pyplot()
    run = _trace(model, item)
    if not run.patterns:
        raise CraspError("the model has no attention heads")
    layers = sorted({p.layer for p in run.patterns})
    across = max(sum(1 for p in run.patterns if p.layer == lay) for lay in layers)
    size = max(2.2, 0.25 * len(run.positions) + 1.0)
    fig, axes = plt.subplots(
        len(layers), across, figsize=(size * across, size * len(layers) + 0.4), squeeze=False
    )
    for ax in axes.flat:
        ax.set_visible(False)
    for row, lay in enumerate(layers):
        heads = [p for p in run.patterns if p.layer == lay]
        for col, pattern in enumerate(heads):
            ax = axes[row][col]
            ax.set_visible(True)
            ax.imshow(pattern.weights, cmap="Greys", vmin=0, vmax=1)
            title = f"L{lay + 1} h{pattern.head}: {pattern.label}"
            ax.set_title(title if len(title) < 40 else title[:37] + "...", fontsize=7)
            ax.set_xticks(range(len(run.positions)), run.positions, fontsize=6)
            ax.set_yticks(range(len(run.positions)), run.positions, fontsize=6)
            ax.set_xlabel("key", fontsize=6)
            ax.set_ylabel("query", fontsize=6)
    fig.tight_layout()
    return fig


def outputs_figure(model: Model, item: Any) -> Any:
    """Each named output's decided value at every position, as a labelled grid."""
    plt = _pyplot()
    run = _trace(model, item)
    names = list(run.outputs)
    columns = run.output_labels
    fig, ax = plt.subplots(figsize=(max(3.0, 0.5 * len(columns) + 1.5), 0.45 * len(names) + 1.0))
    shade = np.zeros((len(names), len(columns)))
    for r, name in enumerate(names):
        for c, value in enumerate(run.outputs[name]):
            shade[r, c] = 1.0 if _truthy(value) else 0.0
            ax.text(c, r, _text(value), ha="center", va="center", fontsize=7)
    ax.imshow(shade, cmap="Greens", vmin=0, vmax=2.5, aspect="auto")
    ax.set_xticks(range(len(columns)), columns, fontsize=7)
    ax.set_yticks(range(len(names)), names, fontsize=8)
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
    fig, ax = plt.subplots(figsize=(1.9 * len(columns) + 1, 0.8 * tallest + 1.4))
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
            name,
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
