"""The TransformerLens-convention export: an independent forward pass written from
TransformerLens' HookedTransformer equations (no normalization, standard positional
embedding, causal softmax attention) must reproduce the numpy executor's raw outputs."""

from __future__ import annotations

import errno
import functools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from crasp_compiler import CraspError, load_program, parse_program
from crasp_compiler.export.lens import MAX_N_CTX, export_lens, lens_state_dict, tokenizer_json
from crasp_compiler.languages.crasp.compile import compile_program
from crasp_compiler.model.model import (
    MLP,
    TORCH_DENSE_LIMIT,
    Guarantee,
    Head,
    Layer,
    Model,
    Output,
)
from crasp_compiler.runtime.numpy_exec import run_tokens

EXAMPLES = sorted(
    p
    for p in (Path(__file__).resolve().parents[2] / "examples" / "crasp").iterdir()
    if p.suffix in (".cr", ".crasp")
)
MAX_LEN = 64
TOL = 1e-9


@functools.cache
def compiled(path: Path, mode: str = "relu") -> Model:
    return compile_program(load_program(path), mode=mode, max_len=MAX_LEN)


def has_relative_bias(model: Model) -> bool:
    return any(any(v != 0 for v in h.bias.values()) for layer in model.layers for h in layer.heads)


# --- an independent forward pass, following TransformerLens' documented equations ----------


def gelu_new(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * np.power(x, 3.0))))


ACT_FN = {"relu": lambda x: np.maximum(x, 0.0), "gelu_new": gelu_new}


def lens_forward(state: dict[str, np.ndarray], cfg: dict, tokens: np.ndarray) -> np.ndarray:
    """logits [batch, pos, d_vocab_out] of a HookedTransformer with this state and cfg."""
    assert cfg["normalization_type"] is None
    assert cfg["positional_embedding_type"] == "standard"
    assert not cfg["attn_only"]
    _, pos = tokens.shape
    assert pos <= cfg["n_ctx"]
    resid = state["embed.W_E"][tokens] + state["pos_embed.W_pos"][:pos][None]
    attn_scale = np.sqrt(cfg["d_head"]) if cfg["use_attn_scale"] else 1.0
    future = np.triu(np.ones((pos, pos), dtype=bool), k=1)  # key after query
    for layer in range(cfg["n_layers"]):
        a = f"blocks.{layer}.attn."
        q = np.einsum("bpm,hmd->bphd", resid, state[a + "W_Q"]) + state[a + "b_Q"]
        k = np.einsum("bpm,hmd->bphd", resid, state[a + "W_K"]) + state[a + "b_K"]
        v = np.einsum("bpm,hmd->bphd", resid, state[a + "W_V"]) + state[a + "b_V"]
        scores = np.einsum("bqhd,bkhd->bhqk", q, k) / attn_scale
        scores = np.where(future, -np.inf, scores)
        pattern = np.exp(scores - scores.max(-1, keepdims=True))
        pattern = pattern / pattern.sum(-1, keepdims=True)
        z = np.einsum("bkhd,bhqk->bqhd", v, pattern)
        resid = resid + np.einsum("bqhd,hdm->bqm", z, state[a + "W_O"]) + state[a + "b_O"]
        m = f"blocks.{layer}.mlp."
        pre = np.einsum("bpm,mn->bpn", resid, state[m + "W_in"]) + state[m + "b_in"]
        post = ACT_FN[cfg["act_fn"]](pre)
        resid = resid + np.einsum("bpn,nm->bpm", post, state[m + "W_out"]) + state[m + "b_out"]
    return resid @ state["unembed.W_U"] + state["unembed.b_U"]


def decide(rule: str, out: np.ndarray) -> np.ndarray:
    if rule == "bool":
        return out > 0.5
    return np.rint(out * np.arange(1, len(out) + 1)).astype(np.int64)


def check_against_executor(model: Model, inputs: list[list[str]], n_ctx=None) -> None:
    state, config = lens_state_dict(model, n_ctx)
    cfg, outputs = config["cfg"], config["crasp"]["outputs"]
    result = run_tokens(model, inputs)
    for b, words in enumerate(inputs):
        ids = np.array([[0, *model.token_ids(words)]])
        logits = lens_forward(state, cfg, ids)[0]
        size = len(words) + 1
        for spec in outputs:
            want = result.outputs[spec["name"]][b, :size]
            got = logits[:, spec["column"]]
            np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL, err_msg=spec["name"])
            np.testing.assert_array_equal(
                decide(spec["rule"], got), result.values[spec["name"]][b, :size]
            )


