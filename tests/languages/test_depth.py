"""Models as shallow as the program allows (crasp_compiler.languages.crasp.depth): formula
plans, comparisons fused with the Booleans they are combined with, outputs absorbed by
their readout, and the dependency bound met exactly on shuffle-Dyck-k for k ≤ 16."""

from __future__ import annotations

import functools
import itertools
import random
from pathlib import Path

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from crasp_compiler import parse_program
from crasp_compiler.languages.crasp.compile import compile_program
from crasp_compiler.languages.crasp.depth import Depth, Gate, Lit, dependency_bound
from crasp_compiler.languages.crasp.interpret import interpret_batch
from crasp_compiler.languages.crasp.nodes import BoolRef, TokenIs
from crasp_compiler.runtime.numpy_exec import run_tokens
from tests.support.shuffle_dyck import one_violation, per_pair

ROOT = Path(__file__).resolve().parents[2]
MODES = [("heaviside", None), ("layernorm", None), ("relu", 64)]


@functools.cache
def compiled(text: str, mode: str, max_len: int | None):
    return compile_program(parse_program(text), mode=mode, max_len=max_len)


def words(k: int, count: int, length: int, seed: int) -> list[list[str]]:
    """Random strings, half of them shuffles of balanced pairs (members or near ones)."""
    rng = random.Random(seed)
    out = []
    for n in range(count):
        if n % 2:
            symbols = [f"({p}" for p in range(k)] + [f"){p}" for p in range(k)]
            out.append([rng.choice(symbols) for _ in range(length)])
        else:
            pairs = [rng.randrange(k) for _ in range(length // 2)]
            word: list[str] = []
            for p in pairs:  # insert each pair's opening before its closing
                i = rng.randrange(len(word) + 1)
                word.insert(i, f"({p}")
                j = rng.randrange(i + 1, len(word) + 1)
                word.insert(j, f"){p}")
            out.append(word)
    return out


def agree(program, model, inputs: list[list[str]], names: list[str]) -> None:
    """The model decides like the interpreter at every position of every input."""
    got = run_tokens(model, inputs).values
    by_length: dict[int, list[int]] = {}
    for b, word in enumerate(inputs):
        by_length.setdefault(len(word), []).append(b)
    for n, rows in by_length.items():
        want = interpret_batch(program, [inputs[b] for b in rows])
        for name in names:
            assert (got[name][rows, : n + 1] == want[name]).all(), (name, n)


def assert_exact(text: str, mode: str, max_len: int | None, inputs: list[list[str]]) -> None:
    agree(parse_program(text), compiled(text, mode, max_len), inputs, ["D"])


def test_dyck1_in_two_layers():
    text = (ROOT / "examples" / "crasp" / "dyck1.cr").read_text()
    for mode, max_len in MODES:
        model = compiled(text, mode, max_len)
        assert len(model.layers) == 2 == model.info["dependency_bound"], mode


@pytest.mark.parametrize("k", [1, 2, 3, 4, 8, 12, 16])
def test_shuffle_dyck_per_pair_in_two_layers(k):
    text = per_pair(k)
    assert dependency_bound(parse_program(text)) == 2
    for mode, max_len in MODES:
        model = compiled(text, mode, max_len)
        assert len(model.layers) == 2, (k, mode)
    inputs = words(k, 24, 12, seed=k) + words(k, 6, 60, seed=k + 100)
    if k <= 2:  # every string up to length 4
        alphabet = [f"({p}" for p in range(k)] + [f"){p}" for p in range(k)]
        inputs += [list(w) for n in range(5) for w in itertools.product(alphabet, repeat=n)]
    for mode, max_len in MODES:
        assert_exact(text, mode, max_len, inputs)


@pytest.mark.parametrize("k", [1, 2, 5, 9, 10, 12, 16])
def test_shuffle_dyck_one_violation_count_meets_its_bound(k):
    """Before threshold formulas: 5, 7, 9, 11 layers for k = 9–12 and 19 at k = 16."""
    text = one_violation(k)
    bound = dependency_bound(parse_program(text))
    # V's or in layer 2's MLP (for k > 1), its count in layer 3, NV fused or absorbed there
    assert bound == (2 if k == 1 else 3)
    for mode, max_len in MODES:
        model = compiled(text, mode, max_len)
        assert len(model.layers) == bound, (k, mode)
    inputs = words(k, 20, 16, seed=k)
    for mode, max_len in MODES:
        assert_exact(text, mode, max_len, inputs)


def test_wide_formulas_are_one_unit():
    """An and of 20 token tests and comparisons is one unit, not a chain of tables."""
    alphabet = [f"t{i}" for i in range(20)]
    text = "\n".join(
        [f'C{i} = # "t{i}"' for i in range(20)]
        + [f"G{i} = C{i} > 0" for i in range(20)]
        + ["A = " + " && ".join(f"G{i}" for i in range(20)), "E = # A", "F = E > 0", "accept F"]
    )
    model = compile_program(parse_program(text))
    assert len(model.layers) == 3 == model.info["dependency_bound"]
    labels = [label for layer in model.layers if layer.mlp for label in layer.mlp.labels]
    assert sum(label.startswith("G0 && G1") for label in labels) == 1  # the and: one unit
    agree(parse_program(text), model, [alphabet, alphabet[:19], [*alphabet[::-1], "t3"]], ["F"])


def test_plans():
    text = (
        'A = # "a"\nB = # "b"\nX = A > B\nY = A == B\nZ = (# X) == 0\n'
        "F = Z && Y\n"  # fused: Z is computed in layer 2's MLP, Y earlier
        "G = X && Y\n"  # a gate: both comparisons from the same MLP
        'H = (X && "a") || (Y && "b")\n'  # two levels, 4 leaves: a truth table
        'J = (Z && "a") || (Y && !"a")\n'  # two levels, Z fresh: rows gated by Z
        "K = F || G\n"  # uses F and G: neither is absorbed
        "L = J || H\n"
        "output F, G, H, J, K, L\n"
    )
    program = parse_program(text)
    depth = Depth(program)
    defs = {d.name: d.expr for d in program.definitions}
    assert depth.plan(defs["F"]).kind == "fused"
    assert depth.plan(defs["G"]).kind == "gate"
    assert depth.plan(defs["H"]).kind == "table"
    assert depth.plan(defs["J"]).kind == "fused-table"
    assert depth.plan(defs["J"]).slot == depth.slot(defs["Z"])  # layer 2's MLP
    assert depth.absorbed("F") is None and depth.absorbed("K") is not None
    # or(and(Z, Y), and(X, Y)): flattened through the references to F and G
    k = depth.nnf(defs["K"])[0]
    assert isinstance(k, Gate) and k.op == "or"
    assert all(isinstance(c, Gate) and c.op == "and" for c in k.children)
    assert depth.nnf(BoolRef("F"))[1] == Gate(
        "or", (Lit(BoolRef("Z"), False), Lit(BoolRef("Y"), False))
    )
    assert depth.nnf(TokenIs("a"))[0] == Lit(TokenIs("a"), True)
    for mode, max_len in MODES:
        model = compile_program(program, mode=mode, max_len=max_len)
        assert len(model.layers) == dependency_bound(program, mode)
        inputs = [list(w) for n in range(7) for w in itertools.product("ab", repeat=n)]
        agree(program, model, inputs, ["F", "G", "H", "J", "K", "L"])


@settings(max_examples=60)
@given(st.data())
def test_random_wide_formulas(data):
    """Random and/or/not formulas of up to 125 leaves over token tests, comparisons of
    counts made in layer 1 (ready) and comparisons of counts of those (fresh in layer 2):
    every plan (gate, fused, table, circuit, absorbed) against the interpreter, and the
    model exactly as deep as its bound."""
    leaves = ['"a"', '"b"', "A > B", "A == B", "(# X) == (# Y)"]
    leaves += [f"A > {k}" for k in range(4)] + [f"B == {k}" for k in range(3)]
    leaves += [f"(# X) > {k}" for k in range(3)] + [f"(# Y) < {k + 1}" for k in range(3)]

    def formula(depth: int) -> str:
        if depth == 0 or (depth < 3 and data.draw(st.integers(0, 3)) == 0):
            leaf = data.draw(st.sampled_from(leaves))
            return f"!({leaf})" if data.draw(st.integers(0, 3)) == 0 else f"({leaf})"
        op = data.draw(st.sampled_from(["&&", "||"]))
        parts = [formula(depth - 1) for _ in range(data.draw(st.integers(2, 5)))]
        return "(" + f" {op} ".join(parts) + ")"

    body = formula(3)
    uses = data.draw(st.booleans())  # F used by another definition: not absorbed
    text = f'A = # "a"\nB = # "b"\nX = A > B\nY = A == B\nF = {body}\n' + (
        "G = (# F) > 1\noutput F, G\n" if uses else "output F\n"
    )
    program = parse_program(text)
    inputs = [list(w) for n in range(7) for w in itertools.product("ab", repeat=n)]
    for mode, max_len in MODES:
        model = compile_program(program, mode=mode, max_len=max_len)
        assert len(model.layers) == dependency_bound(program, mode), text
        agree(program, model, inputs, list(program.outputs))
    event(Depth(program).plan(program.definitions[4].expr).kind)  # --hypothesis-show-statistics
