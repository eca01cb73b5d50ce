"""The array shim the forward pass (:mod:`crasp_compiler.runtime.forward`) is written over.

A :class:`Backend` is the handful of operations the model family needs beyond Python's
operators (``+ - * / // % ^ & | ~``, comparisons and basic indexing, which numpy arrays
and torch tensors share: :class:`Array`): creating position ranges and zeros, casts,
``x @ W.T`` with a possibly-sparse ``W``, batched products, ``where``, ``exp``/``tanh``/
``sqrt``, reductions, cumulative sums, flips, concatenation and shifts. Two per-backend
choices go beyond the common ground:

- :meth:`Backend.matmul_t` takes the weight-matrix type of the backend: numpy's accepts
  ``scipy.sparse.csr_array`` weights (compiled models are mostly zeros), torch's its
  :class:`~crasp_compiler.runtime.torch_module.SparseWeight` (stored entries as buffers,
  summed in scipy's order), and so do :meth:`Backend.nonzero` and :meth:`Backend.entry`;
- :attr:`Backend.fused_attention` / :meth:`Backend.causal_softmax`: torch runs causal
  softmax heads without bias through ``scaled_dot_product_attention`` (fused kernels, no
  T × T matrix); numpy has no such kernel.

:data:`NUMPY` is the numpy backend; the torch one lives with the torch module
(:mod:`crasp_compiler.runtime.torch_module`), so that the numpy executor never imports
torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol, Self, TypeVar

import numpy as np
from numpy.typing import NDArray

from crasp_compiler.model.model import Matrix, matmul_t


class Array(Protocol):
    """The operators the forward pass applies to arrays directly."""

    @property
    def shape(self) -> Sequence[int]: ...
    def __getitem__(self, key: Any, /) -> Self: ...
    def __add__(self, other: Any, /) -> Self: ...
    def __radd__(self, other: Any, /) -> Self: ...
    def __sub__(self, other: Any, /) -> Self: ...
    def __rsub__(self, other: Any, /) -> Self: ...
    def __mul__(self, other: Any, /) -> Self: ...
    def __rmul__(self, other: Any, /) -> Self: ...
    def __truediv__(self, other: Any, /) -> Self: ...
    def __rtruediv__(self, other: Any, /) -> Self: ...
    def __floordiv__(self, other: Any, /) -> Self: ...
    def __mod__(self, other: Any, /) -> Self: ...
    def __neg__(self) -> Self: ...
    def __lt__(self, other: Any, /) -> Self: ...
    def __le__(self, other: Any, /) -> Self: ...
    def __gt__(self, other: Any, /) -> Self: ...
    def __ge__(self, other: Any, /) -> Self: ...
    def __and__(self, other: Any, /) -> Self: ...
    def __or__(self, other: Any, /) -> Self: ...
    def __xor__(self, other: Any, /) -> Self: ...
    def __invert__(self) -> Self: ...


A = TypeVar("A", bound=Array)
W_contra = TypeVar("W_contra", contravariant=True)


class Backend(Protocol[A, W_contra]):
    """Array operations over arrays ``A`` and weight matrices ``W`` (module docstring).
    ``like`` arguments give the dtype and device of a new array; ``axis`` counts from the
    end when negative."""

    name: str
    fused_attention: bool

    def tracing(self) -> bool:
        """Whether the forward pass is being traced (torch.compile, torch.export): chunking
        loops that depend on the length are then avoided."""
        ...

    def accelerated(self, like: A) -> bool:
        """Whether ``like`` lives on an accelerator (a GPU), where every operation is a
        kernel launch: passes chunked over positions for the CPU's cache then take far
        larger chunks, so that launches stay few."""
        ...

    # ---------------------------------------------------------------- creation and types

    def arange(self, n: int, like: A) -> A:
        """``0, 1, …, n − 1`` as int64, on ``like``'s device."""
        ...

    def zeros(self, shape: tuple[int, ...], like: A) -> A: ...

    def select(self, cond: A, a: float, b: float, like: A) -> A:
        """``a`` where ``cond``, else ``b``, in ``like``'s dtype (exact constants)."""
        ...

    def scalar(self, value: float, like: A) -> A | float:
        """``value`` as an operand of arithmetic with ``like``: the number itself, or,
        while traced, a 0-d array of ``like``'s dtype (graph exporters may store Python
        numbers in float32)."""
        ...

    def dtype_name(self, x: A) -> str:
        """``"float64"``, ``"float32"``, …"""
        ...

    def to_float64(self, x: A) -> A: ...
    def to_int64(self, x: A) -> A: ...

    def cast(self, x: A, like: A) -> A:
        """``x`` in ``like``'s dtype."""
        ...

    def cast_for(self, x: A, w: W_contra) -> A:
        """``x`` in the dtype of weight matrix ``w``."""
        ...

    def equal(self, x: A, value: float) -> A:
        """``x == value``, elementwise (Boolean)."""
        ...

    # ---------------------------------------------------------------- linear algebra

    def matmul_t(self, x: A, w: W_contra) -> A:
        """``x @ w.T`` over the last axis of ``x``."""
        ...

    def matmul(self, a: A, b: A) -> A:
        """Batched ``a @ b``."""
        ...

    def swap_last(self, x: A) -> A:
        """``x`` with its last two axes swapped."""
        ...

    def take_rows(self, table: W_contra, ids: A) -> A:
        """``table[ids]``: rows of a dense weight matrix (an embedding lookup)."""
        ...

    def take_last(self, x: A, index: Sequence[int]) -> A:
        """``x[..., index]``."""
        ...

    def nonzero(self, w: W_contra | A) -> list[tuple[int, ...]]:
        """The indices of the nonzero entries of a weight matrix or vector, on the host, in
        increasing (row-major) order."""
        ...

    def entry(self, w: W_contra | A, index: tuple[int, ...]) -> A:
        """The entry ``w[index]`` as a 0-d array of ``w``'s dtype, on its device."""
        ...

    def add_column(self, x: A, column: int, value: A) -> None:
        """``x[..., column] += value``, in place (``value`` in ``x``'s dtype)."""
        ...

    def causal_softmax(self, q: A, k: A, v: A, scale: float) -> A:
        """Causal softmax attention ``(B, T, dv)`` with scores ``scale · q_t·k_s`` (only
        where :attr:`fused_attention`)."""
        ...

    # ---------------------------------------------------------------- elementwise

    def where(self, cond: A, a: A | float, b: A | float) -> A:
        """``a`` where ``cond``, else ``b`` (at least one of them an array)."""
        ...

    def exp(self, x: A) -> A: ...
    def tanh(self, x: A) -> A: ...
    def sqrt(self, x: A) -> A: ...
    def rint(self, x: A) -> A: ...
    def relu(self, x: A) -> A: ...
    def maximum(self, a: A, b: A) -> A: ...

    # ---------------------------------------------------------------- reductions, scans

    def amax(self, x: A, axis: int) -> A:
        """The maximum over ``axis``, kept as an axis of size 1."""
        ...

    def sum(self, x: A, axis: int) -> A:
        """The sum over ``axis``, kept as an axis of size 1."""
        ...

    def mean(self, x: A, axis: int) -> A:
        """The mean over ``axis``, kept as an axis of size 1."""
        ...

    def any(self, x: A, axis: int) -> A:
        """Whether any is true over ``axis``, kept as an axis of size 1."""
        ...

    def cumsum(self, x: A, axis: int) -> A: ...
    def flip(self, x: A, axis: int) -> A: ...
    def concat(self, xs: Sequence[A], axis: int) -> A: ...

    def shift(self, x: A, offset: int) -> A:
        """``y[:, t] = x[:, t − offset]`` along axis 1, zeros where ``t < offset``
        (``offset ≥ 0``; any length, also shorter than ``offset``)."""
        ...

    def stack_columns(self, columns: Sequence[A], rows: A) -> A:
        """Float64 columns side by side, ``(len(rows), len(columns))``."""
        ...

    # ---------------------------------------------------------------- lowered plans

    def dense(self, w: W_contra | A) -> A:
        """A weight matrix as a dense array of its dtype."""
        ...

    def gather(self, values: A, ids: A) -> A:
        """``values[ids]`` for a vector ``values``."""
        ...

    def stack_last(self, xs: Sequence[A]) -> A:
        """Arrays of one shape side by side along a new last axis."""
        ...

    def assign_last(self, out: A, start: int, value: A) -> None:
        """``out[..., start : start + n] = value`` for ``value``'s last axis of size n."""
        ...

    def move_first_last(self, x: A) -> A:
        """``x`` with its first axis moved last (a view)."""
        ...


