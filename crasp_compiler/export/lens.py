"""Export a compiled model under TransformerLens' (``HookedTransformer``) names and shapes.

No TransformerLens import here: the state dict and the config only follow its conventions
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
    pattern = softmax_s(q_t · k_s / √d_head, with −inf for s > t)
    x += Σ_h (Σ_s pattern_ts v_s) @ W_O[h] + b_O
    x += act(x @ W_in + b_in) @ W_out + b_out
    logits = x @ W_U + b_U

The config says ``use_attn_scale=True`` (divide by ``√d_head``, what every TransformerLens
version does; 4.x divides by it even under ``use_attn_scale=False``), and ``W_Q`` holds
``scale · √d_head · w_q``, so ``q_t · k_s / √d_head = scale · (w_q x_t)·(w_k x_s)``, our
score. Heads are zero-padded to
``d_head = max(dk, dv)`` over all heads; a layer with fewer heads gets all-zero heads (their
``W_V = W_O = 0``, so they add 0), a layer without an MLP an all-zero MLP (``act(0) = 0``
for relu and gelu_new), and ``d_mlp`` is the widest MLP (at least 1).

What fits: softmax heads with causal masks, no relative position bias, MLPs whose units
are all ReLU (``act_fn="relu"``) or all tanh-GELU (``"gelu_new"``), and no selective layer
norm. Among compiled models, every ``mode="relu"`` C-RASP model fits (its local
relations are softmax lookups on absolute positions). ``heaviside`` models (Heaviside
units, average-hard attention with a relative position bias for local relations) and
``layernorm`` models (selective layer norm) do not: :func:`lens_state_dict` raises
:class:`CraspError` naming every obstacle, with layers and heads numbered from 1 as in
``crasp info`` and ``crasp run --trace``, and the TransformerLens name in parentheses
(layer 1 is ``blocks.0``). ``n_ctx`` is at most :data:`MAX_N_CTX`, and the positional
table ``n_ctx × d_model`` at most ``TORCH_DENSE_LIMIT`` entries.

Weights stay float64: relu-mode models use large softmax scales and steep ramps that are
exact in real arithmetic and checked in float64; cast to float32 only knowingly. Load
into TransformerLens with :func:`crasp_compiler.export.lens_loader.to_transformer_lens`
(docs/transformer-lens.md: versions, the manual recipe, the traps: never centre the
unembed).

The config's ``crasp`` section also holds the model's header (``model``, as in a ``.npz``
file, without the arrays) and each head's ``(dk, dv)`` (``head_dims``):
:func:`load_lens_export` rebuilds a crasp :class:`Model` from the directory (the
positional table becomes ``onehot:t`` features, ``t < n_ctx``, and the guarantee is capped
at ``n_ctx − 1`` tokens), so ``crasp check`` and ``crasp run`` read lens exports.

The directory also holds ``tokenizer.json`` (:func:`tokenizer_json`): the Hugging Face
``tokenizers`` file of the vocabulary, which ``tokenizers.Tokenizer.from_file`` and
``PreTrainedTokenizerFast(tokenizer_file=...)`` read and the loader attaches to the
TransformerLens model. A reader refuses one that is not the vocabulary's; an export
written without one is read as before.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from crasp_compiler.errors import CraspError, Diagnostic, shown_int
from crasp_compiler.export.directory import CONFIG_FILE, write_export
from crasp_compiler.files import json_nesting
from crasp_compiler.model.features import feature_matrix, onehot
from crasp_compiler.model.io import (
    MAX_HEADER_CHARS,
    MAX_HEADER_DEPTH,
    byte_budget,
    hidden_units,
    model_from_parts,
    model_parts,
    occupants_header,
)
from crasp_compiler.model.model import (
    BOS,
    TORCH_DENSE_LIMIT,
    Activation,
    Model,
    dense,
    densified,
    require_dense,
)

FORMAT = "crasp-lens-export"
VERSION = 2
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
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
# The cfg fields (TransformerLens config keywords) a reader accepts. The export writes the
# sizes and these fields; a field that changes what TransformerLens builds (layer norm,
# rotary positions, gated or parallel MLPs, another attention scale …) is accepted only
# at the value under which it computes what crasp does, and one that changes nothing
# (names, hooks, initialisation) at any value. Any other field is refused: the model it
# builds could differ from the one crasp checks. ``act_fn`` must be the one the MLP units
# of the model header have (relu, or gelu_new for tanh-GELU units).
_SIZES = ("n_layers", "d_model", "n_ctx", "d_head", "n_heads", "d_mlp", "d_vocab", "d_vocab_out")
_WRITTEN = {
    "normalization_type": None,
    "attn_only": False,
    "positional_embedding_type": "standard",
    "use_attn_scale": True,
    "default_prepend_bos": True,
}
_NEUTRAL: dict[str, object] = {
    "attn_scale": -1.0,
    "attention_dir": "causal",
    "parallel_attn_mlp": False,
    "gated_mlp": False,
    "final_rms": False,
    "uses_rms_norm": False,
    "post_embedding_ln": False,
    "use_normalization_before_and_after": False,
    "layer_norm_folding": False,
    "rotary_dim": None,
    "use_local_attn": False,
    "window_size": None,
    "attn_types": None,
    "scale_attn_by_inverse_layer_idx": False,
    "attn_scores_soft_cap": -1.0,
    "output_logits_soft_cap": -1.0,
    "use_qk_norm": False,
    "n_key_value_heads": None,
    "ungroup_grouped_query_attention": False,
    "num_experts": None,
    "experts_per_token": None,
    "tie_word_embeddings": False,
    "scale_embedding": None,
    "relative_attention_max_distance": None,
    "relative_attention_num_buckets": None,
    "per_layer_head_dim": None,
    "per_layer_num_key_value_heads": None,
    "original_architecture": None,
    "architecture": None,
    "load_in_4bit": False,
    "trust_remote_code": False,
    "n_devices": 1,
}
_INERT = frozenset(
    {
        "model_name",
        "seed",
        "init_mode",
        "initializer_range",
        "init_weights",
        "use_attn_result",
        "use_split_qkv_input",
        "use_hook_mlp_in",
        "use_attn_in",
        "use_hook_tokens",
        "n_params",
        "eps",  # read by layer norms only, and there are none
    }
)
_ACT_FNS = {"relu": "relu", "gelu": "gelu_new"}  # crasp activation -> TransformerLens act_fn

_HINT = (
    "TransformerLens models need causal softmax heads without relative bias and one MLP "
    "activation (relu or gelu_new) without layer norm: compile with mode='relu'"
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
                problems.append(f"{where} has mask {str(head.mask)!r} (only 'causal' fits)")
            offsets = sorted(k for k, v in head.bias.items() if v != 0)
            if offsets:
                listed = ", ".join(str(k) for k in offsets)
                problems.append(f"{where} has a relative position bias (offsets {listed})")
        if layer.mlp is None:
            continue
        mlp = f"layer {l_index + 1} MLP (blocks.{l_index}.mlp)"
        kinds: dict[Activation, int] = {}
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
    act_fn = _ACT_FNS["gelu"] if units["gelu"] and not units["relu"] else _ACT_FNS["relu"]
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
    model = densified(model)  # below, dense(w) is w itself: it only narrows the type

    d_model = model.width
    heads = [h for layer in model.layers for h in layer.heads]
    d_head = max([1] + [h.w_q.shape[0] for h in heads] + [h.w_v.shape[0] for h in heads])
    n_heads = max([1] + [len(layer.heads) for layer in model.layers])
    d_mlp = max(1, model.mlp_width)
    d_vocab, d_vocab_out = len(model.vocab), len(model.outputs)

    state: dict[str, np.ndarray] = {
        "embed.W_E": np.array(model.w_e, dtype=np.float64),
        "pos_embed.W_pos": feature_matrix(model.features, n_ctx) @ dense(model.w_p).T,
    }
    for l_index, layer in enumerate(model.layers):
        w_q, w_k, w_v = (np.zeros((n_heads, d_model, d_head)) for _ in range(3))
        w_o = np.zeros((n_heads, d_head, d_model))
        for h_index, head in enumerate(layer.heads):
            dk, dv = head.w_q.shape[0], head.w_v.shape[0]
            w_q[h_index, :, :dk] = (head.scale * np.sqrt(d_head) * dense(head.w_q)).T
            w_k[h_index, :, :dk] = dense(head.w_k).T
            w_v[h_index, :, :dv] = dense(head.w_v).T
            w_o[h_index, :dv, :] = dense(head.w_o).T
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
            w_in[:, :width] = dense(layer.mlp.w1).T
            b_in[:width] = layer.mlp.b1
            w_out[:width, :] = dense(layer.mlp.w2).T
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
        "use_attn_scale": True,
        "default_prepend_bos": True,
    }
    crasp = {
        "vocab": list(model.vocab),
        "bos_id": 0,
        "note": (
            f"Token id 0 ({BOS}) must be prepended to every input: position 0 is BOS and "
            "tokens sit at positions 1..n. Output column k of the logits is outputs[k]; "
            "apply its decision rule. Weights are float64: build the model with "
            "a float64 model from cfg, and never centre the unembed (no weight processing); "
            "see crasp_compiler.export.lens_loader.to_transformer_lens."
        ),
        "dtype": "float64",
        "outputs": _outputs_section(model),
        "accept": model.accept,
        "guarantee": {"text": model.guarantee.text, "max_len": model.guarantee.max_len},
        "positional_features": list(model.features),
        "residual": list(model.residual),
        "occupants": occupants_header(model.occupants),
        "mode": model.options.get("mode"),
        "source": model.source,
        "head_dims": [
            [[h.w_q.shape[0], h.w_v.shape[0]] for h in layer.heads] for layer in model.layers
        ],
        "model": model_parts(model, dense_only=True)[0],
    }
    return state, {"format": FORMAT, "version": VERSION, "cfg": cfg, "crasp": crasp}


def _outputs_section(model: Model) -> list[dict[str, Any]]:
    """The config's ``crasp.outputs``: per logit column, its output and decision rule."""
    return [
        {"name": out.name, "column": k, "rule": out.rule, "decision": _RULE_TEXT[out.rule]}
        for k, out in enumerate(model.outputs)
    ]


