"""The numpy reference executor of the model family (see :mod:`crasp_compiler.model.model`).

Runs a batch of token sequences (BOS is prepended here) in float64 by default or float32
on request, through the shared forward pass (:mod:`crasp_compiler.runtime.forward`) on
numpy arrays; weight matrices stay as they are stored, dense or CSR sparse. Sequences of
different lengths are right-padded: every mask is causal or stricter in compiled models,
so padding never changes a real position (``past`` and ``none`` masks are applied per
sequence). The embedding products (positional features, numeric inputs) are computed in
float64 and rounded to the run's type; everything else runs in that type, except the
float64 prefix sums of uniform and BOS-keyed heads. Heads are evaluated according to
their recorded kinds (heads built without one get it once per run from the weights,
:func:`crasp_compiler.model.model.head_kinds`). One path is the executor's own: a causal
softmax head whose keys are ``a·s + b·s²`` of the key position
(:func:`crasp_compiler.model.model.positional_keys`, relu mode's offset lookups) sums
each query over the band of keys whose weight is not exactly 0 (:func:`_banded`), O(T)
instead of the general path's O(T²). Two more are for wide models (PCOC): a head whose
queries and keys read only position features
(:func:`crasp_compiler.model.model.positional_patterns`, the routing heads) runs on its
pattern, computed once per length and applied as a sparse matrix (:class:`_FixedPattern`);
and a model at least :data:`SLIM_WIDTH` wide runs each layer on the residual columns it
reads and writes (:func:`_slim_block`), not on the whole residual. Observed passes run the
general path.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crasp_compiler.errors import CraspError
from crasp_compiler.lazy import deprecated
from crasp_compiler.model.model import (
    BOS,
    HARD_TOLERANCE,
    MLP,
    Activation,
    Head,
    HeadKind,
    Mask,
    Matrix,
    Model,
    PositionalKeys,
    Rule,
    Weighting,
    dense,
    head_kinds,
    is_sparse,
    nonzero_columns,
    nonzero_rows,
    positional_keys,
    positional_patterns,
    token_ids,
)
from crasp_compiler.runtime import forward as fw
from crasp_compiler.runtime.backend import NUMPY
from crasp_compiler.runtime.forward import SCORE_BUDGET, Observer
from crasp_compiler.runtime.memory import model_layers, require_forward_memory

__all__ = [
    "HARD_TOLERANCE",
    "SCORE_BUDGET",
    "NumpyParts",
    "RunResult",
    "beyond_guarantee",
    "decide",
    "encode",
    "encode_vocab",
    "numeric_matrix",
    "run_tokens",
]

NDAny = NDArray[Any]


@dataclass
class RunResult:
    """Outputs of one batch. ``outputs[name]`` has shape (B, T) with T = 1 + longest input;
    ``values[name]`` applies the output's decision rule (False, 0 or NaN at the padding
    beyond a shorter sequence's end). ``lengths`` are the input lengths
    (without BOS), so sequence b's last position is ``lengths[b]``. ``residuals`` (when
    requested) lists ``(label, array (B, T, d))`` after the embedding and every sublayer."""

    outputs: dict[str, NDAny]
    values: dict[str, NDAny]
    lengths: NDArray[np.int64]
    residuals: list[tuple[str, NDAny]] | None = None

    def final(self, name: str) -> NDAny:
        """The decided value of output ``name`` at each sequence's last position."""
        return self.values[name][np.arange(len(self.lengths)), self.lengths]


# ---------------------------------------------------------------- the model as numpy parts


@dataclass(frozen=True)
class _Head:
    """A head in the run's float type, with its kind."""

    w_q: Matrix
    w_k: Matrix
    w_v: Matrix
    w_o: Matrix
    scale: float
    bias: Mapping[int, float]
    weighting: Weighting
    mask: Mask
    kind: HeadKind


@dataclass(frozen=True)
class _MLP:
    """An MLP in the run's float type."""

    w1: Matrix
    b1: NDAny
    w2: Matrix
    b2: NDAny
    activations: Sequence[Activation]
    norm_groups: Sequence[Sequence[int]]
    units: dict[Activation, list[int]] = field(default_factory=dict)

    def unit_index(self, activation: Activation) -> list[int]:
        return self.units.get(activation, [])


