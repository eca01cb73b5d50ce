"""Lark helpers shared by the C-RASP and PCOC front ends: a post-lexer that continues
statements inside brackets, source spans of tree items, and the terminals a parser state
really accepts (for "expected ..." messages)."""

from __future__ import annotations

from collections.abc import Iterator
from copy import copy
from typing import TYPE_CHECKING, TypeVar

from lark import Token, Tree
from lark.exceptions import UnexpectedToken

from crasp_compiler.errors import Span

if TYPE_CHECKING:  # the module moved between Lark versions: for the annotation only
    from lark.parsers.lalr_parser_state import ParserState

Leaf = TypeVar("Leaf")  # what a tree holds besides trees (a Token)
State = TypeVar("State")  # a parse table's state


class BracketContinuation:
    """Post-lexer: newlines inside the ``opening`` … ``closing`` bracket terminals continue
    the statement (they are dropped)."""

    always_accept = ("_NL",)

    def __init__(self, opening: set[str], closing: set[str]) -> None:
        self.opening, self.closing = opening, closing

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        depth = 0
        for token in stream:
            if token.type in self.opening:
                depth += 1
            elif token.type in self.closing:
                depth = max(0, depth - 1)
            elif token.type == "_NL" and depth > 0:
                continue
            yield token


def span(item: Tree[Token] | Token | None) -> Span | None:
    """The source span of a token or a tree (None when Lark recorded no position)."""
    if item is None:
        return None
    if isinstance(item, Token):
        if item.line is None or item.column is None:
            return None
        return Span(
            item.line, item.column, item.end_line or item.line, item.end_column or item.column + 1
        )
    meta = item.meta
    if getattr(meta, "empty", True):
        return None
    return Span(meta.line, meta.column, meta.end_line, meta.end_column)


def accepted_terminals(state: ParserState[State] | None) -> set[str] | None:
    """The terminals that really let the parser advance from ``state``.

    Lark's own ``expected`` set is unreliable here: when the contextual lexer rejects a
    token it reports the lexer's terminals, which leave out keywords (lexed as NAME) and
    include ``_NL`` (always accepted for the post-lexer). So ask the parse table, and keep
    only the terminals that survive the reductions they trigger.
    """
    if state is None:
        return None
    try:
        choices = state.parse_conf.states[state.position]
        conf = copy(state.parse_conf)
        conf.callbacks = {}
        accepted = set()
        for name in choices:
            if not name.isupper():  # a rule, not a terminal
                continue
            trial = type(state)(conf, state.lexer, list(state.state_stack), [])
            try:
                trial.feed_token(Token(name, ""), is_end=name == "$END")
            except (UnexpectedToken, AssertionError, KeyError, IndexError):
                continue
            accepted.add(name)
    except Exception:  # Lark's internals differ between versions: fall back
        return None
    return accepted or None


def chain_operands(node: Tree[Leaf]) -> list[Tree[Leaf] | Leaf]:
    """The operands of the chain ``node`` heads: its left-nested run of nodes of its rule
    (``a && b && c`` parses as ``and_(and_(a, b), c)``), in order, without recursion."""
    operands: list[Tree[Leaf] | Leaf] = []
    while isinstance(node, Tree) and len(node.children) == 2:
        left, right = node.children
        operands.append(right)
        if not (isinstance(left, Tree) and left.data == node.data):
            operands.append(left)
            break
        node = left
    operands.reverse()
    return operands
