"""The checks of a PCOC program that need its number of machines ``n``.

:func:`check_pcoc` unrolls the program for ``n`` and evaluates every static expression
(loop bounds, receive sources, static conditions, static values used as data) on every
machine of every round, reporting each failure at its source location (``log2`` of a
non-power of two, division by zero, a negative exponent, a loop too long, ``n < 1``); it
returns the unrolled rounds. Static values and unrolling come from
:mod:`crasp_compiler.languages.pcoc.static`, the one evaluator of static expressions.
"""

from __future__ import annotations

import numpy as np

from crasp_compiler.errors import CraspError, Diagnostics, Span, shown_int
from crasp_compiler.languages.pcoc.nodes import (
    STATIC_TYPES,
    Add,
    Assign,
    Call,
    Compare,
    Expr,
    If,
    IfExpr,
    Program,
    Round,
    Scale,
    Static,
    StaticExpr,
    Stmt,
    Sub,
)
from crasp_compiler.languages.pcoc.static import (
    MAX_EXACT_INT,
    StaticFailure,
    UnrollLimit,
    iter_rounds,
    machine_indices,
    static_value,
)
from crasp_compiler.syntax.engine import MAX_ERRORS

MAX_MACHINES = 10_000_000


def validate_n(n: int, filename: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer):
        raise CraspError(f"n must be a positive integer, not {n!r}", filename=filename)
    n = int(n)
    if n < 1:
        raise CraspError(f"n must be at least 1, not {n}", filename=filename)
    if n > MAX_MACHINES:
        raise CraspError(
            f"n = {n} is more machines than supported ({MAX_MACHINES})", filename=filename
        )
    return n


def env_text(env: dict[str, int], machine: int | None) -> str:
    parts = [f"{name} = {shown_int(value)}" for name, value in env.items()]
    if machine is not None:
        parts.append(f"i = {machine}")
    return ", ".join(parts)


class _Errors(Diagnostics):
    """The static failures of a check, the first one at each place only (a failure
    repeats on every machine and in every round it is evaluated in)."""

    def __init__(self, program: Program) -> None:
        super().__init__(program.source, program.filename)
        self.spans: set[Span | None] = set()

    def add(self, failure: StaticFailure, env: dict[str, int], fallback: Span | None) -> None:
        span = failure.span or fallback
        if span in self.spans or len(self) >= MAX_ERRORS:
            return
        self.spans.add(span)
        self.error(f"{failure.message} (for {env_text(env, failure.machine)})", span)


def _statics_of_expr(expr: Expr, out: list[tuple[StaticExpr, bool]]) -> None:
    """The static expressions that a data expression evaluates."""
    stack = [expr]
    while stack:
        node = stack.pop()
        match node:
            case Static(inner):
                out.append((inner, True))
            case Add(left, right) | Sub(left, right) | Compare(_, left, right, _):
                stack.extend([right, left])
            case Scale(_, arg):
                stack.append(arg)
            case Call(_, args):
                stack.extend(args)
            case IfExpr(cond, then, otherwise):
                if isinstance(cond, STATIC_TYPES):
                    out.append((cond, False))
                else:
                    stack.append(cond)
                stack.extend([then, otherwise])


def _statics_of_round(round_: Round) -> list[tuple[StaticExpr, bool, Span | None]]:
    """(expression, used as data, fallback span) for every static expression of a round."""
    out: list[tuple[StaticExpr, bool, Span | None]] = []
    for receive in round_.receives:
        out.append((receive.source, False, receive.span))

    def statements(body: tuple[Stmt, ...]) -> None:
        for stmt in body:
            found: list[tuple[StaticExpr, bool]] = []
            if isinstance(stmt, Assign):
                _statics_of_expr(stmt.expr, found)
            else:
                if isinstance(stmt.cond, STATIC_TYPES):
                    found.append((stmt.cond, False))
                else:
                    _statics_of_expr(stmt.cond, found)
            out.extend((expr, as_data, stmt.span) for expr, as_data in found)
            if isinstance(stmt, If):
                statements(stmt.then)
                statements(stmt.otherwise)

    statements(round_.body)
    return out


def check_pcoc(program: Program, n: int) -> list[tuple[Round, dict[str, int]]]:
    """Check ``program`` for ``n`` machines and return its rounds in execution order, each
    with its static environment (as :func:`~crasp_compiler.languages.pcoc.static.unroll`
    gives them).

    Every static expression is evaluated on every machine of every round it belongs to
    (both branches of a static choice included, except where ``and``/``or`` short-circuit);
    each failure is reported once, at its location, with the values of n, r, the loop
    variables and i. Raises :class:`CraspError`."""
    n = validate_n(n, program.filename)
    errors = _Errors(program)
    machines = machine_indices(n)
    # per round of the program text
    statics: dict[int, list[tuple[StaticExpr, bool, Span | None]]] = {}
    rounds: list[tuple[Round, dict[str, int]]] = []
    try:
        for item, round_env in iter_rounds(program, n, errors.add):
            rounds.append((item, round_env))
            if id(item) not in statics:
                statics[id(item)] = _statics_of_round(item)
            for expr, as_data, fallback in statics[id(item)]:
                try:
                    value = static_value(expr, round_env, machines)
                except StaticFailure as failure:
                    errors.add(failure, round_env, fallback)
                    continue
                if as_data and np.any(np.abs(value) > MAX_EXACT_INT):
                    big = np.broadcast_to(np.abs(value) > MAX_EXACT_INT, (n,))
                    too_big = StaticFailure(
                        "the static value is too large to be exact as a number (> 2**53)",
                        int(np.argmax(big)) if isinstance(value, np.ndarray) else None,
                    )
                    too_big.span = expr.span
                    errors.add(too_big, round_env, fallback)
    except UnrollLimit as limit:
        errors.error(limit.message, limit.span, limit.hint)
    errors.raise_any()
    return rounds