def _cast(w: Matrix, dtype: type) -> Matrix:
    return w.astype(dtype, copy=False)


def _head(head: Head, kind: HeadKind, dtype: type) -> _Head:
    return _Head(
        _cast(head.w_q, dtype),
        _cast(head.w_k, dtype),
        _cast(head.w_v, dtype),
        _cast(head.w_o, dtype),
        scale=head.scale,
        bias=dict(sorted(head.bias.items())),
        weighting=head.weighting,
        mask=head.mask,
        kind=kind,
    )


def _mlp(mlp: MLP, dtype: type) -> _MLP:
    return _MLP(
        _cast(mlp.w1, dtype),
        mlp.b1.astype(dtype, copy=False),
        _cast(mlp.w2, dtype),
        mlp.b2.astype(dtype, copy=False),
        mlp.activations,
        mlp.norm_groups,
        units_by_kind(mlp.activations),
    )


def units_by_kind(activations: Sequence[Activation]) -> dict[Activation, list[int]]:
    """The hidden units of each activation kind, in increasing order."""
    units: dict[Activation, list[int]] = {}
    for unit, kind in enumerate(activations):
        units.setdefault(Activation(kind), []).append(unit)
    return units


def _group(heads: Sequence[_Head]) -> fw.UniformGroup[Matrix] | None:
    """The layer's prefix-sum heads with their weights stacked (None: fewer than two)."""
    members = fw.uniform_members(NUMPY, heads)
    if len(members) < 2:
        return None
    w_v = _stack([heads[m].w_v for m in members], axis=0)
    w_o = _stack([heads[m].w_o for m in members], axis=1)
    return fw.UniformGroup(members, w_v, w_o)


def _stack(ws: Sequence[Matrix], axis: int) -> Matrix:
    if all(isinstance(w, np.ndarray) for w in ws):
        return np.concatenate(ws, axis=axis)  # type: ignore[arg-type]
    from scipy import sparse  # loaded already: a weight is sparse

    pieces = [sparse.csr_array(w) for w in ws]
    stacked: Matrix = sparse.csr_array(
        sparse.vstack(pieces) if axis == 0 else sparse.hstack(pieces)
    )
    return stacked


Step = Callable[[NDAny, NDAny, Observer[NDAny] | None], NDAny]

# exp(x) is exactly 0 below this, in float64 and in float32.
UNDERFLOW = 746.0


def _banded(
    head: _Head, keys: PositionalKeys, x: NDAny, lengths: NDAny, observe: Observer[NDAny] | None
) -> NDAny:
    """A causal softmax head whose keys depend on the key's position alone,
    ``k_s = a·s + b·s²`` (:func:`~crasp_compiler.model.model.positional_keys`; the relu
    lowering's offset lookups): query t scores key s as ``α_t s + β_t s²``. Where every
    ``β_t < 0`` the scores fall at least ``|β_t| d²`` at distance d from the best allowed
    key (the concave maximum, clamped to ``0 … min(t, length)``), so the keys farther than
    ``D = ⌈√(746/min|β|)⌉`` get the weight ``exp(≤ −746) = 0`` exactly: the head equals
    its full softmax summed over ``2D + 1`` keys per query, O(T·D) instead of O(T²).
    Otherwise (a pattern asked for, some ``β_t ≥ 0``, or a band as wide as the input)
    the general path runs."""
    size = x.shape[1]
    if observe is not None or head.bias or head.weighting is not Weighting.SOFTMAX:
        return fw.head_forward(NUMPY, head, x, lengths, observe)
    q = NUMPY.matmul_t(x, head.w_q) * head.scale  # (B, T, dk)
    a, b = (np.asarray(w, dtype=q.dtype) for w in keys)
    beta = q @ b
    if size < 2 or not np.all(beta < 0):
        return fw.head_forward(NUMPY, head, x, lengths, observe)
    width = math.ceil(math.sqrt(UNDERFLOW / float(np.min(-beta))))
    if 2 * width + 1 >= size:
        return fw.head_forward(NUMPY, head, x, lengths, observe)
    alpha = q @ a
    last = np.minimum(np.arange(size)[None, :], lengths[:, None])  # the last allowed key
    center = np.clip(np.rint(-alpha / (2 * beta)), 0, last).astype(np.int64)
    s = center[..., None] + np.arange(-width, width + 1)  # (B, T, W) key positions
    valid = (s >= 0) & (s <= last[..., None])
    s = np.clip(s, 0, size - 1)
    steps = s.astype(q.dtype)[..., None]
    k = a * steps + b * (steps * steps)  # (B, T, W, dk): the keys, as W_K x_s gives them
    scores = np.where(valid, np.einsum("btd,btwd->btw", q, k), -np.inf)
    weights = np.where(valid, np.exp(scores - scores.max(axis=-1, keepdims=True)), 0.0)
    weights = weights / weights.sum(axis=-1, keepdims=True)
    v = NUMPY.matmul_t(x, head.w_v)  # (B, T, dv)
    gathered = np.take_along_axis(v, s.reshape(v.shape[0], -1)[..., None], axis=1)
    mixed = np.einsum("btw,btwd->btd", weights, gathered.reshape(*s.shape, v.shape[-1]))
    return NUMPY.matmul_t(mixed.astype(x.dtype, copy=False), head.w_o)


