"""How much memory a forward pass will hold, estimated from the model and the input sizes
before anything is allocated (:func:`require_forward_memory`, called by the numpy
executor's ``run``, the torch module's ``run`` and ``crasp check``), so that a run too
large for the memory budget (:mod:`crasp_compiler.budget`) is refused in one line instead
of ending in a ``MemoryError`` after minutes.

With ``N = B·T`` residual rows (batch × (1 + longest input)), ``s`` bytes a number
(8 in float64, 4 in float32) and ``d`` the residual width, the pass holds at its peak

    N·s·(3d + max over layers of L) + S + R + N·8·(2 + m)

- ``3d``: the residual, the update being added to it and their sum (a product with a
  sparse weight matrix also copies its input and its output once: counted in ``L``);
- ``L`` per layer, the largest of: every head's ``W_V x`` of a prefix-sums group plus
  its float64 running sums (``Σ dv · (s + 16) / s``); one other head's queries, keys
  (twice: the product's copy), values and an input copy (``d + dq + 2dk + dv``); a
  BOS-keyed head's float64 values shifted per offset (``dv · (3 + 2c) · 8 / s``); the
  MLP's hidden units three times over (``3h``, five with layer-norm groups) and a copy
  of its output (``d``);
- ``S``: the score rows of a chunked head, ``E·(4s + 2)`` bytes with
  ``E = B·T·min(T, max(1, SCORE_BUDGET // (B·T)))`` entries (none on torch's fused path);
- ``R``: with ``residuals`` (``crasp run --trace``) every stage kept, ``(2·layers + 1)·N·d·s``;
- ``N·8·(2 + m)``: the token ids, positions and the ``m`` numeric inputs.

A pass that runs the model's lowered plan (``planned``: every head a prefix-sums head,
nothing observed; :func:`~crasp_compiler.runtime.forward.run_plan`) holds only one chunk
of :data:`~crasp_compiler.runtime.forward.PLAN_ROWS` rows of the above at a time, and
per row the ids, positions and steps and, per output, its raw value, the run's value and
its decision: ``PLAN_ROWS·s·(3d + L)·8/s + N·(24 + K·(2s + 9))`` for K outputs, or the
layer-by-layer estimate where that is smaller (Dyck-1 at 10^6 tokens: 53 bytes a token
estimated, 41 measured for the numpy executor, 36 for the torch module).

Measured against the growth of the peak resident size of a fresh process, the estimate
is 1.2–1.4 × the numpy executor's on ``cumsum.pcoc`` at n = 500 … 4,000 (width ≈ n, 84 MiB
… 1.1 GiB estimated) and 1.5–2.4 × on narrow C-RASP models (width 8–45) at 2·10^5 … 10^6
tokens, where the column path updates the residual in place
(``tests/runtime/test_memory_budget.py`` checks one size). Most of it at large n is dense
(T × n) query and key rows of routing heads whose ``W_Q``/``W_K`` are one-hot per machine:
a gather of the matching key would need none of it (issue 26 is about that cost). The
executor's banded path for relu-mode offset lookups (``numpy_exec._banded``) holds
``B·T·(2D + 1)·dk`` numbers for a band D known only from the queries; it is not counted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

from crasp_compiler.budget import require_memory
from crasp_compiler.model.model import Model, head_kinds
from crasp_compiler.runtime.forward import (
    PLAN_ROWS,
    SCORE_BUDGET,
    HeadParams,
    Path,
    head_path,
)

# A layer as the estimate reads it: its heads (kinds settled), the MLP's hidden width (0:
# no MLP) and whether the MLP has layer-norm groups.
LayerShape = tuple[Sequence[HeadParams[Any]], int, bool]


def model_layers(model: Model) -> list[LayerShape]:
    """The layers of ``model`` as :func:`forward_bytes` reads them."""
    return [
        (
            [
                cast("HeadParams[Any]", replace(head, kind=kind))
                for head, kind in zip(layer.heads, kinds, strict=True)
            ],
            0 if layer.mlp is None else layer.mlp.w1.shape[0],
            layer.mlp is not None and bool(layer.mlp.norm_groups),
        )
        for layer, kinds in zip(model.layers, head_kinds(model), strict=True)
    ]


def forward_bytes(
    width: int,
    inputs: int,
    layers: Sequence[LayerShape],
    batch: int,
    size: int,
    itemsize: int,
    *,
    fused: bool = False,
    residuals: bool = False,
    planned: int | None = None,
) -> int:
    """The bytes a forward pass over ``batch`` sequences of ``size`` positions (BOS
    included) holds at its peak, in a float type of ``itemsize`` bytes (module docstring),
    for a model of residual width ``width`` with ``inputs`` numeric inputs;
    ``fused``: the backend has fused causal softmax attention (torch); ``planned``: the
    pass runs the model's plan, which has that many outputs."""
    rows, d = batch * size, width
    if planned is not None:  # at most what the pass layer by layer would hold
        chunk = forward_bytes(width, inputs, layers, 1, min(rows, PLAN_ROWS), 8, fused=fused)
        whole = forward_bytes(width, inputs, layers, batch, size, itemsize, fused=fused)
        return min(whole, chunk + rows * (24 + planned * (2 * itemsize + 9)))
    entries = batch * size * min(size, max(1, SCORE_BUDGET // max(1, rows)))
    widest = 0.0  # L of the module docstring, in numbers per row
    scores = 0
    for heads, hidden, normalized in layers:
        grouped = 0.0
        for head in heads:
            dq, dk, dv = head.w_q.shape[0], head.w_k.shape[0], head.w_v.shape[0]
            path = head_path(head, fused=fused)
            if path is Path.PREFIX_SUMS:
                grouped += dv * (itemsize + 16) / itemsize
            elif path is Path.BOS_KEYED:
                offsets = sum(1 for c in head.bias if c >= 0)
                widest = max(widest, d + dq + 2 * dk + dv * (3 + 2 * offsets) * 8 / itemsize)
            else:
                widest = max(widest, d + dq + 2 * dk + dv)
                if path is Path.CHUNKED:
                    scores = max(scores, entries * (4 * itemsize + 2))
        widest = max(widest, grouped)
        if hidden:
            widest = max(widest, hidden * (5 if normalized else 3) + d)
    held = rows * itemsize * (3 * d + widest) + scores
    if residuals:
        held += (2 * len(layers) + 1) * rows * d * itemsize
    return math.ceil(held + rows * 8 * (2 + inputs))  # ids, lengths, numeric inputs


def require_forward_memory(
    width: int,
    inputs: int,
    layers: Sequence[LayerShape],
    batch: int,
    size: int,
    itemsize: int,
    *,
    fused: bool = False,
    residuals: bool = False,
    planned: int | None = None,
    extra: int = 0,
    what: str = "running the model",
) -> None:
    """CraspError (:func:`~crasp_compiler.budget.require_memory`) when the pass
    (:func:`forward_bytes`) and ``extra`` bytes held beside it exceed the memory budget."""
    needed = forward_bytes(
        width,
        inputs,
        layers,
        batch,
        size,
        itemsize,
        fused=fused,
        residuals=residuals,
        planned=planned,
    )
    held = f"{batch:,} input{'s' * (batch != 1)} of length {size - 1:,}"
    shape = f"width {width:,}, {len(layers)} layers, {itemsize * 8}-bit floats"
    require_memory(needed + extra, f"{what} ({shape}) on {held}")
