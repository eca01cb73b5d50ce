"""Run cookbook blocks on chosen real inputs through the builder and both runtimes.

``evaluate(columns, construct)`` makes one input sequence whose token at position t
(t = 1..n) carries the values ``columns[name][t - 1]`` in the variables ``name`` (the
BOS position carries ``bos_values``, 0 by default). ``construct(builder, inputs)`` adds
blocks and returns the forms to read out. The model is built, run by the numpy executor
and by the torch module (float64), the two must agree to 1e-9, and the raw outputs come
back as ``{name: array of length n + 1}`` (index 0 is BOS).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from crasp_compiler.assemble.builder import Builder
from crasp_compiler.cookbook.blocks import Form
from crasp_compiler.model.model import Model
from crasp_compiler.runtime.numpy_exec import run

Construct = Callable[[Builder, dict[str, Form]], Mapping[str, Mapping[str, float]]]


def build(
    columns: Mapping[str, Sequence[float]],
    construct: Construct,
    bos_values: Mapping[str, float] | None = None,
) -> tuple[Model, list[str]]:
    """The model and the token sequence that carries ``columns`` (see the module doc)."""
    lengths = {len(values) for values in columns.values()}
    assert len(lengths) == 1, "every column needs one value per position"
    (n,) = lengths
    symbols = [f"s{t}" for t in range(1, n + 1)]
    builder = Builder(symbols)
    bos_values = bos_values or {}
    inputs = {
        name: builder.embed(
            name,
            {s: float(v) for s, v in zip(symbols, values, strict=True)},
            bos=bos_values.get(name, 0.0),
        )
        for name, values in columns.items()
    }
    outputs = construct(builder, inputs)
    return builder.build(dict(outputs)), symbols


def evaluate(
    columns: Mapping[str, Sequence[float]],
    construct: Construct,
    bos_values: Mapping[str, float] | None = None,
    torch_too: bool = True,
) -> dict[str, np.ndarray]:
    """Raw outputs at positions 0..n, numpy and torch agreeing to 1e-9."""
    model, tokens = build(columns, construct, bos_values)
    result = run(model, [tokens], on_overlength="ignore")
    got = {name: values[0] for name, values in result.outputs.items()}
    if torch_too and importlib.util.find_spec("torch") is not None:  # a core install has none
        import torch

        from crasp_compiler.runtime.torch_module import TorchTransformer

        module = TorchTransformer(model)
        ids, lengths = module.encode([tokens])
        with torch.no_grad():
            raw = module(ids, lengths)[0].double().numpy()
        for k, out in enumerate(model.outputs):
            np.testing.assert_allclose(raw[:, k], got[out.name], rtol=1e-9, atol=1e-9)
    return got
