"""Parse C-RASP text into a Lark tree whose nodes carry source positions.

Syntax errors never escape as Lark exceptions: each becomes a :class:`Diagnostic`.
After an error the offending line is blanked and parsing resumes, so every syntax error
in a file is reported at once (up to ``MAX_ERRORS``).
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from crasp_compiler.errors import CraspError, Diagnostic, Span

MAX_ERRORS = 20

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
    "_NL": "end of line",
    "$END": "end of input",
}


class _ParenContinuation:
    """Post-lexer: newlines inside (), [] or {} continue the statement."""

    always_accept = ("_NL",)

    def process(self, stream):
        depth = 0
        for token in stream:
            if token.type in _OPEN:
                depth += 1
            elif token.type in _CLOSE:
                depth = max(0, depth - 1)
            elif token.type == "_NL" and depth > 0:
                continue
            yield token


@cache
def _parser() -> Lark:
    grammar = resources.files("crasp_compiler.grammars").joinpath("crasp.lark").read_text("utf-8")
    return Lark(
        grammar,
        parser="lalr",
        propagate_positions=True,
        postlex=_ParenContinuation(),
        maybe_placeholders=False,
    )


def _describe_expected(expected: set[str], parser: Lark) -> str:
    if {"NAME", "INT", "STRING"} <= expected:
        return 'expected an expression: a name, a token literal such as "a", an integer, `#`, `!` or `(`'
    if expected & {"_NL", "$END"} and len(expected) > 4:
        return "expected an operator or the end of the statement"
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
    unique = list(dict.fromkeys(names))
    if len(unique) > 8:
        unique = [*unique[:8], "..."]
    return "expected " + ", ".join(unique)


def _diagnostic(err: UnexpectedInput, parser: Lark) -> Diagnostic:
    line, column = max(err.line, 1), max(err.column, 1)
    if isinstance(err, UnexpectedToken):
        token = err.token
        if token.type == "$END":
            what = "unexpected end of input"
        elif token.type == "_NL":
            what = "unexpected end of line"
        else:
            what = f"unexpected {str(token)!r}"
        width = max(1, len(str(token))) if token.type not in ("$END", "_NL") else 1
        span = Span(line, column, line, column + width)
        return Diagnostic(what, span, _describe_expected(set(err.expected), parser))
    if isinstance(err, UnexpectedCharacters):
        char = err.char
        span = Span(line, column, line, column + 1)
        return Diagnostic(
            f"unexpected character {char!r}",
            span,
            _describe_expected(set(err.allowed or ()), parser),
        )
    if isinstance(err, UnexpectedEOF):
        return Diagnostic("unexpected end of input", Span(line, column, line, column + 1))
    return Diagnostic(str(err).splitlines()[0], Span(line, column, line, column + 1))


def _blank_line(text: str, line: int) -> str:
    lines = text.split("\n")
    if 0 < line <= len(lines):
        lines[line - 1] = " " * len(lines[line - 1])
    return "\n".join(lines)


def parse_tree(text: str, filename: str = "<string>") -> Tree[Token]:
    """Parse program text; raise :class:`CraspError` listing every syntax error."""
    parser = _parser()
    diagnostics: list[Diagnostic] = []
    current = text
    while True:
        try:
            tree = parser.parse(current)
        except UnexpectedInput as err:
            diag = _diagnostic(err, parser)
            if diag in diagnostics or len(diagnostics) >= MAX_ERRORS:
                break
            diagnostics.append(diag)
            if isinstance(err, UnexpectedToken) and err.token.type == "$END":
                break
            blanked = _blank_line(current, diag.span.line if diag.span else 0)
            if blanked == current:
                break
            current = blanked
            continue
        break
    if diagnostics:
        raise CraspError(diagnostics, text, filename)
    return tree
