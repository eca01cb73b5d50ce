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

Decision rules turn an output into a value: ``bool`` is ``out > 0.5``; ``count`` is
``round(out · (t + 1))`` (counts are stored scaled by ``1/(t+1)``); ``int`` is
``round(out)``; ``value`` is the raw number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

ACTIVATIONS = ("relu", "heaviside", "gelu")
WEIGHTINGS = ("softmax", "hard", "hard-left", "hard-right")
MASKS = ("causal", "strict", "past", "strict-past", "none")
RULES = ("bool", "count", "int", "value")
BOS = "<bos>"


@dataclass
class Head:
    w_q: np.ndarray  # (dk, d)
    w_k: np.ndarray  # (dk, d)
    w_v: np.ndarray  # (dv, d)
    w_o: np.ndarray  # (d, dv)
    scale: float = 1.0
    bias: dict[int, float] = field(default_factory=dict)
    weighting: str = "softmax"
    mask: str = "causal"
    label: str = ""

    @property
    def is_uniform(self) -> bool:
        """True when every score is 0, so any weighting is the uniform average."""
        no_scores = not np.any(self.w_q) or not np.any(self.w_k) or self.scale == 0
        return no_scores and not any(self.bias.values())


@dataclass
class MLP:
    w1: np.ndarray  # (h, d)
    b1: np.ndarray  # (h,)
    w2: np.ndarray  # (d, h)
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


@dataclass
class Guarantee:
    """When the outputs are exact: ``max_len`` None means every length (real arithmetic)."""

    max_len: int | None
    text: str

    def covers(self, length: int) -> bool:
        return self.max_len is None or length <= self.max_len


@dataclass
class Model:
    vocab: list[str]  # vocab[0] is BOS
    w_e: np.ndarray  # (V, d)
    features: list[str]  # positional feature names
    w_p: np.ndarray  # (d, F)
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

    def parameter_count(self) -> int:
        arrays = [self.w_e, self.w_p, self.numeric_weights] + [o.weights for o in self.outputs]
        for layer in self.layers:
            for h in layer.heads:
                arrays += [h.w_q, h.w_k, h.w_v, h.w_o]
            if layer.mlp:
                m = layer.mlp
                arrays += [m.w1, m.b1, m.w2, m.b2]
        return int(sum(a.size for a in arrays))

    def token_ids(self, tokens: list[str]) -> list[int]:
        """Map tokens (without BOS) to vocabulary ids; ValueError names a bad token."""
        return token_ids(self.vocab, tokens)


def token_ids(vocab: list[str], tokens: list[str]) -> list[int]:
    """Ids of ``tokens`` (without BOS) in ``vocab``; ValueError names a bad token."""
    index = {s: k for k, s in enumerate(vocab)}
    ids = []
    for position, token in enumerate(tokens):
        if token not in index or token == BOS:
            raise ValueError(f"token {token!r} at position {position} is not in the vocabulary")
        ids.append(index[token])
    return ids
