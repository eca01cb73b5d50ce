"""The PCOC language: parsing, errors with locations, static checks, the interpreter and
the example programs (against plain-Python references), input and output text."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp_compiler.errors import CraspError
from crasp_compiler.languages.pcoc import (
    check_pcoc,
    format_vector,
    interpret_batch,
    interpret_program,
    load_program,
    parse_program,
    read_vectors,
    span_of,
)
from crasp_compiler.languages.pcoc.compile import compile_program, run_pcoc
from crasp_compiler.languages.pcoc.lower import lower_pcoc
from crasp_compiler.languages.pcoc.nodes import (
    Add,
    Assign,
    Compare,
    For,
    If,
    IfExpr,
    Num,
    Read,
    Receive,
    Round,
    SBin,
    Scale,
    SCall,
    SNot,
    SNum,
    Static,
    SVar,
)
from crasp_compiler.languages.pcoc.static import (
    StaticFailure,
    machine_indices,
    static_value,
    unroll,
)
from crasp_compiler.languages.pcoc.syntax import MAX_DEPTH

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "pcoc"
SIZES = [*range(1, 17), 32]
FAST = settings(max_examples=30)


def ceil_log2(n: int) -> int:
    return (n - 1).bit_length()


# The number of rounds each example states in its header, as a function of n.
ROUNDS = {
    "alternating_sum": lambda n: 1 + ceil_log2(n),
    "bitonic_sort": lambda n: ceil_log2(n) * (ceil_log2(n) + 1) // 2,
    "broadcast": ceil_log2,
    "clamp_steps": lambda n: 1,
    "compare_vectors": lambda n: 1 + ceil_log2(n),
    "count_positive": lambda n: 1 + ceil_log2(n),
    "cummax": ceil_log2,
    "cummin": ceil_log2,
    "cumsum": ceil_log2,
    "reverse": lambda n: 1,
    "rotate": lambda n: 1,
    "running_argmax": lambda n: 1 + ceil_log2(n),
    "sort": lambda n: n,
    "tree_min": ceil_log2,
    "tree_sum": ceil_log2,
}

_programs: dict[str, object] = {}


def example(name: str):
    if name not in _programs:
        _programs[name] = load_program(EXAMPLES / f"{name}.pcoc")
    return _programs[name]


def run(program, n: int, *vectors, **kwargs) -> dict[str, list[float]]:
    trace = interpret_program(program, n, np.array(vectors, dtype=float).reshape(-1, n), **kwargs)
    return {name: list(values) for name, values in trace.outputs.items()}


def program(body: str, header: str = "input x bound 1e9\noutput x\n"):
    return parse_program(header + body, "p.pcoc")


# ================================================================== the examples


def test_every_example_is_listed_and_parses_with_its_header():
    names = sorted(path.stem for path in EXAMPLES.glob("*.pcoc"))
    assert names == sorted(ROUNDS)
    for name in names:
        text = (EXAMPLES / f"{name}.pcoc").read_text()
        header = list(itertools.takewhile(lambda line: line.startswith("//"), text.split("\n")))
        assert len(header) >= 3, name  # what it computes, its rounds and its bounds
        joined = "\n".join(header)
        assert "Rounds:" in joined and "Bounds:" in joined, name
        prog = example(name)
        assert prog.filename.endswith(f"{name}.pcoc") and prog.source == text
        assert prog.outputs, name


@pytest.mark.parametrize("name", sorted(ROUNDS))
def test_example_round_counts_match_their_headers(name):
    prog = example(name)
    for n in SIZES:
        rounds = check_pcoc(prog, n)
        assert len(rounds) == ROUNDS[name](n), (name, n)
        assert rounds == unroll(prog, n)
        assert [env["r"] for _, env in rounds] == list(range(len(rounds)))


def test_the_design_example_builds_the_expected_ir():
    prog = example("cumsum")
    assert [s.name for s in prog.slots] == ["x"] and prog.slots[0].bound == 1e9
    assert prog.inputs == ("x",) and prog.outputs == ("x",)
    expected = For(
        "k",
        SNum(0),
        SCall("ceil_log2", (SVar("n"),)),
        (
            Round(
                (Receive("left", "x", SBin("-", SVar("i"), SBin("**", SNum(2), SVar("k"))), 0.0),),
                (Assign("x", Add(Read("x"), Read("left"))),),
            ),
        ),
    )
    assert prog.rounds == (expected,)


def tree_block_reference(x, op):
    """tree_sum / tree_min: machine i holds op over the 2**t inputs ending at i, t the
    2-adic valuation of n-1-i, capped at ceil_log2(n) (the whole prefix for i = n-1)."""
    n, levels = len(x), ceil_log2(len(x))
    out = []
    for i in range(n):
        j = n - 1 - i
        t = levels if j == 0 else min((j & -j).bit_length() - 1, levels)
        out.append(op(x[max(0, i - 2**t + 1) : i + 1]))
    return out


def first_argmax(x):
    best, at, out = -math.inf, 0, []
    for i, v in enumerate(x):
        if v > best:
            best, at = v, i
        out.append(at)
    return out


def sign(v: float) -> int:
    return (v > 0) - (v < 0)


REFERENCES = {
    "cumsum": lambda x: {"x": list(itertools.accumulate(x))},
    "cummin": lambda x: {"x": list(itertools.accumulate(x, min))},
    "cummax": lambda x: {"x": list(itertools.accumulate(x, max))},
    "tree_sum": lambda x: {"x": tree_block_reference(x, sum)},
    "tree_min": lambda x: {"x": tree_block_reference(x, min)},
    "sort": lambda x: {"x": sorted(x)},
    "bitonic_sort": lambda x: {"x": sorted(x)},
    "broadcast": lambda x: {"x": [x[0]] * len(x)},
    "reverse": lambda x: {"x": x[::-1]},
    "rotate": lambda x: {
        "x": [x[(i + len(x) // 3) % len(x)] for i in range(len(x))],
        "y": [x[(i - 1) % len(x)] for i in range(len(x))],
    },
    "alternating_sum": lambda x: {
        "x": list(itertools.accumulate(v if j % 2 == 0 else -v for j, v in enumerate(x)))
    },
    "running_argmax": lambda x: {"x": list(itertools.accumulate(x, max)), "at": first_argmax(x)},
    "count_positive": lambda x: {
        "c": list(itertools.accumulate(int(v > 0) for v in x)),
        "x": [max(v, 0) for v in x],
    },
    "clamp_steps": lambda x: {
        "step": [max(-1, min(1, x[i] - (x[i - 1] if i else 0))) for i in range(len(x))],
        "size": [abs(x[i] - (x[i - 1] if i else 0)) for i in range(len(x))],
        "trend": [sign(x[i] - (x[i - 1] if i else 0)) for i in range(len(x))],
        "shifted": [v + 0.5 * i if i % 2 == 0 else v for i, v in enumerate(x)],
    },
}

# Integers (large, or tiny for ties) for every example; halves (exact sums) and arbitrary
# floats for the examples without data comparisons.
big = st.integers(-(10**6), 10**6)
tiny = st.integers(-3, 3)
halves = st.integers(-(2 * 10**6), 2 * 10**6).map(lambda v: v / 2)
floats = st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False)
INTEGER_ONLY = {"running_argmax", "count_positive", "clamp_steps"}
SUMS = {"cumsum", "tree_sum", "alternating_sum"}


@st.composite
def vectors(draw, name: str):
    n = draw(st.sampled_from(SIZES))
    kinds = [big, tiny] if name in INTEGER_ONLY else [big, tiny, halves]
    if name not in INTEGER_ONLY | SUMS:
        kinds.append(floats)
    values = draw(st.lists(st.one_of(*kinds), min_size=n, max_size=n))
    return [float(v) for v in values]


@pytest.mark.parametrize("name", sorted(REFERENCES))
@FAST
@given(data=st.data())
def test_examples_agree_with_python_references(name, data):
    x = data.draw(vectors(name))
    got = run(example(name), len(x), x, check_promises=True)
    assert got == REFERENCES[name](x)


@FAST
@given(data=st.data())
def test_two_input_example_reads_its_inputs_in_declaration_order(data):
    n = data.draw(st.sampled_from(SIZES))
    a = data.draw(st.lists(st.one_of(big, tiny), min_size=n, max_size=n))
    b = data.draw(st.lists(st.one_of(big, tiny), min_size=n, max_size=n))
    got = run(example("compare_vectors"), n, a, b, check_promises=True)
    assert got == {
        "m": [max(u, v) for u, v in zip(a, b, strict=True)],
        "wins": list(itertools.accumulate(int(u > v) for u, v in zip(a, b, strict=True))),
    }


def test_sort_needs_n_rounds_and_n_minus_1_fail():
    text = (EXAMPLES / "sort.pcoc").read_text()
    assert "for k in 0 .. n {" in text
    short = parse_program(text.replace("for k in 0 .. n {", "for k in 0 .. n - 1 {"), "short.pcoc")
    full = example("sort")
    for n in range(1, 7):
        perms = np.array(list(itertools.permutations(range(n))), dtype=float)
        assert len(check_pcoc(full, n)) == n and len(check_pcoc(short, n)) == max(n - 1, 0)
        out = interpret_batch(full, n, perms).outputs["x"]
        assert (out == np.arange(n)).all(), n
        wrong = (interpret_batch(short, n, perms).outputs["x"] != np.arange(n)).any(axis=1)
        assert wrong.any() == (n >= 3), n  # n - 1 rounds fail for every n >= 3
    assert run(short, 4, [4, 3, 2, 1]) == {"x": [1, 3, 2, 4]}  # the counterexample
    assert run(full, 4, [4, 3, 2, 1]) == {"x": [1, 2, 3, 4]}


# ================================================================== syntax


def test_separators_else_placement_and_continued_lines():
    prog = program(
        "round { t = x + 1; x = t * 2 }\n"
        "round {\n"
        "  if i == 0 {\n    x = 1\n  }\n  // a comment between the branches\n\n"
        "  else if i == 1 { x = 2 }\n  else {\n    x = min(x,\n            3)\n  }\n"
        "}\n"
    )
    assert run(prog, 3, [5, 5, 5]) == {"x": [1, 2, 3]}
    first, second = prog.rounds
    assert len(first.body) == 2
    (outer,) = second.body
    assert isinstance(outer, If) and isinstance(outer.otherwise[0], If)


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("-2**2", -4),
        ("2**3**2", 512),
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("7 div 2 * 2", 6),
        ("-7 div 2", -4),
        ("-7 % 3", 2),
        ("10 - 3 - 2", 5),
        ("not 1 == 2", 1),
        ("1 < 2 and 2 < 1 or 3", 1),
        ("min(3, 1, 2) + max(4, 6, 5)", 7),
        ("log2(8) + ceil_log2(5) + ceil_log2(1)", 6),
        ("5 if 0 else 6", 6),
        ("1 if 2 > 3 else 2 if 3 > 2 else 3", 2),
    ],
)
def test_static_precedence_and_functions(expr, value):
    prog = program(f"round {{ x = {expr} }}\n")
    (assign,) = prog.rounds[0].body
    assert assign.expr == Num(float(value))
    assert run(prog, 1, [0]) == {"x": [value]}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("0.5 * x + 1", lambda x, i: 0.5 * x + 1),
        ("x - 1 - 1", lambda x, i: x - 2),
        ("-x + i", lambda x, i: -x + i),
        ("2 * 3 * x", lambda x, i: 6 * x),
        ("x * -0.25", lambda x, i: -0.25 * x),
        (
            "abs(x) + relu(x - 1) + clamp(x, -2, 2)",
            lambda x, i: abs(x) + max(x - 1, 0) + max(-2, min(2, x)),
        ),
        ("x if i % 2 == 0 else -x", lambda x, i: x if i % 2 == 0 else -x),
        ("x >= 1 margin 0.5", lambda x, i: float(x >= 1)),
        ("(x == 0 margin 1) + (x != 0 margin 1)", lambda x, i: 1.0),
        ("min(x, i, 1.5)", lambda x, i: min(x, i, 1.5)),
        ("x + n * i", lambda x, i: x + 4 * i),
        ("1 if x > 0 margin 0.5 else (0 if x == 0 margin 0.5 else -1)", lambda x, i: sign(x)),
    ],
)
def test_data_expressions(expr, expected):
    prog = program(f"round {{ x = {expr} }}\n")
    x = [-3.0, 0.0, 1.0, 7.0]
    assert run(prog, 4, x) == {"x": [expected(v, i) for i, v in enumerate(x)]}


def test_ir_kinds_of_expressions():
    prog = program(
        "slot s\nround {\n"
        "  a = x * 2\n  b = i\n  c = x > 1 margin 0.5\n  d = 1 if i > 0 else x\n"
        "  s = a + b + c + d\n}\n"
    )
    a, b, c, d, _ = prog.rounds[0].body
    assert a.expr == Scale(2.0, Read("x"))
    assert b.expr == Static(SVar("i"))
    assert c.expr == Compare(">", Read("x"), Num(1.0), 0.5)
    assert d.expr == IfExpr(SBin(">", SVar("i"), SNum(0)), Num(1.0), Read("x"))


DESIGN_EXAMPLE = """
// cumulative sum: machine i ends with x_0 + ... + x_i
input x bound 1e9          // a slot read from the input vector, |x| <= 1e9
slot t = 0                 // a slot with an initial value (no bound: the compiler may ask for one)
output x                   // slots printed after the last round (one or more, comma-separated)