class _FixedPattern:
    """A head whose queries and keys are functions of position alone
    (:func:`~crasp_compiler.model.model.positional_patterns`: PCOC's routing heads). Its
    pattern depends on the length alone: computed once per (T, length) by the general
    path's weighting (:func:`~crasp_compiler.runtime.forward.pattern_rows`) from the
    positional embedding, which is what those residual dimensions hold, and applied as a
    sparse matrix (a hard routing head has one weight per row): O(T·dv) per sequence
    instead of the general path's O(T²·(dk + dv)). Observed passes, and lengths whose
    T × T pattern exceeds :data:`SCORE_BUDGET`, take the general path."""

    def __init__(self, head: _Head, positions: Callable[[int], NDAny]) -> None:
        self.head = head
        self.positions = positions
        self.cache: dict[tuple[int, int, Any], Any] = {}

    def __call__(self, x: NDAny, lengths: NDAny, observe: Observer[NDAny] | None) -> NDAny:
        size = x.shape[1]
        if observe is not None or size * size > SCORE_BUDGET:
            return fw.head_forward(NUMPY, self.head, x, lengths, observe)
        v = NUMPY.matmul_t(x, self.head.w_v)  # (B, T, dv)
        mixed = np.empty_like(v)
        for length in np.unique(lengths):
            rows = np.flatnonzero(lengths == length)
            weights = self.pattern(size, int(length), x.dtype)
            part = v[rows].transpose(1, 0, 2).reshape(size, -1)  # (T, rows·dv)
            mixed[rows] = np.asarray(weights @ part).reshape(size, len(rows), -1).transpose(1, 0, 2)
        return NUMPY.matmul_t(mixed, self.head.w_o)

    def pattern(self, size: int, length: int, dtype: Any) -> Any:
        """``α`` ``(T, T)`` for sequences of ``length`` tokens padded to ``size``
        positions: CSR where at most a quarter of it is nonzero."""
        key = (size, length, dtype)
        if key not in self.cache:
            from scipy import sparse

            x = self.positions(size).astype(dtype, copy=False)[None]  # (1, T, d)
            q = NUMPY.matmul_t(x, self.head.w_q)
            keys = NUMPY.swap_last(NUMPY.matmul_t(x, self.head.w_k))
            cols = np.arange(size)
            tolerance = HARD_TOLERANCE["float64" if dtype == np.float64 else "float32"]
            rows = fw.pattern_rows(
                NUMPY, self.head, q, keys, cols, cols, np.array([length]), tolerance
            )[0]
            dense_enough = np.count_nonzero(rows) * 4 > rows.size
            self.cache[key] = rows if dense_enough else sparse.csr_array(rows)
        return self.cache[key]


# Models at least this wide run each layer on the residual columns it touches
# (:func:`_slim_block`) when the pass is not observed.
SLIM_WIDTH = 256


@dataclass(frozen=True)
class _SlimLayer:
    """A layer as :func:`_slim_block` runs it: per head, the residual columns it reads,
    the places of the columns it writes among ``written`` (those all heads write), and
    its step on the columns read; the MLP's columns read, written and its step."""

    heads: list[tuple[NDArray[np.int64], NDArray[np.int64], Step]]
    written: NDArray[np.int64]
    mlp: tuple[NDArray[np.int64], NDArray[np.int64], Callable[[NDAny], NDAny]] | None


