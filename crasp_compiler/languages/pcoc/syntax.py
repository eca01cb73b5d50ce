"""The PCOC syntax: :mod:`crasp_compiler.syntax.engine` configured for ``pcoc.lark``.

:func:`parse_tree` parses PCOC text into a Lark tree with source positions, or raises
:class:`~crasp_compiler.errors.CraspError` listing every syntax error.
"""

from __future__ import annotations

import re

from crasp_compiler.syntax import Token, Tree
from crasp_compiler.syntax.engine import Frontend

# Deepest nesting accepted below a top-level item (calls count one level per argument, as
# n-ary min/max become nested binary nodes): the builder, checker and interpreter recurse.
MAX_DEPTH = 120

TERMINAL_NAMES = {
    "NAME": "a name",
    "NUMBER": "a number",
    "CMP": "a comparison",
    "_NL": "end of line",
    "$END": "end of input",
}
_OPERATORS = {"PLUS", "MINUS", "STAR", "PERCENT", "DIV", "CMP", "__ANON_1", "AND", "OR", "IF"}
# What may end an expression, besides an operator.
_ENDERS = {
    "RPAR": "`)`",
    "COMMA": "`,`",
    "LBRACE": "`{`",
    "DEFAULT": "`default`",
    "ELSE": "`else`",
    "MARGIN": "`margin`",
    "BOUND": "`bound`",
    "EQUAL": "`=`",
}


def describe(expected: frozenset[str]) -> str | None:
    """The usual expected sets in words (None: list the terminals)."""
    if {"NAME", "NUMBER", "LPAR"} <= expected:
        return "expected an expression: a name, a number, `-`, `not` or `(`"
    if {"ROUND", "FOR", "RBRACE"} <= expected:
        return "expected a statement (`NAME = ...`, `if ...`), `round`, `for` or `}`"
    if {"ROUND", "FOR", "INPUT"} <= expected:
        return "expected a declaration (`input`, `slot`, `output`), `round` or `for`"
    if len(expected & _OPERATORS) >= 4:
        ends = [text for name, text in _ENDERS.items() if name in expected]
        if expected & {"_NL", "SEMICOLON", "RBRACE", "$END"}:
            ends.append("the end of the statement")
        if "__ANON_0" in expected:
            ends.insert(0, "`..`")
        return "expected an operator or " + " or ".join(ends) if ends else "expected an operator"
    return None


CHARACTER_HINTS = {
    "/": "PCOC has no `/`: multiply by a constant (`0.5 * x`); static integer division is `div`",
    "!": "write `not` for negation and `!=` for inequality",
    "&": "write `and`",
    "|": "write `or`",
    ".": "a number needs digits on both sides of its point (`0.5`); a range is `a .. b`",
    "[": "PCOC has no arrays: declare one slot per value",
    "]": "PCOC has no arrays: declare one slot per value",
    ":": "blocks are written with braces: `round { ... }`, `if c { ... }`",
}

# The head of a statement or declaration, or the end of a block, from the start of a line.
STATEMENT_START = re.compile(
    r"[ \t\f\r]*(?:(?!\d)\w+[ \t\f\r]*=(?!=)|(?:input|slot|output|round|for|if)\b|\})"
)

PCOC_SYNTAX = Frontend(
    package="crasp_compiler.languages.pcoc",
    grammar="pcoc.lark",
    statement_start=STATEMENT_START,
    max_depth=MAX_DEPTH,
    nary=frozenset({"call"}),
    brackets={"(": ")", "{": "}"},
    continuation=frozenset("("),
    kept=frozenset("{}"),
    terminal_names=TERMINAL_NAMES,
    quote=lambda text: f"`{text}`",
    describe=describe,
    character_hints=CHARACTER_HINTS,
    comment_note="note: `//` starts a comment; integer division is written `div`",
    unclosed_before="line {line}",
    depth_message="nested too deeply (more than {limit} levels)",
    depth_hint="split the expression over several statements",
)


def parse_tree(text: str, filename: str = "<program>") -> Tree[Token]:
    """The Lark tree of PCOC text; raise :class:`CraspError` listing every syntax error.
    The minus sign − (U+2212) is read as ``-``."""
    return PCOC_SYNTAX.parse(text, filename)
