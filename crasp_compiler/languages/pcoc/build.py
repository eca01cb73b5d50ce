"""Build the checked IR of :mod:`crasp_compiler.languages.pcoc.nodes` from a PCOC parse tree.

- :func:`build_program` (tree → :class:`~crasp_compiler.languages.pcoc.nodes.Program`;
  :mod:`.program` reads text and files through it). Every problem becomes a :class:`CraspError` whose
  diagnostics name ``file:line:col``, show the line with a caret under the offending text
  and say what was expected: syntax errors (all of them, from the shared front end
  :mod:`crasp_compiler.syntax.engine` configured in :mod:`.syntax`), then names and kinds
  (undefined names, temporaries read before they are assigned in their round, ``recv`` of
  a non-slot, data where a static value is needed, ``i`` in a loop bound, a non-constant
  factor of ``*``, a data comparison without a margin, duplicate or reserved names,
  statements outside a round, ...).
- Every IR node built here knows its source span
  (its ``span``).

Closed static expressions are folded with :mod:`crasp_compiler.languages.pcoc.static`, the
evaluator of static expressions for a given ``n`` (so the messages agree).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from crasp_compiler.errors import Diagnostics, Invalid, Span, shown_int
from crasp_compiler.languages.pcoc.nodes import (
    STATIC_TYPES,
    Add,
    Assign,
    Call,
    Compare,
    Expr,
    For,
    If,
    IfExpr,
    Num,
    Program,
    Read,
    Receive,
    Round,
    SBin,
    Scale,
    SCall,
    Send,
    Slot,
    SNot,
    SNum,
    Static,
    StaticExpr,
    Stmt,
    Sub,
    SVar,
)
from crasp_compiler.languages.pcoc.static import MAX_EXACT_INT, StaticFailure, static_value
from crasp_compiler.model.model import MAX_SEND_CAPACITY
from crasp_compiler.syntax import Token, Tree
from crasp_compiler.syntax.engine import MAX_ERRORS
from crasp_compiler.syntax.lark_tools import span as _span

KEYWORDS = frozenset(
    {"input", "slot", "output", "bound", "round", "for", "in", "recv", "from", "default"}
    | {"send"}
    | {"if", "else", "margin", "and", "or", "not", "div"}
)
STATIC_VARS = {"i": "the machine index", "r": "the round number", "n": "the number of machines"}
DATA_FUNCTIONS = {"min": None, "max": None, "abs": 1, "relu": 1, "clamp": 3}
STATIC_FUNCTIONS = {"log2": 1, "ceil_log2": 1, "min": None, "max": None}
FUNCTIONS = frozenset(DATA_FUNCTIONS) | frozenset(STATIC_FUNCTIONS)
RESERVED = KEYWORDS | frozenset(STATIC_VARS) | FUNCTIONS

# Longest number literal read (float64 ends near 1.8e308; static integers beyond 2**1000
# are refused later anyway).
MAX_NUMBER_TEXT = 400


# What building an expression gives: static or data, decided from its parts.
_Built = Expr | StaticExpr
# A child of a parse tree.
_Child = Tree[Token] | Token


def _tree(child: _Child) -> Tree[Token]:
    """A child the grammar makes a tree (an expression, a body, a clause)."""
    assert isinstance(child, Tree), child
    return child


def _token(child: _Child) -> Token:
    """A child the grammar makes a token (a name, a keyword, an operator)."""
    assert isinstance(child, Token), child
    return child


def _join(first: Span | None, last: Span | None) -> Span | None:
    if first is None or last is None:
        return first or last
    return Span(first.line, first.column, last.end_line, last.end_column)


# ================================================================== building the IR


@dataclass
class _RoundState:
    defined: set[str] = field(default_factory=set)  # temporaries surely assigned by now
    maybe: set[str] = field(default_factory=set)  # assigned on some path only
    temps: dict[str, Span | None] = field(default_factory=dict)  # all of the round's


@dataclass
class _Scope:
    loops: dict[str, Span | None] = field(default_factory=dict)
    round: _RoundState | None = None


def _walk(expr: _Built) -> list[_Built]:
    """Every node of a data or static expression, parents first."""
    out: list[_Built] = []
    stack = [expr]
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, SBin | Add | Sub | Compare):
            stack.extend([node.right, node.left])
        elif isinstance(node, SNot | Scale):
            stack.append(node.arg)
        elif isinstance(node, SCall | Call):
            stack.extend(reversed(node.args))
        elif isinstance(node, Static):
            stack.append(node.expr)
        elif isinstance(node, IfExpr):
            stack.extend([node.otherwise, node.then, node.cond])
    return out


def _closed(expr: StaticExpr) -> bool:
    return not any(isinstance(node, SVar) for node in _walk(expr))


_CMP_NAMES = {"==": "==", "!=": "!=", "<=": "<=", ">=": ">=", "<": "<", ">": ">"}


# A comment that reads as the divisor of `a // b`: a number or a parenthesized sum.
_DIVISOR = re.compile(r"\s*(\d+|\(\s*\w+(\s*[-+*%]\s*\w+)*\s*\))\s*")


class _Elaborator:
    def __init__(self, source: str, filename: str) -> None:
        self.source = source
        self.filename = filename
        self.diagnostics = Diagnostics(source, filename)
        self.slots: dict[str, Slot] = {}
        self.inputs: list[str] = []
        self.program_temps: dict[str, Span | None] = {}  # temporary -> its first round
        self.declared: set[str] = set()  # every name of an input or slot declaration

    # ------------------------------------------------------------ reporting

    def error(self, message: str, where: _Child | Span | None, hint: str | None = None) -> Invalid:
        span = where if isinstance(where, Span) or where is None else _span(where)
        return self.diagnostics.error(message, span, hint)

    # ------------------------------------------------------------ program

    def program(self, tree: Tree[Token]) -> Program:
        items = [_tree(item) for item in tree.children]
        outputs: list[Token] = []
        self.declared = {
            str(item.children[0]) for item in items if item.data in ("input_decl", "slot_decl")
        }
        for item in items:
            if item.data in ("input_decl", "slot_decl"):
                self.declaration(item)
            elif item.data == "output_decl":
                outputs.extend(_token(name) for name in item.children)
        # Lark leaves iter_subtrees_topdown unannotated (it yields Tree[Token]s here).
        for node in tree.iter_subtrees_topdown():  # type: ignore[no-untyped-call]
            if node.data == "round":
                self._collect_temps(node, _token(node.children[0]))
        rounds: list[Round | For] = []
        for item in items:
            if item.data in ("round", "for_loop"):
                built = self.round_or_for(item, _Scope())
                if built is not None:
                    rounds.append(built)
            elif item.data in ("receive", "send", "assign", "if_stmt"):
                self.error(
                    "a statement outside a round",
                    self._head(item),
                    "local statements and receives belong inside `round { ... }`",
                )
        output_names: list[str] = []
        for tok in outputs:
            name = str(tok)
            if name in output_names:
                self.error(f"output {name!r} is listed twice", tok)
            elif name in RESERVED:
                continue  # its declaration has been reported
            elif name not in self.slots:
                hint = self._suggest(name, list(self.slots)) or "expected a declared slot"
                self.error(f"output {name!r} is not a declared slot", tok, hint)
            else:
                output_names.append(name)
        if not outputs and not self.diagnostics:
            self.error(
                "the program declares no output",
                None,
                "add `output NAME` naming the slots to print after the last round",
            )
        self._lint_comments()
        self.diagnostics.raise_any(MAX_ERRORS * 2)
        return Program(
            tuple(self.slots.values()),
            tuple(self.inputs),
            tuple(output_names),
            tuple(rounds),
            source=self.source,
            filename=self.filename,
        )

    def _head(self, item: Tree[Token]) -> Span | None:
        """The first line of a construct (its keyword or target), for messages."""
        span = _span(item)
        first = item.children[0] if item.children else None
        if isinstance(first, Token):
            return _span(first)
        if span is not None and span.end_line != span.line:
            return Span(span.line, span.column, span.line, span.column + 1)
        return span

    def _lint_comments(self) -> None:
        """``x = n // 2`` parses as ``x = n`` and a comment: catch the likely cases."""
        for number, text in enumerate(self.source.split("\n"), start=1):
            code, sep, comment = text.partition("//")
            if not sep or not code.strip() or not re.fullmatch(r"[\w)]", code.strip()[-1:]):
                continue
            if _DIVISOR.fullmatch(comment):
                start = len(code) + 1
                self.error(
                    f"`//{comment.rstrip()}` is a comment, not a division",
                    Span(number, start, number, len(text.rstrip()) + 1),
                    "`//` starts a comment; integer division of static values is written `div`",
                )

    # ------------------------------------------------------------ declarations

    def _check_new_name(self, tok: Token, what: str) -> bool:
        name = str(tok)
        if name in RESERVED:
            self.error(f"{name!r} is reserved and cannot name {what}", tok, _reserved_why(name))
            return False
        return True

    def _constant(self, tree: _Child, scope: _Scope, what: str) -> float:
        """A constant number (closed arithmetic of numbers), e.g. a bound or a default."""
        expr = self.expr(tree, scope)
        value = self._constant_value(expr)
        if value is None:
            raise self.error(
                f"{what} must be a constant number",
                tree,
                "expected a number such as 0, -1e9 or 2**20; i, r, n, loop variables and "
                "slots are not allowed here",
            )
        return value

    def _constant_value(self, expr: _Built) -> float | None:
        if isinstance(expr, STATIC_TYPES):
            if not _closed(expr):
                return None
            folded = self._fold(expr)
            if abs(folded) < 2**1000:
                return float(folded)
            return math.inf if folded > 0 else -math.inf
        match expr:
            case Num(value):
                return value
            case Static(inner):
                return self._constant_value(inner)
            case Scale(factor, arg):
                arg_value = self._constant_value(arg)
                return None if arg_value is None else factor * arg_value
            case Add(left, right) | Sub(left, right):
                a, b = self._constant_value(left), self._constant_value(right)
                if a is None or b is None:
                    return None
                return a + b if isinstance(expr, Add) else a - b
        return None

    def _finite(self, value: float, tree: _Child, what: str) -> float:
        if not math.isfinite(value):
            raise self.error(f"{what} is not a finite number", tree)
        return value

    def declaration(self, item: Tree[Token]) -> None:
        name_tok, *rest = item.children
        kind = "input" if item.data == "input_decl" else "slot"
        name = str(name_tok)
        fresh = self._check_new_name(_token(name_tok), "a slot")
        if fresh and name in self.slots:
            first = self.slots[name].span
            where = f" (first at line {first.line})" if first else ""
            self.error(f"slot {name!r} is declared twice{where}", name_tok)
            fresh = False
        bound: float | None = None
        init = 0.0
        scope = _Scope()
        for part in map(_tree, rest):
            try:
                if part.data == "bound":
                    bound = self._finite(
                        self._constant(part.children[0], scope, "a bound"), part, "the bound"
                    )
                    if bound <= 0:
                        self.error(
                            f"a bound must be positive, not {_number(bound)}",
                            part.children[0],
                            "it bounds the absolute value: `bound 1e6` means |value| <= 1e6",
                        )
                        bound = None
                elif kind == "input":
                    self.error(
                        "an input takes its value from the input vector; it has no initial value",
                        part,
                        "use `slot NAME = VALUE` for a slot with an initial value",
                    )
                else:
                    init = self._finite(
                        self._constant(part.children[0], scope, "an initial value"),
                        part,
                        "the initial value",
                    )
                    if bound is not None and abs(init) > bound:
                        self.error(
                            f"the initial value {_number(init)} exceeds the bound {_number(bound)}",
                            part.children[0],
                        )
            except Invalid:
                continue
        if not fresh:
            return
        self.slots[name] = Slot(name, bound, init, span=_span(name_tok))
        if kind == "input":
            self.inputs.append(name)

    # ------------------------------------------------------------ rounds and loops

    def _collect_temps(self, item: Tree[Token], where: Token) -> None:
        """Record the temporaries a round assigns or receives (for better messages)."""
        stack = [item]
        while stack:
            node = stack.pop()
            if node.data in ("assign", "receive", "send"):
                name = str(node.children[0])
                if name not in self.slots:
                    self.program_temps.setdefault(name, _span(where))
            stack.extend(c for c in node.children if isinstance(c, Tree))

    def round_or_for(self, item: Tree[Token], scope: _Scope) -> Round | For | None:
        if item.data == "round":
            return self.round(item, scope)
        return self.for_loop(item, scope)

    def body_items(self, body: Tree[Token]) -> list[Tree[Token]]:
        return [c for c in body.children if isinstance(c, Tree)]

    def for_loop(self, item: Tree[Token], scope: _Scope) -> For | None:
        for_tok, var_tok, start_t, stop_t, body = item.children
        var = str(var_tok)
        ok = self._check_new_name(_token(var_tok), "a loop variable")
        if ok and var in self.slots:
            self.error(f"loop variable {var!r} has the name of a slot", var_tok)
            ok = False
        if ok and var in scope.loops:
            self.error(
                f"loop variable {var!r} is already the variable of an enclosing loop", var_tok
            )
            ok = False
        bounds: list[StaticExpr] = []
        for bound_t, what in ((start_t, "the start"), (stop_t, "the stop")):
            try:
                bounds.append(self.static(bound_t, scope, f"{what} of a loop"))
            except Invalid:
                continue
            machine = next((n for n in _walk(bounds[-1]) if n == SVar("i")), None)
            if machine is not None:
                self.error(
                    "a loop bound cannot depend on the machine index `i`",
                    machine.span or _span(bound_t),
                    "every machine runs the same rounds; choose per machine with "
                    "`if` on `i` inside a round",
                )
                bounds.pop()
        inner = _Scope({**scope.loops, var: _span(var_tok)}, None)
        rounds: list[Round | For] = []
        for child in self.body_items(_tree(body)):
            if child.data in ("round", "for_loop"):
                built = self.round_or_for(child, inner)
                if built is not None:
                    rounds.append(built)
            elif child.data in ("input_decl", "slot_decl", "output_decl"):
                self.error("declarations belong at the top level of the program", self._head(child))
            else:
                self.error(
                    "a statement directly inside a loop",
                    self._head(child),
                    "a loop repeats rounds: put the statement inside `round { ... }`",
                )
        if not ok or len(bounds) != 2:
            return None
        header = _join(_span(for_tok), _span(stop_t))
        return For(var, bounds[0], bounds[1], tuple(rounds), span=header)

    def round(self, item: Tree[Token], scope: _Scope) -> Round:
        round_tok, body = item.children
        items = self.body_items(_tree(body))
        state = _RoundState()
        for child in items:
            stack = [child]
            while stack:
                node = stack.pop()
                if node.data in ("assign", "receive", "send"):
                    names = node.children[:-3] if node.data == "send" else node.children[:1]
                    for tok in names:
                        if str(tok) not in self.slots:
                            state.temps.setdefault(str(tok), _span(tok))
                stack.extend(c for c in node.children if isinstance(c, Tree))
        inner = _Scope(scope.loops, state)
        receives: list[Receive] = []
        sends: list[Send] = []
        statements: list[Stmt] = []
        for child in items:
            if child.data == "send":
                if statements:
                    self.error(
                        "a `send` after a local statement",
                        self._head(child),
                        "sends come first in a round (they read the memory as it was at "
                        "the start of the round): move it above the statements",
                    )
                    continue
                sent = self.send(child, inner)
                if sent is not None:
                    sends.append(sent)
            elif child.data == "receive":
                if statements:
                    self.error(
                        "a `recv` after a local statement",
                        self._head(child),
                        "receives come first in a round (they read the memory as it was at "
                        "the start of the round): move it above the statements",
                    )
                    continue
                received = self.receive(child, inner)
                if received is not None:
                    receives.append(received)
            else:
                stmt = self.statement(child, inner, "a round")
                if stmt is not None:
                    statements.append(stmt)
        return Round(tuple(receives), tuple(statements), tuple(sends), span=_span(round_tok))

    def _target_ok(self, target_tok: Token, scope: _Scope, word: str) -> bool:
        """Whether the name a `recv` / `send` defines is a new round-local name (reports
        the error otherwise)."""
        target = str(target_tok)
        verb = "receive" if word == "recv" else "send"
        assert scope.round is not None
        if target in RESERVED:
            self.error(f"cannot receive into {target!r}", target_tok, _reserved_why(target))
        elif target in self.slots:
            self.error(
                f"cannot {verb} into the slot {target!r}",
                target_tok,
                f"{verb} into a new name and assign it: `got = {word} ...` then `{target} = got`",
            )
        elif target in scope.loops:
            self.error(f"cannot {verb} into the loop variable {target!r}", target_tok)
        elif target in scope.round.defined:
            self.error(f"{target!r} is received twice in this round", target_tok)
        else:
            return True
        return False

    def send(self, item: Tree[Token], scope: _Scope) -> Send | None:
        *target_toks, slot_tok, dest_tok, default_t = item.children
        state = scope.round
        assert state is not None
        ok = True
        for tok in target_toks:
            if self._target_ok(_token(tok), scope, "send"):
                state.defined.add(str(tok))
            else:
                ok = False
        if len(target_toks) > MAX_SEND_CAPACITY:
            self.error(
                f"a `send` receives into at most {MAX_SEND_CAPACITY} names, not {len(target_toks)}",
                target_toks[MAX_SEND_CAPACITY],
                "each name is one sender a machine may receive from (the receiver's "
                "capacity); the routing grows with its square",
            )
            ok = False
        for tok, what in ((slot_tok, "the value of a `send`"), (dest_tok, "the destination")):
            name = str(tok)
            if name not in self.slots:
                ok = False
                hint = self._suggest(name, list(self.slots)) or "expected a declared slot"
                self.error(f"{what} must be a slot, and {name!r} is not a declared slot", tok, hint)
        dest = str(dest_tok)
        if dest in self.slots and self.slots[dest].bound is None:
            self.error(
                f"the destination slot {dest!r} needs a declared bound",
                dest_tok,
                f"declare it with a bound, e.g. `slot {dest} bound 1e6`: routing by "
                "destination compares it with machine indices",
            )
            ok = False
        try:
            default = self._finite(
                self._constant(default_t, scope, "the default of a `send`"),
                default_t,
                "the default",
            )
        except Invalid:
            ok = False
        if not ok:
            return None
        targets = tuple(str(tok) for tok in target_toks)
        return Send(targets, str(slot_tok), dest, default, span=_span(item))

    def receive(self, item: Tree[Token], scope: _Scope) -> Receive | None:
        target_tok, slot_tok, source_t, default_t = item.children
        target, slot = str(target_tok), str(slot_tok)
        state = scope.round
        assert state is not None
        ok = self._target_ok(_token(target_tok), scope, "recv")
        if slot not in self.slots:
            ok = False
            if slot in state.temps or slot in self.program_temps:
                self.error(
                    f"`recv` reads a slot of another machine, and {slot!r} is a temporary",
                    slot_tok,
                    f"declare `slot {slot}` and assign it in an earlier round",
                )
            elif slot in scope.loops or slot in STATIC_VARS:
                self.error(
                    f"`recv` reads a slot of another machine, and {slot!r} is not a slot",
                    slot_tok,
                    "a static value is known everywhere: use it directly",
                )
            else:
                hint = self._suggest(slot, list(self.slots)) or "expected a declared slot"
                self.error(f"`recv` of {slot!r}, which is not a declared slot", slot_tok, hint)
        try:
            source = self.static(source_t, scope, "the source of a `recv`")
        except Invalid:
            ok = False
        try:
            default = self._finite(
                self._constant(default_t, scope, "the default of a `recv`"),
                default_t,
                "the default",
            )
        except Invalid:
            ok = False
        if target not in RESERVED and target not in self.slots:
            state.defined.add(target)
        if not ok:
            return None
        return Receive(target, slot, source, default, span=_span(item))

    # ------------------------------------------------------------ statements

    def statement(self, item: Tree[Token], scope: _Scope, where: str) -> Stmt | None:
        if item.data == "assign":
            return self.assign(item, scope)
        if item.data == "if_stmt":
            return self.if_stmt(item, scope)
        if item.data in ("receive", "send"):
            word = "recv" if item.data == "receive" else "send"
            self.error(
                f"a `{word}` inside an `if`",
                self._head(item),
                "receives happen for every machine at the start of the round: receive "
                "before the statements and use the value in the branch",
            )
        elif item.data in ("input_decl", "slot_decl", "output_decl"):
            self.error("declarations belong at the top level of the program", self._head(item))
        elif item.data in ("round", "for_loop"):
            what = "round" if item.data == "round" else "loop"
            self.error(
                f"a {what} inside {where}",
                self._head(item),
                "rounds and loops of rounds are written at the top level or inside `for`",
            )
        return None

    def assign(self, item: Tree[Token], scope: _Scope) -> Assign | None:
        target_tok, expr_t = item.children
        target = str(target_tok)
        state = scope.round
        assert state is not None
        ok = True
        if target in STATIC_VARS:
            self.error(
                f"cannot assign to {target!r}: it is {STATIC_VARS[target]}",
                target_tok,
                "assign to a slot or to a new temporary name",
            )
            ok = False
        elif target in RESERVED:
            self.error(f"cannot assign to {target!r}", target_tok, _reserved_why(target))
            ok = False
        elif target in scope.loops:
            self.error(f"cannot assign to the loop variable {target!r}", target_tok)
            ok = False
        try:
            expr = self.data(expr_t, scope)
        except Invalid:
            ok = False
        if target not in self.slots and target not in RESERVED and target not in scope.loops:
            state.defined.add(target)
        if not ok:
            return None
        return Assign(target, expr, span=_span(item))

    def if_stmt(self, item: Tree[Token], scope: _Scope) -> If | None:
        if_tok, cond_t, then_t, *rest = item.children
        state = scope.round
        assert state is not None
        ok = True
        try:
            cond = self.condition(cond_t, scope, "the condition of an `if`")
        except Invalid:
            ok = False
        before_defined, before_maybe = set(state.defined), set(state.maybe)
        then = self.block(_tree(then_t), scope)
        then_defined, then_maybe = state.defined, state.maybe
        state.defined, state.maybe = set(before_defined), set(before_maybe)
        otherwise: tuple[Stmt, ...] | None = ()
        if rest:
            other = _tree(rest[0])
            if other.data == "if_stmt":
                nested = self.if_stmt(other, scope)
                otherwise = None if nested is None else (nested,)
            else:
                otherwise = self.block(other, scope)
        state.maybe = (then_maybe | state.maybe | (then_defined ^ state.defined)) - (
            then_defined & state.defined
        )
        state.defined = then_defined & state.defined
        if not ok or then is None or otherwise is None:
            return None
        return If(cond, then, otherwise, span=_join(_span(if_tok), _span(cond_t)))

    def block(self, body: Tree[Token], scope: _Scope) -> tuple[Stmt, ...] | None:
        out: list[Stmt] = []
        ok = True
        for child in self.body_items(body):
            stmt = self.statement(child, scope, "an `if`")
            if stmt is None:
                ok = False
            else:
                out.append(stmt)
        return tuple(out) if ok else None

    # ------------------------------------------------------------ expression kinds

    def static(self, tree: _Child, scope: _Scope, what: str) -> StaticExpr:
        expr = self.expr(tree, scope)
        if isinstance(expr, STATIC_TYPES):
            return expr
        culprit = next((n for n in _walk(expr) if isinstance(n, Read)), None)
        if culprit is not None:
            raise self.error(
                f"{what} must be static, but {culprit.name!r} is data",
                culprit.span or _span(tree),
                "static expressions use integers, i, r, n and loop variables; "
                "PCOC communication cannot depend on data",
            )
        raise self.error(
            f"{what} must be static (an integer expression of i, r, n and loop variables)",
            tree,
            "decimal numbers and data functions (abs, relu, clamp) are data",
        )

    def data(self, tree: _Child, scope: _Scope) -> Expr:
        return self._to_data(self.expr(tree, scope), tree)

    def condition(self, tree: _Child, scope: _Scope, what: str) -> Compare | StaticExpr:
        expr = self.expr(tree, scope)
        if isinstance(expr, (*STATIC_TYPES, Compare)):
            return expr
        raise self.error(
            f"{what} is data but not a comparison",
            tree,
            "a data condition is one comparison with a margin, e.g. `x > y margin 0.5`",
        )

    def _to_data(self, expr: _Built, where: _Child) -> Expr:
        if not isinstance(expr, STATIC_TYPES):
            return expr
        if _closed(expr):
            value = self._fold(expr)
            if abs(value) > MAX_EXACT_INT:
                raise self.error(
                    f"the integer {shown_int(value)} is too large to be exact as a number",
                    expr.span or _span(where),
                    "numbers are float64: integers up to 2**53 are exact",
                )
            return Num(float(value), span=expr.span)
        return Static(expr, span=expr.span)

    def _fold(self, expr: StaticExpr) -> int:
        """The value of a closed static expression (the checker's evaluator, so the
        messages agree)."""
        try:
            value: int = static_value(expr, {})  # closed: one int, not one per machine
        except StaticFailure as failure:
            raise self.error(failure.message, failure.span or expr.span) from None
        return value

    # ------------------------------------------------------------ expressions

    def expr(self, child: _Child, scope: _Scope) -> _Built:
        tree = _tree(child)
        method: Callable[[Tree[Token], _Scope], _Built] = getattr(self, "e_" + tree.data)
        node = method(tree, scope)
        return node if node.span is not None else replace(node, span=_span(tree))

    def _operands(self, trees: Iterable[_Child], scope: _Scope) -> list[_Built]:
        """Build every operand, so the errors in all of them are reported."""
        results: list[_Built] = []
        failed = False
        for tree in trees:
            try:
                results.append(self.expr(tree, scope))
            except Invalid:
                failed = True
        if failed:
            raise Invalid()
        return results

    def e_number(self, tree: Tree[Token], scope: _Scope) -> SNum | Num:
        text = str(tree.children[0])
        if len(text) > MAX_NUMBER_TEXT:  # no 5000-digit conversions
            raise self.error(
                f"the number {text[:12]}… ({len(text)} characters) is out of range", tree
            )
        if text.isdigit():
            return SNum(int(text))
        value = float(text)
        if not math.isfinite(value):
            raise self.error(f"the number {text} is out of range", tree)
        return Num(value)

    def e_name(self, tree: Tree[Token], scope: _Scope) -> SVar | Read:
        tok = tree.children[0]
        name = str(tok)
        span = _span(tok)
        if name in STATIC_VARS or name in scope.loops:
            return SVar(name)
        state = scope.round
        if state is not None and name in state.defined:
            return Read(name, span=span)
        if name in self.slots or (state is None and name in self.declared):
            return Read(name, span=span)
        if state is not None and name in state.maybe:
            raise self.error(
                f"{name!r} is not assigned on every path to this point",
                tok,
                "an `if` assigns it in one branch only: assign it before the `if` or in "
                "both branches",
            )
        if state is not None and name in state.temps:
            raise self.error(
                f"{name!r} is read before it is assigned in this round",
                tok,
                "temporaries are local to their round and exist once assigned",
            )
        if name in self.program_temps:
            first = self.program_temps[name]
            where = f" (line {first.line})" if first else ""
            raise self.error(
                f"{name!r} is a temporary of another round{where}; temporaries last one round",
                tok,
                f"declare `slot {name}` to keep a value from round to round",
            )
        if name in FUNCTIONS:
            raise self.error(f"{name!r} is a function: call it, e.g. `{name}(...)`", tok)
        if name in KEYWORDS:
            raise self.error(f"{name!r} is a reserved word", tok)
        known = [*self.slots, *scope.loops, *STATIC_VARS]
        if state is not None:
            known += sorted(state.defined)
        hint = (
            self._suggest(name, known) or "expected a slot, a temporary, i, r, n or a loop variable"
        )
        raise self.error(f"undefined name {name!r}", tok, hint)

    def _suggest(self, name: str, known: list[str]) -> str | None:
        if len(self.diagnostics) > 50:
            return None
        close = difflib.get_close_matches(name, known, n=1)
        return f"did you mean {close[0]!r}?" if close else None

    def e_neg(self, tree: Tree[Token], scope: _Scope) -> _Built:
        (arg,) = self._operands(tree.children, scope)
        if isinstance(arg, SNum):
            return SNum(-arg.value)
        if isinstance(arg, STATIC_TYPES):
            return SBin("-", SNum(0, span=arg.span), arg)
        if isinstance(arg, Num):
            return Num(-arg.value)
        return Scale(-1.0, arg)

    def _arith(self, tree: Tree[Token], scope: _Scope, op: str) -> SBin | Add | Sub:
        left, right = self._operands(tree.children, scope)
        if isinstance(left, STATIC_TYPES) and isinstance(right, STATIC_TYPES):
            return SBin(op, left, right)
        a, b = self._to_data(left, tree), self._to_data(right, tree)
        return Add(a, b) if op == "+" else Sub(a, b)

    def e_add(self, tree: Tree[Token], scope: _Scope) -> SBin | Add | Sub:
        return self._arith(tree, scope, "+")

    def e_sub(self, tree: Tree[Token], scope: _Scope) -> SBin | Add | Sub:
        return self._arith(tree, scope, "-")

    def e_mul(self, tree: Tree[Token], scope: _Scope) -> SBin | Scale:
        left, right = self._operands(tree.children, scope)
        if isinstance(left, STATIC_TYPES) and isinstance(right, STATIC_TYPES):
            return SBin("*", left, right)
        for factor, arg in ((left, right), (right, left)):
            value = self._constant_value(factor)
            if value is not None:
                if not math.isfinite(value):
                    raise self.error("the factor is not a finite number", tree)
                return Scale(value, self._to_data(arg, tree))
        varying = [side for side in (left, right) if isinstance(side, STATIC_TYPES)]
        if varying:
            raise self.error(
                "the factor of `*` must be a constant number",
                varying[0].span or tree,
                "a data value can be multiplied only by a number known without i, r, n or "
                "loop variables (the local computation is piecewise linear)",
            )
        raise self.error(
            "`*` of two data values",
            tree,
            "one side must be a constant number: the local computation is piecewise linear",
        )

    def _static_operands(
        self, tree: Tree[Token], scope: _Scope, message: str, hint: str
    ) -> list[StaticExpr]:
        """The operands of ``tree``, which must be static (``message`` at the first that is
        data)."""
        operands = self._operands(tree.children, scope)
        statics: list[StaticExpr] = []
        for side, child in zip(operands, tree.children, strict=True):
            if not isinstance(side, STATIC_TYPES):
                raise self.error(message, child, hint)
            statics.append(side)
        return statics

    def _static_only(self, tree: Tree[Token], scope: _Scope, op: str, word: str) -> SBin:
        left, right = self._static_operands(
            tree,
            scope,
            f"`{word}` works on static integers only, and this is data",
            "static values are integers, i, r, n and loop variables",
        )
        return SBin(op, left, right)

    def e_div(self, tree: Tree[Token], scope: _Scope) -> SBin:
        return self._static_only(tree, scope, "//", "div")

    def e_mod(self, tree: Tree[Token], scope: _Scope) -> SBin:
        return self._static_only(tree, scope, "%", "%")

    def e_pow(self, tree: Tree[Token], scope: _Scope) -> SBin:
        return self._static_only(tree, scope, "**", "**")

    def e_compare(self, tree: Tree[Token], scope: _Scope) -> SBin | Compare:
        left_t, op_tok, right_t, *margin_t = tree.children
        op = _CMP_NAMES[str(op_tok)]
        left, right = self._operands([left_t, right_t], scope)
        if isinstance(left, STATIC_TYPES) and isinstance(right, STATIC_TYPES):
            if margin_t:
                raise self.error(
                    "a margin on a comparison of static values",
                    margin_t[0],
                    "static comparisons are exact: remove `margin ...`",
                )
            return SBin(op, left, right)
        if not margin_t:
            raise self.error(
                f"a comparison of data needs a margin: `{op}` ... `margin M`",
                tree,
                f"e.g. `a {op} b margin 0.5`: the compiled model is exact when a − b keeps at "
                "least the margin away from the threshold",
            )
        margin = self._finite(
            self._constant(margin_t[0], scope, "a margin"), margin_t[0], "the margin"
        )
        if margin <= 0:
            raise self.error(f"a margin must be positive, not {_number(margin)}", margin_t[0])
        return Compare(op, self._to_data(left, tree), self._to_data(right, tree), margin)

    def _logic(self, tree: Tree[Token], scope: _Scope, op: str) -> SBin | SNot:
        operands = self._static_operands(
            tree,
            scope,
            f"`{op}` combines static conditions only, and this is data",
            "a data condition is one comparison with a margin: nest `if`s, or "
            "combine 0/1 comparisons arithmetically, e.g. "
            "`min(a > 0 margin 1, b > 0 margin 1) > 0.5 margin 0.5`",
        )
        if op == "not":
            return SNot(operands[0])
        return SBin(op, *operands)

    def e_and_(self, tree: Tree[Token], scope: _Scope) -> SBin | SNot:
        return self._logic(tree, scope, "and")

    def e_or_(self, tree: Tree[Token], scope: _Scope) -> SBin | SNot:
        return self._logic(tree, scope, "or")

    def e_not_(self, tree: Tree[Token], scope: _Scope) -> SBin | SNot:
        return self._logic(tree, scope, "not")

    def e_cond_expr(self, tree: Tree[Token], scope: _Scope) -> SBin | IfExpr:
        then_t, cond_t, else_t = tree.children
        failed = False
        try:
            cond = self.condition(cond_t, scope, "the condition of `... if ... else ...`")
        except Invalid:
            failed = True
        try:
            then, otherwise = self._operands([then_t, else_t], scope)
        except Invalid:
            failed = True
        if failed:
            raise Invalid()
        if (
            isinstance(cond, STATIC_TYPES)
            and isinstance(then, STATIC_TYPES)
            and isinstance(otherwise, STATIC_TYPES)
        ):
            # A static choice: t·a + (1 − t)·b with t = (cond != 0) in {0, 1}.
            span = _span(tree)
            truth = cond if _is_boolean(cond) else SBin("!=", cond, SNum(0), span=span)
            keep = SBin("*", truth, then, span=span)
            other = SBin("*", SBin("-", SNum(1), truth), otherwise, span=span)
            return SBin("+", keep, other)
        return IfExpr(cond, self._to_data(then, then_t), self._to_data(otherwise, else_t))

    def e_call(self, tree: Tree[Token], scope: _Scope) -> _Built:
        name_tok, *arg_ts = tree.children
        fn = str(name_tok)
        if fn not in FUNCTIONS:
            known = ", ".join(sorted(FUNCTIONS))
            hint = self._suggest(fn, sorted(FUNCTIONS))
            raise self.error(
                f"unknown function {fn!r}",
                name_tok,
                (hint + "; " if hint else "") + f"known: {known}",
            )
        args = self._operands(arg_ts, scope)
        arity = DATA_FUNCTIONS.get(fn) or STATIC_FUNCTIONS.get(fn)
        if arity is None and len(args) < 2:
            raise self.error(f"{fn}() needs at least two arguments", tree)
        if arity is not None and len(args) != arity:
            plural = "s" if arity > 1 else ""
            raise self.error(f"{fn}() takes {arity} argument{plural}, not {len(args)}", tree)
        span = _span(tree)
        if fn in ("min", "max"):
            statics = [a for a in args if isinstance(a, STATIC_TYPES)]
            if len(statics) == len(args):
                node = statics[0]
                for static in statics[1:]:
                    node = SCall(fn, (node, static), span=span)
                return node
            data = [self._to_data(a, t) for a, t in zip(args, arg_ts, strict=True)]
            expr = data[0]
            for arg in data[1:]:
                expr = Call(fn, (expr, arg), span=span)
            return expr
        if fn in STATIC_FUNCTIONS:
            if not isinstance(args[0], STATIC_TYPES):
                raise self.error(
                    f"{fn}() takes a static integer, and this is data",
                    arg_ts[0],
                    "static values are integers, i, r, n and loop variables",
                )
            return SCall(fn, (args[0],))
        if fn == "clamp":
            lo = self._constant_value(args[1])
            hi = self._constant_value(args[2])
            if lo is None or hi is None:
                what, t = ("lower", arg_ts[1]) if lo is None else ("upper", arg_ts[2])
                raise self.error(f"the {what} limit of clamp() must be a constant number", t)
            if lo > hi:
                raise self.error(
                    f"clamp() with lower limit {_number(lo)} above upper limit {_number(hi)}",
                    tree,
                )
            return Call(
                "clamp",
                (
                    self._to_data(args[0], arg_ts[0]),
                    Num(lo, span=_span(arg_ts[1])),
                    Num(hi, span=_span(arg_ts[2])),
                ),
            )
        return Call(fn, (self._to_data(args[0], arg_ts[0]),))


def _is_boolean(expr: StaticExpr) -> bool:
    """Whether a static expression is always 0 or 1."""
    return isinstance(expr, SNot) or (
        isinstance(expr, SBin) and expr.op in ("and", "or", "<", "<=", ">", ">=", "==", "!=")
    )


def _reserved_why(name: str) -> str:
    if name in STATIC_VARS:
        return f"{name!r} is {STATIC_VARS[name]}"
    if name in FUNCTIONS:
        return f"{name!r} is a built-in function"
    return f"{name!r} is a keyword"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e16 else repr(value)


def build_program(tree: Tree[Token], text: str, filename: str) -> Program:
    """The checked program of parse ``tree`` (of ``text``, read from ``filename``); raise
    :class:`CraspError` on any error."""
    return _Elaborator(text, filename).program(tree)
