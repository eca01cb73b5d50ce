"""Parse C-RASP text into a Lark tree whose nodes carry source positions.

Syntax errors never escape as Lark exceptions: each becomes a :class:`Diagnostic`.
After an error the offending line is blanked and parsing resumes, so every syntax error
in a file is reported at once (up to ``MAX_ERRORS``).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from crasp_compiler.errors import CraspError, Diagnostic, Span
from crasp_compiler.syntax.lark_tools import BracketContinuation, accepted_terminals

MAX_ERRORS = 20
# Deepest expression accepted. The checker, interpreter, printer and compiler recurse over
# expressions, so a deeper one would crash them with RecursionError; n-ary forms (chained
# comparisons, min/max) count one level per operand, as they become nested binary nodes.
MAX_DEPTH = 100
_NARY = {"compare", "min_", "max_"}

_OPEN = {"LPAR", "LSQB", "LBRACE"}
_CLOSE = {"RPAR", "RSQB", "RBRACE"}

# Human names for the grammar's terminals, used in "expected ..." messages.
_TERMINAL_NAMES = {
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


@cache
def _parser() -> Lark:
    grammar = (
        resources.files("crasp_compiler.languages.crasp").joinpath("crasp.lark").read_text("utf-8")
    )
    return Lark(
        grammar,
        parser="lalr",
        propagate_positions=True,
        postlex=BracketContinuation(_OPEN, _CLOSE),
        maybe_placeholders=False,
    )


_ENDS = {"RPAR": ")", "RSQB": "]", "COMMA": ",", "COLON": ":", "ELSE": "else"}
_SHOWN_TOKEN = 24  # longest token text quoted in full in a message


def _describe_expected(expected: set[str], parser: Lark) -> str:
    if {"NAME", "INT", "STRING"} <= expected:
        return 'expected an expression: a name, a token literal such as "a", an integer, `#`, `!` or `(`'
    if {"NAME", "IMPORT"} <= expected:
        return (
            'expected a statement: a definition such as `C = # "a"` or `C(i) := ...`, '
            "or `alphabet`, `accept`, `output`, `predicate`, `#import`"
        )
    if len(expected) > 6 and expected & {"PLUS", "STAR", "__ANON_11", "AND", "IF", "QMARK"}:
        ends = ["the end of the statement"] if expected & {"_NL", "$END"} else []
        ends += [repr(c) for name, c in _ENDS.items() if name in expected]
        return "expected an operator or " + " or ".join(ends) if ends else "expected an operator"
    names = []
    for name in sorted(expected):
        if name in _TERMINAL_NAMES:
            names.append(_TERMINAL_NAMES[name])
            continue
        try:
            pattern = parser.get_terminal(name).pattern
        except KeyError:
            names.append(name)
            continue
        if pattern.type == "str":
            names.append(repr(pattern.value))
        else:
            names.append(name.lower())
    unique = list(dict.fromkeys(part for name in names for part in name.split(", ")))
    if len(unique) > 8:
        unique = [*unique[:8], "..."]
    if len(unique) > 1:
        return "expected " + ", ".join(unique[:-1]) + " or " + unique[-1]
    return "expected " + unique[0] if unique else ""


def _shown(text: str) -> str:
    if len(text) > _SHOWN_TOKEN:
        text = text[: _SHOWN_TOKEN - 1] + "…"
    return repr(text)


# What matters for bracket matching: comments and token literals (skipped), brackets, newlines.
_BRACKETS = re.compile(r"""//[^\n]*|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|[()\[\]{}\n]""")


def _unclosed(
    text: str, line: int, column: int, earlier: bool = True
) -> tuple[str, int, int] | None:
    """The innermost bracket still open before ``line:column`` (if ``earlier``: only one
    opened on an earlier line), as (bracket, line, column).

    Newlines inside brackets continue a statement, so a missing `)` shows up only on a
    later line; pointing back at the bracket makes that error findable.
    """
    stack: list[tuple[str, int, int]] = []
    row, row_start = 1, 0
    for match in _BRACKETS.finditer(text):
        char, col = match.group(), match.start() - row_start + 1
        if (row, col) >= (line, column):
            break
        if char == "\n":
            row, row_start = row + 1, match.end()
        elif char in "([{":
            stack.append((char, row, col))
        elif char in ")]}" and stack:
            stack.pop()
    if stack and (stack[-1][1] < line or not earlier):
        return stack[-1]
    return None


# The start of a statement, seen from the beginning of its line.
_STATEMENT_START = re.compile(
    r"[ \t\f\r]*(?:\w+'*[ \t\f\r]*(?:\([ \t\f\r]*[ijk]'*[ \t\f\r]*\)[ \t\f\r]*)?(?::=|=(?!=))"
    r"|(?:alphabet|accept|output|predicate)\b|#import\b)"
)


