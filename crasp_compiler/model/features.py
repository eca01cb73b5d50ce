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
"""

from __future__ import annotations

import re

import numpy as np

_PERIODIC = re.compile(r"^periodic:(\d+):(\d+)$")
_ONEHOT = re.compile(r"^onehot:(\d+)$")
_AO = re.compile(r"^ao:(\d+):(\d+):(\d+):(-?\d+)$")
_SIMPLE = {
    "index": lambda t: t,
    "index^2": lambda t: t * t,
    "inverse": lambda t: 1.0 / (t + 1),
    "alternating": lambda t: np.where(t % 2 == 0, 1.0, -1.0),
}
_MASK64 = (1 << 64) - 1


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


def _mix(values: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser on uint64 arrays: a fixed, well-spread integer hash."""
    z = values.astype(np.uint64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def ao_signs(seed: int, dim: int, component: int, positions: np.ndarray) -> np.ndarray:
    """``±1/√dim``: component ``component`` of the almost-orthogonal vectors at
    ``positions`` (any integers; negative positions get vectors too)."""
    key = (seed * 1_000_003 + component * 7_919) & _MASK64
    words = (positions.astype(np.int64).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ (
        np.uint64(key)
    )
    with np.errstate(over="ignore"):
        bits = _mix(words) >> np.uint64(63)
    return np.where(bits == 1, 1.0, -1.0) / np.sqrt(dim)


def feature_matrix(names: list[str], length: int) -> np.ndarray:
    """Values of the features at positions t = 0..length-1, shape (length, len(names))."""
    t = np.arange(length)
    out = np.zeros((length, len(names)))
    for column, name in enumerate(names):
        check_feature(name)
        if name in _SIMPLE:
            out[:, column] = _SIMPLE[name](t.astype(np.float64))
        elif match := _PERIODIC.match(name):
            m, r = int(match[1]), int(match[2])
            out[:, column] = (t - 1) % m == r
        elif match := _ONEHOT.match(name):
            out[:, column] = t == int(match[1])
        elif match := _AO.match(name):
            seed, dim, component, shift = (int(g) for g in match.groups())
            out[:, column] = ao_signs(seed, dim, component, t + shift)
    return out
