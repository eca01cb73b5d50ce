"""PCOC compile-time values: the one evaluator of static expressions and the one unroller.

- :func:`static_value`: the value of a static expression for every machine at once — an
  ``int``, or (when it depends on ``i``) a numpy object array of Python ints, one per
  machine. The arithmetic is exact (Python integers, however large; only ``**`` beyond
  :data:`MAX_POWER_BITS` bits is refused); comparisons and ``and/or/not`` give 0 or 1, and
  ``and``/``or`` short-circuit machine by machine. A value that does not exist (division
  by zero, ``log2`` of a non-power of two, ...) raises :class:`StaticFailure`, which names
  a machine where it fails and the span of the failing subexpression.
- :func:`iter_rounds` / :func:`unroll`: the rounds of a program in execution order for a
  given ``n``, each with its static environment (``n``, the loop variables, ``r``; ``i``
  is bound per machine by :func:`static_value`).

The parser folds closed expressions with it, :func:`~crasp_compiler.languages.pcoc.interpret.check_pcoc`
checks every static expression of every round with it, the interpreter and the lowering
evaluate with it, and :mod:`~crasp_compiler.languages.pcoc.benes` unrolls with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Any

import numpy as np

from crasp_compiler.errors import Span, shown_int
from crasp_compiler.languages.pcoc.nodes import (
    For,
    Program,
    Round,
    SBin,
    SCall,
    SNot,
    SNum,
    StaticExpr,
    SVar,
)

# Largest static power computed (in bits): 2**4096 and beyond are refused, not computed.
MAX_POWER_BITS = 4096
# Integers beyond this lose precision as float64 data.
MAX_EXACT_INT = 2**53
MAX_ROUNDS = 100_000  # rounds after unrolling
MAX_ITERATIONS = 1_000_000  # loop iterations in all (loops may be empty)

# An int, or an object array of Python ints (one per machine).
StaticValue = Any
Env = dict[str, int]


class StaticFailure(Exception):
    """A static expression without a value: ``message``, the first ``machine`` where it
    fails (None when it does not depend on the machine) and the ``span`` of the failing
    subexpression (filled on the way up)."""

    def __init__(self, message: str, machine: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.machine = machine
        self.span: Span | None = None


class UnrollLimit(StaticFailure):
    """Unrolling would give more than :data:`MAX_ROUNDS` rounds or run more than
    :data:`MAX_ITERATIONS` loop iterations."""

    def __init__(self, message: str, span: Span | None, hint: str) -> None:
        super().__init__(message)
        self.span = span
        self.hint = hint


def power_too_big(base: int, exponent: int) -> bool:
    """Whether ``base ** exponent`` has more than :data:`MAX_POWER_BITS` bits."""
    return abs(base) >= 2 and exponent * (abs(base).bit_length() - 1) > MAX_POWER_BITS


def machine_indices(n: int) -> np.ndarray:
    """``0 .. n-1`` as a read-only object array of Python ints (the values of ``i``);
    kept for a few small ``n`` (the lowering asks for it once per static expression)."""
    return _small_indices(n) if n <= _CACHED_MACHINES else _indices(n)


_CACHED_MACHINES = 100_000  # the most machines a model is compiled for


def _indices(n: int) -> np.ndarray:
    machines = np.arange(n).astype(object)
    machines.flags.writeable = False
    return machines


_small_indices = lru_cache(maxsize=8)(_indices)


# ================================================================== evaluation


def static_value(expr: StaticExpr, env: Env, machines: np.ndarray | None = None) -> StaticValue:
    """The value of a static expression: an int, or (when it depends on ``i``) an object
    array of ints, one per entry of ``machines`` (the machine indices, e.g.
    :func:`machine_indices`; None where ``i`` has no value). Raises
    :class:`StaticFailure` where the value does not exist on some machine."""
    try:
        return _static(expr, env, machines)
    except StaticFailure as failure:
        if failure.span is None:
            failure.span = expr.span
        raise


def _truth(value: StaticValue) -> StaticValue:
    """0/1 (int or object array) for a static value's truth."""
    if isinstance(value, np.ndarray):
        return np.where(value != 0, 1, 0).astype(object)
    return int(bool(value))


def _first(mask: Any, machines: np.ndarray | None) -> int | None:
    """The first machine where ``mask`` holds (None for a mask of one value)."""
    if machines is None or not isinstance(mask, np.ndarray):
        return None
    return int(machines[int(np.argmax(mask))])


def _any_array(*values: StaticValue) -> bool:
    return any(isinstance(v, np.ndarray) for v in values)