for k in 0 .. ceil_log2(n) {          // unrolled at compile time; stop is exclusive
  round {
    left = recv x from i - 2**k default 0     // receives come first in a round
    x = x + left                              // then local statements, in order
  }
}
"""


def test_the_design_document_example_parses_verbatim():
    prog = parse_program(DESIGN_EXAMPLE)
    assert prog.slots[1].name == "t" and prog.slots[1].bound is None
    assert prog.rounds == example("cumsum").rounds
    assert run(prog, 6, [1, 2, 3, 4, 5, 6]) == {"x": [1, 3, 6, 10, 15, 21]}


def test_comments_that_read_as_divisors():
    for comment in ("// 2", "// (n + 1)", "//(k)"):
        err = error(H + f"round {{\n  x = n {comment}\n}}\n")
        assert "is a comment, not a division" in err.diagnostics[0].message
    for comment in ("// (see above)", "// 2nd step", "// step 2"):
        assert run(program(f"round {{\n  x = n {comment}\n}}\n"), 2, [0, 0]) == {"x": [2, 2]}


def test_spans_point_at_the_source():
    text = "input x bound 1e9\noutput x\nround {\n  got = recv x from i - 1 default 0\n  x = got + 2 * i\n}\n"
    prog = parse_program(text)
    (round_,) = prog.rounds
    assert span_of(round_) == round_.span and (round_.span.line, round_.span.column) == (3, 1)
    (receive,) = round_.receives
    assert (receive.span.line, receive.span.column, receive.span.end_column) == (4, 3, 36)
    (assign,) = round_.body
    got = assign.expr.left
    assert isinstance(got, Read) and (got.span.line, got.span.column, got.span.end_column) == (
        5,
        7,
        10,
    )
    static = assign.expr.right
    s = span_of(static)
    assert isinstance(static, Static) and (s.line, s.column, s.end_column) == (5, 13, 18)
    assert prog.slots[0].span.line == 1 and prog.slots[0].span.column == 7


# ================================================================== errors


def error(text: str) -> CraspError:
    with pytest.raises(CraspError) as caught:
        parse_program(text, "p.pcoc")
    return caught.value


def shown(err: CraspError, k: int = 0) -> tuple[str, str, str]:
    """The heading, source line and caret line of diagnostic k."""
    lines = err.diagnostics[k].format(err.source, err.filename).split("\n")
    return lines[0], lines[1], lines[2]


H = "input x bound 1e9\noutput x\n"  # two lines: errors below start at line 3

ERRORS = [
    # (program, message, line, column, caret width, part of the hint)
    (H + "round {\n  x = x +\n}\n", "unexpected end of line", 4, 10, 1, "expected an expression"),
    (H + "round {\n  x = x + 1 x = 2\n}\n", "unexpected 'x'", 4, 13, 1, "expected an operator"),
    (H + "round {\n  x = x / 2\n}\n", "unexpected character '/'", 4, 9, 1, "no `/`"),
    (H + "round {\n  x = 1\n", "'{' is never closed", 3, 7, 1, "before the end of the input"),
    (H + "round {\n  x = min(x,\n  y = 2\n}\n", "'(' is never closed", 4, 10, 1, "before line 5"),
    (
        H + "for k in 0 .. n // 2 {\n  round { x = x }\n}\n",
        "unexpected end of line",
        3,
        16,
        1,
        "`//` starts a comment; integer division is written `div`",
    ),
    (H + "round {\n  x = n // 2\n}\n", "`// 2` is a comment, not a division", 4, 9, 4, "`div`"),
    (H + "round {\n  x = y + 1\n}\n", "undefined name 'y'", 4, 7, 1, None),
    (
        H + "slot total\nround {\n  x = totl\n}\n",
        "undefined name 'totl'",
        5,
        7,
        4,
        "did you mean 'total'",
    ),
    (
        H + "round {\n  y = t\n  t = 1\n}\n",
        "'t' is read before it is assigned in this round",
        4,
        7,
        1,
        None,
    ),
    (
        H + "round { t = 1 }\nround {\n  x = t\n}\n",
        "'t' is a temporary of another round (line 3)",
        5,
        7,
        1,
        "declare `slot t`",
    ),
    (
        H + "round {\n  if x > 0 margin 1 { t = 1 }\n  x = t\n}\n",
        "'t' is not assigned on every path",
        5,
        7,
        1,
        "both branches",
    ),
    (
        H + "round {\n  a = recv t from i default 0\n}\n",
        "`recv` of 't', which is not a declared slot",
        4,
        12,
        1,
        None,
    ),
    (
        H + "round {\n  t = 1\n  a = recv x from i default 0\n}\n",
        "a `recv` after a local statement",
        5,
        3,
        1,
        "receives come first",
    ),
    (
        H + "round {\n  if i > 0 { a = recv x from i default 0 }\n}\n",
        "a `recv` inside an `if`",
        4,
        14,
        1,
        None,
    ),
    (
        H + "round {\n  a = recv x from x default 0\n}\n",
        "the source of a `recv` must be static, but 'x' is data",
        4,
        19,
        1,
        "cannot depend on data",
    ),
    (
        H + "round {\n  a = recv x from i default n\n}\n",
        "the default of a `recv` must be a constant number",
        4,
        29,
        1,
        None,
    ),
    (
        H + "round {\n  x = recv x from i default 0\n}\n",
        "cannot receive into the slot 'x'",
        4,
        3,
        1,
        None,
    ),
    (H + "round {\n  x = x * x\n}\n", "`*` of two data values", 4, 7, 5, "piecewise linear"),
    (
        H + "for k in 0 .. 3 {\n  round { x = 2**k * x }\n}\n",
        "the factor of `*` must be a constant number",
        4,
        15,
        4,
        None,
    ),
    (
        H + "round {\n  x = 1 if x > 0 else 2\n}\n",
        "a comparison of data needs a margin",
        4,
        12,
        5,
        "margin 0.5",
    ),
    (
        H + "round {\n  x = i > 0 margin 1\n}\n",
        "a margin on a comparison of static values",
        4,
        20,
        1,
        None,
    ),
    (H + "round {\n  x = x > 0 margin -1\n}\n", "a margin must be positive", 4, 20, 2, None),
    (
        H + "round {\n  if x { x = 1 }\n}\n",
        "the condition of an `if` is data but not a comparison",
        4,
        6,
        1,
        None,
    ),
    (
        H + "round {\n  if x > 0 margin 1 and i > 0 { x = 1 }\n}\n",
        "`and` combines static conditions only",
        4,
        6,
        14,
        None,
    ),
    (H + "round {\n  x = x div 2\n}\n", "`div` works on static integers only", 4, 7, 1, None),
    (
        H + "for k in 0 .. n - i {\n  round { x = 1 }\n}\n",
        "a loop bound cannot depend on the machine index `i`",
        3,
        19,
        1,
        None,
    ),
    (
        H + "for x in 0 .. 2 {\n  round { }\n}\n",
        "loop variable 'x' has the name of a slot",
        3,
        5,
        1,
        None,
    ),
    (
        H + "for k in 0 .. 2 {\n  for k in 0 .. 2 { round { } }\n}\n",
        "already the variable of an enclosing loop",
        4,
        7,
        1,
        None,
    ),
    (
        H + "for k in 0 .. 2 {\n  round { k = 1 }\n}\n",
        "cannot assign to the loop variable 'k'",
        4,
        11,
        1,
        None,
    ),
    (
        H + "round {\n  n = 3\n}\n",
        "cannot assign to 'n': it is the number of machines",
        4,
        3,
        1,
        None,
    ),
    ("input x\ninput x\noutput x\n", "slot 'x' is declared twice (first at line 1)", 2, 7, 1, None),
    (
        "input x = 3\noutput x\n",
        "an input takes its value from the input vector",
        1,
        9,
        3,
        "use `slot",
    ),
    (
        "slot min\noutput min\n",
        "'min' is reserved and cannot name a slot",
        1,
        6,
        3,
        "built-in function",
    ),
    ("slot s bound 0\noutput s\n", "a bound must be positive, not 0", 1, 14, 1, None),
    ("slot s bound 1 = 2\noutput s\n", "the initial value 2 exceeds the bound 1", 1, 18, 1, None),
    (
        "slot s = x\ninput x\noutput s\n",
        "an initial value must be a constant number",
        1,
        10,
        1,
        None,
    ),
    (H + "output y\n", "output 'y' is not a declared slot", 3, 8, 1, None),
    ("input x\noutput x, x\n", "output 'x' is listed twice", 2, 11, 1, None),
    (H + "x = 1\n", "a statement outside a round", 3, 1, 1, "inside `round"),
    (H + "for k in 0 .. 2 {\n  x = 1\n}\n", "a statement directly inside a loop", 4, 3, 1, None),
    (H + "round {\n  round { }\n}\n", "a round inside a round", 4, 3, 5, None),
    (H + "round {\n  slot y\n}\n", "declarations belong at the top level", 4, 8, 1, None),
    (H + "round {\n  x = foo(x)\n}\n", "unknown function 'foo'", 4, 7, 3, "known: abs"),
    (H + "round {\n  x = relu(x, 1)\n}\n", "relu() takes 1 argument, not 2", 4, 7, 10, None),
    (H + "round {\n  x = min(x)\n}\n", "min() needs at least two arguments", 4, 7, 6, None),
    (
        H + "round {\n  x = clamp(x, 1, 0)\n}\n",
        "clamp() with lower limit 1 above upper limit 0",
        4,
        7,
        14,
        None,
    ),
    (
        H + "round {\n  x = clamp(x, i, 2)\n}\n",
        "the lower limit of clamp() must be a constant number",
        4,
        16,
        1,
        None,
    ),
    (H + "round {\n  x = log2(x)\n}\n", "log2() takes a static integer", 4, 12, 1, None),
    (H + "round {\n  x = 2 ** -1\n}\n", "negative exponent", 4, 7, 7, None),
    (H + "round {\n  x = 1 div 0 + x\n}\n", "`div` by zero", 4, 7, 7, None),
    (H + "round {\n  x = 2**2**2**2**2\n}\n", "`**` result too large (2 ** 65536)", 4, 7, 13, None),
    (H + "round {\n  x = 2**60\n}\n", "too large to be exact as a number", 4, 7, 5, None),
    (H + "round {\n  x = 1e999\n}\n", "the number 1e999 is out of range", 4, 7, 5, None),
    ("slot s\n", "the program declares no output", None, None, None, "add `output NAME`"),
]


@pytest.mark.parametrize(("text", "message", "line", "column", "width", "hint"), ERRORS)
def test_each_error_kind_has_a_message_location_and_caret(text, message, line, column, width, hint):
    err = error(text)
    assert len(err.diagnostics) == 1, str(err)
    diag = err.diagnostics[0]
    assert message in diag.message
    if hint is not None:
        assert hint in (diag.hint or ""), diag.hint
    if line is None:
        assert diag.span is None and str(err).startswith(f"p.pcoc: error: {diag.message}")
        return
    heading, source, carets = shown(err)
    assert heading == f"p.pcoc:{line}:{column}: error: {diag.message}"
    assert source == "    " + text.split("\n")[line - 1].rstrip()
    assert carets == "    " + " " * (column - 1) + "^" * width


def test_several_errors_are_all_reported_in_order():
    err = error(H + "round {\n  x = x +\n  y = z\n  x = 2 3\n}\n")
    assert [(d.span.line, d.span.column) for d in err.diagnostics] == [(4, 10), (6, 9)]
    assert str(err).endswith("\n2 errors")  # line 5 only after the syntax errors are fixed
    err = error(H + "round {\n  a = y\n  b = z\n  x = q\n}\n")
    assert [d.message for d in err.diagnostics] == [
        "undefined name 'y'",
        "undefined name 'z'",
        "undefined name 'q'",
    ]


def test_deep_nesting_is_an_error_not_a_crash():
    deep = "abs(" * (MAX_DEPTH + 5) + "x" + ")" * (MAX_DEPTH + 5)
    err = error(H + f"round {{ x = {deep} }}\n")
    assert "nested too deeply" in err.diagnostics[0].message
    assert (
        "nested too deeply" in error(H + f"round {{ x = {'-' * 500}x }}\n").diagnostics[0].message
    )
    parens = "(" * 500 + "x" + ")" * 500  # parentheses add no depth
    assert run(program(f"round {{ x = {parens} }}\n"), 1, [3]) == {"x": [3]}
    many = ", ".join(["x"] * (MAX_DEPTH + 5))
    assert "nested too deeply" in error(H + f"round {{ x = min({many}) }}\n").diagnostics[0].message
    fine = ", ".join(["x"] * 50)
    assert run(program(f"round {{ x = min({fine}, 0) }}\n"), 2, [3, -2]) == {"x": [0, -2]}


def test_load_pcoc_reports_unreadable_files(tmp_path):
    missing = tmp_path / "missing.pcoc"
    with pytest.raises(CraspError, match="cannot read program"):
        load_program(missing)
    path = tmp_path / "bom.pcoc"
    path.write_bytes(b"\xef\xbb\xbfinput x\noutput x\n")
    assert load_program(path).inputs == ("x",)


# ================================================================== static checks for n


def check_error(text: str, n: int) -> CraspError:
    prog = parse_program(text, "p.pcoc")
    with pytest.raises(CraspError) as caught:
        check_pcoc(prog, n)
    return caught.value


def test_log2_of_a_non_power_of_two_is_reported_at_its_location():
    text = H + "for k in 0 .. log2(n) {\n  round { x = x }\n}\n"
    assert len(check_pcoc(parse_program(text), 8)) == 3
    err = check_error(text, 6)
    heading, source, carets = shown(err)
    assert (
        heading
        == "p.pcoc:3:15: error: log2(6) is undefined: 6 is not a power of two (for n = 6, r = 0)"
    )
    assert source == "    for k in 0 .. log2(n) {"
    assert carets == "    " + " " * 14 + "^" * 7


def test_division_by_zero_names_the_machine_and_round():
    text = (
        H
        + "for k in 0 .. 2 {\n  round {\n    a = recv x from n div (i - k - 1) default 0\n  }\n}\n"
    )
    err = check_error(text, 4)
    assert len(err.diagnostics) == 1  # once per location, not once per round
    heading, _, carets = shown(err)
    assert heading == "p.pcoc:5:21: error: `div` by zero (for n = 4, k = 0, r = 0, i = 1)"
    assert carets == "    " + " " * 20 + "^" * 17


def test_static_failures_in_conditions_and_data_values():
    err = check_error(
        H + "round {\n  if 2 ** (i - 1) > 0 { x = 1 }\n  x = x + ceil_log2(i)\n}\n", 3
    )
    assert [d.message for d in err.diagnostics] == [
        "`**` with a negative exponent (the result is not an integer) (for n = 3, r = 0, i = 0)",
        "ceil_log2(0) is undefined: 0 is not positive (for n = 3, r = 0, i = 0)",
    ]
    err = check_error(H + "round {\n  x = x + 2 ** (n * 20)\n}\n", 3)
    assert "too large to be exact" in err.diagnostics[0].message


def test_short_circuit_guards_a_static_division():
    text = H + "round {\n  if i > 0 and n div i >= 2 { x = 1 }\n}\n"
    assert run(parse_program(text), 5, [0] * 5) == {"x": [0, 1, 1, 0, 0]}
    # A static choice evaluates both of its branches on every machine.
    err = check_error(H + "round {\n  x = (n div i) if i > 0 else 0\n}\n", 3)
    assert "`div` by zero" in err.diagnostics[0].message


def test_n_must_be_a_positive_integer():
    prog = example("cumsum")
    for bad in (0, -3, 2.5, True, "4"):
        with pytest.raises(CraspError, match="n must be"):
            check_pcoc(prog, bad)
    assert check_pcoc(prog, np.int64(4)) == unroll(prog, 4)


def test_runaway_loops_are_refused():
    err = check_error(H + "for k in 0 .. 10**9 {\n  round { x = x }\n}\n", 2)
    assert "more than 100000 rounds for n = 2" in err.diagnostics[0].message
    err = check_error(H + "for k in 0 .. 10**9 {\n  for j in 0 .. 0 { round { } }\n}\n", 2)
    assert "loop iterations" in err.diagnostics[0].message


def test_loop_bounds_see_r_and_outer_variables_and_may_be_empty():
    prog = program(
        "slot s\nfor k in 0 .. 3 {\n  for j in k .. r + 1 {\n    round { s = 10 * s + j }\n  }\n}\n"
        "for k in 5 .. 2 { round { s = -1 } }\n",
        "output s\n",
    )
    rounds = check_pcoc(prog, 2)
    assert rounds == unroll(prog, 2)
    envs = [(env["k"], env["j"]) for _, env in rounds]
    # k = 0: j in 0 .. 1; k = 1: r = 1, j in 1 .. 2; k = 2: r = 2, j in 2 .. 3.
    assert envs == [(0, 0), (1, 1), (2, 2)]
    assert run(prog, 2) == {"s": [12.0, 12.0]}


def reference_static(expr, env: dict[str, int]) -> int | None:
    """The meaning of a static expression on one machine, in plain Python (None where it
    has no value): the oracle of the vectorised evaluator."""
    match expr:
        case SNum(value):
            return value
        case SVar(name):
            return env[name]
        case SNot(arg):
            a = reference_static(arg, env)
            return None if a is None else int(not a)
        case SBin(op, left, right) if op in ("and", "or"):
            a = reference_static(left, env)
            if a is None or bool(a) == (op == "or"):
                return None if a is None else int(bool(a))
            b = reference_static(right, env)
            return None if b is None else int(bool(b))
        case SBin(op, left, right):
            a, b = reference_static(left, env), reference_static(right, env)
            if a is None or b is None or (op in ("//", "%") and b == 0):
                return None
            if op == "**" and b < 0:
                return None
            return {
                "+": lambda: a + b,
                "-": lambda: a - b,
                "*": lambda: a * b,
                "//": lambda: a // b,
                "%": lambda: a % b,
                "**": lambda: a**b,
                "<": lambda: int(a < b),
                "<=": lambda: int(a <= b),
                ">": lambda: int(a > b),
                ">=": lambda: int(a >= b),
                "==": lambda: int(a == b),
                "!=": lambda: int(a != b),
            }[op]()
        case SCall(fn, args):
            values = [reference_static(arg, env) for arg in args]
            if None in values:
                return None
            if fn == "min":
                return min(values)
            if fn == "max":
                return max(values)
            (x,) = values
            if x < 1 or (fn == "log2" and x & (x - 1)):
                return None
            return x.bit_length() - 1 if fn == "log2" else (x - 1).bit_length()
    raise AssertionError(expr)


# Random static expressions over i, n and k, compared with the reference machine by machine.
def static_exprs():
    leaves = st.one_of(
        st.integers(-6, 6).map(SNum), st.sampled_from([SVar("i"), SVar("n"), SVar("k")])
    )

    def extend(children):
        small = st.integers(0, 3).map(SNum)
        return st.one_of(
            st.tuples(
                st.sampled_from(
                    ["+", "-", "*", "//", "%", "<", "<=", ">", ">=", "==", "!=", "and", "or"]
                ),
                children,
                children,
            ).map(lambda t: SBin(*t)),
            st.tuples(children, small).map(lambda t: SBin("**", *t)),
            children.map(SNot),
            st.tuples(st.sampled_from(["min", "max"]), children, children).map(
                lambda t: SCall(t[0], (t[1], t[2]))
            ),
            st.tuples(st.sampled_from(["log2", "ceil_log2"]), children).map(
                lambda t: SCall(t[0], (t[1],))
            ),
        )

    return st.recursive(leaves, extend, max_leaves=8)


@settings(max_examples=150)
@given(expr=static_exprs(), n=st.integers(1, 9), k=st.integers(0, 3))
def test_vectorised_static_evaluation_matches_the_scalar_reference(expr, n, k):
    env = {"n": n, "k": k}
    expected = [reference_static(expr, {**env, "i": i}) for i in range(n)]
    try:
        value = static_value(expr, env, machine_indices(n))
    except StaticFailure as failure:
        assert None in expected
        assert failure.machine is None or expected[failure.machine] is None
        return
    assert None not in expected
    assert list(np.broadcast_to(np.asarray(value, dtype=object), (n,))) == expected


def static_text(expr) -> str:
    """PCOC source of a static expression, fully parenthesised."""
    match expr:
        case SNum(value):
            return f"({value})"
        case SVar(name):
            return name
        case SNot(arg):
            return f"(not {static_text(arg)})"
        case SBin(op, left, right):
            word = "div" if op == "//" else op
            return f"({static_text(left)} {word} {static_text(right)})"
        case SCall(fn, args):
            return f"{fn}({', '.join(static_text(a) for a in args)})"
    raise AssertionError(expr)


@settings(max_examples=60)
@given(
    value=static_exprs(),
    cond=static_exprs(),
    source=static_exprs(),
    n=st.integers(1, 6),
    data=st.data(),
)
def test_the_lowering_evaluates_static_expressions_as_the_interpreter(value, cond, source, n, data):
    """Static values used as data, static conditions and receive sources, compiled (the
    lowering's static evaluation) and interpreted, on every machine of every round."""
    text = (
        "input x bound 100\nslot y bound 1000\nslot z bound 10\nslot w bound 100\n"
        "output y, z, w\n"
        "for k in 0 .. 2 {\n  round {\n"
        f"    a = recv x from {static_text(source)} default -7\n"
        f"    y = clamp({static_text(value)}, -1000, 1000)\n"
        f"    if {static_text(cond)} {{ z = k + 1 }} else {{ z = -1 }}\n"
        "    w = a\n  }\n}\n"
    )
    try:
        prog = parse_program(text, "p.pcoc")
    except CraspError:  # a closed expression without a value, refused by the parser
        return
    xs = [float(v) for v in data.draw(st.lists(st.integers(-100, 100), min_size=n, max_size=n))]
    try:
        want = interpret_program(prog, n, [xs]).outputs
    except CraspError as err:  # a static value that does not exist: refused alike
        with pytest.raises(CraspError) as caught:
            compile_program(prog, n)
        assert caught.value.diagnostics[0].message == err.diagnostics[0].message
        return
    got = run_pcoc(compile_program(prog, n), [[xs]])
    for name in ("y", "z", "w"):
        assert got[name][0].tolist() == want[name].tolist(), (name, text)


def test_the_lowering_reports_a_static_value_without_a_value_at_its_location():
    """Without the checks of check_pcoc, the lowering's own evaluation fails located."""
    prog = program("round {\n  a = recv x from n div (i - 1) default 0\n  x = a\n}\n")
    with pytest.raises(CraspError) as caught:
        lower_pcoc(prog, 3)
    (diag,) = caught.value.diagnostics
    assert diag.message == "static expression has no value: `div` by zero"
    assert (diag.span.line, diag.span.column) == (4, 19)


# ================================================================== the interpreter


def test_receives_read_the_memory_of_the_start_of_the_round():
    prog = program(
        "round {\n  other = recv x from n - 1 - i default 0\n  x = x + 100\n  y = x + other\n"
        "  x = y\n}\n",
        "input x bound 1e9\noutput x\n",
    )
    assert run(prog, 3, [1, 2, 3]) == {"x": [104, 104, 104]}


def test_out_of_range_sources_give_the_default():
    prog = program("round {\n  a = recv x from i + n * 10**30 default -7\n  x = a\n}\n")
    assert run(prog, 3, [1, 2, 3]) == {"x": [-7, -7, -7]}
    prog = program(
        "round {\n  a = recv x from 1 default -7\n  b = recv x from -1 default 5\n  x = a + b\n}\n"
    )
    assert run(prog, 3, [1, 2, 3]) == {"x": [7, 7, 7]}


def test_branches_select_per_machine_and_temporaries_merge():
    prog = program(
        "slot y\nround {\n  t = 0\n  if x > 0 margin 0.5 {\n    t = x\n    y = 1\n  } else {\n"
        "    t = -x\n  }\n  if i == 1 { u = 5; y = y + 10 } else { u = 6 }\n  x = t + u\n}\n",
        "input x bound 1e9\noutput x, y\n",
    )
    assert run(prog, 3, [-2, 3, 0]) == {"x": [8, 8, 6], "y": [0, 11, 0]}


def test_trace_holds_every_slot_after_every_round():
    prog = example("cumsum")
    trace = interpret_program(prog, 4, [[1, 2, 3, 4]])
    assert len(trace.rounds) == 3 and trace.n == 4
    assert [list(m["x"]) for m in trace.rounds] == [[1, 2, 3, 4], [1, 3, 5, 7], [1, 3, 6, 10]]
    assert trace.envs == [{"n": 4, "k": 0, "r": 0}, {"n": 4, "k": 1, "r": 1}]
    assert trace.outputs["x"].dtype == np.float64
    trace.outputs["x"][0] = 99  # the trace's arrays are the caller's
    assert trace.rounds[-1]["x"][0] == 1
    single = interpret_program(prog, 4, [1, 2, 3, 4])  # one input slot: a plain vector works
    assert list(single.outputs["x"]) == [1, 3, 6, 10]


def test_batch_runs_agree_with_single_runs():
    rng = np.random.default_rng(0)
    inputs = rng.integers(-5, 5, size=(20, 2, 7)).astype(float)
    prog = example("compare_vectors")
    batch = interpret_batch(prog, 7, inputs)
    for b in range(20):
        single = interpret_program(prog, 7, inputs[b])
        for name in prog.outputs:
            assert (batch.outputs[name][b] == single.outputs[name]).all()
        for k, memory in enumerate(single.rounds):
            for name, values in memory.items():
                assert (batch.rounds[k][name][b] == values).all()


def test_programs_without_inputs_or_rounds():
    prog = parse_program("slot s = 2.5\noutput s\nround { s = s + i }\n")
    assert run(prog, 3) == {"s": [2.5, 3.5, 4.5]}
    assert list(interpret_program(prog, 3, None).outputs["s"]) == [2.5, 3.5, 4.5]
    prog = parse_program("input x\noutput x\n")
    assert run(prog, 2, [4, 5]) == {"x": [4, 5]}


def test_bad_inputs_are_refused():
    prog = example("cumsum")
    with pytest.raises(
        CraspError, match=r"shape \(k, n\) with k = 1 input slot\(s\) \(x\) and n = 4"
    ):
        interpret_program(prog, 4, [[1, 2, 3]])
    with pytest.raises(CraspError, match="finite"):
        interpret_program(prog, 2, [[1, math.nan]])
    with pytest.raises(CraspError, match="not an array of numbers"):
        interpret_program(prog, 2, [["a", "b"]])
    with pytest.raises(CraspError, match="batch"):
        interpret_batch(example("compare_vectors"), 2, np.zeros((3, 1, 2)))


def test_check_promises_reports_margin_violations_where_they_matter():
    prog = program("round {\n  x = 5 if x > 1 margin 0.5 else x\n}\n")
    assert run(prog, 2, [1.25, 3], check_promises=False) == {"x": [5, 5]}  # exact comparison
    with pytest.raises(CraspError) as caught:
        run(prog, 2, [1.25, 3], check_promises=True)
    heading, _, carets = shown(caught.value)
    assert heading == (
        "p.pcoc:4:12: error: margin violated: left − right = 0.25 lies in (0, 0.5) "
        "(for n = 2, r = 0, i = 0)"
    )
    assert carets == "    " + " " * 11 + "^" * 16
    assert run(prog, 2, [1.5, 0.5], check_promises=True) == {"x": [5, 0.5]}  # at the margin
    # Inside a branch that this machine does not take, a comparison promises nothing.
    guarded = program("round {\n  if i > 0 {\n    x = x == 0 margin 1\n  }\n}\n")
    assert run(guarded, 2, [0.5, 0], check_promises=True) == {"x": [0.5, 1]}
    with pytest.raises(
        CraspError, match=r"lies in \(-1, 1\) without 0 \(for n = 2, r = 0, i = 1\)"
    ):
        run(guarded, 2, [0, 0.5], check_promises=True)


def test_check_promises_reports_bound_violations():
    prog = example("cumsum")
    assert run(prog, 2, [6e8, 6e8]) == {"x": [6e8, 1.2e9]}
    with pytest.raises(CraspError) as caught:
        run(prog, 2, [6e8, 6e8], check_promises=True)
    assert str(caught.value).startswith(
        f"{prog.filename}:7:7: error: slot 'x' exceeds its bound 1e+09 after round r = 0: "
        "machine i = 1 holds 1200000000.0"
    )
    with pytest.raises(CraspError, match="in the initial memory"):
        run(prog, 2, [2e9, 0], check_promises=True)


# ================================================================== input and output text


def test_read_vectors_reads_lines_and_slots():
    text = "1 2 3\n\n  -4 0.5 1e3 \r\n"
    vectors = read_vectors(text, 3)
    assert [v.tolist() for v in vectors] == [[[1, 2, 3]], [[-4, 0.5, 1000]]]
    (two,) = read_vectors("1 2 3 4 5 6\n", 3, slots=2)
    assert two.tolist() == [[1, 2, 3], [4, 5, 6]]
    assert [v.shape for v in read_vectors("1 2\n1 2 3 4\n", None)] == [(1, 2), (1, 4)]
    assert read_vectors("\n \n", 4) == []


def test_read_vectors_errors_have_line_and_column():
    with pytest.raises(CraspError) as caught:
        read_vectors("1 2 3\n4 five 6\n7 8\n9 10 11 12\n", 3, "vec.txt")
    err = caught.value
    assert [d.message for d in err.diagnostics] == [
        "'five' is not a number",
        "expected 3 numbers (n = 3), found only 2",
        "expected 3 numbers (n = 3), found 4",
    ]
    assert shown(err, 0) == (
        "vec.txt:2:3: error: 'five' is not a number",
        "    4 five 6",
        "      ^^^^",
    )
    assert shown(err, 1)[0].startswith("vec.txt:3:4:") and shown(err, 1)[2] == "       ^"
    assert shown(err, 2)[0].startswith("vec.txt:4:9:") and shown(err, 2)[2] == "            ^^"
    for bad in ("nan", "inf", "1_0", "0x10", "1e999", "--1"):
        with pytest.raises(CraspError):
            read_vectors(f"1 {bad}\n", 2)
    with pytest.raises(CraspError, match=r"2 input slots × n = 2\), found only 3"):
        read_vectors("1 2 3\n", 2, slots=2)
    with pytest.raises(CraspError, match="do not split into 2 input vectors"):
        read_vectors("1 2 3\n", None, slots=2)


def test_format_vector():
    assert format_vector([1.0, -2.0, 0.5, -0.0, 1e16, 1e-7, 0.1 + 0.2]) == (
        "1 -2 0.5 0 1e+16 1e-07 0.30000000000000004"
    )
    assert format_vector(np.array([123456789012345.0])) == "123456789012345"


@FAST
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=8))
def test_format_vector_round_trips_through_read_vectors(values):
    (back,) = read_vectors(format_vector(values), len(values))
    assert back[0].tolist() == [v + 0.0 for v in values]  # -0.0 is written as 0
    assert not re.search(r"\.0(\s|$)", format_vector(values))
