"""Formulas planned as balanced circuits (crasp_compiler.languages.crasp.depth,
:meth:`Depth.value`): an alternating and/or chain of L leaves takes O(log L) layers,
through definitions and inline, in every mode, and the model agrees with the interpreter;
the circuit computes its formula on the assignments of its leaves (all of them up to 8
leaves, 256 spread over them beyond), shared gates included."""

from __future__ import annotations

import itertools
import random
import sys
from collections.abc import Iterator
from math import ceil, log2

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from crasp_compiler import CraspError, format_expr, parse_program
from crasp_compiler.languages.crasp.compile import compile_program
from crasp_compiler.languages.crasp.depth import Depth, Gate, Lit, Signal, Wire, holds, literals
from crasp_compiler.languages.crasp.interpret import interpret_batch
from crasp_compiler.languages.crasp.nodes import And, Node, Or, Program
from crasp_compiler.languages.crasp.nodes import Definition as Def
from crasp_compiler.runtime.numpy_exec import run_tokens
from tests.languages.test_wide_programs import alternating_definitions

MODES = [("heaviside", None), ("layernorm", None), ("relu", 600)]


@pytest.fixture
def deep_nodes() -> Iterator[None]:
    """Room for hashing IR nested 500 deep (node hashes recurse; the parser refuses that
    much nesting, so only IR built by hand has it)."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, 10_000))
    yield
    sys.setrecursionlimit(before)


def inline(n: int) -> Program:
    """:func:`alternating_definitions` with every ``F_k`` written into the next: one
    expression ``((L0 && L1) || L2) && …`` nested n deep (built as IR: the parser refuses
    that much nesting)."""
    program = parse_program(alternating_definitions(n))
    defs = {d.name: d.expr for d in program.definitions}
    expr = defs["F0"]
    for k in range(1, n):
        step = defs[f"F{k}"]
        assert isinstance(step, And | Or)
        expr = type(step)(expr, step.right)
    keep = [d for d in program.definitions if not d.name.startswith("F")]
    return Program((*keep, Def("Acc", expr)), program.alphabet, "Acc", ("Acc",))


def evaluate(signal: Signal, row: dict[Node, bool]) -> bool:
    """A balanced circuit's output when each leaf node has the value ``row`` gives it."""
    values: dict[int, bool] = {}
    stack: list[Signal] = [signal]
    while stack:
        top = stack[-1]
        if not isinstance(top, Wire) or id(top) in values:
            stack.pop()
            continue
        todo = [x for x in top.inputs if isinstance(x, Wire) and id(x) not in values]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        bits = [bit(x, row, values) for x in top.inputs]
        if top.op == "apply":
            values[id(top)] = bits[0] or (bits[1] and bits[2])
        else:
            values[id(top)] = all(bits) if top.op == "and" else any(bits)
    return bit(signal, row, values)


def bit(signal: Signal, row: dict[Node, bool], wires: dict[int, bool]) -> bool:
    if isinstance(signal, Wire):
        return wires[id(signal)]
    if isinstance(signal, Lit):
        return row[signal.node] == signal.positive
    return signal


def words(seed: int, count: int, length: int) -> list[list[str]]:
    """Random inputs of ``length`` tokens with a's at rates 0.2 … 0.95, so that
    ``C = # "a" − # "b"`` sweeps the thresholds of many leaves over the prefixes."""
    rng = random.Random(seed)
    rates = (0.2, 0.5, 0.8, 0.95)
    return [
        ["a" if rng.random() < rates[k % 4] else "b" for _ in range(length)] for k in range(count)
    ]


def agree(program: Program, model, inputs: list[list[str]], dtype=np.float64) -> int:
    """The model decides every output at every position of inputs of one length as the
    interpreter does; returns how many decisions are true (a test sees both values)."""
    got, want = run_tokens(model, inputs, dtype=dtype).values, interpret_batch(program, inputs)
    for name in program.outputs:
        assert (got[name] == want[name]).all(), name
    return sum(int(want[name].sum()) for name in program.outputs)


@pytest.mark.parametrize("form", ["definitions", "inline"])
@pytest.mark.parametrize(("mode", "max_len"), MODES)
def test_alternating_chain_of_500_leaves_in_logarithmic_layers(form, mode, max_len, deep_nodes):
    """500 leaves: at most 2⌈log₂ 500⌉ + 2 = 20 layers (11: the comparisons in layer 1,
    then ⌊log₂ 499⌋ + 2 MLPs), the bound met, and the model exact at every position in
    float64 and, within the recorded guarantee, float32 (relu's float32 has none)."""
    n = 500
    program = parse_program(alternating_definitions(n)) if form == "definitions" else inline(n)
    depth = Depth(program, mode)
    root = program[program.outputs[-1]].expr
    assert depth.plan(root).kind == "balanced"
    model = compile_program(program, mode=mode, max_len=max_len)
    assert len(model.layers) == model.info["dependency_bound"] == depth.bound() == 11
    assert len(model.layers) <= 2 * ceil(log2(n)) + 2
    inputs = words(n, 6, 600)
    decided = agree(program, model, inputs)
    assert 0 < decided < 6 * 601  # both values occur
    limit = model.guarantee.limit("float32")
    assert limit is not None
    if mode == "relu":
        assert limit == -1
        with pytest.raises(CraspError, match="proven exact for in float32"):
            run_tokens(model, inputs[:1], dtype=np.float32)
    else:
        assert limit > 4_000_000
        agree(program, model, inputs, np.float32)


