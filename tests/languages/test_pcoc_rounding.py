"""The rounding analysis of compiled PCOC models (crasp_compiler.languages.pcoc.rounding,
the rules the lowering applies): every rule attacked at its own worst case, the recorded
per-float-type bound never below the error measured against the interpreter, and not far
above it; softmax tolerances that hold with rounding included or are refused; the early
refusal of a destination the routing of a send cannot compare; the bound in the model file.
"""

from __future__ import annotations

import math
import time
from fractions import Fraction
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp_compiler.cookbook.blocks import Form
from crasp_compiler.errors import CraspError
from crasp_compiler.languages import get_language
from crasp_compiler.languages.pcoc import interpret_batch, load_program, parse_program
from crasp_compiler.languages.pcoc.compile import compile_program, run_pcoc
from crasp_compiler.languages.pcoc.interpret import interpret_program
from crasp_compiler.languages.pcoc.lower import LONG_FORM, lower_pcoc
from crasp_compiler.languages.pcoc.nodes import (
    Add,
    Assign,
    Compare,
    IfExpr,
    Num,
    Program,
    Read,
    Round,
    Slot,
)
from crasp_compiler.languages.pcoc.rounding import UNIT, Floats, Var, grid
from crasp_compiler.model import read_model, save_model
from crasp_compiler.model.io import guarantee_header

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "pcoc"
PERMUTE = ROOT / "examples" / "pcoc_sends" / "permute.pcoc"
NAMES = sorted(p.stem for p in EXAMPLES.glob("*.pcoc"))
DTYPES = {"float64": np.float64, "float32": np.float32}
FEW = settings(max_examples=40)


@cache
def program(name: str) -> Program:
    return load_program(PERMUTE if name == "permute" else EXAMPLES / f"{name}.pcoc")


@cache
def compiled(name: str, n: int):
    return compile_program(program(name), n)