def tokenizer_json(vocab: Sequence[str]) -> dict[str, Any]:
    """The ``tokenizer.json`` (Hugging Face ``tokenizers`` format) of a model's
    vocabulary: word-level over whitespace-separated words, ids as the model numbers
    them, BOS (id 0, a special token) prepended by the post-processor. A word outside
    the vocabulary is refused (``WordLevel error: Missing [UNK] token``): the unknown
    token the format requires is a name that is not in the vocabulary."""
    bos = vocab[0]
    unknown = "<unk>"
    while unknown in vocab:
        unknown = f"<{unknown}>"
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": 0,
                "content": bos,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": bos, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
            ],
            "pair": [
                {"Sequence": {"id": "A", "type_id": 0}},
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": {bos: {"id": bos, "ids": [0], "tokens": [bos]}},
        },
        "decoder": None,
        "model": {
            "type": "WordLevel",
            "vocab": {word: i for i, word in enumerate(vocab)},
            "unk_token": unknown,
        },
    }


def export_lens(
    model: Model, out_dir: str | Path, n_ctx: int | None = None, model_name: str = "crasp"
) -> Path:
    """Write ``out_dir/model.safetensors`` (float64), ``out_dir/config.json`` and
    ``out_dir/tokenizer.json`` (:func:`tokenizer_json`).

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
        tokenizer = json.dumps(tokenizer_json(model.vocab), indent=1, ensure_ascii=False)
        (directory / TOKENIZER_FILE).write_text(tokenizer, encoding="utf-8")

    return write_export(out_dir, write)


def read_lens_config(path: str | Path) -> dict[str, Any] | None:
    """The config of the lens export at ``path`` (a directory or its ``config.json``), or
    None when it is not a lens export; an unreadable config raises :class:`CraspError`."""
    path = Path(path)
    config_path = path if path.name == CONFIG_FILE else path / CONFIG_FILE
    try:
        size = config_path.stat().st_size
        if size > MAX_HEADER_CHARS:
            raise ValueError(f"{size:,} bytes (at most {MAX_HEADER_CHARS:,})")
        text = config_path.read_text(encoding="utf-8")
        config = json.loads(text)
    except RecursionError:
        where = json_nesting(text, MAX_HEADER_DEPTH)
        raise CraspError(
            f"cannot read export config: it nests deeper than {MAX_HEADER_DEPTH} levels"
            + (f" (in field {where})" if where else ""),
            filename=str(config_path),
        ) from None
    except (OSError, ValueError) as err:
        raise CraspError(f"cannot read export config: {err}", filename=str(config_path)) from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        return None
    version = config.get("version")
    if type(version) is not int or version != VERSION:
        raise CraspError(
            f"unsupported lens export version {version!r} (this version reads "
            f"{VERSION}; export the model again)",
            filename=str(config_path),
        )
    problem = _cfg_problem(config.get("cfg")) or _crasp_problem(config.get("crasp"))
    if problem:
        raise CraspError(f"invalid lens export: {problem}", filename=str(config_path))
    return config


def _same(value: object, want: object) -> bool:
    """JSON ``value`` equals ``want`` as the same kind of value (``true`` is not ``1``,
    ``-1`` is ``-1.0``)."""
    if want is None or isinstance(want, bool | str):
        return type(value) is type(want) and value == want
    return type(value) in (int, float) and value == want


def _json(value: object) -> str:
    """``value`` as the config writes it, cut to a readable length."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _cfg_problem(cfg: object) -> str | None:
    """Why the config's ``cfg`` does not describe the model crasp computes (None if it
    does; see :data:`_WRITTEN`): its sizes must be integers, each field known."""
    if not isinstance(cfg, dict):
        return "'cfg' is not a JSON object"
    for key in _SIZES:
        value = cfg.get(key)
        least = 0 if key in ("n_layers", "d_vocab_out") else 1
        if type(value) is not int or value < least:  # the weights' shapes bound them
            return f"cfg field {key!r} is {_json(value)}, not a size (an integer >= {least})"
    act_fn = cfg.get("act_fn")
    if act_fn not in _ACT_FNS.values():
        return (
            f"cfg field 'act_fn' is {_json(act_fn)}: TransformerLens would compute another "
            f"activation than crasp models have ({', '.join(map(_json, _ACT_FNS.values()))})"
        )
    for key, want in (*_WRITTEN.items(), *_NEUTRAL.items()):
        if key in _WRITTEN and key not in cfg:
            return (
                f"cfg field {key!r} is missing (crasp computes the model it is {_json(want)} for)"
            )
        if key in cfg and not _same(cfg[key], want):
            return (
                f"cfg field {key!r} is {_json(cfg[key])}: TransformerLens would build "
                f"another model than the one crasp computes (which needs {_json(want)})"
            )
    known = {*_SIZES, "act_fn", *_WRITTEN, *_NEUTRAL, *_INERT}
    unknown = sorted(str(key) for key in cfg if key not in known)
    if unknown:
        return (
            f"cfg field(s) {', '.join(map(repr, unknown))} are not ones a crasp lens export "
            "has: TransformerLens could build another model than the one crasp computes"
        )
    return None


