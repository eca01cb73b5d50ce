"""A naive reference of the model family, and random models, for differential tests of runtimes.

Everything here is written from the equations in the docstring of
:mod:`crasp_compiler.model.model`, independently of the compiler and of any runtime:

- :func:`naive_forward` runs one sequence (no batch, no padding) in float64 with explicit
  loops over query positions ``t``, keys ``s``, heads and hidden units;
- :func:`decide` applies an output's decision rule;
- :func:`random_model` draws small random models of the whole family (every weighting,
  mask, activation, relative biases, selective layer norm, positional features, both
  decision rules), with integer query/key weights for hard heads so that exact ties
  between scores are common;
- :class:`Probe` collects, during :func:`naive_forward`, the quantities behind every
  discrete choice (score gaps under hard attention, heaviside pre-activations, layer-norm
  spreads), and :func:`well_separated` tells whether all of them are far from their
  thresholds, i.e. whether a runtime computing in another order or another precision
  must make the same choices.

Typical use (a runtime ``run_batch(model, inputs) -> {name: (B, T) array}``)::

    rng = np.random.default_rng(seed)
    model = random_model(rng)
    inputs = random_inputs(rng, model, count=8, max_len=10)
    for b, tokens in enumerate(inputs):
        probe = Probe()
        want = naive_forward(model, tokens, probe=probe)
        if well_separated(model, want, probe, margin=1e-6):
            ...  # compare run_batch(model, inputs)[name][b, : len(tokens) + 1] with want[name]
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from crasp_compiler.model.features import feature_matrix
from crasp_compiler.model.model import (
    ACTIVATIONS,
    BOS,
    MASKS,
    MLP,
    RULES,
    WEIGHTINGS,
    Guarantee,
    Head,
    Layer,
    Model,
    Output,
)

# Scores within this distance of the row maximum count as maximal under hard attention.
HARD_TIE = 1e-9

HARD_WEIGHTINGS = ("hard", "hard-left", "hard-right")
SYMBOLS = ("a", "b", "c", "d", "e", "f")

_PERIODIC = re.compile(r"^periodic:(\d+):(\d+)$")


# ---------------------------------------------------------------- the reference


@dataclass
class Probe:
    """What :func:`naive_forward` saw at its discrete choices (all float64 values).

    ``hard_gaps``: for every query row of a hard head, ``max - score`` for every allowed key
    (0 for the maximum itself); ``hard_tops``: the row maxima; ``hard_maximal``: the number
    of maximal keys of each row (before hard-left / hard-right pick one). ``heaviside``: every
    heaviside pre-activation (after the layer norm). ``norm_stds``: the standard deviation
    of every layer-norm group at every position.
    """

    hard_gaps: list[float] = field(default_factory=list)
    hard_tops: list[float] = field(default_factory=list)
    hard_maximal: list[int] = field(default_factory=list)
    heaviside: list[float] = field(default_factory=list)
    norm_stds: list[float] = field(default_factory=list)


def feature_value(name: str, t: int) -> float:
    """Positional feature ``name`` at position ``t`` (BOS at t = 0), from its definition:
    ``periodic:m:r`` is 1 iff ``(t - 1) mod m == r`` (BOS, t = 0, is position −1);
    ``index`` is t,
    ``index^2`` is t², ``inverse`` is 1/(t + 1), ``alternating`` is (−1)^t, ``onehot:k``
    is 1[t = k]. Almost-orthogonal vectors (``ao:...``) are defined by their hash and fall
    back to :func:`crasp_compiler.model.features.feature_matrix`."""
    match = _PERIODIC.match(name)
    if match:
        m, r = int(match[1]), int(match[2])
        return 1.0 if (t - 1) % m == r else 0.0
    simple = {"index": t, "index^2": t * t, "inverse": 1 / (t + 1), "alternating": (-1) ** t}
    if name in simple:
        return float(simple[name])
    if name.startswith("onehot:"):
        return 1.0 if t == int(name.split(":")[1]) else 0.0
    return float(feature_matrix([name], t + 1)[t, 0])


def gelu(z: float) -> float:
    """GELU, tanh form: ``0.5 z (1 + tanh(sqrt(2/π) (z + 0.044715 z³)))``."""
    return 0.5 * z * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z**3)))


def activate(kind: str, z: float) -> float:
    if kind == "relu":
        return max(z, 0.0)
    if kind == "heaviside":
        return 1.0 if z >= 0 else 0.0
    if kind == "gelu":
        return gelu(z)
    raise ValueError(f"unknown activation {kind!r}")


def _allowed(mask: str, t: int, s: int) -> bool:
    if mask == "causal":
        return s <= t
    if mask == "strict":
        return s < t
    if mask == "past":
        return s >= t
    if mask == "strict-past":
        return s > t
    if mask == "none":
        return True
    raise ValueError(f"unknown mask {mask!r}")


def _head_read(
    head: Head,
    qs: list[np.ndarray],
    ks: list[np.ndarray],
    vs: list[np.ndarray],
    t: int,
    probe: Probe | None,
) -> np.ndarray:
    """``Σ_s α_ts v_s`` at query ``t`` of one sequence, where ``q_s = W_Q x_s``,
    ``k_s = W_K x_s`` and ``v_s = W_V x_s`` at positions s = 0..n."""
    keys = [s for s in range(len(vs)) if _allowed(head.mask, t, s)]
    if not keys:
        return np.zeros(head.w_v.shape[0])  # a row with no allowed key reads 0
    scores = {s: head.scale * float(qs[t] @ ks[s]) + head.bias.get(t - s, 0.0) for s in keys}
    top = max(scores.values())
    if head.weighting == "softmax":
        weights = {s: math.exp(scores[s] - top) for s in keys}
    elif head.weighting in HARD_WEIGHTINGS:
        maximal = [s for s in keys if scores[s] >= top - HARD_TIE]
        if probe is not None:
            probe.hard_tops.append(top)
            probe.hard_gaps.extend(top - scores[s] for s in keys)
            probe.hard_maximal.append(len(maximal))
        if head.weighting == "hard-left":
            maximal = [min(maximal)]
        elif head.weighting == "hard-right":
            maximal = [max(maximal)]
        weights = {s: (1.0 if s in maximal else 0.0) for s in keys}
    else:
        raise ValueError(f"unknown weighting {head.weighting!r}")
    total = sum(weights.values())
    read = np.zeros(head.w_v.shape[0])
    for s in keys:
        read = read + (weights[s] / total) * vs[s]
    return read


def _normalize(z: np.ndarray, groups: list[list[int]], probe: Probe | None) -> np.ndarray:
    """Selective layer norm: each group → (z_g − mean) / std (population std, ε = 0),
    a zero-variance group → 0, units in no group unchanged."""
    out = z.copy()
    for group in groups:
        values = [float(z[i]) for i in group]
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        if probe is not None:
            probe.norm_stds.append(std)
        for i, v in zip(group, values, strict=True):
            out[i] = 0.0 if std == 0 else (v - mean) / std
    return out


def _mlp_update(mlp: MLP, x: np.ndarray, probe: Probe | None) -> np.ndarray:
    """``W_2 act(N(W_1 x + b_1)) + b_2`` at one position."""
    z = _normalize(mlp.w1 @ x + mlp.b1, mlp.norm_groups, probe)
    hidden = np.zeros(len(z))
    for unit, kind in enumerate(mlp.activations):
        if kind == "heaviside" and probe is not None:
            probe.heaviside.append(float(z[unit]))
        hidden[unit] = activate(kind, float(z[unit]))
    return mlp.w2 @ hidden + mlp.b2


def naive_forward(
    model: Model,
    tokens: list[str],
    *,
    trace: list[tuple[str, np.ndarray]] | None = None,
    probe: Probe | None = None,
) -> dict[str, np.ndarray]:
    """Raw outputs of ``model`` on one sequence ``tokens`` (without BOS), float64.

    Returns ``{output name: array of shape (n + 1,)}``, entry ``t`` at position ``t``
    (BOS at 0). Heads of a layer all read the residual stream before the layer and their
    updates are summed. If ``trace`` is a list, ``(label, residual (n + 1, d))`` is appended
    after the embedding (``"embed"``) and after every sublayer present
    (``"layer i attention"``, ``"layer i mlp"``, i from 1). If ``probe`` is given, it records
    the quantities behind discrete choices (see :class:`Probe`).
    """
    ids = [0, *model.token_ids(list(tokens))]
    size = len(ids)
    w_e = np.asarray(model.w_e, dtype=np.float64)
    w_p = np.asarray(model.w_p, dtype=np.float64)
    xs = []
    for t in range(size):
        pos = np.array([feature_value(name, t) for name in model.features], dtype=np.float64)
        xs.append(w_e[ids[t]] + w_p @ pos)

    def record(label: str) -> None:
        if trace is not None:
            trace.append((label, np.array(xs, dtype=np.float64).reshape(size, -1)))

    record("embed")
    for number, layer in enumerate(model.layers, start=1):
        if layer.heads:
            heads = [_as_float64_head(h) for h in layer.heads]
            updates = [np.zeros(len(x)) for x in xs]
            for head in heads:
                qs = [head.w_q @ x for x in xs]
                ks = [head.w_k @ x for x in xs]
                vs = [head.w_v @ x for x in xs]
                for t in range(size):
                    updates[t] = updates[t] + head.w_o @ _head_read(head, qs, ks, vs, t, probe)
            xs = [x + u for x, u in zip(xs, updates, strict=True)]
            record(f"layer {number} attention")
        if layer.mlp is not None:
            mlp = _as_float64_mlp(layer.mlp)
            xs = [x + _mlp_update(mlp, x, probe) for x in xs]
            record(f"layer {number} mlp")
    return {
        out.name: np.array([float(np.asarray(out.weights, np.float64) @ x) for x in xs])
        for out in model.outputs
    }


# Rules whose decided values the tests compare for equality (``value`` is raw and is
# compared to a tolerance like every raw output).
DECIDED_RULES = tuple(rule for rule in RULES if rule != "value")


def decide(rule: str, raw: np.ndarray) -> np.ndarray:
    """An output's decision rule at positions t = 0..len(raw)-1: ``bool`` is ``raw > 0.5``;
    ``count`` is ``round(raw · (t + 1))``, ``int`` is ``round(raw)`` (Python's round: halves
    to even, like np.rint); ``value`` is ``raw``."""
    if rule == "bool":
        return np.array([bool(v > 0.5) for v in raw], dtype=bool)
    if rule == "count":
        return np.array([round(float(v) * (t + 1)) for t, v in enumerate(raw)], dtype=np.int64)
    if rule == "int":
        return np.array([round(float(v)) for v in raw], dtype=np.int64)
    if rule == "value":
        return np.asarray(raw, dtype=np.float64)
    raise ValueError(f"unknown rule {rule!r}")


def well_separated(
    model: Model,
    raw: dict[str, np.ndarray],
    probe: Probe,
    *,
    margin: float,
    tie: float = 1e-11,
    max_top: float = math.inf,
) -> bool:
    """True when every discrete choice of the run that ``probe`` and ``raw`` describe is
    robust to perturbations well below ``margin``: every hard-attention score gap is
    either an exact tie (at most ``tie``) or at least ``margin`` (and every row maximum is
    at most ``max_top`` in size, bounding the rounding error of tied scores); every
    heaviside pre-activation and every layer-norm std is at least ``margin`` away from 0;
    every ``bool`` output is ``margin`` away from 0.5 and every ``count`` output times
    (t + 1) and every ``int`` output is ``margin`` away from a half-integer."""
    if any(tie < g < margin for g in probe.hard_gaps):
        return False
    if any(abs(top) > max_top for top in probe.hard_tops):
        return False
    if any(abs(z) < margin for z in probe.heaviside):
        return False
    if any(std < margin for std in probe.norm_stds):
        return False
    for out in model.outputs:
        values = raw[out.name]
        if out.rule == "bool" and np.any(np.abs(values - 0.5) < margin):
            return False
        if out.rule in ("count", "int"):
            scaled = values * (np.arange(1, len(values) + 1) if out.rule == "count" else 1)
            if np.any(np.abs(scaled - np.floor(scaled) - 0.5) < margin):
                return False
    return True


def _as_float64_head(head: Head) -> Head:
    return Head(
        w_q=np.asarray(head.w_q, np.float64),
        w_k=np.asarray(head.w_k, np.float64),
        w_v=np.asarray(head.w_v, np.float64),
        w_o=np.asarray(head.w_o, np.float64),
        scale=float(head.scale),
        bias={int(k): float(v) for k, v in head.bias.items()},
        weighting=head.weighting,
        mask=head.mask,
        label=head.label,
    )


def _as_float64_mlp(mlp: MLP) -> MLP:
    return MLP(
        w1=np.asarray(mlp.w1, np.float64),
        b1=np.asarray(mlp.b1, np.float64),
        w2=np.asarray(mlp.w2, np.float64),
        b2=np.asarray(mlp.b2, np.float64),
        activations=list(mlp.activations),
        labels=list(mlp.labels),
        norm_groups=[list(g) for g in mlp.norm_groups],
    )


# ---------------------------------------------------------------- random models


def _between(rng: np.random.Generator, bounds: tuple[int, int]) -> int:
    lo, hi = bounds
    return int(rng.integers(lo, hi + 1))


def _rows_only(matrix: np.ndarray, rows: list[int]) -> np.ndarray:
    """``matrix`` with every row (entry, for a vector) outside ``rows`` set to 0."""
    keep = np.zeros(matrix.shape[0], dtype=bool)
    keep[rows] = True
    return np.where(keep[:, None] if matrix.ndim == 2 else keep, matrix, 0.0)


def _small_integers(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.choice([-2.0, -1.0, 0.0, 0.0, 1.0, 1.0, 2.0], size=shape)


# The seeds of the random models every runtime runs in tests/runtime/test_conformance.py
# (the family-coverage tests check that these seeds exercise the whole family).
SEEDS = range(80)


def random_model(
    rng: np.random.Generator,
    *,
    symbols: tuple[int, int] = (2, 4),
    width: tuple[int, int] = (3, 8),
    layers: tuple[int, int] = (1, 3),
    heads: tuple[int, int] = (0, 3),
    dk: tuple[int, int] = (1, 3),
    dv: tuple[int, int] = (1, 3),
    mlp_width: tuple[int, int] = (1, 6),
    weightings: tuple[str, ...] = WEIGHTINGS,
    masks: tuple[str, ...] = MASKS,
    activations: tuple[str, ...] = ACTIVATIONS,
    rules: tuple[str, ...] = DECIDED_RULES,
    max_features: int = 2,
    outputs: tuple[int, int] = (1, 3),
    p_mlp: float = 0.7,
    p_norm: float = 0.4,
    p_bias: float = 0.4,
    p_zero_query: float = 0.25,
    p_static_keys: float = 0.6,
    p_integer_embedding: float = 0.5,
    big_scale: float = 20.0,
) -> Model:
    """A small random model of the whole family. Ranges are inclusive ``(lo, hi)``.

    Vocabulary: BOS plus ``symbols`` of ``a, b, c, ...``; up to ``max_features`` distinct
    ``periodic:m:r`` (m in 1..4), ``inverse``, ``alternating`` or ``onehot`` features. Each layer has ``heads`` heads (weighting from
    ``weightings``, mask from ``masks``) and, with probability ``p_mlp``, an MLP whose
    units take activations from ``activations``; with probability ``p_norm`` (at least two
    units) the MLP has one or two disjoint layer-norm groups of size 2 or 3.

    Ties under hard attention are made common: hard heads have small-integer w_q / w_k,
    integer relative biases and scales in {0.5, 1, 2, 3}; with probability ``p_static_keys``
    their keys read only residual dimensions that no earlier sublayer has written (every
    sublayer writes a random subset of dimensions), so that keys of equal tokens and equal
    positional features are bitwise equal; with probability ``p_integer_embedding`` the
    embedding is integer-valued, so that keys of different tokens tie too. With
    probability ``p_zero_query`` a head's w_q is 0 (every score is its relative bias;
    with no bias the head is uniform). Softmax heads have Gaussian weights and a scale in
    (0.1, 4), or ``big_scale`` one time in five. Relative biases (probability ``p_bias``)
    are sparse maps from offsets in -2..3 to values. The guarantee is ``Guarantee(None, ...)``.
    """
    n_symbols = _between(rng, symbols)
    vocab = [BOS, *SYMBOLS[:n_symbols]]
    d = _between(rng, width)
    if rng.random() < p_integer_embedding:
        w_e = _small_integers(rng, (len(vocab), d))
    else:
        w_e = rng.normal(size=(len(vocab), d))
    candidates = [f"periodic:{m}:{r}" for m in range(1, 5) for r in range(m)]
    candidates += ["inverse", "alternating", "onehot:1", "onehot:3"]
    n_features = int(rng.integers(0, max_features + 1))
    features = [str(f) for f in rng.choice(candidates, size=n_features, replace=False)]
    if rng.random() < p_integer_embedding:
        w_p = _small_integers(rng, (d, n_features))
    else:
        w_p = rng.normal(size=(d, n_features))

    static = set(range(d))  # dimensions written by no sublayer so far

    def writes() -> list[int]:
        count = int(rng.integers(1, min(2, d) + 1))
        return sorted(int(i) for i in rng.choice(d, size=count, replace=False))

    model_layers = []
    for number in range(1, _between(rng, layers) + 1):
        layer_heads = []
        written: set[int] = set()
        for index in range(_between(rng, heads)):
            weighting = str(rng.choice(weightings))
            mask = str(rng.choice(masks))
            k_dim, v_dim = _between(rng, dk), _between(rng, dv)
            hard = weighting in HARD_WEIGHTINGS
            if hard:
                w_q = _small_integers(rng, (k_dim, d))
                w_k = _small_integers(rng, (k_dim, d))
                if static and rng.random() < p_static_keys:
                    w_k = w_k * np.isin(np.arange(d), sorted(static))[None, :]
                scale = float(rng.choice([0.5, 1.0, 2.0, 3.0]))
            else:
                w_q = rng.normal(size=(k_dim, d))
                w_k = rng.normal(size=(k_dim, d))
                scale = big_scale if rng.random() < 0.2 else float(rng.uniform(0.1, 4.0))
            if rng.random() < p_zero_query:
                w_q = np.zeros((k_dim, d))
            bias: dict[int, float] = {}
            if rng.random() < p_bias:
                for offset in rng.choice(
                    np.arange(-2, 4), size=int(rng.integers(1, 4)), replace=False
                ):
                    value = float(rng.choice([-2, -1, 1, 2])) if hard else float(rng.normal())
                    bias[int(offset)] = value
            rows = writes()
            written.update(rows)
            layer_heads.append(
                Head(
                    w_q=w_q,
                    w_k=w_k,
                    w_v=rng.normal(size=(v_dim, d)),
                    w_o=_rows_only(rng.normal(size=(d, v_dim)), rows),
                    scale=scale,
                    bias=bias,
                    weighting=weighting,
                    mask=mask,
                    label=f"L{number}H{index}",
                )
            )
        static -= written
        mlp = None
        if rng.random() < p_mlp:
            h = _between(rng, mlp_width)
            groups: list[list[int]] = []
            if h >= 2 and rng.random() < p_norm:
                units = [int(u) for u in rng.permutation(h)]
                while len(units) >= 2 and len(groups) < 2:
                    size = min(len(units), int(rng.integers(2, 4)))
                    groups.append(sorted(units[:size]))
                    units = units[size:]
                    if rng.random() < 0.5:
                        break
            rows = writes()
            mlp = MLP(
                w1=rng.normal(size=(h, d)),
                b1=rng.normal(size=h),
                w2=_rows_only(rng.normal(size=(d, h)), rows),
                b2=_rows_only(rng.normal(size=d), rows),
                activations=[str(a) for a in rng.choice(activations, size=h)],
                labels=[f"L{number}U{u}" for u in range(h)],
                norm_groups=groups,
            )
            static -= set(rows)
        model_layers.append(Layer(layer_heads, mlp))

    model_outputs = [
        Output(f"out{k}", rng.normal(size=d), str(rng.choice(rules)))
        for k in range(_between(rng, outputs))
    ]
    return Model(
        vocab=vocab,
        w_e=w_e,
        features=features,
        w_p=w_p,
        layers=model_layers,
        outputs=model_outputs,
        residual=[f"r{i}" for i in range(d)],
        guarantee=Guarantee(None, "random model: no guarantee is claimed"),
    )


def random_inputs(
    rng: np.random.Generator, model: Model, *, count: int, max_len: int, min_len: int = 0
) -> list[list[str]]:
    """``count`` random token sequences over ``model``'s symbols, lengths in min_len..max_len."""
    symbols = model.vocab[1:]
    return [
        [str(s) for s in rng.choice(symbols, size=int(rng.integers(min_len, max_len + 1)))]
        for _ in range(count)
    ]
