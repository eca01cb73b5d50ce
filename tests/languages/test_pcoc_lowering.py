"""The PCOC lowering on its own, before any assembly: the blocks it emits, evaluated by
their own ``evaluate`` in the order the builder received them, compute every output slot
at every machine as the interpreter does, on every example (the send programs after
their sends are lowered to fixed rounds) for several n, on inputs within the declared
bounds whose data comparisons stay outside their margins. A lowering bug shows up here
without the scheduler, the assembler or a runtime (C-RASP's twin: ``test_lowering.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from crasp_compiler.cookbook.blocks import evaluate_blocks
from crasp_compiler.errors import CraspError
from crasp_compiler.languages.pcoc import interpret_program, load_program
from crasp_compiler.languages.pcoc.benes import has_sends, lower_sends
from crasp_compiler.languages.pcoc.lower import TOKEN, lower_pcoc
from crasp_compiler.languages.pcoc.nodes import Program

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = sorted([*ROOT.glob("examples/pcoc/*.pcoc"), *ROOT.glob("examples/pcoc_sends/*.pcoc")])
SIZES = (1, 2, 3, 4, 7, 8)
TOLERANCE = 1e-6  # relative to the output's size, as the compiler tests compare


def draw(rng: np.random.Generator, program: Program, n: int) -> np.ndarray:
    """One input vector per input slot: integers or reals within the declared bounds
    (at most 100), destinations of sends a partial permutation."""
    rows = []
    for name in program.inputs:
        bound = program.slot(name).bound
        scale = min(bound if bound is not None else 100.0, 100.0)
        if name == "d":
            rows.append(np.where(rng.random(n) < 0.85, rng.permutation(n), -1).astype(float))
        elif rng.random() < 0.5:
            rows.append(rng.integers(-int(scale), int(scale) + 1, n).astype(float))
        else:
            rows.append(rng.uniform(-scale, scale, n))
    return np.array(rows)


@pytest.mark.parametrize("path", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_lowered_blocks_compute_every_output(path: Path) -> None:
    program = load_program(path)
    rng = np.random.default_rng(sum(map(ord, path.stem)))
    checked = 0
    for n in SIZES:
        routed = lower_sends(program, n) if has_sends(program) else program
        lowered = lower_pcoc(routed, n)
        builder = lowered.builder
        assert len(builder.numeric_inputs) == len(program.inputs)
        for _ in range(4):
            inputs = draw(rng, program, n)
            try:  # the guarantee's inputs: comparisons outside their margins
                want = interpret_program(program, n, inputs, check_promises=True).outputs
            except CraspError:
                continue
            values = dict(builder.input_values([TOKEN] * n))
            for name, row in zip(builder.numeric_inputs, inputs, strict=True):
                values[name] = np.concatenate([[0.0], row])  # BOS reads 0
            out = evaluate_blocks(builder.blocks, values)
            for name in program.outputs:
                form = lowered.slots[name].form
                got = sum((c * out[v] for v, c in form.items()), np.zeros(n + 1))[1:]
                scale = max(1.0, float(np.max(np.abs(want[name]), initial=0.0)))
                np.testing.assert_allclose(
                    got, want[name], rtol=0, atol=TOLERANCE * scale, err_msg=f"{name}, n={n}"
                )
                checked += 1
    assert checked >= len(program.outputs) * len(SIZES)  # most draws keep their promises
