"""Deep and wide programs: chains of any length, formulas of thousands of leaves through
definitions, huge numbers in messages, and a printer that reads back every program."""

from __future__ import annotations

import sys
from math import log2

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp_compiler import CraspError, format_expr, format_program, interpret, parse_program
from crasp_compiler.errors import shown_int
from crasp_compiler.languages.crasp.compile import compile_program
from crasp_compiler.languages.crasp.depth import Depth, dependency_bound
from crasp_compiler.languages.crasp.nodes import And, Not, Periodic, Program, TokenIs, children
from crasp_compiler.languages.crasp.nodes import Definition as Def
from crasp_compiler.languages.pcoc.program import parse_program as parse_pcoc
from crasp_compiler.runtime import run_tokens
from tests.support.strategies import programs

HEAD = 'alphabet "a", "b"\nC = # "a" - # "b"\nD = # "b"\n'
WORDS = [["a", "b", "a"] * 3, ["b"] * 5, ["a"] * 4, []]


def leaf(k: int, n: int) -> str:
    """The k-th of n distinct leaves: comparisons of counts and token tests."""
    if k % 3:
        return f"C > {k - n // 2}"
    return '"a"' if k % 2 else f"D != {k}"


def alternating_definitions(n: int) -> str:
    """``F_k = F_{k-1} && L_k`` or ``||``, alternating: a formula of n leaves, n deep."""
    lines = [f"F0 = {leaf(0, n)}"]
    lines += [f"F{k} = F{k - 1} {'&&' if k % 2 else '||'} {leaf(k, n)}" for k in range(1, n)]
    return HEAD + "\n".join(lines) + f"\naccept F{n - 1}\n"


def alternating_flat(n: int) -> str:
    """``L0 && L1 || L2 && L3 || …`` in one expression (an || chain of && pairs)."""
    ops = [" && " if k % 2 == 0 else " || " for k in range(n - 1)]
    body = leaf(0, n) + "".join(op + leaf(k + 1, n) for k, op in enumerate(ops))
    return HEAD + "Acc = " + body + "\n"


def depth(node) -> int:
    best, stack = 0, [(node, 1)]
    while stack:
        top, level = stack.pop()
        best = max(best, level)
        stack.extend((child, level + 1) for child in children(top))
    return best


def assert_pipeline(text: str, mode: str = "heaviside") -> int:
    """Parse, print and re-parse, plan, interpret, compile and run ``text``: the model
    agrees with the interpreter; return its layers."""
    program = parse_program(text)
    assert parse_program(format_program(program)) == program
    model = compile_program(program, mode=mode, max_len=12 if mode == "relu" else None)
    assert model.info["dependency_bound"] == dependency_bound(program, mode)
    decided = run_tokens(model, WORDS).values
    for row, word in enumerate(WORDS):
        trace = interpret(program, word)
        for name in program.outputs:
            want = np.asarray(trace.values[name], dtype=bool)
            assert (np.asarray(decided[name][row][: len(word) + 1], dtype=bool) == want).all()
    return len(model.layers)


# ------------------------------------------------------------------ chains


def test_flat_chain_of_ten_thousand_operands_is_not_nested_too_deeply():
    """A chain counts ⌈log2 k⌉ levels: it is built as a balanced tree."""
    text = HEAD + "Acc = " + " && ".join(f"C > {k}" for k in range(10_000)) + "\n"
    program = parse_program(text)
    assert depth(program["Acc"].expr) == 16  # 14 levels of &&, a comparison, its operands
    assert parse_program(format_program(program)) == program
    assert not interpret(program, ["a"] * 3).accepted


@pytest.mark.parametrize("op", [" || ", " + "])
def test_other_chains_are_flat(op):
    operand = '"a"' if op == " || " else '# "a"'
    text = "A = " + op.join([operand] * 3000) + (" > 0" if op == " + " else "") + "\n"
    program = parse_program(text)
    assert depth(program["A"].expr) == (15 if op == " + " else 13)  # 12 levels of the chain


