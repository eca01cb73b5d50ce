"""What a compiled PCOC model's guarantee claims holds for every input the runtimes accept.

- **Selections gate what they gate.** A big-M gate takes M from the intervals of the
  values it selects between as they are computed on every machine (taken or not), and
  the compiler assumes no bound declared on a slot that is not an input: a value that
  breaks such a declaration (a promise the interpreter checks only with
  ``check_promises``) still comes out exact. Each program below once leaked a candidate
  through a gate whose M came from a declared slot bound: an assignment inside a data
  branch, a received default, a per-machine selection, a data selection nested in a
  per-machine branch (the folded selector shift), ``min`` in a branch, and a sum of
  selections.
- **Sends.** The routing of a ``send`` is exact when the destinations are integers,
  distinct among the machines whose destination is in 0..n−1 (the interpreter refuses
  anything else). The guarantee says so, and the runtimes refuse an input destination
  that breaks it, as they refuse an input beyond its bound (``on_beyond="warn"`` warns,
  ``"ignore"`` runs it); the check survives a model file round trip. A destination the
  program computes is named in the guarantee's text as the caller's condition.
"""

from __future__ import annotations

import json
import warnings
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from crasp_compiler.errors import CraspError
from crasp_compiler.languages.pcoc import interpret_batch, load_program, parse_program
from crasp_compiler.languages.pcoc.compile import compile_program, run_pcoc
from crasp_compiler.model import read_model, save_model
from crasp_compiler.model.model import Guarantee
from tests.model.test_model_file import arrays_of, write

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TOLERANCE = 1e-6

# name -> (program, n, inputs of the issue (one run), bound of each input slot)
GATES = {
    "assigned-in-branch": (
        """
        input x bound 10
        input y bound 1000
        output x
        round { if y > 5000 margin 1 { x = y } }
        """,
        2,
        [[1, 2], [500, -700]],
    ),
    "received-default": (
        """
        input x bound 1
        output x
        round {
          t = recv x from i - 1 default 10
          if t > 100 margin 1 { x = t }
        }
        """,
        2,
        [[0.5, -0.5]],
    ),
    "per-machine-merge": (
        """
        input x bound 10
        input y bound 1000
        output x
        round { if i == 0 { x = y } }
        round { if x > 5000 margin 1 { x = 0 } }
        """,
        4,
        [[1, 2, 3, 4], [-900, 800, 700, -600]],
    ),
    "per-machine-choice": (
        """
        input y bound 1000
        slot z bound 10
        slot w bound 10
        output w
        round { z = y }
        round { if i == 0 { w = z } }
        """,
        4,
        [[3, 900, -800, 700]],
    ),
    "folded-selector": (
        """
        input x bound 10
        input y bound 1000
        slot w bound 10
        output w
        round { x = y }
        round { if i == 0 { if x > 5 margin 1 { w = x } } }
        """,
        4,
        [[0, 0, 0, 0], [7, 1000, 900, -1000]],
    ),
    "min-in-branch": (
        """
        input x bound 10
        input y bound 1000
        slot w bound 10
        output w
        round { x = y }
        round { if i == 0 { w = min(w, x) } }
        """,
        4,
        [[0, 0, 0, 0], [5, -1000, -900, 800]],
    ),
    "sum-of-selections": (
        """
        input x bound 10
        input y bound 1000
        slot z bound 10
        slot w bound 10
        output w
        round { z = y }
        round { w = (z if x > 5000 margin 1 else 0) + (z if x < -5000 margin 1 else 0) }
        """,
        4,
        [[1, -2, 3, -4], [1000, -1000, 999, 7]],
    ),
}


def _program(name: str):
    return parse_program(GATES[name][0], f"{name}.pcoc")


def _random_inputs(program, n: int, rng: np.random.Generator, count: int) -> np.ndarray:
    """Integers within every input's declared bound (integers keep every comparison of
    these programs outside its margin), the extremes included."""
    bounds = [program.slot(name).bound for name in program.inputs]
    out = np.stack(
        [rng.integers(-int(b), int(b), size=(count, n), endpoint=True) for b in bounds], axis=1
    ).astype(np.float64)
    out[0] = np.array(bounds)[:, None]
    out[1] = -np.array(bounds)[:, None]
    return out


def _runtimes():
    yield "numpy"
    pytest.importorskip("torch")
    yield "torch"