def _crasp_problem(crasp: object) -> str | None:
    """Why the config's ``crasp`` section is not one an export writes (None if it is):
    ``model`` a header (an object, checked as a model file's header later) and
    ``head_dims`` a ``[dk, dv]`` pair of sizes per head per layer."""
    if not isinstance(crasp, dict):
        return "'crasp' is not a JSON object"
    if not isinstance(crasp.get("model"), dict):
        return f"crasp field 'model' is {_json(crasp.get('model'))}, not a model header (an object)"
    dims = crasp.get("head_dims")
    pairs = isinstance(dims, list) and all(
        isinstance(layer, list)
        and all(
            isinstance(pair, list)
            and len(pair) == 2
            and all(type(n) is int and n >= 0 for n in pair)
            for pair in layer
        )
        for layer in dims
    )
    if not pairs:
        return f"crasp field 'head_dims' is {_json(dims)}, not a [dk, dv] pair per head per layer"
    return None


def _size_problem(cfg: dict[str, Any], state: dict[str, np.ndarray]) -> str | None:
    """Which cfg size the weights contradict (``cfg field 'd_model' is 9, but the
    weights have 8``), or None."""
    blocks = {name.split(".")[1] for name in state if name.startswith("blocks.")}
    found: dict[str, tuple[str, int, int]] = {
        "n_layers": ("", -1, len(blocks)),
        "d_vocab": ("embed.W_E", 0, 0),
        "d_model": ("embed.W_E", 1, 0),
        "n_ctx": ("pos_embed.W_pos", 0, 0),
        "d_vocab_out": ("unembed.W_U", 1, 0),
        "n_heads": ("blocks.0.attn.W_Q", 0, 0),
        "d_head": ("blocks.0.attn.W_Q", 2, 0),
        "d_mlp": ("blocks.0.mlp.W_in", 1, 0),
    }
    for key, (name, axis, count) in found.items():
        if name and (name not in state or state[name].ndim <= axis):
            continue
        has = state[name].shape[axis] if name else count
        if cfg[key] != has:
            return f"cfg field {key!r} is {shown_int(cfg[key])}, but the weights have {has}"
    return None