def random_inputs(rng: np.random.Generator, alphabet, count: int, max_len: int) -> list:
    lengths = [0, 1, max_len, *rng.integers(0, max_len + 1, size=count - 3)]
    return [list(rng.choice(list(alphabet), size=int(n))) for n in lengths]


# --- hand-built models ----------------------------------------------------------------------


def hand_model(
    rng: np.random.Generator,
    spec: list[tuple[list[tuple[int, int]], int | None]],
    activation: str = "relu",
    d: int = 6,
) -> Model:
    """Layers from ``spec``: (head dims [(dk, dv), ...], MLP width or None)."""
    layers = []
    for head_dims, width in spec:
        heads = [
            Head(
                w_q=rng.normal(size=(dk, d)),
                w_k=rng.normal(size=(dk, d)),
                w_v=rng.normal(size=(dv, d)),
                w_o=rng.normal(size=(d, dv)) * 0.5,
                scale=0.7,
            )
            for dk, dv in head_dims
        ]
        mlp = None
        if width is not None:
            mlp = MLP(
                w1=rng.normal(size=(width, d)),
                b1=rng.normal(size=width),
                w2=rng.normal(size=(d, width)) * 0.5,
                b2=rng.normal(size=d),
                activations=[activation] * width,
            )
        layers.append(Layer(heads, mlp))
    return Model(
        vocab=["<bos>", "x", "y"],
        w_e=rng.normal(size=(3, d)),
        features=["periodic:3:1"],
        w_p=rng.normal(size=(d, 1)),
        layers=layers,
        outputs=[Output("o", rng.normal(size=d), "bool"), Output("c", rng.normal(size=d), "count")],
        residual=[f"r{i}" for i in range(d)],
        guarantee=Guarantee(None, "test model"),
    )


PADDED = [([(2, 3), (1, 1)], 3), ([], 5), ([(1, 2)], None)]


# --- tests ----------------------------------------------------------------------------------


