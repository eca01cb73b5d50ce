"""Build a checked :class:`Program` from a parse tree: the one validation pass.

It resolves names, imports and positional predicates, infers sorts, desugars the
surface conveniences (chained comparisons, ``k * C``, ``#[j < i]``, ``∃←``, Boolean
conditionals, n-ary ``min``/``max``) and collects *every* error it finds, each with
its source span, before raising one :class:`CraspError`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from math import lcm
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from crasp_compiler.errors import Diagnostic, Diagnostics, Invalid, Span
from crasp_compiler.languages.crasp.nodes import (
    Add,
    And,
    BoolConst,
    BoolExpr,
    BoolRef,
    Compare,
    Cond,
    Count,
    CountConst,
    CountExpr,
    CountRef,
    Definition,
    Expr,
    Max,
    Min,
    Not,
    Or,
    Periodic,
    Program,
    Scale,
    Sort,
    Sub,
    TokenIs,
    fold_periodic,
)
from crasp_compiler.model.model import BOS
from crasp_compiler.syntax import Token, Tree
from crasp_compiler.syntax.lark_tools import chain_operands
from crasp_compiler.syntax.lark_tools import span as _span

# Predicates of the community interpreter, available after ``#import NAME``.
PREDEFINED_UNARY = {"pos_even": Periodic(2, frozenset({0}))}
PREDEFINED_BINARY = {"pred": frozenset({1}), "pred4": frozenset({4})}

_CMP_CANON = {
    "=": "==",
    "==": "==",
    "!=": "!=",
    "≠": "!=",
    "<=": "<=",
    "≤": "<=",
    ">=": ">=",
    "≥": ">=",
    "<": "<",
    ">": ">",
}
# Bounds that keep checking and evaluation finite and exact: count constants fit int64
# arithmetic with room to spare; periods and local offsets are enumerated one by one.
MAX_CONSTANT = 10**9
MAX_POSITIONAL = 10**9  # integers in positional atoms (offsets are bounded further below)
MAX_MODULUS = 10_000
MAX_OFFSET = 10_000
MAX_RANGE = 100_000  # symbols one `range A..B` of the alphabet may name

_RELATION_CLASSES = (
    "supported positional relations: periodic predicates (Boolean combinations of "
    "`i % m == r`) and local relations (`j == i - c` with c >= 0, and finite "
    "disjunctions of those)"
)


# A position, or every residue at once.
Positions = int | npt.NDArray[np.int64]
# What building each of several children gives (:meth:`_Elaborator._both`).
Built = TypeVar("Built")


@dataclass
class _Scope:
    """Where an expression is read: its position variable and the enclosing ones."""

    var: str  # the position variable at which the current expression is evaluated
    outer: tuple[str, ...] = ()  # enclosing position variables


@dataclass
class _Linear:
    """A positional term: Σ coef·var + const, optionally reduced ``% modulus``."""

    coefs: dict[str, int] = field(default_factory=dict)
    const: int = 0
    modulus: int | None = None

    def value(self, env: Mapping[str, Positions]) -> Positions:
        v = sum(c * env[x] for x, c in self.coefs.items()) + self.const
        return v % self.modulus if self.modulus else v


def _unquote(text: str) -> str:
    body = text[1:-1]
    return re.sub(r"\\(.)", r"\1", body)


def _tree(child: Tree[Token] | Token) -> Tree[Token]:
    """A child the grammar makes a tree (an expression, a positional term, a binder)."""
    assert isinstance(child, Tree), child
    return child


def _token(child: Tree[Token] | Token) -> Token:
    """A child the grammar makes a token (a name, a literal, an integer)."""
    assert isinstance(child, Token), child
    return child


def _cmp(op: Tree[Token]) -> str:
    return _CMP_CANON[str(op.children[0])]


def _holds(op: str, a: Positions, b: Positions) -> bool | npt.NDArray[np.bool_]:
    """``a op b``, at one position or at every residue at once."""
    return {"<=": a <= b, "<": a < b, "==": a == b, "!=": a != b, ">=": a >= b, ">": a > b}[op]


class _Elaborator:
    def __init__(self, source: str, filename: str) -> None:
        self.source = source
        self.filename = filename
        self.diagnostics = Diagnostics(source, filename)
        self.sorts: dict[str, Sort | None] = {}  # None: a definition with errors
        self.defined_at: dict[str, Span | None] = {}
        self.definition_lines: dict[str, Span | None] = {}
        self.unary: dict[str, BoolExpr] = {}
        self.binary: dict[str, frozenset[int]] = {}
        self.imported: set[str] = set()
        self.literals: dict[str, Span | None] = {}
        self.failed: set[str] = set()  # predicates with errors: uses report nothing more
        self.warnings: list[Diagnostic] = []

    # ------------------------------------------------------------ reporting

    def error(
        self, message: str, where: Tree[Token] | Token | Span | None, hint: str | None = None
    ) -> Invalid:
        span = where if isinstance(where, Span) or where is None else _span(where)
        return self.diagnostics.error(message, span, hint)

    # ------------------------------------------------------------ program

    def program(self, tree: Tree[Token]) -> Program:
        statements = [_tree(st) for st in tree.children]
        for st in statements:
            if st.data == "definition":
                name = str(st.children[0])
                self.definition_lines.setdefault(name, _span(st.children[0]))

        definitions: list[Definition] = []
        alphabet: list[str] | None = None
        stand_in: list[str] = []
        declared_ok = True
        accept: tuple[str, Token] | None = None
        outputs: list[tuple[str, Token]] = []
        for st in statements:
            kind = st.data
            if kind == "definition":
                d = self.definition(st)
                if d is not None:
                    definitions.append(d)
            elif kind == "import_stmt":
                self.import_stmt(_token(st.children[1]))
            elif kind == "predicate_stmt":
                self.predicate(st)
            elif kind == "alphabet_stmt":
                before = len(self.diagnostics)
                items = [
                    (symbol, tok, isinstance(tok, Tree))
                    for tok in st.children
                    for symbol in (
                        self.symbol_range(tok) if isinstance(tok, Tree) else [self.symbol(tok)]
                    )
                ]
                if alphabet is not None:
                    self.error("the alphabet is declared twice", st)
                    continue  # keep the first declaration: no cascade of token errors
                symbols = [symbol for symbol, _, _ in items]
                for n, (symbol, tok, _) in enumerate(items):
                    if symbol is not None and symbol in symbols[:n]:
                        self.error(f"the alphabet lists {symbol!r} twice", tok)
                alphabet = [s for s in dict.fromkeys(symbols) if s is not None]
                stand_in = [symbol for symbol, _, ranged in items if ranged and symbol]
                declared_ok = len(self.diagnostics) == before
            elif kind == "accept_stmt":
                if accept is not None:
                    self.error("`accept` is given twice", st)
                accept = (str(st.children[0]), _token(st.children[0]))
            elif kind == "output_stmt":
                outputs.extend((str(t), _token(t)) for t in st.children)

        if alphabet is not None and not declared_ok:  # no cascade of token errors
            alphabet = list(dict.fromkeys([*alphabet, *self.literals]))
        elif alphabet is not None:
            for symbol, span in self.literals.items():
                if symbol not in alphabet:
                    self.error(
                        f"token {symbol!r} is not in the declared alphabet",
                        span,
                        "expected one of: " + ", ".join(repr(s) for s in alphabet),
                    )
        else:
            alphabet = list(self.literals)

        for n, (name, tok) in enumerate(([accept] if accept else []) + outputs):
            if name not in self.sorts:
                if accept and n == 0:
                    message = f"`accept` names {name!r}, which is not defined"
                else:
                    message = f"output {name!r} is not defined"
                self.error(message, tok, self._suggest(name))
        if accept and self.sorts.get(accept[0]) == Sort.COUNT:
            self.error(f"`accept` needs a Boolean definition; {accept[0]!r} is a count", accept[1])

        accept_name = accept[0] if accept else None
        if accept_name is None and not outputs:
            booleans = [d.name for d in definitions if d.sort == Sort.BOOL]
            if booleans:
                accept_name = booleans[-1]
            elif not statements:
                self.error("the program is empty", None, 'expected definitions such as `C = # "a"`')
            elif not self.diagnostics:
                self.error(
                    "the program has no Boolean definition to accept with",
                    None,
                    "define a Boolean, or name outputs with `output NAME, ...`",
                )
        output_names = list(dict.fromkeys([n for n, _ in outputs]))
        if accept_name is not None and accept_name not in output_names:
            output_names.insert(0, accept_name)

        self.diagnostics.raise_any()
        return Program(
            tuple(definitions),
            tuple(alphabet),
            accept_name,
            tuple(output_names),
            source=self.source,
            filename=self.filename,
            warnings=tuple(self.warnings),
            stand_in=tuple(stand_in),
        )

    def symbol_range(self, tree: Tree[Token]) -> list[str | None]:
        """The symbols of ``range A..B``: "A" … "B" (at most :data:`MAX_RANGE`)."""
        low_tok, high_tok = tree.children
        low, high = int(str(low_tok)), int(str(high_tok))
        if low > high:
            self.error(
                f"the range {low}..{high} is empty", high_tok, f"write `range {high}..{low}`"
            )
            return []
        if high - low + 1 > MAX_RANGE:
            self.error(
                f"the range {low}..{high} has {high - low + 1:,} symbols, more than {MAX_RANGE:,}",
                high_tok,
            )
            return []
        return [str(k) for k in range(low, high + 1)]

    def symbol(self, tok: Token) -> str | None:
        symbol = _unquote(str(tok))
        if not symbol or any(ch.isspace() for ch in symbol):
            self.error(
                f"token literal {tok!s} is empty or contains whitespace",
                tok,
                "inputs are whitespace-separated tokens, so a symbol has no spaces",
            )
            return None
        if not symbol.isprintable():
            self.error(f"token literal {tok!s} contains an unprintable character", tok)
            return None
        if symbol == BOS:
            self.error(
                f"token literal {tok!s} is reserved: it is the compiled models' BOS token", tok
            )
            return None
        return symbol

    def import_stmt(self, name_tok: Token) -> None:
        name = str(name_tok)
        if name in PREDEFINED_UNARY or name in PREDEFINED_BINARY:
            self.imported.add(name)
            return
        known = ", ".join(sorted(PREDEFINED_UNARY | PREDEFINED_BINARY))
        self.error(f"unknown predefined predicate {name!r}", name_tok, f"expected one of: {known}")

    def _check_new_name(self, name_tok: Token) -> bool:
        name = str(name_tok)
        if name in self.sorts or name in self.unary or name in self.binary or name in self.failed:
            first = self.defined_at.get(name)
            where = f" (first defined at line {first.line})" if first else ""
            self.error(f"{name!r} is already defined{where}", name_tok)
            return False
        return True

    def definition(self, st: Tree[Token]) -> Definition | None:
        name_tok = _token(st.children[0])
        name = str(name_tok)
        rest = st.children[1:]
        var = "i"
        if rest and isinstance(rest[0], Tree) and rest[0].data == "index":
            var = str(rest[0].children[0])
            rest = rest[1:]
        fresh = self._check_new_name(name_tok)
        self.current = name
        try:
            expr = self.expr(rest[0], _Scope(var))
        except Invalid:
            expr = None
        if not fresh:
            return None
        if expr is None:
            # Record the name so later uses do not cascade into "undefined" errors.
            self.sorts[name] = None
            self.defined_at[name] = _span(name_tok)
            return None
        self.sorts[name] = expr.sort
        self.defined_at[name] = _span(name_tok)
        return Definition(name, expr, _span(name_tok))

    def predicate(self, st: Tree[Token]) -> None:
        first, *vars_, body = st.children
        name_tok = _token(first)
        names = [str(v) for v in vars_]
        if not self._check_new_name(name_tok):
            return
        self.defined_at[str(name_tok)] = _span(name_tok)
        if len(set(names)) != len(names):
            self.error("the two position variables of a relation must differ", st)
            self.failed.add(str(name_tok))
            return
        self.current = str(name_tok)
        try:
            if len(names) == 1:
                value = self.expr(body, _Scope(names[0]))
                if not isinstance(value, (Periodic, BoolConst)):
                    raise self.error(
                        "a unary predicate must be periodic",
                        body,
                        "expected a Boolean combination of `i % m == r`",
                    )
                self.unary[str(name_tok)] = value
            else:
                body_t = _tree(body)
                self.binary[str(name_tok)] = self.relation(body_t, outer=names[0], inner=names[1])
        except Invalid:
            self.failed.add(str(name_tok))

    # ------------------------------------------------------------ expressions

    def expr(self, t: Tree[Token] | Token, scope: _Scope) -> Expr:
        if not isinstance(t, Tree) or not hasattr(self, "e_" + t.data):  # pragma: no cover
            # the grammar has no other node kinds
            raise self.error(f"unsupported construct {getattr(t, 'data', t)!r}", t)
        method: Callable[[Tree[Token], _Scope], Expr] = getattr(self, "e_" + t.data)
        node = method(t, scope)
        if node.span is None:
            object.__setattr__(node, "span", _span(t))
        return node

    def boolean(self, t: Tree[Token] | Token, scope: _Scope, what: str) -> BoolExpr:
        node = self.expr(t, scope)
        if not isinstance(node, BoolExpr):
            hint = "compare it, e.g. `C > 0`, to get a Boolean"
            raise self.error(f"{what} needs a Boolean, but this is a count", t, hint)
        return node

    def count(self, t: Tree[Token] | Token, scope: _Scope, what: str) -> CountExpr:
        node = self.expr(t, scope)
        if not isinstance(node, CountExpr):
            hint = "count it with `#`, or use `P ? 1 : 0`, to get a count"
            raise self.error(f"{what} needs a count, but this is a Boolean", t, hint)
        return node

    def _both(
        self,
        build: Callable[[Tree[Token] | Token], Built],
        items: Sequence[Tree[Token] | Token],
    ) -> list[Built]:
        """Build every item, so errors in all of them are reported, then re-raise."""
        results: list[Built] = []
        failed = False
        for item in items:
            try:
                results.append(build(item))
            except Invalid:
                failed = True
        if failed:
            raise Invalid()
        return results

    def _check_index(self, t: Tree[Token], scope: _Scope) -> None:
        index = [c for c in t.children if isinstance(c, Tree) and c.data == "index"]
        if not index:
            return
        var = str(index[0].children[0])
        if var != scope.var:
            if var in scope.outer:
                raise self.error(
                    f"inside a count over {scope.var}, C-RASP cannot refer to the outer position {var}",
                    index[0],
                    f"the counted expression is evaluated at {scope.var}; write ({scope.var})",
                )
            raise self.error(
                f"unknown position variable {var!r}", index[0], f"expected ({scope.var})"
            )

    def e_ref(self, t: Tree[Token], scope: _Scope) -> Expr:
        name_tok = _token(t.children[0])
        name = str(name_tok)
        self._check_index(t, scope)
        if name in self.failed:
            raise Invalid()
        if name in self.sorts:
            sort = self.sorts[name]
            if sort is None:
                raise Invalid()
            return BoolRef(name) if sort == Sort.BOOL else CountRef(name)
        if name in self.unary:  # a fresh node, so that expr() gives it this use's span
            return replace(self.unary[name], span=None)
        if name in PREDEFINED_UNARY:
            if name not in self.imported:
                raise self.error(
                    f"predicate {name!r} is not imported", name_tok, f"add `#import {name}` first"
                )
            return replace(PREDEFINED_UNARY[name], span=None)
        if name in self.binary or name in PREDEFINED_BINARY:
            raise self.error(
                f"{name!r} is a relation between two positions; use it as `#[{name}] P`",
                name_tok,
            )
        if name.startswith("Q_") and len(name) > 2:
            symbol = name[2:]
            self.literals.setdefault(symbol, _span(name_tok))
            return TokenIs(symbol)
        if name in self.definition_lines:
            line = self.definition_lines[name]
            if name == getattr(self, "current", None):
                raise self.error(
                    f"{name!r} refers to itself", name_tok, "a definition may use only earlier ones"
                )
            where = f" at line {line.line}" if line else ""
            raise self.error(
                f"{name!r} is used before its definition{where}",
                name_tok,
                "C-RASP programs are straight-line: define names before using them",
            )
        raise self.error(f"undefined name {name!r}", name_tok, self._suggest(name))

    def _suggest(self, name: str) -> str:
        # Suggestions cost O(names) each: stop making them in a file full of errors.
        close = []
        if len(self.diagnostics) < 50:
            import difflib  # only on an error (a third of a millisecond at start-up)

            known = [*self.sorts, *self.unary, *self.binary, *sorted(self.imported)]
            close = difflib.get_close_matches(name, known, n=1)
        if close:
            return f"did you mean {close[0]!r}?"
        return "expected a name defined on an earlier line"

    def e_token(self, t: Tree[Token], scope: _Scope) -> Expr:
        symbol = self.symbol(_token(t.children[0]))
        if symbol is None:
            raise Invalid()
        self.literals.setdefault(symbol, _span(t))
        return TokenIs(symbol)

    def e_qtoken(self, t: Tree[Token], scope: _Scope) -> Expr:
        self._check_index(t, scope)
        tok = _token(t.children[0])
        quoted = Token(
            "STRING",
            str(tok)[2:],
            line=tok.line,
            column=tok.column,
            end_line=tok.end_line,
            end_column=tok.end_column,
        )
        symbol = self.symbol(quoted)
        if symbol is None:
            raise Invalid()
        self.literals.setdefault(symbol, _span(t))
        return TokenIs(symbol)

    def _int(self, tok: Token, bound: int = MAX_CONSTANT, what: str = "integer constant") -> int:
        text = str(tok)
        if len(text.lstrip("0")) > len(str(bound)):  # no conversion of 5000-digit numbers
            raise self.error(
                f"{what} {_shown_int(text)} is too large", tok, f"expected at most {bound}"
            )
        value = int(text)
        if value > bound:
            raise self.error(f"{what} {value} is too large", tok, f"expected at most {bound}")
        return value

    def e_int_(self, t: Tree[Token], scope: _Scope) -> Expr:
        return CountConst(self._int(_token(t.children[0])))

    def e_true_(self, t: Tree[Token], scope: _Scope) -> Expr:
        return BoolConst(True)

    def e_false_(self, t: Tree[Token], scope: _Scope) -> Expr:
        return BoolConst(False)

    def e_paren(self, t: Tree[Token], scope: _Scope) -> Expr:
        self._check_index(t, scope)
        return self.expr(t.children[0], scope)

    def e_not_(self, t: Tree[Token], scope: _Scope) -> Expr:
        arg = self.boolean(t.children[0], scope, "`!`")
        return fold_periodic("not", [arg]) or Not(arg)

    def _logic(self, t: Tree[Token], scope: _Scope, op: str, cls: type[And | Or]) -> Expr:
        """A chain ``a && b && …`` (or ``||``), built as a balanced tree (:func:`_balanced`);
        a leading run of periodic operands is folded into one, as the left-nested chain
        folds them."""
        operands = chain_operands(t)
        parts = self._both(lambda c: self.boolean(c, scope, f"`{op}`"), operands)
        periodic: list[Periodic] = []
        for part in parts:  # the leading run
            if not isinstance(part, Periodic):
                break
            periodic.append(part)
        run = len(periodic)
        if run > 1:
            modulus = 1
            for part in periodic:
                modulus = lcm(modulus, part.modulus)
                if modulus > MAX_MODULUS:  # at most MAX_MODULUS squared
                    raise self.error(
                        f"the combined period {modulus} is too large",
                        t,
                        f"expected at most {MAX_MODULUS}",
                    )
            folded = fold_periodic(op, parts[:run])
            assert folded is not None
            object.__setattr__(folded, "span", _joined(operands[0], operands[run - 1]))
            parts, operands = [folded, *parts[run:]], [t, *operands[run:]]
        return _balanced(cls, parts, operands)

    def e_and_(self, t: Tree[Token], scope: _Scope) -> Expr:
        return self._logic(t, scope, "and", And)

    def e_or_(self, t: Tree[Token], scope: _Scope) -> Expr:
        return self._logic(t, scope, "or", Or)

    def e_compare(self, t: Tree[Token], scope: _Scope) -> Expr:
        operands = t.children[0::2]
        ops = [_cmp(_tree(o)) for o in t.children[1::2]]
        counts = self._both(lambda c: self.count(c, scope, "a comparison"), operands)
        result: BoolExpr | None = None
        for op, left, right in zip(ops, counts, counts[1:], strict=False):
            cmp = Compare(op, left, right)
            result = cmp if result is None else And(result, cmp)
        assert result is not None
        return result

    def _literal(self, t: Tree[Token]) -> int | None:
        if t.data == "int_":
            return self._int(_token(t.children[0]))
        if t.data == "neg" and isinstance(t.children[0], Tree) and t.children[0].data == "int_":
            return -self._int(_token(t.children[0].children[0]))
        if t.data == "paren" and len(t.children) == 1:
            return self._literal(_tree(t.children[0]))
        if t.data == "mul":  # a constant factor may itself be a product: `2 * 3 * C`
            a, b = self._literal(_tree(t.children[0])), self._literal(_tree(t.children[1]))
            if a is not None and b is not None:
                if abs(a * b) > MAX_CONSTANT:
                    raise self.error(
                        f"integer constant {a * b} is too large",
                        t,
                        f"expected at most {MAX_CONSTANT}",
                    )
                return a * b
        return None

    def e_neg(self, t: Tree[Token], scope: _Scope) -> Expr:
        literal = self._literal(t)
        if literal is not None:
            return CountConst(literal)
        return Scale(-1, self.count(t.children[0], scope, "`-`"))

    def e_add(self, t: Tree[Token], scope: _Scope) -> Expr:
        operands = chain_operands(t)
        parts = self._both(lambda c: self.count(c, scope, "`+`"), operands)
        return _balanced(Add, parts, operands)

    def e_sub(self, t: Tree[Token], scope: _Scope) -> Expr:
        left, right = self._both(lambda c: self.count(c, scope, "`-`"), t.children)
        return Sub(left, right)

    def e_mul(self, t: Tree[Token], scope: _Scope) -> Expr:
        a, b = t.children
        for factor_tree, other in ((a, b), (b, a)):
            factor = self._literal(_tree(factor_tree))
            if factor is not None:
                return Scale(factor, self.count(other, scope, "`*`"))
        raise self.error(
            "C-RASP multiplies only by an integer constant",
            t,
            "expected `k * C` with k an integer literal; a product of two counts is not C-RASP",
        )

    def _minmax(self, t: Tree[Token], scope: _Scope, cls: type[Min | Max]) -> Expr:
        args = self._both(lambda c: self.count(c, scope, f"`{cls.__name__.lower()}`"), t.children)
        result = args[0]
        for arg in args[1:]:
            result = cls(result, arg)
        return result

    def e_min_(self, t: Tree[Token], scope: _Scope) -> Expr:
        return self._minmax(t, scope, Min)

    def e_max_(self, t: Tree[Token], scope: _Scope) -> Expr:
        return self._minmax(t, scope, Max)

    def _conditional(
        self,
        t: Tree[Token],
        cond_t: Tree[Token] | Token,
        then_t: Tree[Token] | Token,
        else_t: Tree[Token] | Token,
        scope: _Scope,
    ) -> Expr:
        cond, then, orelse = self._both(lambda c: self.expr(c, scope), [cond_t, then_t, else_t])
        if not isinstance(cond, BoolExpr):
            raise self.error("the condition needs a Boolean, but this is a count", cond_t)
        match then, orelse:
            case BoolExpr(), BoolExpr():
                # Fold periodic parts as `!`, `&&` and `||` do, so the IR stays canonical.
                negated = fold_periodic("not", [cond]) or Not(cond)
                left = fold_periodic("and", [cond, then]) or And(cond, then)
                right = fold_periodic("and", [negated, orelse]) or And(negated, orelse)
                return fold_periodic("or", [left, right]) or Or(left, right)
            case CountExpr(), CountExpr():
                return Cond(cond, then, orelse)
        raise self.error(
            "both branches of a conditional need the same sort",
            t,
            f"the first branch is a {then.sort.value}, the second a {orelse.sort.value}",
        )

    def e_if_else(self, t: Tree[Token], scope: _Scope) -> Expr:
        then_t, cond_t, else_t = t.children
        return self._conditional(t, cond_t, then_t, else_t, scope)

    def e_ternary(self, t: Tree[Token], scope: _Scope) -> Expr:
        cond_t, then_t, else_t = t.children
        return self._conditional(t, cond_t, then_t, else_t, scope)

    # ------------------------------------------------------------ counting

    def e_count_plain(self, t: Tree[Token], scope: _Scope) -> Expr:
        return Count(self.boolean(t.children[0], scope, "`#`"))

    def e_count_named(self, t: Tree[Token], scope: _Scope) -> Expr:
        name_tok, body = t.children
        offsets = self.named_relation(_token(name_tok))
        arg = self.boolean(body, scope, "`#`")
        return Count(arg, offsets)

    def named_relation(self, name_tok: Token) -> frozenset[int]:
        name = str(name_tok)
        if name in self.failed:
            raise Invalid()
        if name in self.binary:
            return self.binary[name]
        if name in PREDEFINED_BINARY:
            if name not in self.imported:
                raise self.error(
                    f"relation {name!r} is not imported", name_tok, f"add `#import {name}` first"
                )
            return PREDEFINED_BINARY[name]
        if name in self.unary or name in PREDEFINED_UNARY:
            raise self.error(
                f"{name!r} is a predicate on one position; `#[...]` needs a relation between two",
                name_tok,
            )
        raise self.error(f"unknown relation {name!r}", name_tok, _RELATION_CLASSES)

    def e_count_binder(self, t: Tree[Token], scope: _Scope) -> Expr:
        binder, *rest = t.children
        inner_tok, op_tree, outer_tok = _tree(binder).children
        inner, outer, op = str(inner_tok), str(outer_tok), str(_tree(op_tree).children[0])
        if outer != scope.var:
            raise self.error(
                f"the count must range up to the current position {scope.var}",
                outer_tok,
                f"expected #[{inner} <= {scope.var}]",
            )
        if inner == scope.var or inner in scope.outer:
            raise self.error(
                f"the counted position needs a new variable, not {inner!r}",
                inner_tok,
                "for example #[j <= i] inside a definition over i",
            )
        inner_scope = _Scope(inner, (*scope.outer, scope.var))
        relation_t = _tree(rest[0]) if len(rest) == 2 else None
        body_t = rest[-1]
        offsets: frozenset[int] | None = None
        if relation_t is not None:
            try:
                offsets = self.relation(relation_t, outer=outer, inner=inner)
            except Invalid:
                self._both(lambda c: self.boolean(c, inner_scope, "`#`"), [body_t])
                raise
        arg = self.boolean(body_t, inner_scope, "`#`")
        if offsets is not None:
            if op == "<":
                offsets = offsets - {0}
            if not offsets:
                raise self.error("with j < i this relation never holds", relation_t)
            return Count(arg, offsets)
        if op == "<":  # #[j < i] P(j) = #[j <= i] P(j) - (P(i) ? 1 : 0)
            return Sub(Count(arg), Cond(arg, CountConst(1), CountConst(0)))
        return Count(arg)

    def e_exists(self, t: Tree[Token], scope: _Scope) -> Expr:
        arg = self.boolean(t.children[1], scope, "`∃←`")
        return Compare(">=", Count(arg), CountConst(1))

    # ------------------------------------------------------------ positions

    def e_pos_compare(self, t: Tree[Token], scope: _Scope) -> Expr:
        return self.periodic(t, scope)

    def e_pos_congruent(self, t: Tree[Token], scope: _Scope) -> Expr:
        return self.periodic(t, scope)

    def _pos_atoms(self, t: Tree[Token]) -> list[tuple[str, _Linear, _Linear]]:
        """The comparisons of a positional atom as (op, left, right) linear terms."""
        if t.data == "pos_congruent":
            self.warnings.append(
                Diagnostic(
                    "`≡ (mod m)` counts positions from 0 here, as `%` does: the paper's "
                    "1-indexed `i ≡ r (mod m)` is `i ≡ r − 1 (mod m)`",
                    _span(t),
                    "e.g. the paper's (aa)* predicate `i ≡ 0 (mod 2)` is `i ≡ 1 (mod 2)`; "
                    "write `i % 2 == 1` to say the 0-indexed meaning (no warning)",
                    severity="warning",
                )
            )
            left, right, modulus_tok = t.children
            m = self._int(_token(modulus_tok), MAX_MODULUS, "modulus")
            if m <= 0:
                raise self.error("the modulus must be positive", modulus_tok)
            a, b = self._term(_tree(left)), self._term(_tree(right))
            if a.modulus or b.modulus:
                raise self.error("unsupported positional expression", t, _RELATION_CLASSES)
            a.modulus = b.modulus = m
            return [("==", a, b)]
        sides = [self._term(_tree(c)) for c in t.children[0::2]]
        ops = [_cmp(_tree(o)) for o in t.children[1::2]]
        return [(op, a, b) for op, a, b in zip(ops, sides, sides[1:], strict=False)]

    def _term(self, t: Tree[Token]) -> _Linear:
        if t.data == "pos_var":
            return _Linear({str(t.children[0]): 1})
        if t.data in ("int_", "pos_int"):
            sign = -1 if len(t.children) == 2 else 1  # pos_int: "-" INT
            integer = _token(t.children[-1])
            return _Linear({}, sign * self._int(integer, MAX_POSITIONAL, "integer"))
        if t.data == "mod":
            inner, m = t.children
            m_tok = _token(m)
            base = self._term(_tree(inner))
            if self._int(m_tok, MAX_MODULUS, "modulus") <= 0:
                raise self.error("the modulus must be positive", m_tok)
            if base.modulus:
                raise self.error("unsupported positional expression: `%` applied twice", t)
            return _Linear(base.coefs, base.const, int(m_tok))
        # a chain `i + 1 + 1 + …` is summed in a loop (the parser admits any length)
        operands = chain_operands(t) if t.data == "add" else t.children
        terms = [self._term(_tree(operand)) for operand in operands]
        if any(term.modulus for term in terms):
            raise self.error(
                "unsupported positional expression: `%` must come last",
                t,
                "expected forms like `i % m == r` or `j == i - c`",
            )
        sign = 1 if t.data == "add" else -1
        coefs = dict(terms[0].coefs)
        for term in terms[1:]:
            for var, c in term.coefs.items():
                coefs[var] = coefs.get(var, 0) + sign * c
        const = terms[0].const + sign * sum(term.const for term in terms[1:])
        return _Linear({v: c for v, c in coefs.items() if c}, const)

    def periodic(self, t: Tree[Token], scope: _Scope) -> Expr:
        atoms = self._pos_atoms(t)
        moduli = [term.modulus for _, a, b in atoms for term in (a, b) if term.modulus]
        for _, a, b in atoms:
            for term in (a, b):
                for var in term.coefs:
                    if var != scope.var:
                        raise self.error(
                            f"position variable {var!r} is not in scope here",
                            t,
                            f"a predicate here can only use the current position {scope.var}",
                        )
                if term.coefs and not term.modulus:
                    raise self.error(
                        "this positional predicate is not periodic",
                        t,
                        "C-RASP allows Boolean combinations of `i % m == r` (periodic); "
                        "to detect positions near the start, count: e.g. `#true <= 1`",
                    )
        modulus = lcm(*moduli) if moduli else 1
        if modulus > MAX_MODULUS:
            raise self.error(
                f"the combined period {modulus} is too large", t, f"expected at most {MAX_MODULUS}"
            )
        # every residue at once (an array of positions): a chain of many atoms stays fast
        env = {scope.var: np.arange(modulus, dtype=np.int64)}
        holds = np.ones(modulus, dtype=bool)
        for op, a, b in atoms:
            holds &= _holds(op, a.value(env), b.value(env))
        return Periodic.make(modulus, frozenset(np.flatnonzero(holds).tolist()))

    def relation(self, t: Tree[Token], outer: str, inner: str) -> frozenset[int]:
        """Offsets d = outer - inner >= 0 where a binary relation holds; it must be local."""
        constants: list[int] = [0]

        def truth(node: Tree[Token]) -> Callable[[int], bool]:
            data = node.data
            if data in ("or_", "and_"):  # a chain: the operands, not nested closures
                parts = [truth(_tree(c)) for c in chain_operands(node)]
                if data == "or_":
                    return lambda d: any(part(d) for part in parts)
                return lambda d: all(part(d) for part in parts)
            if data == "not_":
                negated = truth(_tree(node.children[0]))
                return lambda d: not negated(d)
            if data == "rel_name":
                name_tok = _token(node.children[0])
                if len(node.children) == 3:
                    x, y = str(node.children[1]), str(node.children[2])
                    if (x, y) != (outer, inner):
                        raise self.error(f"expected {name_tok}({outer}, {inner})", node)
                offsets = self.named_relation(name_tok)
                constants.extend(offsets)
                return lambda d: d in offsets
            # The body of `predicate P(i, j) := ...` is parsed as an expression.
            if data in ("ref", "paren") and len(node.children) == 1:
                if data == "paren":
                    return truth(_tree(node.children[0]))
                offsets = self.named_relation(_token(node.children[0]))
                constants.extend(offsets)
                return lambda d: d in offsets
            if data in ("true_", "false_"):
                return lambda d: data == "true_"
            if data not in ("pos_compare", "pos_congruent"):
                raise self.error(
                    f"expected a relation between {inner} and {outer}",
                    node,
                    f"for example `{inner} == {outer} - 1`; combine such comparisons and "
                    "relation names with `&&`, `||` and `!`",
                )
            atoms = self._pos_atoms(node)
            checks: list[tuple[str, int, int]] = []
            for op, a, b in atoms:
                if a.modulus or b.modulus:
                    raise self.error(
                        "a relation using `%` is periodic in i - j, not local",
                        node,
                        _RELATION_CLASSES,
                    )
                coefs = {
                    v: a.coefs.get(v, 0) - b.coefs.get(v, 0) for v in set(a.coefs) | set(b.coefs)
                }
                unknown = set(coefs) - {outer, inner}
                if unknown:
                    raise self.error(
                        f"position variable {sorted(unknown)[0]!r} is not in scope here",
                        node,
                        f"a relation here relates {inner} to {outer}",
                    )
                k = coefs.get(outer, 0)
                if coefs.get(inner, 0) != -k:
                    raise self.error(
                        "this relation is not translation-invariant (it does not depend on i - j alone)",
                        node,
                        _RELATION_CLASSES,
                    )
                const = a.const - b.const
                if abs(const) > MAX_OFFSET:
                    raise self.error(
                        f"offset {abs(const)} is too large", node, f"expected at most {MAX_OFFSET}"
                    )
                constants.append(abs(const))
                checks.append((op, k, const))
            return lambda d: all(_holds(op, k * d + c, 0) for op, k, c in checks)

        holds = truth(t)
        bound = max(constants) + 1
        if holds(bound):
            raise self.error(
                "this relation holds for arbitrarily distant positions, so it is not local",
                t,
                _RELATION_CLASSES,
            )
        offsets = frozenset(d for d in range(bound) if holds(d))
        if not offsets:
            raise self.error(
                f"this relation never holds for {inner} <= {outer}",
                t,
                f"C-RASP counts only positions {inner} <= {outer}; expected e.g. `{inner} == {outer} - 1`",
            )
        return offsets


def _joined(first: Tree[Token] | Token, last: Tree[Token] | Token) -> Span | None:
    """The source range from ``first`` to the end of ``last``."""
    start, end = _span(first), _span(last)
    if start is None or end is None:
        return start or end
    return Span(start.line, start.column, end.end_line, end.end_column)


def _balanced(
    cls: Callable[..., Expr], parts: Sequence[Expr], trees: Sequence[Tree[Token] | Token]
) -> Expr:
    """The operands ``parts`` of a chain (parsed from ``trees``) as a balanced tree of the
    binary ``cls``: ``((a, b), c)`` for three, ``((a, b), (c, d))`` for four, so that a
    chain of k operands nests only ⌈log2 k⌉ deep (the left half takes the middle one)."""
    if len(parts) == 1:
        return parts[0]
    middle = (len(parts) + 1) // 2
    left = _balanced(cls, parts[:middle], trees[:middle])
    right = _balanced(cls, parts[middle:], trees[middle:])
    return cls(left, right, span=_joined(trees[0], trees[-1]))


def _shown_int(text: str) -> str:
    """A long integer literal cut for a message."""
    return text if len(text) <= 24 else f"{text[:12]}…{text[-6:]} ({len(text)} digits)"


def build_program(tree: Tree[Token], source: str, filename: str = "<string>") -> Program:
    """Check a parse tree and build its typed IR; raise :class:`CraspError` on any error."""
    return _Elaborator(source, filename).program(tree)
