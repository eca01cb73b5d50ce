"""The one recovering front end of the project's Lark grammars (C-RASP and PCOC).

A :class:`Frontend` is configured per language, next to its grammar
(:mod:`crasp_compiler.languages.crasp.syntax`, :mod:`crasp_compiler.languages.pcoc.syntax`),
and parses program text into a Lark tree whose nodes carry source positions.

Syntax errors never escape as Lark exceptions: each becomes a :class:`Diagnostic` that says
what was unexpected and what the parser expected (in the language's words). After an error
the offending line is blanked (for a bracket never closed: the lines from the bracket to the
error) and parsing resumes, so every syntax error in a file is reported at once (up to
``max_errors``), sorted by position. A file without syntax errors is then checked for
statements nested deeper than ``max_depth`` (the checkers, interpreters and printers
recurse over the tree, so a deeper one would crash them with ``RecursionError``); a chain
of one associative operator (``a && b && …``) is built as a balanced tree, so it counts
only the levels of that tree, ⌈log2 k⌉ for k operands.

The minus sign − (U+2212, as papers and docs print it) is read as ``-`` outside literals.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import NamedTuple

from lark import Lark, Token, Tree
from lark import __version__ as lark_version
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from crasp_compiler.errors import CraspError, Diagnostic, Span
from crasp_compiler.syntax.lark_tools import (
    BracketContinuation,
    accepted_terminals,
    chain_operands,
    span,
)

# Most syntax errors reported for one file (the language checkers cap theirs alike).
MAX_ERRORS = 20
# Longest token text quoted in full in a message.
SHOWN_TOKEN = 24
# How close a word must be to a keyword for "did you mean" (difflib's ratio).
KEYWORD_CUTOFF = 0.8
# Lark's names for the terminals of the bracket characters.
_LARK_NAMES = {"(": "LPAR", ")": "RPAR", "[": "LSQB", "]": "RSQB", "{": "LBRACE", "}": "RBRACE"}


def _no_description(expected: frozenset[str]) -> str | None:
    return None


def parser_cache(grammar_name: str, grammar: str) -> str | None:
    """The file where Lark keeps the parse tables of ``grammar`` between processes:
    ``crasp-compiler/NAME-DIGEST.lark-cache`` in ``$XDG_CACHE_HOME`` (default ``~/.cache``),
    named by a digest of the grammar, Lark's version and Python's; None when that folder
    cannot be made. Lark compares the digest it stores in the file before using it, and
    rebuilds the tables (and rewrites the file) when the file is stale, corrupt or cut
    short by a writer running at the same time; a file it cannot write it leaves alone."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = Path(root, "crasp-compiler")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    key = f"{grammar}\0{lark_version}\0{sys.version_info[:2]}"
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
    return str(folder / f"{Path(grammar_name).stem}-{digest}.lark-cache")


class _Bracket(NamedTuple):
    char: str
    line: int
    column: int


class _Found(NamedTuple):
    """A diagnostic, the lines to blank before parsing again, whether it is at the end of
    the input, and whether it is an artifact of the recovery (not to be reported)."""

    diagnostic: Diagnostic
    first: int
    last: int
    at_end: bool = False
    artifact: bool = False


