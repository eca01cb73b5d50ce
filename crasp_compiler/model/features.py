"""Positional features: named, deterministic functions of the position t (BOS at t = 0).

Token i of the input sits at t = i, so the cookbook's position i is t. A feature name
encodes its parameters, so a model file needs only the list of names:

- ``periodic:m:r`` — ``1`` iff ``(t - 1) mod m == r``: token position ``i = t - 1``, and
  BOS is position −1, the empty prefix, where the feature takes its periodic value
  (1 iff ``r = m − 1``), as the interpreter's periodic predicates do. (Format version 1
  had 0 at BOS; :mod:`crasp_compiler.model.io` converts such files.)
- ``index`` — ``t``; ``index^2`` — ``t²``; ``inverse`` — ``1/(t + 1)``;
  ``alternating`` — ``(−1)^t``.
- ``onehot:k`` — ``1[t = k]``.
- ``ao:seed:m:k:shift`` — component k of the almost-orthogonal vector of position
  ``t + shift``: ``±1/√m`` with signs from a fixed integer hash of (seed, position, k), so
  every runtime and every numpy version computes the same vectors.

:func:`feature_table` computes the features with whatever array library a runtime uses
(numpy, or torch on the model's device inside ``forward``), through the three operations
of :class:`FeatureOps` and the operators both libraries share (``+ - * / // % ^`` on int64
positions), so that traced and exported graphs stay generic in the length. The
hash of ``ao`` features is computed on 16-bit limbs held in int64 there (no unsigned
64-bit arithmetic, which torch and ONNX lack); :func:`ao_signs` is the same hash in numpy
uint64, for compile-time use. :func:`feature_matrix` is the numpy table.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, Protocol, Self, TypeVar

import numpy as np
from numpy.typing import NDArray

_PERIODIC = re.compile(r"^periodic:(\d+):(\d+)$")
_ONEHOT = re.compile(r"^onehot:(\d+)$")
_AO = re.compile(r"^ao:(\d+):(\d+):(\d+):(-?\d+)$")
_SIMPLE = ("index", "index^2", "inverse", "alternating")
_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB)


def periodic(modulus: int, residue: int) -> str:
    return f"periodic:{modulus}:{residue}"


def onehot(position: int) -> str:
    return f"onehot:{position}"


def almost_orthogonal(seed: int, dim: int, component: int, shift: int = 0) -> str:
    return f"ao:{seed}:{dim}:{component}:{shift}"


def check_feature(name: str) -> None:
    """Raise ValueError for an unknown or malformed feature name. Its integers (positions,
    moduli, dimensions, shifts) are at most 2**31 - 1 in size, seeds at most 2**63 - 1:
    larger ones would overflow the runtimes' int64 position arithmetic."""
    if name in _SIMPLE:
        return
    match = _ONEHOT.match(name) or _PERIODIC.match(name) or _AO.match(name)
    if match is None:
        raise ValueError(f"unknown positional feature {name!r}")
    groups = match.groups()
    seed = match.re is _AO  # the first number of ao:seed:m:k:shift
    limits = [2**63 - 1] * seed + [2**31 - 1] * (len(groups) - seed)
    if any(len(g) > 20 or abs(int(g)) > top for g, top in zip(groups, limits, strict=True)):
        raise ValueError(
            f"positional feature {name!r} has a number too large (seeds up to 2**63 - 1, "
            "other numbers up to 2**31 - 1)"
        )
    numbers = [int(g) for g in groups]
    if (match.re is _PERIODIC and not 0 <= numbers[1] < numbers[0]) or (
        seed and not numbers[2] < numbers[1]
    ):
        raise ValueError(f"unknown positional feature {name!r}")


def zero_at_tokens(name: str) -> bool:
    """Whether feature ``name`` is 0 at every token position (t ≥ 1): only ``onehot:0``."""
    return name == onehot(0)


