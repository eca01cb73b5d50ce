"""Assemble a circuit into a :class:`Model`: schedule, allocate, lift to global matrices.

Scheduling is as-soon-as-possible on sublayer slots: attention of layer L is slot
2L − 1, its MLP slot 2L. A block goes in the first slot of its kind after every slot
that writes a variable it reads, so independent blocks share a layer (parallel heads,
concatenated hidden units) and the depth is the circuit's longest path.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from crasp_compiler.cookbook.blocks import Block, FFNBlock, HeadBlock
from crasp_compiler.model.model import (
    DENSE_LIMIT,
    MLP,
    Activation,
    Head,
    Layer,
    Mask,
    Matrix,
    Weighting,
    matrix,
)


def schedule(blocks: list[Block], inputs: set[str]) -> list[int]:
    """The slot of every block (1-based; odd = attention, even = MLP)."""
    ready: dict[str, int] = dict.fromkeys(inputs, 0)
    last_read: dict[str, int] = {}
    slots = []
    for block in blocks:
        earliest = max((ready[var] for var in block.reads), default=0) + 1
        for var in block.in_place:  # after the last write, not before any old reader
            earliest = max(earliest, ready[var] + 1, last_read.get(var, 0))
        want_attention = isinstance(block, HeadBlock)
        if (earliest % 2 == 1) != want_attention:
            earliest += 1
        slots.append(earliest)
        for var in block.reads:
            last_read[var] = max(last_read.get(var, 0), earliest)
        for var in block.writes:
            ready[var] = earliest
    return slots


def stored_entries(blocks: list[Block], slots: list[int], width: int) -> int:
    """The numbers the layers of ``blocks`` (scheduled into ``slots``) will store: every
    matrix dense up to :data:`~crasp_compiler.model.model.DENSE_LIMIT` entries, its
    nonzeros beyond (an upper bound: coefficients are not yet summed)."""

    def size(rows: int, cols: int, nonzero: int) -> int:
        return rows * cols if rows * cols <= DENSE_LIMIT else nonzero

    def entries(forms: list[Mapping[str, float]]) -> int:
        return sum(len(form) for form in forms)

    total = 0
    mlps: dict[int, list[FFNBlock]] = {}
    for block, slot in zip(blocks, slots, strict=True):
        if isinstance(block, HeadBlock):
            dk, dv = max(1, len(block.query)), len(block.values)
            total += size(dk, width, entries(block.query)) + size(dk, width, entries(block.key))
            total += size(dv, width, entries(list(block.values.values()))) + size(width, dv, dv)
        else:
            mlps.setdefault(slot, []).append(block)
    for parts in mlps.values():
        units = sum(len(part.units) for part in parts)
        first = sum(entries([unit.form for unit in part.units]) for part in parts)
        second = sum(len(coefs) for part in parts for coefs in part.outputs.values())
        total += size(units, width, first) + size(width, units, second) + units + width
    return total


def _stack(forms: list[Mapping[str, float]], index: dict[str, int], width: int) -> Matrix:
    """One row per form, over the residual layout."""
    rows, cols, values = [], [], []
    for r, form in enumerate(forms):
        for var, coef in form.items():
            rows.append(r)
            cols.append(index[var])
            values.append(coef)
    return matrix((len(forms), width), rows, cols, values)


def assemble_layers(blocks: list[Block], residual: list[str], slots: list[int]) -> list[Layer]:
    """Global layers for ``blocks``, scheduled into ``slots`` (:func:`schedule`), over the
    residual layout ``residual`` (labels)."""
    index = {var: k for k, var in enumerate(residual)}
    width = len(residual)
    depth = (max(slots, default=0) + 1) // 2
    layers = [Layer([], None) for _ in range(depth)]
    mlp_parts: list[list[FFNBlock]] = [[] for _ in range(depth)]
    for block, slot in zip(blocks, slots, strict=True):
        number = (slot - 1) // 2
        if isinstance(block, HeadBlock):
            layers[number].heads.append(_head(block, index, width))
        else:
            mlp_parts[number].append(block)
    for layer, parts in zip(layers, mlp_parts, strict=True):
        if parts:
            layer.mlp = _mlp(parts, index, width)
    return layers


def _head(block: HeadBlock, index: dict[str, int], width: int) -> Head:
    def stack(forms: list[Mapping[str, float]]) -> Matrix:
        return _stack(forms or [{}], index, width)

    w_o = matrix(
        (width, len(block.values)),
        [index[var] for var in block.values],
        range(len(block.values)),
        [1.0] * len(block.values),
    )
    return Head(
        w_q=stack(block.query),
        w_k=stack(block.key),
        w_v=stack(list(block.values.values())),
        w_o=w_o,
        scale=block.scale,
        bias=dict(block.bias),
        weighting=Weighting(block.weighting),
        mask=Mask(block.mask),
        label=block.label,
    )


def _mlp(parts: list[FFNBlock], index: dict[str, int], width: int) -> MLP:
    units = [unit for part in parts for unit in part.units]
    w1 = _stack([unit.form for unit in units], index, width)
    b1 = np.array([unit.bias for unit in units])
    rows, cols, values = [], [], []
    b2 = np.zeros(width)
    labels = []
    groups = []
    start = 0
    for part in parts:
        groups += [[start + unit for unit in group] for group in part.norm_groups]
        for var, coefs in part.outputs.items():
            for unit, coef in coefs.items():
                rows.append(index[var])
                cols.append(start + unit)
                values.append(coef)
        for var, value in part.constants.items():
            b2[index[var]] += value
        labels += [part.label] * len(part.units)
        start += len(part.units)
    w2 = matrix((width, len(units)), rows, cols, values)
    activations = [Activation(unit.activation) for unit in units]
    return MLP(w1, b1, w2, b2, activations, labels, groups)
