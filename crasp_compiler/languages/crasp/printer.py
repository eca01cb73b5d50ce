"""Print a program as canonical `.cr`-style text that parses back to the same IR.

Sub-expressions are parenthesised only where the precedence of the surface syntax needs
it (``a + b + c``, ``!!x``, ``x * 2 * 3``), so the text nests no deeper than the program
it came from and stays within the parser's nesting limit. Local counts use the binder
form, whose position variable changes with nesting depth (i, j, k, i', ...), and
periodic atoms name the variable in scope.
"""

from __future__ import annotations

import json

from crasp_compiler.languages.crasp.nodes import (
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

# Precedence levels of the surface syntax, loosest first: an operand printed at a lower
# level than its position needs is parenthesised.
COND, OR, AND, CMP, SUM, PROD, UNARY, ATOM = range(8)


def _var(depth: int) -> str:
    return "ijk"[depth % 3] + "'" * (depth // 3)


def format_expr(node: Node, depth: int = 0) -> str:
    """Render one expression evaluated at the position variable of ``depth``."""
    return _format(node, depth)[0]


def _format(node: Node, depth: int) -> tuple[str, int]:
    """The text of ``node`` and its precedence level."""

    def at(n: Node, level: int) -> str:
        text, own = _format(n, depth)
        return text if own >= level else f"({text})"

    match node:
        case TokenIs(symbol):
            return json.dumps(symbol, ensure_ascii=False), ATOM
        case BoolConst(value):
            return ("true" if value else "false"), ATOM
        case Periodic(modulus, residues):
            var = _var(depth)
            atoms = [f"{var} % {modulus} == {r}" for r in sorted(residues)]
            if len(atoms) > 1:
                return "(" + " || ".join(atoms) + ")", ATOM
            return atoms[0], CMP  # `# (i % 2 == 0)`: the atom would take a following `<=`
        case BoolRef(name) | CountRef(name):
            return name, ATOM
        case CountConst(value):
            return str(value), (UNARY if value < 0 else ATOM)
        case Not(arg):
            return f"!{at(arg, UNARY)}", UNARY
        case And(a, b):
            return f"{at(a, AND)} && {at(b, CMP)}", AND
        case Or(a, b):
            return f"{at(a, OR)} || {at(b, AND)}", OR
        case Compare(op, a, b):
            return f"{at(a, SUM)} {op} {at(b, SUM)}", CMP
        case Count(arg, None):
            return f"# {at(arg, UNARY)}", UNARY
        case Count(arg, offsets):
            outer, inner = _var(depth), _var(depth + 1)
            parts = [
                f"{inner} == {outer} - {a}"
                if a == b
                else f"{inner} >= {outer} - {b} && {inner} <= {outer} - {a}"
                for a, b in offset_runs(offsets)
            ]
            body, level = _format(arg, depth + 1)
            body = body if level == ATOM else f"({body})"
            # the binder's body would extend over a following `&&` or `||`: as an operand
            # the whole count is parenthesised (the lowest level)
            return f"#[{inner} <= {outer}, {_balanced(parts)}] {body}", COND
        case Add(a, b):
            return f"{at(a, SUM)} + {at(b, PROD)}", SUM
        case Sub(a, b):
            return f"{at(a, SUM)} - {at(b, PROD)}", SUM
        case Scale(factor, arg) if _constant(arg):  # `c * k` would be one constant c·k
            return f"{factor} * {at(arg, UNARY)}", PROD
        case Scale(factor, arg):  # the factor last: `x * 2 * 3` nests without parentheses
            return f"{at(arg, PROD)} * {factor}", PROD
        case Min(a, b):
            return f"min({format_expr(a, depth)}, {format_expr(b, depth)})", ATOM
        case Max(a, b):
            return f"max({format_expr(a, depth)}, {format_expr(b, depth)})", ATOM
        case Cond(c, a, b):
            return f"{at(a, OR)} if {at(c, OR)} else {at(b, COND)}", COND
    raise TypeError(f"not an IR node: {node!r}")  # pragma: no cover


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


def _constant(node: Node) -> bool:
    """Whether ``node`` prints as an integer literal or a product of them."""
    return isinstance(node, CountConst) or (isinstance(node, Scale) and _constant(node.arg))


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
