"""The trained models: a GPT-2-style :class:`SequenceModel` for token tasks and a
:class:`NumericModel` (positional or standard attention) for numeric tasks.

Positional encodings of :class:`SequenceModel` (``pe``):

- ``"ape"``: a learned table of ``max_positions`` rows. In training every sequence gets a
  random offset, uniform in ``[0, max_positions - length]`` (C-RASP paper, E.3), so every
  row is trained; at test the offset is 0 unless asked for.
- ``"nope"``: no positional encoding (causal masking is the only source of order).
- ``"sin"``: sinusoidal (Vaswani), positions ``0..T-1``, layout ``[sin ‖ cos]``.
- ``"rope"``: rotary embeddings (Su et al.): each head's queries and keys at position p
  are rotated, pair of coordinates ``(2i, 2i + 1)`` by the angle ``p · 10000^(−2i/d_head)``,
  so a score depends on positions only through their difference; nothing is added to
  the embedding.
- ``"alibi"``: linear biases (Press et al.): head h adds ``−m_h·|p_i − p_j|`` to the score
  of query i on key j, slopes ``m_h = 2^(−8h/H)``; nothing is added to the embedding.
- ``"relative"``: Transformer-XL's relative encoding (Dai et al. 2019, Eq. 3 of its §3.3):
  head h scores query i on key j as ``(q_i + u)·k_j + (q_i + v)·W_R r(p_i − p_j)``
  (over ``√d_head``), with ``r`` the sinusoid of the signed distance, ``W_R`` a learned
  map per layer and ``u``, ``v`` learned per head; nothing is added to the embedding.
- ``"random"``: randomized positional encodings (Ruoss et al. 2023): once per batch, the
  positions are a sorted sample of ``T`` distinct values of ``[0, max_positions)``, in
  training and at test alike, and every batch has one length (the training loop draws
  one per batch; evaluation runs each length apart), as in the paper; the base encoding
  reads those positions: sinusoidal (``random_base="sin"``, the default), a learned table
  (``"learned"``), rotary (``"rope"``), linear biases (``"alibi"``) or Transformer-XL's
  relative encoding of their differences (``"relative"``).

``model = "token_mlp"`` is the C-RASP paper's random baseline (its Fig. 1, grey): no
attention and no positions, the label at position i a function of token i alone,
``head(LN(W₂ GELU(W₁ e(x_i))))`` (a two-layer MLP over the token embedding).

With a sinusoidal base the token embedding is multiplied by ``sqrt(d_model)`` before the
encoding is added (as in the randomized-PE code), so neither term swamps the other.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from crasp_compiler.errors import CraspError, Diagnostic

PES = ("ape", "nope", "sin", "random", "rope", "alibi", "relative")
SEQUENCE_MODELS = ("transformer", "token_mlp")
RANDOM_BASES = ("sin", "learned", "rope", "alibi", "relative")
# how an encoding enters the model: added to the embedding, or inside attention
ATTENTION_PES = ("rope", "alibi", "relative")
NUMERIC_KINDS = ("positional", "standard")
NUMERIC_PES = ("onehot", "learned")
Visit = Callable[[Tensor], Tensor]


def stage_names(n_layers: int) -> list[str]:
    """The residual stages :meth:`SequenceModel.forward` visits: ``embed``, then
    ``L1 attn``, ``L1 mlp``, … (layers from 1)."""
    names = ["embed"]
    for layer in range(1, n_layers + 1):
        names += [f"L{layer} attn", f"L{layer} mlp"]
    return names


def _check(condition: bool, message: str, hint: str | None = None) -> None:
    if not condition:
        raise CraspError([Diagnostic(message, hint=hint)])


def sinusoid(positions: Tensor, dim: int, base: float = 10_000.0) -> Tensor:
    """Sinusoidal encodings ``[sin(p·ω_k) ‖ cos(p·ω_k)]`` with ``ω_k = base^(-2k/dim)``
    for integer positions of any shape; the result has one more axis, of size ``dim``."""
    freqs = base ** (-torch.arange(0, dim, 2, device=positions.device).float() / dim)
    angles = positions.float().unsqueeze(-1) * freqs
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def sorted_positions(length: int, limit: int, generator: torch.Generator | None = None) -> Tensor:
    """``length`` distinct positions of ``[0, limit)``, sorted ascending (randomized PE)."""
    _check(
        length <= limit,
        f"a sequence of {length} tokens needs more than max_positions={limit}",
        "raise max_positions",
    )
    return torch.randperm(limit, generator=generator)[:length].sort().values


@dataclass
class SequenceModelConfig:
    """Shape of a :class:`SequenceModel`. ``vocab_size`` counts the task's tokens (the model
    adds one padding token, id ``vocab_size``); ``n_labels`` the output classes."""

    vocab_size: int
    n_labels: int
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 2
    pe: str = "ape"
    max_positions: int = 512
    dropout: float = 0.0
    causal: bool = True
    random_base: str = "sin"
    mlp_ratio: int = 4
    model: str = "transformer"

    def __post_init__(self) -> None:
        _check(self.pe in PES, f"unknown positional encoding {self.pe!r}", f"one of {PES}")
        _check(
            self.model in SEQUENCE_MODELS,
            f"unknown model {self.model!r}",
            f"one of {SEQUENCE_MODELS}",
        )
        _check(
            self.model == "transformer" or self.pe == "nope",
            f"the {self.model} baseline reads no positions: pe must be 'nope', not {self.pe!r}",
        )
        _check(
            self.random_base in RANDOM_BASES,
            f"unknown base {self.random_base!r} for randomized positions",
            f"one of {RANDOM_BASES}",
        )
        _check(
            self.d_model % self.n_heads == 0,
            f"d_model={self.d_model} is not a multiple of n_heads={self.n_heads}",
        )
        sinusoidal = self.positions == "relative" or (
            self.pe == "sin" or (self.pe == "random" and self.random_base == "sin")
        )
        _check(
            not sinusoidal or self.d_model % 2 == 0,
            f"d_model={self.d_model} must be even for sinusoidal positions",
        )
        _check(self.max_positions >= 1, "max_positions must be positive")
        _check(
            self.positions != "rope" or (self.d_model // self.n_heads) % 2 == 0,
            f"rotary positions need an even head width, not {self.d_model // self.n_heads}",
        )

    @property
    def positions(self) -> str | None:
        """How positions enter: ``"added"`` to the embedding, ``"rope"``, ``"alibi"`` or
        ``"relative"`` inside attention, or ``None``."""
        base = self.random_base if self.pe == "random" else self.pe
        if base == "nope":
            return None
        return base if base in ATTENTION_PES else "added"


class SelfAttention(nn.Module):
    """Multi-head self-attention (causal, or with a key padding mask for encoders), with
    rotary positions, linear position biases or Transformer-XL's relative terms when
    ``positions`` says so (the module docstring); those read the ``positions`` given to
    :meth:`forward`."""

    def __init__(
        self, d_model: int, n_heads: int, dropout: float, positions: str | None = None
    ) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.dropout = dropout
        self.positions = positions
        slopes = 2.0 ** (-8.0 * torch.arange(1, n_heads + 1) / n_heads)
        self.register_buffer("slopes", slopes if positions == "alibi" else None, persistent=False)
        relative = positions == "relative"
        # Transformer-XL: W_R (distance encodings to keys), u (content_bias), v (position_bias)
        self.relative = nn.Linear(d_model, d_model, bias=False) if relative else None
        # u and v drawn from N(0, 0.02) as in Ruoss et al.'s code (only here: the random
        # stream of the other encodings' initialisation stays as it was)
        self.content_bias: nn.Parameter | None = None
        self.position_bias: nn.Parameter | None = None
        if relative:
            self.content_bias = nn.Parameter(0.02 * torch.randn(n_heads, 1, self.d_head))
            self.position_bias = nn.Parameter(0.02 * torch.randn(n_heads, 1, self.d_head))

    def _split(self, x: Tensor, positions: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values ``(batch, heads, T, d_head)``; rotary queries and keys
        rotated by their positions."""
        batch, width, _ = x.shape
        q, k, v = (
            t.view(batch, width, self.n_heads, -1).transpose(1, 2)
            for t in self.qkv(x).chunk(3, dim=-1)
        )
        if self.positions == "rope":
            q, k = rotate(q, self._need(positions)), rotate(k, self._need(positions))
        return q, k, v

    @staticmethod
    def _need(positions: Tensor | None) -> Tensor:
        _check(positions is not None, "this encoding's attention needs the positions")
        return cast(Tensor, positions)

    def _inputs(
        self, x: Tensor, causal: bool, key_mask: Tensor | None, positions: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """Queries, keys, values and the mask of the scores (:meth:`_mask`); relative
        attention's queries and keys extended so that their dot product is its score
        (:meth:`_relative`)."""
        q, k, v = self._split(x, positions)
        mask = self._mask(q.shape[2], causal, key_mask, positions)
        if self.relative is not None:
            q, k = self._relative(q, k, self._need(positions))
        return q, k, v, mask

    def _relative(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """Transformer-XL's score as one dot product, with nothing of size T × T:
        ``(q_i + u)·k_j + (q_i + v)·W_R r(p_i − p_j) = [q_i + u ‖ f_i]·[k_j ‖ g_j]``, where
        ``a_i = W_Rᵀ(q_i + v)`` (the head's rows of W_R) splits into the halves ``a_s``,
        ``a_c`` that meet the sines and cosines of r at frequencies ω, and by the
        angle-difference identities ``f_i = [a_s sin ωp_i + a_c cos ωp_i ‖
        a_c sin ωp_i − a_s cos ωp_i]`` and ``g_j = [cos ωp_j ‖ sin ωp_j]``."""
        relative = cast(nn.Linear, self.relative)
        u, v = cast(Tensor, self.content_bias), cast(Tensor, self.position_bias)
        d_model, half = relative.in_features, relative.in_features // 2
        rows = relative.weight.view(self.n_heads, self.d_head, d_model)
        a = torch.einsum("bhtd,hdf->bhtf", q + v, rows)
        a_s, a_c = a[..., :half], a[..., half:]
        angles = sinusoid(positions, d_model).to(q.dtype)[:, None]  # (batch, 1, T, d)
        sin, cos = angles[..., :half], angles[..., half:]
        f = torch.cat([a_s * sin + a_c * cos, a_c * sin - a_s * cos], dim=-1)
        g = torch.cat([cos, sin], dim=-1).expand(-1, self.n_heads, -1, -1)
        return torch.cat([q + u, f], dim=-1), torch.cat([k, g], dim=-1)

    def _mask(
        self, width: int, causal: bool, key_mask: Tensor | None, positions: Tensor | None
    ) -> Tensor | None:
        """The additive or boolean mask of the scores: ALiBi's biases ``−m_h·|p_i − p_j|``
        with the causal or padding mask folded in as −inf, else the padding mask of an
        encoder (None where ``is_causal`` does it)."""
        if self.positions != "alibi":
            return None if causal or key_mask is None else key_mask[:, None, None, :]
        slopes = cast(Tensor, self.slopes)
        p = self._need(positions).to(slopes.dtype)
        distance = (p[:, None, :, None] - p[:, None, None, :]).abs()
        bias = -slopes[None, :, None, None] * distance
        if causal:
            future = torch.ones(width, width, dtype=torch.bool, device=bias.device).triu(1)
            bias = bias.masked_fill(future, -math.inf)
        elif key_mask is not None:
            bias = bias.masked_fill(~key_mask[:, None, None, :], -math.inf)
        return bias

    def weights(
        self, x: Tensor, causal: bool, key_mask: Tensor | None, positions: Tensor | None = None
    ) -> Tensor:
        """The attention weights ``(batch, heads, T, T)`` that :meth:`forward` applies
        (``softmax(q kᵀ / √d_head)`` under the same mask and biases), for reading the
        model."""
        q, k, _, mask = self._inputs(x, causal, key_mask, positions)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d_head)
        width = x.shape[1]
        if mask is not None and mask.dtype != torch.bool:
            scores = scores + mask
        elif causal:
            future = torch.ones(width, width, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(future, -math.inf)
        elif key_mask is not None:
            scores = scores.masked_fill(~key_mask[:, None, None, :], -math.inf)
        return torch.softmax(scores, dim=-1)

    def forward(
        self, x: Tensor, causal: bool, key_mask: Tensor | None, positions: Tensor | None = None
    ) -> Tensor:
        batch, width, d_model = x.shape
        q, k, v, mask = self._inputs(x, causal, key_mask, positions)
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=causal and mask is None,
            scale=1 / math.sqrt(self.d_head),
        )
        out: Tensor = self.out(y.transpose(1, 2).reshape(batch, width, d_model))
        return out


def rotate(x: Tensor, positions: Tensor) -> Tensor:
    """Rotary position embedding of ``x`` ``(batch, heads, T, d)`` at ``positions``
    ``(batch, T)``: coordinates ``(2i, 2i + 1)`` rotated by ``p · 10000^(−2i/d)``."""
    half = x.shape[-1] // 2
    frequency = 10_000.0 ** (-torch.arange(half, device=x.device, dtype=x.dtype) / half)
    angle = positions.to(x.dtype)[:, None, :, None] * frequency
    cos, sin = torch.cos(angle), torch.sin(angle)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


class Block(nn.Module):
    """Pre-LN transformer block: ``x + Attn(LN(x))`` then ``x + MLP(LN(x))`` (GELU MLP)."""

    def __init__(self, config: SequenceModelConfig) -> None:
        super().__init__()
        d = config.d_model
        self.ln1 = nn.LayerNorm(d)
        self.attn = SelfAttention(d, config.n_heads, config.dropout, config.positions)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(
            nn.Linear(d, config.mlp_ratio * d),
            nn.GELU(),
            nn.Linear(config.mlp_ratio * d, d),
        )
        self.drop = nn.Dropout(config.dropout)

    def forward(
        self,
        x: Tensor,
        causal: bool,
        key_mask: Tensor | None,
        visit: Visit | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        """``visit(x)``, when given, sees (and may replace) the residual after attention;
        ``positions``: those rotary, ALiBi or relative attention reads."""
        x = x + self.drop(self.attn(self.ln1(x), causal, key_mask, positions))
        if visit is not None:
            x = visit(x)
        mlp: Tensor = self.drop(self.mlp(self.ln2(x)))
        return x + mlp


class SequenceModel(nn.Module):
    """A compact GPT-2-style transformer with a per-position linear head over the labels.

    Input: token ids ``(batch, T)``, right-padded with ``pad_id``; output: label logits
    ``(batch, T, n_labels)``. ``positions`` (``(batch, T)`` integers) come from
    :meth:`sample_positions`; ``None`` means ``0..T-1`` (for ``"random"``: one sorted
    sample from torch's global generator).
    """

    def __init__(self, config: SequenceModelConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.pad_id = config.vocab_size
        self.embed = nn.Embedding(config.vocab_size + 1, d)
        learned = config.pe == "ape" or (config.pe == "random" and config.random_base == "learned")
        self.pos_table = nn.Embedding(config.max_positions, d) if learned else None
        additive_sin = config.positions == "added" and not learned and config.pe != "ape"
        self.scale = math.sqrt(d) if additive_sin else 1.0
        self.drop = nn.Dropout(config.dropout)
        baseline = config.model == "token_mlp"
        blocks = [] if baseline else [Block(config) for _ in range(config.n_layers)]
        self.blocks = nn.ModuleList(blocks)
        self.token_mlp = (
            nn.Sequential(
                nn.Linear(d, config.mlp_ratio * d), nn.GELU(), nn.Linear(config.mlp_ratio * d, d)
            )
            if baseline
            else None
        )
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, config.n_labels)
        self.apply(self._init_weights)
        for block in blocks:  # GPT-2: residual projections scaled by 1/sqrt(2·layers)
            # the MLP's last module is its output Linear
            for proj in (block.attn.out, cast(nn.Linear, block.mlp[2])):
                nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * config.n_layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def sample_positions(
        self,
        lengths: Tensor,
        width: int,
        *,
        train: bool = False,
        offsets: bool | None = None,
        generator: torch.Generator | None = None,
    ) -> Tensor | None:
        """Position indices ``(batch, width)`` for right-padded sequences of the given
        ``lengths`` (``None`` for ``"nope"``), drawn on the CPU from ``generator``.

        ``"ape"``: ``offset + 0..width-1`` with one offset per sequence, uniform in
        ``[0, max_positions - length]`` when ``offsets`` (default: ``train``), else 0;
        padding positions are clipped to the table. ``"sin"``, ``"rope"``, ``"alibi"``,
        ``"relative"``: ``0..width-1``.
        ``"random"``: one sorted sample of ``width`` distinct positions of
        ``[0, max_positions)`` shared by the batch, whatever ``train`` says.
        """
        pe, limit = self.config.pe, self.config.max_positions
        batch = lengths.shape[0]
        if pe == "nope":
            return None
        if pe == "random":
            return sorted_positions(width, limit, generator).expand(batch, width)
        steps = torch.arange(width).expand(batch, width)
        if pe in ("sin", *ATTENTION_PES):
            return steps
        longest = int(lengths.max()) if batch else 0
        _check(
            longest <= limit,
            f"a sequence of {longest} tokens needs more than max_positions={limit}",
            "raise max_positions",
        )
        if train if offsets is None else offsets:
            room = limit - lengths.cpu() + 1
            start = (torch.rand(batch, generator=generator) * room).long()
        else:
            start = torch.zeros(batch, dtype=torch.long)
        return (start[:, None] + steps).clamp(max=limit - 1)

    def attention_positions(self, positions: Tensor | None) -> Tensor | None:
        """What attention reads of ``positions``: them, for rotary, ALiBi and relative
        encodings; None otherwise (added encodings enter with the embedding)."""
        return positions if self.config.positions in ATTENTION_PES else None

    def position_features(self, positions: Tensor) -> Tensor:
        """The vectors added to the token embeddings at ``positions``."""
        if self.pos_table is not None:
            rows: Tensor = self.pos_table(positions)
            return rows
        return sinusoid(positions, self.config.d_model)

    def forward(
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        visit: Callable[[int, Tensor], Tensor] | None = None,
    ) -> Tensor:
        """Label logits. ``visit(stage, h)``, when given, sees every residual stage and
        returns the residual the model goes on with (to read or patch it): stage 0 after
        the embedding, ``2i + 1`` after block i's attention, ``2i + 2`` after its MLP
        (:func:`stage_names`)."""
        key_mask = tokens != self.pad_id
        h = self.embed(tokens) * self.scale
        if self.config.pe != "nope":
            if positions is None:  # sample_positions gives None for "nope" only
                positions = cast(Tensor, self.sample_positions(key_mask.sum(1), tokens.shape[1]))
            positions = positions.to(tokens.device)
            if self.config.positions == "added":
                h = h + self.position_features(positions)
        inside = self.attention_positions(positions)
        h = self.drop(h)
        if visit is None:
            for block in self.blocks:
                h = block(h, self.config.causal, key_mask, positions=inside)
        else:
            h = visit(0, h)
            for i, block in enumerate(self.blocks):
                h = block(h, self.config.causal, key_mask, partial(visit, 2 * i + 1), inside)
                h = visit(2 * i + 2, h)
        if self.token_mlp is not None:
            h = self.token_mlp(h)
        logits: Tensor = self.head(self.ln_f(h))
        return logits


@dataclass
class NumericModelConfig:
    """Shape of a :class:`NumericModel` for up to ``n`` values.

    ``kind``: ``"positional"`` (queries and keys from the positional encodings only) or
    ``"standard"`` (from the hidden state; the encodings are concatenated to the input).
    ``pe``: one-hot rows of the identity (the papers' choice) or a learned table (positional
    kind only). ``scratchpad``: one extra node of value 0 after the inputs (as in the
    papers' experiments), excluded from the outputs. ``n_layers=None``: ``ceil(log2 n) + 1``.
    """

    n: int = 8
    kind: str = "positional"
    d_model: int = 64
    n_layers: int | None = None
    n_heads: int = 2
    mlp_hidden: int = 64
    pe: str = "onehot"
    scratchpad: bool = True

    def __post_init__(self) -> None:
        _check(
            self.kind in NUMERIC_KINDS, f"unknown numeric model {self.kind!r}", str(NUMERIC_KINDS)
        )
        _check(self.pe in NUMERIC_PES, f"unknown numeric encoding {self.pe!r}", str(NUMERIC_PES))
        _check(
            self.kind == "positional" or self.pe == "onehot",
            "a standard numeric model takes one-hot positions",
        )
        _check(self.n >= 1, "n must be positive")
        _check(
            self.d_model % self.n_heads == 0,
            f"d_model={self.d_model} is not a multiple of n_heads={self.n_heads}",
        )
        if self.n_layers is None:
            self.n_layers = math.ceil(math.log2(self.n)) + 1

    @property
    def nodes(self) -> int:
        """Positions the model encodes: the n inputs and the scratchpad."""
        return self.n + int(self.scratchpad)


class NumericAttention(nn.Module):
    """Multi-head attention with queries and keys from ``source`` (positional encodings
    or the hidden state) and values from the hidden state; no mask (every node sees all)."""

    def __init__(self, d_model: int, d_source: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.d_key = d_source
        self.qk = nn.Linear(d_source, 2 * d_source * n_heads)
        self.v = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)

    def weights(self, source: Tensor) -> Tensor:
        """Attention weights ``(..., heads, nodes, nodes)`` for ``source`` ``(..., nodes, d)``."""
        qk = self.qk(source).unflatten(-1, (self.n_heads, 2 * self.d_key)).transpose(-3, -2)
        q, k = qk.chunk(2, dim=-1)
        return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.d_key), dim=-1)

    def forward(self, x: Tensor, source: Tensor) -> tuple[Tensor, Tensor]:
        batch, nodes, d_model = x.shape
        weights = self.weights(source)
        v = self.v(x).view(batch, nodes, self.n_heads, -1).transpose(1, 2)
        y = (weights @ v).transpose(1, 2).reshape(batch, nodes, d_model)
        return self.out(y), weights


