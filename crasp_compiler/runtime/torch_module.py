"""The model family as a ``torch.nn.Module`` (equations in :mod:`crasp_compiler.model.model`).

``TorchTransformer(model)`` holds every weight as a parameter under names that hooks and
interpretability tools can address::

    embed.w_e                     (V, d)      token embedding (row 0 is BOS)
    pos.w_p                       (d, F)      positional features -> residual
    blocks[i].attn.heads[h]       w_q, w_k (dk, d), w_v (dv, d), w_o (d, dv)
    blocks[i].mlp                 w1 (h, d), b1 (h,), w2 (d, h), b2 (d,)
    readout.weight                (K, d)      one row per named output

``forward(ids, lengths)`` takes BOS-prefixed, right-padded token ids ``(B, T)`` and
returns the raw outputs ``(B, T, K)``. Uniform heads run as float64 prefix sums; causal
softmax heads without relative bias use ``scaled_dot_product_attention`` (fused kernels,
no T × T matrix); heads whose keys vanish at tokens (offset lookups) run in O(T) from
prefix sums; every other head processes queries in chunks, so memory stays bounded at any
length. Padding never reaches a real position: keys beyond a sequence's length
are masked.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from crasp_compiler.errors import CraspError
from crasp_compiler.model.features import feature_matrix
from crasp_compiler.model.model import (
    MLP,
    Head,
    Layer,
    Model,
    Output,
    densified,
    require_dense,
    token_ids,
)
from crasp_compiler.runtime.numpy_exec import (
    HARD_TOLERANCE,
    SCORE_BUDGET,
    beyond_guarantee,
    numeric_matrix,
)


def torch_device(name: str, dtype: str = "float64"):
    """The torch device ``name``, checked by computing on it: CraspError unless torch can
    run ``dtype`` arithmetic there (meta tensors hold no values; backends that are not
    built in or have no hardware fail)."""
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as err:
        raise CraspError(f"--device {name!r}: {err}") from None
    if device.type == "meta":
        raise CraspError(f"--device {name!r}: meta tensors hold no values (use cpu or cuda)")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CraspError(
            f"--device {name!r}: CUDA is not available here (torch.cuda.is_available() is "
            "False); use cpu"
        )
    try:
        probe = torch.ones(2, dtype=getattr(torch, dtype), device=device)
        works = float((probe @ probe).cpu()) == 2.0
    except Exception as err:  # unbuilt or absent backends fail in many ways
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise CraspError(f"--device {name!r}: torch cannot compute there ({first[:200]})") from None
    if not works:
        raise CraspError(f"--device {name!r}: torch computed a wrong result there")
    return device


class Embedding(nn.Module):
    def __init__(self, w_e: np.ndarray) -> None:
        super().__init__()
        self.w_e = nn.Parameter(torch.tensor(w_e))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.w_e[ids]


class NumericInputs(nn.Module):
    """``W_X · v_t`` for the model's numeric input channels ``names``."""

    def __init__(self, names: list[str], w_x: np.ndarray) -> None:
        super().__init__()
        self.names = list(names)
        self.w_x = nn.Parameter(torch.tensor(w_x))

    def forward(self, values: torch.Tensor) -> torch.Tensor:
        return values.to(self.w_x.dtype) @ self.w_x.T


class PositionalFeatures(nn.Module):
    """``W_P · pos(t)`` for t = 0..T-1; the features are recomputed for every length."""

    def __init__(self, names: list[str], w_p: np.ndarray) -> None:
        super().__init__()
        self.names = list(names)
        self.w_p = nn.Parameter(torch.tensor(w_p))

    def forward(self, size: int) -> torch.Tensor:
        table = torch.tensor(feature_matrix(self.names, size), device=self.w_p.device)
        return table.to(self.w_p.dtype) @ self.w_p.T


