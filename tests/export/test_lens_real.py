"""Lens exports in the real TransformerLens (4.x, and 3.x where installed apart in
``.lens3``): every C-RASP example gives the numpy executor's decisions (0 disagreements)
and raw outputs (within 1e-9, float64), exhaustively on short strings and on sampled
long ones up to the model's max_len; the model's own tokenizer (``to_tokens``,
``to_str_tokens``, ``model(text)``, padded batches) and the export's ``tokenizer.json``,
residual labels per stage and padding heads left out of caches, in both versions."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import crasp_compiler
from crasp_compiler import CraspError
from crasp_compiler.api import load_model
from crasp_compiler.export.lens import export_lens
from crasp_compiler.model.model import Model
from crasp_compiler.runtime import run_tokens

pytest.importorskip("transformer_lens")
torch = pytest.importorskip("torch")
from crasp_compiler.export.lens_loader import WordTokenizer, to_transformer_lens  # noqa: E402
from tests.support.lens_compare import (  # noqa: E402
    EXAMPLES,
    MAX_LEN,
    TOL,
    circuitsvis_pages,
    compare,
    exported_tokenizer,
    inputs_for,
    padding_heads,
    stage_labels,
    through_tokenizer,
)
from tests.support.lens_compare import compiled as compile_example  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# TransformerLens 3.x, installed apart (pip install --no-deps --target .lens3
# transformer-lens==3.9.0 better-abc; .ci/run does): 3.x and 4.x cannot share a venv.
LENS3 = ROOT / ".lens3"


@functools.cache
def compiled(path: Path) -> Model:
    return compile_example(path)


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
    a, b = run_tokens(model, inputs), run_tokens(rebuilt, inputs)
    np.testing.assert_allclose(b.outputs["D"], a.outputs["D"], rtol=TOL, atol=TOL)
    assert (a.values["D"] == b.values["D"]).all()
    # one output column: centring the unembed would zero it; the bridge is unprocessed
    assert lens.logits("( )")[-1, 0].item() > 0.5


@pytest.mark.parametrize(
    ("key", "value"),
    [("normalization_type", "LN"), ("act_fn", "solu_ln"), ("dtype", "float32"), ("seed", 1)],
)
def test_a_directory_is_loaded_as_crasp_checks_it(tmp_path, key, value):
    """The loader reads a directory as ``crasp check`` does: a cfg under which
    TransformerLens builds another model is refused before TransformerLens sees it (a
    ``dtype`` once collided with the loader's own), one that changes nothing loads."""
    model = compiled(EXAMPLES[0].parent / "dyck1.cr")
    out = export_lens(model, tmp_path / "lens")
    config = json.loads((out / "config.json").read_text())
    config["cfg"][key] = value
    (out / "config.json").write_text(json.dumps(config))
    if key == "seed":
        compare(to_transformer_lens(out), model, inputs_for(model, np.random.default_rng(1), 4))
        return
    with pytest.raises(
        CraspError, match=f"config.json: error: invalid lens export: cfg field.*'{key}'"
    ):
        to_transformer_lens(out)


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


@pytest.mark.parametrize("path", EXAMPLES[:3], ids=lambda p: p.name)
def test_the_lens_model_has_its_tokenizer(path):
    """``to_tokens``, ``to_str_tokens`` and ``model(text)`` on the TransformerLens model
    itself (a Hugging Face tokenizer of the vocabulary), and a padded batch, against the
    ids :class:`WordTokenizer` gives."""
    model = compiled(path)
    lens = to_transformer_lens(model)
    rng = np.random.default_rng(3)
    inputs = [[], *([str(t) for t in rng.choice(model.vocab[1:], size=n)] for n in (1, 5, 9))]
    assert through_tokenizer(lens, model, inputs) == 4
    with pytest.raises(Exception, match="Missing \\[UNK\\]"):
        lens.model.to_tokens("NOT-A-TOKEN")  # refused by the tokenizer itself


def test_the_export_directory_carries_its_tokenizer(tmp_path):
    """``tokenizer.json`` loads in ``tokenizers`` and is the one on the loaded model; a
    changed one is refused (it would give other ids), a missing one rebuilt."""
    model = compiled(EXAMPLES[0].parent / "dyck1.cr")
    out = export_lens(model, tmp_path / "lens")
    assert exported_tokenizer(out, model) == 2
    path = out / "tokenizer.json"
    changed = json.loads(path.read_text())
    changed["model"]["vocab"] = {"<bos>": 0, ")": 1, "(": 2}
    path.write_text(json.dumps(changed))
    with pytest.raises(CraspError, match=r"tokenizer\.json: error: invalid lens export: "):
        to_transformer_lens(out)
    with pytest.raises(CraspError, match="not the tokenizer of the model's vocabulary"):
        load_model(out)  # what `crasp check` reads
    path.unlink()  # an export written before tokenizer.json existed
    lens = to_transformer_lens(out)
    assert lens.model.to_tokens("( ) )").tolist() == [[0, 1, 2, 2]]


def test_residual_labels_per_stage_where_dimensions_are_reused():
    """dyck1 (relu) reuses dimensions: its residual labels join occupants
    (``C_open → …``); on the loaded model each hook point's labels are those of its
    stage, and the dimension labelled ``C_open`` / ``C_close`` holds that count there."""
    model = compiled(EXAMPLES[0].parent / "dyck1.cr")
    assert model.occupants is not None and any(" → " in x for x in model.residual)
    lens = to_transformer_lens(model)
    assert lens.compiled is model
    assert stage_labels(lens, model, list("(()))(()")) >= 3  # both counts, a free dimension
    assert lens.labels_at(1) != lens.labels_at(-1)  # a dimension changes hands
    assert not any(" → " in x for s in range(model.stages + 1) for x in lens.labels_at(s))
    with pytest.raises(KeyError, match="not a residual hook point"):
        lens.residual_labels("blocks.0.attn.hook_pattern")


def test_without_reuse_every_dimension_keeps_its_label():
    model = crasp_compiler.compile(
        crasp_compiler.load(EXAMPLES[0].parent / "dyck1.cr"),
        mode="relu",
        max_len=MAX_LEN,
        reuse=False,
    )
    lens = to_transformer_lens(model)
    assert all(lens.labels_at(s) == model.residual for s in range(model.stages + 1))
    # both counts at the 5 residual hook points after the first attention
    assert stage_labels(lens, model, list("(()))(()")) == 2 * 5
    compare(lens, model, inputs_for(model, np.random.default_rng(4), 6))


def test_padding_heads_are_left_out_of_caches():
    """dyck1 has 3 heads in layer 1 and 1 in layer 2: TransformerLens gives layer 2 two
    all-zero padding heads, which ``real_heads`` and ``drop_padding`` leave out."""
    lens = to_transformer_lens(compiled(EXAMPLES[0].parent / "dyck1.cr"))
    assert lens.head_labels[1][1:] == [None, None]
    assert padding_heads(lens, list("(()")) == 2
    _, cache = lens.model.run_with_cache("( ( )")
    with pytest.raises(KeyError, match="not a per-head activation"):
        lens.real_heads(cache, "resid_pre", 0)


def test_circuitsvis_draws_a_cache_with_the_models_own_tokens():
    """circuitsvis ``attention_patterns`` from ``run_with_cache(text)`` and
    ``to_str_tokens(text)``, no hand-built tokens, per layer without padding heads."""
    pytest.importorskip("circuitsvis")
    lens = to_transformer_lens(compiled(EXAMPLES[0].parent / "dyck1.cr"))
    assert circuitsvis_pages(lens, "( ( ) ) )") == 2


def test_refusals():
    with pytest.raises(CraspError, match="relative position bias"):
        local = EXAMPLES[0].parent / "tomita7_local.cr"
        model = crasp_compiler.compile(crasp_compiler.load(local), mode="heaviside")
        to_transformer_lens(model, n_ctx=10)


def test_examples_exact_in_transformer_lens_3():
    """The same comparison on TransformerLens 3.x (``HookedTransformer``), in a separate
    interpreter with the 3.x package first on the path."""
    if not (LENS3 / "transformer_lens").is_dir():
        pytest.skip(f"TransformerLens 3.x is not installed in {LENS3} (see .ci/run)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(LENS3), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.lens3_check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["version"].startswith("3.")
    assert report["class"] == "HookedTransformer"
    assert sorted(report["examples"]) == sorted(p.name for p in EXAMPLES)
    assert all(count >= 12 + 5 for count in report["examples"].values())  # see inputs_for
    assert report["tokenizer"] >= 5  # to_tokens / to_str_tokens / model(text) on 3.x too
    assert report["stage_labels"] >= 3  # labels per stage, checked against the values
    assert report["padding_heads"] == 2  # dyck1's layer 2: left out of caches
    assert report["export_tokenizer"] == 2  # tokenizer.json read and attached on 3.x
    assert report["circuitsvis"] == 2  # both layers drawn from a 3.x cache
