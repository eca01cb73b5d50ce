"""Attention constructions (Transformer Cookbook §5): uniform averages and offset lookup."""

from __future__ import annotations

import math

from crasp_compiler.cookbook.blocks import Exactness, Form, HeadBlock


def causal_average(value: Form, out: str, label: str = "") -> HeadBlock:
    """Uniform causal attention: ``out_t = (1/(t+1)) Σ_{s ≤ t} value_s`` (Q = K = 0).

    With BOS at s = 0 and a value that is 0 there, a {0,1} value gives ``count/(t+1)``;
    the BOS indicator as value gives ``1/(t+1)``. Exact at every length.
    """
    return HeadBlock([], [], {out: value}, Exactness("exact at every length"), label=label)


def offset_lookup(
    value: Form, offset: int, out: str, one: Form, bos: str, label: str = ""
) -> HeadBlock:
    """Read ``value`` at position ``t − offset`` with average-hard attention.

    Scores: ``bias(t − s) = 2·[t − s = offset]`` plus ``1`` on the BOS key (query form
    ``one`` is 1 everywhere). If ``t ≥ offset`` the key ``t − offset`` wins alone;
    otherwise BOS wins, so the head reads BOS's value (0 for Booleans). Exact at every
    length.
    """
    return HeadBlock(
        [one],
        [{bos: 1.0}],
        {out: value},
        Exactness("exact at every length (average-hard attention)"),
        bias={offset: 2.0},
        weighting="hard",
        label=label,
    )


def soft_offset_lookup(
    value: Form, offset: int, out: str, one: Form, bos: str, max_len: int, label: str = ""
) -> HeadBlock:
    """``offset_lookup`` with softmax: scores ``λ·(2·[t − s = offset] + [s = BOS])``.

    With ``e^λ = 4(N + 1)`` and t ≤ N, the winning key (``t − offset``, or BOS when
    ``t < offset``) carries weight ≥ 3/4, so for a {0,1} value that is 0 at BOS the output
    is ≥ 3/4 when the looked-up value is 1 and ≤ 1/4 when it is 0. Follow with
    :func:`crasp_compiler.cookbook.ffn.soft_gate`. Exact (after the gate) for lengths ≤ N.
    """
    scale = math.log(4 * (max_len + 1))
    return HeadBlock(
        [one],
        [{bos: 1.0}],
        {out: value},
        Exactness(
            f"output within 1/4 of the {{0,1}} value for lengths <= {max_len} (softmax)",
            max_len=max_len,
        ),
        bias={offset: 2.0 * scale},
        weighting="softmax",
        scale=scale,
        label=label,
    )
