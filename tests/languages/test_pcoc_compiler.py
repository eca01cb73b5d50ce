"""The PCOC compiler (crasp_compiler.languages.pcoc.compile, crasp_compiler.languages.pcoc.lower) and the
positional routing head (crasp_compiler.cookbook.attention.route).

Compiled models run through the numpy executor (average-hard and softmax) and the torch
module, against the reference interpreter and against plain numpy definitions: on
programs built directly as IR (independent of the parser), on random IR programs
(hypothesis), and on every example in examples/pcoc, for n from 1 to 16 and 32, with
values far outside any training range (up to ±1e8, within the declared bounds).
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from crasp_compiler.cookbook import attention as A
from crasp_compiler.cookbook.blocks import var
from crasp_compiler.errors import CraspError
from crasp_compiler.languages.pcoc import interpret_batch, load_program, parse_program
from crasp_compiler.languages.pcoc.compile import (
    compile_program,
    input_matrix,
    is_pcoc,
    machines,
    run_pcoc,
    temperature_for,
)
from crasp_compiler.languages.pcoc.lower import lower_pcoc
from crasp_compiler.languages.pcoc.nodes import (
    Add,
    Assign,
    Call,
    Compare,
    For,
    If,
    IfExpr,
    Num,
    Program,
    Read,
    Receive,
    Round,
    SBin,
    Scale,
    SCall,
    Slot,
    SNum,
    Static,
    Sub,
    SVar,
)
from crasp_compiler.model import read_model, save_model
from crasp_compiler.model.features import onehot
from crasp_compiler.runtime.numpy_exec import run_tokens
from tests.support.block_harness import build, evaluate

pytestmark = pytest.mark.usefixtures("one_torch_thread")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "pcoc"
NAMES = sorted(p.stem for p in EXAMPLES.glob("*.pcoc"))
SIZES = [*range(1, 17), 32]
FEW = settings(max_examples=30)
MANY = settings(max_examples=60)
TOLERANCE = 1e-6


def log2up(n: int) -> int:
    return (n - 1).bit_length()


@cache
def example(name: str) -> Program:
    return load_program(EXAMPLES / f"{name}.pcoc")


@cache
def compiled(name: str, n: int, mode: str = "hard") -> object:
    return compile_program(example(name), n, mode=mode)


def outputs_agree(got: dict, want: dict, atol: float) -> float:
    """The largest difference over the outputs; asserts it is at most ``atol``."""
    worst = 0.0
    for name, values in want.items():
        diff = float(np.max(np.abs(np.asarray(got[name]) - values), initial=0.0))
        assert diff <= atol, (name, diff, got[name], values)
        worst = max(worst, diff)
    return worst


# ---------------------------------------------------------------------------- IR programs

i, k, n_ = SVar("i"), SVar("k"), SVar("n")
POW = SBin("**", SNum(2), k)
SCAN = SCall("ceil_log2", (n_,))


def scan(op, default: float, guarded: bool = False, bound: float | None = 1e9) -> Program:
    """The Hillis–Steele scan with ``op`` (a function of x and left), as IR."""
    body = (Assign("x", op(Read("x"), Read("left"))),)
    if guarded:
        body = (If(SBin(">=", i, POW), body, ()),)
    rnd = Round((Receive("left", "x", SBin("-", i, POW), default),), body)
    return Program((Slot("x", bound),), ("x",), ("x",), (For("k", SNum(0), SCAN, (rnd,)),))


CUMSUM = scan(Add, 0.0)
GUARDED_MIN = scan(lambda a, b: Call("min", (a, b)), 0.0, guarded=True)


def odd_even_sort() -> Program:
    """Odd-even transposition sort with nested per-machine branches (the defaults 0 are
    never used: the guards keep machines without a partner out)."""
    left_of_pair = SBin("and", SBin("==", SBin("%", SBin("+", i, k), SNum(2)), SNum(0)),
                        SBin("<", SBin("+", i, SNum(1)), n_))  # fmt: skip
    right_of_pair = SBin("and", SBin("==", SBin("%", SBin("+", i, k), SNum(2)), SNum(1)),
                         SBin(">=", i, SNum(1)))  # fmt: skip
    body = (
        If(
            left_of_pair,
            (Assign("x", Call("min", (Read("x"), Read("right")))),),
            (If(right_of_pair, (Assign("x", Call("max", (Read("x"), Read("left")))),), ()),),
        ),
    )
    receives = (
        Receive("right", "x", SBin("+", i, SNum(1)), 0.0),
        Receive("left", "x", SBin("-", i, SNum(1)), 0.0),
    )
    loop = For("k", SNum(0), n_, (Round(receives, body),))
    return Program((Slot("x", 1e9),), ("x",), ("x",), (loop,))


SORT = odd_even_sort()

# every kind of local computation: comparisons (all six), data and static conditionals,
# min/max of several values, abs, relu, clamp, static values as data
LOCAL = Program(
    (Slot("x", 1e6), Slot("y", 1e6), Slot("c", 10.0), Slot("z", 1e8)),
    ("x", "y"),
    ("c", "z"),
    (
        Round(
            (Receive("l", "x", SBin("-", i, SNum(1)), -5.0),),
            (
                Assign(
                    "c",
                    Add(
                        Add(
                            Compare(">", Read("x"), Read("l"), 0.5),
                            Compare("<", Read("x"), Read("y"), 0.5),
                        ),
                        Add(
                            Add(
                                Compare(">=", Read("x"), Num(0), 0.5),
                                Compare("<=", Read("y"), Num(0), 0.5),
                            ),
                            Add(
                                Compare("==", Read("x"), Read("y"), 0.5),
                                Scale(2, Compare("!=", Read("l"), Num(-5), 0.5)),
                            ),
                        ),
                    ),
                ),
                If(
                    Compare("<=", Read("y"), Num(3.0), 0.5),
                    (Assign("z", Call("clamp", (Read("x"), Num(-2.0), Num(2.0)))),),
                    (
                        Assign(
                            "z",
                            Add(
                                Call("abs", (Read("l"),)),
                                Sub(Static(SBin("*", i, SNum(3))), Call("relu", (Read("y"),))),
                            ),
                        ),
                    ),
                ),
                Assign(
                    "z",
                    Add(
                        Read("z"),
                        IfExpr(
                            SBin("==", SBin("%", i, SNum(2)), SNum(0)),
                            Call("max", (Read("x"), Read("y"), Read("l"), Num(2))),
                            Call("min", (Read("x"), Num(7))),
                        ),
                    ),
                ),
            ),
        ),
    ),
)


def local_reference(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    n = len(x)
    m = np.arange(n)
    left = np.concatenate([[-5.0], x[:-1]])
    c = ((x > left) * 1.0 + (x < y) + (x >= 0) + (y <= 0) + (x == y) + 2 * (left != -5)).astype(
        float
    )
    z = np.where(y <= 3, np.clip(x, -2, 2), np.abs(left) + 3 * m - np.maximum(y, 0))
    z = z + np.where(m % 2 == 0, np.maximum.reduce([x, y, left, np.full(n, 2.0)]), np.minimum(x, 7))
    return {"c": c, "z": z}


def integers(rng: np.random.Generator, scale: float, shape) -> np.ndarray:
    return rng.integers(-scale, scale, size=shape, endpoint=True).astype(float)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 16, 32])
def test_ir_programs_against_numpy_definitions(n):
    rng = np.random.default_rng(n)
    xs = integers(rng, 3e7, (6, n))
    cases = [
        (CUMSUM, lambda x: {"x": np.cumsum(x)}),
        (GUARDED_MIN, lambda x: {"x": np.minimum.accumulate(x)}),
        (SORT, lambda x: {"x": np.sort(x)}),
    ]
    for prog, reference in cases:
        for mode in ("hard", "softmax"):
            model = compile_program(prog, n, mode=mode)
            got = run_pcoc(model, [x[None] for x in xs])
            for row, x in enumerate(xs):
                want = reference(x)
                atol = 0.0 if mode == "hard" else model.guarantee.errors["float64"]
                outputs_agree({"x": got["x"][row]}, want, atol)
    pairs = integers(rng, 20, (6, 2, n))
    for mode in ("hard", "softmax"):
        model = compile_program(LOCAL, n, mode=mode)
        got = run_pcoc(model, list(pairs))
        for row, (x, y) in enumerate(pairs):
            atol = 0.0 if mode == "hard" else TOLERANCE
            outputs_agree({name: v[row] for name, v in got.items()}, local_reference(x, y), atol)


def test_ir_layer_counts():
    """One layer per round where the local computation is at most one MLP deep: the scan
    (linear), the guarded min and the sort (min/max inside per-machine branches need no
    gating layer); the local program needs 3 (comparisons, then the data selection and
    the max of four values, then the static selection between them)."""
    for n in (2, 5, 8, 16, 32):
        assert len(compile_program(CUMSUM, n).layers) == log2up(n)
        assert len(compile_program(GUARDED_MIN, n).layers) == log2up(n)
        model = compile_program(SORT, n)
        assert model.info["rounds"] == n
        # n = 2: no machine has a partner in the second round
        assert len(model.layers) == (n if n > 2 else 1)
        assert [len(layer.heads) for layer in model.layers] == [2] * len(model.layers)
    assert len(compile_program(LOCAL, 4).layers) == 3
    assert compile_program(LOCAL, 4).info["heads"] == [1, 0, 0]


# ---------------------------------------------------------------------------- random programs


@st.composite
def programs(draw) -> Program:
    """Small random programs over two bounded inputs: receives with static sources
    (shifts, mirror, rotation, constant), and local statements with every kind of data
    expression, per-machine and data branches nested up to two deep. Values stay integers
    (factors -2..3, integer constants and clamp bounds), so margins of 0.5 always hold."""
    slots = ("x", "y", "s")
    rounds = []
    for _ in range(draw(st.integers(1, 3))):
        receives = []
        for number in range(draw(st.integers(0, 2))):
            c = SNum(draw(st.integers(0, 3)))
            source = draw(
                st.sampled_from(
                    [
                        SBin("-", i, c),
                        SBin("+", i, c),
                        SBin("-", SBin("-", n_, SNum(1)), i),
                        SBin("%", SBin("+", i, c), n_),
                        c,
                        i,
                    ]
                )
            )
            default = float(draw(st.integers(-3, 3)))
            receives.append(Receive(f"r{number}", draw(st.sampled_from(slots)), source, default))
        names = [*slots, *(r.target for r in receives)]

        def expr(depth: int, names: list[str] = names) -> object:
            leaves = [Read(name) for name in names] + [Num(float(draw(st.integers(-4, 4))))]
            leaves.append(Static(SBin("*", i, SNum(draw(st.integers(1, 3))))))
            if depth == 0 or draw(st.integers(0, 3)) == 0:
                return draw(st.sampled_from(leaves))
            kind = draw(st.sampled_from(["add", "sub", "scale", "min", "max", "abs", "relu",
                                         "clamp", "cmp", "ifs", "ifd"]))  # fmt: skip
            sub = lambda: expr(depth - 1)  # noqa: E731
            if kind == "add":
                return Add(sub(), sub())
            if kind == "sub":
                return Sub(sub(), sub())
            if kind == "scale":
                return Scale(float(draw(st.sampled_from([-2, -1, 2, 3]))), sub())
            if kind in ("min", "max"):
                return Call(kind, tuple(sub() for _ in range(draw(st.integers(2, 3)))))
            if kind in ("abs", "relu"):
                return Call(kind, (sub(),))
            if kind == "clamp":
                lo = draw(st.integers(-5, 5))
                return Call(
                    "clamp", (sub(), Num(float(lo)), Num(float(lo + draw(st.integers(0, 6)))))
                )
            if kind == "cmp":
                return Compare(
                    draw(st.sampled_from([">", ">=", "<", "<=", "==", "!="])), sub(), sub(), 0.5
                )
            if kind == "ifs":
                return IfExpr(static_condition(), sub(), sub())
            return IfExpr(
                Compare(draw(st.sampled_from([">", "<="])), sub(), sub(), 0.5), sub(), sub()
            )

        def static_condition() -> object:
            c = SNum(draw(st.integers(0, 3)))
            return draw(st.sampled_from([SBin("<", i, c), SBin("==", SBin("%", i, SNum(2)), SNum(0)),
                                         SBin(">=", SBin("+", i, c), n_)]))  # fmt: skip

        def statements(depth: int, least: int = 1) -> tuple:
            out = []
            for _ in range(draw(st.integers(least, 2))):
                choice = draw(st.integers(0, 6)) if depth < 2 else draw(st.integers(0, 1))
                slot = draw(st.sampled_from(slots))
                if choice == 0:  # an update of a slot by its own value (folded in branches)
                    fn = draw(st.sampled_from(["min", "max"]))
                    out.append(Assign(slot, Call(fn, (Read(slot), expr(1)))))
                elif choice == 5:
                    cond = Compare(
                        draw(st.sampled_from([">", "<=", "=="])), expr(1), Read(slot), 0.5
                    )
                    out.append(If(cond, (Assign(slot, expr(1)),), ()))
                elif choice <= 2:
                    out.append(Assign(slot, expr(2)))
                elif choice in (3, 6):
                    otherwise = statements(depth + 1, least=0)
                    out.append(If(static_condition(), statements(depth + 1), otherwise))
                else:
                    cond = Compare(draw(st.sampled_from([">", ">=", "=="])), expr(1), expr(1), 0.5)
                    otherwise = statements(depth + 1, least=0)
                    out.append(If(cond, statements(depth + 1), otherwise))
            return tuple(out)

        body = list(statements(0))
        if draw(st.booleans()):  # a temporary read later in the round
            body.insert(0, Assign("t", expr(2)))
            names.append("t")
            body.append(Assign(draw(st.sampled_from(slots)), Add(Read("t"), expr(1))))
        rounds.append(Round(tuple(receives), tuple(body)))
    return Program(
        (Slot("x", 1e12), Slot("y", 1e12), Slot("s", 1e12, 1.0)),
        ("x", "y"),
        ("x", "y", "s"),
        tuple(rounds),
    )


@MANY
@given(programs(), st.sampled_from(SIZES), st.integers(0, 2**32 - 1))
def test_random_programs_interpreter_numpy_torch_softmax(prog, n, seed):
    """Interpreter, average-hard numpy, torch and softmax numpy agree on random programs."""
    rng = np.random.default_rng(seed)
    inputs = integers(rng, 1000, (4, 2, n))
    try:
        want = interpret_batch(prog, n, inputs, check_promises=True).outputs
    except CraspError:
        assume(False)  # a value beyond the declared bounds
    try:
        hard = compile_program(prog, n)
    except CraspError as err:  # a margin float64 cannot resolve at these bounds: said so
        assert "below what float64 resolves" in str(err)
        return
    # within the bound the model records, in both runtimes
    bound = hard.guarantee.errors["float64"]
    outputs_agree(run_pcoc(hard, list(inputs)), want, bound)
    outputs_agree(run_pcoc(hard, list(inputs), runtime="torch"), want, bound)
    try:
        soft = compile_program(prog, n, mode="softmax")
    except CraspError as err:  # T beyond float64's exponent range, or a comparison whose
        # ramp (a quarter margin of slack, half the hard step's) float64 cannot decide
        assert "temperature" in str(err) or "below what float64 resolves" in str(err)
        return
    # a softmax model is compiled for float64: covered there, with a bound
    assert soft.guarantee.dtypes["float64"] == n
    outputs_agree(run_pcoc(soft, list(inputs)), want, soft.guarantee.errors["float64"])


# ---------------------------------------------------------------------------- examples

# hard-mode layers for n machines (R = rounds): one per round, except where noted
LAYERS = {
    "alternating_sum": lambda n: 1 + log2up(n) if n > 1 else 0,  # n = 1: no odd machine
    "bitonic_sort": lambda n: log2up(n) * (log2up(n) + 1) // 2,  # one layer per round
    "broadcast": log2up,
    "clamp_steps": lambda n: 2,  # one round: comparisons, then the nested selection
    "compare_vectors": lambda n: 1 + log2up(n),
    "count_positive": lambda n: 1 + log2up(n),
    "cummax": log2up,
    "cummin": log2up,
    "cumsum": log2up,
    "reverse": lambda n: 1 if n > 1 else 0,  # n = 1: machine 0 reads itself
    "rotate": lambda n: 1 if n > 1 else 0,
    # `at = i` is known at compile time (no layer); each scan round compares, then selects
    "running_argmax": lambda n: 2 * log2up(n),
    "sort": lambda n: n,
    "tree_min": log2up,
    "tree_sum": log2up,
}
ROUNDS = {
    "alternating_sum": lambda n: 1 + log2up(n),
    "bitonic_sort": lambda n: log2up(n) * (log2up(n) + 1) // 2,
    "clamp_steps": lambda n: 1,
    "compare_vectors": lambda n: 1 + log2up(n),
    "count_positive": lambda n: 1 + log2up(n),
    "reverse": lambda n: 1,
    "rotate": lambda n: 1,
    "running_argmax": lambda n: 1 + log2up(n),
    "sort": lambda n: n,
}


def test_every_example_has_expected_counts():
    assert sorted(LAYERS) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_example_layer_and_head_counts(name):
    for n in (1, 2, 5, 8, 16, 32):
        model = compiled(name, n)
        rounds = ROUNDS.get(name, log2up)(n)
        assert model.info["rounds"] == rounds
        assert len(model.layers) == LAYERS[name](n), (name, n)
        assert model.info["layers"] == len(model.layers)
        assert model.info["extra_depth"] == len(model.layers) - rounds
        assert model.info["theorem"]["layers"] == rounds
        assert model.info["theorem"]["nodes"] == n + 1
        heads = [len(layer.heads) for layer in model.layers]
        assert model.info["heads"] == heads
        assert sum(heads) == sum(model.info["heads_per_round"])
        assert max(heads, default=0) <= model.info["theorem"]["heads_per_layer"]


def test_example_heads_per_layer():
    assert compiled("cumsum", 16).info["heads"] == [1, 1, 1, 1]
    assert compiled("sort", 8).info["heads"] == [2] * 8  # the left and the right neighbour
    assert compiled("rotate", 8).info["heads"] == [2]  # two patterns, one head each
    # `left` and `left_at` share a source pattern: one head carries both values
    model = compiled("running_argmax", 8)
    assert model.info["heads"] == [1, 0, 1, 0, 1, 0]
    assert model.info["heads_per_round"] == [0, 1, 1, 1]
    # (in the first scan round `at` is still i, known at compile time: routed by the compiler)
    assert [len(h.w_v) for layer in model.layers for h in layer.heads] == [1, 2, 2]
    # compare_vectors routes one slot per round; its first round has no communication
    assert compiled("compare_vectors", 8).info["heads_per_round"] == [0, 1, 1, 1]


@st.composite
def example_inputs(draw):
    """An example, n, and integer inputs far out: up to ±1e3, ±1e6 or ±1e8, but at most
    the input bound / n (sums of n inputs stay within it)."""
    name = draw(st.sampled_from(NAMES))
    n = draw(st.sampled_from(SIZES))
    prog = example(name)
    bound = min(prog.slot(slot).bound for slot in prog.inputs)
    scale = min(draw(st.sampled_from([1e3, 1e6, 1e8])), bound // n)
    seed = draw(st.integers(0, 2**32 - 1))
    return name, n, integers(np.random.default_rng(seed), scale, (3, len(prog.inputs), n))


@MANY
@given(example_inputs())
def test_examples_interpreter_numpy_torch_softmax(case):
    name, n, inputs = case
    prog = example(name)
    want = interpret_batch(prog, n, inputs, check_promises=True).outputs
    hard = compiled(name, n)
    got = run_pcoc(hard, list(inputs))
    outputs_agree(got, want, 0.0)  # integers: the hard model is exact in float64 too
    outputs_agree(run_pcoc(hard, list(inputs), runtime="torch"), want, 1e-6)
    soft = compiled(name, n, "softmax")
    bound = soft.guarantee.errors["float64"]
    assert bound == soft.info["tolerance"] == soft.options["tolerance"]
    outputs_agree(run_pcoc(soft, list(inputs)), want, bound)


@pytest.mark.parametrize("name", NAMES)
def test_examples_read_zero_at_the_sink(name):
    """Every output is 0 at BOS, on the empty input and on real ones (hard mode)."""
    model = compiled(name, 5)
    k = len(model.inputs)
    empty = run_tokens(model, [[]], values=[np.zeros((0, k))])
    for raw in empty.outputs.values():
        assert raw[0, 0] == 0.0
    inputs = integers(np.random.default_rng(0), 1000, (k, 5))
    full = run_tokens(model, [["m"] * 5], values=[inputs.T])
    for raw in full.outputs.values():
        assert raw[0, 0] == 0.0


# ---------------------------------------------------------------------------- softmax


def test_temperature_and_tolerance_are_recorded():
    """Without a tolerance, T keeps the softmax error within one rounding of the output's
    bound (u·B); the bound recorded (rounding plus that) is the tolerance."""
    model = compiled("cumsum", 8, "softmax")
    temperature = model.options["temperature"]
    bound = model.guarantee.errors["float64"]
    assert model.info["temperature"] == temperature > 0
    assert model.options["tolerance"] == model.info["tolerance"] == bound
    assert model.options["mode"] == "softmax" and model.options["n"] == 8
    assert f"T = {temperature:.6g}" in model.guarantee.text
    assert f"within {bound:.3g} of the interpreter's (float64) output" in model.guarantee.text
    # B: the output's bound, 2^3·1e9 after the three rounds of n = 8 (derived from the
    # input bound, the partial sums doubling)
    assert 0 < model.info["leak_bound"]["x"] <= 2.0**-53 * (8e9 + 1)
    heads = [head for layer in model.layers for head in layer.heads]
    assert heads and all(h.weighting == "softmax" and h.mask == "none" for h in heads)
    assert all(math.isclose(h.scale, temperature, rel_tol=1e-12) for h in heads)
    hard = compiled("cumsum", 8)
    assert all(h.weighting == "hard" for layer in hard.layers for h in layer.heads)
    assert hard.options["temperature"] is None and "exact" in hard.guarantee.text


def test_temperature_is_the_smallest_that_keeps_the_tolerance():
    """T = max over outputs of ln(A / (τ − E)) (E the output's rounding, model and
    interpreter), over comparisons of ln(A / (slack − E)): each output is then within τ,
    and no smaller T keeps them all."""
    program = example("running_argmax")
    lowered = lower_pcoc(program, 8, "softmax", 700.0, clean=True)
    tolerance = 1e-2
    t, over = temperature_for(lowered, tolerance, 0)
    assert not over
    totals = [b.total(0, math.exp(-t)) for b in lowered.bounds.values()]
    checks = [c.holds(0, math.exp(-t)) for c in lowered.comparisons]
    assert max(totals) <= tolerance * (1 + 1e-9) and all(checks)
    smaller = math.exp(-t * (1 - 1e-6))
    assert max(b.total(0, smaller) for b in lowered.bounds.values()) > tolerance or not all(
        c.holds(0, smaller) for c in lowered.comparisons
    )
    _, over = temperature_for(lowered, 1e-12, 0)  # below the rounding: refused
    assert set(over) == {"x", "at"} or set(over) == {"x"}


def test_cumsum_temperature_has_its_closed_form():
    """x = x + left doubles the error and the bound each round (|x| ≤ 2^r·B after round
    r, derived from the input bound B, not assumed from it): the softmax error after
    round r is 2·A_{r−1} + n·2^r·B, so A = n·B·R·2^R; T is ln(A / (τ − E)), E the
    rounding of the output (model and interpreter)."""
    for n in (2, 5, 16, 32):
        model = compile_program(example("cumsum"), n, mode="softmax", tolerance=1e-2)
        lowered = lower_pcoc(example("cumsum"), n, "softmax", model.options["temperature"])
        rounds = log2up(n)
        leak = n * 1e9 * rounds * 2**rounds
        assert math.isclose(lowered.bounds["x"].leak, leak)
        rounding = lowered.bounds["x"].total(0)
        expected = math.log(leak / (1e-2 - rounding)) / (1 - 2.0**-53)
        assert math.isclose(model.options["temperature"], expected, rel_tol=1e-6)
        assert model.guarantee.errors["float64"] <= 1e-2 * (1 + 1e-9)


def test_softmax_bound_holds_and_is_nearly_attained():
    """Reversal of ±B values: the routing error of machine 0, whose source holds B while
    every other position holds −B (0 at the sink), is (2n − 1)B/(e^T + n), close to the
    bound n·e^{−T}·2B that fixed T."""
    bound = 1e3
    prog = Program(
        (Slot("x", bound),),
        ("x",),
        ("x",),
        (Round((Receive("m", "x", SBin("-", SBin("-", n_, SNum(1)), i), 0.0),), (Assign("x", Read("m")),)),),
    )  # fmt: skip
    for n in (2, 8, 32):
        model = compile_program(prog, n, mode="softmax", tolerance=1e-6)
        x = np.full(n, -bound)
        x[-1] = bound
        got = run_pcoc(model, [x[None]])["x"][0]
        error = abs(got[0] - bound)
        stated = model.info["leak_bound"]["x"]
        t = model.options["temperature"]
        assert math.isclose(stated, n * 2 * bound * math.exp(-t), rel_tol=1e-9)
        assert 0.4 * stated <= error <= model.guarantee.errors["float64"] <= 1e-6
        assert np.max(np.abs(got[1:] - x[::-1][1:])) <= model.guarantee.errors["float64"]


@pytest.mark.parametrize("scale", [1e3, 1e6])
def test_softmax_far_out_with_a_loose_tolerance_and_a_refused_tight_one(scale):
    """1e-2 compiles (with the comparisons' bits cleaned before the gates, so that their
    rounding is not multiplied by M) and holds; 1e-8 is below the float64 rounding of
    values up to 1e9 and is refused, saying what would compile."""
    rng = np.random.default_rng(1)
    model = compile_program(example("running_argmax"), 16, mode="softmax", tolerance=1e-2)
    inputs = integers(rng, scale, (5, 1, 16))
    want = interpret_batch(example("running_argmax"), 16, inputs).outputs
    outputs_agree(run_pcoc(model, list(inputs)), want, 1e-2)
    with pytest.raises(CraspError, match="tolerance 1e-08 cannot be met in float64") as err:
        compile_program(example("running_argmax"), 16, mode="softmax", tolerance=1e-8)
    assert "or more compiles" in str(err.value) and "mode hard" in str(err.value)


def test_float32_budget():
    """A float32 tolerance above the float32 rounding compiles and holds; one below it is
    refused, naming float64 where that would compile it."""
    small = scan(Add, 0.0, bound=100.0)
    model = compile_program(small, 8, mode="softmax", tolerance=1e-2, dtype="float32")
    assert model.options["dtype"] == "float32"
    assert model.guarantee.errors["float32"] <= 1e-2
    inputs = integers(np.random.default_rng(2), 10, (5, 1, 8))
    want = interpret_batch(small, 8, inputs).outputs
    got = run_pcoc(model, list(inputs), dtype=np.float32)
    outputs_agree(got, want, 1e-2)
    with pytest.raises(CraspError, match="cannot be met in float32") as err:
        compile_program(example("cumsum"), 8, mode="softmax", tolerance=1e-2, dtype="float32")
    assert "--dtype float64 compiles this tolerance" in str(err.value)


# ---------------------------------------------------------------------------- the model file


def test_save_and_load(tmp_path):
    for mode in ("hard", "softmax"):
        model = compiled("running_argmax", 8, mode)
        path = tmp_path / f"{mode}.npz"
        save_model(model, path)
        loaded = read_model(path)
        assert is_pcoc(loaded) and machines(loaded) == 8
        assert loaded.inputs == ["x"] and [o.name for o in loaded.outputs] == ["x", "at"]
        assert loaded.options == model.options and loaded.info == model.info
        assert loaded.guarantee.text == model.guarantee.text and loaded.guarantee.max_len == 8
        inputs = integers(np.random.default_rng(3), 1e6, (4, 1, 8))
        a, b = run_pcoc(model, list(inputs)), run_pcoc(loaded, list(inputs))
        outputs_agree(a, b, 0.0)


# ---------------------------------------------------------------------------- errors


def test_a_gate_without_a_bound_names_the_slot():
    prog = Program(
        (Slot("x", None), Slot("w", None)),
        ("x", "w"),
        ("x",),
        (Round((), (Assign("x", IfExpr(Compare(">", Read("x"), Num(0), 0.5), Read("x"), Read("w"))),)),),
    )  # fmt: skip
    with pytest.raises(CraspError, match=r"needs a bound.*'w', 'x'") as err:
        compile_program(prog, 4)
    assert "bound 1e6" in str(err.value)
    # a per-machine selection needs one too
    prog = Program(
        (Slot("x", None),),
        ("x",),
        ("x",),
        (Round((), (If(SBin("<", i, SNum(2)), (Assign("x", Call("abs", (Read("x"),))),), ()),)),),
    )  # fmt: skip
    with pytest.raises(CraspError, match=r"per-machine selection.*'x'"):
        compile_program(prog, 4)
    # linear programs need no bound in hard mode; softmax routing does
    unbounded = scan(Add, 0.0, bound=None)
    compile_program(unbounded, 4)
    with pytest.raises(CraspError, match=r"routing with softmax attention.*'x'"):
        compile_program(unbounded, 4, mode="softmax")


def test_softmax_needs_a_positive_margin():
    prog = Program(
        (Slot("x", 10.0),),
        ("x",),
        ("x",),
        (Round((), (Assign("x", Compare(">", Read("x"), Num(0), 0.0)),)),),
    )
    model = compile_program(prog, 3)  # Heaviside units: exact for every x
    got = run_pcoc(model, [[[-1e-12, 0.0, 1e-12]]])["x"][0]
    assert list(got) == [0.0, 0.0, 1.0]
    with pytest.raises(CraspError, match="positive margin"):
        compile_program(prog, 3, mode="softmax")


def test_bad_arguments():
    prog = example("cumsum")
    for kwargs, message in (
        ({"n": 0}, "n must be"),
        ({"n": 4, "mode": "relu"}, "mode must be"),
        ({"n": 4, "dtype": "float16"}, "dtype must be"),
        ({"n": 4, "tolerance": 0.0}, "tolerance"),
        ({"n": 4, "tolerance": math.inf}, "tolerance"),
    ):
        with pytest.raises(CraspError, match=message):
            compile_program(prog, **kwargs)


def test_inputs_of_another_length_are_refused():
    model = compiled("compare_vectors", 4)
    with pytest.raises(CraspError, match=r"exactly n = 4 machines: input 'a' has 3 numbers"):
        run_pcoc(model, [[[1, 2, 3], [1, 2, 3]]])
    with pytest.raises(CraspError, match=r"expected 2 input vector\(s\) \(a, b\)"):
        run_pcoc(model, [[[1, 2, 3, 4]]])
    with pytest.raises(CraspError, match="not finite"):
        run_pcoc(model, [[[1, 2, 3, math.nan], [1, 2, 3, 4]]])
    with pytest.raises(CraspError, match=r"the inputs name \['a'\]"):
        run_pcoc(model, [{"a": [1, 2, 3, 4]}])
    got = run_pcoc(model, [{"a": [1, 5, 3, 4], "b": [2, 2, 2, 2]}])
    assert list(got["wins"][0]) == [0, 1, 2, 3]
    assert input_matrix(model, [[1, 2, 3, 4], [5, 6, 7, 8]]).shape == (4, 2)
    # the executor refuses longer inputs: the guarantee covers n tokens
    with pytest.raises(CraspError, match="exceeds the model's guarantee"):
        run_tokens(model, [["m"] * 5], values=[np.zeros((5, 2))])
    with pytest.raises(CraspError, match="not compiled from a PCOC program"):
        machines(build({"v": [1.0]}, lambda b, cols: {"o": cols["v"]})[0])


# ---------------------------------------------------------------------------- route


def _route_case(draw_n, data):
    n = draw_n
    sources = data.draw(st.lists(st.integers(0, n), min_size=n + 1, max_size=n + 1))
    values = data.draw(
        st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=n + 1, max_size=n + 1)
    )
    return sources, values


def _routed(sources, values, **kwargs):
    n = len(sources) - 1

    def construct(b, cols):
        for position in range(n + 1):
            b.feature(onehot(position))
        b.add(A.route(sources, {"out": cols["v"], "twice": cols["v"] * 2}, n=n, **kwargs))
        return {"out": var("out"), "twice": var("twice")}

    return evaluate({"v": values[1:]}, construct, bos_values={"v": values[0]})


@FEW
@given(st.integers(1, 20), st.data())
def test_route_reads_every_source_under_hard_attention(n, data):
    sources, values = _route_case(n, data)
    got = _routed(sources, values)
    want = np.array([values[s] for s in sources])
    np.testing.assert_array_equal(got["out"], want)
    np.testing.assert_array_equal(got["twice"], 2 * want)


@FEW
@given(st.integers(1, 20), st.floats(1.0, 40.0), st.data())
def test_route_softmax_is_within_its_bound(n, scale, data):
    sources, values = _route_case(n, data)
    head = A.route(
        sources, {"out": var("v")}, n=n, weighting="softmax", scale=scale, value_range=2e3
    )
    assert head.weighting == "softmax" and math.isclose(head.scale, scale, rel_tol=1e-12)
    assert math.isclose(head.exact.error, n * math.exp(-scale) * 2e3, rel_tol=1e-9)
    assert head.exact.max_len == n
    got = _routed(sources, values, weighting="softmax", scale=scale, value_range=2e3)
    want = np.array([values[s] for s in sources])
    spread = max(values) - min(values)
    assert np.max(np.abs(got["out"] - want)) <= n * math.exp(-scale) * spread + 1e-9
    # nearly attained: a row whose source holds the maximum, every other key the minimum
    if n >= 2:
        values = [0.0] * (n + 1)
        values[sources[0]] = 1.0
        worst = _routed(sources, values, weighting="softmax", scale=scale)["out"][0]
        exact = (values.count(0.0)) / (math.exp(scale) + n)
        assert math.isclose(1.0 - worst, exact, rel_tol=1e-6, abs_tol=1e-12)


def test_route_size_and_errors():
    head = A.route([0, 2, 2, 0], {"a": var("x"), "b": var("y")}, n=3, label="r")
    assert head.mask == "none" and head.weighting == "hard" and head.scale == 1.0
    assert len(head.query) == len(head.key) == 2  # the distinct sources 0 and 2
    assert head.key == [{"onehot:0": 1.0}, {"onehot:2": 1.0}]
    assert head.query == [{"onehot:0": 1.0, "onehot:3": 1.0}, {"onehot:1": 1.0, "onehot:2": 1.0}]
    assert head.exact.max_len == 3 and "exact for inputs of length 3" in head.exact.text
    model, _ = build(
        {"x": [1.0, 2.0, 3.0]},
        lambda b, cols: (
            [b.feature(onehot(p)) for p in range(4)],
            b.add(A.route([0, 3, 1, 2], {"o": cols["x"]}, n=3)),
            {"o": var("o")},
        )[-1],
    )
    assert [len(layer.heads) for layer in model.layers] == [1]
    for args, kwargs, message in (
        ([[0, 1], {"a": var("x")}], {"n": 3}, "one source per position"),
        ([[0, 1, 4, 0], {"a": var("x")}], {"n": 3}, "position in 0..3"),
        ([[0, True, 1, 0], {"a": var("x")}], {"n": 3}, "position in 0..3"),
        ([[0, 1, 2, 3], {}], {"n": 3}, "at least one value"),
        ([[0, 1, 2, 3], {"a": var("x")}], {"n": 3, "weighting": "hard-left"}, "weighting"),
        ([[0, 1, 2, 3], {"a": var("x")}], {"n": 3, "weighting": "softmax"}, "needs scale"),
        ([[0, 1, 2, 3], {"a": var("x")}], {"n": 3, "scale": 2.0}, "scale is for"),
        ([[0, 1, 2, 3], {"a": var("x")}], {"n": 3, "weighting": "softmax", "scale": -1.0}, "scale"),
        (
            [[0, 1, 2, 3], {"a": var("x")}],
            {"n": 3, "weighting": "softmax", "scale": 800.0},
            "too large",
        ),
        ([[0, 1], {"a": var("x")}], {"n": 0}, "n must be"),
    ):
        with pytest.raises(ValueError, match=message):
            A.route(*args, **kwargs)


# ---------------------------------------------------------------- float margins and bounds

TINY_MARGIN = """
input x bound 1e9
output s
slot s
round {
  if x <= 0.5 margin 1e-9 { s = 7 } else { s = 3 }
}
"""


def test_a_margin_float64_cannot_resolve_is_refused_at_the_comparison():
    """``x <= 0.5 margin 1e-9`` on values up to 10^9: the interpreter said ``7 3`` and the
    model ``3 3`` on ``-5e8 5e8``; the compiler now refuses, naming the comparison."""
    program = parse_program(TINY_MARGIN, "tiny.pcoc")
    with pytest.raises(CraspError) as info:
        compile_program(program, 2)
    text = info.value.format()
    assert text.startswith("tiny.pcoc:6:6: error: the margin 1e-09 of this comparison is below")
    assert "declare `margin" in text
    wide = parse_program(TINY_MARGIN.replace("1e-9", "1e-3"))
    model = compile_program(wide, 2)
    inputs = [[-5e8, 5e8], [0.5 - 1e-3, 0.5 + 1e-3], [0.5, 0.5 + 2e-3]]
    got = run_pcoc(model, [[row] for row in inputs])["s"]
    want = interpret_batch(wide, 2, np.array(inputs)).outputs["s"]
    np.testing.assert_array_equal(got, want)
    assert model.guarantee.dtypes == {"float64": 2, "float32": -1}
    with pytest.raises(CraspError, match="proven exact for in float32"):
        run_pcoc(model, [[inputs[0]]], dtype=np.float32)


def test_hard_comparisons_are_exact_away_from_the_margin_at_large_values():
    """Comparisons are Heaviside units at the middle of the margin: the running argmax of
    non-integer values up to 10^9, with gaps of at least the margin, is exact."""
    program = load_program(EXAMPLES / "running_argmax.pcoc")
    model = compile_program(program, 8)
    rng = np.random.default_rng(3)
    for _ in range(20):
        xs = rng.permutation(8) * 0.75 * 1e8 + rng.uniform(-0.1, 0.1)
        got = run_pcoc(model, [[xs]])
        want = interpret_batch(program, 8, xs[None]).outputs
        np.testing.assert_array_equal(got["at"], want["at"])
        np.testing.assert_allclose(got["x"], want["x"], rtol=0, atol=1e-6)


def test_inputs_outside_their_bounds_are_refused_everywhere():
    """``running_argmax`` on ``3e9 1 2e9 -5e9`` (bound 1e9) disagreed silently."""
    program = load_program(EXAMPLES / "running_argmax.pcoc")
    inputs = [3e9, 1, 2e9, -5e9]
    with pytest.raises(CraspError, match=r"input 'x' holds 3000000000.0 at machine 0"):
        interpret_batch(program, 4, np.array([inputs]))
    with pytest.warns(UserWarning, match="outside its declared bound"):
        interpret_batch(program, 4, np.array([inputs]), on_beyond="warn")
    model = compile_program(program, 4)
    assert model.guarantee.input_bounds == {"x": 1e9}
    for runtime in ("numpy", "torch"):
        with pytest.raises(CraspError, match="outside its declared bound"):
            run_pcoc(model, [[inputs]], runtime=runtime)
    with pytest.warns(UserWarning, match="outside its declared bound"):
        run_pcoc(model, [[inputs]], on_beyond="warn")
    within = [1e9, 1, -1e9, 5]
    assert run_pcoc(model, [[within]])["at"].tolist() == [[0, 0, 0, 0]]
