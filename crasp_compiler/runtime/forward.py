"""The forward pass of the model family (:mod:`crasp_compiler.model.model`), written once.

Every runtime runs these functions over its array library through the shim of
:mod:`crasp_compiler.runtime.backend`: the numpy executor (:mod:`.numpy_exec`) on numpy
arrays and possibly-sparse weights, the torch module (:mod:`.torch_module`) on tensors,
from each of its submodules' ``forward`` (so hooks on the submodules keep firing).

Heads are evaluated on one of four paths (:func:`head_path`), chosen from the head's
recorded kind (:class:`~crasp_compiler.model.model.HeadKind`), weighting, mask and bias,
never from weight values:

- ``prefix-sums``: a ``uniform`` causal softmax / average-hard head is the running mean
  of its values, accumulated in float64 (a float32 running sum stops counting at 2^24);
- ``fused``: causal softmax without bias, where the backend has a fused kernel (torch's
  ``scaled_dot_product_attention``);
- ``bos-keyed``: a ``bos-keyed`` causal softmax / average-hard head in O(T · |offsets|)
  from prefix sums, in float64 (:func:`_bos_keyed`);
- ``chunked``: anything, queries in chunks of at most :data:`SCORE_BUDGET` score entries
  (batch × query rows × keys), so memory stays bounded at any length. While the pass is
  traced (torch.compile, torch.export) the chunk is the whole length: the graph then
  stays generic in the length, at O(B·T²) memory for such heads.

A layer whose heads are all ``prefix-sums`` and whose W_V, W_O (all heads) and W_2 have
at most one nonzero per row runs on a *column* plan (:func:`column_layer`) when the pass
is not observed: each update adds only to the residual columns it writes, in place, one
weight per column, so the numbers are the general path's bit for bit (a dot product with
one nonzero term has one rounding, whatever order a BLAS sums in).

A model whose heads all take the prefix-sums path (most C-RASP models) is also lowered
once into a :class:`Plan` (:func:`lower`), which an unobserved pass runs instead of the
layers (:func:`run_plan`): the residual is column-major, one array per live column, for a
chunk of positions at a time (:data:`PLAN_ROWS`, so that it stays in the cache), every
product a few operations on the columns its weights touch, and each running sum carried
into the next chunk as the first term of its sum, so that the float64 prefix sums are
those of one running sum over the sequence. A running sum of integers of known bound
(a counting head's values: token tests, Heaviside units, integer combinations of them)
runs in int64: its sums are those float64 sums exactly while they stay within 2^53,
which the pass checks from the bound and the length. Traced by ``torch.compile`` (without
gradients, not exported), the plan is one chunk of the whole length, and the compiler
fuses its column operations.

The fast paths drop the gradients of what they do not compute: the caller says whether
they may be taken (``uniform_ok``, ``keyed_ok``: the torch module refuses them while
gradients flow to the scores).

Observation points. An optional :class:`Observer` receives named intermediate values and
may replace them (a hook returns a new array, or None to keep the value). Names follow
TransformerLens where it has the point (layers count from 0, heads are per head since
their sizes differ)::

    hook_embed                          W_E[token]                      (B, T, d)
    hook_pos_embed                      W_P pos(t)                      (T, d)
    hook_numeric_embed                  W_X v (models with inputs)      (B, T, d)
    blocks.{l}.hook_resid_pre           residual entering layer l       (B, T, d)
    blocks.{l}.attn.heads.{h}.hook_q    W_Q x (not on prefix-sums)      (B, T, dk)
    blocks.{l}.attn.heads.{h}.hook_k    W_K x (not on prefix-sums)      (B, T, dk)
    blocks.{l}.attn.heads.{h}.hook_v    W_V x                           (B, T, dv)
    blocks.{l}.attn.heads.{h}.hook_pattern  α (only Observer(patterns=True))  (B, T, T)
    blocks.{l}.attn.heads.{h}.hook_z    Σ_s α_ts W_V x_s                (B, T, dv)
    blocks.{l}.attn.heads.{h}.hook_result   W_O z                       (B, T, d)
    blocks.{l}.hook_attn_out            Σ_h result (layers with heads)  (B, T, d)
    blocks.{l}.hook_resid_mid           after attention (layers with heads)
    blocks.{l}.mlp.hook_pre             W_1 x + b_1                     (B, T, h)
    blocks.{l}.mlp.hook_normalized      N(·) (MLPs with norm groups)    (B, T, h)
    blocks.{l}.mlp.hook_post            act(·)                          (B, T, h)
    blocks.{l}.hook_mlp_out             W_2 act(·) + b_2 (layers with an MLP)
    blocks.{l}.hook_resid_post          residual leaving layer l        (B, T, d)
    hook_resid_final                    what the readout reads          (B, T, d)
    hook_outputs                        raw outputs                     (B, T, K)

With ``patterns=True`` every head (with a predicate, every head whose pattern point it
accepts) takes the chunked path in a single chunk, so that its full attention pattern
exists (O(B·T²) memory).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from typing import Any, Generic, Protocol, TypeVar

from crasp_compiler.errors import CraspError
from crasp_compiler.model.features import feature_table
from crasp_compiler.model.model import (
    Activation,
    HeadKind,
    Mask,
    Rule,
    Weighting,
    hard_tolerance,
)
from crasp_compiler.runtime.backend import Array, Backend

A = TypeVar("A", bound=Array)
W = TypeVar("W")
A_co = TypeVar("A_co", bound=Array, covariant=True)
W_co = TypeVar("W_co", covariant=True)

# Score entries materialised at once per head (batch × query rows × keys).
SCORE_BUDGET = 1 << 23


class Observer(Generic[A]):
    """Receives the named points of the forward pass (module docstring). ``hook(name,
    value)`` returns a replacement or None (keep the value); ``patterns=True`` asks for
    every head's attention pattern, a predicate for those of the heads whose full
    ``…hook_pattern`` name it accepts."""

    def __init__(
        self,
        hook: Callable[[str, A], A | None],
        *,
        patterns: bool | Callable[[str], bool] = False,
        prefix: str = "",
    ) -> None:
        self.hook = hook
        self.patterns = patterns
        self.prefix = prefix

    def __call__(self, name: str, value: A) -> A:
        out = self.hook(self.prefix + name, value)
        return value if out is None else out

    def wants(self, name: str) -> bool:
        """Whether the pattern point ``name`` (under this scope) is asked for."""
        if isinstance(self.patterns, bool):
            return self.patterns
        return self.patterns(self.prefix + name)

    def scope(self, prefix: str) -> Observer[A]:
        """This observer with ``prefix`` before every name."""
        return Observer(self.hook, patterns=self.patterns, prefix=self.prefix + prefix)


def see(observe: Observer[A] | None, name: str, value: A) -> A:
    """``value`` after the observer (if any) saw it at point ``name``."""
    return value if observe is None else observe(name, value)


def scope(observe: Observer[A] | None, prefix: str) -> Observer[A] | None:
    return None if observe is None else observe.scope(prefix)


# ---------------------------------------------------------------- what the pass reads


class HeadParams(Protocol[W_co]):
    """One head: its weights and settings (a head of :class:`~crasp_compiler.model.model.
    Model` with its kind resolved, or a torch submodule)."""

    @property
    def w_q(self) -> W_co: ...
    @property
    def w_k(self) -> W_co: ...
    @property
    def w_v(self) -> W_co: ...
    @property
    def w_o(self) -> W_co: ...
    @property
    def scale(self) -> float: ...
    @property
    def bias(self) -> Mapping[int, float]:
        """Offset -> value, in increasing order of offsets (no sorting while traced)."""
        ...

    @property
    def weighting(self) -> Weighting: ...
    @property
    def mask(self) -> Mask: ...
    @property
    def kind(self) -> HeadKind: ...


class MLPParams(Protocol[A_co, W_co]):
    """One MLP: weights, per-unit activations, layer-norm groups."""

    @property
    def w1(self) -> W_co: ...
    @property
    def b1(self) -> A_co: ...
    @property
    def w2(self) -> W_co: ...
    @property
    def b2(self) -> A_co: ...
    @property
    def activations(self) -> Sequence[Activation]: ...
    @property
    def norm_groups(self) -> Sequence[Sequence[int]]: ...

    def unit_index(self, activation: Activation) -> Sequence[int]:
        """The hidden units with ``activation``, in increasing order (prepared once)."""
        ...


class Parts(Protocol[A]):
    """The pieces of a network the pass runs through, each called once per pass (a torch
    module's are its submodules, whose hooks fire)."""

    @property
    def numeric_names(self) -> Sequence[str]:
        """The numeric input channels (empty: the model reads none)."""
        ...

    def tokens(self, ids: A) -> A:
        """``W_E[ids]``, ``(B, T, d)``."""
        ...

    def positions(self, size: int, like: A) -> A:
        """``W_P pos(t)`` for t < size, ``(T, d)``."""
        ...

    @property
    def positional(self) -> bool:
        """Whether an unobserved pass adds ``W_P pos(t)``: it may skip it where ``W_P`` has
        no feature columns (the product is 0) and nothing wants its gradient."""
        ...

    def numeric(self, values: A) -> A:
        """``W_X v``, ``(B, T, d)``."""
        ...

    @property
    def blocks(self) -> Sequence[Callable[[A, A, Observer[A] | None], A]]:
        """Each layer: ``(x, lengths, observe) -> x`` (:func:`block_forward`)."""
        ...

    def readout(self, x: A) -> A:
        """Raw outputs ``(B, T, K)``."""
        ...

    @property
    def output_count(self) -> int: ...

    @property
    def plan(self) -> Plan[A, Any] | None:
        """The lowered plan an unobserved pass runs on (:func:`lower`; None: none)."""
        ...


# ---------------------------------------------------------------- the whole pass


def forward(
    ops: Backend[A, W],
    parts: Parts[A],
    ids: A,
    lengths: A,
    values: A | None,
    observe: Observer[A] | None = None,
) -> A:
    """Raw outputs ``(B, T, K)`` for BOS-prefixed, right-padded ids ``(B, T)``; ``lengths``
    (B,) counts each sequence's tokens after BOS; ``values`` ``(B, T, m)`` are the numeric
    inputs of a model that reads some (0 at BOS and padding)."""
    batch, size = ids.shape[0], ids.shape[1]
    plan = parts.plan if observe is None and batch else None
    if plan is not None:
        return run_plan(ops, plan, ids)
    tokens = see(observe, "hook_embed", parts.tokens(ids))
    if batch == 0:
        return ops.zeros((0, size, parts.output_count), like=tokens)
    if observe is None and not parts.positional:
        x = tokens  # + W_P pos(t) = 0
    else:
        positions = ops.cast(parts.positions(size, tokens), like=tokens)
        x = tokens + see(observe, "hook_pos_embed", positions)[None]
    if parts.numeric_names:
        if values is None:
            raise CraspError(
                f"this model reads numeric inputs ({', '.join(parts.numeric_names)}): give values"
            )
        x = x + see(observe, "hook_numeric_embed", ops.cast(parts.numeric(values), like=x))
    for index, block in enumerate(parts.blocks):
        x = block(x, lengths, scope(observe, f"blocks.{index}."))
    x = see(observe, "hook_resid_final", x)
    return see(observe, "hook_outputs", parts.readout(x))


def block_forward(
    attention: Callable[[A, A, Observer[A] | None], A] | None,
    mlp: Callable[[A, Observer[A] | None], A] | None,
    x: A,
    lengths: A,
    observe: Observer[A] | None,
    columns: ColumnLayer[A, W] | None = None,
) -> A:
    """One layer: ``x + attention(x)``, then ``+ mlp(·)``. With ``columns`` and nothing
    observing, on the column path (:class:`ColumnLayer`), which updates ``x`` in place:
    give it only for an ``x`` the pass owns."""
    if columns is not None and observe is None:
        return _column_block(columns, attention, mlp, x, lengths)
    x = see(observe, "hook_resid_pre", x)
    if attention is not None:
        update = see(observe, "hook_attn_out", attention(x, lengths, scope(observe, "attn.")))
        x = see(observe, "hook_resid_mid", x + update)
    if mlp is not None:
        x = x + see(observe, "hook_mlp_out", mlp(x, scope(observe, "mlp.")))
    return see(observe, "hook_resid_post", x)


class UniformGroup(Generic[W]):
    """The heads of a layer that take the prefix-sums path, evaluated together: their
    ``W_V`` stacked (rows, ``(Σ dv, d)``) and their ``W_O`` side by side (columns,
    ``(d, Σ dv)``), so that the layer costs one value product, one prefix sum and one
    output product however many such heads it has. ``members`` are the heads' numbers."""

    def __init__(self, members: Sequence[int], w_v: W, w_o: W) -> None:
        self.members = tuple(members)
        self.w_v = w_v
        self.w_o = w_o


def attention_forward(
    ops: Backend[A, W],
    heads: Sequence[Callable[[A, A, Observer[A] | None], A]],
    x: A,
    lengths: A,
    observe: Observer[A] | None,
    group: UniformGroup[W] | None = None,
) -> A:
    """The sum of the heads' contributions. With a ``group`` and nothing observing, its
    heads run together (:class:`UniformGroup`), the others one by one."""
    update: A | None = None
    members: tuple[int, ...] = ()
    if group is not None and observe is None and group.members:
        members = group.members
        mixed = _prefix_mean(ops, ops.matmul_t(x, group.w_v), x)
        update = ops.matmul_t(mixed, group.w_o)
    for number, head in enumerate(heads):
        if number in members:
            continue
        result = head(x, lengths, scope(observe, f"heads.{number}."))
        update = result if update is None else update + result
    return ops.zeros(tuple(x.shape), like=x) if update is None else update


class ColumnLayer(Generic[A, W]):
    """A layer whose residual updates are copies of single columns, prepared for the
    column path (:func:`column_layer`): the residual stays ``(B, T, d)`` and only the
    columns its heads and MLP write change, in place, with the numbers of the general
    path (a product with one nonzero weight per row is that weight times one column,
    however it is summed).

    ``values`` (None: the attention runs as usual): every head of the layer takes the
    prefix-sums path and each row of ``W_V`` and of the heads' ``W_O`` side by side has
    at most one nonzero; per value, the residual column it copies, its weight, and the
    residual columns its running mean is added to, with their weights. ``outputs``
    (None: the MLP runs as usual): each row of ``W_2`` has at most one nonzero; per
    residual column the MLP writes, the hidden unit it copies (None: its bias alone),
    the weight and the bias (None: 0); ``mlp`` is the MLP's parameters. Weights and
    biases are read when the layer runs (:data:`Entry`), so the plan holds while the
    weights keep their zeros and ones, in any dtype and on any device."""

    def __init__(
        self,
        ops: Backend[A, W],
        values: list[tuple[int, Entry, list[tuple[int, Entry]]]] | None,
        mlp: MLPParams[A, W] | None,
        outputs: list[tuple[int, int | None, Entry, Entry]] | None,
    ) -> None:
        self.ops = ops
        self.values = values
        self.mlp = mlp
        self.outputs = outputs


def column_layer(
    ops: Backend[A, W], heads: Sequence[HeadParams[W]], mlp: MLPParams[A, W] | None
) -> ColumnLayer[A, W] | None:
    """The layer as a :class:`ColumnLayer` (for a pass whose fast paths may be taken), or
    None where neither its attention nor its MLP qualifies."""
    uniform = bool(heads) and all(_prefix_sums(head) for head in heads)
    values = _column_values(ops, heads) if uniform else None
    outputs = _column_outputs(ops, mlp) if mlp is not None else None
    if values is None and outputs is None:
        return None
    return ColumnLayer(ops, values, mlp, outputs)


# An entry of a weight matrix or bias vector, ``(w, index)``, read when the layer runs;
# None where it is 1 (a weight: no product) or 0 (a bias: no sum).
Entry = tuple[Any, tuple[int, ...]] | None


def _weight(ops: Backend[A, W], w: W | A, index: tuple[int, ...]) -> Entry:
    return None if float(ops.entry(w, index)) == 1.0 else (w, index)  # type: ignore[arg-type]


def _scaled(ops: Backend[A, W], x: A, weight: Entry) -> A:
    """``x`` times the entry (``x`` itself for None)."""
    return x if weight is None else x * ops.entry(weight[0], weight[1])


def _one_per_row(entries: Sequence[tuple[int, ...]]) -> bool:
    rows = [at[0] for at in entries]
    return len(set(rows)) == len(rows)


def _column_values(
    ops: Backend[A, W], heads: Sequence[HeadParams[W]]
) -> list[tuple[int, Entry, list[tuple[int, Entry]]]] | None:
    values: list[tuple[int, Entry, list[tuple[int, Entry]]]] = []
    written: set[int] = set()
    for head in heads:
        reads, writes = ops.nonzero(head.w_v), ops.nonzero(head.w_o)
        rows = {at[0] for at in writes}
        if not _one_per_row(reads) or not _one_per_row(writes) or rows & written:
            return None
        written |= rows
        for value, column in reads:
            targets = [(o, _weight(ops, head.w_o, (o, j))) for o, j in writes if j == value]
            if targets:
                values.append((column, _weight(ops, head.w_v, (value, column)), targets))
    return values


def _column_outputs(
    ops: Backend[A, W], mlp: MLPParams[A, W]
) -> list[tuple[int, int | None, Entry, Entry]] | None:
    entries = ops.nonzero(mlp.w2)
    if not _one_per_row(entries):
        return None
    unit = {o: j for o, j in entries}
    biased = {at[0] for at in ops.nonzero(mlp.b2)}
    return [
        (
            o,
            unit.get(o),
            _weight(ops, mlp.w2, (o, unit[o])) if o in unit else None,
            (mlp.b2, (o,)) if o in biased else None,
        )
        for o in sorted(set(unit) | biased)
    ]


def _column_block(
    layer: ColumnLayer[A, W],
    attention: Callable[[A, A, Observer[A] | None], A] | None,
    mlp: Callable[[A, Observer[A] | None], A] | None,
    x: A,
    lengths: A,
) -> A:
    """:func:`block_forward` on the column path (:class:`ColumnLayer`), ``x`` updated in
    place: each value's running mean (float64, as :func:`_prefix_mean`) added to the
    columns it is written to, each MLP output to its column."""
    ops = layer.ops
    if layer.values is not None:
        steps = ops.to_float64(ops.arange(x.shape[1], like=x) + 1)[None]
        means = []
        for source, weight, targets in layer.values:
            v = ops.to_float64(_scaled(ops, x[..., source], weight))
            means.append((ops.cast(ops.cumsum(v, axis=1) / steps, like=x), targets))
        for mean, targets in means:
            for target, scale in targets:
                ops.add_column(x, target, _scaled(ops, mean, scale))
    elif attention is not None:
        x = x + attention(x, lengths, None)
    if layer.outputs is not None and layer.mlp is not None:
        hidden = mlp_hidden(ops, layer.mlp, x)
        for target, unit, weight, bias in layer.outputs:
            added = None if unit is None else _scaled(ops, hidden[..., unit], weight)
            if bias is not None:
                b = ops.entry(bias[0], bias[1])
                added = b if added is None else added + b
            assert added is not None  # a column the MLP writes has a unit or a bias
            ops.add_column(x, target, added)
    elif mlp is not None:
        x = x + mlp(x, None)
    return x


def uniform_members(
    ops: Backend[A, W],
    heads: Sequence[HeadParams[W]],
    *,
    uniform_ok: Sequence[bool] | None = None,
    keyed_ok: Sequence[bool] | None = None,
) -> list[int]:
    """The numbers of the heads that take the prefix-sums path when nothing observes them
    (``uniform_ok`` / ``keyed_ok``: per head, whether the fast paths may be taken, as for
    :func:`head_forward`; default: yes)."""
    count = len(heads)
    uniform = [True] * count if uniform_ok is None else list(uniform_ok)
    keyed = [True] * count if keyed_ok is None else list(keyed_ok)
    return [
        number
        for number, head in enumerate(heads)
        if head_path(
            head, fused=ops.fused_attention, uniform_ok=uniform[number], keyed_ok=keyed[number]
        )
        is Path.PREFIX_SUMS
    ]


# ---------------------------------------------------------------- the lowered plan

# Positions (batch rows × chunk) a plan runs at most at once, in chunks of equal size: the
# residual of a chunk stays in the cache, and the pass holds little beyond its inputs and
# outputs. (Larger chunks had glibc trim the free top of the heap after every call in some
# processes, and fault its pages in again on the next, at twice the cost.)
PLAN_ROWS = 1 << 13
# The same on an accelerator, where the cache argument does not hold and each operation of
# a chunk is a kernel launch: 8,192-position chunks made a counting program's pass
# launch-bound on a GPU (docs/results.md (c), On a CUDA device). This bounds the memory a
# chunk takes there (columns of 2^22 float64 positions: 32 MiB each).
ACCELERATOR_PLAN_ROWS = 1 << 22
# The most nonzero weights a plan runs as column operations (one array operation each).
PLAN_TERMS = 4096
# Significand bits of the float types whose plans sum integers in int64: every integer of
# magnitude up to 2^p is exact (the bounds of :data:`Bound` stay far within their range).
PRECISION = {"float64": 53, "float32": 24}

# A row of a weight matrix as the plan reads it: its nonzero entries ``(column, weight)``
# (weight None where it is 1: no product) and its bias (None: 0).
Row = tuple[list[tuple[int, float | None]], float | None]


class PlanLayer:
    """One layer of a :class:`Plan`. ``values``: the rows of the prefix-sum heads' ``W_V``
    stacked; ``exact``: per value row, a bound on its value's magnitude where the value is
    an integer at every position (None: not known to be), for :func:`run_plan`'s integer
    running sums; ``writes``: per residual column its heads write, the row of their
    ``W_O`` side by side (over ``values``). ``hidden``: the rows of ``W_1`` with ``b_1``;
    ``mlp``: the MLP's parameters (activations, layer-norm groups); ``outputs``: per
    residual column the MLP writes, its row of ``W_2`` with ``b_2``."""

    def __init__(
        self,
        values: list[Row],
        exact: list[int | None],
        writes: list[tuple[int, Row]],
        hidden: list[Row],
        mlp: MLPParams[Any, Any] | None,
        outputs: list[tuple[int, Row]],
    ) -> None:
        self.values, self.exact, self.writes = values, exact, writes
        self.hidden, self.mlp, self.outputs = hidden, mlp, outputs


class Plan(Generic[A, W]):
    """A model lowered for unobserved passes (:func:`lower`): a column-major residual (one
    ``(B, c)`` array per residual column that is not 0) for a chunk of ``c`` positions,
    and every matrix product a few array operations on its columns. ``embed``: per
    residual column that some token writes, its entries of ``W_E`` by token id (an array
    of the run's dtype); ``w_p``: the positional map of ``features`` (None: none);
    ``readout``: a row per output."""

    def __init__(
        self,
        embed: list[tuple[int, A]],
        features: Sequence[str],
        w_p: W | None,
        layers: Sequence[PlanLayer],
        readout: list[Row],
        width: int,
    ) -> None:
        self.embed, self.features, self.w_p = embed, list(features), w_p
        self.layers, self.readout, self.width = list(layers), readout, width
        self.like = embed[0][1]  # an array of the plan's dtype, on its device

    def embedded(self, table: A) -> Plan[A, W]:
        """This plan with its token embedding read from ``table`` ``(V, d)`` (the same
        weights in another dtype or on another device: the other weights are numbers)."""
        embed = [(column, table[:, column]) for column, _ in self.embed]
        return Plan(embed, self.features, self.w_p, self.layers, self.readout, self.width)


def lower(
    ops: Backend[A, W],
    w_e: W,
    features: Sequence[str],
    w_p: W,
    heads: Sequence[Sequence[HeadParams[W]]],
    mlps: Sequence[MLPParams[A, W] | None],
    w_out: W,
) -> Plan[A, W] | None:
    """The plan of a model without numeric inputs whose heads all take the prefix-sums
    path and whose matrices have at most :data:`PLAN_TERMS` nonzero weights in all (None
    for any other). Its numbers are the general path's where those are fixed (the
    float64 prefix sums, carried from chunk to chunk as one running sum, their division
    and cast; products with one nonzero weight); a row with several nonzero weights sums
    them in the order of its columns, one of the orders a BLAS may pick.

    A bound on every column's magnitude, and whether it holds integers, is followed
    through the layers (:data:`Bound`): token embeddings (of columns no positional
    feature writes), running means, Heaviside units (0 or 1), ReLU and GELU units outside
    layer-norm groups, their weighted sums, and a column two ReLU units cancel
    (:func:`_cancels`: exactly 0); a value row over integer columns with integer weights
    gets its bound (:class:`PlanLayer` ``exact``)."""
    if not all(_prefix_sums(h) for row in heads for h in row):
        return None
    table = ops.dense(w_e)
    entries = ops.nonzero(table)
    if len(entries) > PLAN_TERMS:
        return None
    columns = sorted({c for _, c in entries})
    if not columns:
        return None
    embed = [(c, ops.swap_last(table)[c]) for c in columns]
    budget = [PLAN_TERMS - len(entries)]

    def rows(w: W | A, bias: A | None = None) -> list[tuple[int, Row]] | None:
        """The rows of ``w`` with a nonzero weight or bias (None: over the budget)."""
        found: dict[int, list[tuple[int, float | None]]] = {}
        for at in ops.nonzero(w):
            value = float(ops.entry(w, at))  # type: ignore[arg-type]
            found.setdefault(at[0], []).append((at[1], None if value == 1.0 else value))
        budget[0] -= sum(len(terms) for terms in found.values())
        biases = (
            {at[0]: float(ops.entry(bias, at)) for at in ops.nonzero(bias)}  # type: ignore[arg-type]
            if bias is not None
            else {}
        )
        if budget[0] < 0:
            return None
        return [(r, (found.get(r, []), biases.get(r))) for r in sorted(set(found) | set(biases))]

    positional = w_p if w_p.shape[1] else None  # type: ignore[attr-defined]
    bounds: list[Bound] = [ZERO] * table.shape[1]  # per residual column
    for at in entries:
        value = float(ops.entry(table, at))  # type: ignore[arg-type]
        bounds[at[1]] = _larger(bounds[at[1]], _term(value, ONE))
    for at in ops.nonzero(w_p) if positional is not None else ():
        bounds[at[0]] = None  # a position writes it
    layers = []
    for row, mlp in zip(heads, mlps, strict=True):
        values: list[Row] = []
        writes: list[tuple[int, Row]] = []
        for head in row:
            read, written = rows(head.w_v), rows(head.w_o)
            if read is None or written is None:
                return None
            index = {r: len(values) + k for k, (r, _) in enumerate(read)}
            values += [entry for _, entry in read]
            for target, (terms, _) in written:
                writes.append((target, ([(index[j], w) for j, w in terms if j in index], None)))
        held = [_row_bound(entry, bounds) for entry in values]
        exact = [None if bound is None or not bound[1] else int(bound[0]) for bound in held]
        merged = _merged(writes)
        means = [None if bound is None else (bound[0], False) for bound in held]
        for target, entry in merged:
            bounds[target] = _plus(bounds[target], _row_bound(entry, means))
        hidden: list[Row] = []
        outputs: list[tuple[int, Row]] = []
        if mlp is not None:
            units, written = rows(mlp.w1, mlp.b1), rows(mlp.w2, mlp.b2)
            if units is None or written is None:
                return None
            found = dict(units)
            hidden = [found.get(j, ([], None)) for j in range(mlp.w1.shape[0])]  # type: ignore[attr-defined]
            outputs = written
            held = _unit_bounds(mlp, [_row_bound(entry, bounds) for entry in hidden])
            for target, entry in outputs:
                if bounds[target] is not None and _cancels(entry, target, hidden, mlp):
                    bounds[target] = ZERO
                else:
                    bounds[target] = _plus(bounds[target], _row_bound(entry, held))
        layers.append(PlanLayer(values, exact, merged, hidden, mlp, outputs))
    readout = rows(w_out)
    if readout is None:
        return None
    found = dict(readout)
    outs = [found.get(k, ([], None)) for k in range(w_out.shape[0])]  # type: ignore[attr-defined]
    return Plan(embed, features, positional, layers, outs, table.shape[1])


# What the plan knows of a column's values: ``(M, integral)``, ``|x| ≤ M`` at every
# position (in the run's type too: M stays far below float32's largest number) and whether
# every value is an integer (M then an int); None: nothing.
Bound = tuple[float, bool] | None
ZERO: Bound = (0, True)
ONE: Bound = (1, True)
LARGEST = 2.0**100


def _term(weight: float, bound: Bound) -> Bound:
    """The bound of ``weight · x`` for ``x`` within ``bound``."""
    if bound is None:
        return None
    size, integral = bound
    if integral and weight.is_integer():
        return (int(abs(weight)) * size, True)
    return (abs(weight) * size, False)


def _plus(a: Bound, b: Bound) -> Bound:
    """The bound of a sum (and of each partial sum along the way)."""
    if a is None or b is None or a[0] + b[0] >= LARGEST:
        return None
    return (a[0] + b[0], a[1] and b[1])


def _larger(a: Bound, b: Bound) -> Bound:
    """A bound of values within ``a`` or within ``b``."""
    if a is None or b is None:
        return None
    return (max(a[0], b[0]), a[1] and b[1])


def _row_bound(row: Row, bounds: Sequence[Bound]) -> Bound:
    """The bound of ``Σ_k w_k x_k + b`` for columns within ``bounds``: ``Σ_k |w_k| M_k + |b|``,
    integral where the weights, the bias and the columns are."""
    terms, bias = row
    total = ZERO if bias is None else _term(bias, ONE)
    for k, weight in terms:
        total = _plus(total, _term(1.0 if weight is None else weight, bounds[k]))
    return total


def _unit_bounds(mlp: MLPParams[Any, Any], pre: list[Bound]) -> list[Bound]:
    """The hidden units' bounds from their pre-activations': a Heaviside unit is 0 or 1;
    ``|relu(z)|`` and ``|gelu(z)|`` are at most ``|z|``, and ``relu(z)`` is an integer
    where ``z`` is (units outside the layer-norm groups)."""
    normalized = {unit for group in mlp.norm_groups for unit in group}
    bounds: list[Bound] = [None] * len(pre)
    for kind in _ACTIVATIONS:
        for unit in mlp.unit_index(kind):
            bound = pre[unit]
            if kind is Activation.HEAVISIDE:
                bounds[unit] = ONE
            elif unit not in normalized and bound is not None:
                bounds[unit] = (bound[0], bound[1] and kind is Activation.RELU)
    return bounds


def _cancels(row: Row, target: int, hidden: Sequence[Row], mlp: MLPParams[Any, Any]) -> bool:
    """Whether MLP output ``row`` added to column ``target`` leaves exactly 0: the two
    ReLU units that free a dead value's dimension, ``x + (relu(−x) − relu(x))`` (in
    either order of the terms every addition is exact: one unit is 0 and the other
    ``|x|``), for a finite ``x`` (the caller's bound says so)."""
    terms, bias = row
    relus = set(mlp.unit_index(Activation.RELU))
    normalized = {unit for group in mlp.norm_groups for unit in group}
    if bias is not None or len(terms) != 2:
        return False
    signs = {}
    for unit, weight in terms:
        read, offset = hidden[unit]
        if unit not in relus or unit in normalized or offset is not None or len(read) != 1:
            return False
        if read[0][0] != target:
            return False
        signs[1.0 if read[0][1] is None else read[0][1]] = 1.0 if weight is None else weight
    return signs == {1.0: -1.0, -1.0: 1.0}


def _merged(writes: list[tuple[int, Row]]) -> list[tuple[int, Row]]:
    """Writes to one residual column from several heads as one row over their values."""
    merged: dict[int, list[tuple[int, float | None]]] = {}
    for target, (terms, _) in writes:
        merged.setdefault(target, []).extend(terms)
    return [(target, (terms, None)) for target, terms in merged.items() if terms]


def _combine(
    ops: Backend[A, W],
    columns: Sequence[A | None],
    row: Row,
    like: A,
    products: dict[tuple[int, float], tuple[A, A]] | None = None,
) -> A | None:
    """``Σ w_k columns[k] + b`` in ``like``'s dtype, summed in the order of the terms
    (None: 0); columns None are 0. A weight of −1 after the first term is a subtraction
    (``a − c`` is ``a + (−1)·c``, bit for bit); ``products`` keeps each ``w·column`` for
    the other rows of the chunk (keyed by the column array, which it holds)."""
    total: A | None = None
    terms, bias = row
    for k, weight in terms:
        column = columns[k]
        if column is None:
            continue
        if weight is None:
            term = column
        elif weight == -1.0 and total is not None:
            total = total - column
            continue
        elif products is None:
            term = column * ops.scalar(weight, like=like)
        else:
            key = (id(column), weight)
            held = products.get(key)
            if held is None:
                held = products[key] = (column, column * ops.scalar(weight, like=like))
            term = held[1]
        total = term if total is None else total + term
    if bias is not None:
        b = ops.scalar(bias, like=like)
        total = (ops.zeros(tuple(like.shape), like=like) if total is None else total) + b
    return total


def run_plan(ops: Backend[A, W], plan: Plan[A, W], ids: A) -> A:
    """Raw outputs ``(B, T, K)`` of the plan for BOS-prefixed ids ``(B, T)``, in chunks of
    equal length of at most :data:`PLAN_ROWS` positions in all
    (:data:`ACCELERATOR_PLAN_ROWS` on a GPU; one chunk while traced by ``torch.compile``,
    which fuses the column operations instead). Each running sum carries
    its last value into the next chunk: a float64 sum as the first term of the next
    chunk's sum, so that the sums are those of one running sum over the whole sequence;
    and the sum of a value row that is an integer everywhere (``exact``, with a bound that
    keeps each value exact in the run's type and each sum within ``bound·T ≤ 2^53``)
    runs in int64, whose sums are those float64 sums exactly (integers of magnitude at
    most 2^53 are exact in float64, so no addition rounds), at a fraction of the cost."""
    batch, size = ids.shape[0], ids.shape[1]
    like = plan.like
    if ops.tracing():  # one chunk, no loop over the length: one graph for every length
        chunks = [(0, size)]
    else:
        rows = ACCELERATOR_PLAN_ROWS if ops.accelerated(like) else PLAN_ROWS
        count = -(-size // max(1, rows // batch))
        chunk = -(-size // count)
        chunks = [(start, min(chunk, size - start)) for start in range(0, size, chunk)]
    bits = PRECISION.get(ops.dtype_name(like))
    exact = [
        [
            bound is not None
            and bits is not None
            and bound <= 1 << bits
            and bound * size <= 1 << 53
            for bound in layer.exact
        ]
        for layer in plan.layers
    ]
    out = ops.zeros((len(plan.readout), batch, size), like=like)
    carries: list[list[A | None]] = [[None] * len(layer.values) for layer in plan.layers]
    every = ops.to_float64(ops.arange(size, like=ids) + 1)  # t + 1
    for start, width in chunks:
        part = ids[:, start : start + width]
        x: list[A | None] = [None] * plan.width
        for column, entries in plan.embed:
            x[column] = ops.gather(entries, part)
        template = x[plan.embed[0][0]]
        assert template is not None
        if plan.w_p is not None:
            t = ops.arange(width, like=ids) + start
            table = feature_table(plan.features, t, ops)
            positions = ops.matmul_t(ops.cast_for(table, plan.w_p), plan.w_p)
            positions = ops.cast(positions, like=template)
            zero = ops.zeros(tuple(template.shape), like=template)
            for column in range(plan.width):  # every column (B, c), even one only positions write
                held = x[column]
                x[column] = (zero if held is None else held) + positions[:, column][None]
        steps = every[start : start + width]
        for layer, carry, integral in zip(plan.layers, carries, exact, strict=True):
            means: list[A | None] = []
            for number, row in enumerate(layer.values):
                v = _combine(ops, x, row, template)
                if v is None:
                    v = ops.zeros(tuple(template.shape), like=template)
                if integral[number]:
                    counts = ops.to_int64(v)  # a new array: v is a float array
                    held = carry[number]
                    if held is not None:
                        ops.add_column(counts, 0, held)
                    counts = ops.cumsum(counts, axis=-1)
                    carry[number] = counts[:, -1]
                    sums = ops.to_float64(counts)
                else:
                    v = ops.to_float64(v)
                    held = carry[number]
                    if held is not None:
                        v = ops.concat([v[:, :1] + held, v[:, 1:]], axis=-1)
                    sums = ops.cumsum(v, axis=-1)
                    carry[number] = sums[:, -1:]
                means.append(ops.cast(sums / steps, like=template))
            for target, row in layer.writes:
                x[target] = _add(x[target], _combine(ops, means, row, template))
            if layer.mlp is not None:
                units = _units(ops, layer, x, template)
                for target, row in layer.outputs:
                    x[target] = _add(x[target], _combine(ops, units, row, template))
        products: dict[tuple[int, float], tuple[A, A]] = {}
        for k, row in enumerate(plan.readout):
            raw = _combine(ops, x, row, template, products)
            if raw is not None:
                ops.assign_last(out[k], start, raw)
    return ops.move_first_last(out)


def _units(ops: Backend[A, W], layer: PlanLayer, x: Sequence[A | None], like: A) -> list[A]:
    """The MLP's hidden units ``act(N(W_1 x + b_1))``, one array each: computed apart
    where the MLP has one activation and no layer-norm group, else side by side."""
    mlp = layer.mlp
    assert mlp is not None
    zero = ops.zeros(tuple(like.shape), like=like)
    products: dict[tuple[int, float], tuple[A, A]] = {}
    pre = [_combine(ops, x, row, like, products) for row in layer.hidden]
    z = [zero if unit is None else unit for unit in pre]
    kinds = {kind for kind in _ACTIVATIONS if len(mlp.unit_index(kind))}
    if not mlp.norm_groups and len(kinds) == 1:
        (kind,) = kinds
        return [_activation(ops, kind, unit) for unit in z]
    stacked = ops.stack_last(z)
    if mlp.norm_groups:
        stacked = _normalize(ops, stacked, mlp.norm_groups)
    hidden = _activate(ops, stacked, mlp)
    return [hidden[..., j] for j in range(len(z))]


def _add(x: A | None, update: A | None) -> A | None:
    if update is None:
        return x
    return update if x is None else x + update


# ---------------------------------------------------------------- embeddings and readout


def token_embedding(ops: Backend[A, W], w_e: W, ids: A) -> A:
    return ops.take_rows(w_e, ids)


def positional_embedding(
    ops: Backend[A, W], features: Sequence[str], w_p: W, size: int, like: A
) -> A:
    """``W_P pos(t)`` for t < size, ``(T, d)``: the features computed in float64 on
    ``like``'s device, the product in ``W_P``'s dtype."""
    table = feature_table(features, ops.arange(size, like=like), ops)
    return ops.matmul_t(ops.cast_for(table, w_p), w_p)


def numeric_embedding(ops: Backend[A, W], w_x: W, values: A) -> A:
    """``W_X v`` in ``W_X``'s dtype."""
    return ops.matmul_t(ops.cast_for(values, w_x), w_x)


def readout(ops: Backend[A, W], w_out: W, x: A) -> A:
    return ops.matmul_t(x, w_out)


# ---------------------------------------------------------------- attention


class Path(StrEnum):
    """How a head is evaluated (module docstring)."""

    PREFIX_SUMS = "prefix-sums"
    FUSED = "fused"
    BOS_KEYED = "bos-keyed"
    CHUNKED = "chunked"


_AVERAGING = (Weighting.SOFTMAX, Weighting.HARD)


def head_path(
    head: HeadParams[W],
    *,
    fused: bool,
    uniform_ok: bool = True,
    keyed_ok: bool = True,
    patterns: bool = False,
) -> Path:
    """The path of ``head`` (module docstring): from its kind and settings; ``fused``:
    the backend has fused attention; ``uniform_ok`` / ``keyed_ok``: the fast paths may be
    taken; ``patterns``: the full attention pattern is wanted."""
    if patterns:
        return Path.CHUNKED
    if uniform_ok and _prefix_sums(head):
        return Path.PREFIX_SUMS
    averaging = head.mask is Mask.CAUSAL and head.weighting in _AVERAGING
    causal_softmax = head.weighting is Weighting.SOFTMAX and head.mask is Mask.CAUSAL
    if fused and causal_softmax and not head.bias:
        return Path.FUSED
    if averaging and keyed_ok and head.kind in (HeadKind.UNIFORM, HeadKind.BOS_KEYED):
        return Path.BOS_KEYED
    return Path.CHUNKED


def _prefix_sums(head: HeadParams[W]) -> bool:
    """Whether ``head`` takes the prefix-sums path where that path may be taken."""
    averaging = head.mask is Mask.CAUSAL and head.weighting in _AVERAGING
    return averaging and head.kind is HeadKind.UNIFORM


def head_forward(
    ops: Backend[A, W],
    head: HeadParams[W],
    x: A,
    lengths: A,
    observe: Observer[A] | None = None,
    *,
    uniform_ok: bool = True,
    keyed_ok: bool = True,
) -> A:
    """The head's contribution ``W_O Σ_s α_ts W_V x_s`` to the residual, ``(B, T, d)``."""
    patterns = observe is not None and observe.wants("hook_pattern")
    path = head_path(
        head,
        fused=ops.fused_attention,
        uniform_ok=uniform_ok,
        keyed_ok=keyed_ok,
        patterns=patterns,
    )
    v = see(observe, "hook_v", ops.matmul_t(x, head.w_v))
    if path is Path.PREFIX_SUMS:
        mixed = _prefix_mean(ops, v, x)
    else:
        q = see(observe, "hook_q", ops.matmul_t(x, head.w_q))
        k = see(observe, "hook_k", ops.matmul_t(x, head.w_k))
        tolerance = hard_tolerance(ops.dtype_name(x))
        if path is Path.FUSED:
            mixed = ops.causal_softmax(q, k, v, head.scale)
        elif path is Path.BOS_KEYED:
            mixed = ops.cast(_bos_keyed(ops, head, q, k, v, tolerance), like=x)
        else:
            mixed = _chunked(ops, head, q, k, v, lengths, tolerance, observe)
    z = see(observe, "hook_z", mixed)
    return see(observe, "hook_result", ops.matmul_t(z, head.w_o))


def _prefix_mean(ops: Backend[A, W], v: A, like: A) -> A:
    """The running mean of ``v`` over positions, accumulated in float64."""
    sums = ops.cumsum(ops.to_float64(v), axis=1)
    steps = ops.to_float64(ops.arange(v.shape[1], like=v) + 1)
    return ops.cast(sums / steps[None, :, None], like=like)


def _allowed(ops: Backend[A, W], mask: Mask, rows: A, cols: A, lengths: A) -> A:
    """Allowed (query, key) pairs, ``(B, rows, cols)``: the mask, and keys within each
    sequence's length."""
    t, s = rows[:, None], cols[None, :]
    if mask is Mask.CAUSAL:
        allowed = s <= t
    elif mask is Mask.STRICT:
        allowed = s < t
    elif mask is Mask.PAST:
        allowed = s >= t
    elif mask is Mask.STRICT_PAST:
        allowed = s > t
    else:
        allowed = (s >= 0) & (t >= 0)
    return allowed[None] & (cols[None, None, :] <= lengths[:, None, None])


def _chunked(
    ops: Backend[A, W],
    head: HeadParams[W],
    q: A,
    k: A,
    v: A,
    lengths: A,
    tolerance: float,
    observe: Observer[A] | None,
) -> A:
    """``Σ_s α_ts v_s`` for every query ``(B, T, dv)``, queries in chunks."""
    batch, size = q.shape[0], q.shape[1]
    cols = ops.arange(size, like=q)
    keys = ops.swap_last(k)
    whole = ops.tracing() or (observe is not None and observe.wants("hook_pattern"))
    if whole:
        return _rows(ops, head, q, keys, v, cols, cols, lengths, tolerance, observe)
    chunk = max(1, SCORE_BUDGET // max(1, batch * size))
    parts = [
        _rows(
            ops,
            head,
            q[:, start : start + chunk],
            keys,
            v,
            cols[start : start + chunk],
            cols,
            lengths,
            tolerance,
            None,
        )
        for start in range(0, size, chunk)
    ]
    return parts[0] if len(parts) == 1 else ops.concat(parts, axis=1)


def _rows(
    ops: Backend[A, W],
    head: HeadParams[W],
    q: A,
    keys: A,
    v: A,
    rows: A,
    cols: A,
    lengths: A,
    tolerance: float,
    observe: Observer[A] | None,
) -> A:
    """The chunked path for the queries at positions ``rows``."""
    weights = pattern_rows(ops, head, q, keys, rows, cols, lengths, tolerance)
    weights = see(observe, "hook_pattern", weights)
    return ops.matmul(weights, v)


def pattern_rows(
    ops: Backend[A, W],
    head: HeadParams[W],
    q: A,
    keys: A,
    rows: A,
    cols: A,
    lengths: A,
    tolerance: float,
) -> A:
    """The attention weights ``α`` of the queries ``q`` at positions ``rows`` over the
    keys ``keys`` (``(B, dk, T)``) at positions ``cols``: ``(B, rows, T)``."""
    scores = ops.matmul(q, keys) * ops.scalar(head.scale, like=q)
    if head.bias:
        offsets = rows[:, None] - cols[None, :]
        for offset, value in head.bias.items():
            bias = ops.cast(ops.equal(offsets, offset), like=scores)[None]
            scores = scores + bias * ops.scalar(value, like=scores)
    allowed = _allowed(ops, head.mask, rows, cols, lengths)
    scores = ops.where(allowed, scores, -math.inf)
    top = ops.where(ops.any(allowed, axis=-1), ops.amax(scores, axis=-1), 0.0)
    if head.weighting is Weighting.SOFTMAX:
        weights = ops.where(allowed, ops.exp(scores - top), 0.0)
    else:
        maximal = scores >= top - ops.scalar(tolerance, like=top)
        weights = ops.cast(allowed & maximal, like=scores)
        if head.weighting is Weighting.HARD_LEFT:
            weights = weights * ops.cast(ops.equal(ops.cumsum(weights, axis=-1), 1), like=weights)
        elif head.weighting is Weighting.HARD_RIGHT:
            from_right = ops.flip(ops.cumsum(ops.flip(weights, axis=-1), axis=-1), axis=-1)
            weights = weights * ops.cast(ops.equal(from_right, 1), like=weights)
    total = ops.sum(weights, axis=-1)
    return weights / ops.where(ops.equal(total, 0), 1.0, total)


def _bos_keyed(ops: Backend[A, W], head: HeadParams[W], q: A, k: A, v: A, tolerance: float) -> A:
    """A causal softmax / average-hard head whose keys vanish at tokens, in
    O(T · |offsets|) and float64.

    Query t scores BOS with ``b_t = scale·q_t·k_0 + bias(t)``, the key ``t − c`` with
    ``bias(c)`` for each offset c (when ``t − c ≥ 1``), and the other ``n_t`` keys with 0.
    With prefix sums ``P_t = Σ_{s≤t} v_s``, the 0-scored keys sum to
    ``P_t − v_0 − Σ_c v_{t−c}``, so the weights need no T × T matrix.
    """
    t = ops.arange(v.shape[1], like=v)
    v = ops.to_float64(v)
    v0 = v[:, :1]
    bos = ops.sum(ops.to_float64(q) * ops.to_float64(k[:, :1]), axis=-1)[..., 0]
    bos = bos * ops.scalar(head.scale, like=bos)
    offsets = [(c, value) for c, value in head.bias.items() if c >= 0]  # in increasing order
    for c, value in offsets:
        bos = bos + ops.to_float64(ops.equal(t, c))[None] * ops.scalar(value, like=bos)
    keyed = []  # (valid (T,), score, values (B, T, dv)) per offset
    for c, value in offsets:
        valid = t - c >= 1
        keyed.append((valid, value, ops.where(valid[None, :, None], ops.shift(v, c), 0.0)))
    plain = t
    plain_sum = ops.cumsum(v, axis=1) - v0
    for valid, _, values in keyed:
        plain = plain - ops.to_int64(valid)
        plain_sum = plain_sum - values
    top = ops.maximum(bos, ops.select(plain > 0, 0.0, -math.inf, like=bos)[None])
    for valid, value, _ in keyed:
        top = ops.maximum(top, ops.select(valid, value, -math.inf, like=bos)[None])
    if head.weighting is Weighting.SOFTMAX:
        w_bos = ops.exp(bos - top)
        w_keyed = [
            ops.where(valid, ops.exp(ops.scalar(value, like=top) - top), 0.0)
            for valid, value, _ in keyed
        ]
        w_plain = ops.exp(-top)
    else:
        floor = top - ops.scalar(tolerance, like=top)
        w_bos = ops.to_float64(bos >= floor)
        w_keyed = [
            ops.to_float64(valid & (floor <= ops.scalar(value, like=top)))
            for valid, value, _ in keyed
        ]
        w_plain = ops.to_float64(floor <= 0.0)
    total = w_bos + w_plain * ops.to_float64(plain)[None]
    mixed = w_bos[..., None] * v0 + w_plain[..., None] * plain_sum
    for weight, (_, _, values) in zip(w_keyed, keyed, strict=True):
        total = total + weight
        mixed = mixed + weight[..., None] * values
    return mixed / total[..., None]


# ---------------------------------------------------------------- MLP


def mlp_forward(
    ops: Backend[A, W], mlp: MLPParams[A, W], x: A, observe: Observer[A] | None = None
) -> A:
    """``W_2 act(N(W_1 x + b_1)) + b_2``."""
    return ops.matmul_t(mlp_hidden(ops, mlp, x, observe), mlp.w2) + mlp.b2


def mlp_hidden(
    ops: Backend[A, W], mlp: MLPParams[A, W], x: A, observe: Observer[A] | None = None
) -> A:
    """The hidden units ``act(N(W_1 x + b_1))``."""
    z = see(observe, "hook_pre", ops.matmul_t(x, mlp.w1) + mlp.b1)
    if mlp.norm_groups:
        z = see(observe, "hook_normalized", _normalize(ops, z, mlp.norm_groups))
    return see(observe, "hook_post", _activate(ops, z, mlp))


def _gelu(ops: Backend[A, W], z: A) -> A:
    """GELU, tanh form."""
    cubic = ops.scalar(0.044715, like=z)
    slope = ops.scalar(math.sqrt(2.0 / math.pi), like=z)
    return z * 0.5 * (ops.tanh((z + z * z * z * cubic) * slope) + 1.0)


def _activation(ops: Backend[A, W], kind: Activation, z: A) -> A:
    if kind is Activation.RELU:
        return ops.relu(z)
    if kind is Activation.HEAVISIDE:
        return ops.cast(z >= 0, like=z)
    return _gelu(ops, z)


_ACTIVATIONS = tuple(Activation)  # (iterating the enum class inside a traced pass breaks
# the graph on older torch versions)


def _activate(ops: Backend[A, W], z: A, mlp: MLPParams[A, W]) -> A:
    """Each activation applied to its own units only (one kind: to all of ``z``)."""
    groups = [(kind, mlp.unit_index(kind)) for kind in _ACTIVATIONS]
    groups = [(kind, index) for kind, index in groups if len(index)]
    if len(groups) <= 1:
        return _activation(ops, groups[0][0], z) if groups else z
    parts = [_activation(ops, kind, ops.take_last(z, index)) for kind, index in groups]
    return ops.take_last(ops.concat(parts, axis=-1), _inverse([i for _, g in groups for i in g]))


def _inverse(order: Sequence[int]) -> list[int]:
    """The permutation that undoes ``order``."""
    inverse = [0] * len(order)
    for position, unit in enumerate(order):
        inverse[unit] = position
    return inverse


def _normalize(ops: Backend[A, W], z: A, groups: Sequence[Sequence[int]]) -> A:
    """Selective layer norm (ε = 0) over each group of hidden units; 0 where std is 0.
    The square root is taken in float64 and cast back, so that it is correctly rounded
    in float32 too (torch's float32 one is not always): the norm of a pair ``(z, 0)``
    is then exactly ``(±1, ∓1)`` (:mod:`crasp_compiler.languages.crasp.rounding`)."""
    parts, order = [], []
    for group in groups:
        part = ops.take_last(z, group)
        centred = part - ops.mean(part, axis=-1)
        variance = ops.mean(centred * centred, axis=-1)
        std = ops.cast(ops.sqrt(ops.to_float64(variance)), like=variance)
        spread = std > 0
        parts.append(ops.where(spread, centred / ops.where(spread, std, 1.0), 0.0))
        order += list(group)
    grouped = set(order)
    rest = [unit for unit in range(z.shape[-1]) if unit not in grouped]
    if rest:
        parts.append(ops.take_last(z, rest))
        order += rest
    return ops.take_last(ops.concat(parts, axis=-1), _inverse(order))


# ---------------------------------------------------------------- decision rules


def decide(ops: Backend[A, W], rule: Rule, raw: A, steps: A, padding: A | None = None) -> A:
    """Apply a decision rule (see :mod:`crasp_compiler.model.model`) to raw outputs
    ``(B, T)``; ``steps`` is t + 1 in float64 ``(1, T)``. Positions marked in ``padding``
    (beyond a sequence's end) read False, 0 or NaN."""
    if rule is Rule.BOOL:
        decided = raw > 0.5
    elif rule is Rule.COUNT:
        decided = ops.to_int64(ops.rint(ops.to_float64(raw) * steps))
    elif rule is Rule.INT:
        decided = ops.to_int64(ops.rint(raw))
    else:
        decided = raw
    if padding is None:
        return decided
    fill = math.nan if rule is Rule.VALUE else 0.0
    return ops.where(padding, ops.select(padding, fill, fill, like=decided), decided)
