"""The project's one error type, with source locations.

Every user-facing failure (syntax, sort, undefined name, bad input, bad model file)
is a :class:`CraspError`. Its text names ``file:line:col``, shows the source line with
a caret under the offending span, and says what was expected.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

# Integers of more digits than this are shown in scientific form in messages.
SHOWN_DIGITS = 24


def shown_int(value: int) -> str:
    """``value`` for a message: in full up to :data:`SHOWN_DIGITS` digits, else its
    leading digits in scientific form and its number of digits (``1.04…e1233 (1234
    digits)``), computed without the decimal conversion that Python refuses for more
    than ``sys.get_int_max_str_digits()`` digits."""
    magnitude = abs(value)
    if magnitude < 10**SHOWN_DIGITS:
        return str(value)
    digits = int(magnitude.bit_length() * math.log10(2)) + 1  # exact or one too many
    if 10 ** (digits - 1) > magnitude:
        digits -= 1
    lead = str(magnitude // 10 ** (digits - 3))  # the first three digits
    sign = "-" if value < 0 else ""
    return f"{sign}{lead[0]}.{lead[1:]}…e{digits - 1} ({digits} digits)"


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


# The name an error without a file of its own is reported under (the command's).
PROGRAM = "crasp"
# A source line longer than this is shown cut around the caret.
SHOWN_LINE = 160
# At most this many diagnostics are printed; the rest are counted.
SHOWN_DIAGNOSTICS = 100


@dataclass(frozen=True)
class Diagnostic:
    """One problem: what is wrong, where, and (optionally) what was expected.
    ``severity`` is ``error`` or ``warning``."""

    message: str
    span: Span | None = None
    hint: str | None = None
    severity: str = "error"

    def format(self, source: str | list[str] | None, filename: str) -> str:
        """The diagnostic as text: ``file:line:col: error: ...``, the source line (cut
        around the caret when long) and a caret under the span. ``source`` may be given
        already split with :func:`source_lines`."""
        message, hint = escape(self.message), self.hint and escape(self.hint)
        if self.span is None:
            head = f"{filename}: {self.severity}: {message}"
            return head + (f"\n  {hint}" if hint else "")
        span = self.span
        lines = [f"{filename}:{span.line}:{span.column}: {self.severity}: {message}"]
        all_lines = source_lines(source) if isinstance(source, str) else source or []
        if 0 < span.line <= len(all_lines):
            text = display_line(all_lines[span.line - 1])
            end = span.end_column if span.end_line == span.line else len(text) + 1
            start, end = min(span.column - 1, len(text)), min(end - 1, len(text))
            extra = span.column - 1 - start  # a caret past the end of the line
            cut = max(0, min(start - SHOWN_LINE // 2, len(text) - SHOWN_LINE))
            shown = text[cut : cut + SHOWN_LINE]
            prefix = "…" if cut else ""
            suffix = "…" if cut + SHOWN_LINE < len(text) else ""
            pad = cells(prefix) + cells(text[cut:start]) + extra
            width = max(1, cells(text[start : min(end, cut + SHOWN_LINE)]))
            lines.append(f"    {prefix}{shown}{suffix}")
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
        filename: str = PROGRAM,
    ) -> None:
        if isinstance(diagnostics, str):
            diagnostics = [Diagnostic(diagnostics)]
        self.diagnostics = list(diagnostics)
        self.source = source
        self.filename = filename
        super().__init__(self.format())

    def format(self) -> str:
        lines = source_lines(self.source) if self.source is not None else None
        shown = self.diagnostics[:SHOWN_DIAGNOSTICS]
        parts = [d.format(lines, self.filename) for d in shown]
        if len(self.diagnostics) > len(shown):
            parts.append(f"... and {len(self.diagnostics) - len(shown)} more")
        if len(self.diagnostics) > 1:
            parts.append(f"{len(self.diagnostics)} errors")
        return "\n".join(parts)


class Invalid(Exception):
    """Raised while a front end builds a construct whose error it has recorded: the
    construct is abandoned and building goes on with the next (:class:`Diagnostics`)."""


class Diagnostics(list[Diagnostic]):
    """The errors found in one program text, raised together in source order: a front
    end records each one (:meth:`error`) and goes on, and raises them all at the end
    (:meth:`raise_any`)."""

    def __init__(self, source: str, filename: str) -> None:
        super().__init__()
        self.source, self.filename = source, filename

    def error(self, message: str, span: Span | None, hint: str | None = None) -> Invalid:
        """Record an error; the :class:`Invalid` to raise where building cannot go on."""
        self.append(Diagnostic(message, span, hint))
        return Invalid()

    def raise_any(self, limit: int | None = None) -> None:
        """Raise the errors recorded (the first ``limit`` of them), sorted by position, as
        one :class:`CraspError`; nothing when there are none."""
        if self:
            self.sort(key=lambda d: (d.span is None, d.span and (d.span.line, d.span.column)))
            raise CraspError(self[:limit], self.source, self.filename)


def spacing_hint(token: str, symbols: Iterable[str]) -> str | None:
    """A hint when ``token`` is several alphabet symbols written without spaces (``(())``
    for ``( ( ) )``): inputs are whitespace-separated tokens."""
    symbols = [symbol for symbol in set(symbols) if symbol]
    if len(token) > 200 or not symbols:
        return None
    # split[k]: the symbols that spell token[:k], or None
    split: list[list[str] | None] = [[]] + [None] * len(token)
    for end in range(1, len(token) + 1):
        for symbol in symbols:
            start = end - len(symbol)
            if start >= 0 and split[start] is not None and token[start:end] == symbol:
                split[end] = [*split[start], symbol]  # type: ignore[misc]
                break
    parts = split[-1]
    if parts is None or len(parts) < 2:
        return None
    return f"tokens are separated by whitespace: did you mean {' '.join(parts)!r}?"