def within_bounds(prog: Program, n: int, rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` inputs uniform within the declared bounds (a destination ``d``: a
    permutation), scaled down by powers of two until the interpreter keeps every promise
    on most of them; only those it keeps."""
    bounds = {slot.name: slot.bound for slot in prog.slots}
    scale = 1.0
    while True:
        batch = np.zeros((4 * count, len(prog.inputs), n))
        for k, name in enumerate(prog.inputs):
            if name == "d":
                batch[:, k] = [rng.permutation(n) for _ in range(len(batch))]
            else:
                bound = bounds[name] * scale
                batch[:, k] = rng.uniform(-bound, bound, (len(batch), n))
        kept = [x for x in batch if keeps_promises(prog, n, x)]
        if len(kept) >= count:
            return np.array(kept[:count])
        scale /= 2


def keeps_promises(prog: Program, n: int, x: np.ndarray) -> bool:
    try:
        interpret_batch(prog, n, x[None], check_promises=True)
    except CraspError:
        return False
    return True


def measured(model, prog: Program, n: int, inputs: np.ndarray, dtype: str) -> float:
    """The largest |model output − interpreter output| over ``inputs`` in ``dtype``."""
    want = interpret_batch(prog, n, inputs).outputs
    got = run_pcoc(model, list(inputs), dtype=DTYPES[dtype])
    return max(float(np.max(np.abs(got[k] - want[k]))) for k in want)


def assert_within(model, prog: Program, n: int, inputs: np.ndarray, ratio: float = 1e3):
    """In every float type the model is covered in: the measured error is at most the
    recorded bound, and the bound at most ``ratio`` times the error (when it is not 0)."""
    for dtype, limit in model.guarantee.dtypes.items():
        if limit < 0:
            continue
        bound = model.guarantee.errors[dtype]
        error = measured(model, prog, n, inputs, dtype)
        assert error <= bound, (dtype, error, bound)
        if error > 0:
            assert bound <= ratio * error, (dtype, error, bound)


# ---------------------------------------------------------------- the matrix-row rule


@FEW
@given(
    st.lists(
        st.tuples(
            st.sampled_from([1.0, -1.0, 0.5, 3.0, 1e9, -2.5, 0.1, 1 / 3]),
            st.floats(-1e9, 1e9, allow_nan=False),
        ),
        min_size=1,
        max_size=8,
    ),
    st.floats(-1e3, 1e3, allow_nan=False),
    st.randoms(use_true_random=False),
)
def test_a_matrix_row_rounds_within_its_reading(terms, bias, rnd):
    """A form of exact variables (float64 values) read as one dot product, summed in any
    order, in float64 and in float32 (coefficients and values cast): within the rounding
    :meth:`Floats.read` states of the exact value."""
    floats = Floats(1)
    form = Form()
    values = {}
    for k, (coef, value) in enumerate(terms):
        name = f"v{k}"
        floats.define(name, Var((abs(value), abs(value)), (0.0, 0.0), (True, False)))
        form[name] = coef
        values[name] = value
    reading = floats.read(form, bias)
    exact = sum((Fraction(c) * Fraction(values[v]) for v, c in form.items()), Fraction(bias))
    for d, dtype in enumerate((np.float64, np.float32)):
        # the float32 run rounds the variables too: bounded apart (their err), not here
        xs = {v: float(dtype(values[v])) for v in form}
        reference = sum((Fraction(c) * Fraction(xs[v]) for v, c in form.items()), Fraction(bias))
        for _ in range(4):
            order = list(form)
            rnd.shuffle(order)
            total = dtype(0)
            for v in order:
                total = dtype(total + dtype(form[v]) * dtype(xs[v]))
            total = dtype(total + dtype(bias))
            assert abs(Fraction(float(total)) - reference) <= Fraction(reading.rounding[d])
    assert reading.rounding[0] == 0 or abs(float(exact)) >= 0  # the exact value is finite


def test_integer_grids_are_exact():
    """Integer multiples of 2^g with sums below 2^(p+g) add exactly: no rounding."""
    floats = Floats(4)
    floats.define("k", Var((1e6, 1e6), (0.0, 0.0), (True, True), 0))
    floats.define("b", Var((1.0, 1.0), (0.0, 0.0), (True, True), 0))
    assert floats.read(Form({"k": 1.0, "b": -2048.0}), -0.25).rounding == (0.0, 0.0)
    assert floats.read(Form({"k": 1.0, "b": 1e9}), 0.5).rounding[1] > 0  # 2^24 exceeded
    assert grid(0.75) == -2 and grid(6.0) == 1 and grid(0.0) is None


# ---------------------------------------------------------------- the examples


@pytest.mark.parametrize("name", NAMES)
def test_examples_within_their_bound_at_16(name):
    """Every example at n = 16 on inputs within their bounds: measured ≤ recorded, and
    recorded within 1000× of measured, in float64 and float32 (where covered)."""
    prog = program(name)
    inputs = within_bounds(prog, 16, np.random.default_rng(16), 40)
    assert_within(compiled(name, 16), prog, 16, inputs)


@pytest.mark.slow
@pytest.mark.parametrize("name", [*NAMES, "permute"])
@pytest.mark.parametrize("n", [16, 64])
def test_examples_within_their_bound_slow(name, n):
    prog = program(name)
    inputs = within_bounds(prog, n, np.random.default_rng(n), 200)
    assert_within(compiled(name, n), prog, n, inputs)


def test_permute_within_its_bound():
    prog = program("permute")
    inputs = within_bounds(prog, 8, np.random.default_rng(8), 30)
    assert_within(compiled("permute", 8), prog, 8, inputs)


def test_exact_copies_and_counts_have_bound_zero():
    """Routing copies a value exactly (float64), a count of exact bits is an exact
    integer: the recorded bound is 0, and so is the error."""
    rng = np.random.default_rng(0)
    for name, output in (("reverse", "x"), ("rotate", "y"), ("count_positive", "c")):
        model = compiled(name, 16)
        assert model.info["error_bounds"]["float64"][output] == 0.0
        inputs = within_bounds(program(name), 16, rng, 10)
        assert measured(model, program(name), 16, inputs, "float64") == 0.0


# ---------------------------------------------------------------- attacks on the rules


def test_float32_inputs_round_once():
    """Values float32 cannot hold (full float64 mantissas near the bound): a copy is off
    by one float32 rounding, u·|x|, which the bound covers."""
    model = compiled("reverse", 8)
    x = 1e9 - np.arange(8) / 3  # not float32 numbers
    error = measured(model, program("reverse"), 8, x[None, None], "float32")
    assert 0 < error <= model.guarantee.errors["float32"] <= 2 * UNIT[1] * 1e9


def test_a_clamp_rounds_where_its_pre_activation_crosses_a_binade():
    """clamp_steps measures 0 on random inputs (its differences are far from ±1, where
    d ± 1 is exact); d = 2^19 − 2^-34 makes d + 1 round (its last bit falls off), and the
    step is then off by 2^-34, which the bound covers within a factor 100."""
    prog = program("clamp_steps")
    model = compiled("clamp_steps", 4)
    x = np.array([2.0**19 - 2.0**-34, 0.0, 1e6, -1e6])
    assert keeps_promises(prog, 4, x[None])
    error = measured(model, prog, 4, x[None, None], "float64")
    assert 0 < error <= model.guarantee.errors["float64"] <= 100 * error


def test_gates_at_their_bound_are_exact_when_unselected():
    """running_argmax with |left − x| = 2·10^9, the big-M bound of its selection: the
    unselected gate is exactly 0 (its M has a slack), so ``at`` is exact."""
    prog = program("running_argmax")
    model = compiled("running_argmax", 8)
    x = np.array([1e9, -1e9] * 4)
    for row in (x, -x, np.sort(x), np.sort(x)[::-1]):
        got = run_pcoc(model, [row[None]])
        want = interpret_program(prog, 8, row).outputs
        assert np.array_equal(got["at"][0], want["at"])
        assert np.max(np.abs(got["x"][0] - want["x"])) <= model.guarantee.errors["float64"]


def test_comparisons_just_outside_their_margin_decide_exactly():
    """Near ties at large values: gaps of exactly the margin 0.5 (and exact ties) around
    10^9 − c, where left − right rounds most. Every decision is the interpreter's."""
    prog = program("running_argmax")
    model = compiled("running_argmax", 16)
    rng = np.random.default_rng(5)
    for _ in range(20):
        base = 1e9 - rng.integers(0, 8) * 0.5
        x = base - 0.5 * rng.integers(0, 3, 16)  # ties and gaps of one margin
        assert keeps_promises(prog, 16, x[None])
        got = run_pcoc(model, [x[None]])
        want = interpret_program(prog, 16, x).outputs
        assert np.array_equal(got["at"][0], want["at"])
        assert np.max(np.abs(got["x"][0] - want["x"])) <= model.guarantee.errors["float64"]


MARGIN = """
input x bound {bound:g}
output s
slot s
round {{
  if x <= 0.5 margin {margin:g} {{ s = 7 }} else {{ s = 3 }}
}}
"""


def test_the_margin_limit_is_where_the_analysis_puts_it():
    """The margin the refusal asks for compiles; a margin a little below the rounding it
    reports is refused; inputs just outside the accepted margin decide exactly."""
    with pytest.raises(CraspError, match=r"declare `margin (\S+)`") as err:
        compile_program(parse_program(MARGIN.format(bound=1e9, margin=1e-9)), 2)
    need = float(str(err.value).split("declare `margin ")[1].split("`")[0])
    model = compile_program(parse_program(MARGIN.format(bound=1e9, margin=need)), 2)
    prog = parse_program(MARGIN.format(bound=1e9, margin=need))
    for x in (0.5 - need, 0.5, 0.5 + need, 0.5 + 2 * need, -1e9, 1e9):
        row = np.array([x, 0.5 + need])
        assert keeps_promises(prog, 2, row[None])
        got = run_pcoc(model, [row[None]])["s"][0]
        assert np.array_equal(got, interpret_program(prog, 2, row).outputs["s"])
    with pytest.raises(CraspError, match="below what float64 resolves"):
        compile_program(parse_program(MARGIN.format(bound=1e9, margin=need / 4)), 2)


def test_sort_forms_stay_short_and_the_bound_grows_slowly():
    """Odd-even transposition sort: the value of a round, ``x − ReLU(…) + ReLU(…)``, is
    made one variable in the next round's MLP, so its form stays short and the bound grows
    about like the rounds, not like their cube; inputs at ±B with full mantissas."""
    lowered = lower_pcoc(program("sort"), 16)
    data = [v for v in lowered.slots["x"].form if not v.startswith(("onehot:", "BOS"))]
    assert len(data) <= LONG_FORM + 2
    prog = program("sort")
    for n in (8, 16):
        model = compiled("sort", n)
        x = (1e9 - np.arange(n) / 7)[::-1] * np.where(np.arange(n) % 2, 1, -1)
        for dtype in DTYPES:
            error = measured(model, prog, n, x[None, None], dtype)
            assert error <= model.guarantee.errors[dtype]
    small, large = compiled("sort", 8), compiled("sort", 16)
    growth = large.guarantee.errors["float64"] / small.guarantee.errors["float64"]
    assert growth < 8  # 2× the rounds: not (2×)³


def test_the_sink_reads_zero():
    """Machines with nothing to receive read the sink (BOS): its values are exactly 0 as
    the model computes them, so a default is exact (reverse: bound 0 in float64)."""
    model = compiled("broadcast", 8)
    inputs = np.full((1, 1, 8), 1e9)
    got = run_pcoc(model, list(inputs))["x"][0]
    assert np.all(np.abs(got - 1e9) <= model.guarantee.errors["float64"])


def test_exclusive_sums_are_a_promise_the_interpreter_checks():
    """A compaction slot's sum of selections (``Add.exclusive``): at most one is taken;
    the interpreter with check_promises refuses two."""
    hit = lambda k: IfExpr(Compare("==", Read("x"), Num(float(k)), 0.5), Num(10.0), Num(0.0))  # noqa: E731
    total = Add(Add(hit(0), hit(1)), hit(2), exclusive=True)
    prog = Program(
        (Slot("x", 10.0), Slot("y", 100.0)), ("x",), ("y",), (Round((), (Assign("y", total),)),)
    )
    assert interpret_program(prog, 2, [0.0, 1.0], check_promises=True).outputs["y"].tolist() == [
        10,
        10,
    ]
    twice = Add(Add(hit(0), hit(0)), hit(2), exclusive=True)
    prog2 = Program(
        (Slot("x", 10.0), Slot("y", 100.0)), ("x",), ("y",), (Round((), (Assign("y", twice),)),)
    )
    with pytest.raises(CraspError, match="more than one selection of an exclusive sum"):
        interpret_program(prog2, 2, [0.0, 1.0], check_promises=True)
    model = compile_program(prog, 2)
    got = run_pcoc(model, [[[0.0, 2.0]]])["y"][0]
    assert got.tolist() == [10.0, 10.0]


# ---------------------------------------------------------------- softmax tolerances


def softmax_case(name: str, n: int, tolerance: float) -> None:
    """The softmax model at ``tolerance``: within it of the interpreter on inputs within
    bounds, with rounding; or refused, saying which tolerance compiles (and that one
    does, and holds)."""
    prog = program(name)
    try:
        model = compile_program(prog, n, mode="softmax", tolerance=tolerance)
    except CraspError as err:
        text = str(err)
        assert "cannot be met in float64" in text and "or more compiles" in text
        tolerance = float(text.split("a tolerance of ")[1].split(" or more")[0])
        model = compile_program(prog, n, mode="softmax", tolerance=tolerance)
    assert model.guarantee.errors["float64"] <= tolerance
    inputs = within_bounds(prog, n, np.random.default_rng(n), 30)
    assert measured(model, prog, n, inputs, "float64") <= tolerance


@pytest.mark.parametrize("name", ["cumsum", "running_argmax", "clamp_steps"])
def test_softmax_tolerance_holds_or_is_refused(name):
    softmax_case(name, 8, 1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("name", [*NAMES, "permute"])
@pytest.mark.parametrize("n", [4, 8, 16])
@pytest.mark.parametrize("tolerance", [1e-3, 1e-6])
def test_softmax_tolerances_slow(name, n, tolerance):
    softmax_case(name, n, tolerance)


def test_the_issue_cases_are_refused_with_a_tolerance_that_compiles():
    """sort at n = 16 and tolerance 1e-6 missed it by 1.9× (float64 rounding of values up
    to 10^9): now refused, naming a tolerance that compiles."""
    with pytest.raises(CraspError, match=r"tolerance 1e-06 cannot be met in float64") as err:
        compile_program(program("sort"), 16, mode="softmax", tolerance=1e-6)
    assert "a tolerance of" in str(err.value)


# ---------------------------------------------------------------- the early refusal


def test_a_destination_the_routing_cannot_compare_is_refused_early():
    """permute with |d| ≤ 10^16: the routing's comparisons of d with machine numbers are
    beyond float64 at margin 0.5. Refused from a probe of the send's first routing step,
    before the routing is lowered, naming the send and a bound of d that compiles."""
    text = PERMUTE.read_text().replace("input d bound 1e6", "input d bound 1e16")
    prog = parse_program(text, "big.pcoc")
    start = time.process_time()
    with pytest.raises(CraspError) as err:
        compile_program(prog, 64)
    assert (
        time.process_time() - start < 30
    )  # CPU seconds, generously: the full lowering takes far longer
    message = str(err.value)
    assert "`got = send x to d`" in message and "offset routing" in message
    best = message.split("declare `input d bound ")[1].split("`")[0]
    compile_program(parse_program(text.replace("1e16", best)), 4)
    with pytest.raises(CraspError, match="send x to d"):
        compile_program(parse_program(text.replace("1e16", f"{float(best) * 1.3:g}")), 4)


def test_permute_covers_float32_with_a_bound():
    """Every comparison of the routing is of exact integers, and d ≤ 10^6 in float32 is
    within a quarter of an integer: float32 is covered too."""
    model = compiled("permute", 8)
    assert model.guarantee.dtypes == {"float64": 8, "float32": 8}
    assert 0 < model.guarantee.errors["float64"] < 1e-4


# ---------------------------------------------------------------- the model file and check


def test_the_bound_is_saved_and_checked_on_load(tmp_path):
    model = compiled("cumsum", 4)
    path = tmp_path / "m.npz"
    save_model(model, path)
    assert read_model(path).guarantee.errors == model.guarantee.errors
    header = guarantee_header(model.guarantee)
    assert header["errors"] == model.guarantee.errors


@pytest.mark.parametrize(
    ("errors", "message"),
    [
        ({"float64": -1.0}, "'errors' must map"),
        ({"float64": "small"}, "'errors' must map"),
        ({"float16": 1.0}, "'errors' must map"),
        ({"float64": math.inf}, "'errors' must map"),
    ],
)
def test_hostile_error_bounds_are_refused(tmp_path, errors, message):
    import json
    import zipfile

    model = compiled("cumsum", 4)
    path = tmp_path / "m.npz"
    save_model(model, path)
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    header = json.loads(np.load(path)["header"].item())
    header["guarantee"]["errors"] = errors
    members["header.npy"] = _npy(json.dumps(header))
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    with pytest.raises(CraspError, match=message):
        read_model(path)


def test_an_error_bound_for_an_uncovered_float_type_is_refused(tmp_path):
    import json
    import zipfile

    model = compiled("count_positive", 4)
    assert model.guarantee.dtypes["float32"] == -1
    path = tmp_path / "m.npz"
    save_model(model, path)
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    header = json.loads(np.load(path)["header"].item())
    header["guarantee"]["errors"] = {"float32": 1.0}
    members["header.npy"] = _npy(json.dumps(header))
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    with pytest.raises(CraspError, match="'errors' bounds a float type"):
        read_model(path)


def _npy(text: str) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.array(text))
    return buffer.getvalue()


def test_check_uses_the_recorded_bound():
    model = compiled("sort", 8)
    language = get_language("pcoc")
    for dtype in ("float64", "float32"):
        assert language.tolerance(model, dtype) == model.guarantee.errors[dtype]