@pytest.mark.parametrize("mode", ["hard", "softmax"])
@pytest.mark.parametrize("name", list(GATES))
def test_gates_match_the_interpreter(name, mode):
    """The inputs of the issue and random ones within the bounds: the model (numpy and
    torch) gives what the interpreter gives."""
    program = _program(name)
    _, n, issue = GATES[name]
    inputs = np.concatenate(
        [
            np.array([issue], dtype=np.float64),
            _random_inputs(program, n, np.random.default_rng(7), 40),
        ]
    )
    want = interpret_batch(program, n, inputs).outputs
    model = compile_program(program, n, mode=mode)
    atol = TOLERANCE if mode == "softmax" else 1e-9
    for runtime in _runtimes():
        got = run_pcoc(model, list(inputs), runtime=runtime)
        for slot, values in want.items():
            np.testing.assert_allclose(got[slot], values, rtol=0, atol=atol, err_msg=runtime)


def test_a_declared_slot_bound_is_a_promise_checked_on_request():
    """Some programs above assign a slot values beyond its declared bound: the interpreter
    runs them (it checks slot bounds only as promises), so the model must too."""
    program = _program("per-machine-choice")
    inputs = np.array([GATES["per-machine-choice"][2]], dtype=np.float64)
    assert interpret_batch(program, 4, inputs).outputs["w"].tolist() == [[3, 0, 0, 0]]
    with pytest.raises(CraspError, match=r"slot 'z' exceeds its bound 10"):
        interpret_batch(program, 4, inputs, check_promises=True)


def test_an_unbounded_candidate_is_refused_at_its_statement():
    """A slot bound is not a bound on what is assigned to it: gating an input without a
    bound is refused, naming the input, at the selection's line and column."""
    source = "input x bound 10\ninput y\noutput x\nround {\n  if x > 5 margin 1 { x = y }\n}\n"
    program = parse_program(source, "unbounded.pcoc")
    with pytest.raises(CraspError) as err:
        compile_program(program, 2)
    text = str(err.value)
    assert "unbounded.pcoc:5:3" in text and "input slot(s) 'y' declare none" in text
    assert "^" in text and "input y bound 1e6" in text


# ---------------------------------------------------------------------------- sends

PERMUTE = Path(__file__).resolve().parents[2] / "examples" / "pcoc_sends" / "permute.pcoc"
VALUES = [10.0, 20.0, 30.0, 40.0]


@cache
def permute(mode: str = "hard"):
    return compile_program(load_program(PERMUTE), 4, mode=mode)


def _run(model, destinations, runtime: str, on_beyond: str = "error"):
    return run_pcoc(model, [[VALUES, destinations]], runtime=runtime, on_beyond=on_beyond)["x"][0]


def test_the_send_guarantee_names_its_condition():
    model = permute()
    assert model.guarantee.destinations == ["d"]
    text = model.guarantee.text
    assert "sends route exactly only when their destinations are integers, distinct among" in text
    assert "0..3 (one outside sends nothing)" in text and "check on input(s) 'd'" in text
    assert "caller" not in text  # every destination is checked


@pytest.mark.parametrize("mode", ["hard", "softmax"])
@pytest.mark.parametrize(
    ("destinations", "fragment"),
    [
        ([0, 0, 2, 3], "numeric input 'd' sends machines 0 and 1 both to machine 0"),
        ([5, 3, 1, 3], "numeric input 'd' sends machines 1 and 3 both to machine 3"),
        ([7.5, 1, 2, 3], "numeric input 'd' holds 7.5 at machine 0, not an integer"),
        ([0, 1, 2, -0.5], "numeric input 'd' holds -0.5 at machine 3, not an integer"),
    ],
)
def test_destinations_outside_the_condition_are_refused(destinations, fragment, mode):
    """Both runtimes refuse what the interpreter refuses; warn and ignore run it."""
    program = load_program(PERMUTE)
    with pytest.raises(CraspError, match=r"collision|not an integer"):
        interpret_batch(program, 4, np.array([[VALUES, destinations]]))
    model = permute(mode)
    for runtime in _runtimes():
        with pytest.raises(CraspError) as err:
            _run(model, destinations, runtime)
        assert fragment in str(err.value) and "\n" not in str(err.value)
        with pytest.warns(UserWarning, match=fragment):
            warned = _run(model, destinations, runtime, "warn")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ignored = _run(model, destinations, runtime, "ignore")
        assert warned.shape == ignored.shape == (4,)