def test_chains_inside_relations_and_positions_are_flat():
    """The relation and the position term of a chain are read without recursion."""
    relation = " || ".join(f"j == i - {d}" for d in range(3000))
    program = parse_program(f"A(i) := #[j <= i, {relation}] Q_a(j)\nB = A > 2999\noutput B\n")
    assert interpret(program, ["a"] * 3000).values["B"][-1]
    program = parse_program("B = i" + " + 1" * 3000 + ' % 7 == 0 && "a"\n')
    assert program["B"].expr.left == Periodic(7, frozenset({3}))  # i + 3000 ≡ 0 (mod 7)


def test_real_nesting_is_still_refused_with_a_location():
    text = HEAD + "Acc = " + "".join(f"{leaf(k, 400)} && (" for k in range(399))
    text += leaf(399, 400) + ")" * 399 + "\n"
    with pytest.raises(CraspError) as caught:
        parse_program(text, "deep.cr")
    assert str(caught.value).startswith("deep.cr:4:")
    assert "nested too deeply" in str(caught.value)


def test_a_chain_counts_its_levels_under_real_nesting():
    """Ninety levels of parentheses around a chain of 2**11 operands is 101 levels."""
    chain = " && ".join(['"a"'] * 2**11)
    text = "B = " + "(" * 90 + chain + ")" * 90 + "\n"
    with pytest.raises(CraspError, match="nested too deeply"):
        parse_program(text)
    parse_program(text.replace("(" * 90, "(" * 80).replace(")" * 90, ")" * 80))


# ------------------------------------------------------------------ formulas


@pytest.mark.parametrize("n", [400, 1000])
def test_alternating_formula_through_definitions_compiles(n):
    """A formula n deep (a balanced circuit: the comparisons' layer, then ⌊log₂(n − 1)⌋ + 2
    MLPs) plans, lowers and runs."""
    assert assert_pipeline(alternating_definitions(n)) == 1 + int(log2(n - 1)) + 2


def test_alternating_formula_in_relu_mode_is_exact():
    assert assert_pipeline(alternating_definitions(400), mode="relu") == 11


def test_alternating_flat_formula_of_5000_leaves_compiles():
    assert assert_pipeline(alternating_flat(5000)) == 3


@pytest.mark.slow
def test_alternating_formula_of_5000_leaves_through_definitions_compiles():
    """5,000 leaves: 1 + ⌊log₂ 4999⌋ + 2 = 15 layers (one layer per leaf, 5,000, was
    above the parameter budget)."""
    program = parse_program(alternating_definitions(5000))
    assert dependency_bound(program) == 15
    assert interpret(program, WORDS[0]).values["F4999"].shape == (10,)
    assert assert_pipeline(alternating_definitions(5000)) == 15


def test_negation_chain_through_definitions():
    lines = ['N0 = "a"'] + [f"N{k} = !N{k - 1}" for k in range(1, 3000)]
    text = HEAD + "\n".join(lines) + "\nAcc = N2999 && C > 0\n"
    assert assert_pipeline(text) == 1
    assert assert_pipeline(text, mode="relu") == 1


def test_shared_subformulas_are_planned_and_lowered_once():
    """``F_k = (F_{k-1} || a_k) && (F_{k-1} || b_k)`` is 2**40 leaves as a tree; the
    planner and the lowering visit each shared gate once."""
    lines = ["F0 = C > 0"]
    for k in range(1, 41):
        lines.append(f"F{k} = (F{k - 1} || C > {k}) && (F{k - 1} || D > {k})")
    program = parse_program(HEAD + "\n".join(lines) + "\naccept F40\n")
    plan = Depth(program).plan(program["F40"].expr)
    assert plan.kind == "circuit"
    model = compile_program(program)
    assert model.info["dependency_bound"] == len(model.layers)


# ------------------------------------------------------------------ printing


def test_accept_named_later_in_output_keeps_its_place():
    program = parse_program('C = # "a"\nB = C > 1\nD = C > 2\noutput D, B\naccept B\n')
    assert program.outputs == ("D", "B")
    again = parse_program(format_program(program))
    assert (again.accept, again.outputs) == ("B", ("D", "B"))