def _slim_block(
    layer: _SlimLayer, general: Step, x: NDAny, lengths: NDAny, observe: Observer[NDAny] | None
) -> NDAny:
    """A block of a wide model on the columns it touches, in place: each head reads the
    columns its W_Q, W_K, W_V read and adds to those its W_O writes, after every head has
    read (the update is their sum in head order, as the general pass adds them); then
    the MLP likewise (W_1's columns; W_2's rows and b_2's nonzeros). The products are
    those of the general pass without its zero terms (the same terms, summed in another
    order). An observed pass runs ``general``."""
    if observe is not None:
        return general(x, lengths, observe)
    if layer.heads:
        update = np.zeros((*x.shape[:2], len(layer.written)), dtype=x.dtype)
        for reads, place, step in layer.heads:
            update[..., place] += step(x[..., reads], lengths, None)
        x[..., layer.written] += update
    if layer.mlp is not None:
        reads, writes, mlp = layer.mlp
        x[..., writes] += mlp(x[..., reads])
    return x


class NumpyParts:
    """:class:`crasp_compiler.runtime.forward.Parts` of a model, weights in ``dtype``
    (the positional and numeric maps stay float64)."""

    def __init__(self, model: Model, dtype: type) -> None:
        self.model = model
        self.w_e: NDAny = model.w_e.astype(dtype, copy=False)
        self.w_out: NDAny = np.array([o.weights for o in model.outputs], dtype=dtype).reshape(
            len(model.outputs), model.width
        )
        self.numeric_names = list(model.inputs)
        self.output_count = len(model.outputs)
        self.blocks: list[Step] = []
        all_heads: list[list[_Head]] = []
        all_mlps: list[_MLP | None] = []
        rows = zip(
            model.layers,
            head_kinds(model),
            positional_keys(model),
            positional_patterns(model),
            strict=True,
        )
        for layer, kinds, positional, fixed in rows:
            attention = None
            prepared = [_head(h, kind, dtype) for h, kind in zip(layer.heads, kinds, strict=True)]
            all_heads.append(prepared)
            steps = list(zip(prepared, positional, fixed, strict=True))
            if layer.heads:
                heads = [self.head_step(*step) for step in steps]
                attention = partial(fw.attention_forward, NUMPY, heads, group=_group(prepared))
            mlp = None
            params = _mlp(layer.mlp, dtype) if layer.mlp is not None else None
            all_mlps.append(params)
            if params is not None:
                mlp = partial(fw.mlp_forward, NUMPY, params)
            columns = fw.column_layer(NUMPY, prepared, params)
            # the blocks run only inside forward(), on a residual it owns
            block: Step = partial(fw.block_forward, attention, mlp, columns=columns)
            if model.width >= SLIM_WIDTH:
                block = partial(_slim_block, self.slim(steps, params), block)
            self.blocks.append(block)
        self.plan: fw.Plan[NDAny, Matrix] | None = None
        if not model.inputs:
            self.plan = fw.lower(
                NUMPY, self.w_e, model.features, model.w_p, all_heads, all_mlps, self.w_out
            )

    def head_step(
        self,
        head: _Head,
        keys: PositionalKeys | None,
        fixed: bool,
        columns: NDArray[np.int64] | None = None,
    ) -> Step:
        """How ``head`` runs: :func:`_banded`, :class:`_FixedPattern` or the general
        pass; ``columns``: the residual columns its input holds (all by default)."""
        if keys is not None and head.kind is HeadKind.GENERAL and head.mask is Mask.CAUSAL:
            return partial(_banded, head, keys)
        if fixed and head.kind is HeadKind.GENERAL:
            return _FixedPattern(head, partial(self.position_table, columns=columns))
        return partial(fw.head_forward, NUMPY, head)

    def slim(
        self, steps: Sequence[tuple[_Head, PositionalKeys | None, bool]], mlp: _MLP | None
    ) -> _SlimLayer:
        """The layer on the columns it touches (:func:`_slim_block`)."""
        heads = []
        for head, keys, fixed in steps:
            reads = np.flatnonzero(
                nonzero_columns(head.w_q) | nonzero_columns(head.w_k) | nonzero_columns(head.w_v)
            )
            writes = np.flatnonzero(nonzero_rows(head.w_o))
            sub = replace(
                head,
                w_q=head.w_q[:, reads],
                w_k=head.w_k[:, reads],
                w_v=head.w_v[:, reads],
                w_o=head.w_o[writes],
            )
            heads.append((reads, writes, self.head_step(sub, keys, fixed, reads)))
        written = np.unique(np.concatenate([w for _, w, _ in heads] or [np.zeros(0, np.int64)]))
        at = [np.searchsorted(written, w) for _, w, _ in heads]
        slim_mlp = None
        if mlp is not None:
            reads = np.flatnonzero(nonzero_columns(mlp.w1))
            writes = np.flatnonzero(nonzero_rows(mlp.w2) | (mlp.b2 != 0))
            sub_mlp = replace(
                mlp,
                w1=mlp.w1[:, reads],
                w2=mlp.w2[writes],
                b2=mlp.b2[writes],
            )
            slim_mlp = (reads, writes, partial(fw.mlp_forward, NUMPY, sub_mlp))
        return _SlimLayer(
            [(reads, place, step) for (reads, _, step), place in zip(heads, at, strict=True)],
            written,
            slim_mlp,
        )

    def tokens(self, ids: NDAny) -> NDAny:
        return fw.token_embedding(NUMPY, self.w_e, ids)

    def positions(self, size: int, like: NDAny) -> NDAny:
        return fw.positional_embedding(NUMPY, self.model.features, self.model.w_p, size, like)

    def position_table(self, size: int, columns: NDArray[np.int64] | None = None) -> NDAny:
        """``W_P pos(t)`` for t < size, float64 (as :meth:`positions` gives it); with
        ``columns``, only those residual columns, from the features their rows of ``W_P``
        read (O(T) for a routing head's few one-hot features, not the T × n table)."""
        if columns is None:
            return self.positions(size, np.zeros(0))
        w_p = self.model.w_p[columns]
        used = np.flatnonzero(nonzero_columns(w_p))
        features = [self.model.features[f] for f in used]
        return fw.positional_embedding(NUMPY, features, w_p[:, used], size, np.zeros(0))

    @property
    def positional(self) -> bool:
        return bool(self.model.w_p.shape[1])

    def numeric(self, values: NDAny) -> NDAny:
        return fw.numeric_embedding(NUMPY, self.model.numeric_weights, values)

    def readout(self, x: NDAny) -> NDAny:
        return fw.readout(NUMPY, self.w_out, x)