def _shape_problem(cfg: dict[str, Any], state: dict[str, np.ndarray]) -> str:
    """The first weight whose name or shape is not the config's (the sizes agree)."""
    want = _shapes(cfg)
    for name in sorted(set(want) | set(state)):
        if name not in state:
            return f"the weights have no {name!r}, which the config needs"
        if name not in want:
            return f"the weights have {name!r}, which the config does not have"
        if state[name].shape != want[name]:
            return f"weight {name!r} has shape {state[name].shape}, the config gives {want[name]}"
    return "the weights' names or shapes do not match the config"


def load_lens_export(path: str | Path) -> Model:
    """A crasp :class:`Model` rebuilt from a lens export directory (or its ``config.json``):
    the weights are the directory's, unpadded, with the positional table as ``onehot:t``
    features for ``t < n_ctx`` and the guarantee capped at ``n_ctx − 1`` tokens. Padding
    that is not zero, nonzero biases, shapes that disagree with the config, or a config
    under which TransformerLens computes another model raise :class:`CraspError` (such
    weights are no longer a crasp model)."""
    return read_lens_export(path)[2]


def read_lens_export(path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray], Model]:
    """The config, the weights and the crasp model (:func:`load_lens_export`) of a lens
    export, checked against each other: the model is one the export would write with
    this ``cfg`` (its act_fn, softmax heads, …), and the ``crasp`` section's vocabulary,
    outputs and residual labels are the model's."""
    path = Path(path)
    directory = path.parent if path.name == CONFIG_FILE else path
    config = read_lens_config(directory)
    if config is None:
        raise CraspError("not a crasp lens export", filename=str(directory / CONFIG_FILE))
    weights = directory / WEIGHTS_FILE
    try:
        from safetensors.numpy import load_file

        size = weights.stat().st_size
        budget = byte_budget(filename=str(directory))
        if size > budget:
            raise ValueError(f"{size:,} bytes, above the budget of {budget:,} (see load_model)")
        state = load_file(str(weights))
    except ImportError:
        raise CraspError(
            "reading a lens export needs the safetensors package (pip install safetensors)"
        ) from None
    except Exception as err:  # corrupt files raise many kinds of errors
        raise CraspError(f"cannot read export weights: {err}", filename=str(weights)) from None
    try:
        header, arrays = _model_arrays(config, state)
    except KeyError as err:  # cfg, crasp and the weights' names are checked before
        problem = f"crasp field 'model' is not a model header (it has no {err.args[0]!r})"
        raise CraspError(f"invalid lens export: {problem}", filename=str(directory)) from None
    except (TypeError, IndexError) as err:
        problem = f"crasp field 'model' is not a model header ({err})"
        raise CraspError(f"invalid lens export: {problem}", filename=str(directory)) from None
    except ValueError as err:
        raise CraspError(f"invalid lens export: {err}", filename=str(directory)) from None
    model = model_from_parts(header, arrays, filename=str(directory))
    problems, act_fn = _obstacles(model)
    crasp = config["crasp"]
    if problems:
        problem = f"the model header is not one TransformerLens computes ({problems[0]})"
    elif config["cfg"]["act_fn"] != act_fn and model.mlp_width > 0:  # act(0) = 0 for both
        problem = (
            f"cfg field 'act_fn' is {_json(config['cfg']['act_fn'])}, but the model's MLP "
            f"units are {_json(act_fn)} units"
        )
    elif (
        crasp.get("vocab") != model.vocab or type(crasp.get("bos_id")) is not int or crasp["bos_id"]
    ):
        problem = "the crasp section's 'vocab' or 'bos_id' is not the model's vocabulary"
    elif crasp.get("outputs") != _outputs_section(model) or crasp.get("residual") != model.residual:
        problem = "the crasp section's 'outputs' or 'residual' are not the model's"
    else:
        _check_tokenizer(directory / TOKENIZER_FILE, model.vocab)
        return config, state, model
    raise CraspError(f"invalid lens export: {problem}", filename=str(directory / CONFIG_FILE))


