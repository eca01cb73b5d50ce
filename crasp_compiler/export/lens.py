"""Export a compiled model under TransformerLens' ``HookedTransformer`` names and shapes.

No TransformerLens import: the state dict and the config only follow its conventions
(``normalization_type=None``, standard positional embedding, causal attention)::

    embed.W_E            [d_vocab, d_model]          row 0 is BOS
    pos_embed.W_pos      [n_ctx, d_model]            W_P · pos(t), t = 0..n_ctx-1
    blocks.{l}.attn.W_Q  [n_heads, d_model, d_head]  (scale · w_q)^T, zero-padded
    blocks.{l}.attn.W_K, W_V                         w_k^T, w_v^T, zero-padded
    blocks.{l}.attn.W_O  [n_heads, d_head, d_model]  w_o^T, zero-padded
    blocks.{l}.attn.b_Q, b_K, b_V [n_heads, d_head], b_O [d_model]   zeros
    blocks.{l}.mlp.W_in  [d_model, d_mlp]  b_in [d_mlp]  W_out [d_mlp, d_model]  b_out [d_model]
    unembed.W_U          [d_model, d_vocab_out]      one column per named output
    unembed.b_U          [d_vocab_out]               zeros

TransformerLens computes, per block (``x`` the residual stream, ``h`` a head)::

    q = x @ W_Q[h] + b_Q[h]   (k, v likewise)
    pattern = softmax_s(q_t · k_s / attn_scale, with −inf for s > t)
    x += Σ_h (Σ_s pattern_ts v_s) @ W_O[h] + b_O
    x += act(x @ W_in + b_in) @ W_out + b_out
    logits = x @ W_U + b_U

With ``use_attn_scale=False`` (``attn_scale = 1``) and the head's ``scale`` folded into
``W_Q``, ``q_t · k_s = scale · (w_q x_t)·(w_k x_s)``, our score. Heads are zero-padded to
``d_head = max(dk, dv)`` over all heads; a layer with fewer heads gets all-zero heads (their
``W_V = W_O = 0``, so they add 0), a layer without an MLP an all-zero MLP (``act(0) = 0``
for relu and gelu_new), and ``d_mlp`` is the widest MLP (at least 1).

What fits: softmax heads with causal masks, no relative position bias, MLPs whose units
are all ReLU (``act_fn="relu"``) or all tanh-GELU (``"gelu_new"``), and no selective layer
norm. Among compiled models, ``mode="relu"`` models of programs without local relations
fit. ``heaviside`` models (Heaviside units, average-hard attention for local relations),
``layernorm`` models (selective layer norm) and ``relu`` models of programs with local
relations (relative position bias) do not: :func:`lens_state_dict` raises
:class:`CraspError` naming every obstacle, with layers and heads numbered from 1 as in
``crasp info`` and ``crasp run --trace``, and the TransformerLens name in parentheses
(layer 1 is ``blocks.0``). ``n_ctx`` is at most :data:`MAX_N_CTX`, and the positional
table ``n_ctx × d_model`` at most ``TORCH_DENSE_LIMIT`` entries.

Weights stay float64: relu-mode models use large softmax scales and steep ramps that are
exact in real arithmetic and checked in float64; cast to float32 only knowingly. Load with::

    import json, torch
    from safetensors.torch import load_file
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    config = json.load(open(out_dir / "config.json"))
    model = HookedTransformer(HookedTransformerConfig(**config["cfg"], dtype=torch.float64))
    model.load_state_dict(load_file(out_dir / "model.safetensors"), strict=False)
    logits = model(torch.tensor([[0, *token_ids]]))      # prepend BOS = id 0 yourself

(``strict=False``: only buffers such as the causal mask are absent. Do not use
``load_and_process_state_dict`` with its defaults: ``center_unembed`` changes the outputs.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from crasp_compiler.errors import CraspError, Diagnostic
from crasp_compiler.export.directory import CONFIG_FILE, write_export
from crasp_compiler.model.features import feature_matrix
from crasp_compiler.model.model import BOS, TORCH_DENSE_LIMIT, Model, densified, require_dense

FORMAT = "crasp-lens-export"
VERSION = 1
WEIGHTS_FILE = "model.safetensors"
MAX_N_CTX = 1 << 20

_WEIGHTING_NAMES = {
    "hard": "average-hard attention",
    "hard-left": "unique-hard (leftmost) attention",
    "hard-right": "unique-hard (rightmost) attention",
}
_RULE_TEXT = {
    "bool": "out > 0.5",
    "count": "round(out * (t + 1)), t = position with BOS at 0",
    "int": "round(out)",
    "value": "out",
}
_HINT = (
    "TransformerLens models need causal softmax heads without relative bias and one MLP "
    "activation (relu or gelu_new) without layer norm: compile with mode='relu' a program "
    "without local relations"
)


def _obstacles(model: Model) -> tuple[list[str], str]:
    """Every reason ``model`` does not fit, and the act_fn it would use."""
    problems: list[str] = []
    if model.inputs:
        problems.append(f"the model reads numeric inputs ({', '.join(model.inputs)})")
    units = {"relu": 0, "gelu": 0}
    for l_index, layer in enumerate(model.layers):
        for h_index, head in enumerate(layer.heads):
            where = f"layer {l_index + 1} head {h_index + 1}"
            where += f" (blocks.{l_index}.attn head {h_index})"
            if head.weighting != "softmax":
                name = _WEIGHTING_NAMES.get(head.weighting, f"{head.weighting!r} attention")
                problems.append(f"{where} uses {name}")
            if head.mask != "causal":
                problems.append(f"{where} has mask {head.mask!r} (only 'causal' fits)")
            offsets = sorted(k for k, v in head.bias.items() if v != 0)
            if offsets:
                listed = ", ".join(str(k) for k in offsets)
                problems.append(f"{where} has a relative position bias (offsets {listed})")
        if layer.mlp is None:
            continue
        mlp = f"layer {l_index + 1} MLP (blocks.{l_index}.mlp)"
        kinds: dict[str, int] = {}
        for kind in layer.mlp.activations:
            kinds[kind] = kinds.get(kind, 0) + 1
        for kind, count in kinds.items():
            if kind in units:
                units[kind] += count
            else:
                problems.append(f"{mlp} has {count} {kind} unit(s)")
        if layer.mlp.norm_groups:
            groups = len(layer.mlp.norm_groups)
            problems.append(f"{mlp} uses selective layer norm ({groups} norm group(s))")
    if units["relu"] and units["gelu"]:
        problems.append(
            f"the MLPs mix {units['relu']} relu and {units['gelu']} gelu unit(s) "
            "(TransformerLens has one act_fn)"
        )
    act_fn = "gelu_new" if units["gelu"] and not units["relu"] else "relu"
    return problems, act_fn


def _resolve_n_ctx(model: Model, n_ctx: int | None) -> tuple[int | None, str | None]:
    """``n_ctx`` (default: the guarantee + 1) when it is a sane context length, else why not."""
    if n_ctx is None:
        if model.guarantee.max_len is None:
            return None, (
                "n_ctx is required: the model's guarantee covers every length "
                f"({model.guarantee.text})"
            )
        n_ctx = model.guarantee.max_len + 1
    if isinstance(n_ctx, bool) or not isinstance(n_ctx, int | np.integer) or n_ctx < 1:
        return None, f"n_ctx must be a positive integer, not {n_ctx!r}"
    if n_ctx > MAX_N_CTX:
        return None, f"n_ctx = {n_ctx:,} is too large (at most {MAX_N_CTX:,} positions)"
    entries = int(n_ctx) * max(model.width, len(model.features), 1)
    if entries > TORCH_DENSE_LIMIT:
        return None, (
            f"n_ctx = {n_ctx:,} makes pos_embed.W_pos {entries:,} entries (at most "
            f"{TORCH_DENSE_LIMIT:,}): choose a smaller n_ctx"
        )
    return int(n_ctx), None


def lens_state_dict(
    model: Model, n_ctx: int | None = None, model_name: str = "crasp"
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The TransformerLens state dict (float64 arrays) and the JSON config of ``model``.

    ``n_ctx`` (positions, BOS included) defaults to ``guarantee.max_len + 1``; a model
    exact at every length needs it given. Raises :class:`CraspError` naming every
    obstacle when the model does not fit (see the module docstring).
    """
    require_dense(model, "the lens export")
    problems, act_fn = _obstacles(model)
    n_ctx, n_ctx_problem = _resolve_n_ctx(model, n_ctx)
    if n_ctx_problem:
        problems.append(n_ctx_problem)
    if problems:
        diagnostics = [Diagnostic(f"cannot export to TransformerLens: {p}") for p in problems]
        diagnostics[-1] = Diagnostic(diagnostics[-1].message, hint=_HINT)
        raise CraspError(diagnostics, filename="lens export")
    assert n_ctx is not None
    model = densified(model)

    d_model = model.width
    heads = [h for layer in model.layers for h in layer.heads]
    d_head = max([1] + [h.w_q.shape[0] for h in heads] + [h.w_v.shape[0] for h in heads])
    n_heads = max([1] + [len(layer.heads) for layer in model.layers])
    d_mlp = max(1, model.mlp_width)
    d_vocab, d_vocab_out = len(model.vocab), len(model.outputs)

    state: dict[str, np.ndarray] = {
        "embed.W_E": np.array(model.w_e, dtype=np.float64),
        "pos_embed.W_pos": feature_matrix(model.features, n_ctx) @ model.w_p.T,
    }
    for l_index, layer in enumerate(model.layers):
        w_q, w_k, w_v = (np.zeros((n_heads, d_model, d_head)) for _ in range(3))
        w_o = np.zeros((n_heads, d_head, d_model))
        for h_index, head in enumerate(layer.heads):
            dk, dv = head.w_q.shape[0], head.w_v.shape[0]
            w_q[h_index, :, :dk] = (head.scale * head.w_q).T
            w_k[h_index, :, :dk] = head.w_k.T
            w_v[h_index, :, :dv] = head.w_v.T
            w_o[h_index, :dv, :] = head.w_o.T
        prefix = f"blocks.{l_index}"
        state[f"{prefix}.attn.W_Q"] = w_q
        state[f"{prefix}.attn.W_K"] = w_k
        state[f"{prefix}.attn.W_V"] = w_v
        state[f"{prefix}.attn.W_O"] = w_o
        for bias in ("b_Q", "b_K", "b_V"):
            state[f"{prefix}.attn.{bias}"] = np.zeros((n_heads, d_head))
        state[f"{prefix}.attn.b_O"] = np.zeros(d_model)
        w_in, b_in = np.zeros((d_model, d_mlp)), np.zeros(d_mlp)
        w_out, b_out = np.zeros((d_mlp, d_model)), np.zeros(d_model)
        if layer.mlp is not None:
            width = layer.mlp.w1.shape[0]
            w_in[:, :width] = layer.mlp.w1.T
            b_in[:width] = layer.mlp.b1
            w_out[:width, :] = layer.mlp.w2.T
            b_out[:] = layer.mlp.b2
        state[f"{prefix}.mlp.W_in"] = w_in
        state[f"{prefix}.mlp.b_in"] = b_in
        state[f"{prefix}.mlp.W_out"] = w_out
        state[f"{prefix}.mlp.b_out"] = b_out
    w_u = np.zeros((d_model, d_vocab_out))
    for column, out in enumerate(model.outputs):
        w_u[:, column] = out.weights
    state["unembed.W_U"] = w_u
    state["unembed.b_U"] = np.zeros(d_vocab_out)
    state = {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in state.items()}

    cfg = {
        "model_name": model_name,
        "n_layers": len(model.layers),
        "d_model": d_model,
        "n_ctx": n_ctx,
        "d_head": d_head,
        "n_heads": n_heads,
        "d_mlp": d_mlp,
        "d_vocab": d_vocab,
        "d_vocab_out": d_vocab_out,
        "act_fn": act_fn,
        "normalization_type": None,
        "attn_only": False,
        "positional_embedding_type": "standard",
        "use_attn_scale": False,
        "default_prepend_bos": True,
    }
    crasp = {
        "vocab": list(model.vocab),
        "bos_id": 0,
        "note": (
            f"Token id 0 ({BOS}) must be prepended to every input: position 0 is BOS and "
            "tokens sit at positions 1..n. Output column k of the logits is outputs[k]; "
            "apply its decision rule. Weights are float64: build the model with "
            "HookedTransformerConfig(**cfg, dtype=torch.float64) and load the state dict "
            "with strict=False (without centering the unembed)."
        ),
        "dtype": "float64",
        "outputs": [
            {"name": out.name, "column": k, "rule": out.rule, "decision": _RULE_TEXT[out.rule]}
            for k, out in enumerate(model.outputs)
        ],
        "accept": model.accept,
        "guarantee": {"text": model.guarantee.text, "max_len": model.guarantee.max_len},
        "positional_features": list(model.features),
        "residual": list(model.residual),
        "mode": model.options.get("mode"),
        "source": model.source,
    }
    return state, {"format": FORMAT, "version": VERSION, "cfg": cfg, "crasp": crasp}


def export_lens(
    model: Model, out_dir: str | Path, n_ctx: int | None = None, model_name: str = "crasp"
) -> Path:
    """Write ``out_dir/model.safetensors`` (float64) and ``out_dir/config.json``.

    The config holds ``cfg`` (``HookedTransformerConfig`` keyword arguments) and ``crasp``
    (vocabulary, outputs and decision rules, guarantee, residual labels, source).
    Requires the ``safetensors`` package.
    """
    state, config = lens_state_dict(model, n_ctx, model_name=model_name)
    try:
        from safetensors.numpy import save_file
    except ImportError:
        raise CraspError(
            "the TransformerLens export needs the safetensors package (pip install safetensors)"
        ) from None

    def write(directory: Path) -> None:
        save_file(state, str(directory / WEIGHTS_FILE), metadata={"format": FORMAT})
        (directory / CONFIG_FILE).write_text(json.dumps(config, indent=1), encoding="utf-8")

    return write_export(out_dir, write)