def test_every_example_exports_in_relu_mode():
    """Local relations lower to softmax lookups on absolute positions in relu mode (no
    relative bias), so every example fits TransformerLens."""
    for path in EXAMPLES:
        model = compiled(path)
        assert not has_relative_bias(model), path.name
        lens_state_dict(model)
    local = compiled(EXAMPLES[0].parent / "tomita7_local.cr")
    assert {"index", "index^2"} <= set(local.features)
    assert has_relative_bias(compiled(EXAMPLES[0].parent / "tomita7_local.cr", "heaviside"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_match_executor(path):
    model = compiled(path)
    rng = np.random.default_rng(len(path.name))
    check_against_executor(model, random_inputs(rng, model.vocab[1:], 10, MAX_LEN))


def test_count_outputs_match_executor():
    program = parse_program('alphabet "a", "b"\nC = # "a"\nD = C >= # "b"\noutput C, D')
    model = compile_program(program, mode="relu", max_len=MAX_LEN)
    assert [o.rule for o in model.outputs] == ["count", "bool"]
    inputs = random_inputs(np.random.default_rng(1), "ab", 10, MAX_LEN)
    check_against_executor(model, inputs)
    _, config = lens_state_dict(model)
    assert config["crasp"]["outputs"][0]["decision"].startswith("round(out * (t + 1))")
    assert config["crasp"]["outputs"][1]["decision"] == "out > 0.5"


def test_padding_heads_and_mlps():
    rng = np.random.default_rng(2)
    model = hand_model(rng, PADDED)
    check_against_executor(model, random_inputs(rng, "xy", 10, 11), n_ctx=12)
    state, config = lens_state_dict(model, 12)
    cfg = config["cfg"]
    assert (cfg["n_heads"], cfg["d_head"], cfg["d_mlp"], cfg["act_fn"]) == (2, 3, 5, "relu")
    # the missing head of layer 1 and 2, and the missing MLP of layer 2, are all zero
    assert not state["blocks.1.attn.W_V"].any() and not state["blocks.1.attn.W_O"].any()
    assert not state["blocks.2.attn.W_O"][1].any()
    for name in ("W_in", "b_in", "W_out", "b_out"):
        assert not state[f"blocks.2.mlp.{name}"].any()
    # the head scale and √d_head are folded into W_Q; padding columns are zero
    head = model.layers[0].heads[1]
    np.testing.assert_array_equal(
        state["blocks.0.attn.W_Q"][1][:, 0], 0.7 * np.sqrt(3) * head.w_q[0]
    )
    assert not state["blocks.0.attn.W_Q"][1][:, 1:].any()


def test_gelu_model_exports_as_gelu_new():
    rng = np.random.default_rng(3)
    model = hand_model(rng, PADDED, activation="gelu")
    check_against_executor(model, random_inputs(rng, "xy", 8, 11), n_ctx=12)
    assert lens_state_dict(model, 12)[1]["cfg"]["act_fn"] == "gelu_new"


def test_zero_layer_model():
    rng = np.random.default_rng(4)
    model = hand_model(rng, [])
    check_against_executor(model, random_inputs(rng, "xy", 6, 9), n_ctx=10)
    state, config = lens_state_dict(model, 10)
    cfg = config["cfg"]
    assert (cfg["n_layers"], cfg["n_heads"], cfg["d_head"], cfg["d_mlp"]) == (0, 1, 1, 1)
    assert set(state) == {"embed.W_E", "pos_embed.W_pos", "unembed.W_U", "unembed.b_U"}


def expected_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    d, n, h, m = cfg["d_model"], cfg["n_heads"], cfg["d_head"], cfg["d_mlp"]
    shapes = {
        "embed.W_E": (cfg["d_vocab"], d),
        "pos_embed.W_pos": (cfg["n_ctx"], d),
        "unembed.W_U": (d, cfg["d_vocab_out"]),
        "unembed.b_U": (cfg["d_vocab_out"],),
    }
    for layer in range(cfg["n_layers"]):
        a, p = f"blocks.{layer}.attn.", f"blocks.{layer}.mlp."
        shapes.update({a + w: (n, d, h) for w in ("W_Q", "W_K", "W_V")})
        shapes.update({a + b: (n, h) for b in ("b_Q", "b_K", "b_V")})
        shapes.update({a + "W_O": (n, h, d), a + "b_O": (d,)})
        shapes.update(
            {p + "W_in": (d, m), p + "b_in": (m,), p + "W_out": (m, d), p + "b_out": (d,)}
        )
    return shapes


@pytest.mark.parametrize("name", ["abcde.crasp", "anbncn.crasp", "tomita7.crasp", "hand"])
def test_shapes(name):
    if name == "hand":
        model, n_ctx = hand_model(np.random.default_rng(5), PADDED), 7
    else:
        model, n_ctx = compiled(EXAMPLES[0].parent / name), None
    state, config = lens_state_dict(model, n_ctx)
    cfg = config["cfg"]
    assert cfg["n_layers"] == len(model.layers)
    assert cfg["d_model"] == model.width
    assert cfg["d_vocab"] == len(model.vocab)
    assert cfg["d_vocab_out"] == len(model.outputs)
    assert cfg["n_heads"] == max([1, *(len(layer.heads) for layer in model.layers)])
    assert cfg["d_mlp"] == max(1, model.mlp_width)
    dims = [h.w_q.shape[0] for layer in model.layers for h in layer.heads]
    dims += [h.w_v.shape[0] for layer in model.layers for h in layer.heads]
    assert cfg["d_head"] == max([1, *dims])
    assert {k: v.shape for k, v in state.items()} == expected_shapes(cfg)
    assert all(v.dtype == np.float64 for v in state.values())
    assert not any(
        state[k].any() for k in state if k.split(".")[-1] in ("b_Q", "b_K", "b_V", "b_O")
    )
    assert not state["unembed.b_U"].any()
    assert cfg["normalization_type"] is None and cfg["use_attn_scale"] is True
    assert cfg["positional_embedding_type"] == "standard" and cfg["attn_only"] is False
    assert cfg["default_prepend_bos"] is True


def test_refusals_name_every_obstacle():
    def message(model: Model, **kw) -> CraspError:
        with pytest.raises(CraspError) as info:
            lens_state_dict(model, **kw)
        return info.value

    majority = EXAMPLES[0].parent / "majority.crasp"
    local = EXAMPLES[0].parent / "tomita7_local.cr"
    model = compiled(majority, "heaviside")
    units = model.layers[0].mlp.activations.count("heaviside")
    assert units >= 1
    err = message(model, n_ctx=10)
    assert f"layer 1 MLP (blocks.0.mlp) has {units} heaviside unit(s)" in str(err)
    err = message(compiled(majority, "layernorm"))
    assert "layer 1 MLP (blocks.0.mlp) uses selective layer norm" in str(err)
    assert "n_ctx is required" in str(err)  # exact at every length: no default n_ctx
    biased = compiled(majority)
    head = biased.layers[0].heads[0]
    biased = replace(
        biased, layers=[replace(biased.layers[0], heads=[replace(head, bias={1: 2.0})])]
    )
    err = message(biased)
    assert "layer 1 head 1 (blocks.0.attn head 0) has a relative position bias (offsets 1)" in str(
        err
    )
    assert len(err.diagnostics) == 1
    err = message(compiled(local, "heaviside"), n_ctx=10)
    text = str(err)
    assert "layer 1 head 2 (blocks.0.attn head 1) uses average-hard attention" in text
    assert "layer 1 head 2 (blocks.0.attn head 1) has a relative position bias" in text
    assert "layer 2 MLP (blocks.1.mlp) has" in text and "layer 3 MLP (blocks.2.mlp) has" in text
    assert "heaviside" in text and "layer 0" not in text
    assert "mode='relu'" in text  # the hint

    rng = np.random.default_rng(6)
    model = hand_model(rng, [([(1, 1), (1, 1)], 2), ([(1, 1)], 3)])
    model.layers[0].heads[0].mask = "strict"
    model.layers[0].heads[1].weighting = "hard-left"
    model.layers[1].heads[0].mask = "none"
    model.layers[1].mlp.activations = ["gelu"] * 3
    text = str(message(model, n_ctx=0))
    for part in (
        "layer 1 head 1 (blocks.0.attn head 0) has mask 'strict'",
        "layer 1 head 2 (blocks.0.attn head 1) uses unique-hard (leftmost) attention",
        "layer 2 head 1 (blocks.1.attn head 0) has mask 'none'",
        "mix 2 relu and 3 gelu",
        "n_ctx must be a positive integer",
    ):
        assert part in text


def test_n_ctx_handling():
    path = EXAMPLES[0].parent / "abab_star.cr"
    model = compiled(path)
    assert model.features  # periodic features make W_pos non-trivial
    state, config = lens_state_dict(model)
    assert config["cfg"]["n_ctx"] == MAX_LEN + 1
    assert state["pos_embed.W_pos"].shape == (MAX_LEN + 1, model.width)
    state, config = lens_state_dict(model, 10)
    assert config["cfg"]["n_ctx"] == 10
    for t in range(10):
        pos = [
            float((t - 1) % int(m) == int(r))  # BOS is token position -1
            for m, r in (f.split(":")[1:] for f in model.features)
        ]
        np.testing.assert_allclose(state["pos_embed.W_pos"][t], model.w_p @ pos)
    np.testing.assert_array_equal(
        lens_state_dict(model, 10)[0]["pos_embed.W_pos"],
        lens_state_dict(model)[0]["pos_embed.W_pos"][:10],
    )
    for bad in (0, -3, 2.5, True):
        with pytest.raises(CraspError, match="n_ctx must be a positive integer"):
            lens_state_dict(model, bad)
    unbounded = hand_model(np.random.default_rng(7), PADDED)
    with pytest.raises(CraspError, match="n_ctx is required"):
        lens_state_dict(unbounded)
    assert lens_state_dict(unbounded, 3)[1]["cfg"]["n_ctx"] == 3


def test_n_ctx_limit():
    """A huge n_ctx would allocate a huge positional table: refused up front."""
    model = compiled(EXAMPLES[0].parent / "abab_star.cr")
    for n_ctx in (10**12, 10**30, MAX_N_CTX + 1):
        with pytest.raises(CraspError, match="n_ctx") as err:
            lens_state_dict(model, n_ctx)
        assert f"at most {MAX_N_CTX:,}" in str(err.value)
    wide = hand_model(np.random.default_rng(3), [([(1, 1)], None)], d=1024)
    n_ctx = TORCH_DENSE_LIMIT // 1024 + 1  # within the limit, but the table is too big
    assert n_ctx <= MAX_N_CTX
    with pytest.raises(CraspError, match=r"pos_embed\.W_pos"):
        lens_state_dict(wide, n_ctx)
    # the default n_ctx (the guarantee + 1) is checked the same way
    model.guarantee.max_len = 10**12
    try:
        with pytest.raises(CraspError, match="n_ctx"):
            lens_state_dict(model)
    finally:
        model.guarantee.max_len = MAX_LEN


def test_disk_full_during_a_lens_export(tmp_path, monkeypatch):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    path = EXAMPLES[0].parent / "dyck1.cr"
    target = tmp_path / "lens"
    export_lens(compiled(path), target, model_name="old")
    before = {p.name: p.read_bytes() for p in target.iterdir()}

    def full(state, filename, metadata=None):
        Path(filename).write_bytes(b"\0" * 10)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safetensors_numpy, "save_file", full)
    with pytest.raises(CraspError, match="cannot write export") as err:
        export_lens(compiled(path), target, model_name="new")
    assert "No space left on device" in str(err.value)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lens"]


def test_lens_export_replaces_a_torch_export(tmp_path):
    pytest.importorskip("torch")
    from crasp_compiler.export.torch_files import export_model

    model = compiled(EXAMPLES[0].parent / "dyck1.cr")
    export_model(model, tmp_path / "out", "torch")
    export_lens(model, tmp_path / "out")
    export_lens(model, tmp_path / "out")  # a lens export replaces one (tokenizer.json too)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    assert json.loads((tmp_path / "out" / "config.json").read_text())["format"] == (
        "crasp-lens-export"
    )
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "data.csv").write_text("1,2")
    with pytest.raises(CraspError, match="not empty"):
        export_lens(model, tmp_path / "mine")
    assert (tmp_path / "mine" / "data.csv").read_text() == "1,2"


