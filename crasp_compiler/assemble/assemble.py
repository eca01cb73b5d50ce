"""Assemble a circuit into a :class:`Model`: schedule, allocate, lift to global matrices.

Scheduling is as-soon-as-possible on sublayer slots: attention of layer L is slot
2L − 1, its MLP slot 2L. A block goes in the first slot of its kind after every slot
that writes a variable it reads, so independent blocks share a layer (parallel heads,
concatenated hidden units) and the depth is the circuit's longest path.

Allocation is by liveness (:func:`allocate`): a variable that no block reads any more
and that is not an output is *dead*; its dimension can hold a later variable. The
residual is additive, so the dead value is first cancelled by two ReLU units in an MLP
after its last reader (``−ReLU(x) + ReLU(−x) = −x``, exact in floating point: a unit
reads the one dimension with coefficient 1, and the sum adds exact zeros), and the new
variable is written after that MLP.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from crasp_compiler.cookbook.blocks import Block, FFNBlock, HeadBlock
from crasp_compiler.cookbook.ffn import cancel
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
        reads = block.reads  # a property that builds a set: read once
        earliest = max((ready[var] for var in reads), default=0) + 1
        for var in block.in_place:  # after the last write, not before any old reader
            earliest = max(earliest, ready[var] + 1, last_read.get(var, 0))
        want_attention = isinstance(block, HeadBlock)
        if (earliest % 2 == 1) != want_attention:
            earliest += 1
        slots.append(earliest)
        for var in reads:
            last_read[var] = max(last_read.get(var, 0), earliest)
        for var in block.writes:
            ready[var] = earliest
    return slots


@dataclass
class Allocation:
    """Where every variable lives. ``dims[var]`` is its residual dimension; ``cancels``
    are the blocks that zero dead variables (:func:`~crasp_compiler.cookbook.ffn.cancel`)
    with their slots; ``occupants[k]`` lists ``(stage, variable)`` for every variable
    dimension k holds in turn, from the stage (0 = embedding, ``s`` = after slot ``s``)
    its value is there, with ``""`` from the stage a cancel frees it."""

    dims: dict[str, int]
    width: int
    cancels: list[tuple[FFNBlock, int]]
    occupants: list[list[tuple[int, str]]]

    @property
    def reuses(self) -> bool:
        return bool(self.cancels)


def allocate(
    blocks: Sequence[Block],
    slots: Sequence[int],
    variables: Sequence[str],
    fixed: int,
    kept: set[str],
    *,
    reuse: bool = True,
) -> Allocation:
    """Residual dimensions for ``variables`` (the first ``fixed`` are inputs: they keep
    their own dimensions). Without ``reuse`` every variable gets its own; with it, a
    block-written variable takes the dimension of one that died before it is written:
    variable X, last read at slot r and last written at slot w, is cancelled in the
    first MLP slot ``c ≥ max(r, w + 1)`` (an MLP reads the residual before it writes, so
    X's readers in that MLP still see X) and its dimension is free for writes at slots
    after c. Variables in ``kept`` (the outputs) live to the end. Greedy in the order
    variables are first written: O(V log V)."""
    if not reuse:
        return Allocation(
            {name: k for k, name in enumerate(variables)},
            len(variables),
            [],
            [[(0, name)] for name in variables[:fixed]]
            + [[(slot, name)] for name, slot in _first_writes(blocks, slots, variables[fixed:])],
        )
    first: dict[str, int] = {}
    last: dict[str, int] = {}  # max(last read, last write + 1)
    for block, slot in zip(blocks, slots, strict=True):
        for name in block.writes:
            first.setdefault(name, slot)
            last[name] = max(last.get(name, 0), slot + 1)
        for name in block.reads:
            last[name] = max(last.get(name, 0), slot)
    dims = {name: k for k, name in enumerate(variables[:fixed])}
    occupants: list[list[tuple[int, str]]] = [[(0, name)] for name in variables[:fixed]]
    cancels: list[tuple[FFNBlock, int]] = []
    dying: list[tuple[int, int]] = []  # (cancel slot, dimension) of mortal occupants
    free: list[int] = []
    written = sorted(variables[fixed:], key=lambda name: first.get(name, 0))
    holder: dict[int, str] = {}
    for name in written:
        start = first.get(name, 0)
        while dying and dying[0][0] < start:
            free.append(heapq.heappop(dying)[1])
        if free:
            k = free.pop()
            dead = holder[k]
            slot = _cancel_slot(last[dead])
            cancels.append((cancel(dead, label=f"cancel {dead}"), slot))
            occupants[k] += [(slot, ""), (start, name)]
        else:
            k = len(occupants)
            occupants.append([(start, name)])
        dims[name] = k
        holder[k] = name
        if name not in kept and name in last:
            heapq.heappush(dying, (_cancel_slot(last[name]), k))
    return Allocation(dims, len(occupants), cancels, occupants)


def _first_writes(
    blocks: Sequence[Block], slots: Sequence[int], names: Sequence[str]
) -> list[tuple[str, int]]:
    """``(name, slot of its first write)`` for each of ``names``."""
    first: dict[str, int] = {}
    for block, slot in zip(blocks, slots, strict=True):
        for name in block.writes:
            first.setdefault(name, slot)
    return [(name, first.get(name, 0)) for name in names]


def _cancel_slot(after: int) -> int:
    """The first MLP slot (even) at or after ``after``."""
    return after + after % 2


def stored_entries(
    blocks: Sequence[Block], slots: Sequence[int], width: int, limit: float = DENSE_LIMIT
) -> int:
    """The numbers the layers of ``blocks`` (scheduled into ``slots``) will store: every
    matrix dense up to ``limit`` entries (:data:`~crasp_compiler.model.model.DENSE_LIMIT`),
    its nonzeros beyond (an upper bound: coefficients are not yet summed)."""

    def size(rows: int, cols: int, nonzero: int) -> int:
        return rows * cols if rows * cols <= limit else nonzero

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


def _stack(forms: list[Mapping[str, float]], index: Mapping[str, int], width: int) -> Matrix:
    """One row per form, over the residual layout."""
    rows, cols, values = [], [], []
    for r, form in enumerate(forms):
        for var, coef in form.items():
            rows.append(r)
            cols.append(index[var])
            values.append(coef)
    return matrix((len(forms), width), rows, cols, values)


def assemble_layers(
    blocks: Sequence[Block], slots: Sequence[int], index: Mapping[str, int], width: int
) -> list[Layer]:
    """Global layers for ``blocks``, scheduled into ``slots`` (:func:`schedule`), over a
    residual of ``width`` dimensions where variable ``v`` lives in ``index[v]``
    (:func:`allocate`)."""
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


def _head(block: HeadBlock, index: Mapping[str, int], width: int) -> Head:
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


_ACTIVATIONS = {str(a): a for a in Activation}


def _mlp(parts: list[FFNBlock], index: Mapping[str, int], width: int) -> MLP:
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
    activations = [_ACTIVATIONS[unit.activation] for unit in units]
    return MLP(w1, b1, w2, b2, activations, labels, groups)