class NumericLayer(nn.Module):
    """One layer of the positional-attention papers: ``x' = MLP([x ‖ Attn(x)])`` (two-layer
    ReLU MLP, no additive residual, no LayerNorm)."""

    def __init__(self, config: NumericModelConfig, d_source: int) -> None:
        super().__init__()
        d = config.d_model
        self.attn = NumericAttention(d, d_source, config.n_heads)
        self.mlp = nn.Sequential(
            nn.Linear(2 * d, config.mlp_hidden), nn.ReLU(), nn.Linear(config.mlp_hidden, d)
        )

    def forward(self, x: Tensor, source: Tensor) -> tuple[Tensor, Tensor]:
        a, weights = self.attn(x, source)
        return self.mlp(torch.cat([x, a], dim=-1)), weights


class NumericModel(nn.Module):
    """n values in, n values out: a scalar input embedding, ``n_layers`` layers of
    :class:`NumericLayer`, a scalar readout per position. Positional kind: attention from
    the positional encodings ``P`` only (the same ``P`` in every layer), so for a given n
    the attention weights do not depend on the data; standard kind: from the hidden state,
    with the one-hot encoding concatenated to the value at the input."""

    def __init__(self, config: NumericModelConfig) -> None:
        super().__init__()
        self.config = config
        nodes, d = config.nodes, config.d_model
        if config.pe == "onehot":
            self.register_buffer("pos", torch.eye(nodes), persistent=False)
        else:
            self.pos = nn.Parameter(torch.randn(nodes, nodes) / math.sqrt(nodes))
        positional = config.kind == "positional"
        self.embed = nn.Linear(1 if positional else 1 + nodes, d)
        d_source = nodes if positional else d
        n_layers = cast(int, config.n_layers)  # an int after NumericModelConfig.__post_init__
        self.layers = nn.ModuleList(NumericLayer(config, d_source) for _ in range(n_layers))
        self.readout = nn.Linear(d, 1)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)

    def node_positions(self, n: int) -> Tensor:
        """The encodings of the nodes for n inputs: rows ``0..n-1`` and the scratchpad's
        row (the last one)."""
        _check(n <= self.config.n, f"{n} values given to a model for at most {self.config.n}")
        rows = list(range(n)) + ([self.config.nodes - 1] if self.config.scratchpad else [])
        return self.pos[rows]

    def forward(
        self, values: Tensor, return_attention: bool = False
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        """Outputs ``(batch, n)`` for inputs ``(batch, n)``; with ``return_attention`` also
        the attention weights of every layer, ``(batch, heads, nodes, nodes)`` each."""
        batch, n = values.shape
        pos = self.node_positions(n)
        x = values.unsqueeze(-1)
        if self.config.scratchpad:
            x = torch.cat([x, x.new_zeros(batch, 1, 1)], dim=1)
        if self.config.kind == "standard":
            x = torch.cat([x, pos.expand(batch, -1, -1)], dim=-1)
        h = self.embed(x)
        attention = []
        for layer in self.layers:
            h, weights = layer(h, pos if self.config.kind == "positional" else h)
            attention.append(weights.expand(batch, -1, -1, -1))
        out = self.readout(h).squeeze(-1)[:, :n]
        return (out, attention) if return_attention else out
