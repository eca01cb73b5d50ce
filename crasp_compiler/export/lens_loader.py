"""Load a compiled model into the real TransformerLens (the ``lens`` extra).

:func:`to_transformer_lens` builds a ready TransformerLens model (4.x:
``TransformerBridge.boot_native``, float64) from a :class:`Model` or a lens export
directory, avoiding the two traps that change the outputs:

- attention scale: 4.x divides scores by ``√d_head`` even under ``use_attn_scale=False``;
  the export says ``use_attn_scale=True`` and folds ``√d_head`` into ``W_Q``;
- unembed centring: the bridge is returned without weight processing; never call
  ``enable_compatibility_mode()`` with its defaults (``center_unembed`` zeroes a model with
  one output column): pass ``no_processing=True``.

On TransformerLens 3.x it builds a ``HookedTransformer`` (float64) instead and loads the
export's tensors under their own names (the causal-mask buffers are the only keys it
does not take), without ``load_and_process_state_dict``'s processing.
TransformerLens has one head count for every layer, so a layer with fewer heads shows
all-zero padding heads: :attr:`LensModel.head_labels` marks them ``None``, and
:meth:`LensModel.real_heads` / :meth:`LensModel.drop_padding` leave them out of caches.
The model comes with a tokenizer of its vocabulary (:func:`hf_tokenizer`), so
``to_tokens``, ``to_str_tokens`` and ``model("( ( ) )")`` work as on any TransformerLens
model. Residual hook points are labelled per stage (:meth:`LensModel.residual_labels`).
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from crasp_compiler.errors import CraspError
from crasp_compiler.export.directory import CONFIG_FILE
from crasp_compiler.export.lens import (
    TOKENIZER_FILE,
    lens_state_dict,
    read_lens_export,
    tokenizer_json,
)
from crasp_compiler.model.model import Model


class WordTokenizer:
    """Word-level tokenizer over a model's vocabulary: id 0 is BOS, prepended by
    :meth:`encode`; unknown tokens are refused."""

    def __init__(self, vocab: Sequence[str]) -> None:
        self.vocab = list(vocab)
        self.bos_token = self.vocab[0]
        self.bos_token_id = 0
        self._ids = {word: i for i, word in enumerate(self.vocab) if i > 0}

    def encode(self, words: str | Sequence[str]) -> list[int]:
        """``[0, id(w1), id(w2), …]``; a string is split on whitespace."""
        if isinstance(words, str):
            words = words.split()
        unknown = sorted({w for w in words if w not in self._ids})
        if unknown:
            known = ", ".join(repr(w) for w in self.vocab[1:])
            raise CraspError(
                f"unknown token(s) {', '.join(repr(w) for w in unknown)} (vocabulary: {known})"
            )
        return [0, *(self._ids[w] for w in words)]

    def decode(self, ids: Sequence[int]) -> list[str]:
        """The words of ``ids`` (a leading BOS dropped)."""
        ids = [int(i) for i in ids]
        if ids and ids[0] == 0:
            ids = ids[1:]
        bad = [i for i in ids if not 0 < i < len(self.vocab)]
        if bad:
            raise CraspError(f"token id(s) {bad} are not words of this vocabulary")
        return [self.vocab[i] for i in ids]


def hf_tokenizer(vocab: Sequence[str], tokenizer_file: str | Path | None = None) -> Any:
    """A Hugging Face fast tokenizer of a model's vocabulary, for TransformerLens's
    ``to_tokens`` / ``to_str_tokens`` / ``model("( ( ) )")``: the tokenizer of
    :func:`~crasp_compiler.export.lens.tokenizer_json` (word-level over
    whitespace-separated words, ids as the model numbers them, BOS (id 0) prepended by
    the tokenizer itself), read from ``tokenizer_file`` (an export's ``tokenizer.json``)
    when given; BOS as padding (right-padded batches: a causal model's earlier positions
    do not see it). A word outside the vocabulary is refused by the tokenizer
    (``WordLevel error: Missing [UNK] token``)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    if tokenizer_file is None:
        word_level = Tokenizer.from_str(json.dumps(tokenizer_json(vocab)))
    else:
        word_level = Tokenizer.from_file(str(tokenizer_file))
    bos = vocab[0]
    # transformers leaves the tokenizer's __init__ unannotated (*args, **kwargs)
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=word_level, bos_token=bos, pad_token=bos, padding_side="right"
    )


