"""Golden files: a stage's output as reviewable text, compared with a committed copy.

:func:`dump` prints any dataclass tree (a typed IR, the blocks a lowering emits) the same
way for every language: ``Name(field=value, ...)`` on one line where it fits, else one
field per line; fields that do not take part in equality, source spans, the source text
and its file name are left out, sets are sorted, floats are ``repr``'d (every bit shows). :func:`dump_model`
prints a compiled model: its header, then every nonzero weight by the labels of its row
and column. :func:`check` compares with the file, or rewrites it under
``pytest --update-goldens``.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from crasp_compiler.model import Model

WIDTH = 96  # longest line :func:`dump` keeps a value on
SKIPPED = {"span", "source", "filename"}  # where the program came from, not what it is


def dump(value: object, indent: int = 0, before: int = 0) -> str:
    """``value`` as text (module docstring), at ``indent`` spaces after ``before``
    characters on its first line."""
    flat = _flat(value)
    if indent + before + len(flat) <= WIDTH:
        return flat
    pad, inner = " " * indent, " " * (indent + 2)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [
            f"{inner}{name}={dump(item, indent + 2, len(name) + 1)}"
            for name, item in _fields(value)
        ]
        return f"{type(value).__name__}(\n" + ",\n".join(fields) + f",\n{pad})"
    if isinstance(value, Mapping):
        items = [
            f"{inner}{_flat(k)}: {dump(v, indent + 2, len(_flat(k)) + 2)}" for k, v in value.items()
        ]
        return "{\n" + ",\n".join(items) + f",\n{pad}}}"
    if isinstance(value, (list, tuple)):
        open_, close = ("[", "]") if isinstance(value, list) else ("(", ")")
        items = [f"{inner}{dump(v, indent + 2)}" for v in value]
        return f"{open_}\n" + ",\n".join(items) + f",\n{pad}{close}"
    return flat


def _fields(value: Any) -> list[tuple[str, object]]:
    return [
        (f.name, getattr(value, f.name))
        for f in dataclasses.fields(value)
        if f.compare and f.name not in SKIPPED
    ]


def _flat(value: object) -> str:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        inner = ", ".join(f"{name}={_flat(item)}" for name, item in _fields(value))
        return f"{type(value).__name__}({inner})"
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_flat(k)}: {_flat(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(_flat(v) for v in value)) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flat(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(_flat(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, np.ndarray):
        return _flat(value.tolist())
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        return repr(value.item())
    return repr(value)


# ---------------------------------------------------------------- compiled models


def _dense(matrix: Any) -> np.ndarray:
    return np.asarray(matrix.todense() if hasattr(matrix, "todense") else matrix)


def _entries(matrix: Any, rows: Sequence[str], columns: Sequence[str]) -> list[str]:
    """Every nonzero ``matrix[r, c]`` as ``rows[r] <- columns[c]: weight``."""
    dense = _dense(matrix)
    return [
        f"    {rows[r]} <- {columns[c]}: {float(dense[r, c])!r}"
        for r, c in zip(*np.nonzero(dense), strict=True)
    ]


def dump_model(model: Model) -> str:
    """The model's header and every nonzero weight, by row and column labels."""
    d = len(model.residual)
    residual = [f"r{k}[{label}]" for k, label in enumerate(model.residual)]
    lines = [
        f"vocab: {_flat(model.vocab)}",
        f"features: {_flat(model.features)}",
        f"inputs: {_flat(model.inputs)}",
        f"accept: {model.accept!r}",
        f"guarantee: {model.guarantee.text}",
        f"guarantee by dtype: {_flat(model.guarantee.dtypes)}",
        f"layers: {len(model.layers)}, width: {d}",
        "residual:",
        *(f"    {name}" for name in residual),
        "W_E:",
        *_entries(model.w_e.T, residual, [repr(t) for t in model.vocab]),
    ]
    if model.features:
        lines += ["W_P:", *_entries(model.w_p, residual, model.features)]
    if model.w_x is not None:
        lines += ["W_X:", *_entries(model.w_x, residual, model.inputs)]
    for number, layer in enumerate(model.layers, start=1):
        for h, head in enumerate(layer.heads, start=1):
            dk, dv = _dense(head.w_q).shape[0], _dense(head.w_v).shape[0]
            kind = head.kind.value if head.kind is not None else None
            lines.append(
                f"L{number} head {h} {head.label!r}: {head.weighting.value}, {head.mask.value}, "
                f"scale {head.scale!r}, bias {_flat(head.bias)}, kind {kind}"
            )
            for name, matrix, rows in (
                ("W_Q", head.w_q, [f"q{k}" for k in range(dk)]),
                ("W_K", head.w_k, [f"k{k}" for k in range(dk)]),
                ("W_V", head.w_v, [f"v{k}" for k in range(dv)]),
            ):
                lines += [f"  {name}:", *_entries(matrix, rows, residual)]
            lines += ["  W_O:", *_entries(head.w_o, residual, [f"v{k}" for k in range(dv)])]
        mlp = layer.mlp
        if mlp is None:
            continue
        units = [
            f"u{u}[{mlp.labels[u] if u < len(mlp.labels) else ''}]"
            for u in range(len(mlp.activations))
        ]
        lines.append(f"L{number} mlp: {len(units)} units, norm groups {_flat(mlp.norm_groups)}")
        b1, b2 = np.asarray(mlp.b1), np.asarray(mlp.b2)
        w1 = _dense(mlp.w1)
        for u, name in enumerate(units):
            lines.append(f"  {name}: {mlp.activations[u].value}, bias {float(b1[u])!r}")
            lines += _entries(w1[u : u + 1], ["   "], residual)  # the unit <- its inputs
        lines += ["  W_2:", *_entries(mlp.w2, residual, units)]
        lines += [f"    {residual[k]} += {float(b2[k])!r}" for k in np.nonzero(b2)[0]]
    for output in model.outputs:
        lines.append(f"output {output.name} ({output.rule.value}):")
        lines += _entries(np.asarray(output.weights)[None], [output.name], residual)
    return "\n".join(lines)


def check(path: Path, text: str, update: bool) -> None:
    """``text`` equals the golden file ``path`` (or, with ``update``, becomes it)."""
    text = text.rstrip("\n") + "\n"
    if update:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        return
    assert path.exists(), f"no golden file {path}: run pytest --update-goldens and review it"
    want = path.read_text()
    if text != want:
        import difflib

        diff = "".join(
            difflib.unified_diff(
                want.splitlines(keepends=True),
                text.splitlines(keepends=True),
                str(path),
                "now",
                n=2,
            )
        )
        raise AssertionError(
            f"{path.name} changed (pytest --update-goldens rewrites it):\n{diff[:6000]}"
        )