def _check_tokenizer(path: Path, vocab: Sequence[str]) -> None:
    """Refuse a ``tokenizer.json`` that is not :func:`tokenizer_json` of ``vocab`` (it
    would give the model other ids); an export without one is fine."""
    if not path.exists():
        return
    try:
        size = path.stat().st_size
        if size > MAX_HEADER_CHARS:
            raise ValueError(f"{size:,} bytes (at most {MAX_HEADER_CHARS:,})")
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:
        raise CraspError(f"cannot read {path.name}: {err}", filename=str(path)) from None
    if found != tokenizer_json(vocab):
        raise CraspError(
            f"invalid lens export: {path.name} is not the tokenizer of the model's "
            "vocabulary (export the model again)",
            filename=str(path),
        )


def _model_arrays(
    config: dict[str, Any], state: dict[str, np.ndarray]
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The ``.npz`` header and arrays of the model a lens state dict holds."""
    cfg, crasp = config["cfg"], config["crasp"]
    header = dict(crasp["model"])
    n_ctx, d_head = int(cfg["n_ctx"]), int(cfg["d_head"])
    state = {k: np.asarray(v, dtype=np.float64) for k, v in state.items()}
    problem = _size_problem(cfg, state)  # first: n_layers = 10^25 must not be iterated
    if problem is not None or {k: v.shape for k, v in state.items()} != _shapes(cfg):
        raise ValueError(problem or _shape_problem(cfg, state))
    zero = [k for k in state if k.rsplit(".", 1)[-1] in ("b_Q", "b_K", "b_V", "b_O", "b_U")]
    if any(state[k].any() for k in zero):
        raise ValueError("attention and unembed biases must be zero")

    def take(array: np.ndarray, keep: tuple[slice, ...], what: str) -> np.ndarray:
        rest = array.copy()
        rest[keep] = 0
        if rest.any():
            raise ValueError(f"{what} has nonzero padding")
        return array[keep]

    arrays: dict[str, np.ndarray] = {"w_e": state["embed.W_E"], "w_p": state["pos_embed.W_pos"].T}
    header["features"] = [onehot(t) for t in range(n_ctx)]
    guarantee = dict(header["guarantee"])
    if guarantee.get("max_len") is None or guarantee["max_len"] > n_ctx - 1:
        guarantee["max_len"] = n_ctx - 1
        guarantee["text"] = f"{guarantee['text']} (lens export: at most {n_ctx - 1} tokens)"
        if isinstance(guarantee.get("dtypes"), dict):  # no float limit beyond the table
            guarantee["dtypes"] = {
                key: min(limit, n_ctx - 1) if type(limit) is int else limit
                for key, limit in guarantee["dtypes"].items()
            }
    header["guarantee"] = guarantee
    dims = crasp["head_dims"]
    for field, count in (("model", len(header["layers"])), ("head_dims", len(dims))):
        if count != cfg["n_layers"]:
            raise ValueError(
                f"crasp field {field!r} has {count} layers, cfg field 'n_layers' is "
                f"{cfg['n_layers']}"
            )
    for l_index, layer in enumerate(header["layers"]):
        prefix = f"blocks.{l_index}"
        if len(dims[l_index]) != len(layer["heads"]):
            raise ValueError(
                f"crasp field 'head_dims' has not the model's heads in layer {l_index}"
            )
        for h_index, head in enumerate(layer["heads"]):
            dk, dv = (int(n) for n in dims[l_index][h_index])
            factor = float(head["scale"]) * np.sqrt(d_head)
            name = f"layer{l_index}.head{h_index}"
            w_q = state[f"{prefix}.attn.W_Q"][h_index][:, :dk].T
            arrays[f"{name}.w_q"] = w_q / factor if factor else w_q
            arrays[f"{name}.w_k"] = state[f"{prefix}.attn.W_K"][h_index][:, :dk].T
            arrays[f"{name}.w_v"] = state[f"{prefix}.attn.W_V"][h_index][:, :dv].T
            arrays[f"{name}.w_o"] = state[f"{prefix}.attn.W_O"][h_index][:dv, :].T
        n_heads = len(layer["heads"])
        for key in ("W_Q", "W_K", "W_V"):
            keep = np.zeros_like(state[f"{prefix}.attn.{key}"], dtype=bool)
            for h_index in range(n_heads):
                dk, dv = (int(n) for n in dims[l_index][h_index])
                keep[h_index, :, : (dv if key == "W_V" else dk)] = True
            if state[f"{prefix}.attn.{key}"][~keep].any():
                raise ValueError(f"{prefix}.attn.{key} has nonzero padding")
        keep = np.zeros_like(state[f"{prefix}.attn.W_O"], dtype=bool)
        for h_index in range(n_heads):
            keep[h_index, : int(dims[l_index][h_index][1]), :] = True
        if state[f"{prefix}.attn.W_O"][~keep].any():
            raise ValueError(f"{prefix}.attn.W_O has nonzero padding")
        mlp = f"{prefix}.mlp"
        width = hidden_units(header, layer["mlp"]) if layer["mlp"] is not None else 0
        w_in = take(state[f"{mlp}.W_in"], (slice(None), slice(0, width)), f"{mlp}.W_in")
        b_in = take(state[f"{mlp}.b_in"], (slice(0, width),), f"{mlp}.b_in")
        w_out = take(state[f"{mlp}.W_out"], (slice(0, width), slice(None)), f"{mlp}.W_out")
        if layer["mlp"] is None:
            if state[f"{mlp}.b_out"].any():
                raise ValueError(f"{mlp}.b_out is nonzero in a layer without an MLP")
            continue
        name = f"layer{l_index}.mlp"
        arrays.update({f"{name}.w1": w_in.T, f"{name}.b1": b_in, f"{name}.w2": w_out.T})
        arrays[f"{name}.b2"] = state[f"{mlp}.b_out"]
    for k in range(len(header["outputs"])):
        arrays[f"output{k}.weights"] = state["unembed.W_U"][:, k]
    return header, arrays


def _shapes(cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """The state dict's names and shapes for ``cfg``."""
    d, n, h, m = (int(cfg[k]) for k in ("d_model", "n_heads", "d_head", "d_mlp"))
    shapes: dict[str, tuple[int, ...]] = {
        "embed.W_E": (int(cfg["d_vocab"]), d),
        "pos_embed.W_pos": (int(cfg["n_ctx"]), d),
        "unembed.W_U": (d, int(cfg["d_vocab_out"])),
        "unembed.b_U": (int(cfg["d_vocab_out"]),),
    }
    for layer in range(int(cfg["n_layers"])):
        a, p = f"blocks.{layer}.attn.", f"blocks.{layer}.mlp."
        shapes.update({a + w: (n, d, h) for w in ("W_Q", "W_K", "W_V")})
        shapes.update({a + b: (n, h) for b in ("b_Q", "b_K", "b_V")})
        shapes.update({a + "W_O": (n, h, d), a + "b_O": (d,)})
        shapes.update(
            {p + "W_in": (d, m), p + "b_in": (m,), p + "W_out": (m, d), p + "b_out": (d,)}
        )
    return shapes
