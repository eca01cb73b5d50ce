"""The figure of a ``crasp compare`` record (matplotlib, imported here only): probe
scores per variable × stage for the trained model in distribution, the random-init
control and the longest bin probed, and the trained × compiled head distances."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

MAX_ROWS = 60  # variables drawn at most (the record has them all)


def normalised(kind: str, value: float | None) -> float:
    """A score on one scale: 0 at chance, 1 perfect (R² as it is; balanced accuracy
    ``2(b − ½)``); NaN for None."""
    if value is None:
        return math.nan
    return 2 * (value - 0.5) if kind == "bool" else value


def _grid(record: Mapping[str, Any], key: str, bin_: str) -> np.ndarray:
    rows = record["variables"][:MAX_ROWS]
    return np.array(
        [[normalised(v["kind"], s) for s in v[key][bin_]] for v in rows], dtype=np.float64
    ).reshape(len(rows), len(record["stages"]))


def draw(record: Mapping[str, Any], path: Path) -> Path:
    """Draw ``record`` to ``path`` (PNG) and return the path."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    bins = list(record["bins"])
    panels = [
        ("scores", bins[0], f"trained, LEN {bins[0]}"),
        ("random_init", bins[0], f"random init, LEN {bins[0]}"),
    ]
    if len(bins) > 1:
        panels.append(("scores", bins[-1], f"trained, LEN {bins[-1]}"))
    heads = record["heads"]
    rows = min(len(record["variables"]), MAX_ROWS)
    width = 2.2 + 0.55 * len(record["stages"])
    tall = 1.2 + 0.24 * rows
    extra = 1 if heads.get("tv") else 0
    fig, axes = plt.subplots(
        1, len(panels) + extra, figsize=(width * len(panels) + 4 * extra, tall), squeeze=False
    )
    labels = [v["target"] for v in record["variables"][:MAX_ROWS]]
    for n, (ax, (key, bin_, title)) in enumerate(zip(axes[0], panels, strict=False)):
        grid = _grid(record, key, bin_)
        image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(record["stages"])), record["stages"], rotation=60, fontsize=7)
        ax.set_yticks(range(len(labels)), labels if n == 0 else [], fontsize=7)
        ax.set_title(title, fontsize=8)
        for (i, j), value in np.ndenumerate(grid):
            if not np.isnan(value):
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=5, color="w")
    fig.colorbar(image, ax=axes[0][: len(panels)].tolist(), shrink=0.8, label="probe score")
    if extra:
        ax = axes[0][-1]
        tv = np.array(heads["tv"])
        ax.imshow(tv, vmin=0, vmax=1, cmap="magma_r", aspect="auto")
        for (i, j), value in np.ndenumerate(tv):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=6, color="c")
        ax.set_yticks(range(len(heads["trained"])), heads["trained"], fontsize=7)
        short = [name.split(":")[0] for name in heads["compiled"]]
        ax.set_xticks(range(len(short)), short, rotation=60, fontsize=7)
        ax.set_title("attention TV distance (trained × compiled)", fontsize=8)
    fig.suptitle(f"{record['task']}: the compiled program's variables inside {record['run']}")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