# The parts of the models run last (by id and float type), with the weights they were
# prepared from: a run of the same model with the same weights reuses them.
_PREPARED: dict[tuple[int, type], tuple[Model, tuple[Any, ...], NumpyParts]] = {}
_PREPARED_MODELS = 8
# Models with more stored numbers than this are prepared afresh for every run.
PREPARED_SIZE = 1 << 16


def prepared(model: Model, dtype: type) -> NumpyParts:
    """``NumpyParts(model, dtype)``, reused while the model's weights and settings are
    those it was prepared from (compared in full, so edits in place are seen)."""
    key = (id(model), dtype)
    if model.parameter_count() > PREPARED_SIZE:
        return NumpyParts(model, dtype)
    state = _state(model)
    held = _PREPARED.get(key)
    if held is not None and held[0] is model and held[1] == state:
        return held[2]
    parts = NumpyParts(model, dtype)
    if len(_PREPARED) >= _PREPARED_MODELS:
        _PREPARED.pop(next(iter(_PREPARED)))
    _PREPARED[key] = (model, state, parts)
    return parts


def _state(model: Model) -> tuple[Any, ...]:
    """Every weight and setting the parts are prepared from: the settings as they are,
    each weight as its shape, type and bytes."""
    settings: list[Any] = [tuple(model.vocab), tuple(model.features), tuple(model.inputs)]
    arrays: list[Any] = [model.w_e, model.w_p, model.numeric_weights]
    for layer in model.layers:
        for h in layer.heads:
            arrays += (h.w_q, h.w_k, h.w_v, h.w_o)
            settings.append((h.scale, tuple(sorted(h.bias.items())), h.weighting, h.mask, h.kind))
        if layer.mlp is not None:
            m = layer.mlp
            arrays += (m.w1, m.b1, m.w2, m.b2)
            settings.append((tuple(m.activations), tuple(tuple(g) for g in m.norm_groups)))
    arrays += [o.weights for o in model.outputs]
    weights = []
    for w in arrays:
        held = dense(w) if is_sparse(w) else np.asarray(w)
        weights.append((held.shape, held.dtype.str, held.tobytes()))
    return tuple(settings), tuple(weights)


