"""Positional features: named, deterministic functions of the position t (BOS at t = 0).

A feature name encodes its parameters, so a model file needs only the list of names:

- ``periodic:m:r`` — ``1`` iff ``t >= 1`` and ``(t - 1) mod m == r`` (token position
  ``i = t - 1``); 0 at BOS so that positional Booleans never count BOS.
"""

from __future__ import annotations

import re

import numpy as np

_PERIODIC = re.compile(r"^periodic:(\d+):(\d+)$")


def periodic(modulus: int, residue: int) -> str:
    return f"periodic:{modulus}:{residue}"


def check_feature(name: str) -> None:
    """Raise ValueError for an unknown or malformed feature name."""
    match = _PERIODIC.match(name)
    if match and int(match[1]) >= 1 and int(match[2]) < int(match[1]):
        return
    raise ValueError(f"unknown positional feature {name!r}")


def feature_matrix(names: list[str], length: int) -> np.ndarray:
    """Values of the features at positions t = 0..length-1, shape (length, len(names))."""
    t = np.arange(length)
    out = np.zeros((length, len(names)))
    for column, name in enumerate(names):
        check_feature(name)
        match = _PERIODIC.match(name)
        assert match is not None
        m, r = int(match[1]), int(match[2])
        out[:, column] = (t >= 1) & ((t - 1) % m == r)
    return out