def test_round_trip_through_files(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    path = EXAMPLES[0].parent / "dyck1.cr"
    model = compiled(path)
    out = export_lens(model, tmp_path / "lens", model_name="dyck1")
    assert out == tmp_path / "lens"
    loaded = safetensors_numpy.load_file(str(out / "model.safetensors"))
    config = json.loads((out / "config.json").read_text())
    state, want = lens_state_dict(model, model_name="dyck1")
    assert config == want
    assert set(loaded) == set(state)
    for name, array in state.items():
        assert loaded[name].dtype == np.float64
        np.testing.assert_array_equal(loaded[name], array)
    crasp = config["crasp"]
    assert crasp["vocab"] == model.vocab and crasp["vocab"][0] == "<bos>"
    assert crasp["outputs"] == [{"name": "D", "column": 0, "rule": "bool", "decision": "out > 0.5"}]
    assert crasp["accept"] == model.accept
    assert crasp["guarantee"] == {"max_len": MAX_LEN, "text": model.guarantee.text}
    assert (
        crasp["residual"] == model.residual and len(crasp["residual"]) == config["cfg"]["d_model"]
    )
    assert crasp["source"] == model.source and crasp["source"]
    assert "token id 0" in crasp["note"].lower()
    assert config["cfg"]["model_name"] == "dyck1"
    words = list("(()())") + list("()" * 20)
    ids = np.array([[0, *model.token_ids(words)]])
    got = lens_forward(loaded, config["cfg"], ids)[0, :, 0]
    np.testing.assert_allclose(got, run_tokens(model, [words]).outputs["D"][0], rtol=TOL, atol=TOL)
    assert got[-1] > 0.5  # a balanced string is accepted


def test_the_export_writes_the_vocabulary_tokenizer(tmp_path):
    """``tokenizer.json`` is :func:`tokenizer_json` of the vocabulary, and the
    ``tokenizers`` library reads it: BOS and the model's ids, unknown words refused."""
    pytest.importorskip("safetensors")
    model = compiled(EXAMPLES[0].parent / "dyck1.cr")
    out = export_lens(model, tmp_path / "lens")
    written = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))
    assert written == tokenizer_json(model.vocab)
    tokenizers = pytest.importorskip("tokenizers")
    tokenizer = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tokenizer.encode("( ( ) )").ids == [0, *model.token_ids(list("(())"))]
    assert tokenizer.encode("( ( ) )").tokens == ["<bos>", "(", "(", ")", ")"]
    with pytest.raises(Exception, match=r"Missing \[UNK\]"):
        tokenizer.encode("( [")


