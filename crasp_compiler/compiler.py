"""Compile a checked C-RASP program to a :class:`Model`: lower onto a :class:`Builder`,
build, name the residual dimensions after the definitions, fix the empty prefix."""

from __future__ import annotations

from crasp_compiler.assemble.builder import BOS_VAR
from crasp_compiler.ir.interpret import interpret
from crasp_compiler.ir.nodes import (
    And,
    BoolRef,
    Compare,
    Cond,
    Count,
    CountConst,
    CountRef,
    Max,
    Min,
    Node,
    Not,
    Or,
    Program,
    Sort,
    children,
)
from crasp_compiler.lower.crasp import lower_program
from crasp_compiler.model.model import Guarantee, Model
from crasp_compiler.runtime.numpy_exec import run


def dependency_bound(program: Program) -> int:
    """The fewest layers the program's dependencies allow, when every ``#`` needs an
    attention sublayer after its argument, and every comparison, maximal Boolean
    formula, min, max, conditional and local-count gating needs an MLP sublayer.
    Constants need ``ONE``, an attention output (slot 1)."""
    defs = {d.name: d.expr for d in program.definitions}
    memo: dict[Node, int] = {}

    def next_slot(after: int, attention: bool) -> int:
        slot = after + 1
        return slot if (slot % 2 == 1) == attention else slot + 1

    def formula_leaves(node: Node) -> list[Node]:
        match node:
            case Not(a):
                return formula_leaves(a)
            case And(a, b) | Or(a, b):
                return formula_leaves(a) + formula_leaves(b)
            case BoolRef(name) if isinstance(defs[name], (Not, And, Or)):
                return formula_leaves(defs[name])
        return [node]

    def slot(node: Node) -> int:
        if node in memo:
            return memo[node]
        match node:
            case BoolRef(name) | CountRef(name):
                value = slot(defs[name])
            case CountConst(value=v):
                value = 1 if v else 0
            case Count(arg, offsets):
                value = next_slot(slot(arg), attention=True)
                if offsets is not None:
                    value = next_slot(value, attention=False)
            case Compare(_, a, b):
                value = next_slot(max(slot(a), slot(b), 1), attention=False)
            case And() | Or():
                value = next_slot(max(slot(leaf) for leaf in formula_leaves(node)), attention=False)
            case Min(a, b) | Max(a, b):
                value = next_slot(max(slot(a), slot(b)), attention=False)
            case Cond(c, a, b):
                value = next_slot(max(slot(c), slot(a), slot(b)), attention=False)
            case _:
                value = max((slot(child) for child in children(node)), default=0)
        memo[node] = value
        return value

    deepest = max((slot(defs[name]) for name in program.outputs), default=0)
    return (deepest + 1) // 2


def compile_program(program: Program, mode: str = "heaviside", max_len: int | None = None) -> Model:
    """Compile ``program`` to a transformer whose outputs equal the interpreter's.

    ``mode="heaviside"`` thresholds comparisons with Heaviside units and ``"layernorm"``
    with ReLU units after a layer-normalised pair (the sign): both exact at every length
    in real arithmetic, with average-hard attention for local relations. ``mode="relu"``
    uses ReLU ramps and softmax lookups: a plain softmax/ReLU model, exact for inputs of
    length ≤ ``max_len``.
    """
    builder, forms = lower_program(program, mode, max_len)
    if mode != "relu":
        guarantee = Guarantee(None, "exact at every length in real arithmetic")
    else:
        guarantee = Guarantee(max_len, f"exact for inputs of length <= {max_len}")
    model = builder.build(
        {
            name: (forms[name], "bool" if program[name].sort == Sort.BOOL else "count")
            for name in program.outputs
        },
        guarantee=guarantee,
        accept=program.accept,
        options={"mode": mode, "max_len": max_len},
        source=program.source or "",
        info={
            "language": "C-RASP",
            "class": program.relation_class,
            "dependency_bound": dependency_bound(program),
        },
    )
    residual_vars = builder.variables
    model.residual = _labels(program, forms, residual_vars)
    model.info["definitions"] = {
        name: _label_form(form, residual_vars, model.residual) for name, form in forms.items()
    }
    _fix_empty_prefix(model, program, residual_vars.index(BOS_VAR))
    return model


def _labels(program: Program, forms: dict, residual_vars: list[str]) -> list[str]:
    """Residual labels: a variable that *is* a definition takes the definition's name."""
    names = {}
    for definition in program.definitions:
        form = forms.get(definition.name, {})
        if len(form) == 1:
            ((var, coef),) = form.items()
            if coef == 1.0 and var not in names and "#" in var:
                names[var] = definition.name
    return [names.get(var, var) for var in residual_vars]


def _label_form(form: dict, residual_vars: list[str], labels: list[str]) -> dict[str, float]:
    rename = dict(zip(residual_vars, labels, strict=True))
    return {rename[var]: coef for var, coef in form.items()}


def _fix_empty_prefix(model: Model, program: Program, bos_dim: int) -> None:
    """Make each output equal the program's empty-prefix value at BOS.

    The BOS position's residual is input-independent (it attends only to itself), so
    ``w·x_BOS`` is a constant; adding ``(e − w·x_BOS)`` on the BOS dimension, which is
    1 at BOS and 0 at every token, fixes BOS without touching any other position.
    """
    empty = interpret(program, [])
    bos_outputs = run(model, [[]]).outputs
    for out in model.outputs:
        wanted = float(empty.values[out.name][0])
        out.weights[bos_dim] += wanted - float(bos_outputs[out.name][0, 0])
