"""Positional features against their definitions (crasp_compiler/model/features.py)."""

from __future__ import annotations

import numpy as np
import pytest

from crasp_compiler.model.features import (
    almost_orthogonal,
    ao_signs,
    check_feature,
    feature_matrix,
    feature_table,
    onehot,
    periodic,
)
from crasp_compiler.runtime.backend import NUMPY
from tests.support.reference_model import feature_value

DEFINED = [
    "index",
    "index^2",
    "inverse",
    "alternating",
    onehot(0),
    onehot(3),
    periodic(1, 0),
    periodic(3, 2),
]


@pytest.mark.parametrize("name", DEFINED)
def test_features_match_their_definitions(name):
    table = feature_matrix([name], 40)
    want = [feature_value(name, t) for t in range(40)]
    np.testing.assert_array_equal(table[:, 0], want)


def test_definitions_spelled_out():
    t = np.arange(6)
    table = feature_matrix(["index", "index^2", "inverse", "alternating", "onehot:2"], 6)
    np.testing.assert_array_equal(table[:, 0], t)
    np.testing.assert_array_equal(table[:, 1], t * t)
    np.testing.assert_array_equal(table[:, 2], 1 / (t + 1))
    np.testing.assert_array_equal(table[:, 3], [1, -1, 1, -1, 1, -1])
    np.testing.assert_array_equal(table[:, 4], [0, 0, 1, 0, 0, 0])


def test_almost_orthogonal_vectors_are_fixed_signs_over_root_m():
    """The hash is part of the file format: these signs must never change."""
    names = [almost_orthogonal(0, 16, k) for k in range(4)]
    table = feature_matrix(names, 6)
    assert set(np.unique(np.abs(table))) == {0.25}
    assert (np.sign(table)).astype(int).tolist() == [
        [-1, 1, -1, 1],
        [1, 1, -1, -1],
        [-1, 1, 1, -1],
        [-1, 1, -1, -1],
        [1, -1, -1, -1],
        [-1, 1, -1, 1],
    ]


def test_almost_orthogonal_shift_reads_another_position():
    base = feature_matrix([almost_orthogonal(7, 32, 5)], 30)[:, 0]
    back = feature_matrix([almost_orthogonal(7, 32, 5, shift=-1)], 30)[:, 0]
    ahead = feature_matrix([almost_orthogonal(7, 32, 5, shift=2)], 30)[:, 0]
    np.testing.assert_array_equal(back[1:], base[:-1])
    np.testing.assert_array_equal(ahead[:-2], base[2:])


def test_almost_orthogonal_vectors_are_nearly_orthogonal():
    """With m = 256 the 64 vectors of positions 0..63 have unit norm and small overlaps."""
    m = 256
    vectors = feature_matrix([almost_orthogonal(1, m, k) for k in range(m)], 64)
    gram = vectors @ vectors.T
    np.testing.assert_allclose(np.diag(gram), 1.0)
    off = np.abs(gram - np.eye(64))
    assert off.max() <= 0.35
    assert off.mean() < 0.1
    # different seeds give different vectors
    other = feature_matrix([almost_orthogonal(2, m, k) for k in range(m)], 64)
    assert not np.array_equal(vectors, other)


@pytest.mark.parametrize(
    "name",
    ["periodic:0:0", "periodic:3:3", "onehot:-1", "ao:0:4:4:0", "ao:0:4:1", "indexx", "sin:1"],
)
def test_malformed_features_are_refused(name):
    with pytest.raises(ValueError, match="unknown positional feature"):
        check_feature(name)


def test_periodic_features_take_their_value_at_position_minus_one_on_bos():
    """BOS (t = 0) is the empty prefix, position −1: ``periodic:m:r`` is 1 there iff
    r = m − 1, as the interpreter's predicates are, so the feature is periodic in t."""
    table = feature_matrix([periodic(2, 1), periodic(2, 0), periodic(3, 2)], 7)
    assert table[:, 0].tolist() == [1, 0, 1, 0, 1, 0, 1]
    assert table[:, 1].tolist() == [0, 1, 0, 1, 0, 1, 0]
    assert table[:, 2].tolist() == [1, 0, 0, 1, 0, 0, 1]


# ---------------------------------------------------------------- one definition, every library

EVERY_KIND = [
    *DEFINED,
    "onehot:12",
    periodic(5, 0),
    almost_orthogonal(0, 16, 3),
    almost_orthogonal(7, 32, 5, shift=-40),
    almost_orthogonal(2**63 - 1, 64, 63, shift=2**31 - 1),
    almost_orthogonal(123456789, 8, 0, shift=-(2**31 - 1)),
]


def test_ao_hash_on_limbs_is_the_uint64_hash():
    """The runtimes' limb arithmetic computes :func:`ao_signs` (numpy uint64) exactly, at
    negative positions and at the extremes of seeds and shifts too."""
    rng = np.random.default_rng(0)
    positions = np.concatenate(
        [np.arange(-300, 300), rng.integers(-(2**33), 2**33, 3000), [-(2**31), 2**32 - 1]]
    )
    for seed in (0, 1, 7, 2**40 + 3, 2**63 - 1):
        for component in (0, 5, 2**31 - 2):
            dim = 2**31 - 1
            want = ao_signs(seed, dim, component, positions)
            got = feature_table([almost_orthogonal(seed, dim, component)], positions, NUMPY)
            np.testing.assert_array_equal(got[:, 0], want)


def test_feature_table_in_torch_equals_numpy():
    """The features a torch module computes on its device (no numpy) equal the numpy table
    bit for bit."""
    torch = pytest.importorskip("torch")
    from crasp_compiler.runtime.torch_module import TORCH

    want = feature_matrix(EVERY_KIND, 300)
    got = feature_table(EVERY_KIND, torch.arange(300), TORCH)
    assert got.dtype == torch.float64
    np.testing.assert_array_equal(got.numpy(), want)
    assert tuple(feature_table([], torch.arange(4), TORCH).shape) == (4, 0)
