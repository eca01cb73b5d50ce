"""Differential tests: compiled models against the reference interpreter.

A compiled model is exact when, for every input, every named output decided by the
executor (``RunResult.values``) equals the interpreter's value at *every* position,
the empty prefix (t = 0, BOS) included. Checked here:

- every example in ``examples/crasp/``, in heaviside mode, layernorm mode and relu mode
  with ``max_len=256``, in float64: exhaustively on all strings up to length 8 (alphabets of
  at most 3 symbols) or 5 (4-5 symbols); on random strings and on members from the
  recognisers' generators up to length 256 (run as one right-padded batch, so padding
  is exercised too); and, for programs without local relations, on 20 strings of
  length 2000 (heaviside and layernorm);
- float32 runs of the examples on inputs of length at most 64;
- random programs (``tests.support.strategies.programs``) with and without local relations and
  periodic predicates, in all three modes: all inputs up to length 4 and random inputs up to
  length 12;
- layer counts against ``dependency_bound``, the relu length guarantee, and the
  ``residuals=True`` trace.
"""

from __future__ import annotations

import functools
import itertools
import random
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crasp_compiler import CraspError, Program, interpret_batch, load_program, parse_program
from crasp_compiler.languages.crasp.compile import compile_program
from crasp_compiler.languages.crasp.depth import dependency_bound
from crasp_compiler.languages.crasp.nodes import Compare, walk
from crasp_compiler.model.model import Model
from crasp_compiler.runtime.numpy_exec import run_tokens
from tests.support.recognizers import REGISTRY
from tests.support.strategies import all_inputs, programs, random_inputs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "crasp"
EXAMPLE_FILES = sorted(p.name for p in EXAMPLES.iterdir() if p.suffix in (".cr", ".crasp"))
NONLOCAL_FILES = [name for name in EXAMPLE_FILES if not load_program(EXAMPLES / name).uses_local]

RELU_MAX_LEN = 256
MODES = [
    pytest.param("heaviside", id="heaviside"),
    pytest.param("relu", id="relu256"),
    pytest.param("layernorm", id="layernorm"),
]

EXHAUSTIVE_SMALL = 8  # every string up to this length, alphabets of <= 3 symbols
EXHAUSTIVE_LARGE = 5  # alphabets of 4-5 symbols
SAMPLED = 40  # random strings, and as many generated members, up to length 256
LONG_LENGTH = 2000
LONG_COUNT = 10  # random strings, and as many generated members, of length 2000
FLOAT32_MAX_LEN = 64

# ---------------------------------------------------------------- helpers


@functools.cache
def program(name: str) -> Program:
    return load_program(EXAMPLES / name)


@functools.cache
def model(name: str, mode: str) -> Model:
    return compile_program(
        program(name), mode=mode, max_len=RELU_MAX_LEN if mode == "relu" else None
    )


def exhaustive(alphabet: Sequence[str]) -> list[list[str]]:
    limit = EXHAUSTIVE_SMALL if len(alphabet) <= 3 else EXHAUSTIVE_LARGE
    return [list(word) for n in range(limit + 1) for word in itertools.product(alphabet, repeat=n)]


def sampled(name: str, max_len: int, count: int, seed: str) -> list[list[str]]:
    """``count`` uniformly random strings and ``count`` generated members, lengths in
    0..max_len (the extremes always included); members never exceed ``max_len``."""
    rng = random.Random(f"{name}-{seed}")
    alphabet = program(name).alphabet
    lengths = [0, max_len] + [rng.randint(0, max_len) for _ in range(count - 2)]
    words = [[rng.choice(alphabet) for _ in range(n)] for n in lengths]
    generate = REGISTRY[name].generate
    members = [generate(rng, n) for n in lengths]
    return words + [w for w in members if len(w) <= max_len]


def assert_agrees(
    prog: Program,
    compiled: Model,
    words: Sequence[Sequence[str]],
    *,
    dtype: type = np.float64,
    padded: bool = False,
    what: str = "",
    on_overlength: str = "error",
) -> None:
    """Every output of ``compiled`` equals the interpreter at every position of every
    word. ``padded``: run all words as one right-padded batch (else one batch per length).
    """
    groups: dict[int, list[int]] = defaultdict(list)
    for k, word in enumerate(words):
        groups[len(word)].append(k)

    def decided(batch):
        return run_tokens(compiled, batch, dtype=dtype, on_overlength=on_overlength).values

    batched = decided(words) if padded and words else None
    for n, rows in sorted(groups.items()):
        batch = [list(words[k]) for k in rows]
        expected = interpret_batch(prog, batch)
        got = batched if batched is not None else decided(batch)
        for name in prog.outputs:
            values = got[name][rows, : n + 1] if batched is not None else got[name]
            wrong = np.argwhere(values != expected[name])
            if len(wrong):
                row, t = wrong[0]
                word = " ".join(batch[row])
                raise AssertionError(
                    f"{what}: output {name} differs on {word!r} (length {n}) at t={t}: "
                    f"model {values[row].tolist()} != interpreter {expected[name][row].tolist()}"
                )


