"""The C-RASP syntax: :mod:`crasp_compiler.syntax.engine` configured for ``crasp.lark``.

:func:`parse_tree` parses C-RASP text into a Lark tree with source positions, or raises
:class:`~crasp_compiler.errors.CraspError` listing every syntax error.
"""

from __future__ import annotations

import re

from crasp_compiler.syntax import Token, Tree
from crasp_compiler.syntax.engine import Frontend

# Deepest expression accepted. The checker, interpreter, printer and compiler recurse over
# expressions, so a deeper one would crash them with RecursionError; n-ary forms (chained
# comparisons, min/max) count one level per operand, as they become nested binary nodes;
# a chain `a && b && …`, `a || b || …` or `a + b + …` of k operands is built as a balanced
# tree and counts ⌈log2 k⌉.
MAX_DEPTH = 100

# Human names for the grammar's terminals, used in "expected ..." messages.
TERMINAL_NAMES = {
    "NAME": "a name",
    "STRING": 'a token literal such as "a"',
    "QSTRING": 'a token test such as Q_"a"',
    "INT": "an integer",
    "IDX": "a position variable (i, j, k)",
    "HASH": "'#'",
    "EXISTS": "'∃←'",
    "IMPORT": "'#import'",
    "_DEFINE": "'=', ':='",
    "_NL": "end of line",
    "$END": "end of input",
}

# What may end an expression, besides an operator.
_ENDS = {"RPAR": ")", "RSQB": "]", "COMMA": ",", "COLON": ":", "ELSE": "else"}
_OPERATORS = {"PLUS", "STAR", "__ANON_11", "AND", "IF", "QMARK"}


def describe(expected: frozenset[str]) -> str | None:
    """The usual expected sets in words (None: list the terminals)."""
    if {"NAME", "INT", "STRING"} <= expected:
        return 'expected an expression: a name, a token literal such as "a", an integer, `#`, `!` or `(`'
    if {"NAME", "IMPORT"} <= expected:
        return (
            'expected a statement: a definition such as `C = # "a"` or `C(i) := ...`, '
            "or `alphabet`, `accept`, `output`, `predicate`, `#import`"
        )
    if len(expected) > 6 and expected & _OPERATORS:
        ends = ["the end of the statement"] if expected & {"_NL", "$END"} else []
        ends += [repr(c) for name, c in _ENDS.items() if name in expected]
        return "expected an operator or " + " or ".join(ends) if ends else "expected an operator"
    return None


# Token literals: brackets, `//` and U+2212 inside them are text.
LITERALS = (r'"(?:[^"\\\n]|\\.)*"', r"'(?:[^'\\\n]|\\.)*'")

# The start of a statement, seen from the beginning of its line.
STATEMENT_START = re.compile(
    r"[ \t\f\r]*(?:\w+'*[ \t\f\r]*(?:\([ \t\f\r]*[ijk]'*[ \t\f\r]*\)[ \t\f\r]*)?(?::=|=(?!=))"
    r"|(?:alphabet|accept|output|predicate)\b|#import\b)"
)

CRASP_SYNTAX = Frontend(
    package="crasp_compiler.languages.crasp",
    grammar="crasp.lark",
    statement_start=STATEMENT_START,
    max_depth=MAX_DEPTH,
    nary=frozenset({"compare", "min_", "max_"}),
    chains=frozenset({"and_", "or_", "add"}),
    brackets={"(": ")", "[": "]", "{": "}"},
    continuation=frozenset("([{"),
    literals=LITERALS,
    terminal_names=TERMINAL_NAMES,
    quote=repr,
    describe=describe,
    character_messages={
        quote: f"unterminated token literal: no closing {quote} on this line" for quote in "\"'"
    },
    unclosed_before="the next statement, on line {line}",
    depth_message="expression nested too deeply (more than {limit} levels)",
    depth_hint="split it into several definitions",
)


def parse_tree(text: str, filename: str = "<string>") -> Tree[Token]:
    """Parse C-RASP program text; raise :class:`CraspError` listing every syntax error.
    The minus sign − (U+2212) is read as ``-``."""
    return CRASP_SYNTAX.parse(text, filename)
