"""The builder API: declarations, scheduling (parallel and serial composition, in-place
updates), errors, guarantees, and including built models (composition of transformers).

Every model built here is run by the numpy executor and the torch module and saved and
loaded through the model file format.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from crasp_compiler.assemble.builder import Builder
from crasp_compiler.cookbook.blocks import EXACT, Exactness, FFNBlock, Form, HeadBlock, Unit, var
from crasp_compiler.cookbook.ffn import clamp
from crasp_compiler.languages.crasp.compile import compile_program
from crasp_compiler.languages.crasp.interpret import interpret_batch
from crasp_compiler.languages.crasp.program import load_program
from crasp_compiler.model.io import read_model, save_model
from crasp_compiler.runtime.numpy_exec import run_tokens
from tests.languages.test_compiler import EXAMPLES
from tests.support.block_harness import evaluate


def average(value: Form, out: str, label: str = "") -> HeadBlock:
    return HeadBlock([], [], {out: value}, EXACT, label=label)


def relu(form: Form, out: str, label: str = "") -> FFNBlock:
    return FFNBlock([Unit(form, 0.0)], {out: {0: 1.0}}, EXACT, label=label)


def copy_in_place(name: str, value: Form) -> FFNBlock:
    """``name := value`` for value ≥ 0 and name ≥ 0 (test helper, ReLU pair)."""
    return FFNBlock(
        [Unit(value, 0.0), Unit(var(name), 0.0)],
        {name: {0: 1.0, 1: -1.0}},
        EXACT,
        label=f"{name} := ...",
        in_place=frozenset({name}),
    )


def test_inputs_are_embeddings_and_features():
    b = Builder(["a", "b"])
    x = b.embed("x", {"a": 2.0, "b": -1.0}, bos=0.5)
    t = b.feature("index")
    model = b.build(
        {"bos": b.bos, "nonbos": b.nonbos, "one": b.one, "a": b.token("a"), "x": x, "t": 3 * t}
    )
    out = run_tokens(model, [list("abba")]).outputs
    assert out["bos"][0].tolist() == [1, 0, 0, 0, 0]
    assert out["nonbos"][0].tolist() == [0, 1, 1, 1, 1]
    assert out["one"][0].tolist() == [1] * 5
    assert out["a"][0].tolist() == [0, 1, 0, 0, 1]
    assert out["x"][0].tolist() == [0.5, 2, -1, -1, 2]
    assert out["t"][0].tolist() == [0, 3, 6, 9, 12]
    assert model.layers == []
    assert model.features == ["index"]
    assert model.residual[:5] == ["BOS", "nonbos", "token:a", "token:b", "x"]


def test_independent_blocks_share_a_layer_and_dependent_ones_follow():
    """Parallel composition: two averages of inputs land in layer 1; serial composition:
    a ReLU of their difference is layer 1's MLP, an average of that is layer 2's head."""

    def construct(b, x):
        p = b.add(average(x["u"], "p"))
        q = b.add(average(x["v"], "q"))
        r = b.add(relu(p - q, "r"))
        s = b.add(average(r, "s"))
        return {"p": p, "q": q, "r": r, "s": s}

    u, v = [1.0, -2.0, 3.0, 0.5], [0.0, 1.0, -1.0, 2.0]
    got = evaluate({"u": u, "v": v}, construct)

    def prefix(xs):
        padded = [0.0, *xs]  # BOS carries 0
        return [sum(padded[: t + 1]) / (t + 1) for t in range(len(padded))]

    p, q = prefix(u), prefix(v)
    r = [max(a - c, 0.0) for a, c in zip(p, q, strict=True)]
    s = [sum(r[: t + 1]) / (t + 1) for t in range(len(r))]
    for name, want in {"p": p, "q": q, "r": r, "s": s}.items():
        np.testing.assert_allclose(got[name], want, atol=1e-12)

    b = Builder(["a"])
    x = b.embed("x", {"a": 1.0})
    p = b.add(average(x, "p"))
    q = b.add(average(x, "q"))
    b.add(relu(p - q, "r"))
    model = b.build({"r": var("r")})
    assert len(model.layers) == 1 and len(model.layers[0].heads) == 2
    assert model.layers[0].mlp is not None


def test_in_place_update_waits_for_readers_of_the_old_value():
    """``x`` is read by an average (layer 1 head), then overwritten in place by an MLP;
    a head added after the update reads the new value, so it goes to layer 2."""
    b = Builder(["a", "b"])
    x = b.embed("x", {"a": 1.0})
    y = b.embed("y", {"b": 1.0})
    old = b.add(average(x, "old"))
    b.add(copy_in_place("x", y))  # x := y
    new = b.add(average(x, "new"))
    model = b.build({"old": old, "new": new, "x": x})
    assert [len(layer.heads) for layer in model.layers] == [1, 1]
    assert model.layers[0].mlp is not None
    out = run_tokens(model, [list("aab")]).outputs
    np.testing.assert_allclose(out["old"][0], [0, 1 / 2, 2 / 3, 2 / 4])
    np.testing.assert_allclose(out["new"][0], [0, 0, 0, 1 / 4])
    np.testing.assert_allclose(out["x"][0], [0, 0, 0, 1])


def test_in_place_update_after_a_later_reader_in_program_order():
    """An MLP that reads ``x`` in the same slot as the update sees the old value."""
    b = Builder(["a"])
    x = b.embed("x", {"a": 2.0})
    r = b.add(relu(x, "r"))  # MLP slot 2, reads the old x
    b.add(copy_in_place("x", Form()))  # x := 0, same MLP slot: adds −x
    model = b.build({"r": r, "x": x})
    assert len(model.layers) == 1
    out = run_tokens(model, [list("aa")]).outputs
    assert out["r"][0].tolist() == [0, 2, 2]
    assert out["x"][0].tolist() == [0, 0, 0]


@pytest.mark.parametrize(
    "action, message",
    [
        (lambda b: b.token("c"), "not in the alphabet"),
        (lambda b: b.embed("x", {"c": 1.0}), "not in the alphabet"),
        (lambda b: b.embed("BOS", {}), "already defined"),
        (lambda b: b.feature("nonsense"), "unknown positional feature"),
        (lambda b: b.add(relu(var("nowhere"), "r")), "not defined yet"),
        (lambda b: b.add(relu(b.bos, "nonbos")), "already defined"),
        (lambda b: b.add(copy_in_place("ghost", b.bos)), "does not exist"),
        (lambda b: b.build({"o": (b.bos, "maybe")}), "rule must be one of"),
        (lambda b: b.build({"o": var("nowhere")}), "not defined"),
        (lambda b: b.build({"o": b.bos}, accept="o"), "accept must name a bool output"),
    ],
)
def test_mistakes_are_clear_errors(action, message):
    b = Builder(["a", "b"])
    with pytest.raises(ValueError, match=message):
        action(b)


@pytest.mark.parametrize("alphabet", [["a", "a"], ["<bos>", "a"]])
def test_bad_alphabets_are_refused(alphabet):
    with pytest.raises(ValueError, match="distinct symbols"):
        Builder(alphabet)


def test_fresh_names_never_collide():
    b = Builder(["a"])
    names = {b.fresh("v") for _ in range(50)}
    assert len(names) == 50


def test_guarantee_is_the_weakest_condition_of_the_blocks():
    b = Builder(["a"])
    x = b.token("a")
    b.add(average(x, "p"))
    assert b.build({"p": var("p")}).guarantee.max_len is None
    b.add(HeadBlock([], [], {"q": x}, Exactness("exact for lengths <= 40", max_len=40)))
    b.add(HeadBlock([], [], {"r": x}, Exactness("exact for lengths <= 10", max_len=10)))
    guarantee = b.build({"p": var("p")}).guarantee
    assert guarantee.max_len == 10 and guarantee.text == "exact for inputs of length <= 10"
    b.add(relu(x, "s"))
    b.blocks[-1].exact = Exactness("approximate: within 0.01", error=0.01)
    guarantee = b.build({"p": var("p")}).guarantee
    assert guarantee.max_len == 10
    assert guarantee.text.startswith("approximate") and "within 0.01" in guarantee.text
    model = b.build({"p": var("p")})
    assert "exact for lengths <= 40" in model.info["exactness"]


def test_built_models_save_load_and_run_in_torch(tmp_path):
    torch = pytest.importorskip("torch")

    from crasp_compiler.runtime.torch_module import TorchTransformer

    b = Builder(["(", ")"])
    depth = b.add(average(b.embed("o", {"(": 1.0, ")": -1.0}), "depth"))
    low = b.add(relu(-depth, "low"))
    model = b.build({"depth": depth, "low": (low, "value"), "neg": (low * 1e9, "bool")})
    path = tmp_path / "hand.npz"
    save_model(model, path)
    loaded = read_model(path)
    words = [list("(()))("), list("()")]
    want = run_tokens(model, words)
    got = run_tokens(loaded, words)
    module = TorchTransformer(loaded)
    ids, lengths = module.encode(words)
    with torch.no_grad():
        raw = module(ids, lengths)
    decided = module.decide(raw, lengths)  # padding reads False, 0 or NaN, as in numpy
    for k, out in enumerate(model.outputs):
        np.testing.assert_array_equal(got.outputs[out.name], want.outputs[out.name])
        np.testing.assert_allclose(raw[..., k].numpy(), want.outputs[out.name], atol=1e-12)
        np.testing.assert_array_equal(decided[out.name].numpy(), want.values[out.name])
    assert want.values["neg"][0].tolist() == [False, False, False, False, False, True, False]


# ---------------------------------------------------------------- including built models


def compiled(name: str, mode: str = "heaviside"):
    program = load_program(EXAMPLES / name)
    return program, compile_program(program, mode, max_len=30)


def random_words(alphabet, count, max_len, seed=0):
    rng = random.Random(seed)
    words = [[]]
    while len(words) < count:
        n = rng.randint(1, max_len)
        words.append([rng.choice(alphabet) for _ in range(n)])
    return words


@pytest.mark.parametrize("mode", ["heaviside", "layernorm", "relu"])
def test_parallel_composition_of_two_compiled_programs(mode):
    """Including two models side by side computes both; the depth is the larger one."""
    dyck, dyck_model = compiled("dyck1.cr", mode)
    majority, majority_model = compiled("majority.crasp", mode)
    alphabet = sorted(set(dyck.alphabet) | set(majority.alphabet))
    b = Builder(alphabet)
    outputs = {}
    for prefix, model in (("dyck", dyck_model), ("maj", majority_model)):
        for name, spec in b.include(model, prefix).items():
            outputs[f"{prefix}.{name}"] = spec
    both = b.build(outputs)
    assert len(both.layers) <= max(len(dyck_model.layers), len(majority_model.layers))
    for prefix, program in (("dyck", dyck), ("maj", majority)):
        words = random_words(program.alphabet, 60, 12)
        result = run_tokens(both, words)
        for row, word in enumerate(words):
            want = interpret_batch(program, [word])
            for name in program.outputs:
                np.testing.assert_array_equal(
                    result.values[f"{prefix}.{name}"][row, : len(word) + 1], want[name][0]
                )


def test_serial_composition_reads_an_included_models_outputs():
    """Count the accepted prefixes of Dyck-1: include the compiled model, make its
    ``accept`` output a {0,1} value, then average it — the count is round(avg · (t + 1)).

    A ``bool`` output is decided ``> 1/2``; Dyck-1's readout absorbs its final ``and``
    (``M + B − 1``, an integer at every token), so ``clamp(·, 0, 1)`` makes the bit, one
    MLP, and the average one attention sublayer after it."""
    program, model = compiled("dyck1.cr")
    b = Builder(program.alphabet)
    outputs = b.include(model, "dyck")
    accept, _ = outputs[program.accept]
    # the accept output is an integer at tokens, and its BOS value the empty prefix's (1)
    bit = b.add(clamp(accept, 0.0, 1.0, "accepted"))
    counted = b.add(average(bit, "accepted_prefixes"))
    both = b.build({"count": (counted, "count"), program.accept: outputs[program.accept]})
    assert len(both.layers) == len(model.layers) + 2
    words = random_words(program.alphabet, 80, 14, seed=3)
    result = run_tokens(both, words)
    for row, word in enumerate(words):
        flags = interpret_batch(program, [word])[program.accept][0]
        want = np.cumsum(flags.astype(int))
        np.testing.assert_array_equal(result.values["count"][row, : len(word) + 1], want)


def test_include_refuses_symbols_outside_the_alphabet():
    _, model = compiled("dyck1.cr")
    with pytest.raises(ValueError, match="outside the alphabet"):
        Builder(["("]).include(model, "d")


def test_crasp_check_compares_raw_value_outputs_to_a_tolerance(tmp_path):
    """A hand-built model has no source: ``check_model`` compares numpy with torch, raw
    ``value`` outputs to a tolerance and ``int`` / ``count`` outputs exactly."""
    pytest.importorskip("torch")
    from crasp_compiler.verify import check_model

    b = Builder(["(", ")"])
    depth = b.add(average(b.embed("o", {"(": 1.0, ")": -1.0}), "depth"))
    model = b.build({"depth": depth, "balance": (depth * 1, "count"), "o": (var("o"), "int")})
    report = check_model(model, samples=40, max_len=30)
    assert report.runtimes == ["numpy", "torch"]
    assert report.disagreements == 0
    assert report.max_raw_difference < 1e-12
