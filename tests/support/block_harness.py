"""Run cookbook blocks on chosen real inputs through the builder and both runtimes.

``evaluate(columns, construct)`` makes one input sequence whose token at position t
(t = 1..n) carries the values ``columns[name][t - 1]`` in the variables ``name`` (the
BOS position carries ``bos_values``, 0 by default). ``construct(builder, inputs)`` adds
blocks and returns the forms to read out. The model is built, run by the numpy executor
and by the torch module (float64), the two must agree to 1e-9, and so must the blocks'
own semantics (``evaluate_blocks``: every block's ``evaluate``, in order, with no model);
the raw outputs come back as ``{name: array of length n + 1}`` (index 0 is BOS).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from crasp_compiler.assemble.builder import BOS_VAR, NONBOS_VAR, Builder, token_var
from crasp_compiler.cookbook.blocks import Form, evaluate_blocks, form_value
from crasp_compiler.model.features import feature_matrix
from crasp_compiler.model.model import Model
from crasp_compiler.runtime.numpy_exec import run_tokens

Construct = Callable[[Builder, dict[str, Form]], Mapping[str, Mapping[str, float]]]


def build(
    columns: Mapping[str, Sequence[float]],
    construct: Construct,
    bos_values: Mapping[str, float] | None = None,
) -> tuple[Model, list[str]]:
    """The model and the token sequence that carries ``columns`` (see the module doc)."""
    model, tokens, _ = _build(columns, construct, bos_values)
    return model, tokens


def _build(
    columns: Mapping[str, Sequence[float]],
    construct: Construct,
    bos_values: Mapping[str, float] | None = None,
) -> tuple[Model, list[str], dict[str, np.ndarray]]:
    """The model, its token sequence and what the blocks' ``evaluate`` gives for each
    output (see the module doc)."""
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
    model = builder.build(dict(outputs))
    # the same sequence as values at every position, for the blocks' own evaluate
    size = n + 1
    values = {
        name: np.array([bos_values.get(name, 0.0), *map(float, column)])
        for name, column in columns.items()
    }
    position = np.arange(size)
    values[BOS_VAR], values[NONBOS_VAR] = (position == 0) * 1.0, (position > 0) * 1.0
    values |= {token_var(s): (position == t) * 1.0 for t, s in enumerate(symbols, start=1)}
    features = feature_matrix(builder.features, size)
    values |= {name: features[:, k] for k, name in enumerate(builder.features)}
    values |= {name: np.zeros(size) for name in builder.numeric_inputs}
    got = evaluate_blocks(builder.blocks, values)
    own = {
        name: np.broadcast_to(form_value(spec[0] if isinstance(spec, tuple) else spec, got), size)
        for name, spec in outputs.items()
    }
    return model, symbols, own


def evaluate(
    columns: Mapping[str, Sequence[float]],
    construct: Construct,
    bos_values: Mapping[str, float] | None = None,
    torch_too: bool = True,
) -> dict[str, np.ndarray]:
    """Raw outputs at positions 0..n, numpy and torch agreeing to 1e-9."""
    model, tokens, own = _build(columns, construct, bos_values)
    result = run_tokens(model, [tokens], on_overlength="ignore")
    got = {name: values[0] for name, values in result.outputs.items()}
    for name, values in own.items():  # the blocks' own semantics, with no model
        np.testing.assert_allclose(values, got[name], rtol=1e-9, atol=1e-9, err_msg=name)
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
