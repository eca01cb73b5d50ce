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
all-zero padding heads: :attr:`LensModel.head_labels` marks them ``None``. The model
comes with a tokenizer of its vocabulary (:func:`hf_tokenizer`), so ``to_tokens``,
``to_str_tokens`` and ``model("( ( ) )")`` work as on any TransformerLens model.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from crasp_compiler.errors import CraspError
from crasp_compiler.export.lens import lens_state_dict, read_lens_export
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


def hf_tokenizer(vocab: Sequence[str]) -> Any:
    """A Hugging Face fast tokenizer of a model's vocabulary, for TransformerLens's
    ``to_tokens`` / ``to_str_tokens`` / ``model("( ( ) )")``: word-level over
    whitespace-separated words, ids as the model numbers them, BOS (id 0) prepended by
    the tokenizer itself, BOS as padding (right-padded batches: a causal model's earlier
    positions do not see it). A word outside the vocabulary is refused by the tokenizer
    (``WordLevel error: Missing [UNK] token``: there is no unknown token)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    bos = vocab[0]
    word_level = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token=None))
    word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    word_level.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", special_tokens=[(bos, 0)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=word_level, bos_token=bos, pad_token=bos, padding_side="right"
    )


def _attach_tokenizer(model: Any, vocab: Sequence[str], major: int) -> None:
    """``model``'s tokenizer (:func:`hf_tokenizer`), set the way each TransformerLens
    major version takes one."""
    model.tokenizer = hf_tokenizer(vocab)
    if major < 4:  # (3.x's set_tokenizer reloads a tokenizer by its hub name: set it here)
        model.cfg.tokenizer_prepends_bos = True
        model.cfg.default_padding_side = "right"


@dataclass
class LensModel:
    """A TransformerLens model of a compiled model, with what reading it needs.

    ``model``: the ``TransformerBridge`` on 4.x, ``HookedTransformer`` on 3.x (float64;
    ``model(tokens)`` gives logits
    ``[batch, pos, len(outputs)]``). ``residual``: the label of each residual dimension.
    ``head_labels[layer][head]``: the head's label, ``None`` for an all-zero padding head.
    ``outputs``: per logit column, its name, decision rule and rule text.
    """

    model: Any
    tokenizer: WordTokenizer
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
    a config under which TransformerLens would build another model is refused."""
    version = transformer_lens_version()
    if version is None:
        raise CraspError("TransformerLens is not installed: pip install 'crasp-compiler[lens]'")
    major = int(version.split(".")[0])
    if major < 3:
        raise CraspError(f"to_transformer_lens needs TransformerLens 3.x or 4.x (found {version})")
    import numpy as np
    import torch

    if isinstance(source, Model):
        state, config = lens_state_dict(source, n_ctx)
    else:
        if n_ctx is not None:
            raise CraspError("n_ctx applies to models, not export directories")
        config, state, _ = read_lens_export(source)  # refused unless it is what crasp checks
    tensors = {k: torch.from_numpy(np.asarray(v, dtype=np.float64)) for k, v in state.items()}
    model = (_bridge if major >= 4 else _hooked)(config["cfg"], tensors, device)
    model.eval()
    crasp = config["crasp"]
    _attach_tokenizer(model, crasp["vocab"], major)
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
        residual=list(crasp["residual"]),
        head_labels=head_labels,
        outputs=list(crasp["outputs"]),
        config=config,
        version=version,
    )
