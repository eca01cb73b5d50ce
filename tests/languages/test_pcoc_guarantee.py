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
- **Sends.** (in the second part)
"""

from __future__ import annotations

import numpy as np
import pytest

from crasp_compiler.errors import CraspError
from crasp_compiler.languages.pcoc import interpret_pcoc_batch, parse_pcoc
from crasp_compiler.languages.pcoc.compile import compile_pcoc, run_pcoc

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
    return parse_pcoc(GATES[name][0], f"{name}.pcoc")


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
    want = interpret_pcoc_batch(program, n, inputs).outputs
    model = compile_pcoc(program, n, mode=mode)
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
    assert interpret_pcoc_batch(program, 4, inputs).outputs["w"].tolist() == [[3, 0, 0, 0]]
    with pytest.raises(CraspError, match=r"slot 'z' exceeds its bound 10"):
        interpret_pcoc_batch(program, 4, inputs, check_promises=True)


def test_an_unbounded_candidate_is_refused_at_its_statement():
    """A slot bound is not a bound on what is assigned to it: gating an input without a
    bound is refused, naming the input, at the selection's line and column."""
    source = "input x bound 10\ninput y\noutput x\nround {\n  if x > 5 margin 1 { x = y }\n}\n"
    program = parse_pcoc(source, "unbounded.pcoc")
    with pytest.raises(CraspError) as err:
        compile_pcoc(program, 2)
    text = str(err.value)
    assert "unbounded.pcoc:5:3" in text and "input slot(s) 'y' declare none" in text
    assert "^" in text and "input y bound 1e6" in text
