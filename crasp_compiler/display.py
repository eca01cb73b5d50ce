"""Plain-text tables of values per position, shared by the CLI commands."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from crasp_compiler.errors import cells


def _cell(value: object) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "T" if value else "F"
    if isinstance(value, (float, np.floating)):
        return f"{value:.4g}"
    return str(value)


def value_table(
    tokens: Sequence[str], rows: Sequence[tuple[str, Iterable[object]]], include_empty: bool = True
) -> str:
    """A table with one column per position and one row per named value.

    Each row holds n + 1 values (the empty prefix, then each token position); with
    ``include_empty=False`` the empty-prefix column is left out.
    """
    start = 0 if include_empty else 1
    header = ["position"] + [str(t - 1) for t in range(start, len(tokens) + 1)]
    token_row = ["token"] + (["ε"] if include_empty else []) + list(tokens)
    body = [[name] + [_cell(v) for v in list(values)[start:]] for name, values in rows]
    table = [header, token_row, *body]
    # Widths in terminal cells, so that wide tokens (CJK, emoji) keep the columns aligned.
    widths = [max(cells(row[c]) for row in table) for c in range(len(header))]
    lines = [
        "  ".join(
            " " * (w - cells(cell)) + cell if c else cell + " " * (w - cells(cell))
            for c, (cell, w) in enumerate(zip(row, widths, strict=False))
        )
        for row in table
    ]
    lines.insert(2, "-" * cells(lines[0]))
    return "\n".join(line.rstrip() for line in lines)