def _attach_tokenizer(
    model: Any, vocab: Sequence[str], major: int, tokenizer_file: Path | None
) -> None:
    """``model``'s tokenizer (:func:`hf_tokenizer`), set the way each TransformerLens
    major version takes one."""
    model.tokenizer = hf_tokenizer(vocab, tokenizer_file)
    if major < 4:  # (3.x's set_tokenizer reloads a tokenizer by its hub name: set it here)
        model.cfg.tokenizer_prepends_bos = True
        model.cfg.default_padding_side = "right"


# TransformerLens residual hook points -> their stage within a layer (Model.stages: 2l is
# before layer l, 2l + 1 after its attention, 2l + 2 after its MLP)
_RESIDUAL_HOOKS = {
    "hook_resid_pre": 0,
    "hook_attn_out": 1,
    "hook_resid_mid": 1,
    "hook_mlp_out": 2,
    "hook_resid_post": 2,
}
# the head axis of TransformerLens's per-layer head activations (``cache[name, layer]``)
_HEAD_AXES = {"pattern": -3, "attn_scores": -3, "q": -2, "k": -2, "v": -2, "z": -2, "result": -2}
_HEAD_NAME = re.compile(r"L(\d+)H(\d+)")


def residual_stage(name: str, layer: int | None = None) -> int:
    """The stage (:attr:`Model.stages <crasp_compiler.model.model.Model.stages>`) whose
    labels a TransformerLens residual hook point carries: ``hook_embed`` and
    ``hook_pos_embed`` 0, ``blocks.{l}.hook_resid_pre`` 2l, ``hook_attn_out`` and
    ``hook_resid_mid`` 2l + 1, ``hook_mlp_out`` and ``hook_resid_post`` 2l + 2. ``name``
    is a full hook name, or a short one with ``layer`` as in ``cache["resid_mid", 1]``."""
    if layer is not None:
        name = f"blocks.{layer}.hook_{name}"
    if name in ("hook_embed", "hook_pos_embed"):
        return 0
    parts = name.split(".")
    if (
        len(parts) == 3
        and parts[0] == "blocks"
        and parts[1].isdigit()
        and parts[2] in _RESIDUAL_HOOKS
    ):
        return 2 * int(parts[1]) + _RESIDUAL_HOOKS[parts[2]]
    raise KeyError(
        f"{name!r} is not a residual hook point (hook_embed, hook_pos_embed, "
        f"blocks.{{l}}.{', '.join(_RESIDUAL_HOOKS)})"
    )