class AttentionHead(nn.Module):
    """``Σ_s α_ts W_V x_s`` with scores ``scale·(W_Q x_t)·(W_K x_s) + bias(t − s)``;
    returns the head's contribution ``W_O(…)`` to the residual."""

    def __init__(self, head: Head) -> None:
        super().__init__()
        for key in ("w_q", "w_k", "w_v", "w_o"):
            setattr(self, key, nn.Parameter(torch.tensor(getattr(head, key))))
        self.scale = float(head.scale)
        self.bias = dict(head.bias)
        self.weighting = head.weighting
        self.mask = head.mask
        self.label = head.label

    def _shortcuts(self) -> bool:
        """Whether the data-dependent fast paths (uniform heads, keys only at BOS) may be
        taken: they read the current weights, and are skipped while gradients flow to the
        scores (a zero query or key still has a gradient)."""
        if self.mask != "causal" or self.weighting not in ("softmax", "hard"):
            return False
        tracked = torch.is_grad_enabled() and (self.w_q.requires_grad or self.w_k.requires_grad)
        return not tracked

    def _uniform(self) -> bool:
        no_scores = not self.w_q.any() or not self.w_k.any() or self.scale == 0
        return no_scores and not any(self.bias.values())

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        v = x @ self.w_v.T
        shortcuts = self._shortcuts()
        if shortcuts and self._uniform():
            # Prefix sums in float64: a float32 running sum stops counting at 2^24.
            sums = torch.cumsum(v.double(), dim=1)
            steps = torch.arange(1, x.shape[1] + 1, device=x.device, dtype=torch.float64)
            mixed = (sums / steps[None, :, None]).to(x.dtype)
        elif self.weighting == "softmax" and self.mask == "causal" and not self.bias:
            q = (x @ self.w_q.T)[:, None]
            k = (x @ self.w_k.T)[:, None]
            mixed = F.scaled_dot_product_attention(
                q, k, v[:, None], is_causal=True, scale=self.scale
            )[:, 0]
        else:
            q, k = x @ self.w_q.T, x @ self.w_k.T
            if shortcuts and self._keys_only_at_bos(k, lengths):
                mixed = self._bos_keyed(q, k, v).to(x.dtype)
            else:
                mixed = self._chunked(x, q, k, v, lengths)
        return mixed @ self.w_o.T

    def _keys_only_at_bos(self, k: torch.Tensor, lengths: torch.Tensor) -> bool:
        """Whether the keys are zero at every token (only BOS and offsets score)."""
        positions = torch.arange(k.shape[1], device=k.device)
        tokens = (positions[None, :] >= 1) & (positions[None, :] <= lengths[:, None])
        return not bool(k[tokens].any())

    def _bos_keyed(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """O(T · |offsets|) evaluation from prefix sums, in float64; the equations are in
        :func:`crasp_compiler.runtime.numpy_exec._bos_keyed`."""
        size = v.shape[1]
        t = torch.arange(size, device=v.device)
        v = v.double()
        v0 = v[:, :1]
        bos = self.scale * torch.einsum("btk,bk->bt", q.double(), k[:, 0].double())
        offsets = [(c, value) for c, value in sorted(self.bias.items()) if c >= 0]
        for c, value in offsets:
            bos = bos + value * (t == c).double()[None]
        keyed = []
        for c, value in offsets:
            valid = t - c >= 1
            shifted = torch.zeros_like(v)
            if c < size:
                shifted[:, c:] = v[:, : size - c]
            keyed.append((valid, value, torch.where(valid[None, :, None], shifted, 0.0)))
        plain = t - sum((valid.long() for valid, _, _ in keyed), torch.zeros_like(t))
        plain_sum = torch.cumsum(v, dim=1) - v0
        for _, _, values in keyed:
            plain_sum = plain_sum - values
        none = torch.full_like(bos[0], -torch.inf)
        top = torch.maximum(bos, torch.where(plain > 0, 0.0, none)[None])
        for valid, value, _ in keyed:
            top = torch.maximum(top, torch.where(valid, value, none)[None])
        if self.weighting == "softmax":
            w_bos = torch.exp(bos - top)
            w_keyed = [torch.where(valid, torch.exp(value - top), 0.0) for valid, value, _ in keyed]
            w_plain = torch.exp(-top)
        else:
            tolerance = HARD_TOLERANCE[np.float64 if q.dtype == torch.float64 else np.float32]
            w_bos = (bos >= top - tolerance).double()
            w_keyed = [(valid & (value >= top - tolerance)).double() for valid, value, _ in keyed]
            w_plain = (top - tolerance <= 0).double()
        total = w_bos + w_plain * plain[None]
        mixed = w_bos[..., None] * v0 + w_plain[..., None] * plain_sum
        for weight, (_, _, values) in zip(w_keyed, keyed, strict=True):
            total = total + weight
            mixed = mixed + weight[..., None] * values
        return mixed / total[..., None]

    def _chunked(
        self,
        x: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        lengths: torch.Tensor,
    ) -> torch.Tensor:
        batch, size, _ = x.shape
        cols = torch.arange(size, device=x.device)
        tolerance = HARD_TOLERANCE[np.float64 if x.dtype == torch.float64 else np.float32]
        out = torch.zeros(batch, size, v.shape[-1], dtype=x.dtype, device=x.device)
        chunk = max(1, SCORE_BUDGET // max(1, batch * size))
        for start in range(0, size, chunk):
            rows = cols[start : start + chunk]
            scores = self.scale * torch.einsum("btk,bsk->bts", q[:, rows], k)
            offsets = rows[:, None] - cols[None, :]
            for offset, value in self.bias.items():
                scores = scores + value * (offsets == offset).to(x.dtype)[None]
            allowed = self._allowed(rows, cols, lengths)
            scores = scores.masked_fill(~allowed, -torch.inf)
            top = scores.amax(-1, keepdim=True)
            top = torch.where(torch.isinf(top), torch.zeros_like(top), top)
            if self.weighting == "softmax":
                weights = torch.where(allowed, torch.exp(scores - top), 0.0)
            else:
                weights = (allowed & (scores >= top - tolerance)).to(x.dtype)
                if self.weighting in ("hard-left", "hard-right"):
                    weights = self._unique(weights, allowed)
            total = weights.sum(-1, keepdim=True)
            weights = weights / torch.where(total == 0, torch.ones_like(total), total)
            out[:, rows] = weights @ v
        return out

    def _allowed(self, rows: torch.Tensor, cols: torch.Tensor, lengths: torch.Tensor):
        t, s = rows[:, None], cols[None, :]
        if self.mask == "causal":
            allowed = s <= t
        elif self.mask == "strict":
            allowed = s < t
        elif self.mask == "past":
            allowed = s >= t
        elif self.mask == "strict-past":
            allowed = s > t
        else:
            allowed = torch.ones(len(rows), len(cols), dtype=torch.bool, device=rows.device)
        return allowed[None] & (cols[None, None, :] <= lengths[:, None, None])

    def _unique(self, weights: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """Keep only the leftmost (``hard-left``) or rightmost maximal key."""
        size = weights.shape[-1]
        if self.weighting == "hard-left":
            pick = weights.argmax(-1)
        else:
            pick = size - 1 - weights.flip(-1).argmax(-1)
        one_hot = F.one_hot(pick, size).to(weights.dtype)
        return torch.where(allowed, one_hot, 0.0)


class Attention(nn.Module):
    """The heads of one layer; their contributions add."""

    def __init__(self, heads: list[Head]) -> None:
        super().__init__()
        self.heads = nn.ModuleList(AttentionHead(h) for h in heads)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        update = torch.zeros_like(x)
        for head in self.heads:
            update = update + head(x, lengths)
        return update


class FeedForward(nn.Module):
    """``W_2 act(N(W_1 x + b_1)) + b_2`` with per-unit activations and the selective
    layer norm N over ``norm_groups`` (ε = 0; a zero-variance group gives 0)."""

    def __init__(self, mlp: MLP) -> None:
        super().__init__()
        for key in ("w1", "b1", "w2", "b2"):
            setattr(self, key, nn.Parameter(torch.tensor(getattr(mlp, key))))
        self.activations = list(mlp.activations)
        self.labels = list(mlp.labels)
        self.norm_groups = [list(g) for g in mlp.norm_groups]
        kinds = np.array(self.activations)
        for kind in ("relu", "heaviside", "gelu"):
            self.register_buffer(f"is_{kind}", torch.tensor(kinds == kind), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x @ self.w1.T + self.b1
        if self.norm_groups:
            z = z.clone()
            for group in self.norm_groups:
                part = z[..., group]
                centred = part - part.mean(-1, keepdim=True)
                std = centred.pow(2).mean(-1, keepdim=True).sqrt()
                safe = torch.where(std > 0, std, torch.ones_like(std))
                z[..., group] = torch.where(std > 0, centred / safe, torch.zeros_like(centred))
        hidden = torch.where(self.is_relu, torch.relu(z), z)
        hidden = torch.where(self.is_heaviside, (z >= 0).to(z.dtype), hidden)
        hidden = torch.where(self.is_gelu, F.gelu(z, approximate="tanh"), hidden)
        return hidden @ self.w2.T + self.b2


class Block(nn.Module):
    def __init__(self, layer: Layer) -> None:
        super().__init__()
        self.attn = Attention(layer.heads) if layer.heads else None
        self.mlp = FeedForward(layer.mlp) if layer.mlp is not None else None

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        if self.attn is not None:
            x = x + self.attn(x, lengths)
        if self.mlp is not None:
            x = x + self.mlp(x)
        return x


class TorchTransformer(nn.Module):
    """A compiled model as a torch module; ``to_model()`` converts back."""

    def __init__(self, model: Model) -> None:
        super().__init__()
        require_dense(model, "the torch module")
        model = densified(model)
        self.embed = Embedding(model.w_e)
        self.pos = PositionalFeatures(model.features, model.w_p)
        # only a model with numeric inputs has this submodule (and numeric.w_x)
        self.numeric = NumericInputs(model.inputs, model.w_x) if model.inputs else None
        self.blocks = nn.ModuleList(Block(layer) for layer in model.layers)
        weights = np.stack([o.weights for o in model.outputs]) if model.outputs else None
        self.readout = nn.Linear(model.width, len(model.outputs), bias=False, dtype=torch.float64)
        if weights is not None:
            with torch.no_grad():
                self.readout.weight.copy_(torch.tensor(weights))
        self.output_names = [o.name for o in model.outputs]
        self.output_rules = [o.rule for o in model.outputs]
        self.vocab = list(model.vocab)
        self.residual = list(model.residual)
        self.guarantee = model.guarantee
        self.accept = model.accept
        self.options, self.source, self.info = dict(model.options), model.source, dict(model.info)

    # ------------------------------------------------------------------ running

    def forward(
        self,
        ids: torch.Tensor,
        lengths: torch.Tensor | None = None,
        values: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Raw outputs ``(B, T, K)`` for BOS-prefixed ids ``(B, T)``; ``lengths`` (B,)
        counts the tokens after BOS (default: no padding); ``values`` ``(B, T, m)`` are the
        numeric inputs of a model that has them (0 at BOS and padding; see ``encode``)."""
        batch, size = ids.shape
        if batch == 0:
            dtype = self.embed.w_e.dtype
            return torch.zeros(0, size, len(self.output_names), device=ids.device, dtype=dtype)
        if lengths is None:
            lengths = torch.full((batch,), size - 1, device=ids.device)
        x = self.embed(ids) + self.pos(size)[None]
        if self.numeric is not None:
            if values is None:
                raise CraspError(
                    f"this model reads numeric inputs ({', '.join(self.numeric.names)}): "
                    "give values"
                )
            x = x + self.numeric(values)
        for block in self.blocks:
            x = block(x, lengths)
        return self.readout(x)

    def encode(
        self, inputs: Sequence[Sequence[str]], device: torch.device | str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Token sequences (without BOS) to right-padded ids ``(B, T)`` and lengths."""
        rows = []
        for tokens in inputs:
            try:
                rows.append(token_ids(self.vocab, list(tokens)))
            except ValueError as err:
                raise CraspError(str(err), filename="input") from None
        lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
        size = 1 + (int(lengths.max()) if rows else 0)
        ids = torch.zeros(len(rows), size, dtype=torch.long)
        for b, row in enumerate(rows):
            ids[b, 1 : 1 + len(row)] = torch.tensor(row, dtype=torch.long)
        device = device if device is not None else self.embed.w_e.device
        return ids.to(device), lengths.to(device)

    def encode_values(self, values: Sequence[np.ndarray], lengths: torch.Tensor) -> torch.Tensor:
        """Numeric inputs, one array ``(len, m)`` per sequence, to the ``(B, T, m)`` tensor
        ``forward`` takes (0 at BOS and padding)."""
        names = self.numeric.names if self.numeric is not None else []
        table = numeric_matrix(names, lengths.cpu().numpy(), values)
        return torch.tensor(table, device=self.embed.w_e.device)

    def decide(
        self, raw: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        """Apply each output's decision rule to raw outputs ``(B, T, K)``; with
        ``lengths``, the padding beyond each sequence's end reads False, 0 or NaN."""
        steps = torch.arange(1, raw.shape[1] + 1, device=raw.device, dtype=torch.float64)
        padding = None
        if lengths is not None:
            positions = torch.arange(raw.shape[1], device=raw.device)
            padding = positions[None, :] > lengths.to(raw.device)[:, None]
        values = {}
        for k, (name, rule) in enumerate(zip(self.output_names, self.output_rules, strict=True)):
            column = raw[..., k]
            if rule == "bool":
                decided = column > 0.5
            elif rule == "count":
                decided = torch.round(column.double() * steps[None]).to(torch.long)
            elif rule == "int":
                decided = torch.round(column).to(torch.long)
            else:
                decided = column
            if padding is not None:
                pad = torch.tensor(
                    float("nan") if rule == "value" else 0, dtype=decided.dtype, device=raw.device
                )
                decided = torch.where(padding, pad, decided)
            values[name] = decided
        return values

    def final(self, raw: torch.Tensor, lengths: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each output's decided value at each sequence's last position ``lengths[b]``
        (not the last column, which is padding for shorter sequences): ``{name: (B,)}``."""
        rows = torch.arange(raw.shape[0], device=raw.device)
        last = lengths.to(raw.device).long()
        return {name: value[rows, last] for name, value in self.decide(raw, lengths).items()}

    @torch.no_grad()
    def run(
        self,
        inputs: Sequence[Sequence[str]],
        on_overlength: str = "error",
        values: Sequence[np.ndarray] | None = None,
    ) -> dict[str, torch.Tensor]:
        """Decided outputs ``{name: (B, T)}`` for token sequences, like the numpy ``run``
        (``on_overlength``: ``"error"``, ``"warn"`` or ``"ignore"``; ``values``: numeric
        inputs)."""
        if on_overlength not in ("error", "warn", "ignore"):
            raise ValueError(f"on_overlength must be error, warn or ignore, not {on_overlength!r}")
        ids, lengths = self.encode(inputs)
        longest = int(lengths.max()) if len(lengths) else 0
        dtype = str(self.embed.w_e.dtype).removeprefix("torch.")
        problems = [self.guarantee.length_problem(longest, dtype)]
        numeric = None
        if self.numeric is not None:
            numeric = self.encode_values(values, lengths)
            problems += [
                self.guarantee.value_problem(name, numeric[..., k].cpu().numpy())
                for k, name in enumerate(self.numeric.names)
            ]
        beyond_guarantee([p for p in problems if p], on_overlength)
        return self.decide(self(ids, lengths, numeric), lengths)

    # ------------------------------------------------------------------ conversion

    def to_model(self) -> Model:
        """The current weights as a :class:`Model` (for saving or the numpy executor)."""

        def array(p: torch.Tensor) -> np.ndarray:
            return p.detach().to("cpu", torch.float64).numpy().copy()

        layers = []
        for block in self.blocks:
            heads = []
            for h in block.attn.heads if block.attn is not None else []:
                heads.append(
                    Head(
                        array(h.w_q),
                        array(h.w_k),
                        array(h.w_v),
                        array(h.w_o),
                        h.scale,
                        dict(h.bias),
                        h.weighting,
                        h.mask,
                        h.label,
                    )
                )
            mlp = None
            if block.mlp is not None:
                m = block.mlp
                mlp = MLP(
                    array(m.w1),
                    array(m.b1),
                    array(m.w2),
                    array(m.b2),
                    list(m.activations),
                    list(m.labels),
                    [list(g) for g in m.norm_groups],
                )
            layers.append(Layer(heads, mlp))
        readout = array(self.readout.weight)
        outputs = [
            Output(name, readout[k], rule)
            for k, (name, rule) in enumerate(zip(self.output_names, self.output_rules, strict=True))
        ]
        return Model(
            vocab=list(self.vocab),
            w_e=array(self.embed.w_e),
            features=list(self.pos.names),
            w_p=array(self.pos.w_p),
            inputs=list(self.numeric.names) if self.numeric is not None else [],
            w_x=array(self.numeric.w_x) if self.numeric is not None else None,
            layers=layers,
            outputs=outputs,
            residual=list(self.residual),
            guarantee=copy.deepcopy(self.guarantee),
            accept=self.accept,
            options=dict(self.options),
            source=self.source,
            info=dict(self.info),
        )
