"""The project's one error type, with source locations.

Every user-facing failure (syntax, sort, undefined name, bad input, bad model file)
is a :class:`CraspError`. Its text names ``file:line:col``, shows the source line with
a caret under the offending span, and says what was expected.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass


def source_lines(source: str) -> list[str]:
    """The lines of ``source`` as the parser counts them: split at ``\\n`` only.

    (``str.splitlines`` also splits at ``\\r``, form feeds, ``\\x85``, ``\\u2028`` and
    others, which the parser treats as ordinary characters; using it would show the
    wrong source line.)
    """
    return source.split("\n")


def display_line(line: str) -> str:
    """A source line made safe to print, one character per column so a caret lines up:
    whitespace (tabs included) becomes a space, other unprintable characters ``?``."""
    return "".join(
        ch if ch.isprintable() else " " if ch.isspace() else "?" for ch in line.rstrip("\r\n")
    )


def cells(text: str) -> int:
    """Terminal cells that ``text`` takes: wide characters (CJK, emoji) two, combining
    marks none, others one. The caret is placed by cells, so it lines up on screen."""
    return sum(
        2 if unicodedata.east_asian_width(ch) in "WF" else 0 if unicodedata.combining(ch) else 1
        for ch in text
    )


def escape(text: str) -> str:
    """``text`` with unprintable characters (line separators, controls) escaped."""
    return "".join(ch if ch.isprintable() or ch == " " else ascii(ch)[1:-1] for ch in text)


@dataclass(frozen=True)
class Span:
    """A source range: 1-based line and column; ``end_column`` is exclusive."""

    line: int
    column: int
    end_line: int
    end_column: int


@dataclass(frozen=True)
class Diagnostic:
    """One problem: what is wrong, where, and (optionally) what was expected."""

    message: str
    span: Span | None = None
    hint: str | None = None

    def format(self, source: str | None, filename: str) -> str:
        message, hint = escape(self.message), self.hint and escape(self.hint)
        if self.span is None:
            head = f"{filename}: error: {message}"
            return head + (f"\n  {hint}" if hint else "")
        span = self.span
        lines = [f"{filename}:{span.line}:{span.column}: error: {message}"]
        all_lines = source_lines(source) if source is not None else []
        if 0 < span.line <= len(all_lines):
            text = display_line(all_lines[span.line - 1])
            end = span.end_column if span.end_line == span.line else len(text) + 1
            start, end = min(span.column - 1, len(text)), min(end - 1, len(text))
            pad = cells(text[:start]) + (span.column - 1 - start)
            width = max(1, cells(text[start:end]))
            lines.append(f"    {text}")
            lines.append("    " + " " * pad + "^" * width)
        if hint:
            lines.append(f"  {hint}")
        return "\n".join(lines)


class CraspError(Exception):
    """A user error: bad program text, bad input string, or bad model file."""

    def __init__(
        self,
        diagnostics: list[Diagnostic] | str,
        source: str | None = None,
        filename: str = "<input>",
    ) -> None:
        if isinstance(diagnostics, str):
            diagnostics = [Diagnostic(diagnostics)]
        self.diagnostics = list(diagnostics)
        self.source = source
        self.filename = filename
        super().__init__(self.format())

    def format(self) -> str:
        parts = [d.format(self.source, self.filename) for d in self.diagnostics]
        if len(parts) > 1:
            parts.append(f"{len(parts)} errors")
        return "\n".join(parts)
