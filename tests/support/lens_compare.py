"""Lens models against the numpy executor (shared by the TransformerLens 4.x tests and the
3.x check that runs in its own interpreter, tests/support/lens3_check.py)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import torch

import crasp_compiler
from crasp_compiler.model.model import FREE, Model
from crasp_compiler.runtime import run_tokens

EXAMPLES = sorted(
    p
    for p in (Path(__file__).resolve().parents[2] / "examples" / "crasp").iterdir()
    if p.suffix in (".cr", ".crasp")
)
MAX_LEN = 24
SHORT = 4
TOL = 1e-9


def compiled(path: Path) -> Model:
    return crasp_compiler.compile(crasp_compiler.load(path), mode="relu", max_len=MAX_LEN)


def inputs_for(model: Model, rng: np.random.Generator, samples: int) -> list[list[str]]:
    """Every string up to length SHORT, then ``samples`` random ones up to MAX_LEN (one
    of length MAX_LEN)."""
    alphabet = model.vocab[1:]
    out = [list(w) for n in range(SHORT + 1) for w in itertools.product(alphabet, repeat=n)]
    lengths = [MAX_LEN, *rng.integers(SHORT + 1, MAX_LEN + 1, size=samples - 1)]
    out += [[str(t) for t in rng.choice(alphabet, size=int(n))] for n in lengths]
    return out


def compare(lens, model: Model, inputs: list[list[str]]) -> int:
    """Lens logits against the numpy executor, batched by length (no padding needed):
    raw outputs within TOL, no decision disagreement. Returns the inputs compared."""
    result = run_tokens(model, inputs)
    by_length: dict[int, list[int]] = {}
    for b, words in enumerate(inputs):
        by_length.setdefault(len(words), []).append(b)
    for size, rows in by_length.items():
        tokens = torch.tensor([lens.tokenizer.encode(inputs[b]) for b in rows])
        with torch.no_grad():
            logits = lens.model(tokens).numpy()
        assert logits.dtype == np.float64
        for spec in lens.outputs:
            got = logits[:, :, spec["column"]]
            want = result.outputs[spec["name"]][rows, : size + 1]
            np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL, err_msg=spec["name"])
            decided = (
                got > 0.5
                if spec["rule"] == "bool"
                else np.rint(got * np.arange(1, size + 2)).astype(np.int64)
            )
            values = result.values[spec["name"]][rows, : size + 1]
            assert (decided != values).sum() == 0, (spec["name"], size)
    return len(inputs)


def through_tokenizer(lens, model: Model, inputs: list[list[str]]) -> int:
    """The TransformerLens model's own tokenizer: ``to_tokens`` of each input's text is
    BOS and the input's ids, ``to_str_tokens`` gives back BOS and its words, and
    ``model(text)`` gives the logits of the tokens (a padded batch: its real positions).
    Returns the inputs checked."""
    texts = [" ".join(words) for words in inputs]
    bos = model.vocab[0]
    for words, text in zip(inputs, texts, strict=True):
        ids = lens.tokenizer.encode(words)
        assert lens.model.to_tokens(text).tolist() == [ids]
        assert lens.model.to_str_tokens(text) == [bos, *words]
        with torch.no_grad():
            by_text = lens.model(text)[0].numpy()
            by_ids = lens.model(torch.tensor([ids]))[0].numpy()
        np.testing.assert_array_equal(by_text, by_ids)
    batch = lens.model.to_tokens(texts)
    longest = max(len(words) for words in inputs) + 1
    assert tuple(batch.shape) == (len(inputs), longest)
    with torch.no_grad():
        logits = lens.model(batch).numpy()
    for row, words in enumerate(inputs):
        with torch.no_grad():
            alone = lens.model(torch.tensor([lens.tokenizer.encode(words)]))[0].numpy()
        np.testing.assert_allclose(logits[row, : len(words) + 1], alone, rtol=0, atol=TOL)
    return len(inputs)


def stage_labels(lens, model: Model, words: list[str]) -> int:
    """Per-stage residual labels on the TransformerLens model: ``labels_at`` is the
    model's at every stage, each residual hook point carries its stage's labels, and
    what a dimension holds there follows its label: the prefix counts ``C_open`` and
    ``C_close`` where they are labelled after the first attention (which writes them;
    without reuse a dimension has its label before it is written), an exact 0 where it
    is free. Returns the labelled values checked."""
    for stage in range(-model.stages - 1, model.stages + 1):
        assert lens.labels_at(stage) == model.labels_at(stage)
    _, cache = lens.model.run_with_cache(torch.tensor([lens.tokenizer.encode(words)]))
    assert lens.residual_labels("hook_embed") == model.labels_at(0)
    checked = 0
    for layer in range(len(model.layers)):
        for short, stage in (("resid_pre", 0), ("resid_mid", 1), ("resid_post", 2)):
            labels = lens.residual_labels(short, layer)
            assert labels == lens.residual_labels(f"blocks.{layer}.hook_{short}")
            assert labels == model.labels_at(2 * layer + stage)
            values = cache[short, layer][0].numpy()
            assert values.shape[-1] == len(labels)
            for k in (k for k, label in enumerate(labels) if label == FREE):
                assert not values[:, k].any()  # cancelled exactly
                checked += 1
            for name, symbol in (("C_open", "("), ("C_close", ")")):
                if name in labels and 2 * layer + stage >= 1:  # c/(t+1), the symbol's count
                    counts = np.cumsum([0] + [w == symbol for w in words])
                    want = counts / np.arange(1, len(words) + 2)
                    np.testing.assert_allclose(values[:, labels.index(name)], want, atol=TOL)
                    checked += 1
    return checked


def padding_heads(lens, words: list[str]) -> int:
    """``real_heads`` and ``drop_padding`` leave out exactly the padding heads (which
    add nothing); returns the padding heads dropped."""
    _, cache = lens.model.run_with_cache(torch.tensor([lens.tokenizer.encode(words)]))
    stacked, labels = cache.stack_head_results(return_labels=True, incl_remainder=True)
    kept, kept_labels = lens.drop_padding(stacked, labels)
    padding = [
        f"L{layer}H{head}"
        for layer, row in enumerate(lens.head_labels)
        for head, label in enumerate(row)
        if label is None
    ]
    assert kept_labels == [label for label in labels if label not in padding]
    assert "remainder" in kept_labels and kept.shape[0] == len(kept_labels)
    for k, label in enumerate(labels):
        if label in padding:
            assert not stacked[k].any()  # a padding head adds nothing
        else:
            assert torch.equal(kept[kept_labels.index(label)], stacked[k])
    for layer, row in enumerate(lens.head_labels):
        real = sum(x is not None for x in row)
        pattern = lens.real_heads(cache, "pattern", layer)
        assert pattern.shape[1] == real
        assert torch.equal(pattern, cache["pattern", layer][:, :real])
        assert lens.real_heads(cache, "z", layer).shape[2] == real
    return len(padding)


def circuitsvis_pages(lens, text: str) -> int:
    """circuitsvis ``attention_patterns`` from ``run_with_cache(text)`` and
    ``to_str_tokens(text)`` (no hand-built tokens), one page per layer with the layer's
    real heads: each carries the words and the weights. Returns the pages drawn (0 when
    circuitsvis is not installed)."""
    try:
        import circuitsvis as cv
    except ImportError:
        return 0
    _, cache = lens.model.run_with_cache(text)
    words = lens.model.to_str_tokens(text)
    assert words == [lens.tokenizer.bos_token, *text.split()]
    for layer, row in enumerate(lens.head_labels):
        pattern = lens.real_heads(cache, "pattern", layer)[0]
        real = sum(label is not None for label in row)
        assert tuple(pattern.shape) == (real, len(words), len(words))
        html = str(cv.attention.attention_patterns(tokens=words, attention=pattern))
        assert "AttentionPatterns" in html and f'"{lens.tokenizer.bos_token}"' in html
        assert all(f'"{word}"' in html for word in text.split()) and "[[" in html
    return len(lens.head_labels)


def exported_tokenizer(directory: Path, model: Model) -> int:
    """The export's ``tokenizer.json``: ``tokenizers`` reads it, it gives BOS and the
    model's ids and refuses unknown words, and ``to_transformer_lens(directory)`` puts
    that tokenizer on the TransformerLens model. Returns the words encoded."""
    from tokenizers import Tokenizer

    from crasp_compiler.export.lens_loader import to_transformer_lens

    path = directory / "tokenizer.json"
    tokenizer = Tokenizer.from_file(str(path))
    words = model.vocab[1:]
    assert tokenizer.encode(" ".join(words)).ids == list(range(len(model.vocab)))
    assert tokenizer.encode("").ids == [0]
    try:
        tokenizer.encode("NOT-A-WORD")
    except Exception as err:  # tokenizers raises its own exception type
        assert "Missing [UNK]" in str(err), err
    else:
        raise AssertionError("an unknown word was encoded")
    lens = to_transformer_lens(directory)
    attached = lens.model.tokenizer.backend_tokenizer.to_str()
    assert attached == tokenizer.to_str()
    assert lens.model.to_str_tokens(" ".join(words)) == model.vocab
    return len(words)
