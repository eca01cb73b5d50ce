"""Lens exports in the real TransformerLens (4.x): every C-RASP example that exports gives
the numpy executor's decisions (0 disagreements) and raw outputs (within 1e-9, float64),
exhaustively on short strings and on sampled long ones up to the model's max_len."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import numpy as np
import pytest

import crasp_compiler
from crasp_compiler import CraspError
from crasp_compiler.api import load_model
from crasp_compiler.export.lens import export_lens
from crasp_compiler.model.model import Model
from crasp_compiler.runtime import run

pytest.importorskip("transformer_lens")
torch = pytest.importorskip("torch")
from crasp_compiler.export.lens_loader import WordTokenizer, to_transformer_lens  # noqa: E402

EXAMPLES = sorted(
    p
    for p in (Path(__file__).resolve().parents[2] / "examples" / "crasp").iterdir()
    if p.suffix in (".cr", ".crasp")
)
MAX_LEN = 24
SHORT = 4
TOL = 1e-9


@functools.cache
def compiled(path: Path) -> Model:
    return crasp_compiler.compile(crasp_compiler.load(path), mode="relu", max_len=MAX_LEN)


def inputs_for(model: Model, rng: np.random.Generator, samples: int) -> list[list[str]]:
    alphabet = model.vocab[1:]
    out = [list(w) for n in range(SHORT + 1) for w in itertools.product(alphabet, repeat=n)]
    lengths = [MAX_LEN, *rng.integers(SHORT + 1, MAX_LEN + 1, size=samples - 1)]
    out += [[str(t) for t in rng.choice(alphabet, size=int(n))] for n in lengths]
    return out


def compare(lens, model: Model, inputs: list[list[str]]) -> None:
    """Lens logits against the numpy executor, batched by length (no padding needed)."""
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


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_exact_in_transformer_lens(path):
    model = compiled(path)
    lens = to_transformer_lens(model)
    assert lens.version.split(".")[0] >= "4"
    assert next(lens.model.parameters()).dtype == torch.float64
    assert lens.residual == model.residual
    assert len(lens.head_labels) == len(model.layers)
    for labels, layer in zip(lens.head_labels, model.layers, strict=True):
        assert [x is not None for x in labels][: len(layer.heads)] == [True] * len(layer.heads)
        assert all(x is None for x in labels[len(layer.heads) :])
    rng = np.random.default_rng(len(path.name))
    compare(lens, model, inputs_for(model, rng, 12))


def test_export_directory_loads_in_both(tmp_path):
    model = compiled(EXAMPLES[0].parent / "dyck1.cr")
    out = export_lens(model, tmp_path / "lens")
    lens = to_transformer_lens(out)
    rebuilt = load_model(out)  # what `crasp check` reads
    inputs = inputs_for(model, np.random.default_rng(0), 8)
    compare(lens, model, inputs)
    compare(lens, rebuilt, inputs)
    assert rebuilt.guarantee.max_len == MAX_LEN
    a, b = run(model, inputs), run(rebuilt, inputs)
    np.testing.assert_allclose(b.outputs["D"], a.outputs["D"], rtol=TOL, atol=TOL)
    assert (a.values["D"] == b.values["D"]).all()
    # one output column: centring the unembed would zero it; the bridge is unprocessed
    assert lens.logits("( )")[-1, 0].item() > 0.5


def test_tokenizer():
    tok = WordTokenizer(["<bos>", "(", ")"])
    assert tok.encode("( ( )") == [0, 1, 1, 2]
    assert tok.encode(["(", ")"]) == [0, 1, 2]
    assert tok.encode([]) == [0]
    assert tok.decode([0, 1, 2]) == ["(", ")"]
    with pytest.raises(CraspError, match=r"unknown token\(s\) '\['"):
        tok.encode("( [")
    with pytest.raises(CraspError, match="not words"):
        tok.decode([0, 3])
    with pytest.raises(CraspError, match="unknown"):
        tok.encode(["<bos>"])  # BOS is not a word


def test_refusals():
    with pytest.raises(CraspError, match="relative position bias"):
        local = EXAMPLES[0].parent / "tomita7_local.cr"
        model = crasp_compiler.compile(crasp_compiler.load(local), mode="heaviside")
        to_transformer_lens(model, n_ctx=10)
