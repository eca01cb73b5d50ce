"""Lens models against the numpy executor (shared by the TransformerLens 4.x tests and the
3.x check that runs in its own interpreter, tests/support/lens3_check.py)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import torch

import crasp_compiler
from crasp_compiler.model.model import Model
from crasp_compiler.runtime import run

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
    result = run(model, inputs)
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