@pytest.mark.parametrize("n", [50, 200, pytest.param(2000, marks=pytest.mark.slow)])
def test_chain_layers_grow_logarithmically(n, deep_nodes):
    """⌊log₂(n − 1)⌋ + 2 MLPs after the leaves' layer, through definitions and inline."""
    want = 1 + (int(log2(n - 1)) + 2)
    for program in (parse_program(alternating_definitions(n)), inline(n)):
        assert Depth(program).bound() == want <= 2 * ceil(log2(n)) + 2


def test_parenthesised_chain_as_deep_as_the_parser_reads():
    """``((L0 && L1 || L2) && L3 || L4) && …`` written out, as deep as the parser reads
    (63 operators, 31 parentheses: one for each ``||`` under an ``&&``): 64 leaves in
    1 + ⌊log₂ 63⌋ + 2 = 8 layers, exact."""
    n = 64
    text = alternating_definitions(n)
    head, chain = text.split("F0 = ")[0], inline(n)["Acc"].expr
    body = format_expr(chain)
    assert body.count("(") == 31
    program = parse_program(head + f"Acc = {body}\n")
    assert program["Acc"].expr == chain
    for mode, max_len in MODES:
        model = compile_program(program, mode=mode, max_len=max_len)
        assert len(model.layers) == model.info["dependency_bound"] == 8
        assert agree(program, model, words(n, 6, 200)) > 0


def test_every_prefix_an_output_shares_its_blocks():
    """Each ``F_k`` of a chain of 200 an output: 200 circuits, each O(log k) deep, built
    from aligned blocks that the prefixes share (O(n log n) wires, not O(n²))."""
    n = 200
    text = alternating_definitions(n).replace(f"accept F{n - 1}\n", "")
    text += "output " + ", ".join(f"F{k}" for k in range(n)) + "\n"
    program = parse_program(text)
    depth = Depth(program)
    assert depth.bound() <= 2 * ceil(log2(n)) + 2
    assert len(depth.wires) <= 4 * n * ceil(log2(n))
    model = compile_program(program)
    assert len(model.layers) == model.info["dependency_bound"]
    inputs = words(7, 8, 300)
    assert agree(program, model, inputs) > 0


# ------------------------------------------------------------------ random formulas

ATOMS = ['"a"', '"b"', "A > B", "A == B", "(# X) == (# Y)", "(# Z) > 0"]
ATOMS += [f"A > {k}" for k in range(5)] + [f"B == {k}" for k in range(4)]
ATOMS += [f"(# X) > {k}" for k in range(3)] + [f"(# Y) < {k + 1}" for k in range(3)]
HEAD = 'A = # "a"\nB = # "b"\nX = A > B\nY = A == B\nZ = A > B + 1\n'


def formula_definitions(data, count: int) -> list[str]:
    """``count`` definitions ``G_i``, each an and/or (mostly alternating, sometimes
    negated) of the previous one (mostly), atoms and other recent ``G_j`` (shared, so the
    last is a DAG over up to 21 leaves, often deeper than a table)."""
    lines = []
    for i in range(count):

        def operand(i: int = i) -> str:
            if i and data.draw(st.integers(0, 2)) == 0:
                return f"G{data.draw(st.integers(max(0, i - 3), i - 1))}"
            atom = data.draw(st.sampled_from(ATOMS))
            return f"!({atom})" if data.draw(st.integers(0, 3)) == 0 else f"({atom})"

        op = (" && ", " || ")[(i + data.draw(st.integers(0, 4)) // 4) % 2]  # mostly alternating
        parts = [operand() for _ in range(data.draw(st.integers(1, 3)))]
        if i and data.draw(st.integers(0, 7)):
            parts.insert(data.draw(st.integers(0, len(parts))), f"G{i - 1}")
        body = op.join(parts) if len(parts) > 1 else f"{parts[0]} {op.strip()} {operand()}"
        lines.append(f"G{i} = " + (f"!({body})" if data.draw(st.integers(0, 5)) == 0 else body))
    return lines


@settings(max_examples=60)
@given(st.data())
def test_balanced_circuits_compute_their_formulas(data):
    """Every gate's balanced circuit (whether or not its plan picks it) equals the gate
    on every assignment of up to 8 leaves, and on 256 spread over them beyond."""
    lines = formula_definitions(data, data.draw(st.integers(2, 24)))
    program = parse_program(HEAD + "\n".join(lines) + "\n")
    depth = Depth(program)
    for definition in program.definitions[5:]:
        formula = depth.nnf(definition.expr)[0]
        if not isinstance(formula, Gate):
            continue
        leaves = list(dict.fromkeys(lit.node for lit in literals(formula)))
        wire = depth.value(formula)
        rows = itertools.product((False, True), repeat=len(leaves))
        for bits in itertools.islice(rows, 0, None, max(1, 2 ** len(leaves) // 256)):
            row = dict(zip(leaves, bits, strict=True))
            assert evaluate(wire, row) == holds(formula, row), definition.name


@settings(max_examples=40)
@given(st.data())
def test_random_formulas_compile_exactly(data):
    """Random formulas through definitions over 21 atoms (counts made in layers 1 and
    2), the last counted: the model no deeper than its bound and exact in every mode on
    every input up to 6 tokens; some are planned as balanced circuits."""
    lines = formula_definitions(data, data.draw(st.integers(8, 28)))
    last = f"G{len(lines) - 1}"
    text = HEAD + "\n".join(lines) + f"\nN = (# {last}) > 1\noutput {last}, N\n"
    program = parse_program(text)
    event(Depth(program).plan(program[last].expr).kind)  # --hypothesis-show-statistics
    for mode, max_len in MODES:
        model = compile_program(program, mode=mode, max_len=max_len)
        # at the bound, or under it where the lowering folds a constant part away
        assert len(model.layers) <= model.info["dependency_bound"], text
        for n in range(7):
            agree(program, model, [list(w) for w in itertools.product("ab", repeat=n)])
