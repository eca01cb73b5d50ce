"""Print a program as canonical `.cr`-style text that parses back to the same IR.

Sub-expressions are parenthesised only where the precedence of the surface syntax needs
it (``a + b + c``, ``!!x``, ``x * 2 * 3``), so the text nests no deeper than the program
it came from and stays within the parser's nesting limit. A chain of ``&&``, ``||`` or
``+`` that the parser would build as this very balanced tree (every parsed chain) prints
flat, ``a && b && c && d``; any other shape prints as two operands, each in parentheses
when it is itself of the chain's operator. Local counts use the binder form, whose
position variable changes with nesting depth (i, j, k, i', ...), and periodic atoms name
the variable in scope, as few as the residues allow (ranges, or the complement's). The
walk is iterative: no expression is too deep to print.
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
    children,
)

# Precedence levels of the surface syntax, loosest first: an operand printed at a lower
# level than its position needs is parenthesised.
COND, OR, AND, CMP, SUM, PROD, UNARY, ATOM = range(8)
# The chains the parser builds as balanced trees, and the level of each.
_CHAINS: dict[type, tuple[int, str]] = {And: (AND, "&&"), Or: (OR, "||"), Add: (SUM, "+")}


def _var(depth: int) -> str:
    return "ijk"[depth % 3] + "'" * (depth // 3)


def _minus(var: str, offset: int) -> str:
    """``var - offset``, or ``var`` alone for offset 0."""
    return f"{var} - {offset}" if offset else var


def format_expr(node: Node, depth: int = 0) -> str:
    """Render one expression evaluated at the position variable of ``depth``."""
    return _format(node, depth)[0]


def _format(root: Node, depth: int) -> tuple[str, int]:
    """The text of ``root`` and its precedence level, made bottom-up with an explicit
    stack (:meth:`_Chains.operands` and :func:`_operands` say what each node prints,
    :func:`_join` how)."""
    chains = _Chains()
    done: dict[tuple[int, int], tuple[str, int]] = {}
    stack: list[tuple[Node, int, list[tuple[Node, int]] | None]] = [(root, depth, None)]
    while stack:
        node, at, operands = stack.pop()
        if operands is not None:
            parts = [done[(id(n), d)] for n, d in operands]
            lead = bool(operands) and type(operands[0][0]) is type(node)
            done[(id(node), at)] = _join(node, at, parts, lead)
        elif (id(node), at) not in done:
            operands = _operands(node, at, chains)
            stack.append((node, at, operands))
            stack.extend((n, d, None) for n, d in operands)
    return done[(id(root), depth)]


def _operands(node: Node, depth: int, chains: _Chains) -> list[tuple[Node, int]]:
    """The sub-expressions ``node`` prints, each with its position variable's depth."""
    if type(node) in _CHAINS:
        return [(part, depth) for part in chains.operands(node)]
    if isinstance(node, Count) and node.offsets is not None:
        return [(node.arg, depth + 1)]
    if isinstance(node, Scale) and _constant(node.arg):
        return []
    return [(child, depth) for child in children(node)]


def _join(node: Node, depth: int, parts: list[tuple[str, int]], lead: bool) -> tuple[str, int]:
    """The text of ``node`` and its level from the texts and levels of its operands
    (``lead``: the first one is of the same chain operator)."""

    def at(n: int, level: int) -> str:
        text, own = parts[n]
        return text if own >= level else f"({text})"

    match node:
        case TokenIs(symbol):
            return json.dumps(symbol, ensure_ascii=False), ATOM
        case BoolConst(value):
            return ("true" if value else "false"), ATOM
        case Periodic(modulus, residues):
            return _periodic(_var(depth), modulus, residues)
        case BoolRef(name) | CountRef(name):
            return name, ATOM
        case CountConst(value):
            return str(value), (UNARY if value < 0 else ATOM)
        case Not():
            return f"!{at(0, UNARY)}", UNARY
        case And() | Or() | Add():
            level, op = _CHAINS[type(node)]
            # the first operand at the chain's level (`a - b + c`), unless it is itself of
            # the chain's operator (then it is one operand); the others one level tighter
            first = at(0, level + 1 if lead else level)
            rest = [at(n, level + 1) for n in range(1, len(parts))]
            return f" {op} ".join([first, *rest]), level
        case Compare(op):
            return f"{at(0, SUM)} {op} {at(1, SUM)}", CMP
        case Count(_, None):
            return f"# {at(0, UNARY)}", UNARY
        case Count(_, frozenset() as offsets):
            outer, inner = _var(depth), _var(depth + 1)
            relation = [
                f"{inner} == {_minus(outer, a)}"
                if a == b
                else f"{inner} >= {_minus(outer, b)} && {inner} <= {_minus(outer, a)}"
                for a, b in offset_runs(offsets)
            ]
            # the binder's body would extend over a following `&&` or `||`: as an operand
            # the whole count is parenthesised (the lowest level)
            return f"#[{inner} <= {outer}, {_balanced(relation)}] {at(0, ATOM)}", COND
        case Sub():
            return f"{at(0, SUM)} - {at(1, PROD)}", SUM
        case Scale(factor, arg) if _constant(arg):  # `c * k` would be one constant c·k
            return f"{factor} * {_format(arg, depth)[0]}", PROD
        case Scale(factor):  # the factor last: `x * 2 * 3` nests without parentheses
            return f"{at(0, PROD)} * {factor}", PROD
        case Min() | Max():
            return f"{type(node).__name__.lower()}({parts[0][0]}, {parts[1][0]})", ATOM
        case Cond():
            return f"{at(1, OR)} if {at(0, OR)} else {at(2, COND)}", COND
    raise TypeError(f"not an IR node: {node!r}")  # pragma: no cover


