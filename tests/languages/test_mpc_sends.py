"""General MPC rounds in PCOC: ``a, b = send x to d`` (a receiver capacity of two), two
send statements in one round (two words per machine).

The interpreter of ``examples/pcoc_sends/pairs.pcoc`` against a numpy definition; the
lowered program (fixed-pattern rounds, :mod:`crasp_compiler.languages.pcoc.benes`) and
the compiled model (numpy and torch) against the interpreter, with destinations chosen by
up to the capacity of machines; a capacity of three; the receiver order (by sender);
over-capacity sends refused by the interpreter and by the runtimes (the guarantee records
the capacity; tests/model/test_model_hostile.py refuses a malformed one); parser checks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from crasp_compiler.errors import CraspError
from crasp_compiler.languages.pcoc import (
    interpret_batch,
    interpret_program,
    load_program,
    parse_program,
)
from crasp_compiler.languages.pcoc.benes import lower_sends, routing_rounds
from crasp_compiler.languages.pcoc.compile import compile_program, run_pcoc
from crasp_compiler.model.io import read_model, save_model

PAIRS = Path(__file__).resolve().parents[2] / "examples" / "pcoc_sends" / "pairs.pcoc"
OUTPUTS = ("x1", "y1", "x2", "y2", "total")

THREE = """
input x bound 1e6
input d bound 1e3
slot a bound 1e6
slot b bound 1e6
slot c bound 1e6
output a, b, c
round {
  p, q, s = send x to d default -1
  a = p
  b = q
  c = s
}
"""


def _destinations(rng, n: int, batch: int, capacity: int, outside: float) -> np.ndarray:
    """(batch, n) destinations: every machine 0..n−1 named by at most ``capacity``
    machines (often exactly that many), a fraction ``outside`` out of range."""
    rows = []
    for _ in range(batch):
        pool = np.repeat(rng.permutation(n), capacity)[: max(n, 1) * capacity]
        row = rng.permutation(pool)[:n].astype(float)
        drop = rng.random(n) < outside
        row[drop] = rng.choice([-1.0, -4.0, float(n), n + 7.0], int(drop.sum()))
        rows.append(row)
    return np.array(rows)


def _pairs_inputs(rng, n: int, batch: int, outside: float = 0.2) -> np.ndarray:
    """(batch, 3, n): integer x and y within 1e6, destinations (capacity 2)."""
    xy = rng.integers(-(10**6), 10**6, (batch, 2, n)).astype(float)
    d = _destinations(rng, n, batch, 2, outside)[:, None, :]
    return np.concatenate([xy, d], axis=1)


def _pairs_reference(inputs: np.ndarray) -> dict[str, np.ndarray]:
    """numpy definition of pairs.pcoc: the pairs of the machines that chose j, in
    machine order, and their total."""
    batch, _, n = inputs.shape
    out = {name: np.zeros((batch, n)) for name in OUTPUTS}
    for b in range(batch):
        seen = [0] * n
        for i in range(n):
            j = int(inputs[b, 2, i])
            if 0 <= j < n:
                k = "1" if seen[j] == 0 else "2"
                out["x" + k][b, j] = inputs[b, 0, i]
                out["y" + k][b, j] = inputs[b, 1, i]
                seen[j] += 1
    out["total"] = out["x1"] + out["y1"] + out["x2"] + out["y2"]
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33])
def test_pairs_interpreter_and_lowering_agree_with_numpy(n):
    rng = np.random.default_rng(n)
    program = load_program(PAIRS)
    inputs = np.concatenate([_pairs_inputs(rng, n, 5, 0.0), _pairs_inputs(rng, n, 5, 0.3)])
    want = _pairs_reference(inputs)
    trace = interpret_batch(program, n, inputs)
    lowered = lower_sends(program, n)
    assert len(lowered.rounds) == routing_rounds(n)
    # the lowered program, its margins and exclusive sums checked, for small n
    low = interpret_batch(lowered, n, inputs, check_promises=n <= 9)
    for name in OUTPUTS:
        assert np.array_equal(trace.outputs[name], want[name]), name
        assert np.array_equal(low.outputs[name], want[name]), name


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 32, 64])
def test_pairs_compiled_model_agrees_with_the_interpreter(n):
    rng = np.random.default_rng(40 + n)
    program = load_program(PAIRS)
    model = compile_program(program, n)
    assert model.guarantee.destinations == ["d"] and model.guarantee.capacities == {"d": 2}
    assert model.guarantee.dtypes["float64"] == n  # proven in float64
    assert model.info["benes"]["send_rounds"] == 1
    inputs = np.concatenate([_pairs_inputs(rng, n, 4, 0.0), _pairs_inputs(rng, n, 2, 0.3)])
    want = interpret_batch(program, n, inputs).outputs
    batch = [row for row in inputs]
    for runtime in ("numpy", "torch"):
        got = run_pcoc(model, batch, runtime=runtime)
        for name in OUTPUTS:
            error = np.abs(got[name] - want[name]).max()
            assert error <= model.guarantee.errors["float64"], (runtime, name, error)
            assert np.array_equal(np.round(got[name]), want[name]), (runtime, name)
    assert model.guarantee.dtypes["float32"] == n  # covered in float32 too
    got = run_pcoc(model, batch, dtype=np.float32)
    for name in OUTPUTS:
        assert np.abs(got[name] - want[name]).max() <= model.guarantee.errors["float32"], name


@pytest.mark.slow
def test_pairs_compiled_at_256():
    rng = np.random.default_rng(256)
    program = load_program(PAIRS)
    model = compile_program(program, 256)
    inputs = _pairs_inputs(rng, 256, 3, 0.1)
    got = run_pcoc(model, [row for row in inputs])
    want = _pairs_reference(inputs)
    for name in OUTPUTS:
        assert np.array_equal(np.round(got[name]), want[name]), name


@pytest.mark.parametrize("n", [2, 8, 32, 100])
def test_pairs_size(n):
    """The size benes' docstring states for pairs.pcoc: at most 2⌈log₂ n⌉ + 7 layers,
    width about 22n, about 525 nonzero weights per machine (regression guards)."""
    model = compile_program(load_program(PAIRS), n)
    assert len(model.layers) <= 2 * (n - 1).bit_length() + 7
    assert model.width <= 23.3 * n
    assert model.nonzero_count() <= 560 * n


def test_pairs_grow_linearly():
    """The lists of two tuples cost a constant factor over permute.pcoc: width and
    nonzero weights O(n)."""
    small, large = (
        compile_program(load_program(PAIRS), 32),
        compile_program(load_program(PAIRS), 128),
    )
    assert large.width <= small.width * 4 * 1.1
    assert large.nonzero_count() <= small.nonzero_count() * 4 * 1.1


@pytest.mark.parametrize("n", [1, 2, 3, 4, 6, 9, 16])
def test_capacity_three_in_sender_order(n):
    """Three senders per receiver, the k-th target from the k-th lowest-numbered one
    (the routing collects them by offset; the last round sorts them by sender)."""
    rng = np.random.default_rng(70 + n)
    program = parse_program(THREE, "three.pcoc")
    x = rng.integers(-1000, 1000, (6, 1, n)).astype(float)
    d = _destinations(rng, n, 6, 3, 0.15)[:, None, :]
    inputs = np.concatenate([x, d], axis=1)
    trace = interpret_batch(program, n, inputs)
    for b in range(len(inputs)):
        for j in range(n):
            senders = [i for i in range(n) if inputs[b, 1, i] == j]
            got = [trace.outputs[name][b, j] for name in "abc"]
            assert got == [inputs[b, 0, i] for i in senders] + [-1.0] * (3 - len(senders))
    model = compile_program(program, n)
    assert model.guarantee.capacities == {"d": 3}
    out = run_pcoc(model, [row for row in inputs])
    for name in "abc":
        assert np.array_equal(np.round(out[name]), trace.outputs[name]), name


def test_receivers_list_senders_in_machine_order_by_hand():
    program = load_program(PAIRS)
    # machines 3 and 0 send to 1 (0 first), machine 1 to 2, machine 2 nowhere
    x, y, d = [10, 11, 12, 13], [20, 21, 22, 23], [1, 2, 9, 1]
    out = interpret_program(program, 4, [x, y, d]).outputs
    assert out["x1"].tolist() == [0, 10, 11, 0] and out["x2"].tolist() == [0, 13, 0, 0]
    assert out["y1"].tolist() == [0, 20, 21, 0] and out["y2"].tolist() == [0, 23, 0, 0]
    assert out["total"].tolist() == [0, 66, 32, 0]
    got = run_pcoc(compile_program(program, 4), [[x, y, d]])
    assert np.round(got["x2"]).tolist() == [[0, 13, 0, 0]]


def test_over_capacity_is_refused_by_the_interpreter_and_the_runtimes(tmp_path):
    program = load_program(PAIRS)
    over = [[1, 2, 3, 4], [5, 6, 7, 8], [2, 2, 0, 2]]
    with pytest.raises(CraspError, match=r"machines 0 and 1 and 3 all send to machine 2"):
        interpret_program(program, 4, over)
    model = compile_program(program, 4)
    assert "at most 2 per machine" in model.guarantee.text
    path = tmp_path / "pairs.npz"
    save_model(model, path)
    loaded = read_model(path)
    assert loaded.guarantee.capacities == {"d": 2}
    for runtime in ("numpy", "torch"):
        with pytest.raises(CraspError, match=r"machines 0, 1 and 3 all to machine 2"):
            run_pcoc(loaded, [over], runtime=runtime)
    # two per machine is covered
    run_pcoc(loaded, [[[1, 2, 3, 4], [5, 6, 7, 8], [2, 2, 0, 0]]])


@pytest.mark.parametrize(
    ("targets", "message"),
    [
        ("a, a", "'a' is received twice in this round"),
        ("a, x", "cannot send into the slot 'x'"),
        ("a, i", "cannot receive into 'i'"),
        (", ".join(f"t{k}" for k in range(17)), "at most 16 names, not 17"),
    ],
)
def test_parser_checks_on_targets(targets, message):
    text = (
        f"input x bound 1\ninput d bound 9\noutput x\nround {{ {targets} = send x to d default 0 }}"
    )
    with pytest.raises(CraspError, match=message):
        parse_program(text)


def test_sixteen_targets_parse():
    names = ", ".join(f"t{k}" for k in range(16))
    text = f"input x bound 1\ninput d bound 9\noutput x\nround {{ {names} = send x to d default 0\n x = t15 }}"
    (send,) = parse_program(text).rounds[0].sends
    assert send.capacity == 16 and send.text().startswith("`t0, t1,")
