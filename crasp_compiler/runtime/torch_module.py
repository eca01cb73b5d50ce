"""The model family as a ``torch.nn.Module`` (equations in :mod:`crasp_compiler.model.model`).

``TorchTransformer(model)`` holds every weight as a parameter (large sparse matrices
aside: below) under names that hooks and interpretability tools can address::

    embed.w_e                     (V, d)      token embedding (row 0 is BOS)
    pos.w_p                       (d, F)      positional features -> residual
    numeric.w_x                   (d, m)      numeric inputs -> residual (models with inputs)
    blocks[i].attn.heads[h]       w_q, w_k (dk, d), w_v (dv, d), w_o (d, dv)
    blocks[i].mlp                 w1 (h, d), b1 (h,), w2 (d, h), b2 (d,)
    readout.weight                (K, d)      one row per named output

Sparse weights. A matrix the model stores sparse and larger than
:data:`~crasp_compiler.model.model.DENSE_LIMIT` entries
(:func:`~crasp_compiler.model.model.kept_sparse`; compiled PCOC routing at large n) stays
sparse: a :class:`SparseWeight` submodule at the same name (``blocks[i].mlp.w1`` …) whose
buffers ``rows``, ``cols``, ``values`` hold its stored entries in CSR order. Its products
add each entry's product in that order (``index_put_`` with accumulation, sequential on
the CPU), so they are the numpy executor's (scipy's) bit for bit. Every other matrix (all
of every C-RASP example) is a dense parameter as above; the module refuses a model whose
dense matrices alone exceed :data:`~crasp_compiler.model.model.TORCH_DENSE_LIMIT`. Sparse
weights are for inference: they are buffers, so optimizers never see them and they get
no gradient (gradients do flow through their products to the activations and the dense
parameters); ``.to(dtype)`` / ``.to(device)``, ``state_dict`` / ``load_state_dict`` (same
entries count) and hooks work as for dense weights, ``to_model()`` gives them back as
scipy CSR matrices, and the exports (:mod:`crasp_compiler.export`), which need dense
weights, keep refusing models beyond the limit. ``torch.compile`` / ``torch.export`` of a
sparse model are untested.

``forward(ids, lengths)`` takes BOS-prefixed, right-padded token ids ``(B, T)`` and
returns the raw outputs ``(B, T, K)``. Each submodule's ``forward`` is one function of the
shared forward pass (:mod:`crasp_compiler.runtime.forward`) run on torch tensors
(:data:`TORCH`): positional features are computed on the model's device inside
``forward``, so ``torch.compile`` and ``torch.export`` see no numpy and the graphs are
generic in the length. Padding never reaches a real position: keys beyond a sequence's
length are masked. ``forward(..., observe=Observer(hook))`` reports the named points of
the pass (listed in :mod:`crasp_compiler.runtime.forward`).

Threads. The module never sets torch's global thread state. These models are narrow,
so on small or loaded CPUs the default intra-op threads cost more than they give
(Dyck-1, n = 4096, batch 8 on a loaded 2-core machine: 0.25–0.4 s against 6–11 ms with
one thread): call ``torch.set_num_threads(1)`` in such programs
(``benchmarks/throughput.py --ratios`` measures both).

Hook points. Each of those points is also an identity submodule
(:class:`~crasp_compiler.runtime.hooks.HookPoint`) at the module path of its name
(``hook_embed``, ``blocks.{l}.hook_resid_pre``, ``blocks.{l}.attn.heads.{h}.hook_z``,
``blocks.{l}.mlp.hook_post``, ...; ``hook_dict`` maps names to them), so forward hooks and
nnsight reach them; every block has an ``attn`` module, without heads in a layer that has
none. ``run_with_cache`` and ``run_with_hooks`` work as in TransformerLens (patching
included), and the cache labels its entries (:mod:`crasp_compiler.runtime.hooks`).
Attention patterns are computed only where asked for: nnsight reads ``hook_pattern``
after ``module.patterns = True``, and a trace that reads one without it fails with a
:class:`CraspError` naming the switch (not nnsight's ``OutOfOrderError``).

Head kinds. Each head holds its kind (``blocks[i].attn.heads[h].kind``, a
:class:`~crasp_compiler.model.model.HeadKind`): the one the model records (or, for heads
built without one, the structural check of :func:`~crasp_compiler.model.model.derive_kinds`),
so ``forward`` picks every head's path from Python attributes, with no ``.any()`` or
device synchronisation, and torch.compile sees constants. When weights change, the kinds
are checked again from the weights, once per update and never per ``forward``:

- :meth:`TorchTransformer.refresh_kinds` does it (one reduction per weight, one transfer
  to the host), and whoever changes weights in a way torch does not count may call it;
- ``load_state_dict`` calls it (a post hook);
- in eager mode ``forward`` compares the parameters' (and sparse weights' ``values``)
  version counters (``p._version``,
  host integers that every in-place update such as ``optimizer.step()`` or
  ``p.copy_()`` increments) with those of the last check, and refreshes when one moved.
  Updates that bypass the counter (``p.data = …``, ``p.data.add_(…)``) need an explicit
  ``refresh_kinds()``; while compiling or exporting the counters are not read (the
  compiled graph keeps the kinds it was traced with, and a graph traced without
  gradients keeps the plan's weights as constants: call ``refresh_kinds()`` after
  changing weights, and the changed attributes make torch.compile retrace).

A head whose weights leave its kind thus falls back to a path that is right for any
weights. The fast paths also drop gradients: while gradients flow, a uniform head runs on
prefix sums only if neither ``w_q`` nor ``w_k`` wants a gradient, and a BOS-keyed head in
O(T) only if neither ``w_k`` nor the residual stream does (its keys at tokens are taken
to be 0, not computed); otherwise the general path computes every gradient.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from scipy import sparse
from torch import nn

from crasp_compiler.errors import CraspError
from crasp_compiler.model.features import zero_at_tokens
from crasp_compiler.model.model import (
    MLP,
    Activation,
    Head,
    HeadKind,
    HeadShape,
    Layer,
    Mask,
    Matrix,
    Model,
    Output,
    Rule,
    Weighting,
    classify_heads,
    dense,
    head_kinds,
    kept_sparse,
    require_dense,
    scores_vanish,
    with_kinds,
)
from crasp_compiler.runtime import forward as fw
from crasp_compiler.runtime.forward import Observer
from crasp_compiler.runtime.hooks import (
    ActivationCache,
    HookFn,
    HookPoint,
    name_points,
)
from crasp_compiler.runtime.memory import LayerShape, require_forward_memory
from crasp_compiler.runtime.numpy_exec import (
    beyond_guarantee,
    encode_vocab,
    numeric_matrix,
    units_by_kind,
)

Tensor = torch.Tensor


def torch_device(name: str, dtype: str = "float64") -> torch.device:
    """The torch device ``name``, checked by computing on it: CraspError unless torch can
    run ``dtype`` arithmetic there (meta tensors hold no values; backends that are not
    built in or have no hardware fail)."""
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as err:
        raise CraspError(f"--device {name!r}: {err}") from None
    if device.type == "meta":
        raise CraspError(f"--device {name!r}: meta tensors hold no values (use cpu or cuda)")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CraspError(
            f"--device {name!r}: CUDA is not available here (torch.cuda.is_available() is "
            "False); use cpu"
        )
    try:
        probe = torch.ones(2, dtype=getattr(torch, dtype), device=device)
        works = float((probe @ probe).cpu()) == 2.0
    except Exception as err:  # unbuilt or absent backends fail in many ways
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise CraspError(f"--device {name!r}: torch cannot compute there ({first[:200]})") from None
    if not works:
        raise CraspError(f"--device {name!r}: torch computed a wrong result there")
    return device


# ---------------------------------------------------------------- the array shim


class SparseWeight(nn.Module):
    """A weight matrix ``(out, in)`` kept sparse: its stored entries in the order of the
    model's CSR matrix (row-major), as buffers ``rows``, ``cols`` (int64) and ``values``
    (the float type of the module). Buffers, not parameters: the entries get no gradient
    (gradients still flow through the product to the activations), optimizers do not see
    them, and ``.to(dtype)`` / ``.to(device)`` / ``state_dict`` handle them as any buffer
    (``load_state_dict`` needs the same number of entries)."""

    rows: Tensor
    cols: Tensor
    values: Tensor

    def __init__(self, rows: Tensor, cols: Tensor, values: Tensor, shape: tuple[int, int]) -> None:
        super().__init__()
        self.register_buffer("rows", rows)
        self.register_buffer("cols", cols)
        self.register_buffer("values", values)
        self.shape = (int(shape[0]), int(shape[1]))
        self._positions: dict[tuple[int, int], int] | None = None

    @classmethod
    def of(cls, w: Matrix) -> SparseWeight:
        """The stored entries of a scipy CSR matrix, in their stored order."""
        csr = sparse.csr_array(w)
        counts = np.diff(csr.indptr)
        rows = np.repeat(np.arange(csr.shape[0], dtype=np.int64), counts)
        return cls(
            torch.from_numpy(rows),
            torch.from_numpy(np.array(csr.indices, dtype=np.int64)),
            torch.tensor(np.asarray(csr.data, dtype=np.float64)),
            csr.shape,
        )

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        return self.values.device

    def extra_repr(self) -> str:
        return f"shape={self.shape}, nnz={self.values.numel()}, dtype={self.values.dtype}"

    def position(self, index: tuple[int, ...]) -> int | None:
        """Where entry ``index`` is stored (None: not stored, so 0); the map is built on
        the host once, and dropped when the structure may have changed (:meth:`forget`)."""
        if self._positions is None:
            rows, cols = self.rows.tolist(), self.cols.tolist()
            self._positions = {}
            for at, key in enumerate(zip(rows, cols, strict=True)):
                self._positions.setdefault(key, at)
        return self._positions.get((int(index[0]), int(index[1])))

    def forget(self) -> None:
        """Drop the host map of :meth:`position` (after a load)."""
        self._positions = None

    def to_scipy(self) -> Matrix:
        """The entries as a float64 scipy CSR matrix (stored order and zeros kept)."""
        rows = self.rows.cpu().numpy()
        indptr = np.zeros(self.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=self.shape[0]), out=indptr[1:])
        values = self.values.detach().to("cpu", torch.float64).numpy().copy()
        out: Matrix = sparse.csr_array(
            (values, self.cols.cpu().numpy().copy(), indptr), shape=self.shape
        )
        return out


# A weight matrix of the torch module: dense, or kept sparse.
Weight = Tensor | SparseWeight

# Entries materialised at once by a sparse product (stored entries × rows of x).
SPARSE_BUDGET = 1 << 24


def _sparse_matmul_t(x: Tensor, w: SparseWeight) -> Tensor:
    """``x @ w.T`` for a sparse ``w``: every stored entry's product with its column of
    ``x``, summed into its row in the stored order (``index_put_`` with accumulation is
    sequential on the CPU), so the sums are those of scipy's CSR product bit for bit."""
    flat = x.reshape(-1, x.shape[-1]).T.contiguous()  # (in, N)
    count = flat.shape[1]
    nnz = max(1, w.values.numel())
    step = count if TORCH.tracing() else max(1, SPARSE_BUDGET // nnz)
    dtype = torch.promote_types(flat.dtype, w.values.dtype)  # as scipy's product
    flat, values = flat.to(dtype), w.values.to(dtype)[:, None]
    parts = []
    for start in range(0, max(count, 1), step):
        block = flat[:, start : start + step]
        out = torch.zeros(w.shape[0], block.shape[1], dtype=flat.dtype, device=flat.device)
        products = torch.index_select(block, 0, w.cols).mul_(values)
        parts.append(out.index_put_((w.rows,), products, accumulate=True))
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
    return out.T.reshape(*x.shape[:-1], w.shape[0])


def _stack(ws: Sequence[Weight], axis: int) -> Weight:
    """Weights stacked along ``axis`` (0: rows, 1: columns); sparse when one is, with the
    entries in the order of scipy's ``vstack`` / ``hstack`` of their CSR forms (each dense
    one's nonzeros in row-major order), as the numpy executor stacks them."""
    if all(isinstance(w, Tensor) for w in ws):
        return torch.cat([cast(Tensor, w) for w in ws], dim=axis)
    rows, cols, values = [], [], []
    offset = 0
    for w in ws:
        if isinstance(w, SparseWeight):
            r, c, v = w.rows, w.cols, w.values
        else:
            at = torch.nonzero(w)
            r, c = at[:, 0], at[:, 1]
            v = w[r, c]
        if axis == 0:
            r = r + offset
        else:
            c = c + offset
        rows.append(r)
        cols.append(c)
        values.append(v.to(ws[0].dtype))
        offset += w.shape[axis]
    row, col, value = torch.cat(rows), torch.cat(cols), torch.cat(values)
    if axis == 1:
        order = torch.sort(row, stable=True).indices
        row, col, value = row[order], col[order], value[order]
    first = ws[0].shape
    shape = (offset, first[1]) if axis == 0 else (first[0], offset)
    return SparseWeight(row, col, value, shape)


def _nonzero_rows(w: Weight, columns: Sequence[int] | None = None) -> Tensor:
    """Which rows of ``w`` hold a nonzero entry (in ``columns`` only, if given)."""
    if isinstance(w, Tensor):
        part = w if columns is None else w[:, list(columns)]
        return (part != 0).any(1)
    keep = w.values != 0
    if columns is not None:
        keep &= torch.isin(w.cols, torch.tensor(list(columns), device=w.cols.device))
    out = torch.zeros(w.shape[0], dtype=torch.bool, device=w.device)
    return out.index_fill_(0, w.rows[keep], True)


def _nonzero_columns(w: Weight) -> Tensor:
    """Which columns of ``w`` hold a nonzero entry."""
    if isinstance(w, Tensor):
        return (w != 0).any(0)
    out = torch.zeros(w.shape[1], dtype=torch.bool, device=w.device)
    return out.index_fill_(0, w.cols[w.values != 0], True)


def _any_nonzero(w: Weight) -> Tensor:
    """Whether ``w`` has a nonzero entry, as a 1-element tensor."""
    return ((w if isinstance(w, Tensor) else w.values) != 0).any()[None]


def _exporting() -> bool:
    """Whether ``torch.export`` (or an exporter built on it) is tracing the module; a torch
    that cannot tell export from compile (before 2.5) counts every trace as one."""
    exporting = getattr(torch.compiler, "is_exporting", torch.compiler.is_compiling)
    return bool(exporting())


def _wants_grad(w: Weight) -> bool:
    return isinstance(w, Tensor) and w.requires_grad


class TorchBackend:
    """:class:`crasp_compiler.runtime.backend.Backend` over torch tensors, with weights
    dense or kept sparse (:class:`SparseWeight`), and ``scaled_dot_product_attention`` for
    causal softmax heads without bias."""

    name = "torch"
    fused_attention = True

    def tracing(self) -> bool:
        return bool(torch.compiler.is_compiling())

    def accelerated(self, like: Tensor) -> bool:
        return like.device.type not in ("cpu", "meta")

    def arange(self, n: int, like: Tensor) -> Tensor:
        return torch.arange(n, device=like.device)

    def zeros(self, shape: tuple[int, ...], like: Tensor) -> Tensor:
        return torch.zeros(shape, dtype=like.dtype, device=like.device)

    def _constant(self, value: float, like: Tensor) -> Tensor:
        """A 0-d tensor holding ``value`` exactly: filled on the device (no host copy,
        so no synchronisation), or, while traced, a constant of the graph (``full``'s
        Python number may be stored in float32 by exporters)."""
        if self.tracing():
            return torch.tensor(value, dtype=like.dtype, device=like.device)
        return torch.full((), value, dtype=like.dtype, device=like.device)

    def select(self, cond: Tensor, a: float, b: float, like: Tensor) -> Tensor:
        return torch.where(cond, self._constant(a, like), self._constant(b, like))

    def scalar(self, value: float, like: Tensor) -> Tensor | float:
        return self._constant(value, like) if self.tracing() else value

    def dtype_name(self, x: Tensor) -> str:
        return str(x.dtype).removeprefix("torch.")

    def to_float64(self, x: Tensor) -> Tensor:
        return x.to(torch.float64)

    def to_int64(self, x: Tensor) -> Tensor:
        return x.to(torch.int64)

    def cast(self, x: Tensor, like: Tensor) -> Tensor:
        return x.to(like.dtype)

    def cast_for(self, x: Tensor, w: Weight) -> Tensor:
        return x.to(w.dtype)

    def equal(self, x: Tensor, value: float) -> Tensor:
        return x == value

    def matmul_t(self, x: Tensor, w: Weight) -> Tensor:
        if isinstance(w, SparseWeight):
            return _sparse_matmul_t(x, w)
        return x @ w.T

    def matmul(self, a: Tensor, b: Tensor) -> Tensor:
        return a @ b

    def swap_last(self, x: Tensor) -> Tensor:
        return x.transpose(-1, -2)

    def take_rows(self, table: Weight, ids: Tensor) -> Tensor:
        assert isinstance(table, Tensor)  # embeddings are dense
        return F.embedding(ids, table)

    def take_last(self, x: Tensor, index: Sequence[int]) -> Tensor:
        return x[..., list(index)]

    def nonzero(self, w: Weight) -> list[tuple[int, ...]]:
        if isinstance(w, Tensor):
            return [tuple(at) for at in torch.nonzero(w.detach()).tolist()]
        keep = (w.values != 0).cpu().numpy()
        rows, cols = w.rows.cpu().numpy()[keep], w.cols.cpu().numpy()[keep]
        return sorted(zip(rows.tolist(), cols.tolist(), strict=True))  # as numpy's

    def entry(self, w: Weight, index: tuple[int, ...]) -> Tensor:
        if isinstance(w, Tensor):
            return w.detach()[index]
        at = w.position(index)
        if at is None:
            return torch.zeros((), dtype=w.dtype, device=w.device)
        return w.values[at]

    def add_column(self, x: Tensor, column: int, value: Tensor) -> None:
        x[..., column].add_(value)

    def causal_softmax(self, q: Tensor, k: Tensor, v: Tensor, scale: float) -> Tensor:
        heads = F.scaled_dot_product_attention(
            q[:, None], k[:, None], v[:, None], is_causal=True, scale=scale
        )
        return heads[:, 0]

    def where(self, cond: Tensor, a: Tensor | float, b: Tensor | float) -> Tensor:
        return torch.where(cond, a, b)

    def exp(self, x: Tensor) -> Tensor:
        return torch.exp(x)

    def tanh(self, x: Tensor) -> Tensor:
        return torch.tanh(x)

    def sqrt(self, x: Tensor) -> Tensor:
        return torch.sqrt(x)

    def rint(self, x: Tensor) -> Tensor:
        return torch.round(x)

    def relu(self, x: Tensor) -> Tensor:
        return torch.relu(x)

    def maximum(self, a: Tensor, b: Tensor) -> Tensor:
        return torch.maximum(a, b)

    def amax(self, x: Tensor, axis: int) -> Tensor:
        return x.amax(axis, keepdim=True)

    def sum(self, x: Tensor, axis: int) -> Tensor:
        return x.sum(axis, keepdim=True)

    def mean(self, x: Tensor, axis: int) -> Tensor:
        return x.mean(axis, keepdim=True)

    def any(self, x: Tensor, axis: int) -> Tensor:
        return x.any(axis, keepdim=True)

    def cumsum(self, x: Tensor, axis: int) -> Tensor:
        return torch.cumsum(x, dim=axis)

    def flip(self, x: Tensor, axis: int) -> Tensor:
        return x.flip(axis)

    def concat(self, xs: Sequence[Tensor], axis: int) -> Tensor:
        return torch.cat(list(xs), dim=axis)

    def shift(self, x: Tensor, offset: int) -> Tensor:
        pad = [0, 0] * (x.dim() - 2) + [offset, 0]
        return F.pad(x, pad)[:, : x.shape[1]]

    def stack_columns(self, columns: Sequence[Tensor], rows: Tensor) -> Tensor:
        if not columns:
            return torch.zeros(rows.shape[0], 0, dtype=torch.float64, device=rows.device)
        return torch.stack(list(columns), dim=1)

    def dense(self, w: Weight) -> Tensor:
        if isinstance(w, Tensor):
            return w.detach()
        out = torch.zeros(w.shape, dtype=w.dtype, device=w.device)
        return out.index_put_((w.rows, w.cols), w.values.detach(), accumulate=True)

    def gather(self, values: Tensor, ids: Tensor) -> Tensor:
        # index_select on the flat ids: the same entries, about 3x faster than values[ids]
        return values.index_select(0, ids.reshape(-1)).reshape(ids.shape)

    def stack_last(self, xs: Sequence[Tensor]) -> Tensor:
        return torch.stack(list(xs), dim=-1)

    def assign_last(self, out: Tensor, start: int, value: Tensor) -> None:
        out[..., start : start + value.shape[-1]] = value

    def move_first_last(self, x: Tensor) -> Tensor:
        return x.movedim(0, -1)


TORCH = TorchBackend()


# ---------------------------------------------------------------- submodules


def _parameter(array: Any) -> nn.Parameter:
    return nn.Parameter(torch.tensor(np.asarray(array)))


def _weight(w: Matrix) -> Weight:
    """A weight matrix of the model: kept sparse where :func:`~crasp_compiler.model.model.
    kept_sparse` says so, else a dense parameter."""
    return SparseWeight.of(w) if kept_sparse(w) else _parameter(dense(w))


class Embedding(nn.Module):
    def __init__(self, w_e: np.ndarray[Any, Any]) -> None:
        super().__init__()
        self.w_e = _parameter(w_e)

    def forward(self, ids: Tensor) -> Tensor:
        return fw.token_embedding(TORCH, self.w_e, ids)


class NumericInputs(nn.Module):
    """``W_X · v_t`` for the model's numeric input channels ``names``."""

    def __init__(self, names: list[str], w_x: np.ndarray[Any, Any]) -> None:
        super().__init__()
        self.names = list(names)
        self.w_x = _parameter(w_x)

    def forward(self, values: Tensor) -> Tensor:
        return fw.numeric_embedding(TORCH, self.w_x, values)


class PositionalFeatures(nn.Module):
    """``W_P · pos(t)`` for t = 0..T-1; the features are computed on ``w_p``'s device for
    every length."""

    w_p: Weight

    def __init__(self, names: list[str], w_p: Matrix) -> None:
        super().__init__()
        self.names = list(names)
        self.w_p = _weight(w_p)

    def forward(self, size: int) -> Tensor:
        like = self.w_p if isinstance(self.w_p, Tensor) else self.w_p.values
        return fw.positional_embedding(TORCH, self.names, self.w_p, size, like=like)


class AttentionHead(nn.Module):
    """``Σ_s α_ts W_V x_s`` with scores ``scale·(W_Q x_t)·(W_K x_s) + bias(t − s)``;
    returns the head's contribution ``W_O(…)`` to the residual. ``kind`` is the head's
    structural kind (module docstring)."""

    w_q: Weight
    w_k: Weight
    w_v: Weight
    w_o: Weight

    def __init__(self, head: Head, kind: HeadKind) -> None:
        super().__init__()
        self.w_q = _weight(head.w_q)
        self.w_k = _weight(head.w_k)
        self.w_v = _weight(head.w_v)
        self.w_o = _weight(head.w_o)
        self.scale = float(head.scale)
        self.bias = dict(sorted(head.bias.items()))  # in increasing order of offsets
        self.weighting: Weighting = head.weighting
        self.mask: Mask = head.mask
        self.label = head.label
        self.kind: HeadKind = kind
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_pattern, self.hook_z, self.hook_result = HookPoint(), HookPoint(), HookPoint()

    def forward(
        self, x: Tensor, lengths: Tensor, observe: Observer[Tensor] | None = None
    ) -> Tensor:
        return fw.head_forward(
            TORCH,
            self,
            x,
            lengths,
            observe,
            uniform_ok=self.uniform_ok(),
            keyed_ok=self.keyed_ok(x),
        )

    def uniform_ok(self) -> bool:
        """Whether the prefix-sums path loses no gradient (module docstring)."""
        grad = torch.is_grad_enabled()
        return not (grad and (_wants_grad(self.w_q) or _wants_grad(self.w_k)))

    def keyed_ok(self, x: Tensor) -> bool:
        """Whether the O(T) BOS-keyed path loses no gradient (module docstring)."""
        return not (torch.is_grad_enabled() and (x.requires_grad or _wants_grad(self.w_k)))

    def has_module_hooks(self) -> bool:
        """Whether forward hooks are registered on this head module itself (then the
        layer runs it on its own, not in a :class:`~crasp_compiler.runtime.forward.
        UniformGroup`, so that they fire)."""
        return bool(self._forward_hooks or self._forward_pre_hooks)


class Attention(nn.Module):
    """The heads of one layer; their contributions add."""

    def __init__(self, heads: list[Head], kinds: list[HeadKind]) -> None:
        super().__init__()
        self.heads = nn.ModuleList(AttentionHead(h, k) for h, k in zip(heads, kinds, strict=True))

    def head_list(self) -> list[AttentionHead]:
        return [cast(AttentionHead, head) for head in self.heads]

    def forward(
        self, x: Tensor, lengths: Tensor, observe: Observer[Tensor] | None = None
    ) -> Tensor:
        heads = self.head_list()
        group = None
        if observe is None and len(heads) > 1 and not any(h.has_module_hooks() for h in heads):
            members = fw.uniform_members(
                TORCH,
                heads,
                uniform_ok=[h.uniform_ok() for h in heads],
                keyed_ok=[h.keyed_ok(x) for h in heads],
            )
            if len(members) > 1:
                group = fw.UniformGroup(
                    members,
                    _stack([heads[m].w_v for m in members], axis=0),
                    _stack([heads[m].w_o for m in members], axis=1),
                )
        return fw.attention_forward(TORCH, heads, x, lengths, observe, group)


class FeedForward(nn.Module):
    """``W_2 act(N(W_1 x + b_1)) + b_2`` with per-unit activations and the selective
    layer norm N over ``norm_groups`` (ε = 0; a zero-variance group gives 0)."""

    w1: Weight
    w2: Weight

    def __init__(self, mlp: MLP) -> None:
        super().__init__()
        self.w1 = _weight(mlp.w1)
        self.b1 = _parameter(mlp.b1)
        self.w2 = _weight(mlp.w2)
        self.b2 = _parameter(mlp.b2)
        self.activations = list(mlp.activations)
        self.labels = list(mlp.labels)
        self.norm_groups = [list(g) for g in mlp.norm_groups]
        self.units = units_by_kind(self.activations)  # each activation on its units only
        self.hook_pre, self.hook_normalized, self.hook_post = HookPoint(), HookPoint(), HookPoint()

    def unit_index(self, activation: Activation) -> list[int]:
        return self.units.get(activation, [])

    def forward(self, x: Tensor, observe: Observer[Tensor] | None = None) -> Tensor:
        return fw.mlp_forward(TORCH, self, x, observe)


class Block(nn.Module):
    """One layer: its attention (without heads in a layer that has none) and its MLP (None
    in a layer without one)."""

    def __init__(self, layer: Layer, kinds: list[HeadKind]) -> None:
        super().__init__()
        self.attn = Attention(layer.heads, kinds)
        self.mlp = FeedForward(layer.mlp) if layer.mlp is not None else None
        self.hook_resid_pre, self.hook_attn_out = HookPoint(), HookPoint()
        self.hook_resid_mid, self.hook_mlp_out = HookPoint(), HookPoint()
        self.hook_resid_post = HookPoint()
        self.columns: fw.ColumnLayer[Tensor, Weight] | None = None
        self.prepare_columns()

    def forward(
        self,
        x: Tensor,
        lengths: Tensor,
        observe: Observer[Tensor] | None = None,
        fast: bool = False,
    ) -> Tensor:
        """``fast``: the caller owns ``x`` and nothing hooks, traces or differentiates the
        pass (:meth:`TorchTransformer.forward`), so the column path may update ``x`` in
        place (:class:`~crasp_compiler.runtime.forward.ColumnLayer`)."""
        attention = self.attn if len(self.attn.heads) else None
        columns = self.columns if fast and observe is None else None
        return fw.block_forward(attention, self.mlp, x, lengths, observe, columns)

    @torch.no_grad()
    def prepare_columns(self) -> None:
        """The layer's column plan, from the zeros and ones of its weights and its head
        kinds (reads them on the host: when built, and in ``refresh_kinds``)."""
        heads = self.attn.head_list()
        self.columns = fw.column_layer(TORCH, heads, self.mlp)


class _Parts:
    """The module's submodules as :class:`crasp_compiler.runtime.forward.Parts`."""

    def __init__(self, module: TorchTransformer) -> None:
        self.module = module
        self.numeric_names = module.numeric.names if module.numeric is not None else []
        self.output_count = len(module.output_names)
        self.fast = module.fast_path_ok()
        self.blocks: list[Callable[[Tensor, Tensor, Observer[Tensor] | None], Tensor]] = [
            partial(block, fast=self.fast) for block in module.blocks
        ]

    def tokens(self, ids: Tensor) -> Tensor:
        out: Tensor = self.module.embed(ids)
        return out

    def positions(self, size: int, like: Tensor) -> Tensor:
        out: Tensor = self.module.pos(size)
        return out

    @property
    def positional(self) -> bool:
        return bool(self.module.pos.w_p.shape[1]) or not self.fast

    def numeric(self, values: Tensor) -> Tensor:
        assert self.module.numeric is not None
        out: Tensor = self.module.numeric(values)
        return out

    def readout(self, x: Tensor) -> Tensor:
        out: Tensor = self.module.readout(x)
        return out

    @property
    def plan(self) -> fw.Plan[Tensor, Weight] | None:
        return self.module.plan() if self.fast else None


def _nnsight_waits_for(point: HookPoint) -> bool:
    """Whether an nnsight trace is waiting for ``point`` to run: a worker parked on one of
    its locations, read from the state nnsight keeps on a module it wraps (False where
    there is none, or nnsight keeps another)."""
    state = point.__dict__.get("__nnsight__")
    if state is None:
        return False
    try:
        interleaver, _, locations = state.active()
        return interleaver is not None and any(loc in interleaver.parked for loc in locations)
    except (AttributeError, TypeError, ValueError):
        return False


def _refresh_after_load(module: nn.Module, incompatible: Any) -> None:
    if isinstance(module, TorchTransformer):
        module.refresh_kinds()


class TorchTransformer(nn.Module):
    """A compiled model as a torch module; ``to_model()`` converts back."""

    def __init__(self, model: Model) -> None:
        super().__init__()
        require_dense(model, "the torch module", keep_sparse=True)
        kinds = head_kinds(model)
        self.embed = Embedding(model.w_e)
        self.pos = PositionalFeatures(model.features, model.w_p)
        # only a model with numeric inputs has this submodule (and numeric.w_x)
        self.numeric = NumericInputs(model.inputs, model.numeric_weights) if model.inputs else None
        self.blocks = nn.ModuleList(
            Block(layer, row) for layer, row in zip(model.layers, kinds, strict=True)
        )
        weights = np.stack([o.weights for o in model.outputs]) if model.outputs else None
        self.readout = nn.Linear(model.width, len(model.outputs), bias=False, dtype=torch.float64)
        if weights is not None:
            with torch.no_grad():
                self.readout.weight.copy_(torch.tensor(weights))
        self.output_names = [o.name for o in model.outputs]
        self.output_rules: list[Rule] = [o.rule for o in model.outputs]
        self.vocab = list(model.vocab)
        self.residual = list(model.residual)
        self.occupants = model.occupants  # per-stage labels where dimensions are reused
        self.guarantee = model.guarantee
        self.accept = model.accept
        self.options, self.source, self.info = dict(model.options), model.source, dict(model.info)
        self.provenance = model.provenance
        self.hook_embed, self.hook_pos_embed, self.hook_numeric_embed = (
            HookPoint(),
            HookPoint(),
            HookPoint(),
        )
        self.hook_resid_final, self.hook_outputs = HookPoint(), HookPoint()
        self.patterns = False  # materialise every head's pattern (for hook_pattern)
        self.hook_dict: dict[str, HookPoint] = name_points(self)
        # the submodules, listed once: every forward checks their weights' versions and
        # hooks (a submodule added after construction is not seen)
        self._submodules: list[nn.Module] = list(self.modules())
        self._versions = self._parameter_versions()
        # the lowered plan (:meth:`plan`), and it by dtype and device
        self._lowered: fw.Plan[Tensor, Weight] | None = None
        self._plans: dict[tuple[torch.dtype, torch.device], fw.Plan[Tensor, Weight]] = {}
        self._lower()
        self.register_load_state_dict_post_hook(_refresh_after_load)  # type: ignore[no-untyped-call]

    # ------------------------------------------------------------------ head kinds

    def layers(self) -> list[Block]:
        """The blocks, typed."""
        return [cast(Block, block) for block in self.blocks]

    def head_rows(self) -> list[list[AttentionHead]]:
        """The heads of each layer."""
        return [block.attn.head_list() for block in self.layers()]

    def sparse_weights(self) -> list[SparseWeight]:
        """The weight matrices kept sparse."""
        return [m for m in self._submodules if isinstance(m, SparseWeight)]

    def _parameter_versions(self) -> tuple[int, ...]:
        """The version counter of every parameter (and sparse weight's values), read from
        each submodule's own parameters: a replaced parameter object counts too."""
        versions = []
        for module in self._submodules:
            versions += [int(p._version) for p in module._parameters.values() if p is not None]
            if isinstance(module, SparseWeight):
                versions.append(int(module.values._version))
        return tuple(versions)

    @torch.no_grad()
    def refresh_kinds(self) -> None:
        """Check every head's kind against the current weights (the structural check of
        :func:`~crasp_compiler.model.model.derive_kinds`) and record what they bear out;
        one reduction per weight and a single transfer to the host."""
        for weight in self.sparse_weights():
            weight.forget()  # a load may have changed where entries are stored
        pieces = [(self.embed.w_e[1:] != 0).any(0)]
        keep = [f for f, name in enumerate(self.pos.names) if not zero_at_tokens(name)]
        if keep:
            pieces.append(_nonzero_rows(self.pos.w_p, keep))
        if self.numeric is not None:
            pieces.append((self.numeric.w_x != 0).any(1))
        for block, heads in zip(self.layers(), self.head_rows(), strict=True):
            for head in heads:
                pieces += [_any_nonzero(head.w_q), _nonzero_columns(head.w_k)]
                pieces.append(_nonzero_rows(head.w_o))
            if block.mlp is not None:
                pieces.append(_nonzero_rows(block.mlp.w2) | (block.mlp.b2 != 0))
        flat = torch.cat([p.reshape(-1) for p in pieces]).cpu().numpy()
        d, at = len(self.residual), 0

        def take(count: int) -> np.ndarray[Any, np.dtype[np.bool_]]:
            nonlocal at
            at += count
            return flat[at - count : at]

        live = take(d).copy()
        if keep:
            live |= take(d)
        if self.numeric is not None:
            live |= take(d)
        layers = []
        for block, heads in zip(self.layers(), self.head_rows(), strict=True):
            shapes = []
            for head in heads:
                has_query, reads, writes = bool(take(1)[0]), take(d), take(d)
                uniform = scores_vanish(has_query, bool(reads.any()), head.scale, head.bias)
                shapes.append(HeadShape(uniform, reads, writes))
            writes = take(d) if block.mlp is not None else np.zeros(d, dtype=np.bool_)
            layers.append((shapes, writes))
        for heads, row in zip(self.head_rows(), classify_heads(live, layers), strict=True):
            for head, kind in zip(heads, row, strict=True):
                head.kind = kind
        self._versions = self._parameter_versions()
        for block in self.layers():
            block.prepare_columns()
        self._lower()

    @torch.no_grad()
    def _lower(self) -> None:
        """Lower the current weights (:func:`~crasp_compiler.runtime.forward.lower`; reads
        them on the host: when built, and in ``refresh_kinds``)."""
        self._plans.clear()
        self._lowered = None
        if self.numeric is None:
            self._lowered = fw.lower(
                TORCH,
                self.embed.w_e,
                self.pos.names,
                self.pos.w_p,
                self.head_rows(),
                [block.mlp for block in self.layers()],
                self.readout.weight,
            )

    def plan(self) -> fw.Plan[Tensor, Weight] | None:
        """The lowered plan of the weights (None: the model has none) in their current
        dtype and on their device, without reading a tensor on the host: the plan holds
        its weights as numbers, which scale tensors of any dtype as ``.to`` rounds them,
        and reads the token embedding from ``embed.w_e``."""
        if self._lowered is None:
            return None
        w_e = self.embed.w_e
        if torch.compiler.is_compiling():  # no cache: a trace that filled it would retrace
            return self._lowered.embedded(w_e.detach())
        key = (w_e.dtype, w_e.device)
        if key not in self._plans:
            self._plans[key] = self._lowered.embedded(w_e.detach())
        return self._plans[key]

    def _check_kinds(self) -> None:
        """Refresh the kinds when a parameter changed since the last check (eager only)."""
        if torch.compiler.is_compiling():
            return
        if self._parameter_versions() != self._versions:
            self.refresh_kinds()

    # ------------------------------------------------------------------ running

    def forward(
        self,
        ids: Tensor,
        lengths: Tensor | None = None,
        values: Tensor | None = None,
        observe: Observer[Tensor] | None = None,
    ) -> Tensor:
        """Raw outputs ``(B, T, K)`` for BOS-prefixed ids ``(B, T)``; ``lengths`` (B,)
        counts the tokens after BOS (default: no padding); ``values`` ``(B, T, m)`` are the
        numeric inputs of a model that has them (0 at BOS and padding; see ``encode``);
        ``observe`` receives the named points of the pass, after their hook points
        (:mod:`crasp_compiler.runtime.hooks`: the pass goes through them while one is
        active, not while compiling or exporting)."""
        self._check_kinds()
        if lengths is None:
            lengths = torch.full((ids.shape[0],), ids.shape[1] - 1, device=ids.device)
        if not torch.compiler.is_compiling() and (observe is not None or self._hooks_active()):
            observe = self._observer(observe)
        out = fw.forward(TORCH, _Parts(self), ids, lengths, values, observe)
        if observe is not None and not self.patterns:
            self._check_unread_patterns()
        return out

    def _check_unread_patterns(self) -> None:
        """Refuse a pass that left an nnsight read of a ``hook_pattern`` point waiting
        (the pass computes patterns only where asked for): nnsight would report that the
        model "already ran past it"; this names the switch instead."""
        waiting = [
            name
            for name, point in self.hook_dict.items()
            if name.endswith(".hook_pattern") and _nnsight_waits_for(point)
        ]
        if waiting:
            raise CraspError(
                f"{waiting[0]} was read but not computed: the torch module computes "
                "attention patterns only where asked for; set module.patterns = True "
                "before the nnsight trace (run_with_cache and forward hooks ask for them "
                "themselves)"
            )

    def fast_path_ok(self) -> bool:
        """Whether the blocks may take the column path and the plan: gradients off, not
        exporting (an export keeps the weights as parameters), no forward hooks on any
        submodule (whose calls it skips). ``torch.compile`` takes it: the plan's column
        operations are what its code generator fuses."""
        if torch.is_grad_enabled() or _exporting():
            return False
        return not any(m._forward_hooks or m._forward_pre_hooks for m in self._submodules)

    def _hooks_active(self) -> bool:
        if torch.nn.modules.module._global_forward_hooks or self.patterns:
            return True
        return any(point.active() for point in self.hook_dict.values())

    def _observer(self, outer: Observer[Tensor] | None) -> Observer[Tensor]:
        """Routes every point through its :class:`HookPoint`, then to ``outer``; asks for
        the patterns of heads whose pattern point is hooked (or wanted by ``outer``)."""
        points = self.hook_dict

        def hook(name: str, value: Tensor) -> Tensor | None:
            point = points.get(name)
            if point is not None:
                value = point(value)
            return value if outer is None else outer(name, value)

        def patterns(name: str) -> bool:
            if self.patterns or (outer is not None and outer.wants(name)):
                return True
            point = points.get(name)
            return point is not None and point.hooked()

        return Observer(hook, patterns=patterns)

    def run_with_cache(
        self,
        ids: Tensor,
        lengths: Tensor | None = None,
        values: Tensor | None = None,
        names_filter: str | Sequence[str] | Callable[[str], bool] | None = None,
    ) -> tuple[Tensor, ActivationCache]:
        """Raw outputs and the activations at the hook points ``names_filter`` accepts (a
        name, names, a predicate; None: all, attention patterns included), detached, with
        labels (:class:`~crasp_compiler.runtime.hooks.ActivationCache`)."""
        if names_filter is None:
            keep: Callable[[str], bool] = lambda name: True  # noqa: E731
        elif isinstance(names_filter, str):
            keep = names_filter.__eq__
        elif callable(names_filter):
            keep = names_filter
        else:
            keep = set(names_filter).__contains__
        store: dict[str, Tensor] = {}

        def record(name: str, value: Tensor) -> None:
            if keep(name):
                store[name] = value.detach()

        raw = self(ids, lengths, values, Observer(record, patterns=keep))
        return raw, ActivationCache(store, self)

    def run_with_hooks(
        self,
        ids: Tensor,
        lengths: Tensor | None = None,
        values: Tensor | None = None,
        fwd_hooks: Sequence[tuple[str | Callable[[str], bool], HookFn]] = (),
    ) -> Tensor:
        """Raw outputs with ``fwd_hooks`` on for this pass: ``(name or predicate, fn)``,
        ``fn(activation, hook)`` returning a replacement (patching) or None."""
        handles = []
        try:
            for which, fn in fwd_hooks:
                names = [which] if isinstance(which, str) else list(filter(which, self.hook_dict))
                for name in names:
                    if name not in self.hook_dict:
                        raise CraspError(f"no hook point {name!r}")
                    handles.append(self.hook_dict[name].add_hook(fn))
            out: Tensor = self(ids, lengths, values)
            return out
        finally:
            for handle in handles:
                handle.remove()

    def encode(
        self, inputs: Sequence[Sequence[str]], device: torch.device | str | None = None
    ) -> tuple[Tensor, Tensor]:
        """Token sequences (without BOS) to right-padded ids ``(B, T)`` and lengths."""
        ids, lengths = encode_vocab(self.vocab, inputs)
        target = device if device is not None else self.embed.w_e.device
        return torch.from_numpy(ids).to(target), torch.from_numpy(lengths).to(target)

    def encode_values(
        self, values: Sequence[np.ndarray[Any, Any]] | None, lengths: Tensor
    ) -> Tensor:
        """Numeric inputs, one array ``(len, m)`` per sequence, to the ``(B, T, m)`` tensor
        ``forward`` takes (0 at BOS and padding)."""
        names = self.numeric.names if self.numeric is not None else []
        table = numeric_matrix(names, lengths.cpu().numpy(), values)
        return torch.tensor(table, device=self.embed.w_e.device)

    def decide(self, raw: Tensor, lengths: Tensor | None = None) -> dict[str, Tensor]:
        """Apply each output's decision rule to raw outputs ``(B, T, K)``; with
        ``lengths``, the padding beyond each sequence's end reads False, 0 or NaN."""
        size = raw.shape[1]
        steps = torch.arange(1, size + 1, device=raw.device, dtype=torch.float64)[None]
        padding = None
        if lengths is not None:
            positions = torch.arange(size, device=raw.device)
            padding = positions[None, :] > lengths.to(raw.device)[:, None]
        return {
            name: fw.decide(TORCH, rule, raw[..., k], steps, padding)
            for k, (name, rule) in enumerate(zip(self.output_names, self.output_rules, strict=True))
        }

    def final(self, raw: Tensor, lengths: Tensor) -> dict[str, Tensor]:
        """Each output's decided value at each sequence's last position ``lengths[b]``
        (not the last column, which is padding for shorter sequences): ``{name: (B,)}``."""
        rows = torch.arange(raw.shape[0], device=raw.device)
        last = lengths.to(raw.device).long()
        return {name: value[rows, last] for name, value in self.decide(raw, lengths).items()}

    @torch.no_grad()
    def run(
        self,
        inputs: Sequence[Sequence[str]],
        on_overlength: str = "error",
        values: Sequence[np.ndarray[Any, Any]] | None = None,
    ) -> dict[str, Tensor]:
        """Decided outputs ``{name: (B, T)}`` for token sequences, like the numpy ``run``
        (``on_overlength``: ``"error"``, ``"warn"`` or ``"ignore"``; ``values``: numeric
        inputs). On the CPU, a run whose estimated memory exceeds the memory budget
        (:mod:`crasp_compiler.runtime.memory`) is refused before the pass."""
        if on_overlength not in ("error", "warn", "ignore"):
            raise ValueError(f"on_overlength must be error, warn or ignore, not {on_overlength!r}")
        ids, lengths = self.encode(inputs)
        longest = int(lengths.max()) if len(lengths) else 0
        dtype = str(self.embed.w_e.dtype).removeprefix("torch.")
        problems = [self.guarantee.length_problem(longest, dtype)]
        numeric = None
        if self.numeric is not None:
            numeric = self.encode_values(values, lengths)
            problems += self.guarantee.input_problems(
                self.numeric.names, numeric.cpu().numpy(), lengths.cpu().numpy()
            )
        beyond_guarantee([p for p in problems if p], on_overlength)
        if self.embed.w_e.device.type == "cpu":
            channels = 0 if self.numeric is None else len(self.numeric.names)
            require_forward_memory(
                len(self.residual),
                channels,
                self.layer_shapes(),
                ids.shape[0],
                ids.shape[1],
                self.embed.w_e.element_size(),
                fused=True,
                planned=None if self._lowered is None else len(self.output_names),
            )
        return self.decide(self(ids, lengths, numeric), lengths)

    def layer_shapes(self) -> list[LayerShape]:
        """The layers as :func:`~crasp_compiler.runtime.memory.forward_bytes` reads them."""
        return [
            (
                block.attn.head_list(),
                0 if block.mlp is None else block.mlp.w1.shape[0],
                block.mlp is not None and bool(block.mlp.norm_groups),
            )
            for block in self.layers()
        ]

    # ------------------------------------------------------------------ conversion

    def to_model(self) -> Model:
        """The current weights as a :class:`Model` (for saving or the numpy executor);
        every head records the kind its weights bear out."""

        def array(p: Tensor) -> np.ndarray[Any, np.dtype[np.float64]]:
            out: np.ndarray[Any, np.dtype[np.float64]] = (
                p.detach().to("cpu", torch.float64).numpy().copy()
            )
            return out

        def weight(w: Weight) -> Matrix:
            """A matrix kept sparse goes back as scipy CSR."""
            return w.to_scipy() if isinstance(w, SparseWeight) else array(w)

        layers = []
        for block, attention in zip(self.layers(), self.head_rows(), strict=True):
            heads = []
            for h in attention:
                heads.append(
                    Head(
                        weight(h.w_q),
                        weight(h.w_k),
                        weight(h.w_v),
                        weight(h.w_o),
                        h.scale,
                        dict(h.bias),
                        h.weighting,
                        h.mask,
                        h.label,
                    )
                )
            mlp = None
            if block.mlp is not None:
                m = block.mlp
                mlp = MLP(
                    weight(m.w1),
                    array(m.b1),
                    weight(m.w2),
                    array(m.b2),
                    list(m.activations),
                    list(m.labels),
                    [list(g) for g in m.norm_groups],
                )
            layers.append(Layer(heads, mlp))
        readout = array(self.readout.weight)
        outputs = [
            Output(name, readout[k], rule)
            for k, (name, rule) in enumerate(zip(self.output_names, self.output_rules, strict=True))
        ]
        return with_kinds(
            Model(
                vocab=list(self.vocab),
                w_e=array(self.embed.w_e),
                features=list(self.pos.names),
                w_p=weight(self.pos.w_p),
                inputs=list(self.numeric.names) if self.numeric is not None else [],
                w_x=array(self.numeric.w_x) if self.numeric is not None else None,
                layers=layers,
                outputs=outputs,
                residual=list(self.residual),
                occupants=self.occupants,
                guarantee=copy.deepcopy(self.guarantee),
                accept=self.accept,
                options=dict(self.options),
                source=self.source,
                info=dict(self.info),
                provenance=self.provenance,
            )
        )