class _Chains:
    """What the chains of an expression print (:meth:`operands`), from the number of
    operands of each node's maximal subtree of its operator and whether that subtree is
    the balanced tree the parser builds, both by node identity."""

    def __init__(self) -> None:
        self.width: dict[int, int] = {}
        self.balanced: dict[int, bool] = {}

    def operands(self, node: Node) -> list[Node]:
        """The leaves of the maximal subtree of ``node``'s operator at ``node`` when it is
        balanced, else the two children of ``node``."""
        self._measure(node)
        if not self.balanced[id(node)]:
            return list(children(node))
        leaves: list[Node] = []
        stack = [node]
        while stack:
            top = stack.pop()
            if type(top) is type(node):
                stack.extend(reversed(children(top)))
            else:
                leaves.append(top)
        return leaves

    def _measure(self, root: Node) -> None:
        kind = type(root)
        stack: list[tuple[Node, bool]] = [(root, False)]
        while stack:
            node, ready = stack.pop()
            if id(node) in self.width:
                continue
            parts = [child for child in children(node) if type(child) is kind]
            if not ready:
                stack.append((node, True))
                stack.extend((child, False) for child in parts)
                continue
            left, right = children(node)
            widths = [self.width[id(c)] if type(c) is kind else 1 for c in (left, right)]
            self.width[id(node)] = sum(widths)
            self.balanced[id(node)] = widths[0] == (sum(widths) + 1) // 2 and all(
                self.balanced[id(c)] for c in parts
            )


def _periodic(var: str, modulus: int, residues: frozenset[int]) -> tuple[str, int]:
    """``var % modulus`` in ``residues``: the residues one by one, ranges of three or more
    as ``>=``/``<=``; or, when that takes fewer comparisons, the negation of the other
    residues (``i % 100 != 4``). One comparison is an atom of its own (level ``CMP``)."""
    term = f"{var} % {modulus}"
    inside = _ranges(term, modulus, offset_runs(residues))
    others = offset_runs(frozenset(range(modulus)) - residues)
    outside = _ranges(term, modulus, others)
    if _size(outside) < _size(inside):
        if len(others) == 1:
            a, b = others[0]
            if a == b:
                return f"{term} != {a}", CMP
            if a == 0 or b == modulus - 1:
                return (f"{term} > {b}" if a == 0 else f"{term} < {a}"), CMP
            return f"({term} < {a} || {term} > {b})", ATOM
        return "!(" + " || ".join(outside) + ")", UNARY
    if len(inside) == 1 and _size(inside) == 1:
        return inside[0], CMP  # `# (i % 2 == 0)`: the atom would take a following `<=`
    return "(" + " || ".join(inside) + ")", ATOM


def _ranges(term: str, modulus: int, runs: list[tuple[int, int]]) -> list[str]:
    """The disjuncts of ``term`` in the ``runs`` of residues."""
    parts: list[str] = []
    for a, b in runs:
        if b - a < 2:
            parts.extend(f"{term} == {r}" for r in range(a, b + 1))
        elif a == 0 or b == modulus - 1:
            parts.append(f"{term} <= {b}" if a == 0 else f"{term} >= {a}")
        else:
            parts.append(f"{term} >= {a} && {term} <= {b}")
    return parts


def _size(parts: list[str]) -> int:
    """The comparisons in ``parts``."""
    return sum(part.count(" && ") + 1 for part in parts)


def format_program(program: Program) -> str:
    """The whole program as text: alphabet, definitions, acceptance and outputs."""
    lines = []
    if program.alphabet:
        lines.append("alphabet " + ", ".join(_alphabet_items(program)))
    lines.extend(f"{d.name} = {format_expr(d.expr)}" for d in program.definitions)
    if program.accept is not None:
        lines.append(f"accept {program.accept}")
    # the acceptance output is first unless `output` names it later
    others = list(program.outputs)
    if program.accept is not None and others[:1] == [program.accept]:
        others = others[1:]
    if others:
        lines.append("output " + ", ".join(others))
    return "\n".join(lines) + "\n"


def _alphabet_items(program: Program) -> list[str]:
    """The alphabet as declared: quoted symbols, and ``range A..B`` for each run of
    consecutive numbers declared as a stand-in range."""
    stand_in = set(program.stand_in)
    items: list[str] = []
    run: list[int] = []

    def close() -> None:
        if run:
            items.append(f"range {run[0]}..{run[-1]}")
            run.clear()

    for symbol in program.alphabet:
        if symbol in stand_in:
            if run and int(symbol) != run[-1] + 1:
                close()
            run.append(int(symbol))
        else:
            close()
            items.append(json.dumps(symbol, ensure_ascii=False))
    close()
    return items


def _constant(node: Node) -> bool:
    """Whether ``node`` prints as an integer literal or a product of them."""
    while isinstance(node, Scale):
        node = node.arg
    return isinstance(node, CountConst)


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