def _diagnostic(err: UnexpectedInput, parser: Lark, text: str) -> tuple[Diagnostic, int, int]:
    """The diagnostic for a Lark error, and the range of lines to blank before re-parsing."""
    line, column = max(err.line, 1), max(err.column, 1)
    expected = accepted_terminals(getattr(err, "state", None))
    if isinstance(err, UnexpectedToken):
        token = err.token
        if token.type == "$END":
            # Lark places the end of input on the last token; point just after it.
            what = "unexpected end of input"
            line = max(getattr(token, "end_line", None) or line, 1)
            column = max(getattr(token, "end_column", None) or column, 1)
        elif token.type == "_NL":
            what = "unexpected end of line"
            # Point just after the line's text, not at a `\r` of a CRLF ending.
            column = min(column, len(text.split("\n")[line - 1].rstrip("\r")) + 1)
        else:
            what = f"unexpected {_shown(str(token))}"
        width = max(1, len(str(token))) if token.type not in ("$END", "_NL") else 1
        span = Span(line, column, line, column + width)
        hint = _describe_expected(expected or set(err.expected), parser)
    elif isinstance(err, UnexpectedCharacters):
        char = err.char
        if char in "\"'":
            what = f"unterminated token literal: no closing {char} on this line"
        else:
            what = f"unexpected character {char!r}"
        span = Span(line, column, line, column + 1)
        hint = _describe_expected(expected or set(err.allowed or ()), parser)
    else:  # UnexpectedEOF is not raised by the LALR parser; kept for safety
        span = Span(line, column, line, column + 1)
        return Diagnostic(str(err).splitlines()[0], span), line, line
    opened = _unclosed(text, line, column)
    if opened is None:
        return Diagnostic(what, span, hint or None), line, line
    bracket, at_line, at_column = opened
    closer = {"(": ")", "[": "]", "{": "}"}[bracket]
    source_line = text.split("\n")[line - 1]
    if not source_line[: column - 1].strip() and _STATEMENT_START.match(source_line):
        # A new statement while a bracket is open: the bracket was never closed (newlines
        # inside brackets continue a statement, so the parser only notices here).
        return (
            Diagnostic(
                f"{bracket!r} is never closed",
                Span(at_line, at_column, at_line, at_column + 1),
                f"expected {closer!r} before the next statement, on line {line}",
            ),
            at_line,
            line - 1,
        )
    if closer in source_line[column - 1 :]:
        return Diagnostic(what, span, hint or None), line, line  # closed on this line after all
    hint = (hint + "; " if hint else "") + (
        f"note the {bracket!r} at line {at_line}, column {at_column}"
        f" is still open: is a {closer!r} missing?"
    )
    return Diagnostic(what, span, hint), line, line


def _blank_lines(text: str, first: int, last: int) -> str:
    lines = text.split("\n")
    for line in range(max(first, 1), min(last, len(lines)) + 1):
        lines[line - 1] = " " * len(lines[line - 1])
    return "\n".join(lines)


# U+2212 MINUS SIGN, as the docs print it, outside token literals (one character for one,
# so every column stays where it is).
_MINUS_OUTSIDE_LITERALS = re.compile(r"(\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*')|\u2212")


def _ascii_minus(text: str) -> str:
    return _MINUS_OUTSIDE_LITERALS.sub(lambda m: m.group(1) or "-", text)


def parse_tree(text: str, filename: str = "<string>") -> Tree[Token]:
    """Parse program text; raise :class:`CraspError` listing every syntax error. The minus
    sign − (U+2212) is read as ``-``."""
    parser = _parser()
    diagnostics: list[Diagnostic] = []
    blanked_lines: set[int] = set()
    current = _ascii_minus(text)
    while True:
        try:
            tree = parser.parse(current)
        except UnexpectedInput as err:
            diag, first, last = _diagnostic(err, parser, current)
            if diag in diagnostics or len(diagnostics) >= MAX_ERRORS:
                break
            at_end = isinstance(err, UnexpectedToken) and err.token.type == "$END"
            if at_end and blanked_lines:
                opened = _unclosed(current, diag.span.line, diag.span.column, earlier=False)
                if opened is not None and any(n > opened[1] for n in blanked_lines):
                    break  # caused by recovery: the closing bracket was on a blanked line
            diagnostics.append(diag)
            if at_end:
                break
            blanked_lines.update(range(first, last + 1))
            blanked = _blank_lines(current, first, last)
            if blanked == current:
                break
            current = blanked
            continue
        break
    if not diagnostics:
        diagnostics = _too_deep(tree)
    if diagnostics:
        diagnostics.sort(key=lambda d: (d.span.line, d.span.column) if d.span else (0, 0))
        raise CraspError(diagnostics, text, filename)
    return tree


def _too_deep(tree: Tree) -> list[Diagnostic]:
    """One diagnostic per statement nested deeper than ``MAX_DEPTH`` (iteratively: a
    recursive walk would itself overflow)."""
    diagnostics = []
    for statement in tree.children:
        if not isinstance(statement, Tree):
            continue
        stack = [(statement, 0)]
        while stack:
            node, depth = stack.pop()
            if depth > MAX_DEPTH:
                meta = node.meta
                line, column = getattr(meta, "line", 1), getattr(meta, "column", 1)
                diagnostics.append(
                    Diagnostic(
                        f"expression nested too deeply (more than {MAX_DEPTH} levels)",
                        Span(line, column, line, column + 1),
                        "split it into several definitions",
                    )
                )
                break
            step = 1 + (len(node.children) if node.data in _NARY else 0)
            stack.extend((c, depth + step) for c in node.children if isinstance(c, Tree))
    return diagnostics
