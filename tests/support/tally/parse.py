"""Tally's surface syntax, read by a small hand-written parser, and its checks.

One statement per line; ``#`` starts a comment::

    program    := line*
    statement  := "symbols" SYMBOL+                  the alphabet (exactly once)
                | "accept" NAME                      the verdict rule (at most once)
                | NAME ":" sum COMPARISON sum        a rule, one output
    sum        := ["-"] term (("+" | "-") term)*
    term       := INT ["*" atom] | atom
    atom       := "count" "(" SYMBOL ")" | "length"
    COMPARISON := ">" | ">=" | "<" | "<=" | "=" | "!="

SYMBOL is a word (letters, digits, ``_``), NAME a word that does not start with a digit,
INT decimal digits. Every error is a located
:class:`~crasp_compiler.errors.Diagnostic` (``file:line:col``, the line, a caret);
syntax errors of all lines are reported together, then the checks' (declared symbols,
unique names, the verdict rule, coefficient bounds).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from crasp_compiler.errors import CraspError, Diagnostic, Span, source_lines
from tests.support.tally.nodes import OPERATORS, Count, Length, Program, Rule, Sum, Term, threshold

# The largest |coefficient| and |constant| of a rule's form Z (tests.support.tally.nodes
# .threshold): the lowering's weights, Z's and the half-integers Z ± 1/2, are then exact
# in float32 (tests.support.tally.rounding).
LIMIT = 2**20

_TOKEN = re.compile(r"\s+|#.*|(?P<op>>=|<=|!=|[><=:+\-*()])|(?P<word>\w+)|(?P<bad>.)")
_INT = re.compile(r"[0-9]+")
_NAME = re.compile(r"[^\W\d]\w*")


@dataclass(frozen=True)
class _Token:
    kind: str  # "op", "int", "word"
    text: str
    span: Span


class _Problem(Exception):
    def __init__(self, message: str, span: Span) -> None:
        super().__init__(message)
        self.diagnostic = Diagnostic(message, span)


@dataclass(frozen=True)
class _Symbols:
    symbols: tuple[_Token, ...]
    span: Span


@dataclass(frozen=True)
class _Accept:
    name: _Token
    span: Span


def _tokens(text: str, line: int) -> list[_Token]:
    out = []
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        if kind is None:  # whitespace or a comment
            continue
        value = match.group()
        span = Span(line, match.start() + 1, line, match.end() + 1)
        if kind == "bad":
            raise _Problem(f"unexpected character {value!r}", span)
        if kind == "word" and _INT.fullmatch(value):
            kind = "int"
        out.append(_Token(kind, value, span))
    return out


class _Line:
    """The tokens of one line, read left to right."""

    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.at = 0
        last = tokens[-1].span
        self.end = Span(last.line, last.end_column, last.line, last.end_column + 1)

    def peek(self, text: str) -> bool:
        return self.at < len(self.tokens) and self.tokens[self.at].text == text

    def take(self, what: str) -> _Token:
        if self.at == len(self.tokens):
            raise _Problem(f"expected {what}, found the end of the line", self.end)
        self.at += 1
        return self.tokens[self.at - 1]

    def expect(self, text: str, what: str) -> _Token:
        token = self.take(what)
        if token.text != text:
            raise _Problem(f"expected {what}, found {token.text!r}", token.span)
        return token

    def done(self, after: str) -> None:
        if self.at < len(self.tokens):
            token = self.tokens[self.at]
            raise _Problem(f"unexpected {token.text!r} after {after}", token.span)


def _join(first: Span, last: Span) -> Span:
    return Span(first.line, first.column, last.end_line, last.end_column)


def _atom(line: _Line, token: _Token, what: str) -> Count | Length:
    """The atom ``token`` starts (``what``: the message's expectation otherwise)."""
    if token.text == "length":
        return Length(token.span)
    if token.text == "count":
        line.expect("(", "'(' after count")
        symbol = line.take("a symbol")
        if symbol.kind == "op":
            raise _Problem(f"expected a symbol, found {symbol.text!r}", symbol.span)
        line.expect(")", "')' after the symbol")
        return Count(symbol.text, symbol.span)
    raise _Problem(f"expected {what}, found {token.text!r}", token.span)


def _term(line: _Line, sign: int) -> Term:
    what = "count(SYMBOL), length or a number"
    token = line.take(what)
    if token.kind != "int":
        atom = _atom(line, token, what)
        return Term(sign, atom, _join(token.span, line.tokens[line.at - 1].span))
    if not line.peek("*"):
        return Term(sign * int(token.text), None, token.span)
    line.take("*")
    what = "count(SYMBOL) or length after '*'"
    atom = _atom(line, line.take(what), what)
    return Term(sign * int(token.text), atom, _join(token.span, line.tokens[line.at - 1].span))


def _sum(line: _Line) -> Sum:
    first = line.at
    sign = 1
    if line.peek("-"):
        line.take("-")
        sign = -1
    terms = [_term(line, sign)]
    while line.peek("+") or line.peek("-"):
        sign = 1 if line.take("+ or -").text == "+" else -1
        terms.append(_term(line, sign))
    return Sum(tuple(terms), _join(line.tokens[first].span, terms[-1].span))


def _statement(line: _Line) -> _Symbols | _Accept | Rule:
    head = line.take("a statement")
    if head.text == "symbols":
        symbols = tuple(line.tokens[1:])
        bad = [token for token in symbols if token.kind == "op"]
        if not symbols or bad:
            where = bad[0].span if bad else line.end
            raise _Problem("expected the symbols: words separated by spaces", where)
        return _Symbols(symbols, _join(head.span, symbols[-1].span))
    if head.text == "accept":
        name = line.take("the name of a rule")
        line.done("the rule's name")
        return _Accept(name, _join(head.span, name.span))
    if not _NAME.fullmatch(head.text):
        raise _Problem(
            f"expected a statement (symbols, accept or NAME: ...), found {head.text!r}",
            head.span,
        )
    line.expect(":", f"':' after the rule name {head.text!r}")
    left = _sum(line)
    op = line.take("a comparison (> >= < <= = !=)")
    if op.text not in OPERATORS:
        raise _Problem(f"expected a comparison (> >= < <= = !=), found {op.text!r}", op.span)
    right = _sum(line)
    line.done("the comparison")
    return Rule(head.text, left, op.text, right, _join(left.span, right.span), head.span)


def parse_program(text: str, filename: str = "<string>", margin: int = 0) -> Program:
    """Parse and check a Tally program (CraspError with every located diagnostic)."""
    if type(margin) is not int or margin < 0:
        raise CraspError(f"margin must be a whole number >= 0, not {margin!r}", filename=filename)
    statements: list[_Symbols | _Accept | Rule] = []
    problems = []
    for number, content in enumerate(source_lines(text), start=1):
        try:
            tokens = _tokens(content, number)
            if tokens:
                statements.append(_statement(_Line(tokens)))
        except _Problem as problem:
            problems.append(problem.diagnostic)
    if problems:
        raise CraspError(problems, text, filename)
    program, problems = _check(statements, margin, text, filename)
    if problems:
        raise CraspError(problems, text, filename)
    return program


def _check(
    statements: list[_Symbols | _Accept | Rule], margin: int, text: str, filename: str
) -> tuple[Program, list[Diagnostic]]:
    """The program the statements make, and what is wrong with it."""
    problems = []
    declared = [s for s in statements if isinstance(s, _Symbols)]
    accepts = [s for s in statements if isinstance(s, _Accept)]
    rules = [s for s in statements if isinstance(s, Rule)]
    for later in declared[1:]:
        line = declared[0].span.line
        problems.append(Diagnostic(f"symbols are declared once (first on line {line})", later.span))
    if not declared:
        problems.append(Diagnostic("a Tally program declares its symbols: symbols a b ..."))
    symbols: list[str] = []
    for token in declared[0].symbols if declared else ():
        if token.text in symbols:
            problems.append(Diagnostic(f"symbol {token.text!r} is declared twice", token.span))
        else:
            symbols.append(token.text)
    known = tuple(symbols)
    seen: dict[str, Rule] = {}
    for rule in rules:
        if rule.name in seen:
            first = seen[rule.name].name_span.line
            problems.append(
                Diagnostic(
                    f"rule {rule.name!r} is defined twice (first on line {first})", rule.name_span
                )
            )
        seen.setdefault(rule.name, rule)
        unknown = [
            term.atom
            for side in (rule.left, rule.right)
            for term in side.terms
            if isinstance(term.atom, Count) and term.atom.symbol not in known
        ]
        for atom in unknown:
            problems.append(
                Diagnostic(
                    f"{atom.symbol!r} is not a declared symbol (symbols: {' '.join(known)})",
                    atom.span,
                )
            )
        if not unknown:
            problems += _bounds(rule, margin, known)
    if not rules:
        problems.append(Diagnostic("a Tally program has at least one rule: NAME: sum > sum"))
    for again in accepts[1:]:
        line = accepts[0].span.line
        problems.append(Diagnostic(f"accept is given once (first on line {line})", again.span))
    accept = accepts[0].name if accepts else None
    if accept is not None and accept.text not in seen:
        problems.append(Diagnostic(f"accept names no rule: {accept.text!r}", accept.span))
    name = None if accept is None else accept.text
    return Program(known, tuple(rules), name, margin, text, filename), problems


def _bounds(rule: Rule, margin: int, symbols: tuple[str, ...]) -> list[Diagnostic]:
    """A diagnostic for a coefficient or constant of the rule's form beyond ±LIMIT."""
    form = threshold(rule, margin, symbols)
    parts = [(f"coefficient of count({a})", c) for a, c in form.counts]
    parts += [("coefficient of length", form.length), ("constant", form.constant)]
    with_margin = f" (with margin {margin})" if margin and rule.op in (">", "<") else ""
    return [
        Diagnostic(
            f"the {what} of this comparison is {value}{with_margin}, beyond ±{LIMIT:,} (2^20), "
            "the largest a Tally model holds exactly",
            rule.span,
        )
        for what, value in parts
        if abs(value) > LIMIT
    ]