NDAny = NDArray[Any]


class NumpyBackend:
    """:class:`Backend` over numpy arrays; weight matrices may be CSR sparse."""

    name = "numpy"
    fused_attention = False

    def tracing(self) -> bool:
        return False

    def accelerated(self, like: NDAny) -> bool:
        return False

    def arange(self, n: int, like: NDAny) -> NDAny:
        return np.arange(n, dtype=np.int64)

    def zeros(self, shape: tuple[int, ...], like: NDAny) -> NDAny:
        return np.zeros(shape, dtype=like.dtype)

    def select(self, cond: NDAny, a: float, b: float, like: NDAny) -> NDAny:
        return np.asarray(np.where(cond, like.dtype.type(a), like.dtype.type(b)))

    def scalar(self, value: float, like: NDAny) -> float:
        return value

    def dtype_name(self, x: NDAny) -> str:
        return str(x.dtype)

    def to_float64(self, x: NDAny) -> NDAny:
        return np.asarray(x, dtype=np.float64)

    def to_int64(self, x: NDAny) -> NDAny:
        return np.asarray(x, dtype=np.int64)

    def cast(self, x: NDAny, like: NDAny) -> NDAny:
        return x.astype(like.dtype, copy=False)

    def cast_for(self, x: NDAny, w: Matrix) -> NDAny:
        return x.astype(w.dtype, copy=False)

    def equal(self, x: NDAny, value: float) -> NDAny:
        return np.asarray(x == value)

    def matmul_t(self, x: NDAny, w: Matrix) -> NDAny:
        return matmul_t(x, w)

    def matmul(self, a: NDAny, b: NDAny) -> NDAny:
        return np.asarray(np.matmul(a, b))

    def swap_last(self, x: NDAny) -> NDAny:
        return np.swapaxes(x, -1, -2)

    def take_rows(self, table: Matrix, ids: NDAny) -> NDAny:
        return np.take(np.asarray(table), ids, axis=0)

    def take_last(self, x: NDAny, index: Sequence[int]) -> NDAny:
        return x[..., list(index)]

    def nonzero(self, w: Matrix | NDAny) -> list[tuple[int, ...]]:
        if isinstance(w, np.ndarray):
            return [tuple(int(i) for i in at) for at in np.argwhere(w != 0)]
        from scipy import sparse  # loaded already: the weight is sparse

        coo = sparse.coo_array(w)
        keep = coo.data != 0
        return sorted(zip(coo.row[keep].tolist(), coo.col[keep].tolist(), strict=True))

    def entry(self, w: Matrix | NDAny, index: tuple[int, ...]) -> NDAny:
        return np.asarray(w[index], dtype=w.dtype)

    def add_column(self, x: NDAny, column: int, value: NDAny) -> None:
        np.add(x[..., column], value, out=x[..., column])

    def causal_softmax(self, q: NDAny, k: NDAny, v: NDAny, scale: float) -> NDAny:
        raise NotImplementedError("the numpy backend has no fused attention")

    def where(self, cond: NDAny, a: NDAny | float, b: NDAny | float) -> NDAny:
        return np.where(cond, a, b)

    def exp(self, x: NDAny) -> NDAny:
        return np.exp(x)

    def tanh(self, x: NDAny) -> NDAny:
        return np.tanh(x)

    def sqrt(self, x: NDAny) -> NDAny:
        return np.sqrt(x)

    def rint(self, x: NDAny) -> NDAny:
        return np.rint(x)

    def relu(self, x: NDAny) -> NDAny:
        return np.maximum(x, 0)

    def maximum(self, a: NDAny, b: NDAny) -> NDAny:
        return np.maximum(a, b)

    def amax(self, x: NDAny, axis: int) -> NDAny:
        return np.asarray(np.max(x, axis=axis, keepdims=True))

    def sum(self, x: NDAny, axis: int) -> NDAny:
        return np.asarray(np.sum(x, axis=axis, keepdims=True))

    def mean(self, x: NDAny, axis: int) -> NDAny:
        return np.asarray(np.mean(x, axis=axis, keepdims=True))

    def any(self, x: NDAny, axis: int) -> NDAny:
        return np.asarray(np.any(x, axis=axis, keepdims=True))

    def cumsum(self, x: NDAny, axis: int) -> NDAny:
        return np.cumsum(x, axis=axis)

    def flip(self, x: NDAny, axis: int) -> NDAny:
        return np.flip(x, axis=axis)

    def concat(self, xs: Sequence[NDAny], axis: int) -> NDAny:
        return np.concatenate(list(xs), axis=axis)

    def shift(self, x: NDAny, offset: int) -> NDAny:
        out = np.zeros_like(x)
        size = x.shape[1]
        if offset < size:
            out[:, offset:] = x[:, : size - offset]
        return out

    def stack_columns(self, columns: Sequence[NDAny], rows: NDAny) -> NDAny:
        if not columns:
            return np.zeros((len(rows), 0))
        return np.stack(list(columns), axis=1)

    def dense(self, w: Matrix | NDAny) -> NDAny:
        return w if isinstance(w, np.ndarray) else np.asarray(w.toarray(), dtype=w.dtype)

    def gather(self, values: NDAny, ids: NDAny) -> NDAny:
        return np.take(values, ids)

    def stack_last(self, xs: Sequence[NDAny]) -> NDAny:
        return np.stack(list(xs), axis=-1)

    def assign_last(self, out: NDAny, start: int, value: NDAny) -> None:
        out[..., start : start + value.shape[-1]] = value

    def move_first_last(self, x: NDAny) -> NDAny:
        return np.moveaxis(x, 0, -1)


NUMPY = NumpyBackend()

NEG_INF = -math.inf
