"""Residual labels of compiled models: ``reuse=False`` (API, compile entries, ``crasp
compile --no-reuse``) gives each dimension one label for the whole model, with the
outputs of the default build; a window's prefix count is labelled as the prefix count it
holds, not as the window."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import crasp_compiler as cc
from crasp_compiler.cli import main
from crasp_compiler.languages.crasp.compile import compile_program
from crasp_compiler.languages.crasp.program import parse_program
from crasp_compiler.model import read_model

ROOT = Path(__file__).resolve().parents[2]
CRASP = sorted((ROOT / "examples" / "crasp").glob("*.cr"))


def words_for(model, count: int = 12, longest: int = 10) -> list[list[str]]:
    rng = np.random.default_rng(len(model.residual))
    alphabet = model.vocab[1:]
    return [[str(w) for w in rng.choice(alphabet, size=n)] for n in rng.integers(0, longest, count)]


def assert_one_label_per_dimension(model) -> None:
    assert model.occupants is None
    assert not any(" → " in label for label in model.residual)
    for stage in range(model.stages + 1):
        assert model.labels_at(stage) == model.residual


def assert_same_outputs(plain, default, inputs) -> None:
    """Equal decisions; raw outputs equal up to the order of a sum (dimensions move)."""
    got, want = cc.run(plain, inputs), cc.run(default, inputs)
    for name, values in want.values.items():
        np.testing.assert_array_equal(got.values[name], values, name)
        np.testing.assert_allclose(got.raw[name], want.raw[name], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("path", CRASP, ids=lambda p: p.name)
def test_without_reuse_each_dimension_keeps_one_label(path):
    program = cc.load(path)
    default = cc.compile(program, mode="relu", max_len=16)
    plain = cc.compile(program, mode="relu", max_len=16, reuse=False)
    assert_one_label_per_dimension(plain)
    assert plain.width >= default.width
    assert_same_outputs(plain, default, words_for(default))
    entry = compile_program(program, mode="relu", max_len=16, reuse=False)
    assert entry.residual == plain.residual


def test_the_examples_that_reuse_dimensions_stop_reusing():
    """Without the flag most relu examples reuse dimensions (labels ``A → B``), so the
    test above compares two layouts."""
    reused = [
        path.name
        for path in CRASP
        if cc.compile(cc.load(path), mode="relu", max_len=16).occupants is not None
    ]
    assert len(reused) >= 5 and "dyck1.cr" in reused


def test_reuse_true_reuses_where_the_default_does_not():
    program = cc.load(ROOT / "examples" / "crasp" / "dyck1.cr")
    assert cc.compile(program).occupants is None  # heaviside: reuse would not be smaller
    forced = cc.compile(program, reuse=True)
    assert forced.occupants is not None
    assert_same_outputs(forced, cc.compile(program), words_for(forced))


def test_pcoc_compiles_without_reuse():
    program = cc.load(ROOT / "examples" / "pcoc" / "sort.pcoc")
    default = cc.compile(program, n=4)
    plain = cc.compile(program, n=4, reuse=False)
    assert default.occupants is not None  # sort reuses dimensions by default
    assert_one_label_per_dimension(plain)
    inputs = [np.array([[3.0], [1.0], [4.0], [2.0]]), np.array([[0.5], [-2.0], [9.0], [0.0]])]
    got, want = cc.run(plain, inputs), cc.run(default, inputs)
    for name, values in want.values.items():
        np.testing.assert_allclose(got.values[name], values, rtol=1e-12, atol=1e-12)


def test_crasp_compile_no_reuse(tmp_path):
    source = ROOT / "examples" / "crasp" / "dyck1.cr"
    args = ["compile", str(source), "--mode", "relu", "--max-len", "16"]
    for extra, out in (([], "default.npz"), (["--no-reuse"], "plain.npz")):
        result = CliRunner().invoke(main, [*args, *extra, "-o", str(tmp_path / out)])
        assert result.exit_code == 0, result.output
    default, plain = read_model(tmp_path / "default.npz"), read_model(tmp_path / "plain.npz")
    assert default.occupants is not None
    assert_one_label_per_dimension(plain)
    assert_same_outputs(plain, default, words_for(default))
    pcoc = ROOT / "examples" / "pcoc" / "sort.pcoc"
    result = CliRunner().invoke(
        main, ["compile", str(pcoc), "--n", "4", "--no-reuse", "-o", str(tmp_path / "s.npz")]
    )
    assert result.exit_code == 0, result.output
    assert_one_label_per_dimension(read_model(tmp_path / "s.npz"))


WINDOW = 'alphabet "a", "b"\nW = #[j <= i, j >= i - 5 && j <= i] "a"\nE = W >= 5\noutput E, W\n'


@pytest.mark.parametrize("mode", ["heaviside", "relu"])
def test_a_window_prefix_count_is_labelled_as_what_it_holds(mode):
    """A window of offsets 0..5 is the prefix count minus the count shifted by 6; the
    first head and its dimension hold the whole prefix count (6/8 on ``a a a a b a a``,
    where the window holds 5), and say so: ``# "a"``, not the window."""
    model = compile_program(parse_program(WINDOW), mode=mode, max_len=16)
    window = '#[j <= i, j >= i - 5 && j <= i] "a"'
    heads = [head.label for layer in model.layers for head in layer.heads]
    assert '# "a"' in heads and window not in heads  # the counting head
    assert '# "a"' in model.residual and window not in model.residual
    assert model.info["definitions"]["W"] == {'# "a"': 1, f"# P(i-6) in {window}": -1}
    words = ["a", "a", "a", "a", "b", "a", "a"]
    result = cc.run(model, [words], residuals=True)
    assert result.values["W"][0, -1] == 5
    _, after = result.residuals[-1]
    column = model.residual.index('# "a"')
    assert after[0, -1, column] == pytest.approx(6 / 8)
    assert not any("i - 0" in label for label in heads + model.residual)