def compile_random(prog: Program, mode: str, max_len: int | None) -> Model:
    return compile_program(prog, mode=mode, max_len=max_len)


# ---------------------------------------------------------------- examples


def test_every_example_is_registered():
    assert EXAMPLE_FILES
    assert set(EXAMPLE_FILES) == set(REGISTRY)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_example_exhaustive(name, mode):
    prog = program(name)
    assert_agrees(prog, model(name, mode), exhaustive(prog.alphabet), what=f"{name} {mode}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_example_sampled_up_to_256(name, mode):
    prog = program(name)
    words = sampled(name, RELU_MAX_LEN, SAMPLED, "sampled")
    assert max(map(len, words)) == RELU_MAX_LEN
    assert_agrees(prog, model(name, mode), words, padded=True, what=f"{name} {mode}")
    # the generated members are accepted (the acceptance path is exercised)
    members = words[SAMPLED:]
    result = run_tokens(model(name, mode), members)
    assert result.final(prog.accept).all()


@pytest.mark.parametrize("mode", ["heaviside", "layernorm"])
@pytest.mark.parametrize("name", NONLOCAL_FILES)
def test_example_length_2000(name, mode):
    prog = program(name)
    rng = random.Random(f"{name}-long")
    words = [[rng.choice(prog.alphabet) for _ in range(LONG_LENGTH)] for _ in range(LONG_COUNT)]
    words += [REGISTRY[name].generate(rng, LONG_LENGTH) for _ in range(LONG_COUNT)]
    assert all(len(w) > LONG_LENGTH - 10 for w in words)
    assert_agrees(prog, model(name, mode), words, padded=True, what=f"{name} {mode} long")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_example_float32(name, mode):
    """Within the model's float32 guarantee the outputs are exact; beyond it (relu-mode
    models, whose ramps magnify rounding) the runtime refuses by default, and the outputs
    are still compared, as a measurement, with the refusal switched off."""
    prog, compiled = program(name), model(name, mode)
    limit = compiled.guarantee.limit("float32")
    if mode != "relu":  # exact at every length in real arithmetic: long float32 horizons
        assert limit is not None and limit >= 10_000, compiled.guarantee.text
    short = [w for w in exhaustive(prog.alphabet) if len(w) <= 5]
    words = short + sampled(name, FLOAT32_MAX_LEN, SAMPLED, "float32")
    covered = [w for w in words if compiled.guarantee.covers(len(w), "float32")]
    beyond = [w for w in words if not compiled.guarantee.covers(len(w), "float32")]
    assert_agrees(prog, compiled, covered, dtype=np.float32, padded=True, what=f"{name} float32")
    if beyond:
        with pytest.raises(CraspError, match="proven exact for in float32"):
            run_tokens(compiled, beyond[:1], dtype=np.float32)
        assert_agrees(
            prog,
            compiled,
            beyond,
            dtype=np.float32,
            padded=True,
            what=f"{name} float32",
            on_overlength="ignore",
        )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_layers_match_dependency_bound(name, mode):
    compiled = model(name, mode)
    bound = compiled.info["dependency_bound"]
    assert bound == dependency_bound(program(name), mode)
    assert len(compiled.layers) == bound


# ---------------------------------------------------------------- random programs

RANDOM = settings(
    max_examples=40,
    suppress_health_check=[HealthCheck.filter_too_much],
)
RELATION_CLASSES = [
    pytest.param(False, False, id="none"),
    pytest.param(False, True, id="periodic"),
    pytest.param(True, False, id="local"),
    pytest.param(True, True, id="periodic+local"),
]


@pytest.mark.parametrize("mode", ["heaviside", "relu", "layernorm"])
@pytest.mark.parametrize(("local", "periodic"), RELATION_CLASSES)
@RANDOM
@given(data=st.data())
def test_random_programs(local, periodic, mode, data):
    prog = data.draw(
        programs(local=local, periodic=periodic, max_definitions=7, max_depth=4), label="program"
    )
    max_len = data.draw(st.sampled_from([12, RELU_MAX_LEN]), label="max_len")
    compiled = compile_random(prog, mode, max_len if mode == "relu" else None)
    # the bound is met on every example (test_layers_match_dependency_bound); constant or
    # cancelling sub-expressions (0 <= 0, # "a" - # "a") fold away and can leave fewer
    assert len(compiled.layers) <= compiled.info["dependency_bound"]
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    words = all_inputs(prog, 4) + random_inputs(prog, seed, count=40, max_len=12)
    assert_agrees(prog, compiled, words, what=f"random {mode}")
    assert_agrees(prog, compiled, words, padded=True, what=f"random {mode} padded")


def test_constant_false_formula_compiles():
    prog = parse_program('B = "a" && !"a"\naccept B')
    compiled = compile_program(prog)
    assert_agrees(prog, compiled, all_inputs(prog, 3))


def test_constant_true_formula_compiles():
    prog = parse_program('B = "a" || !"a"\nC = # B\nD = C > 1 && !"b"\noutput B, C\naccept D')
    for mode, max_len in (("heaviside", None), ("relu", 8), ("layernorm", None)):
        compiled = compile_program(prog, mode=mode, max_len=max_len)
        assert_agrees(prog, compiled, all_inputs(prog, 6), what=mode)


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_mode_architectures(name):
    """relu mode is a plain softmax/ReLU model (relative-position bias allowed); layernorm
    mode has only ReLU units, with a layer-normalised pair per comparison; heaviside mode
    uses no layer norm."""
    relu, signs, steps = (model(name, mode) for mode in ("relu", "layernorm", "heaviside"))
    for compiled in (relu, signs, steps):
        assert compiled.info["class"] == program(name).relation_class
    heads = [h for layer in relu.layers for h in layer.heads]
    assert {h.weighting for h in heads} == {"softmax"}
    for compiled, activations in ((relu, {"relu"}), (signs, {"relu"})):
        mlps = [layer.mlp for layer in compiled.layers if layer.mlp is not None]
        assert {a for m in mlps for a in m.activations} <= activations
    assert not any(layer.mlp.norm_groups for layer in relu.layers if layer.mlp is not None)
    assert not any(layer.mlp.norm_groups for layer in steps.layers if layer.mlp is not None)
    comparisons = sum(
        isinstance(node, Compare) for d in program(name).definitions for node in walk(d.expr)
    )
    groups = [g for layer in signs.layers if layer.mlp for g in layer.mlp.norm_groups]
    assert all(len(g) == 2 for g in groups)
    assert (len(groups) > 0) == (comparisons > 0)
    assert signs.guarantee.max_len is None and relu.guarantee.max_len == RELU_MAX_LEN


# ---------------------------------------------------------------- guarantees and traces


def test_relu_refuses_inputs_beyond_max_len():
    name = "majority.crasp"
    compiled = model(name, "relu")
    at_limit = ["1"] * RELU_MAX_LEN
    assert run_tokens(compiled, [at_limit]).final("M").tolist() == [True]
    too_long = ["0"] * (RELU_MAX_LEN + 1)
    with pytest.raises(CraspError, match=r"input length 257 exceeds .*length <= 256"):
        run_tokens(compiled, [too_long])
    with pytest.raises(CraspError, match="exceeds"):
        run_tokens(compiled, [["1"], too_long])  # the longest input of a batch decides
    with pytest.warns(UserWarning, match="input length 257 exceeds"):
        result = run_tokens(compiled, [too_long], on_overlength="warn")
    assert result.values["M"].shape == (1, RELU_MAX_LEN + 2)
    run_tokens(compiled, [too_long], on_overlength="ignore")
    with pytest.raises(ValueError, match="on_overlength"):
        run_tokens(compiled, [too_long], on_overlength="nope")


def test_heaviside_has_no_length_limit():
    compiled = model("majority.crasp", "heaviside")
    assert compiled.guarantee.max_len is None
    assert run_tokens(compiled, [["1"] * 3000]).final("M").tolist() == [True]


def test_tiny_relu_limit():
    prog = program("dyck1.cr")
    compiled = compile_program(prog, mode="relu", max_len=0)
    assert run_tokens(compiled, [[]]).final("D").tolist() == [True]
    with pytest.raises(CraspError):
        run_tokens(compiled, [["("]])


@pytest.mark.parametrize("name", ["dyck1.cr", "tomita7_local.cr", "induction_head.crasp"])
def test_residual_trace(name):
    compiled = model(name, "heaviside")
    alphabet = program(name).alphabet
    words = [[*alphabet, *alphabet[::-1], alphabet[0]], []]
    result = run_tokens(compiled, words, residuals=True)
    assert result.residuals is not None
    labels = [label for label, _ in result.residuals]
    expected = ["embed"]
    for number, layer in enumerate(compiled.layers, start=1):
        if layer.heads:
            expected.append(f"layer {number} attention")
        if layer.mlp is not None:
            expected.append(f"layer {number} mlp")
    assert labels == expected
    size = 1 + max(map(len, words))
    for _, x in result.residuals:
        assert x.shape == (len(words), size, compiled.width)
    embed, last = result.residuals[0][1], result.residuals[-1][1]
    bos = compiled.residual.index("BOS")
    assert (embed[:, 0, bos] == 1).all()
    for out in compiled.outputs:
        np.testing.assert_array_equal(last @ out.weights, result.outputs[out.name])
    assert run_tokens(compiled, words).residuals is None


def test_bad_tokens_are_refused():
    compiled = model("dyck1.cr", "heaviside")
    with pytest.raises(CraspError, match="'x' at position 1 is not in the vocabulary"):
        run_tokens(compiled, [["(", "x"]])
    with pytest.raises(CraspError, match="not in the vocabulary"):
        run_tokens(compiled, [["<bos>"]])


def test_empty_batch():
    compiled = model("contains_ab.crasp", "heaviside")
    result = run_tokens(compiled, [])
    assert result.values["L"].shape == (0, 1)
    assert result.final("L").shape == (0,)