@pytest.mark.parametrize("mode", ["hard", "softmax"])
@pytest.mark.parametrize(
    "destinations",
    [[3, 2, 1, 0], [0, 1, 2, 3], [1, 2, 3, 0], [-1, 9, 0, 1e6], [2, -1e6, 0, 4]],
)
def test_integral_distinct_destinations_route_exactly(destinations, mode):
    """Permutations, and partial ones (destinations outside 0..3 send nothing)."""
    want = interpret_batch(load_program(PERMUTE), 4, np.array([[VALUES, destinations]]))
    atol = TOLERANCE if mode == "softmax" else 0.0
    for runtime in _runtimes():
        got = _run(permute(mode), destinations, runtime)
        np.testing.assert_allclose(got, want.outputs["x"][0], rtol=0, atol=atol)


def test_a_model_file_keeps_the_send_check(tmp_path):
    path = tmp_path / "permute.npz"
    save_model(permute(), path)
    loaded = read_model(path)
    assert loaded.guarantee.destinations == ["d"]
    assert loaded.guarantee.text == permute().guarantee.text
    with pytest.raises(CraspError, match="sends machines 0 and 1 both to machine 0"):
        _run(loaded, [0, 0, 2, 3], "numpy")
    assert list(_run(loaded, [3, 2, 1, 0], "numpy")) == VALUES[::-1]


def test_a_file_written_before_the_send_check_still_loads(tmp_path):
    """Earlier files have no 'destinations': they load with none (and check none)."""
    arrays = arrays_of(permute(), tmp_path)
    header = json.loads(str(arrays.pop("header")))
    del header["guarantee"]["destinations"]
    path = write(tmp_path, {"header": np.array(json.dumps(header)), **arrays})
    old = read_model(path)
    assert old.guarantee.destinations == []
    _run(old, [0, 0, 2, 3], "numpy")  # not refused: the file does not say to


def test_a_destination_the_program_computes_is_the_callers_condition():
    """``d`` reassigned before the send: nothing to check at run time, and the text says
    so; a send in a loop reads the input first (checked), then a computed value."""
    source = PERMUTE.read_text().replace("round {", "round { d = 3 - d }\nround {", 1)
    model = compile_program(parse_program(source, "computed.pcoc"), 4)
    assert model.guarantee.destinations == []
    assert "the destinations of `got = send x to d` (line 13) are computed by the program" in (
        model.guarantee.text
    )
    assert "caller's to ensure" in model.guarantee.text
    run_pcoc(model, [[VALUES, [3, 3, 1, 0]]])  # the model cannot tell: it runs
    looped = """
    input x bound 100
    input d bound 100
    output x
    for k in 0 .. 2 {
      round {
        got = send x to d default 0
        x = got
        d = 3 - d
      }
    }
    """
    model = compile_program(parse_program(looped, "looped.pcoc"), 4)
    assert model.guarantee.destinations == ["d"]
    text = model.guarantee.text
    assert "check on input(s) 'd'" in text and "`got = send x to d` (line 7) are computed" in text


def test_destination_problem_skips_bos_and_padding():
    """Positions 1..length are machines 0..length−1; BOS and padding are no senders."""
    guarantee = Guarantee(None, "test", destinations=["d"])
    values = np.array([[0.0, 1.0, 0.0, 0.0, 0.0], [0.0, 2.0, 1.0, 1.0, 0.0]])
    lengths = np.array([2, 3])
    assert guarantee.destination_problem("d", values[:1], lengths[:1]) is None
    problem = guarantee.destination_problem("d", values, lengths)
    assert problem is not None and "machines 1 and 2 of input 1 both to machine 1" in problem
    assert guarantee.destination_problem("x", values, lengths) is None
    numeric = np.stack([values, values + 0.5], axis=-1)
    problems = guarantee.input_problems(["x", "d"], numeric, lengths)
    assert len(problems) == 1 and "holds 1.5 at machine 0 of input 0, not an integer" in problems[0]


def test_the_torch_module_refuses_a_collision_itself():
    """``TorchTransformer.run`` (the module a user holds) checks the guarantee too."""
    pytest.importorskip("torch")
    from crasp_compiler.runtime.torch_module import TorchTransformer

    module = TorchTransformer(permute())
    tokens = [["m"] * 4]
    columns = [np.array([VALUES, [3.0, 3.0, 1.0, 0.0]]).T]
    with pytest.raises(CraspError, match="sends machines 0 and 1 both to machine 3"):
        module.run(tokens, values=columns)
    columns = [np.array([VALUES, [3.0, 2.0, 1.0, 0.0]]).T]
    assert module.run(tokens, values=columns)["x"][0, 1:].tolist() == VALUES[::-1]
