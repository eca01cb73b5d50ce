"""The numpy reference executor of the model family (see :mod:`crasp_compiler.model.model`).

Runs a batch of token sequences (BOS is prepended here) in float64 by default or float32
on request. Sequences of different lengths are right-padded: every mask is causal or
stricter in compiled models, so padding never changes a real position (``past`` and
``none`` masks are applied per sequence). Uniform heads (all scores 0) are evaluated as cumulative
means in O(n); other heads process queries in chunks of at most ``SCORE_BUDGET``
score entries, so memory stays bounded at any length.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from crasp_compiler.errors import CraspError
from crasp_compiler.model.features import feature_matrix
from crasp_compiler.model.model import MLP, Head, Model, matmul_t

# Score entries materialised at once per head (batch × query rows × keys).
SCORE_BUDGET = 1 << 23
# Scores within this distance of the row maximum count as maximal under hard attention.
HARD_TOLERANCE = {np.float64: 1e-9, np.float32: 1e-4}


@dataclass
class RunResult:
    """Outputs of one batch. ``outputs[name]`` has shape (B, T) with T = 1 + longest input;
    ``values[name]`` applies the output's decision rule (False, 0 or NaN at the padding
    beyond a shorter sequence's end). ``lengths`` are the input lengths
    (without BOS), so sequence b's last position is ``lengths[b]``. ``residuals`` (when
    requested) lists ``(label, array (B, T, d))`` after the embedding and every sublayer."""

    outputs: dict[str, np.ndarray]
    values: dict[str, np.ndarray]
    lengths: np.ndarray
    residuals: list[tuple[str, np.ndarray]] | None = None

    def final(self, name: str) -> np.ndarray:
        """The decided value of output ``name`` at each sequence's last position."""
        return self.values[name][np.arange(len(self.lengths)), self.lengths]


def _gelu(z: np.ndarray) -> np.ndarray:
    return 0.5 * z * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (z + 0.044715 * z**3)))


def _activate(z: np.ndarray, activations: list[str]) -> np.ndarray:
    kinds = np.array(activations)
    out = np.empty_like(z)
    for kind, fn in (
        ("relu", lambda v: np.maximum(v, 0)),
        ("heaviside", lambda v: (v >= 0).astype(v.dtype)),
        ("gelu", _gelu),
    ):
        cols = kinds == kind
        if cols.any():
            out[..., cols] = fn(z[..., cols])
    return out


