"""Compile a checked Tally program to a :class:`Model`: counting heads, then one MLP of
Heaviside comparisons (one layer in all).

*Attention* (cookbook ``attention.causal_average``, one uniform causal head per atom the
program reads): ``count(a) = #a/(t + 1)`` averages the token test of a, ``length =
t/(t + 1)`` the ``nonbos`` indicator, ``ONE = 1/(t + 1)`` the BOS indicator (BOS is one
of the t + 1 averaged positions).

*MLP*: a rule whose form is Z (:func:`~tests.support.tally.nodes.threshold`) reads
``Z/(t + 1) = Σ_a α_a·count(a) + α_L·length + β·ONE``, a linear form, and thresholds it
with Heaviside units ``H(x) = 1[x ≥ 0]`` half a unit from the integers on either side::

    Z ≥ 0:  H(Z + 1/2)                    Z > 0:  H(Z − 1/2)
    Z = 0:  H(Z + 1/2) + H(−Z + 1/2) − 1  Z ≠ 0:  H(Z − 1/2) + H(−Z − 1/2)

(each ``H(s·Z + c₀)`` computed as ``H((s·Z + c₀)/(t + 1))``, the same sign as t + 1 > 0).
Exact at every length in real arithmetic; in floats up to the horizons of
:mod:`tests.support.tally.rounding`, which the model records. At BOS (t = 0) every count
and ``length`` is 0 and ONE is 1, so each unit sees the empty prefix's Z: the outputs
there are the empty prefix's values, with no correction.
"""

from __future__ import annotations

from fractions import Fraction

from crasp_compiler.assemble.builder import Builder
from crasp_compiler.cookbook import Exactness, FFNBlock, Form, Unit, attention, form_add, var
from crasp_compiler.model.model import Guarantee, Model, Provenance, describe_limit
from tests.support.tally.declaration import DECLARATION
from tests.support.tally.nodes import Program, format_rule, threshold
from tests.support.tally.rounding import MAX_CLAIM, UNIT_ROUNDOFF, horizon

ONE = "1/(t+1)"
# test -> its units H(s·Z + c₀) as (s, c₀), and the constant added to their sum
UNITS = {
    "ge": ((1, Fraction(1, 2)),),
    "gt": ((1, Fraction(-1, 2)),),
    "eq": ((1, Fraction(1, 2)), (-1, Fraction(1, 2))),
    "ne": ((1, Fraction(-1, 2)), (-1, Fraction(-1, 2))),
}
CONSTANTS = {"eq": -1.0}
COMPARISON = Exactness("exact (Heaviside units, integer thresholds at ±1/2)")


def horizons(program: Program) -> dict[str, int]:
    """Per float type, the longest input on which every unit of ``program``'s model is
    decided right (:func:`~tests.support.tally.rounding.horizon`): a unit of a form with
    weights α on the counts and length reads those terms and ONE."""
    limits = dict.fromkeys(UNIT_ROUNDOFF, MAX_CLAIM)
    for rule in program.rules:
        form = threshold(rule, program.margin, program.symbols)
        terms = len(form.counts) + bool(form.length) + 1
        slope = max((abs(c) for _, c in form.counts), default=0) + abs(form.length)
        for sign, half in UNITS[form.test]:
            constant = sign * form.constant + half
            for dtype, limit in limits.items():
                limits[dtype] = min(limit, horizon(terms, slope, constant, dtype))
    return limits


def compile_program(
    program: Program, *, reuse: bool | None = None, max_parameters: int | None = None
) -> Model:
    """Exact weights for ``program`` (module doc); ``reuse`` and ``max_parameters`` as in
    :meth:`~crasp_compiler.assemble.builder.Builder.build`."""
    builder = Builder(program.symbols)
    heads: dict[str, Form] = {}

    def average(name: str, value: Form) -> Form:
        if name not in heads:
            heads[name] = builder.add(attention.causal_average(value, name, label=name))
        return heads[name]

    one = average(ONE, builder.bos)
    for rule in program.rules:
        form = threshold(rule, program.margin, program.symbols)
        z = form_add(*((c, average(f"count({a})", builder.token(a))) for a, c in form.counts))
        if form.length:
            z = z + form.length * average("length", builder.nonbos)
        units = [
            Unit(form_add((sign, z), (float(sign * form.constant + half), one)), 0.0, "heaviside")
            for sign, half in UNITS[form.test]
        ]
        bit = f"rule:{rule.name}"
        constants = {bit: CONSTANTS[form.test]} if form.test in CONSTANTS else {}
        outputs = {bit: dict.fromkeys(range(len(units)), 1.0)}
        builder.add(FFNBlock(units, outputs, COMPARISON, format_rule(rule), constants))
    limits = horizons(program)
    floats = "; ".join(f"in {dtype} {describe_limit(limit)}" for dtype, limit in limits.items())
    model = builder.build(
        {rule.name: (var(f"rule:{rule.name}"), "bool") for rule in program.rules},
        guarantee=Guarantee(None, f"exact at every length in real arithmetic ({floats})", limits),
        accept=program.accept,
        options={"margin": program.margin},
        source=program.source,
        info={"rules": len(program.rules)},
        max_parameters=max_parameters,
        filename=program.filename,
        labels={f"rule:{rule.name}": rule.name for rule in program.rules},
        reuse=reuse,
        provenance=Provenance(DECLARATION.title, DECLARATION.modes[0]),
    )
    model.info["definitions"] = {rule.name: {rule.name: 1.0} for rule in program.rules}
    return model
