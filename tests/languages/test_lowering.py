"""The C-RASP lowering on its own, before any assembly: the blocks it emits, evaluated
by their own ``evaluate`` in the order the builder received them, compute every
compiled definition (Boolean forms > 1/2 exactly when true, count forms times t + 1
equal to the count) at every token position, on random programs and inputs in every
mode. A lowering bug shows up here without the scheduler, the assembler or a runtime."""

from __future__ import annotations

import numpy as np
import pytest

from crasp_compiler.cookbook.blocks import evaluate_blocks
from crasp_compiler.languages.crasp.interpret import interpret
from crasp_compiler.languages.crasp.lower import lower_program
from crasp_compiler.languages.crasp.nodes import Sort
from tests.support.strategies import all_inputs, random_inputs, random_program

MAX_LEN = 6


def _check(program, mode: str, inputs) -> int:
    lowered = lower_program(program, mode, MAX_LEN if mode == "relu" else None)
    builder, checked = lowered.builder, 0
    for tokens in inputs:
        values = evaluate_blocks(builder.blocks, builder.input_values(tokens))
        want = interpret(program, tokens).values
        scale = np.arange(1, len(tokens) + 2)
        for name, form in lowered.forms.items():
            got = sum((coef * values[var] for var, coef in form.items()), np.zeros(len(scale)))
            if program[name].sort == Sort.BOOL:
                decided = got > 0.5
            else:
                decided = np.rint(got * scale).astype(np.int64)
            expected = np.asarray(want[name])
            # BOS (t = 0) is set to the empty-prefix value by the readout, not here
            assert list(decided[1:]) == list(expected[1:]), (name, mode, tokens)
            checked += 1
    return checked


@pytest.mark.parametrize("mode", ["heaviside", "layernorm", "relu"])
@pytest.mark.parametrize("seed", range(8))
def test_lowered_blocks_compute_every_definition(seed, mode):
    program = random_program(seed)
    inputs = all_inputs(program, 3) + random_inputs(program, seed, count=8, max_len=MAX_LEN)
    assert _check(program, mode, inputs) > 0