def _mask(head: Head, rows: np.ndarray, cols: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Allowed (query, key) pairs, shape (B, rows, cols)."""
    t, s = rows[:, None], cols[None, :]
    if head.mask == "causal":
        allowed = s <= t
    elif head.mask == "strict":
        allowed = s < t
    elif head.mask == "past":
        allowed = s >= t
    elif head.mask == "strict-past":
        allowed = s > t
    else:
        allowed = np.ones((len(rows), len(cols)), dtype=bool)
    valid = cols[None, None, :] <= lengths[:, None, None]
    return allowed[None] & valid


def _attend(head: Head, x: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Σ_s α_ts W_V x_s for every query t, shape (B, T, dv)."""
    v = matmul_t(x, head.w_v)
    batch, size, _ = x.shape
    if head.is_uniform and head.mask == "causal" and head.weighting in ("softmax", "hard"):
        # Accumulate in float64: a float32 running sum stops counting at 2^24.
        sums = np.cumsum(v, axis=1, dtype=np.float64)
        return (sums / np.arange(1, size + 1)[None, :, None]).astype(x.dtype)
    q = matmul_t(x, head.w_q)
    k = matmul_t(x, head.w_k)
    tolerance = HARD_TOLERANCE[x.dtype.type]
    if _keys_only_at_bos(head, k, lengths):
        return _bos_keyed(head, q, k, v, tolerance).astype(x.dtype)
    cols = np.arange(size)
    out = np.zeros((batch, size, v.shape[-1]), dtype=x.dtype)
    chunk = max(1, SCORE_BUDGET // max(1, batch * size))
    for start in range(0, size, chunk):
        rows = cols[start : start + chunk]
        scores = head.scale * np.einsum("btk,bsk->bts", q[:, rows], k)
        if head.bias:
            offsets = rows[:, None] - cols[None, :]
            for offset, value in head.bias.items():
                scores = scores + (value * (offsets == offset)).astype(x.dtype)[None]
        allowed = _mask(head, rows, cols, lengths)
        scores = np.where(allowed, scores, -np.inf)
        top = scores.max(axis=-1, keepdims=True)
        empty = ~allowed.any(axis=-1, keepdims=True)
        top = np.where(empty, 0, top)
        if head.weighting == "softmax":
            weights = np.where(allowed, np.exp(scores - top), 0)
        else:
            weights = (allowed & (scores >= top - tolerance)).astype(x.dtype)
            if head.weighting in ("hard-left", "hard-right"):
                pick = (
                    weights.argmax(-1)
                    if head.weighting == "hard-left"
                    else (size - 1 - weights[..., ::-1].argmax(-1))
                )
                weights = np.zeros_like(weights)
                np.put_along_axis(weights, pick[..., None], 1.0, axis=-1)
                weights = np.where(allowed, weights, 0)
        total = weights.sum(-1, keepdims=True)
        weights = weights / np.where(total == 0, 1, total)
        out[:, rows] = weights @ v
    return out


def _normalize(z: np.ndarray, groups: list[list[int]]) -> np.ndarray:
    """Selective layer norm (ε = 0) over each group of hidden units; 0 where std is 0."""
    if not groups:
        return z
    z = z.copy()
    for group in groups:
        part = z[..., group]
        centred = part - part.mean(-1, keepdims=True)
        std = np.sqrt((centred**2).mean(-1, keepdims=True))
        z[..., group] = np.where(std > 0, centred / np.where(std > 0, std, 1), 0)
    return z


def _keys_only_at_bos(head: Head, k: np.ndarray, lengths: np.ndarray) -> bool:
    """Whether a causal softmax / average-hard head has zero keys at every token, so
    that only BOS and the bias offsets score differently from 0 (offset lookups)."""
    if head.mask != "causal" or head.weighting not in ("softmax", "hard"):
        return False
    positions = np.arange(k.shape[1])
    tokens = (positions[None, :] >= 1) & (positions[None, :] <= lengths[:, None])
    return not np.any(k[tokens])


def _bos_keyed(head: Head, q: np.ndarray, k: np.ndarray, v: np.ndarray, tolerance: float):
    """The head in O(T · |offsets|) when keys vanish at tokens (``_keys_only_at_bos``).

    Query t scores BOS with ``b_t = scale·q_t·k_0 + bias(t)``, the key ``t − c`` with
    ``bias(c)`` for each offset c (when ``t − c ≥ 1``), and the other ``n_t`` keys with 0.
    With prefix sums ``P_t = Σ_{s≤t} v_s``, the 0-scored keys sum to
    ``P_t − v_0 − Σ_c v_{t−c}``, so softmax and average-hard weights need no T × T matrix.
    Computed in float64.
    """
    size = v.shape[1]
    t = np.arange(size)
    v = v.astype(np.float64)
    v0 = v[:, :1]
    bos = head.scale * np.einsum("btk,bk->bt", q.astype(np.float64), k[:, 0].astype(np.float64))
    offsets = [(c, value) for c, value in sorted(head.bias.items()) if c >= 0]
    for c, value in offsets:
        bos = bos + value * (t == c)[None]
    keyed = []  # (valid (T,), score, values (B, T, dv)) per offset
    for c, value in offsets:
        valid = t - c >= 1
        shifted = np.zeros_like(v)
        if c < size:
            shifted[:, c:] = v[:, : size - c]
        keyed.append((valid, value, np.where(valid[None, :, None], shifted, 0.0)))
    plain = t - sum(valid.astype(np.int64) for valid, _, _ in keyed)
    plain_sum = np.cumsum(v, axis=1) - v0 - sum(values for _, _, values in keyed)
    top = np.maximum(bos, np.where(plain > 0, 0.0, -np.inf)[None])
    for valid, value, _ in keyed:
        top = np.maximum(top, np.where(valid, value, -np.inf)[None])
    if head.weighting == "softmax":
        w_bos = np.exp(bos - top)
        w_keyed = [np.where(valid, np.exp(value - top), 0.0) for valid, value, _ in keyed]
        w_plain = np.exp(-top)
    else:
        w_bos = (bos >= top - tolerance).astype(np.float64)
        w_keyed = [
            (valid & (value >= top - tolerance)).astype(np.float64) for valid, value, _ in keyed
        ]
        w_plain = (top - tolerance <= 0.0).astype(np.float64)
    total = w_bos + sum(w_keyed) + w_plain * plain[None]
    mixed = w_bos[..., None] * v0 + w_plain[..., None] * plain_sum
    for weight, (_, _, values) in zip(w_keyed, keyed, strict=True):
        mixed = mixed + weight[..., None] * values
    return mixed / total[..., None]


def _mlp(mlp: MLP, x: np.ndarray) -> np.ndarray:
    hidden = _activate(_normalize(matmul_t(x, mlp.w1) + mlp.b1, mlp.norm_groups), mlp.activations)
    return matmul_t(hidden, mlp.w2) + mlp.b2


def run(
    model: Model,
    inputs: Sequence[Sequence[str]],
    dtype: type = np.float64,
    residuals: bool = False,
    on_overlength: str = "error",
    values: Sequence[np.ndarray] | None = None,
) -> RunResult:
    """Run a batch of token sequences (without BOS) through the model.

    ``values`` gives a model with numeric inputs (``model.inputs``) one array per sequence,
    shape ``(len(tokens), m)`` (or ``(len(tokens),)`` when m = 1): the inputs at the
    tokens; BOS reads 0.

    ``on_overlength`` decides what happens with an input the model's guarantee does not
    cover (longer than it covers in real arithmetic or in ``dtype``, or numeric inputs
    outside their declared bounds): ``"error"`` raises :class:`CraspError`, ``"warn"``
    warns, ``"ignore"``.
    """
    if on_overlength not in ("error", "warn", "ignore"):
        raise ValueError(f"on_overlength must be error, warn or ignore, not {on_overlength!r}")
    dtype = np.dtype(dtype).type
    ids_list = []
    for tokens in inputs:
        try:
            ids_list.append(model.token_ids(list(tokens)))
        except ValueError as err:
            raise CraspError(str(err), filename="input") from None
    lengths = np.array([len(ids) for ids in ids_list], dtype=np.int64)
    longest = int(lengths.max()) if len(lengths) else 0
    numeric = None
    if model.inputs or values is not None:
        numeric = numeric_matrix(model.inputs, lengths, values)
    problems = [model.guarantee.length_problem(longest, np.dtype(dtype).name)]
    if numeric is not None:
        problems += [
            model.guarantee.value_problem(name, numeric[..., k])
            for k, name in enumerate(model.inputs)
        ]
    beyond_guarantee([p for p in problems if p], on_overlength)
    size = longest + 1
    ids = np.zeros((len(ids_list), size), dtype=np.int64)
    for row, seq in enumerate(ids_list):
        ids[row, 1 : 1 + len(seq)] = seq
    x = (
        model.w_e.astype(dtype)[ids]
        + matmul_t(feature_matrix(model.features, size), model.w_p).astype(dtype)[None]
    )
    if numeric is not None:
        x = x + (numeric @ model.numeric_weights.T).astype(dtype)
    trace: list[tuple[str, np.ndarray]] = [("embed", x.copy())] if residuals else []
    for number, layer in enumerate(model.layers, start=1):
        if layer.heads:
            update = np.zeros_like(x)
            for head in layer.heads:
                cast = _cast_head(head, dtype)
                update += matmul_t(_attend(cast, x, lengths), cast.w_o)
            x = x + update
            if residuals:
                trace.append((f"layer {number} attention", x.copy()))
        if layer.mlp is not None:
            x = x + _mlp(_cast_mlp(layer.mlp, dtype), x)
            if residuals:
                trace.append((f"layer {number} mlp", x.copy()))
    outputs, values = {}, {}
    scale = np.arange(1, size + 1, dtype=np.float64)[None, :]  # t + 1 is exact in float64
    padding = np.arange(size)[None, :] > lengths[:, None]
    for out in model.outputs:
        raw = x @ out.weights.astype(dtype)
        outputs[out.name] = raw
        values[out.name] = decide(out.rule, raw, scale, padding)
    return RunResult(outputs, values, lengths, trace if residuals else None)


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
    channels: list[str], lengths: np.ndarray, values: Sequence[np.ndarray] | None
) -> np.ndarray:
    """The numeric inputs as ``(B, T, m)`` float64, 0 at BOS and padding; CraspError when
    they are missing or do not match the model's ``channels`` and the input lengths."""
    m = len(channels)
    if values is None:
        raise CraspError(f"this model reads numeric inputs ({', '.join(channels)}): give values")
    if len(values) != len(lengths):
        raise CraspError(f"numeric inputs for {len(values)} sequences, tokens for {len(lengths)}")
    size = int(lengths.max()) + 1 if len(lengths) else 1
    out = np.zeros((len(lengths), size, m))
    for row, (array, n) in enumerate(zip(values, lengths, strict=True)):
        array = np.asarray(array, dtype=np.float64)
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


def decide(
    rule: str, raw: np.ndarray, scale: np.ndarray, padding: np.ndarray | None = None
) -> np.ndarray:
    """Apply a decision rule (see :mod:`crasp_compiler.model.model`); ``scale`` is t + 1.
    Positions marked in ``padding`` (beyond a sequence's end) read False, 0 or NaN."""
    if rule == "bool":
        decided = raw > 0.5
    elif rule == "count":
        decided = np.rint(raw.astype(np.float64) * scale).astype(np.int64)
    elif rule == "int":
        decided = np.rint(raw).astype(np.int64)
    else:
        decided = raw
    if padding is None or not padding.any():
        return decided
    return np.where(padding, np.nan if rule == "value" else 0, decided).astype(decided.dtype)


def _cast_head(head: Head, dtype: type) -> Head:
    return replace(
        head, **{k: getattr(head, k).astype(dtype) for k in ("w_q", "w_k", "w_v", "w_o")}
    )


def _cast_mlp(mlp: MLP, dtype: type) -> MLP:
    return replace(mlp, **{k: getattr(mlp, k).astype(dtype) for k in ("w1", "b1", "w2", "b2")})