def _trace_labels(model: Model) -> dict[str, str]:
    """The labels of ``run_tokens(residuals=True)`` for the observation points they come from."""
    labels = {"blocks.0.hook_resid_pre" if model.layers else "hook_resid_final": "embed"}
    for index, layer in enumerate(model.layers):
        if layer.heads:
            labels[f"blocks.{index}.hook_resid_mid"] = f"layer {index + 1} attention"
        if layer.mlp is not None:
            labels[f"blocks.{index}.hook_resid_post"] = f"layer {index + 1} mlp"
    return labels


# ---------------------------------------------------------------- running


def run_tokens(
    model: Model,
    inputs: Sequence[Sequence[str]],
    dtype: type = np.float64,
    residuals: bool = False,
    on_overlength: str = "error",
    values: Sequence[NDAny] | None = None,
) -> RunResult:
    """Run a batch of token sequences (without BOS) through the model.

    ``values`` gives a model with numeric inputs (``model.inputs``) one array per sequence,
    shape ``(len(tokens), m)`` (or ``(len(tokens),)`` when m = 1): the inputs at the
    tokens; BOS reads 0.

    ``on_overlength`` decides what happens with an input the model's guarantee does not
    cover (longer than it covers in real arithmetic or in ``dtype``, numeric inputs
    outside their declared bounds, send destinations that are not integers or collide):
    ``"error"`` raises :class:`CraspError`, ``"warn"`` warns, ``"ignore"``.

    A run whose estimated memory (:mod:`crasp_compiler.runtime.memory`) exceeds the memory
    budget (:mod:`crasp_compiler.budget`, ``$CRASP_MAX_MEMORY``) is refused with a
    :class:`CraspError` before anything large is allocated.
    """
    if on_overlength not in ("error", "warn", "ignore"):
        raise ValueError(f"on_overlength must be error, warn or ignore, not {on_overlength!r}")
    float_type: type = np.dtype(dtype).type
    ids, lengths = encode_vocab(model.vocab, inputs)
    longest = ids.shape[1] - 1
    numeric = None
    if model.inputs or values is not None:
        numeric = numeric_matrix(model.inputs, lengths, values)
    problems = [model.guarantee.length_problem(longest, np.dtype(float_type).name)]
    if numeric is not None:
        problems += model.guarantee.input_problems(model.inputs, numeric, lengths)
    beyond_guarantee([p for p in problems if p], on_overlength)
    size = longest + 1
    itemsize, layers = np.dtype(float_type).itemsize, model_layers(model)
    parts = prepared(model, float_type)
    planned = None if residuals or parts.plan is None else len(model.outputs)
    require_forward_memory(
        model.width,
        len(model.inputs),
        layers,
        len(lengths),
        size,
        itemsize,
        residuals=residuals,
        planned=planned,
    )
    labels = _trace_labels(model) if residuals else {}
    trace: list[tuple[str, NDAny]] = []

    def record(name: str, value: NDAny) -> None:
        if name in labels:
            trace.append((labels[name], value))

    observer = Observer(record) if residuals else None
    raw = fw.forward(NUMPY, parts, ids, lengths, numeric, observer)
    outputs, decided = {}, {}
    steps = np.arange(1, size + 1, dtype=np.float64)[None, :]  # t + 1 is exact in float64
    padding = np.arange(size)[None, :] > lengths[:, None]
    for k, out in enumerate(model.outputs):
        outputs[out.name] = np.ascontiguousarray(raw[..., k])
        decided[out.name] = decide(out.rule, outputs[out.name], steps, padding)
    return RunResult(outputs, decided, lengths, trace if residuals else None)