@dataclass
class LensModel:
    """A TransformerLens model of a compiled model, with what reading it needs.

    ``model``: the ``TransformerBridge`` on 4.x, ``HookedTransformer`` on 3.x (float64;
    ``model(tokens)`` gives logits ``[batch, pos, len(outputs)]``; its tokenizer is
    :func:`hf_tokenizer`). ``compiled``: the crasp model its weights are.
    ``residual``: the label of each residual dimension, its occupants joined by ``→``
    where the model reuses dimensions; :meth:`labels_at` and :meth:`residual_labels`
    give one label per dimension at one stage (compile with ``reuse=False`` for one
    label per dimension throughout). ``outputs``: per logit column, its name, decision
    rule and rule text.

    **Padding heads.** TransformerLens has one head count per layer: a layer with fewer
    heads than the widest gets all-zero heads after its real ones (``W_Q = W_K = W_V =
    W_O = 0``: they add nothing, and their ``hook_pattern`` is uniform causal attention).
    ``head_labels[layer][head]`` is the head's label, ``None`` for a padding head;
    :meth:`real_heads` reads a layer's activations without them and
    :meth:`drop_padding` drops them from a stack over every layer's heads.
    """

    model: Any
    tokenizer: WordTokenizer
    compiled: Model
    residual: list[str]
    head_labels: list[list[str | None]]
    outputs: list[dict[str, Any]]
    config: dict[str, Any]
    version: str

    def logits(self, words: str | Sequence[str]) -> Any:
        """Logits ``[pos, len(outputs)]`` for one input (BOS prepended)."""
        import torch

        tokens = torch.tensor([self.tokenizer.encode(words)])
        with torch.no_grad():
            return self.model(tokens)[0]

    def labels_at(self, stage: int) -> list[str]:
        """What each residual dimension holds at ``stage`` (0: the embedding, 2l + 1:
        after layer l's attention, 2l + 2: after its MLP, layers from 0 as in
        TransformerLens; negative counts from the end): :meth:`Model.labels_at
        <crasp_compiler.model.model.Model.labels_at>`."""
        return self.compiled.labels_at(stage)

    def residual_labels(self, name: str, layer: int | None = None) -> list[str]:
        """One label per entry of the last axis of a residual hook point's activation
        (``"blocks.1.hook_resid_mid"``, or ``("resid_mid", 1)`` as ``cache`` takes
        it): the labels of its stage (:func:`residual_stage`)."""
        return self.labels_at(residual_stage(name, layer))

    def real_heads(self, cache: Any, name: str, layer: int) -> Any:
        """``cache[name, layer]`` without the layer's padding heads: ``name`` is a
        per-head activation (``pattern``, ``attn_scores``: ``[batch, head, query,
        key]``; ``q``, ``k``, ``v``, ``z``, ``result``: ``[batch, pos, head, d]``), and
        head ``h`` of the result is the head labelled ``head_labels[layer][h]``."""
        if name not in _HEAD_AXES:
            raise KeyError(f"{name!r} is not a per-head activation ({', '.join(_HEAD_AXES)})")
        real = sum(label is not None for label in self.head_labels[layer])
        return cache[name, layer].narrow(_HEAD_AXES[name], 0, real)

    def drop_padding(self, stacked: Any, labels: Sequence[str]) -> tuple[Any, list[str]]:
        """A stack over every layer's heads along axis 0, labelled ``L{l}H{h}`` as
        ``cache.stack_head_results(return_labels=True)`` returns it, without the padding
        heads (other entries, such as ``remainder``, are kept): the stack and its
        labels."""
        if len(labels) != stacked.shape[0]:
            raise ValueError(f"{len(labels)} labels for a stack of {stacked.shape[0]}")
        keep = [k for k, label in enumerate(labels) if not self._padding(label)]
        return stacked[keep], [labels[k] for k in keep]

    def _padding(self, label: str) -> bool:
        """Whether ``label`` (``L{l}H{h}``) names a padding head."""
        match = _HEAD_NAME.fullmatch(label)
        if match is None:
            return False
        layer, head = int(match[1]), int(match[2])
        return self.head_labels[layer][head] is None


def transformer_lens_version() -> str | None:
    """The installed TransformerLens version, or None."""
    try:
        return metadata.version("transformer-lens")
    except metadata.PackageNotFoundError:
        return None


def _bridge(cfg: dict[str, Any], tensors: dict[str, Any], device: str) -> Any:
    """TransformerLens 4.x: ``TransformerBridge.boot_native`` with the export's weights."""
    import torch
    from transformer_lens import TransformerBridge, TransformerBridgeConfig
    from transformer_lens.utilities.tl_checkpoint_conversion import convert_tl_checkpoint

    config = TransformerBridgeConfig(**cfg, dtype=torch.float64, device=device)
    bridge = TransformerBridge.boot_native(config, dtype=torch.float64, device=device)
    result = bridge.load_state_dict(convert_tl_checkpoint(tensors, config), strict=True)
    if result.missing_keys or result.unexpected_keys:  # strict raises first; kept as a check
        raise CraspError(f"TransformerLens did not take every weight: {result}")
    return bridge