def test_the_tokenizer_refuses_unknown_words_whatever_the_vocabulary():
    """The format needs an unknown token; it is never a word of the vocabulary, so an
    alphabet holding ``<unk>`` still refuses unknown words instead of mapping them."""
    tokenizers = pytest.importorskip("tokenizers")
    vocab = ["<bos>", "<unk>", "<<unk>>", "a"]
    spec = tokenizer_json(vocab)
    assert spec["model"]["unk_token"] not in vocab
    tokenizer = tokenizers.Tokenizer.from_str(json.dumps(spec))
    assert tokenizer.encode("a <unk> <<unk>>").ids == [0, 3, 1, 2]
    with pytest.raises(Exception, match=r"Missing \[UNK\]"):
        tokenizer.encode("a b")


def test_export_refuses_without_writing(tmp_path):
    pytest.importorskip("safetensors")
    model = compiled(EXAMPLES[0].parent / "tomita7_local.cr", "heaviside")
    with pytest.raises(CraspError, match="relative position bias"):
        export_lens(model, tmp_path / "lens", n_ctx=10)
    assert not (tmp_path / "lens").exists()


def test_load_lens_export_rebuilds_the_model(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    from crasp_compiler.api import load_model

    rng = np.random.default_rng(8)
    model = hand_model(rng, PADDED)
    out = export_lens(model, tmp_path / "lens", n_ctx=12)
    rebuilt = load_model(out)
    assert rebuilt.guarantee.max_len == 11  # unbounded model: capped at n_ctx - 1
    assert [len(layer.heads) for layer in rebuilt.layers] == [2, 0, 1]  # no padding heads
    assert rebuilt.layers[1].mlp is not None and rebuilt.layers[2].mlp is None
    inputs = random_inputs(rng, "xy", 10, 11)
    a, b = run_tokens(model, inputs), run_tokens(rebuilt, inputs)
    for name in ("o", "c"):
        np.testing.assert_allclose(b.outputs[name], a.outputs[name], rtol=TOL, atol=TOL)
    assert load_model(out / "config.json").residual == model.residual
    # weights that are no longer a crasp model are refused, naming the tensor
    state = safetensors_numpy.load_file(str(out / "model.safetensors"))
    state["blocks.2.attn.W_O"][1, 0, 0] = 1.0
    safetensors_numpy.save_file(state, str(out / "model.safetensors"))
    with pytest.raises(CraspError, match=r"blocks\.2\.attn\.W_O has nonzero padding"):
        load_model(out)
    config = json.loads((out / "config.json").read_text())
    config["version"] = 1
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(CraspError, match="unsupported lens export version 1"):
        load_model(out)


@pytest.fixture
def dyck_export(tmp_path) -> Path:
    pytest.importorskip("safetensors")
    return export_lens(compiled(EXAMPLES[0].parent / "dyck1.cr"), tmp_path / "lens", n_ctx=13)


def edit_config(out: Path, edit) -> None:
    config = json.loads((out / "config.json").read_text())
    edit(config)
    (out / "config.json").write_text(json.dumps(config))


def set_cfg(key, value):
    return lambda config: config["cfg"].update({key: value})


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (set_cfg("act_fn", "solu_ln"), "'act_fn' is \"solu_ln\""),
        (set_cfg("act_fn", "gelu"), "'act_fn' is \"gelu\""),
        (set_cfg("act_fn", "gelu_new"), 'MLP units are "relu" units'),
        (set_cfg("act_fn", None), "'act_fn' is null"),
        (set_cfg("normalization_type", "LN"), "'normalization_type' is \"LN\""),
        (set_cfg("normalization_type", "RMSPre"), "'normalization_type'"),
        (lambda c: c["cfg"].pop("normalization_type"), "'normalization_type' is missing"),
        (set_cfg("positional_embedding_type", "rotary"), "'positional_embedding_type'"),
        (set_cfg("positional_embedding_type", "shortformer"), "'positional_embedding_type'"),
        (set_cfg("attn_only", True), "'attn_only' is true"),
        (set_cfg("attn_only", 0), "'attn_only' is 0"),
        (set_cfg("use_attn_scale", False), "'use_attn_scale' is false"),
        (set_cfg("use_attn_scale", 1), "'use_attn_scale' is 1"),
        (set_cfg("default_prepend_bos", False), "'default_prepend_bos'"),
        (set_cfg("attn_scale", 1.0), "'attn_scale' is 1.0"),
        (set_cfg("attn_scale", True), "'attn_scale' is true"),
        (set_cfg("parallel_attn_mlp", True), "'parallel_attn_mlp'"),
        (set_cfg("gated_mlp", True), "'gated_mlp'"),
        (set_cfg("final_rms", True), "'final_rms'"),
        (set_cfg("rotary_dim", 1), "'rotary_dim'"),
        (set_cfg("n_key_value_heads", 1), "'n_key_value_heads'"),
        (set_cfg("attention_dir", "bidirectional"), "'attention_dir'"),
        (set_cfg("scale_attn_by_inverse_layer_idx", True), "'scale_attn_by_inverse_layer_idx'"),
        (set_cfg("attn_scores_soft_cap", 30.0), "'attn_scores_soft_cap'"),
        (set_cfg("tie_word_embeddings", True), "'tie_word_embeddings'"),
        (set_cfg("trust_remote_code", True), "'trust_remote_code'"),
        (set_cfg("dtype", "float32"), "'dtype'"),
        (set_cfg("rotary_base", 500), "'rotary_base'"),
        (set_cfg("tokenizer_name", "gpt2"), "'tokenizer_name'"),
        (set_cfg("d_model", 11.0), "'d_model' is 11.0"),
        (set_cfg("n_ctx", "13"), "'n_ctx' is \"13\""),
        (set_cfg("n_heads", True), "'n_heads' is true"),
        (set_cfg("n_layers", -1), "'n_layers' is -1"),
        (lambda c: c.update(cfg=[1, 2]), "'cfg' is not a JSON object"),
        (lambda c: c.update(version=True), "unsupported lens export version True"),
        (lambda c: c.update(version=2.0), "unsupported lens export version 2.0"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_config_transformer_lens_would_read_differently_is_refused(dyck_export, edit, fragment):
    """Fields of ``cfg`` that change what TransformerLens builds were accepted and ignored
    by ``crasp info/run/check``, which then checked another model than TransformerLens
    computes; each is refused, naming config.json and the field."""
    edit_config(dyck_export, edit)
    from crasp_compiler.api import load_model

    with pytest.raises(CraspError) as caught:
        load_model(dyck_export)
    message = str(caught.value)
    assert fragment in message and str(dyck_export / "config.json") in message, message
    from click.testing import CliRunner

    from crasp_compiler.cli import main

    for args in (["info"], ["run", "--outputs"]):
        result = CliRunner().invoke(main, [*args, str(dyck_export)], input="( )\n")
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        assert fragment in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "edit",
    [
        set_cfg("gated_mlp", False),
        set_cfg("attn_scale", -1),
        set_cfg("n_devices", 1),
        set_cfg("rotary_dim", None),
        set_cfg("seed", 3),
        set_cfg("model_name", "mine"),
        set_cfg("eps", 1e-6),
        set_cfg("use_attn_result", True),
    ],
)
def test_fields_that_change_nothing_are_accepted(dyck_export, edit):
    from crasp_compiler.api import load_model

    edit_config(dyck_export, edit)
    model = compiled(EXAMPLES[0].parent / "dyck1.cr")
    rebuilt = load_model(dyck_export)
    words = [list("(()())"), list("(()"), []]
    assert (run_tokens(rebuilt, words).values["D"] == run_tokens(model, words).values["D"]).all()


def test_any_act_fn_of_the_two_fits_a_model_without_mlp_units(tmp_path):
    """Padding MLPs are all zero, and relu(0) = gelu_new(0) = 0."""
    pytest.importorskip("safetensors")
    from crasp_compiler.api import load_model

    model = hand_model(np.random.default_rng(3), [([(1, 2)], None)])
    out = export_lens(model, tmp_path / "lens", n_ctx=6)
    edit_config(out, set_cfg("act_fn", "gelu_new"))
    assert load_model(out).layers[0].mlp is None
    edit_config(out, set_cfg("act_fn", "silu"))
    with pytest.raises(CraspError, match="'act_fn' is \"silu\""):
        load_model(out)


def test_an_export_with_a_short_context_reads_back(dyck_export):
    """A relu model (max_len 64) exported with n_ctx 13 is read as a model exact up to
    12 tokens, float limits included (its guarantee once exceeded its float limits'
    cap and its compile options' max_len, and the file was refused)."""
    from crasp_compiler.api import load_model

    guarantee = load_model(dyck_export).guarantee
    assert guarantee.max_len == 12 and set(guarantee.dtypes.values()) == {12}


def _crasp_section(edit):
    def apply(config):
        edit(config["crasp"])

    return apply


def _relative_bias(crasp: dict) -> None:
    head = crasp["model"]["layers"][0]["heads"][0]
    head["bias"] = {"-1": 2.0}
    del head["kind"]  # derived from the weights again


def _first_head(key, value):
    return _crasp_section(lambda c: c["model"]["layers"][0]["heads"][0].update({key: value}))


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (_first_head("weighting", "hard"), "average-hard attention"),
        (_first_head("mask", "strict"), "mask 'strict'"),
        (_crasp_section(_relative_bias), "relative position bias"),
        (_crasp_section(lambda c: c.update(vocab=["<bos>", ")", "("])), "'vocab'"),
        (_crasp_section(lambda c: c.update(bos_id=1)), "'bos_id'"),
        (_crasp_section(lambda c: c.update(bos_id=False)), "'bos_id'"),
        (_crasp_section(lambda c: c["outputs"][0].update(rule="count")), "'outputs'"),
        (_crasp_section(lambda c: c["residual"].reverse()), "'residual'"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_crasp_section_that_is_not_the_lens_model_is_refused(dyck_export, edit, fragment):
    """The model header in the config is what crasp checks; TransformerLens computes
    causal softmax heads without bias, reads ``crasp.vocab`` and ``crasp.outputs``."""
    from crasp_compiler.api import load_model

    edit_config(dyck_export, edit)
    with pytest.raises(CraspError) as caught:
        load_model(dyck_export)
    assert fragment in str(caught.value) and "config.json" in str(caught.value)


DEEP = "@deep@"  # replaced in the file by lists nested 5,000 deep (too deep for json)


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (set_cfg("d_model", 9), "cfg field 'd_model' is 9, but the weights have"),
        (set_cfg("n_heads", 1), "cfg field 'n_heads' is 1, but the weights have"),
        (set_cfg("d_head", 64), "cfg field 'd_head' is 64, but the weights have"),
        (set_cfg("n_ctx", 2), "cfg field 'n_ctx' is 2, but the weights have 13"),
        (set_cfg("n_layers", 0), "cfg field 'n_layers' is 0, but the weights have"),
        (set_cfg("d_vocab", 50257), "cfg field 'd_vocab' is 50257, but the weights have 3"),
        (set_cfg("d_vocab_out", 7), "cfg field 'd_vocab_out' is 7, but the weights have"),
        (set_cfg("d_mlp", 1), "cfg field 'd_mlp' is 1, but the weights have"),
        (_crasp_section(lambda c: c.update(head_dims=None)), "crasp field 'head_dims' is null"),
        (_crasp_section(lambda c: c.update(head_dims=[[[1]]])), "crasp field 'head_dims'"),
        (_crasp_section(lambda c: c.update(model=0)), "crasp field 'model' is 0"),
        (_crasp_section(lambda c: c.update(model=None)), "crasp field 'model' is null"),
        (lambda c: c.update(crasp="x"), "'crasp' is not a JSON object"),
        (set_cfg("n_layers", 10**25), "cfg field 'n_layers' is 1"),  # not iterated: no hang
        (_crasp_section(lambda c: c.update(model={})), "crasp field 'model' is not a model"),
        (_crasp_section(lambda c: c.update(head_dims=[])), "crasp field 'head_dims' has 0 layers"),
        (set_cfg("attn_only", DEEP), "deeper than 64 levels (in field cfg.attn_only[0]"),
        (_crasp_section(lambda c: c.update(vocab=DEEP)), "(in field crasp.vocab[0]"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_refused_lens_export_names_the_field(dyck_export, edit, fragment):
    """Sizes the weights contradict, a ``crasp`` section of the wrong shape and JSON too
    deep to read are refused naming the field (they said "the weights' names or shapes do
    not match the config", "'NoneType' object is not iterable" or "maximum recursion
    depth exceeded")."""
    from crasp_compiler.api import load_model

    edit_config(dyck_export, edit)
    text = (dyck_export / "config.json").read_text()
    text = text.replace(json.dumps(DEEP), "[" * 5000 + "1" + "]" * 5000)
    (dyck_export / "config.json").write_text(text)
    with pytest.raises(CraspError) as caught:
        load_model(dyck_export)
    assert fragment in str(caught.value), str(caught.value)


def test_crasp_check_reads_a_lens_export(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    from click.testing import CliRunner

    from crasp_compiler.cli import main

    out = export_lens(compiled(EXAMPLES[0].parent / "dyck1.cr"), tmp_path / "lens")
    args = ["check", str(out), "--samples", "40", "--max-len", "20"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "all runtimes agree" in result.output
