"""Attacks on the float guarantee of compiled C-RASP models
(crasp_compiler/languages/crasp/rounding.py), each at the horizon the analysis proves.

Every rule of the analysis bounds the error of the variables it makes. These tests build
the model with one residual dimension per variable and check, at every token position of
adversarial inputs as long as the proven horizon (long runs that drive counts far from
their thresholds and back, near ties at the end, alternations), that every variable's
float32 value lies within the bound the analysis derived for it — bits within their
errors when 0 and when 1, counts within ``err(t) + rel·X`` — and that the decided outputs
of the numpy executor and the torch module equal the interpreter's. A rule that claimed
too little error would fail here at the variable it makes, not only at an output.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from crasp_compiler import CraspError, load_program, parse_program
from crasp_compiler.languages.crasp.compile import compile_program
from crasp_compiler.languages.crasp.depth import Depth
from tests.support.attacks import adversarial, assert_decisions_agree, assert_within_bounds
from tests.support.strategies import random_program

EXAMPLES = sorted(
    p
    for p in (Path(__file__).resolve().parents[2] / "examples" / "crasp").iterdir()
    if p.suffix in (".cr", ".crasp")
)
RELU_LEN = 1024


QUICK_RELU = ["dyck1.cr", "tomita2.crasp", "piecewise.crasp", "c_near_a.cr"]


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, marks=() if p.name in QUICK_RELU else pytest.mark.slow, id=p.name)
        for p in EXAMPLES
    ],
)
def test_relu_examples_at_their_float32_horizon(path):
    """relu mode, --max-len 1024: every variable within its bound and every decision right
    at the proven float32 horizon (1,024 for all examples but anbncn)."""
    program = load_program(path)
    model = compile_program(program, mode="relu", max_len=RELU_LEN)
    horizon = model.guarantee.limit("float32")
    assert horizon is not None
    if path.name != "anbncn.crasp":
        assert horizon == RELU_LEN
    words = adversarial(program.alphabet, horizon, random.Random(path.name))
    assert_within_bounds(program, "relu", RELU_LEN, words)
    assert_decisions_agree(program, model, words)


def near_ties(k1: int, k2: int, length: int) -> list[tuple[int, int]]:
    """Counts (a, b) with a + b ≤ length where ``k1·a − k2·b`` is closest to 0."""
    found = []
    for a in range(length + 1):
        b = min(length - a, round(k1 * a / k2))
        found.append((abs(k1 * a - k2 * b), a, b))
    return [(a, b) for _, a, b in sorted(found)[:6]]


@pytest.mark.parametrize("mode", ["heaviside", "layernorm", "relu"])
@pytest.mark.parametrize(("k1", "k2"), [(1003, 997), (65537, 65521), (3, 2)])
def test_two_counts_at_a_near_tie_at_the_horizon(mode, k1, k2):
    """``k1·A ≥ k2·B`` between two exact counts: the inputs end where ``k1·a − k2·b`` is
    as close to 0 as a + b ≤ L allows (ties, ±1), with L the proven horizon of each float
    type that has one within 4,000 tokens, the a's first, the b's first, or interleaved;
    a c pads the rest."""
    source = f'alphabet "a", "b", "c"\nA = # "a"\nB = # "b"\nE = {k1} * A >= {k2} * B\n'
    program = parse_program(source)
    max_len = 2000 if mode == "relu" else None
    model = compile_program(program, mode=mode, max_len=max_len)
    attacked = 0
    for dtype in (np.float32, np.float64):
        horizon = model.guarantee.limit(np.dtype(dtype).name)
        assert horizon is not None
        if not 1 <= horizon <= 4000:
            continue
        words = []
        for a, b in near_ties(k1, k2, horizon):
            pad = ["c"] * (horizon - a - b)
            mixed = [s for pair in zip(["a"] * a, ["b"] * b, strict=False) for s in pair]
            mixed += ["a"] * (a - min(a, b)) + ["b"] * (b - min(a, b))
            words += [["a"] * a + ["b"] * b + pad, ["b"] * b + ["a"] * a + pad, mixed + pad]
        assert_within_bounds(program, mode, max_len, words, dtype)
        assert_decisions_agree(program, model, words, dtype)
        attacked += 1
    assert attacked or model.guarantee.limit("float32") > 4000


@pytest.mark.parametrize("seed", range(8))
def test_random_programs_stay_within_their_bounds(seed):
    """Random programs (factors up to 1,000, constants up to 10^4, every construction) in
    every mode: every variable within its bound and every decision right on adversarial
    inputs as long as the proven float32 horizon (at most 300 here)."""
    rng = random.Random(seed)
    program = random_program(
        seed, max_definitions=6, scale_range=(-1000, 1000), const_range=(-(10**4), 10**4)
    )
    for mode in ("heaviside", "layernorm", "relu"):
        max_len = 300 if mode == "relu" else None
        try:
            model = compile_program(program, mode=mode, max_len=max_len)
        except CraspError as err:  # refused: float64 exact for no input
            assert "not provably exact in float64" in err.format()
            continue
        horizon = model.guarantee.limit("float32")
        assert horizon is not None
        if horizon < 1:
            continue
        words = adversarial(program.alphabet, min(horizon, 300), rng, extra=4)
        assert_within_bounds(program, mode, max_len, words)
        assert_decisions_agree(program, model, words)


def deep_alternating(n: int) -> str:
    """``F_k = F_{k−1} && L_k`` or ``||``, alternating, over comparisons of two counts
    with near-tie factors (short float32 horizons), token tests and equalities."""
    lines = ['alphabet "a", "b", "c"', 'A = # "a"', 'B = # "b"']

    def leaf(k: int) -> str:
        if k % 3:
            return f"65537 * A >= 65521 * B + {k - n // 2}"
        return '"c"' if k % 2 else f"A != B + {k % 7}"

    lines.append(f"F0 = {leaf(0)}")
    lines += [f"F{k} = F{k - 1} {'&&' if k % 2 else '||'} {leaf(k)}" for k in range(1, n)]
    return "\n".join(lines) + f"\naccept F{n - 1}\n"


@pytest.mark.parametrize(
    ("mode", "max_len", "dtype"),
    [("heaviside", None, np.float32), ("layernorm", None, np.float32), ("relu", 512, np.float64)],
)
def test_deep_alternating_formula_at_its_horizon(mode, max_len, dtype):
    """A 64-leaf alternating formula, a balanced circuit of ⌊log₂ 63⌋ + 2 gates deep
    (``apply`` truth tables among them): every variable within its bound and every decision
    right at the proven horizon (float32's for heaviside and layernorm; relu has none in
    float32, so float64's, its max_len)."""
    program = parse_program(deep_alternating(64))
    depth = Depth(program, mode)
    assert depth.plan(program["F63"].expr).kind == "balanced"
    assert any(wire.op == "apply" for wire in depth.wires.values())
    model = compile_program(program, mode=mode, max_len=max_len)
    assert len(model.layers) == 1 + 5 + 2
    horizon = model.guarantee.limit(np.dtype(dtype).name)
    assert horizon is not None and 32 <= horizon <= 512
    words = adversarial(program.alphabet, horizon, random.Random(mode), extra=4)
    assert_within_bounds(program, mode, max_len, words, dtype)
    assert_decisions_agree(program, model, words, dtype)