def _hooked(cfg: dict[str, Any], tensors: dict[str, Any], device: str) -> Any:
    """TransformerLens 3.x: a ``HookedTransformer`` with the export's weights, unprocessed
    (every parameter taken; only buffers such as the causal mask stay as built)."""
    import torch
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    config = HookedTransformerConfig(**cfg, dtype=torch.float64, device=device)
    with warnings.catch_warnings():  # 3.9 announces HookedTransformer's removal in 4.0
        warnings.simplefilter("ignore", DeprecationWarning)
        model = HookedTransformer(config)
    result = model.load_state_dict(tensors, strict=False)
    buffers = {name for name, _ in model.named_buffers()}
    missing = [key for key in result.missing_keys if key not in buffers]
    if missing or result.unexpected_keys:
        raise CraspError(
            f"TransformerLens did not take every weight: missing {missing}, "
            f"unexpected {result.unexpected_keys}"
        )
    return model


def to_transformer_lens(
    source: Model | str | Path, n_ctx: int | None = None, device: str = "cpu"
) -> LensModel:
    """A ready TransformerLens model of ``source`` (a compiled model, or a lens export
    directory), float64 and exact: a ``TransformerBridge`` on 4.x, a
    ``HookedTransformer`` on 3.x. ``n_ctx`` as in :func:`lens_state_dict` (models only).
    A directory is read as :func:`~crasp_compiler.export.lens.read_lens_export` reads it:
    a config under which TransformerLens would build another model, or a
    ``tokenizer.json`` that is not the vocabulary's, is refused; the model's tokenizer is
    read from that ``tokenizer.json`` (rebuilt from the vocabulary where an export has
    none). Layers with fewer heads than the widest carry padding heads
    (:class:`LensModel`)."""
    version = transformer_lens_version()
    if version is None:
        raise CraspError("TransformerLens is not installed: pip install 'crasp-compiler[lens]'")
    major = int(version.split(".")[0])
    if major < 3:
        raise CraspError(f"to_transformer_lens needs TransformerLens 3.x or 4.x (found {version})")
    import numpy as np
    import torch

    tokenizer_file = None
    if isinstance(source, Model):
        state, config = lens_state_dict(source, n_ctx)
        compiled = source
    else:
        if n_ctx is not None:
            raise CraspError("n_ctx applies to models, not export directories")
        # refused unless it is what crasp checks (its tokenizer.json the vocabulary's)
        config, state, compiled = read_lens_export(source)
        directory = Path(source)
        directory = directory.parent if directory.name == CONFIG_FILE else directory
        if (directory / TOKENIZER_FILE).exists():
            tokenizer_file = directory / TOKENIZER_FILE
    tensors = {k: torch.from_numpy(np.asarray(v, dtype=np.float64)) for k, v in state.items()}
    model = (_bridge if major >= 4 else _hooked)(config["cfg"], tensors, device)
    model.eval()
    crasp = config["crasp"]
    _attach_tokenizer(model, crasp["vocab"], major, tokenizer_file)
    n_heads = config["cfg"]["n_heads"]
    head_labels: list[list[str | None]] = []
    for layer in crasp["model"]["layers"]:
        labels: list[str | None] = [
            str(head.get("label") or f"head {i + 1}") for i, head in enumerate(layer["heads"])
        ]
        head_labels.append(labels + [None] * (n_heads - len(labels)))
    return LensModel(
        model=model,
        tokenizer=WordTokenizer(crasp["vocab"]),
        compiled=compiled,
        residual=list(crasp["residual"]),
        head_labels=head_labels,
        outputs=list(crasp["outputs"]),
        config=config,
        version=version,
    )