def encode(
    lookup: Callable[[list[str]], Sequence[int] | NDAny], inputs: Sequence[Sequence[str]]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Token sequences (without BOS) as BOS-prefixed, right-padded ids ``(B, T)`` (BOS and
    padding are 0) and their lengths ``(B,)``; ``lookup`` maps one sequence to its ids
    (:meth:`~crasp_compiler.model.model.Model.token_ids`) and raises ValueError naming a bad
    token, reported as a :class:`CraspError`."""
    rows = []
    for tokens in inputs:
        try:
            rows.append(lookup(tokens if isinstance(tokens, list) else list(tokens)))
        except ValueError as err:
            raise CraspError(str(err), filename="input") from None
    lengths = np.array([len(row) for row in rows], dtype=np.int64)
    ids = np.zeros((len(rows), 1 + (int(lengths.max()) if len(rows) else 0)), dtype=np.int64)
    for b, row in enumerate(rows):
        ids[b, 1 : 1 + len(row)] = row
    return ids, lengths


def encode_vocab(
    vocab: Sequence[str], inputs: Sequence[Sequence[str]]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """:func:`encode` with the ids of ``vocab`` (:func:`~crasp_compiler.model.model.
    token_ids`). Where ``vocab`` has tokens besides BOS, each one character, a sequence whose
    distinct tokens are all such tokens is looked up at once: its characters joined, their
    code points mapped through a table indexed by code point. Other inputs, bad tokens
    among them, go through :func:`encode` (which reports them)."""
    index = {s: k for k, s in enumerate(vocab) if s != BOS}
    if not inputs or not index or not all(len(s) == 1 for s in index):
        return encode(partial(token_ids, vocab), inputs)
    table = np.zeros(1 + max(map(ord, index)), dtype=np.int64)
    for symbol, k in index.items():
        table[ord(symbol)] = k
    symbols = set(index)
    rows = []
    for tokens in inputs:
        try:
            if not set(tokens) <= symbols:
                return encode(partial(token_ids, vocab), inputs)
        except TypeError:  # unhashable tokens
            return encode(partial(token_ids, vocab), inputs)
        text = "".join(tokens).encode("utf-32-le")
        rows.append(np.take(table, np.frombuffer(text, dtype=np.uint32)))
    lengths = np.array([len(row) for row in rows], dtype=np.int64)
    ids = np.zeros((len(rows), 1 + int(lengths.max())), dtype=np.int64)
    for b, row in enumerate(rows):
        ids[b, 1 : 1 + len(row)] = row
    return ids, lengths


def beyond_guarantee(problems: list[str], on_overlength: str) -> None:
    """Act on inputs the guarantee does not cover (``on_overlength``: error, warn or
    ignore)."""
    if not problems or on_overlength == "ignore":
        return
    message = "; ".join(problems)
    if on_overlength == "error":
        raise CraspError(
            message + "; allow it with --beyond-guarantee warn (CLI) or on_overlength='warn' (API)"
        )
    warnings.warn(message, stacklevel=3)


def numeric_matrix(
    channels: list[str], lengths: NDAny, values: Sequence[NDAny] | None
) -> NDArray[np.float64]:
    """The numeric inputs as ``(B, T, m)`` float64, 0 at BOS and padding; CraspError when
    they are missing or do not match the model's ``channels`` and the input lengths."""
    m = len(channels)
    if values is None:
        raise CraspError(f"this model reads numeric inputs ({', '.join(channels)}): give values")
    if len(values) != len(lengths):
        raise CraspError(f"numeric inputs for {len(values)} sequences, tokens for {len(lengths)}")
    size = int(lengths.max()) + 1 if len(lengths) else 1
    out = np.zeros((len(lengths), size, m))
    for row, (given, n) in enumerate(zip(values, lengths, strict=True)):
        array = np.asarray(given, dtype=np.float64)
        if m == 1 and array.ndim == 1:
            array = array[:, None]
        if array.shape != (n, m):
            raise CraspError(
                f"numeric inputs of sequence {row} have shape {array.shape}, expected ({n}, {m})"
            )
        if not np.all(np.isfinite(array)):
            raise CraspError(f"numeric inputs of sequence {row} are not all finite")
        out[row, 1 : 1 + n] = array
    return out


def decide(rule: str, raw: NDAny, scale: NDAny, padding: NDAny | None = None) -> NDAny:
    """Apply a decision rule (see :mod:`crasp_compiler.model.model`); ``scale`` is t + 1.
    Positions marked in ``padding`` (beyond a sequence's end) read False, 0 or NaN."""
    return fw.decide(NUMPY, Rule(rule), raw, scale, padding)


__getattr__ = deprecated(__name__, {"run": "run_tokens"})
