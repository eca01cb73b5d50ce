"""Adversarial inputs and checks for the float guarantee of compiled C-RASP models, shared
by tests/languages/test_rounding_attacks.py and benchmarks/guarantee_fuzz.py.

:func:`assert_within_bounds` builds a lowered program's model with one residual dimension
per variable and checks every variable's float value, at every token, against the bound
the rounding analysis (crasp_compiler/languages/crasp/rounding.py) derived for it;
:func:`assert_decisions_agree` checks the decided outputs of the numpy executor and the
torch module against the interpreter.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import pytest

from crasp_compiler import interpret_batch
from crasp_compiler.languages.crasp.lower import lower_program
from crasp_compiler.languages.crasp.nodes import Program, Sort
from crasp_compiler.languages.crasp.rounding import Analysis
from crasp_compiler.model.model import Guarantee, Model
from crasp_compiler.runtime.numpy_exec import run_tokens


def adversarial(alphabet: Sequence[str], length: int, rng: random.Random, extra: int = 8):
    """Inputs of exactly ``length`` tokens that stress rounding: one symbol throughout,
    two blocks split near the middle and the ends (counts far apart, then level), the
    alternation of each pair, and runs of random lengths up to a third of the input."""
    words = [[a] * length for a in alphabet]
    for a in alphabet:
        for b in alphabet:
            if a == b:
                continue
            for k in {1, length // 2, length // 2 + 1, length - 1, length // 3}:
                if 0 < k < length:
                    words.append([a] * k + [b] * (length - k))
            words.append(([a, b] * length)[:length])
    for _ in range(extra):
        word: list[str] = []
        while len(word) < length:
            word += [rng.choice(alphabet)] * rng.choice([1, 2, 3, 7, 50, max(1, length // 3)])
        words.append(word[:length])
    return words


def assert_within_bounds(program: Program, mode: str, max_len: int | None, words, dtype=np.float32):
    """Every variable of the lowered program, at every token of every word, within the
    bound the analysis of ``dtype`` derived for it. The exact values are the float64
    model's rounded to integers (bits to 0/1, counts in units of 1/(t + 1)), which the
    float64 analysis itself proves to within 1/2 at these lengths."""
    lowered = lower_program(program, mode, max_len)
    outputs = {
        name: (lowered.forms[name], "bool" if program[name].sort == Sort.BOOL else "count")
        for name in program.outputs
    }
    model = lowered.builder.build(outputs, reuse=False, guarantee=Guarantee(None, "attack"))
    steps = np.arange(max(map(len, words)) + 1, dtype=np.float64) + 1
    tokens = np.arange(len(steps))[None, :] <= np.array([len(w) for w in words])[:, None]
    tokens[:, 0] = False  # BOS: input-independent, guarded separately
    columns = {name: k for k, name in enumerate(model.residual)}
    finals = {}
    for kind in (np.float64, dtype):
        result = run_tokens(model, words, dtype=kind, residuals=True, on_overlength="ignore")
        assert result.residuals is not None
        finals[np.dtype(kind).name] = result.residuals[-1][1].astype(np.float64)
    exact_64: Analysis = lowered.rounding["float64"]
    analysis: Analysis = lowered.rounding[np.dtype(dtype).name]
    checked = 0
    for name, var in analysis.vars.items():
        if name not in columns or var.soft is not None:
            continue
        k = columns[name]
        got = finals[np.dtype(dtype).name][..., k][tokens]
        ref = finals["float64"][..., k][tokens]
        t = np.broadcast_to(steps - 1, tokens.shape)[tokens]
        if var.bits is not None:
            exact = np.rint(ref)
            e0, e1 = var.bits
            allowed = np.where(exact == 1, e1, e0)
            error = np.abs(got - exact)
        else:
            # the float64 reference is within 1/2 of the integer X (its own bound says so)
            assert exact_64.vars[name].err(max(t)) + exact_64.vars[name].rel * var.mag(max(t)) < 0.5
            exact = np.rint(ref * (t + 1))
            error = np.abs(got * (t + 1) - exact)
            rel = var.rel if var.nonneg else max(var.rel, 0.0)
            allowed = np.array([var.err(s) for s in t]) + rel * np.abs(exact)
            # the measurement's own product x·(t + 1) rounds in float64 (exact for float32)
            allowed += 2.0**-52 * np.abs(exact)
        worst = np.argmax(error - allowed) if error.size else 0
        assert np.all(error <= allowed), (
            f"{name} ({mode}, {np.dtype(dtype).name}): error {error[worst]:.3g} above its "
            f"bound {allowed[worst]:.3g} at t = {t[worst]}"
        )
        checked += 1
    assert checked > 0


def assert_decisions_agree(program: Program, model: Model, words, dtype=np.float32) -> None:
    """The numpy executor and the torch module decide every output as the interpreter does."""
    want = interpret_batch(program, words) if len({len(w) for w in words}) == 1 else None
    groups = [words] if want is not None else [[w] for w in words]
    for group in groups:
        expected = interpret_batch(program, group)
        got = run_tokens(model, group, dtype=dtype)
        for name in program.outputs:
            np.testing.assert_array_equal(got.values[name], expected[name], err_msg=name)
    torch = pytest.importorskip("torch")
    from crasp_compiler.runtime.torch_module import TorchTransformer

    module = TorchTransformer(model)
    if dtype == np.float32:
        module = module.float()
    for group in groups:
        expected = interpret_batch(program, group)
        ids, lengths = module.encode(group)
        with torch.no_grad():
            raw = module(ids, lengths).double().numpy()
        steps = np.arange(1, raw.shape[1] + 1)
        for k, out in enumerate(model.outputs):
            decided = raw[..., k] > 0.5 if out.rule == "bool" else np.rint(raw[..., k] * steps)
            np.testing.assert_array_equal(decided, expected[out.name], err_msg=out.name)
