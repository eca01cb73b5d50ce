"""Compile a checked C-RASP program to a :class:`Model`: lower onto a :class:`Builder`,
give every output its empty-prefix value at BOS, build, name the residual dimensions
after the definitions."""

from __future__ import annotations

from collections import Counter

from crasp_compiler.assemble.builder import BOS_VAR, Builder
from crasp_compiler.cookbook.blocks import BosValues, Form, form_add
from crasp_compiler.errors import CraspError, Diagnostic
from crasp_compiler.languages.crasp.interpret import interpret
from crasp_compiler.languages.crasp.lower import lower_program
from crasp_compiler.languages.crasp.nodes import (
    Program,
    Sort,
)
from crasp_compiler.languages.crasp.program import require_alphabet
from crasp_compiler.languages.crasp.rounding import Analysis, horizon
from crasp_compiler.model.model import Guarantee, Model, Provenance, describe_limit


def compile_program(
    program: Program,
    mode: str = "heaviside",
    max_len: int | None = None,
    *,
    max_parameters: int | None = None,
    reuse: bool | None = None,
) -> Model:
    """Compile ``program`` to a transformer whose outputs equal the interpreter's.

    ``mode="heaviside"`` thresholds comparisons with Heaviside units and ``"layernorm"``
    with ReLU units after a layer-normalised pair (the sign): both exact at every length
    in real arithmetic, with average-hard attention for local relations. ``mode="relu"``
    uses ReLU ramps and softmax lookups on absolute positions: a plain softmax/ReLU model
    with no relative bias (it loads in TransformerLens), exact for inputs of length
    ≤ ``max_len``.

    The model records, per float type, the longest input the rounding analysis of
    :mod:`crasp_compiler.languages.crasp.rounding` proves it exact for; a program whose float64
    model is exact for no input is refused with an error at the expression that limits
    it, and so is one whose model would store more than ``max_parameters`` numbers
    (default: :func:`~crasp_compiler.model.model.parameter_budget`). A program with an
    empty alphabet (no token tested, none declared) is refused at its output.

    ``reuse`` as in :meth:`~crasp_compiler.assemble.builder.Builder.build`: ``False``
    gives every variable its own residual dimension, so each dimension has one label at
    every stage (for interpretability work); the default takes the smaller model.
    """
    require_alphabet(program)
    lowered = lower_program(program, mode, max_len)
    builder, forms = lowered.builder, lowered.forms
    guarantee = _guarantee(program, lowered.rounding, max_len if mode == "relu" else None)
    readouts = _empty_prefix(program, forms, lowered.at_bos)
    labels = _labels(program, forms, builder)
    model = builder.build(
        {
            name: (readouts[name], "bool" if program[name].sort == Sort.BOOL else "count")
            for name in program.outputs
        },
        guarantee=guarantee,
        accept=program.accept,
        options={"mode": mode, "max_len": max_len},
        source=program.source or "",
        max_parameters=max_parameters,
        filename=program.filename,
        info={
            "language": "C-RASP",
            "class": program.relation_class,
            "dependency_bound": lowered.depth.bound(),
        },
        labels=labels,
        reuse=reuse,
        provenance=Provenance("C-RASP", mode),
    )
    model.info["definitions"] = {
        name: {labels[var]: coef for var, coef in form.items()} for name, form in forms.items()
    }
    return model


def _guarantee(program: Program, rounding: dict[str, Analysis], max_len: int | None) -> Guarantee:
    """Exact at every length (or up to ``max_len``) in real arithmetic, and in each float
    type up to the horizon of the rounding analysis. A program whose float64 model is
    exact for no input is refused, at the expression that limits it."""
    limits = {dtype: horizon(a.checks, dtype, max_len) for dtype, a in rounding.items()}
    limit64, worst = limits["float64"]
    if limit64 < 1 and worst is not None:
        span = getattr(worst.node, "span", None)
        raise CraspError(
            [
                Diagnostic(
                    f"{worst.what} is not provably exact in float64 at any input length: "
                    "the rounding of the values it reads can reach its margin (the model "
                    "would be exact in real arithmetic only)",
                    span,
                    _precision_hint(max_len),
                )
            ],
            program.source,
            program.filename,
        )
    real = (
        "exact at every length in real arithmetic"
        if max_len is None
        else f"exact for inputs of length <= {max_len}"
    )
    floats = "; ".join(
        f"in {dtype} {describe_limit(limit)}" for dtype, (limit, _) in limits.items()
    )
    return Guarantee(
        max_len,
        f"{real} ({floats})",
        {dtype: limit for dtype, (limit, _) in limits.items()},
    )


def _precision_hint(max_len: int | None) -> str:
    if max_len is not None:
        return (
            f"relu ramps of slope 2(N+1) magnify rounding with N = --max-len {max_len}: "
            "use a smaller --max-len, or mode heaviside or layernorm"
        )
    return (
        "large constants and long chains of min, max and conditionals grow the rounding "
        "bound: compare smaller multiples (`A > B` rather than `1000000000 * A > "
        "1000000000 * B + 1`) or shorten the chain"
    )


def _labels(program: Program, forms: dict[str, Form], builder: Builder) -> dict[str, str]:
    """Residual labels: a variable that *is* a definition takes the definition's name,
    any other compiled variable (an internal id such as ``cmp#5``) the source expression
    of the block that writes it, numbered ``[2]``, ``[3]`` … where several share one;
    inputs and features keep their names."""
    names = {}
    for definition in program.definitions:
        form = forms.get(definition.name, Form())
        if len(form) == 1:
            ((var, coef),) = form.items()
            if coef == 1.0 and var not in names and "#" in var:
                names[var] = definition.name
    for block in builder.blocks:
        for var in block.writes:
            if "#" in var and var not in names and block.label:
                names[var] = block.label
    labels: dict[str, str] = {}
    count: Counter[str] = Counter()
    for var in builder.variables:
        label = names.get(var, var)
        count[label] += 1
        labels[var] = label if count[label] == 1 else f"{label} [{count[label]}]"
    return labels


def _empty_prefix(program: Program, forms: dict[str, Form], at_bos: BosValues) -> dict[str, Form]:
    """The readout form of each output, equal to the program's empty-prefix value at BOS.

    The BOS position's residual does not depend on the input (every head is causal, so
    BOS attends only to itself): ``at_bos`` holds each variable's value there, from the
    blocks' ``evaluate``. Booleans are 0 at BOS by construction while the empty prefix may
    make a comparison true, so the readout ``w·x`` of an output gets ``(e − w·x_BOS)·bos``
    added: the ``bos`` variable is 1 at BOS and 0 at every token, so no other position
    changes (and the term adds no rounding there: it is an exact 0).
    """
    empty = interpret(program, [])
    readouts = {}
    for name in program.outputs:
        form = forms[name]
        correction = float(empty.values[name][0]) - at_bos.form(form)
        readouts[name] = form_add((1, form), (correction, {BOS_VAR: 1.0})) if correction else form
    return readouts