@dataclass(frozen=True, eq=False)
class Frontend:
    """A language's syntax: its grammar and what its messages need to know.

    - ``package``, ``grammar``: the grammar resource (a ``.lark`` file in ``package``);
      it is compiled once, as an LALR parser with positions, and its tables are cached
      on disk for the next process (:func:`parser_cache`).
    - ``statement_start``: matches (from the start of a line) the head of a new statement
      or the end of a block; an error there while a continuation bracket opened on an
      earlier line is open means that bracket was never closed.
    - ``max_depth``, ``nary``, ``chains``: the deepest nesting accepted below a statement;
      the rules in ``nary`` count one level per operand (they become nested binary nodes);
      a left-nested run of one rule in ``chains`` (``a && b && c``) is a chain of k
      operands that the language builds as a balanced tree: ⌈log2 k⌉ levels.
    - ``brackets``: opening → closing bracket characters; ``continuation``: the opening
      brackets inside which a newline continues the statement; ``kept``: the bracket
      characters that recovery keeps when it blanks a line (block braces, so that blocks
      stay balanced).
    - ``comment``: the comment marker (to end of line); ``literals``: regular expressions
      of the literal tokens, inside which brackets, comments and U+2212 are plain text.
    - ``terminal_names``: human names of terminals for "expected ..." messages (a value
      may list several, separated by ", "); ``quote``: how a literal terminal is shown;
      ``describe``: the language's summary of an expected set (None: list the terminals).
    - ``character_messages``: the message for an unexpected character (instead of
      "unexpected character 'c'"); ``character_hints``: a note added for one.
    - ``comment_note``: a note for a line that ends early after an operand and a comment
      (``a // b`` meant as a division), None for no note.
    - ``unclosed_before``: where a never-closed bracket should have been closed, when the
      parser found a new statement on line ``{line}``.
    - ``depth_message`` (with ``{limit}``), ``depth_hint``: the nesting diagnostic.
    - ``max_errors``: the most syntax errors reported for one text.
    """

    package: str
    grammar: str
    statement_start: re.Pattern[str]
    max_depth: int
    nary: frozenset[str] = frozenset()
    chains: frozenset[str] = frozenset()
    brackets: Mapping[str, str] = field(default_factory=lambda: {"(": ")"})
    continuation: frozenset[str] = frozenset("(")
    kept: frozenset[str] = frozenset()
    comment: str = "//"
    literals: tuple[str, ...] = ()
    terminal_names: Mapping[str, str] = field(default_factory=dict)
    quote: Callable[[str], str] = repr
    describe: Callable[[frozenset[str]], str | None] = _no_description
    character_messages: Mapping[str, str] = field(default_factory=dict)
    character_hints: Mapping[str, str] = field(default_factory=dict)
    comment_note: str | None = None
    unclosed_before: str = "line {line}"
    depth_message: str = "nested too deeply (more than {limit} levels)"
    depth_hint: str = "split it into several statements"
    max_errors: int = MAX_ERRORS

    # ------------------------------------------------------------------ derived

    @cached_property
    def lark(self) -> Lark:
        """The compiled parser (built on first use, or loaded from :func:`parser_cache`)."""
        grammar = resources.files(self.package).joinpath(self.grammar).read_text("utf-8")
        opening = {_LARK_NAMES[b] for b in self.continuation}
        closing = {_LARK_NAMES[self.brackets[b]] for b in self.continuation}
        return Lark(
            grammar,
            parser="lalr",
            propagate_positions=True,
            postlex=BracketContinuation(opening, closing),
            maybe_placeholders=False,
            cache=parser_cache(self.grammar, grammar) or False,
        )

    @cached_property
    def keywords(self) -> list[str]:
        """The grammar's words: its literal terminals that look like names (``alphabet``,
        ``predicate``, ``send``, ...)."""
        words = {
            terminal.pattern.value
            for terminal in self.lark.terminals
            if terminal.pattern.type == "str"
            and re.fullmatch(r"[A-Za-z_]\w*", terminal.pattern.value)
        }
        return sorted(words)

    def _near_keyword(self, text: str, line: int, column: int) -> str | None:
        """A note for the word just before an error when it is a near miss of a keyword
        (``alphabt "a"``): did you mean the keyword?"""
        before = text.split("\n")[line - 1][: column - 1]
        word = re.search(r"([A-Za-z_]\w*)\s*$", before)
        if word is None or word.group(1) in self.keywords:
            return None
        import difflib  # only on an error (a third of a millisecond at start-up)

        close = difflib.get_close_matches(word.group(1), self.keywords, 1, KEYWORD_CUTOFF)
        return f"{word.group(1)!r} is not a keyword: did you mean {close[0]!r}?" if close else None

    @cached_property
    def _scanner(self) -> re.Pattern[str]:
        """Comments, literals (skipped whole), bracket characters and newlines."""
        chars = "".join(re.escape(c) for pair in self.brackets.items() for c in pair)
        parts = [re.escape(self.comment) + r"[^\n]*", *self.literals, f"[{chars}\\n]"]
        return re.compile("|".join(parts))

    @cached_property
    def _minus(self) -> re.Pattern[str]:
        """U+2212 outside literals (a literal is matched whole, as group 1)."""
        if not self.literals:
            return re.compile("()\u2212")
        return re.compile("(" + "|".join(self.literals) + ")|\u2212")

    @cached_property
    def _closers(self) -> dict[str, str]:
        return {close: open_ for open_, close in self.brackets.items()}

    # ------------------------------------------------------------------ parsing

    def parse(self, text: str, filename: str) -> Tree[Token]:
        """The tree of ``text``; raise :class:`CraspError` listing every syntax error (or
        every statement nested too deeply)."""
        diagnostics: list[Diagnostic] = []
        blanked: set[int] = set()
        current = self._minus.sub(lambda m: m.group(1) or "-", text)  # one char for one
        tree: Tree[Token] | None = None
        while True:
            try:
                tree = self.lark.parse(current)
                break
            except UnexpectedInput as err:
                found = self._diagnose(err, current, blanked)
                span_ = found.diagnostic.span
                if span_ is not None and span_.line in blanked:
                    break  # only kept brackets remain there: caused by the recovery
                if found.at_end and found.artifact:
                    break
                if not found.artifact:
                    if found.diagnostic in diagnostics or len(diagnostics) >= self.max_errors:
                        break
                    diagnostics.append(found.diagnostic)
                if found.at_end:
                    break
                following = self._blank(current, found.first, found.last)
                if following == current:
                    break
                blanked.update(range(found.first, found.last + 1))
                current = following
        if not diagnostics:
            assert tree is not None  # the first error is always reported
            diagnostics = self._too_deep(tree)
        if diagnostics or tree is None:
            diagnostics.sort(key=lambda d: (d.span.line, d.span.column) if d.span else (0, 0))
            raise CraspError(diagnostics, text, filename)
        return tree

    def _blank(self, text: str, first: int, last: int) -> str:
        """``text`` with lines ``first..last`` blanked but for the ``kept`` brackets (in
        comments too: `n // 2 {` meant a division, and its `{` opens a block)."""
        lines = text.split("\n")
        for number in range(max(first, 1), min(last, len(lines)) + 1):
            lines[number - 1] = "".join(ch if ch in self.kept else " " for ch in lines[number - 1])
        return "\n".join(lines)

    # ------------------------------------------------------------------ one error

    def _diagnose(self, err: UnexpectedInput, text: str, blanked: set[int]) -> _Found:
        line, column = max(err.line, 1), max(err.column, 1)
        expected = accepted_terminals(getattr(err, "state", None))
        notes: list[str] = []
        at_end = False
        if isinstance(err, UnexpectedToken):
            token = err.token
            if token.type == "$END":
                # Lark places the end of input on the last token; point just after it,
                # or at the end of the text when there is no token before it.
                at_end = True
                what = "unexpected end of input"
                if getattr(token, "end_line", None) is None:
                    lines = text.split("\n")
                    line, column = len(lines), len(lines[-1]) + 1
                else:
                    line = max(token.end_line or line, 1)
                    column = max(token.end_column or column, 1)
            elif token.type == "_NL":
                what = "unexpected end of line"
                # Just after the line's code: not after a comment, spaces or a CRLF's `\r`.
                column = min(column, len(self._code(text, line).rstrip()) + 1)
            else:
                what = f"unexpected {_shown(str(token))}"
            width = max(1, len(str(token))) if token.type not in ("$END", "_NL") else 1
            here = Span(line, column, line, column + width)
            hint = self._expected(expected or set(err.expected))
            if keyword := self._near_keyword(text, line, column):
                notes.append(keyword)
        elif isinstance(err, UnexpectedCharacters):
            char = err.char
            what = self.character_messages.get(char, f"unexpected character {char!r}")
            here = Span(line, column, line, column + 1)
            hint = self._expected(expected or set(err.allowed or ()))
            if char in self.character_hints:
                notes.append(self.character_hints[char])
        else:  # pragma: no cover - UnexpectedEOF is not raised by the LALR parser
            here = Span(line, column, line, column + 1)
            return _Found(Diagnostic(str(err).splitlines()[0], here), line, line)
        if what == "unexpected end of line" and self.comment_note and self._ends_early(text, line):
            notes.append(self.comment_note)
        stack = self._open_brackets(text, line, column)
        opened = stack[-1] if stack else None
        # A bracket open across a blanked line may have lost its closing bracket there.
        suspect = (
            opened is not None
            and opened.char not in self.kept
            and any(number > opened.line for number in blanked)
        )
        if at_end and suspect:
            return _Found(Diagnostic(what, here), line, line, at_end=True, artifact=True)
        if opened is not None and opened.line < line:
            bracket, closer = opened.char, self.brackets[opened.char]
            at = Span(opened.line, opened.column, opened.line, opened.column + 1)
            if at_end:
                # The parser notices only at the end, but the mistake is the bracket.
                message = Diagnostic(
                    f"{bracket!r} is never closed",
                    at,
                    f"expected {closer!r} before the end of the input",
                )
                return _Found(message, opened.line, line, at_end=True)
            if bracket in self.continuation:
                source_line = text.split("\n")[line - 1]
                head = self.statement_start.match(source_line)
                if head is not None and column - 1 < head.end():
                    # A new statement while the bracket is open: newlines inside it
                    # continue the statement, so the parser only notices here. Blank from
                    # the bracket to the line before.
                    before = self.unclosed_before.format(line=line)
                    message = Diagnostic(
                        f"{bracket!r} is never closed", at, f"expected {closer!r} before {before}"
                    )
                    return _Found(message, opened.line, line - 1, artifact=suspect)
                if closer not in source_line[column - 1 :] and not suspect:
                    notes.append(
                        f"note the {bracket!r} at line {opened.line}, column {opened.column}"
                        f" is still open: is a {closer!r} missing?"
                    )
        full = "; ".join(part for part in [hint, *notes] if part) or None
        return _Found(Diagnostic(what, here, full), line, line, at_end=at_end)

    def _expected(self, expected: set[str]) -> str:
        """The "expected ..." text for a set of terminal names, in the language's words."""
        summary = self.describe(frozenset(expected))
        if summary is not None:
            return summary
        names = []
        for name in sorted(expected):
            if name in self.terminal_names:
                names.append(self.terminal_names[name])
                continue
            try:
                pattern = self.lark.get_terminal(name).pattern
            except KeyError:
                names.append(name)
                continue
            names.append(self.quote(pattern.value) if pattern.type == "str" else name.lower())
        unique = list(dict.fromkeys(part for name in names for part in name.split(", ")))
        if len(unique) > 8:
            unique = [*unique[:8], "..."]
        if len(unique) > 1:
            return "expected " + ", ".join(unique[:-1]) + " or " + unique[-1]
        return "expected " + unique[0] if unique else ""

    # ------------------------------------------------------------------ the source text

    def _code(self, text: str, line: int) -> str:
        """Line ``line`` without its comment (a comment marker inside a literal is text)."""
        lines = text.split("\n")
        if not 0 < line <= len(lines):
            return ""
        source = lines[line - 1]
        for match in self._scanner.finditer(source):
            if match.group().startswith(self.comment):
                return source[: match.start()]
        return source

    def _ends_early(self, text: str, line: int) -> bool:
        """Whether line ``line`` has a comment right after an operand (``a // b``)."""
        lines = text.split("\n")
        if not 0 < line <= len(lines):
            return False
        code = self._code(text, line)
        return len(code) < len(lines[line - 1]) and re.search(r"[\w)]\s*$", code) is not None

    def _open_brackets(self, text: str, line: int, column: int) -> list[_Bracket]:
        """The brackets still open before ``line:column``, innermost last."""
        stack: list[_Bracket] = []
        row, row_start = 1, 0
        for match in self._scanner.finditer(text):
            char, col = match.group(), match.start() - row_start + 1
            if (row, col) >= (line, column):
                break
            if char == "\n":
                row, row_start = row + 1, match.end()
            elif char in self.brackets:
                stack.append(_Bracket(char, row, col))
            elif char in self._closers:
                opener = self._closers[char]
                at = next(
                    (k for k in range(len(stack) - 1, -1, -1) if stack[k].char == opener), None
                )
                if at is not None:
                    del stack[at:]
        return stack

    # ------------------------------------------------------------------ nesting

    def _too_deep(self, tree: Tree[Token]) -> list[Diagnostic]:
        """One diagnostic per statement nested deeper than ``max_depth`` (iteratively: a
        recursive walk would itself overflow)."""
        diagnostics = []
        for statement in tree.children:
            if not isinstance(statement, Tree):
                continue
            stack = [(statement, 0)]
            while stack:
                node, depth = stack.pop()
                if depth > self.max_depth:
                    at = span(node)
                    diagnostics.append(
                        Diagnostic(
                            self.depth_message.format(limit=self.max_depth),
                            at and Span(at.line, at.column, at.line, at.column + 1),
                            self.depth_hint,
                        )
                    )
                    break
                if node.data in self.chains:
                    operands = chain_operands(node)
                    step = (len(operands) - 1).bit_length()  # ⌈log2 k⌉
                    stack.extend((c, depth + step) for c in operands if isinstance(c, Tree))
                    continue
                children = [c for c in node.children if isinstance(c, Tree)]
                step = 1 + (len(children) if node.data in self.nary else 0)
                stack.extend((c, depth + step) for c in children)
        return diagnostics


def _shown(text: str) -> str:
    if len(text) > SHOWN_TOKEN:
        text = text[: SHOWN_TOKEN - 1] + "…"
    return repr(text)
