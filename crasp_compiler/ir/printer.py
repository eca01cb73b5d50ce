"""Print a program as canonical `.cr`-style text that parses back to the same IR.

Every compound sub-expression is parenthesised, so the text does not depend on
precedence. Local counts use the binder form, whose position variable changes with
nesting depth (i, j, k, i', ...), and periodic atoms name the variable in scope.
"""

from __future__ import annotations

import json

from crasp_compiler.ir.nodes import (
    Add,
    And,
    BoolConst,
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
    Periodic,
    Program,
    Scale,
    Sub,
    TokenIs,
)


def _var(depth: int) -> str:
    return "ijk"[depth % 3] + "'" * (depth // 3)


def format_expr(node: Node, depth: int = 0) -> str:
    """Render one expression evaluated at the position variable of ``depth``."""

    def sub(n: Node) -> str:
        return format_expr(n, depth)

    match node:
        case TokenIs(symbol):
            return json.dumps(symbol, ensure_ascii=False)
        case BoolConst(value):
            return "true" if value else "false"
        case Periodic(modulus, residues):
            var = _var(depth)
            atoms = [f"{var} % {modulus} == {r}" for r in sorted(residues)]
            return atoms[0] if len(atoms) == 1 else "(" + " || ".join(atoms) + ")"
        case Not(arg):
            return f"!{sub(arg)}" if _atomic(arg) else f"!({sub(arg)})"
        case And(a, b):
            return f"({sub(a)} && {sub(b)})"
        case Or(a, b):
            return f"({sub(a)} || {sub(b)})"
        case Compare(op, a, b):
            return f"({sub(a)} {op} {sub(b)})"
        case BoolRef(name) | CountRef(name):
            return name
        case Count(arg, None):
            body = format_expr(arg, depth)
            return f"# {body}" if _self_delimited(arg) else f"# ({body})"
        case Count(arg, offsets):
            outer, inner = _var(depth), _var(depth + 1)
            parts = [
                f"{inner} == {outer} - {a}"
                if a == b
                else f"{inner} >= {outer} - {b} && {inner} <= {outer} - {a}"
                for a, b in offset_runs(offsets)
            ]
            return f"#[{inner} <= {outer}, {_balanced(parts)}] ({format_expr(arg, depth + 1)})"
        case CountConst(value):
            return str(value)
        case Add(a, b):
            return f"({sub(a)} + {sub(b)})"
        case Sub(a, b):
            return f"({sub(a)} - {sub(b)})"
        case Scale(factor, arg):
            return f"({factor} * {sub(arg)})"
        case Min(a, b):
            return f"min({sub(a)}, {sub(b)})"
        case Max(a, b):
            return f"max({sub(a)}, {sub(b)})"
        case Cond(c, a, b):
            return f"({sub(a)} if {sub(c)} else {sub(b)})"
    raise TypeError(f"not an IR node: {node!r}")  # pragma: no cover


def _self_delimited(node: Node) -> bool:
    """Whether the node's text already binds as one unary operand."""
    return _atomic(node) or isinstance(node, (Not, And, Or, Compare))


def _atomic(node: Node) -> bool:
    return isinstance(node, (TokenIs, BoolConst, BoolRef, CountRef))


def format_program(program: Program) -> str:
    """The whole program as text: alphabet, definitions, acceptance and outputs."""
    lines = []
    if program.alphabet:
        lines.append(
            "alphabet " + ", ".join(json.dumps(s, ensure_ascii=False) for s in program.alphabet)
        )
    lines.extend(f"{d.name} = {format_expr(d.expr)}" for d in program.definitions)
    if program.accept is not None:
        lines.append(f"accept {program.accept}")
    others = [name for name in program.outputs if name != program.accept]
    if others:
        lines.append("output " + ", ".join(others))
    return "\n".join(lines) + "\n"


def offset_runs(offsets: frozenset[int] | list[int]) -> list[tuple[int, int]]:
    """The maximal runs ``(a, b)`` of consecutive offsets, in order."""
    runs: list[tuple[int, int]] = []
    for offset in sorted(offsets):
        if runs and runs[-1][1] == offset - 1:
            runs[-1] = (runs[-1][0], offset)
        else:
            runs.append((offset, offset))
    return runs


def _balanced(parts: list[str]) -> str:
    """``a || b || …`` grouped as a balanced tree, so that it nests only log2(n) deep
    (the parser refuses expressions nested more than 100 levels)."""
    if len(parts) == 1:
        return parts[0]
    half = len(parts) // 2
    return f"({_balanced(parts[:half])}) || ({_balanced(parts[half:])})"