def _mix(values: NDArray[Any]) -> NDArray[np.uint64]:
    """The splitmix64 finaliser on uint64 arrays: a fixed, well-spread integer hash."""
    z = values.astype(np.uint64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def ao_signs(seed: int, dim: int, component: int, positions: NDArray[Any]) -> NDArray[np.float64]:
    """``±1/√dim``: component ``component`` of the almost-orthogonal vectors at
    ``positions`` (any integers; negative positions get vectors too)."""
    key = (seed * 1_000_003 + component * 7_919) & _MASK64
    words = (positions.astype(np.int64).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ (
        np.uint64(key)
    )
    with np.errstate(over="ignore"):
        bits = _mix(words) >> np.uint64(63)
    signs: NDArray[np.float64] = np.where(bits == 1, 1.0, -1.0) / np.sqrt(dim)
    return signs


class Numbers(Protocol):
    """The operators :func:`feature_table` applies to arrays (numpy arrays and torch
    tensors have them)."""

    def __add__(self, other: Any, /) -> Self: ...
    def __sub__(self, other: Any, /) -> Self: ...
    def __mul__(self, other: Any, /) -> Self: ...
    def __truediv__(self, other: Any, /) -> Self: ...
    def __rtruediv__(self, other: Any, /) -> Self: ...
    def __floordiv__(self, other: Any, /) -> Self: ...
    def __mod__(self, other: Any, /) -> Self: ...
    def __xor__(self, other: Any, /) -> Self: ...


A = TypeVar("A", bound=Numbers)


class FeatureOps(Protocol[A]):
    """What :func:`feature_table` needs besides operators (the runtimes' array shims,
    :mod:`crasp_compiler.runtime.backend`, provide it)."""

    def to_float64(self, x: A) -> A:
        """``x`` (integers or Booleans) as float64."""
        ...

    def equal(self, x: A, value: int) -> A:
        """``x == value``, elementwise."""
        ...

    def stack_columns(self, columns: Sequence[A], rows: A) -> A:
        """The float64 columns side by side, shape ``(len(rows), len(columns))`` (the
        rows of an empty table follow ``rows``)."""
        ...

    def scalar(self, value: float, like: A) -> A | float:
        """``value`` as an operand of arithmetic with ``like`` (exact when traced)."""
        ...


class _NumpyFeatures:
    def to_float64(self, x: NDArray[Any]) -> NDArray[Any]:
        return x.astype(np.float64)

    def equal(self, x: NDArray[Any], value: int) -> NDArray[Any]:
        return np.asarray(x == value)

    def stack_columns(self, columns: Sequence[NDArray[Any]], rows: NDArray[Any]) -> NDArray[Any]:
        if not columns:
            return np.zeros((len(rows), 0))
        return np.stack(columns, axis=1)

    def scalar(self, value: float, like: NDArray[Any]) -> float:
        return value


def feature_matrix(names: list[str], length: int) -> NDArray[np.float64]:
    """Values of the features at positions t = 0..length-1, shape (length, len(names))."""
    positions: NDArray[Any] = np.arange(length)
    out: NDArray[np.float64] = feature_table(names, positions, _NumpyFeatures())
    return out


def feature_table(names: Sequence[str], t: A, ops: FeatureOps[A]) -> A:
    """Values of the features at the int64 positions ``t`` (BOS is 0), float64, shape
    ``(len(t), len(names))``, computed with the array library of ``t``."""
    columns = []
    for name in names:
        check_feature(name)
        columns.append(_feature(name, t, ops))
    return ops.stack_columns(columns, t)


def _feature(name: str, t: A, ops: FeatureOps[A]) -> A:
    if name == "index":
        return ops.to_float64(t)
    if name == "index^2":
        return ops.to_float64(t) * ops.to_float64(t)
    if name == "inverse":
        return 1.0 / (ops.to_float64(t) + 1.0)
    if name == "alternating":
        return ops.to_float64(t % 2) * -2.0 + 1.0
    if match := _PERIODIC.match(name):
        m, r = int(match[1]), int(match[2])
        return ops.to_float64(ops.equal((t - 1) % m, r))
    if match := _ONEHOT.match(name):
        return ops.to_float64(ops.equal(t, int(match[1])))
    match = _AO.match(name)
    assert match is not None  # check_feature accepted it
    seed, dim, component, shift = (int(g) for g in match.groups())
    sign = ops.to_float64(_ao_bit(seed, component, t + shift)) * 2.0 - 1.0
    return sign / ops.scalar(math.sqrt(dim), like=sign)


# ---------------------------------------------------------------- the ao hash on limbs
#
# A 64-bit word is four int64 arrays of 16-bit limbs, least significant first; every
# intermediate stays below 2**36, so nothing overflows and only operators that numpy,
# torch and ONNX agree on are used (floor division and modulo by powers of two, products
# of 16-bit numbers, xor).

_LIMB = 1 << 16


def _limbs(value: int) -> list[int]:
    return [(value >> (16 * i)) & (_LIMB - 1) for i in range(4)]


def _word(positions: A) -> list[A]:
    """The two's-complement word of int64 ``positions`` (floor division keeps negative
    numbers right)."""
    limbs = []
    rest = positions
    for _ in range(4):
        limb = rest % _LIMB
        limbs.append(limb)
        rest = (rest - limb) // _LIMB  # an exact division: floor and truncation agree
    return limbs


def _times(word: list[A], constant: int) -> list[A]:
    """``word · constant`` mod 2**64."""
    c = _limbs(constant)
    out: list[A] = []
    carry: A | int = 0
    for k in range(4):
        total = carry
        for i in range(k + 1):
            if c[k - i]:
                total = word[i] * c[k - i] + total
        if isinstance(total, int):  # every product was 0: the limb is 0
            total = word[0] * 0 + total
        out.append(total % _LIMB)
        carry = total // _LIMB
    return out


def _xor_shifted(word: list[A], shift: int) -> list[A]:
    """``word ^ (word >> shift)`` (a logical shift, 0 < shift < 64)."""
    whole, part = divmod(shift, 16)
    out = []
    for i in range(4):
        low = word[i + whole] // (1 << part) if i + whole < 4 else None
        high = (
            (word[i + whole + 1] % (1 << part)) * (1 << (16 - part))
            if part and i + whole + 1 < 4
            else None
        )
        if low is None and high is None:
            out.append(word[i])
            continue
        shifted = low if high is None else high if low is None else low + high
        out.append(word[i] ^ shifted)
    return out


def _ao_bit(seed: int, component: int, positions: A) -> A:
    """The top bit (0 or 1, int64) of the splitmix64-mixed word of each position: the
    hash :func:`ao_signs` computes in uint64."""
    key = _limbs((seed * 1_000_003 + component * 7_919) & _MASK64)
    word = _times(_word(positions), _GOLDEN)
    word = [limb ^ k for limb, k in zip(word, key, strict=True)]
    word = _times(_xor_shifted(word, 30), _MIX[0])
    word = _times(_xor_shifted(word, 27), _MIX[1])
    word = _xor_shifted(word, 31)
    return word[3] // (1 << 15)
