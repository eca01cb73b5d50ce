"""Attention constructions (Transformer Cookbook, Table 2 and §5), as head blocks.

- trivial cases (§5.1): :func:`identity` (a head that returns each position's own value)
  and :func:`average` (Avg, Avg←; :func:`causal_average` is the compiler's name for it);
- :func:`first` (§5.2): the first position from the (−1)^t encoding and a comparator;
- index lookup (§5.3): :func:`lookup_onehot`, :func:`lookup_almost_orthogonal`,
  :func:`lookup_layernorm_hash`, :func:`lookup_quadratic`, with the helpers
  :func:`onehot_query`, :func:`ao_query`, :func:`ao_dim`, :func:`ao_overlap` and
  :func:`layernorm_hash_gap`;
- predecessor (§5.4): :func:`predecessor_alternating` (two rightmost-hard heads and a
  conditional) and :func:`predecessor_strict` (strict future mask); the compiler's
  :func:`offset_lookup` reads ``t − c`` with a bias, :func:`soft_offset_lookup` with
  softmax on the absolute positions of :func:`lookup_quadratic`;
- :func:`multi_head` (§5.5) and :func:`head_sum`;
- :func:`tie_break` (§5.6): average-hard attention acting as leftmost/rightmost
  unique-hard attention;
- :func:`sharpen` (§5.7, Lemma 5.3): a softmax head within a stated distance of a
  tieless average-hard head, for inputs up to a maximum length;
- :func:`route`: positional routing (PCOC communication, Back de Luca et al., Lemma B.2):
  every position reads a fixed source position, one-hot queries and keys.

Positions. The paper's positions i = 1..n are our tokens t = 1..n; our model adds BOS at
t = 0, which every causal row sees. Each docstring says what the construction reads at
BOS and at the first token. Scores are ``scale · q_t·k_s + bias(t − s)``; the positional
features (``index`` = t, ``index^2``, ``inverse`` = 1/(t+1), ``alternating`` = (−1)^t,
``onehot:k``, ``ao:…``) are residual variables named after the feature, so a builder
must declare the ones a block reads (``builder.feature(name)``) before adding it.
Constructions that need the constant 1 take it as ``one`` (``builder.one``).

Under hard weightings the runtimes count scores within 1e-9 (float64) of the row maximum
as maximal; a gap that is exact in real arithmetic must exceed that to be resolved.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from crasp_compiler.cookbook import ffn
from crasp_compiler.cookbook.blocks import (
    Block,
    Exactness,
    Form,
    HeadBlock,
    as_form,
    form_add,
    output_name,
    var,
)
from crasp_compiler.model.features import almost_orthogonal, ao_signs, onehot
from crasp_compiler.model.model import MASKS

HARD = ("hard", "hard-left", "hard-right")
UNIFORM = ("softmax", "hard")  # weightings under which zero scores give the uniform average
EVERY_LENGTH = Exactness("exact at every length")


# ---------------------------------------------------------------------------- helpers


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, not {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, not {value!r}")
    return float(value)


def _length(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer ≥ 1, not {value!r}")
    return value


def _choice(name: str, value: str, allowed: Sequence[str], hint: str = "") -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {tuple(allowed)}, not {value!r}{hint}")
    return value


_SHARPEN_HINT = " (for softmax, wrap the average-hard head with sharpen())"


def _hard(weighting: str) -> str:
    return _choice("weighting", weighting, HARD, _SHARPEN_HINT if weighting == "softmax" else "")


# ---------------------------------------------------------------------------- §5.1


def identity(x: Form, out: str, *, weighting: str = "hard", label: str = "") -> HeadBlock:
    """A head that returns each position's own value: ``out_t = x_t`` (§5.1.1).

    No query or key; the score is the bias ``bias(t − s) = 1[s = t]``, so position t is the
    unique maximum of its causal row with gap 1, under every hard weighting (``hard``,
    ``hard-left``, ``hard-right``); BOS reads its own value. Exact at every length; 1 head.

    The paper's identity is the residual connection with a zero head; over named
    variables that is just reading the form ``x`` (no block). This head is for when a
    head must produce ``x`` (one of the heads of :func:`multi_head`, a copy into a fresh
    variable). Softmax: ``sharpen(identity(x, out), gap=1, max_len=N)``.
    """
    return HeadBlock(
        [],
        [],
        {output_name(out): as_form(x)},
        Exactness("exact at every length (own position, score gap 1)"),
        bias={0: 1.0},
        weighting=_hard(weighting),
        label=label,
    )


def average(
    value: Form,
    out: str,
    *,
    mask: str = "causal",
    weighting: str = "softmax",
    label: str = "",
) -> HeadBlock:
    """Uniform attention (Avg, Avg←, §5.1.2): all scores 0 (no query, no key).

    ``out_t`` is the mean of ``value`` over the keys the mask allows: with ``causal``
    (Avg←) ``(1/(t+1)) Σ_{s=0..t} value_s``; with ``none`` (Avg)
    ``(1/(n+1)) Σ_{s=0..n} value_s`` at every t; ``strict`` averages s < t (BOS reads 0),
    ``past`` / ``strict-past`` the keys s ≥ t / s > t (the last position reads 0 under
    ``strict-past``). Softmax and average-hard weightings give the same weights.

    BOS is one of the averaged positions: a value that is 0 at BOS gives
    ``(Σ over tokens)/(t+1)`` — ``count/(t+1)`` for a {0,1} value, ``1/(t+1)`` for the
    BOS indicator — and the paper's token average ``(1/t) Σ_{s=1..t} value_s`` is
    ``out·(t+1)/t``. At BOS the causal average is the BOS value itself. Exact at every
    length; 1 head.
    """
    _choice("mask", mask, MASKS)
    _choice("weighting", weighting, UNIFORM, " (zero scores pick one key under unique-hard)")
    return HeadBlock(
        [],
        [],
        {output_name(out): as_form(value)},
        EVERY_LENGTH,
        weighting=weighting,
        mask=mask,
        label=label,
    )


def causal_average(value: Form, out: str, label: str = "") -> HeadBlock:
    """``out_t = (1/(t+1)) Σ_{s ≤ t} value_s``: :func:`average` with the causal mask and
    softmax weighting (the C-RASP compiler's counts). Exact at every length."""
    return average(value, out, label=label)


# ---------------------------------------------------------------------------- §5.2


def first(
    alternating: Form,
    out: str,
    *,
    one: Form,
    mask: str = "strict",
    weighting: str = "softmax",
    label: str = "",
) -> list[Block]:
    """The *first* predicate from the positional encoding (−1)^t (§5.2): a uniform head
    and the comparator ``GTZero``; ``alternating`` is the form of (−1)^t.

    The paper's row i averages the value ``−(−1)^j`` over positions j = 1..i (value
    matrix −I): ``c_i`` is 1 at i = 1 and at most 1/3 after. Our rows also see BOS
    (t = 0, where (−1)^t = 1), so we average ``(−1)^s`` instead:

    - ``mask="strict"`` (default) marks the **first token** t = 1: row t averages
      (−1)^s over s = 0..t−1, which is the paper's ``c_i`` at i = t (s = j − 1):
      ``c_t = 1/t`` for odd t and 0 for even t, so c = 1 at t = 1 and ``c ≤ 1/3`` at
      t ≥ 2; the BOS row (no key) reads 0;
    - ``mask="causal"`` marks **BOS** (t = 0), the first position of our sequences:
      ``c_t = (1/(t+1)) Σ_{s≤t} (−1)^s`` is 1 at t = 0 and ≤ 1/3 after.

    Then ``out = GTZero_{1/4}(c − 1/2)`` (:func:`crasp_compiler.cookbook.ffn.gt_zero`),
    with margins 1/4 above and 1/6 below (the paper's ``GTZero_{1/3}(c − 1/3)`` is
    exact too, but with no margin at c = 1/3).

    In our family the trivial alternatives need no head: BOS is the ``bos`` variable, and
    the first token is ``bos`` read at offset 1 (:func:`offset_lookup`). This
    construction is for models that cannot tell BOS apart (it reads only (−1)^t).
    Weighting ``softmax`` or ``hard`` (uniform either way; Table 2 also lists
    unique-hard, but zero scores then select a single key, not an average, and §5.2
    gives no unique-hard variant). Exact at every length;
    1 head (output ``out + ".avg"``) then 2 hidden units; 1 layer.
    """
    _choice("mask", mask, ("strict", "causal"))
    out = output_name(out)
    head = average(alternating, f"{out}.avg", mask=mask, weighting=weighting, label=label)
    where = "the first token (t = 1)" if mask == "strict" else "BOS (t = 0)"
    head.exact = Exactness(f"exact at every length: 1 at {where}, ≤ 1/3 elsewhere")
    compare = ffn.gt_zero(
        form_add((1, var(f"{out}.avg")), (-0.5, one)), out, tolerance=0.25, label=label
    )
    return [head, compare]


# ---------------------------------------------------------------------------- §5.3


def onehot_query(offset: int, max_len: int) -> list[Form]:
    """The one-hot query of the positional lookup ``q_t = t − offset`` for
    :func:`lookup_onehot` over positions 0..``max_len``: component k is the feature
    ``onehot:(k + offset)`` (1 iff t − offset = k); components past ``max_len`` are 0."""
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be an integer ≥ 0, not {offset!r}")
    _length("max_len", max_len)
    return [
        var(onehot(k + offset)) if k + offset <= max_len else Form() for k in range(max_len + 1)
    ]


def lookup_onehot(
    query: Sequence[Form], value: Form, out: str, *, weighting: str = "hard", label: str = ""
) -> HeadBlock:
    """One-hot index lookup (§5.3.1): ``out_t = value_{q_t}``.

    ``query[k]`` is the form of ``1[q_t = k]`` for positions k = 0..N (N =
    ``len(query) − 1``; k = 0 is BOS); keys are the features ``onehot:k``. The score
    ``e_{q_t}·e_s = 1[s = q_t]`` is maximal only at s = q_t, gap 1 (every other key,
    BOS included unless q_t = 0, and positions beyond N score 0). Exact for ``q_t ∈ {0..min(t, N)}``, hence for inputs of length
    ≤ N, under ``hard``, ``hard-left`` and ``hard-right``; softmax through
    :func:`sharpen` with gap 1. Width: N + 1 query/key dimensions; 1 head.
    """
    if len(query) < 2:
        raise ValueError("lookup_onehot needs a query of at least 2 components (positions 0..N)")
    n = len(query) - 1
    return HeadBlock(
        [as_form(q) for q in query],
        [var(onehot(k)) for k in range(n + 1)],
        {output_name(out): as_form(value)},
        Exactness(f"exact for inputs of length <= {n} (one-hot lookup, gap 1)", max_len=n),
        weighting=_hard(weighting),
        label=label,
    )


def _ao_signs(seed: int, dim: int, max_len: int) -> np.ndarray:
    """±1 signs of the vectors of positions 0..max_len, shape (max_len + 1, dim)."""
    positions = np.arange(max_len + 1)
    return np.stack([ao_signs(seed, 1, k, positions) for k in range(dim)], axis=1)


def ao_overlap(seed: int, dim: int, max_len: int) -> float:
    """``max |x_i·x_j|`` over positions ``0 ≤ i < j ≤ max_len`` of the almost-orthogonal
    vectors (features ``ao:seed:dim:k:0``); ``x_i·x_i = 1`` always."""
    signs = _ao_signs(seed, _length("dim", dim), _length("max_len", max_len)).astype(np.int64)
    gram = signs @ signs.T
    np.fill_diagonal(gram, 0)
    return float(np.abs(gram).max()) / dim


def ao_dim(max_len: int, seed: int = 0, *, eps: float = 0.25, limit: int = 4096) -> int:
    """The smallest dimension m for which the fixed hash's vectors of positions
    0..``max_len`` are ε-almost orthogonal (``|x_i·x_j| ≤ ε`` for i ≠ j; eq. 37).

    The paper's sufficient choice for random vectors is ``m = ⌈12k/ε² · log(2N)⌉`` with
    failure probability ``N^{−k}`` (eq. 38): 842 for N = 40, k = 1, ε = 1/4. The hash
    is fixed, so we check instead: about 160–230 for N = 40. ValueError past ``limit``.
    """
    _length("max_len", max_len)
    _positive("eps", eps)
    signs = _ao_signs(seed, limit, max_len).astype(np.int64)
    gram = np.zeros((max_len + 1, max_len + 1), dtype=np.int64)
    off = ~np.eye(max_len + 1, dtype=bool)
    for m in range(1, limit + 1):
        column = signs[:, m - 1]
        gram += np.outer(column, column)
        if np.abs(gram[off]).max() <= eps * m:
            return m
    raise ValueError(f"no dimension up to {limit} is {eps}-almost orthogonal for {max_len}")


def ao_query(offset: int, dim: int, seed: int = 0) -> list[Form]:
    """The query of the positional lookup ``q_t = t − offset`` for
    :func:`lookup_almost_orthogonal`: the features ``ao:seed:dim:k:−offset`` (the vector
    of position t − offset)."""
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be an integer ≥ 0, not {offset!r}")
    return [var(almost_orthogonal(seed, dim, k, -offset)) for k in range(_length("dim", dim))]


def lookup_almost_orthogonal(
    query: Sequence[Form],
    value: Form,
    out: str,
    *,
    max_len: int,
    seed: int = 0,
    weighting: str = "hard",
    label: str = "",
) -> HeadBlock:
    """Almost-orthogonal index lookup (§5.3.2): ``out_t = value_{q_t}``.

    ``query`` holds the m components of ``x_{q_t}``, the vector of position q_t (the
    features ``ao:seed:m:k:shift`` or values embedded with
    :func:`crasp_compiler.model.features.ao_signs`); keys are ``x_s`` (features
    ``ao:seed:m:k:0``). Checked here: the vectors of positions 0..N (N = ``max_len``)
    satisfy eq. 37 with ε = 1/4, ``|x_i·x_j| ≤ 1/4`` (i ≠ j), and ``x_i·x_i = 1``; so
    the score is 1 at s = q_t and at most 1/4 elsewhere: gap ≥ 3/4 (the paper's
    ``1 − 2ε = 1/2`` assumes only ``x·x ≥ 1 − ε``). ValueError when the check fails (it
    names the smallest m that works, :func:`ao_dim`). Exact for inputs of length ≤ N
    under ``hard``, ``hard-left``, ``hard-right``; softmax through :func:`sharpen` with
    gap 3/4. Width m (O(log N)); 1 head.
    """
    dim = len(query)
    if dim < 1:
        raise ValueError("lookup_almost_orthogonal needs a query of at least one component")
    _length("max_len", max_len)
    overlap = ao_overlap(seed, dim, max_len)
    if overlap > 0.25:
        raise ValueError(
            f"the almost-orthogonal vectors (seed {seed}, m = {dim}) overlap by {overlap:.3g}"
            f" > 1/4 for positions 0..{max_len}; m = {ao_dim(max_len, seed)} works"
        )
    text = (
        f"exact for inputs of length <= {max_len} (almost-orthogonal lookup, seed {seed}, "
        f"m = {dim}: overlap {overlap:.3g} <= 1/4, gap >= 3/4)"
    )
    return HeadBlock(
        [as_form(q) for q in query],
        [var(almost_orthogonal(seed, dim, k)) for k in range(dim)],
        {output_name(out): as_form(value)},
        Exactness(text, max_len=max_len),
        weighting=_hard(weighting),
        label=label,
    )


def layernorm_hash_gap(max_len: int) -> float:
    """The smallest score gap of :func:`lookup_layernorm_hash` over queries and keys in
    0..``max_len``: ``lh(q)·lh(j) = 4 cos θ`` with θ the angle between (q, 1) and (j, 1),
    smallest for the neighbours (N − 1, N): ``8 sin²(θ/2)``,
    ``θ = atan(1/(1 + N(N − 1)))``, about ``2/N⁴``."""
    n = _length("max_len", max_len)
    theta = math.atan(1 / (1 + n * (n - 1)))
    return 8 * math.sin(theta / 2) ** 2


def lookup_layernorm_hash(
    query: Sequence[Form],
    key: Sequence[Form],
    value: Form,
    out: str,
    *,
    weighting: str = "hard",
    label: str = "",
) -> HeadBlock:
    """Layer-norm-hash index lookup (§5.3.3): ``out_t = value_{q_t}``.

    ``query = (a, b)`` and ``key = (a', b')`` are the two signed components written by
    :func:`crasp_compiler.cookbook.layernorm.layernorm_hash` for q_t and for the
    position s (e.g. from ``(index, one)`` or, by scale invariance, from
    ``(one − inverse, inverse)`` = (t, 1)/(t+1)); the hash is the 4-vector
    ``lh(x) = (a, b, −a, −b) = √(2/(x²+1))·(x, 1, −x, −1)``. With scale 2 the score is the
    paper's ``lh(q_t)·lh(s) = 2(aa' + bb') = 4(q_t s + 1)/√((q_t²+1)(s²+1)) = 4 cos θ``,
    maximal (4) only at s = q_t. Exact at every length in real arithmetic under
    ``hard``, ``hard-left``, ``hard-right``, but the gap shrinks like 2/N⁴
    (:func:`layernorm_hash_gap`): the runtimes' 1e-9 tolerance resolves it for
    positions up to about 200 (float64). Softmax through :func:`sharpen` with gap
    ``layernorm_hash_gap(N)``. Width 2 (the paper's 4, halved: the hash is (a, b, −a,
    −b)); 1 head.
    """
    if len(query) != 2 or len(key) != 2:
        raise ValueError("lookup_layernorm_hash needs (a, b) forms for the query and the key")
    return HeadBlock(
        [as_form(q) for q in query],
        [as_form(k) for k in key],
        {output_name(out): as_form(value)},
        Exactness(
            "exact at every length in real arithmetic (layer-norm hash lookup; "
            "gap ~2/N^4 at positions <= N, resolved in float64 for N <= 200)"
        ),
        weighting=_hard(weighting),
        scale=2.0,
        label=label,
    )


def lookup_quadratic(
    query: Form,
    value: Form,
    out: str,
    *,
    s: Form,
    index: Form | None = None,
    index_sq: Form | None = None,
    weighting: str = "hard",
    label: str = "",
) -> HeadBlock:
    """Quadratic-maximisation index lookup (§5.3.4): ``out_t = value_{q_t}``.

    Query ``(q_t·s_t, s_t)`` — ``query`` is the form of ``q_t·s_t`` and ``s`` of
    ``s_t > 0``: ``s = one`` for a plain q_t (data or e.g. ``index − one``), or any
    positive scale such as ``inverse`` for a query known as ``q_t/(t+1)``; key
    ``(2j, −j²)`` from the features ``index`` and ``index^2``. The score
    ``s_t(2 q_t j − j²) = s_t(q_t² − (q_t − j)²)`` is maximal only at j = q_t, with gap
    ``≥ s_t`` (1 for s = one); BOS (j = 0) wins only for q_t = 0. Exact at every length
    for integer ``q_t ∈ {0..t}`` under ``hard``, ``hard-left``, ``hard-right``; softmax
    through :func:`sharpen` with the gap. Width 2; 1 head.
    """
    index = var("index") if index is None else index
    index_sq = var("index^2") if index_sq is None else index_sq
    return HeadBlock(
        [as_form(query), as_form(s)],
        [as_form(index) * 2.0, -as_form(index_sq)],
        {output_name(out): as_form(value)},
        Exactness("exact at every length for integer queries 0 <= q_t <= t (gap s_t)"),
        weighting=_hard(weighting),
        label=label,
    )


# ---------------------------------------------------------------------------- §5.4


def predecessor_alternating(
    value: Form,
    out: str,
    *,
    one: Form,
    alternating: Form | None = None,
    weighting: str = "hard-right",
    bound: float | None = None,
    label: str = "",
) -> list[Block]:
    """Predecessor from the (−1)^t encoding (§5.4, first construction):
    ``out_t = value_{t−1}`` for t ≥ 1.

    Two heads score the keys by ``(−1)^s`` and by ``−(−1)^s`` (query ``one``, key
    ``±alternating``): the first prefers even keys, so with rightmost tie-breaking an
    odd t reads ``t − 1``; the second prefers odd keys, so an even t ≥ 2 reads
    ``t − 1``. A conditional on the parity ``p = 1[t even] = (1 + (−1)^t)/2`` (linear:
    the paper's ``GTZero_1((−1)^i)`` is exact on ±1) picks the right one:
    ``out = if(p, odd-keys head, even-keys head)``.

    BOS is the even position 0, so the first token (odd) reads the BOS value — 0 for a
    value that is 0 at BOS, as in the paper's ``pred`` (no separate "first" test is
    needed); BOS reads its own value.

    ``weighting="hard-right"`` is the paper's rightmost unique-hard attention;
    ``weighting="hard"`` is average-hard attention made rightmost by :func:`tie_break`
    (gap 2 between the scores ±1; reads the features ``index`` and ``inverse``).
    ``bound=None``: values in [0, 1], :func:`crasp_compiler.cookbook.ffn.conditional`
    (2 units); ``bound=M``: values in [−M, M], ``conditional_bigm`` (4 units).
    Exact at every length under those conditions; 2 heads (outputs ``out + ".even"``,
    ``out + ".odd"``) and one FFN, 1 layer.
    """
    _choice("weighting", weighting, ("hard-right", "hard"))
    out = output_name(out)
    alternating = var("alternating") if alternating is None else as_form(alternating)
    value = as_form(value)
    text = "exact at every length (rightmost hard attention on (-1)^s)"
    heads = [
        HeadBlock(
            [as_form(one)],
            [sign * alternating],
            {f"{out}.{name}": value},
            Exactness(text),
            weighting="hard-right",
            label=label,
        )
        for sign, name in ((1.0, "even"), (-1.0, "odd"))
    ]
    if weighting == "hard":
        heads = [tie_break(replace(h, weighting="hard"), side="right", gap=2.0) for h in heads]
    parity = form_add((0.5, one), (0.5, alternating))
    odd_keys, even_keys = var(f"{out}.odd"), var(f"{out}.even")
    if bound is None:
        select = ffn.conditional(parity, odd_keys, even_keys, out, label=label)
    else:
        select = ffn.conditional_bigm(parity, odd_keys, even_keys, out, bound=bound, label=label)
    return [*heads, select]


def predecessor_strict(
    value: Form,
    out: str,
    *,
    weighting: str = "hard",
    index: Form | None = None,
    label: str = "",
) -> HeadBlock:
    """Predecessor with the strict future mask (§5.4, second construction):
    ``out_t = value_{t−1}`` for t ≥ 1, values of any sign.

    Row t sees the keys s < t only, so the predecessor is the rightmost of them:

    - ``weighting="hard"`` (average-hard): query and key ``index``, score ``t·s``
      (the paper's i/n, which is not causal, replaced by t), maximal only at s = t − 1
      with gap t ≥ 1; softmax through ``sharpen(…, gap=1, max_len=N)``;
    - ``weighting="hard-right"`` (rightmost unique-hard): zero scores; the rightmost
      key is t − 1.

    The first token reads the BOS value (its only key); BOS itself has no key and
    reads 0. Exact at every length; 1 head.
    """
    _choice("weighting", weighting, ("hard", "hard-right"), _SHARPEN_HINT)
    exact = Exactness("exact at every length (strict mask: reads t - 1; 0 at BOS)")
    if weighting == "hard-right":
        query: list[Mapping[str, float]] = []
        key: list[Mapping[str, float]] = []
    else:
        index = var("index") if index is None else as_form(index)
        query, key = [index], [index]
    return HeadBlock(
        query,
        key,
        {output_name(out): as_form(value)},
        exact,
        weighting=weighting,
        mask="strict",
        label=label,
    )


def offset_lookup(
    value: Form, offset: int, out: str, one: Form, bos: str, label: str = ""
) -> HeadBlock:
    """Read ``value`` at position ``t − offset`` with average-hard attention.

    Scores: ``bias(t − s) = 2·[t − s = offset]`` plus ``1`` on the BOS key (query form
    ``one`` is 1 everywhere). If ``t ≥ offset`` the key ``t − offset`` wins alone;
    otherwise BOS wins, so the head reads BOS's value (0 for Booleans). The scores are
    tieless with gap 1. Exact at every length.
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


# The softmax offset lookup multiplies its scores by this integer (see below).
SOFT_LOOKUP_SCALE = 3


def soft_offset_lookup(
    value: Form,
    offset: int,
    out: str,
    one: Form,
    *,
    index: Form | None = None,
    index_sq: Form | None = None,
    label: str = "",
) -> HeadBlock:
    """Read a {0,1} ``value`` at position ``t − offset`` with softmax attention on
    absolute positions: :func:`lookup_quadratic` with the query ``q_t = t − c``
    (``index − c·one``) and every score multiplied by λ = :data:`SOFT_LOOKUP_SCALE` = 3,
    folded into the query, so that the head has no relative bias and fits any
    architecture with absolute positional embeddings (TransformerLens).

    Key j scores ``3(2 q_t j − j²) = 3(q_t² − (q_t − j)²)``: the winner is
    ``j* = t − c`` (BOS, j = 0, when t ≤ c: the scores fall as j grows), and a key at
    distance d ≥ 1 from it scores ``≥ 3d²`` less, at most two keys at each distance. So
    ``Σ_{j≠j*} α_j ≤ Σ_{j≠j*} e^{s_j − s_{j*}} ≤ 2 Σ_{d≥1} e^{−3d²} < 1/10`` and, for a
    value in {0, 1} that is 0 at BOS, the output is within 1/10 of ``value_{t−c}``
    (0 when t ≤ c) **at every length** in real arithmetic. Follow with
    :func:`crasp_compiler.cookbook.ffn.soft_gate` or :func:`crasp_compiler.cookbook.ffn.clean_bit`.

    In floating point with a p-bit significand the scores are computed exactly: every
    query, key, product and partial sum is an integer of magnitude at most
    ``9t² + 6ct < 2^p`` (t ≤ 1365 for c = 0 in float32, 3·10^7 in float64); beyond that
    the model is not exact. Features ``index``, ``index^2``; width 2; 1 head.
    """
    one = as_form(one)
    index = var("index") if index is None else as_form(index)
    query = form_add((SOFT_LOOKUP_SCALE, index), (-SOFT_LOOKUP_SCALE * offset, one))
    head = lookup_quadratic(
        query, value, out, s=one * SOFT_LOOKUP_SCALE, index=index, index_sq=index_sq, label=label
    )
    return replace(
        head,
        weighting="softmax",
        exact=Exactness(
            "output within 1/10 of the {0,1} value at every length (softmax on integer "
            "scores, exact in floating point while 9t^2 + 6ct < 2^p)",
            error=0.1,
        ),
    )


# ---------------------------------------------------------------------------- §5.5


def multi_head(heads: Sequence[HeadBlock], out: str, *, label: str = "") -> list[HeadBlock]:
    """Several single heads as one multi-head layer (§5.5), summed.

    A multi-head layer adds ``Σ_h W_O^h (Σ_s α^h_ts W_V^h x_s)`` to the residual stream.
    Here each head keeps its scores, weighting and mask; head h's single output is
    renamed ``f"{out}.{h}"``, and the layer's output is the form :func:`head_sum` of the
    returned heads, ``Σ_h var(out.h)`` (a linear read costs nothing). The heads must be
    independent (none reads another's output): the builder then places them in one
    layer whenever their inputs are ready together. (§5.5 goes the other way, an
    H-head layer as H single-head layers whose outputs are added; our family has
    multi-head layers, so it needs only this direction.)
    ``label`` prefixes each head's label. Exactness: each head's own.
    """
    heads = list(heads)
    if not heads:
        raise ValueError("multi_head needs at least one head")
    out = output_name(out)
    for h, head in enumerate(heads):
        if not isinstance(head, HeadBlock):
            raise ValueError(f"multi_head: item {h} is not a HeadBlock: {head!r}")
        if len(head.values) != 1:
            raise ValueError(f"multi_head: head {h} writes {len(head.values)} variables, not 1")
    for h, head in enumerate(heads):
        for g, other in enumerate(heads):
            shared = head.reads & set(other.values)
            if g != h and shared:
                raise ValueError(
                    f"multi_head: head {h} reads {sorted(shared)}, which head {g} writes; "
                    "heads of one layer must be independent"
                )
    renamed = []
    for h, head in enumerate(heads):
        (form,) = head.values.values()
        name = f"{label}: {head.label}" if label and head.label else (label or head.label)
        renamed.append(replace(head, values={f"{out}.{h}": form}, label=name))
    return renamed


def head_sum(heads: Sequence[HeadBlock]) -> Form:
    """The sum of the variables that ``heads`` write (the output of :func:`multi_head`)."""
    return form_add(*((1, var(name)) for head in heads for name in head.writes))


# ---------------------------------------------------------------------------- §5.6


def tie_break(
    head: HeadBlock,
    *,
    side: str,
    gap: float,
    positional: str = "index",
    index: Form | None = None,
    inverse: Form | None = None,
    one: Form | None = None,
    label: str | None = None,
) -> HeadBlock:
    """Average-hard attention acting as leftmost / rightmost unique-hard attention
    (§5.6): adds a tie-breaking term ``T(t, s)`` to the scores of an average-hard head.

    Suppose every row's scores are either maximal or at least ``gap`` (γ) below the
    maximum (eq. 39, with ≥). If every row has ``|T(t, s) − T(t, s')| < γ`` for the keys
    s, s' it sees, and T is strictly monotone in s, then the new maximum is unique and is
    the leftmost (T decreasing) or rightmost (T increasing) of the old maxima:
    a maximal key a and a key b ≥ γ below it get ``(S_a + T_a) − (S_b + T_b) > γ − γ = 0``,
    and among the old maxima T alone decides. The terms:

    - ``positional="index"`` (masks ``causal`` and ``strict``: keys s ≤ t):
      ``T = ±γ·s/(t+1)`` (query ``±γ·inverse``, key ``index``), so
      ``T ∈ [0, γt/(t+1)] ⊂ [0, γ)`` for rightmost (−: leftmost). Ties differ by
      ``γ/(t+1)`` and overturned-looking pairs keep a margin ``≥ γ/(t+1)``: the result is
      tieless with gap ``γ/(N+1)`` for lengths ≤ N (so ``sharpen(…, gap=γ/(N+1))``
      simulates unique-hard attention with softmax).
    - ``positional="inverse"`` (any mask; needs ``one``), the paper's ``±1/j``:
      ``T = ±γ/(s+1)`` (query ``±γ·one``, key ``inverse``): leftmost with +,
      ``T ∈ (0, γ]`` differing by less than γ; ties differ by ``γ/((s+1)(s+2))``.

    The paper's ``j/n`` term is not causal (n is the length); ``s/(t+1)`` replaces it.
    Exact at every length in real arithmetic; in float64 the runtimes resolve tie terms
    larger than 1e-9: ``γ/(N+1) > 1e-9`` (index) or ``γ/((N+1)(N+2)) > 1e-9`` (inverse).
    The head's query becomes ``scale·q`` plus one dimension, with scale 1; weighting
    ``hard``.
    """
    if not isinstance(head, HeadBlock) or head.weighting != "hard":
        raise ValueError("tie_break takes an average-hard head (weighting 'hard')")
    _choice("side", side, ("left", "right"))
    gap = _positive("gap", gap)
    _choice("positional", positional, ("index", "inverse"))
    if positional == "index":
        if head.mask not in ("causal", "strict"):
            raise ValueError(
                f"tie_break with positional='index' needs keys s ≤ t (mask causal or strict), "
                f"not mask {head.mask!r}; use positional='inverse'"
            )
        inverse = var("inverse") if inverse is None else as_form(inverse)
        term_q = inverse * (gap if side == "right" else -gap)
        term_k = var("index") if index is None else as_form(index)
    else:
        if one is None:
            raise ValueError("tie_break with positional='inverse' needs the constant form one")
        term_q = as_form(one) * (gap if side == "left" else -gap)
        term_k = var("inverse") if inverse is None else as_form(inverse)
    query = [as_form(q) * head.scale for q in head.query]
    text = (
        f"{head.exact.text}; tie-broken to the {side}most maximum (scores tied or >= {gap:g} apart)"
    )
    return replace(
        head,
        query=[*query, term_q],
        key=[*(as_form(k) for k in head.key), term_k],
        scale=1.0,
        exact=Exactness(text, max_len=head.exact.max_len, error=head.exact.error),
        label=head.label if label is None else label,
    )


# ---------------------------------------------------------------------------- §5.7


def _scaled(head: HeadBlock, factor: float) -> HeadBlock:
    """The head with every score multiplied by ``factor`` (scale and bias), softmax."""
    return replace(
        head,
        scale=head.scale * factor,
        bias={offset: value * factor for offset, value in head.bias.items()},
        weighting="softmax",
    )


def sharpen(
    head: HeadBlock,
    *,
    gap: float,
    max_len: int,
    l1: float = 0.25,
    value_range: float = 1.0,
    label: str | None = None,
) -> HeadBlock:
    """Softmax attention simulating tieless average-hard attention (§5.7, Lemma 5.3).

    ``head`` is a hard head whose every row has a unique maximal score, all others at
    least γ = ``gap`` below (Def. 5.2). Its scores (scale and bias) are multiplied by
    ``1/τ`` with ``τ = γ / log(2N/ℓ)`` (N = ``max_len``, ℓ = ``l1``; the paper's
    ``τ = γ/log(8N)`` is ℓ = 1/4) and the weighting becomes softmax.

    Lemma 5.3, as used here: a row has at most N non-maximal keys (N + 1 keys with BOS
    at length ≤ N), each of softmax weight ≤ ``e^{−γ/τ}``, so
    ``‖softmax − hardmax‖₁ = 2 Σ_{j≠j*} α_j ≤ 2N e^{−γ/τ} = ℓ``. The output then moves by
    ``|Σ_j α_j v_j − v_{j*}| = |Σ_{j≠j*} α_j (v_j − v_{j*})| ≤ (ℓ/2)·R`` for values in a
    range of width R = ``value_range``: ≤ 1/8 for {0,1} values with ℓ = 1/4 (the paper
    states 1/4, a factor 2 looser), so ``GTZero_{1/2}(c − 1/4)`` rounds a looked-up bit
    exactly for lengths ≤ N. Exactness: ``error = ℓR/2``, ``max_len = N``. 1 head.
    """
    if not isinstance(head, HeadBlock) or head.weighting not in HARD:
        raise ValueError(
            "sharpen takes a hard head (weighting 'hard', 'hard-left' or 'hard-right')"
        )
    gap = _positive("gap", gap)
    max_len = _length("max_len", max_len)
    l1 = _positive("l1", l1)
    if l1 >= 2 * max_len:
        raise ValueError(f"l1 must be < 2·max_len = {2 * max_len}, not {l1!r}")
    value_range = _positive("value_range", value_range)
    tau = gap / math.log(2 * max_len / l1)
    error = l1 * value_range / 2
    text = (
        f"approximate (softmax, tau = {tau:.4g}): within {error:.4g} of average-hard attention "
        f"for tieless scores with gap >= {gap:.4g} and values in a range of width "
        f"{value_range:g}, inputs of length <= {max_len}"
    )
    sharp = _scaled(head, 1 / tau)
    sharp.exact = Exactness(text, max_len=max_len, error=error)
    if label is not None:
        sharp.label = label
    return sharp


# ---------------------------------------------------------------------------- routing


def route(
    sources: Sequence[int],
    values: Mapping[str, Mapping[str, float]],
    *,
    n: int,
    weighting: str = "hard",
    scale: float | None = None,
    value_range: float = 1.0,
    label: str = "",
) -> HeadBlock:
    """Positional routing: position t reads position ``sources[t]``,
    ``out_t = value_{sources[t]}`` for every output ``out`` of ``values`` (one head, any
    number of values). This is the communication step of the positional transformer that
    simulates PCOC (Back de Luca et al., Lemma B.2, with P = I_{n+1}).

    Positions t = 0..n (0 is BOS, the *sink*); ``sources`` has one source position in
    0..n per position, BOS included (a row with nothing to read points at the sink,
    ``sources[t] = 0``). Keys are the features ``onehot:k`` for every position k that some
    row reads; the query component for key k is ``Σ_{t: sources[t] = k} onehot:t``, so
    the score is ``q_t·k_s = 1[s = sources[t]]``: the source is the unique maximum of the
    row, gap 1. The mask is ``none`` (a row may read a later position). Keys that no
    row reads are left out (a zero query component scores 0 either way), so the width is
    the number of distinct sources. The caller declares the ``onehot`` features it reads.

    - ``weighting="hard"`` (average-hard): exact for inputs of length n (``max_len`` = n;
      in a shorter input a row whose source lies beyond it averages its keys uniformly).
    - ``weighting="softmax"`` with ``scale`` T > 0: the scores ×T, i.e.
      :func:`sharpen` of the hard head with gap 1, N = n and ``ℓ = 2n·e^{−T}``. Each row
      has n non-maximal keys, so the source carries weight ``e^T/(e^T + n) ≥ 1 − n·e^{−T}``
      and ``|out_t − value_{sources[t]}| ≤ n·e^{−T}·R`` for values in a range of width R
      = ``value_range`` over all positions (R ≤ 2B for ``|value| ≤ B``); ``error`` =
      ``n·e^{−T}·R``, ``max_len`` = n.

    1 head; query/key width = the number of distinct sources.
    """
    n = _length("n", n)
    sources = list(sources)
    if len(sources) != n + 1:
        raise ValueError(
            f"route needs one source per position 0..{n} ({n + 1}), got {len(sources)}"
        )
    for t, s in enumerate(sources):
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 0 <= s <= n:
            raise ValueError(
                f"route: the source of position {t} must be a position in 0..{n}, not {s!r}"
            )
    if not values:
        raise ValueError("route needs at least one value to read")
    _choice("weighting", weighting, ("hard", "softmax"))
    readers: dict[int, list[int]] = {}
    for t, s in enumerate(sources):
        readers.setdefault(int(s), []).append(t)
    keys = sorted(readers)
    head = HeadBlock(
        [form_add(*((1, var(onehot(t))) for t in readers[k])) for k in keys],
        [var(onehot(k)) for k in keys],
        {output_name(out): as_form(value) for out, value in values.items()},
        Exactness(
            f"exact for inputs of length {n} (positional routing, one-hot scores, gap 1)",
            max_len=n,
        ),
        weighting="hard",
        mask="none",
        label=label,
    )
    if weighting == "hard":
        if scale is not None:
            raise ValueError("route: scale is for weighting='softmax' (hard heads use scale 1)")
        return head
    if scale is None:
        raise ValueError("route with weighting='softmax' needs scale (the temperature T > 0)")
    temperature = _positive("scale", scale)
    l1 = 2 * n * math.exp(-temperature)
    if l1 <= 0:
        raise ValueError(f"route: scale {scale!r} is too large (e^-scale underflows)")
    return sharpen(head, gap=1.0, max_len=n, l1=l1, value_range=value_range)