def _static(expr: StaticExpr, env: Env, machines: np.ndarray | None) -> StaticValue:
    match expr:
        case SNum(value):
            return value
        case SVar(name):
            if name == "i":
                if machines is None:
                    raise StaticFailure("`i` has no value here")
                return machines
            if name not in env:
                raise StaticFailure(f"{name!r} has no value here")
            return env[name]
        case SNot(arg):
            return 1 - _truth(static_value(arg, env, machines))
        case SBin(op, left, right) if op in ("and", "or"):
            a = _truth(static_value(left, env, machines))
            decided = 0 if op == "and" else 1
            if not isinstance(a, np.ndarray):
                return a if a == decided else _truth(static_value(right, env, machines))
            pending = a != decided
            if not pending.any():
                return a
            assert machines is not None  # an array comes from `i`
            b = _truth(static_value(right, env, machines[pending]))
            out = a.copy()
            out[pending] = b
            return out
        case SBin(op, left, right):
            a = static_value(left, env, machines)
            b = static_value(right, env, machines)
            return _binary(op, a, b, machines)
        case SCall(fn, args):
            values = [static_value(arg, env, machines) for arg in args]
            if fn in ("min", "max"):
                out = values[0]
                for value in values[1:]:
                    pick = (out <= value) if fn == "min" else (out >= value)
                    out = (
                        np.where(pick, out, value).astype(object)
                        if _any_array(out, value)
                        else (out if pick else value)
                    )
                return out
            (x,) = values
            xs = x if isinstance(x, np.ndarray) else np.array([x], dtype=object)
            bad = xs < 1
            if fn == "log2":
                bad = bad | np.array([v >= 1 and v & (v - 1) != 0 for v in xs], dtype=bool)
            if bad.any():
                value = xs[int(np.argmax(bad))]
                reason = "not a power of two" if fn == "log2" and value >= 1 else "not positive"
                shown = shown_int(value)
                raise StaticFailure(
                    f"{fn}({shown}) is undefined: {shown} is {reason}", _first(bad, machines)
                )
            if fn == "log2":
                result = [v.bit_length() - 1 for v in xs]
            else:
                result = [(v - 1).bit_length() for v in xs]
            if isinstance(x, np.ndarray):
                return np.array(result, dtype=object)
            return result[0]
    raise StaticFailure(f"not a static expression: {expr!r}")  # pragma: no cover


def _binary(op: str, a: StaticValue, b: StaticValue, machines: np.ndarray | None) -> StaticValue:
    arrays = _any_array(a, b)
    if op in ("//", "%"):
        zero = b == 0
        if np.any(zero):
            word = "div" if op == "//" else "%"
            raise StaticFailure(
                f"`{word}` by zero",
                _first(np.broadcast_to(zero, np.shape(a) or np.shape(b)), machines),
            )
    if op == "**":
        negative = b < 0
        if np.any(negative):
            where = _first(np.broadcast_to(negative, np.shape(a) or np.shape(b)), machines)
            raise StaticFailure(
                "`**` with a negative exponent (the result is not an integer)", where
            )
        top = max((abs(v) for v in np.ravel(a)), default=0)
        power = max(np.ravel(b), default=0)
        if power_too_big(int(top), int(power)):
            raise StaticFailure(
                f"`**` result too large ({shown_int(int(top))} ** {shown_int(int(power))})"
            )
    if op in ("<", "<=", ">", ">=", "==", "!="):
        result = {
            "<": lambda: a < b,
            "<=": lambda: a <= b,
            ">": lambda: a > b,
            ">=": lambda: a >= b,
            "==": lambda: a == b,
            "!=": lambda: a != b,
        }[op]()
        return np.where(result, 1, 0).astype(object) if arrays else int(result)
    return {
        "+": lambda: a + b,
        "-": lambda: a - b,
        "*": lambda: a * b,
        "//": lambda: a // b,
        "%": lambda: a % b,
        "**": lambda: a**b,
    }[op]()


# ================================================================== unrolling

Report = Callable[[StaticFailure, Env, Span | None], None]


def iter_rounds(
    program: Program, n: int, report: Report | None = None
) -> Iterator[tuple[Round, Env]]:
    """The rounds of ``program`` for ``n`` machines in execution order, each with its
    static environment (``n``, the loop variables, ``r``), as they are reached.

    Loop bounds are evaluated (with ``r`` the number of rounds so far); a bound without a
    value raises its :class:`StaticFailure`, or, given ``report``, is passed to
    ``report(failure, env, loop span)`` and its loop skipped. More than
    :data:`MAX_ROUNDS` rounds or :data:`MAX_ITERATIONS` loop iterations raise
    :class:`UnrollLimit`."""
    count = {"rounds": 0, "iterations": 0}

    def walk(items: tuple[Round | For, ...], env: Env) -> Iterator[tuple[Round, Env]]:
        for item in items:
            if isinstance(item, Round):
                if count["rounds"] >= MAX_ROUNDS:
                    raise UnrollLimit(
                        f"more than {MAX_ROUNDS} rounds for n = {n}",
                        item.span,
                        "loops run too long; check their bounds",
                    )
                yield item, {**env, "r": count["rounds"]}
                count["rounds"] += 1
                continue
            bound_env = {**env, "r": count["rounds"]}
            try:
                start = static_value(item.start, bound_env)
                stop = static_value(item.stop, bound_env)
            except StaticFailure as failure:
                if report is None:
                    raise
                report(failure, bound_env, item.span)
                continue
            for value in range(start, stop):
                count["iterations"] += 1
                if count["iterations"] > MAX_ITERATIONS:
                    raise UnrollLimit(
                        f"more than {MAX_ITERATIONS} loop iterations for n = {n}",
                        item.span,
                        "check the loop bounds",
                    )
                yield from walk(item.body, {**env, item.var: value})

    return walk(program.rounds, {"n": n})


def unroll(program: Program, n: int) -> list[tuple[Round, Env]]:
    """:func:`iter_rounds` as a list (raises on a loop bound without a value)."""
    return list(iter_rounds(program, n))
