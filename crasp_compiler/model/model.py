"""The model family: the contract between the compiler and every runtime.

Input: ``BOS`` at position 0, tokens at positions 1..n. With residual width d:

    x_t = W_E[token_t] + W_P · pos(t) + W_X · v_t          (pos: named features)
    for each layer:
        x_t += Σ_h W_O^h Σ_s α^h_{ts} W_V^h x_s             (attention)
        x_t += W_2 act(N(W_1 x_t + b_1)) + b_2              (MLP, act per hidden unit)
    out_k(t) = w_k · x_t                                    (named outputs)

``v_t`` are the optional *numeric inputs*: one real number per named channel
(``Model.inputs``) at every token, 0 at BOS (PCOC models read their data this way).

Scores of head h: ``s_{ts} = scale · (W_Q x_t)·(W_K x_s) + bias(t − s)``, where ``bias``
is a sparse map from offsets to values (0 elsewhere). Weighting: ``softmax``;
``hard`` (average-hard: uniform over the maximal scores); ``hard-left`` / ``hard-right``
(unique-hard: the leftmost / rightmost maximal score). Mask: ``causal`` (s ≤ t),
``strict`` (s < t; a row with no key attends to nothing and reads 0), ``past`` (s ≥ t:
the past is masked, the query sees itself and later positions of its own sequence),
``strict-past`` (s > t; the last position reads 0) or ``none``.
Activations: ``relu``, ``heaviside`` (``1[z ≥ 0]``) and ``gelu`` (tanh form).

``N`` is the MLP's optional selective layer norm: each listed group g of hidden units is
replaced by ``(z_g − mean z_g) / std z_g`` (population std, ε = 0, no gain or bias; a
group with zero variance becomes 0); units in no group pass through unchanged. On a pair
``(z, −z)`` it gives ``(sign z, −sign z)`` at any scale of z.

Weight matrices are dense ``numpy`` arrays, or ``scipy.sparse.csr_array`` when a dense
one would be large (:data:`DENSE_LIMIT` entries): compiled models are mostly zeros, and
programs such as Beneš routing at n = 64 have residual widths in the hundreds of
thousands. Every runtime accepts both (:func:`matmul_t`, :func:`dense`).

Decision rules turn an output into a value: ``bool`` is ``out > 0.5``; ``count`` is
``round(out · (t + 1))`` (counts are stored scaled by ``1/(t+1)``); ``int`` is
``round(out)``; ``value`` is the raw number.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy import sparse

from crasp_compiler.errors import CraspError, spacing_hint

ACTIVATIONS = ("relu", "heaviside", "gelu")
WEIGHTINGS = ("softmax", "hard", "hard-left", "hard-right")
MASKS = ("causal", "strict", "past", "strict-past", "none")
RULES = ("bool", "count", "int", "value")
BOS = "<bos>"
# A weight matrix with more entries than this is assembled as a CSR sparse matrix.
DENSE_LIMIT = 1 << 16

Matrix = np.ndarray | sparse.csr_array


def is_sparse(w: Matrix) -> bool:
    return sparse.issparse(w)


def dense(w: Matrix) -> np.ndarray:
    """``w`` as a dense array."""
    return w.toarray() if sparse.issparse(w) else w


def matrix(shape: tuple[int, int], rows, cols, values) -> Matrix:
    """The matrix with ``values`` summed at (``rows``, ``cols``): dense up to
    :data:`DENSE_LIMIT` entries, CSR beyond."""
    rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    if shape[0] * shape[1] <= DENSE_LIMIT:
        out = np.zeros(shape)
        np.add.at(out, (rows, cols), values)
        return out
    out = sparse.csr_array(sparse.coo_array((values, (rows, cols)), shape=shape))
    out.sum_duplicates()
    out.eliminate_zeros()
    return out


def matmul_t(x: np.ndarray, w: Matrix) -> np.ndarray:
    """``x @ w.T`` over the last axis of ``x``, for dense or sparse ``w``."""
    if not sparse.issparse(w):
        return x @ w.T
    flat = x.reshape(-1, x.shape[-1])
    return np.asarray(w @ flat.T).T.reshape(*x.shape[:-1], w.shape[0])


# The torch module and the exports hold dense weights: at most this many parameters.
TORCH_DENSE_LIMIT = 1 << 27
# Builders refuse models that would store more numbers than this (1 GiB in float64),
# unless the environment variable names another budget.
PARAMETER_BUDGET = 1 << 27
BUDGET_VARIABLE = "CRASP_MAX_PARAMETERS"


def parameter_budget() -> int:
    """The most numbers a built model may store: ``$CRASP_MAX_PARAMETERS`` if set (an
    integer), else :data:`PARAMETER_BUDGET`."""
    text = os.environ.get(BUDGET_VARIABLE)
    if text is None:
        return PARAMETER_BUDGET
    if not text.strip().isdecimal():
        raise CraspError(f"{BUDGET_VARIABLE}={text!r} is not a whole number of parameters")
    return int(text)


def require_dense(model: Model, what: str) -> None:
    """CraspError when ``model`` is too large to hold densely (``what`` needs that)."""
    count = model.parameter_count()
    if count > TORCH_DENSE_LIMIT:
        raise CraspError(
            f"{what} holds dense weights, and this model has {count:,} parameters "
            f"({count * 8 / 2**30:.1f} GiB in float64; {model.nonzero_count():,} nonzero); "
            "run it with the numpy executor (`crasp run`, runtime.numpy_exec.run), which "
            "keeps large matrices sparse"
        )


def densified(model: Model) -> Model:
    """``model`` with every weight matrix dense (the same object when none is sparse)."""
    if not model.is_sparse():
        return model
    layers = []
    for layer in model.layers:
        heads = [
            replace(h, **{k: dense(getattr(h, k)) for k in ("w_q", "w_k", "w_v", "w_o")})
            for h in layer.heads
        ]
        mlp = layer.mlp and replace(layer.mlp, w1=dense(layer.mlp.w1), w2=dense(layer.mlp.w2))
        layers.append(Layer(heads, mlp))
    return replace(model, w_p=dense(model.w_p), layers=layers)


def any_nonzero(w: Matrix) -> bool:
    return bool(w.count_nonzero()) if sparse.issparse(w) else bool(np.any(w))


@dataclass
class Head:
    w_q: Matrix  # (dk, d)
    w_k: Matrix  # (dk, d)
    w_v: Matrix  # (dv, d)
    w_o: Matrix  # (d, dv)
    scale: float = 1.0
    bias: dict[int, float] = field(default_factory=dict)
    weighting: str = "softmax"
    mask: str = "causal"
    label: str = ""

    @property
    def is_uniform(self) -> bool:
        """True when every score is 0, so any weighting is the uniform average."""
        no_scores = not any_nonzero(self.w_q) or not any_nonzero(self.w_k) or self.scale == 0
        return no_scores and not any(self.bias.values())


@dataclass
class MLP:
    w1: Matrix  # (h, d)
    b1: np.ndarray  # (h,)
    w2: Matrix  # (d, h)
    b2: np.ndarray  # (d,)
    activations: list[str]  # one per hidden unit
    labels: list[str] = field(default_factory=list)  # one per hidden unit
    norm_groups: list[list[int]] = field(default_factory=list)  # disjoint hidden-unit groups


@dataclass
class Layer:
    heads: list[Head]
    mlp: MLP | None


@dataclass
class Output:
    name: str
    weights: np.ndarray  # (d,)
    rule: str  # one of RULES


FLOAT_DTYPES = ("float64", "float32")


def describe_limit(limit: int) -> str:
    """A float-type length limit of a guarantee in words (−1: no input)."""
    if limit < 0:
        return "for no input"
    if limit == 0:
        return "only for the empty input"
    return f"for inputs of length <= {limit:,}"


@dataclass
class Guarantee:
    """When the outputs are exact.

    ``max_len``: the longest input covered in real arithmetic (None: every length).
    ``dtypes``: per float type (``"float64"``, ``"float32"``), the longest input for which
    the compiler's rounding analysis proves the outputs exact when the model runs in that
    type (−1: no input, not even the empty one); a type that is absent was not analysed
    (the model claims only ``max_len``).
    ``input_bounds``: ``|v| ≤ bound`` for numeric input channels; values outside are not
    covered. ``text`` says all of this in words.
    """

    max_len: int | None
    text: str
    dtypes: dict[str, int] = field(default_factory=dict)
    input_bounds: dict[str, float] = field(default_factory=dict)

    def limit(self, dtype: str | None = None) -> int | None:
        """The longest input covered when running in ``dtype`` (None: no limit)."""
        limits = [self.max_len, self.dtypes.get(dtype) if dtype is not None else None]
        known = [limit for limit in limits if limit is not None]
        return min(known) if known else None

    def covers(self, length: int, dtype: str | None = None) -> bool:
        limit = self.limit(dtype)
        return limit is None or length <= limit

    def length_problem(self, length: int, dtype: str | None = None) -> str | None:
        """Why an input of ``length`` tokens is not covered in ``dtype``, or None."""
        if self.covers(length, dtype):
            return None
        if self.max_len is not None and length > self.max_len:
            return f"input length {length} exceeds the model's guarantee ({self.text})"
        limit = self.dtypes[dtype]  # type: ignore[index]
        return (
            f"input length {length} is beyond what the model is proven exact for in {dtype} "
            f"({describe_limit(limit)}; float64 and float32 limits differ)"
        )

    def value_problem(self, name: str, values: np.ndarray) -> str | None:
        """Why numeric input ``name`` holding ``values`` is not covered, or None."""
        bound = self.input_bounds.get(name)
        if bound is None or not values.size:
            return None
        worst = float(np.max(np.abs(values)))
        if worst <= bound:
            return None
        return (
            f"numeric input {name!r} holds {worst:g}, outside its declared bound "
            f"|{name}| <= {bound:g} (the model is exact only within it)"
        )


@dataclass
class Model:
    vocab: list[str]  # vocab[0] is BOS
    w_e: np.ndarray  # (V, d)
    features: list[str]  # positional feature names
    w_p: Matrix  # (d, F)
    layers: list[Layer]
    outputs: list[Output]
    residual: list[str]  # label of each residual dimension
    guarantee: Guarantee
    accept: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)  # numeric input channels
    w_x: np.ndarray | None = None  # (d, len(inputs)); None when there are none

    @property
    def numeric_weights(self) -> np.ndarray:
        """``W_X`` as a (d, m) array, (d, 0) for a model without numeric inputs."""
        return self.w_x if self.w_x is not None else np.zeros((self.width, 0))

    @property
    def width(self) -> int:
        return len(self.residual)

    @property
    def mlp_width(self) -> int:
        return max((layer.mlp.w1.shape[0] for layer in self.layers if layer.mlp), default=0)

    def output(self, name: str) -> Output:
        for out in self.outputs:
            if out.name == name:
                return out
        raise KeyError(name)

    def weights(self) -> list[Matrix]:
        """Every weight array: embeddings, positional and numeric maps, outputs, then each
        layer's head matrices and MLP weights and biases."""
        arrays = [self.w_e, self.w_p, self.numeric_weights] + [o.weights for o in self.outputs]
        for layer in self.layers:
            arrays += [m for h in layer.heads for m in (h.w_q, h.w_k, h.w_v, h.w_o)]
            if layer.mlp:
                arrays += [layer.mlp.w1, layer.mlp.b1, layer.mlp.w2, layer.mlp.b2]
        return arrays

    def parameter_count(self) -> int:
        return int(sum(np.prod(a.shape) for a in self.weights()))

    def nonzero_count(self) -> int:
        """The number of nonzero weights."""
        return int(
            sum(
                a.count_nonzero() if sparse.issparse(a) else np.count_nonzero(a)
                for a in self.weights()
            )
        )

    def is_sparse(self) -> bool:
        """Whether any weight matrix is stored sparse."""
        return any(sparse.issparse(a) for a in self.weights())

    def token_ids(self, tokens: list[str]) -> list[int]:
        """Map tokens (without BOS) to vocabulary ids; ValueError names a bad token."""
        return token_ids(self.vocab, tokens)


def token_ids(vocab: list[str], tokens: list[str]) -> list[int]:
    """Ids of ``tokens`` (without BOS) in ``vocab``; ValueError names a bad token."""
    index = {s: k for k, s in enumerate(vocab)}
    ids = []
    for position, token in enumerate(tokens):
        if token not in index or token == BOS:
            hint = spacing_hint(token, vocab[1:])
            raise ValueError(
                f"token {token!r} at position {position} is not in the vocabulary"
                + (f"; {hint}" if hint else "")
            )
        ids.append(index[token])
    return ids