@pytest.mark.parametrize(
    ("source", "printed"),
    [
        ("i % 100 != 4", "i % 100 != 4"),
        ("i % 100 > 4", "i % 100 >= 5"),
        ("i % 100 >= 3 && i % 100 <= 90", "(i % 100 >= 3 && i % 100 <= 90)"),
        ("i % 100 < 3 || i % 100 > 90", "(i % 100 <= 2 || i % 100 >= 91)"),
        ("i % 100 != 4 && i % 100 != 90", "!(i % 100 == 4 || i % 100 == 90)"),
        ("i % 100 != 4 && i % 100 != 5", "(i % 100 <= 3 || i % 100 >= 6)"),
        ("i % 2 == 0", "i % 2 == 0"),
        ("i % 5 == 0 || i % 5 == 2", "(i % 5 == 0 || i % 5 == 2)"),
    ],
)
def test_periodic_atoms_print_compactly(source, printed):
    program = parse_program(f'alphabet "a"\nB = {source}\n')
    assert format_expr(program["B"].expr) == printed
    assert parse_program(format_program(program)) == program


@settings(max_examples=30)
@given(
    modulus=st.integers(2, 10_000),
    seed=st.integers(0, 2**32),
    density=st.floats(0.0, 1.0),
)
def test_every_periodic_predicate_roundtrips(modulus, seed, density):
    rng = np.random.default_rng(seed)
    residues = frozenset(int(r) for r in np.flatnonzero(rng.random(modulus) < density))
    predicate = Periodic.make(modulus, residues)
    program = Program((Def("B", And(TokenIs("a"), predicate)),), ("a",), "B", ("B",))
    again = parse_program(format_program(program))
    assert again == program
    word = ["a"] * 40
    assert (interpret(again, word).values["B"] == interpret(program, word).values["B"]).all()


@pytest.mark.parametrize(
    "shape",
    [
        lambda a, b, c, d: And(And(And(a, b), c), d),  # left-nested: not what a chain builds
        lambda a, b, c, d: And(a, And(b, And(c, d))),
        lambda a, b, c, d: And(And(a, b), And(c, d)),  # what `a && b && c && d` builds
        lambda a, b, c, d: And(And(a, And(b, c)), d),
    ],
)
def test_every_shape_of_a_chain_roundtrips(shape):
    a, b, c, d = (TokenIs(s) for s in "abcd")
    program = Program((Def("B", shape(a, b, c, d)),), tuple("abcd"), "B", ("B",))
    assert parse_program(format_program(program)) == program


def test_printer_has_no_recursion_limit():
    node = TokenIs("a")
    for _ in range(3 * sys.getrecursionlimit()):
        node = Not(node)
    assert format_expr(node) == "!" * 3 * sys.getrecursionlimit() + '"a"'


@settings(max_examples=40)
@given(
    program=programs(local=True, periodic=True, max_definitions=10, max_depth=5),
    word=st.lists(st.sampled_from(["a", "b"]), max_size=12),
)
def test_printed_programs_read_back_with_the_same_values(program, word):
    """print → parse: the same IR, and the interpreter gives the same values."""
    again = parse_program(format_program(program))
    assert again == program
    word = [s for s in word if s in program.alphabet]
    want, got = interpret(program, word).values, interpret(again, word).values
    assert all((want[name] == got[name]).all() for name in program.names)


# ------------------------------------------------------------------ numbers in messages


@pytest.mark.parametrize("limit", [None, 640])
def test_huge_integers_in_messages(limit):
    before = sys.get_int_max_str_digits()
    try:
        if limit is not None:
            sys.set_int_max_str_digits(limit)
        assert shown_int(-(10**30)) == "-1.00…e30 (31 digits)"
        assert shown_int(2**16384) == "1.18…e4932 (4933 digits)"
        assert shown_int(10**24 - 1) == "9" * 24
        text = "input x bound 1e9\noutput x\nround { x = x + H }\n"
        with pytest.raises(CraspError) as caught:
            parse_pcoc(text.replace("H", " * ".join(["2**4096"] * 4)), "big.pcoc")
        assert str(caught.value).startswith("big.pcoc:3:17: error: the integer 1.18…e4932")
        with pytest.raises(CraspError, match=r"log2\(1\.18…e4932 \(4933 digits\)\)"):
            parse_pcoc(text.replace("H", "log2(" + " * ".join(["2**4096"] * 4) + " + 1)"))
    finally:
        sys.set_int_max_str_digits(before)
