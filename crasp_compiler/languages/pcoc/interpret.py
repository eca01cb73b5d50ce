"""Running PCOC programs for a given number of machines ``n`` (checked for that ``n`` by
:func:`~crasp_compiler.languages.pcoc.check.check_pcoc`).

- :func:`interpret_program` / :func:`interpret_batch`: the reference semantics of
  :mod:`crasp_compiler.languages.pcoc.nodes` in float64, giving a :class:`Trace` (every slot of every
  machine after every round). Data comparisons are exact; with ``check_promises=True`` the
  interpreter also reports values that break a declared margin or slot bound.
- :func:`read_vectors` / :func:`format_vector`: input and output text for the command line.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from crasp_compiler.budget import require_memory
from crasp_compiler.errors import CraspError, Diagnostic, Span
from crasp_compiler.languages.pcoc.check import check_pcoc, env_text, validate_n
from crasp_compiler.languages.pcoc.nodes import (
    STATIC_TYPES,
    Add,
    Assign,
    Call,
    Compare,
    Expr,
    IfExpr,
    Num,
    Program,
    Read,
    Scale,
    Send,
    Static,
    StaticExpr,
    Stmt,
    Sub,
)
from crasp_compiler.languages.pcoc.static import (
    StaticFailure,
    UnrollLimit,
    iter_rounds,
    machine_indices,
    static_value,
)
from crasp_compiler.syntax.engine import MAX_ERRORS

# A data value: a number, or one per machine of every input (shape (B, n)).
_Value = float | np.ndarray


# ================================================================== the interpreter


@dataclass
class Trace:
    """What a run did. ``rounds[0]`` is the initial memory and ``rounds[k]`` the memory
    after round k (1-based), each mapping every slot to its values on machines 0..n-1;
    ``outputs`` maps the output slots to their values after the last round; ``envs[k]``
    is the static environment of round k + 1 (``n``, ``r`` and loop variables). Arrays
    have shape ``(n,)``, or ``(batch, n)`` from :func:`interpret_batch`."""

    n: int
    rounds: list[dict[str, np.ndarray]]
    outputs: dict[str, np.ndarray]
    envs: list[dict[str, int]]


class _Machine:
    """One run of a program on a batch of inputs (arrays of shape (B, n))."""

    def __init__(self, program: Program, n: int, batch: int, check: bool) -> None:
        self.program = program
        self.n = n
        self.batch = batch
        self.check = check
        self.slot_names = {slot.name for slot in program.slots}
        self.machines = machine_indices(n)
        self.env: dict[str, int] = {}
        self.cache: dict[int, int | np.ndarray] = {}  # static values of the round

    # ------------------------------------------------------------ static values

    def static(self, expr: StaticExpr) -> int | np.ndarray:
        """The value of ``expr``: an int, or an object array of ints (one per machine)."""
        key = id(expr)
        if key not in self.cache:
            try:
                self.cache[key] = static_value(expr, self.env, self.machines)
            except StaticFailure as failure:  # pragma: no cover - check_pcoc reports these first
                raise self.fail(failure.message, failure.span) from None
        return self.cache[key]

    def static_mask(self, expr: StaticExpr) -> np.ndarray:
        value = self.static(expr)
        return np.broadcast_to(np.asarray(value != 0, dtype=bool), (self.n,))

    def static_number(self, expr: StaticExpr) -> _Value:
        value = self.static(expr)
        if isinstance(value, np.ndarray):
            return value.astype(np.float64)
        return float(value)

    def fail(self, message: str, span: Span | None) -> CraspError:
        return CraspError([Diagnostic(message, span)], self.program.source, self.program.filename)

    def where(self, mask: np.ndarray) -> str:
        b, i = np.unravel_index(int(np.argmax(mask)), mask.shape)
        text = env_text(self.env, int(i))
        return f"{text}, input {int(b)}" if self.batch > 1 else text

    # ------------------------------------------------------------ data values

    def value(
        self,
        expr: Expr,
        mem: dict[str, np.ndarray],
        temps: dict[str, np.ndarray],
        active: np.ndarray | None,
    ) -> _Value:
        match expr:
            case Num(value):
                return value
            case Read(name):
                return temps[name] if name in temps else mem[name]
            case Static(inner):
                return self.static_number(inner)
            case Add(left, right):
                if expr.exclusive and active is not None:
                    self.check_exclusive(expr, mem, temps, active)
                return self.value(left, mem, temps, active) + self.value(right, mem, temps, active)
            case Sub(left, right):
                return self.value(left, mem, temps, active) - self.value(right, mem, temps, active)
            case Scale(factor, arg):
                return factor * self.value(arg, mem, temps, active)
            case Call(fn, args):
                values = [self.value(arg, mem, temps, active) for arg in args]
                if fn == "min":
                    return _reduce(np.minimum, values)
                if fn == "max":
                    return _reduce(np.maximum, values)
                if fn == "abs":
                    return np.abs(values[0])
                if fn == "relu":
                    return np.maximum(values[0], 0.0)
                if fn == "clamp":
                    return np.minimum(np.maximum(values[0], values[1]), values[2])
                raise self.fail(f"unknown function {fn!r}", expr.span)  # pragma: no cover
            case Compare():
                return self.compare(expr, mem, temps, active).astype(np.float64)
            case IfExpr(cond, then, otherwise):
                mask = self.condition(cond, mem, temps, active)
                a = self.value(then, mem, temps, None if active is None else active & mask)
                b = self.value(otherwise, mem, temps, None if active is None else active & ~mask)
                return np.where(mask, a, b)
        raise self.fail(f"unknown expression {expr!r}", None)  # pragma: no cover

    def condition(
        self,
        cond: Compare | StaticExpr,
        mem: dict[str, np.ndarray],
        temps: dict[str, np.ndarray],
        active: np.ndarray | None,
    ) -> np.ndarray:
        if isinstance(cond, STATIC_TYPES):
            return np.broadcast_to(self.static_mask(cond), (self.batch, self.n))
        return self.compare(cond, mem, temps, active)

    def compare(
        self,
        expr: Compare,
        mem: dict[str, np.ndarray],
        temps: dict[str, np.ndarray],
        active: np.ndarray | None,
    ) -> np.ndarray:
        a = self.value(expr.left, mem, temps, active)
        b = self.value(expr.right, mem, temps, active)
        result = {
            ">": np.greater,
            ">=": np.greater_equal,
            "<": np.less,
            "<=": np.less_equal,
            "==": np.equal,
            "!=": np.not_equal,
        }[expr.op](a, b)
        result = np.broadcast_to(result, (self.batch, self.n))
        if active is not None:
            self.check_margin(expr, np.broadcast_to(np.subtract(a, b), result.shape), active)
        return result

    def check_exclusive(
        self,
        expr: Add,
        mem: dict[str, np.ndarray],
        temps: dict[str, np.ndarray],
        active: np.ndarray,
    ) -> None:
        """The promise of an ``exclusive`` sum: at most one of its data selections is taken."""
        terms: list[Compare] = []
        stack: list[Expr] = [expr]
        while stack:
            node = stack.pop()
            if isinstance(node, Add):
                stack += [node.right, node.left]
            elif isinstance(node, IfExpr) and isinstance(node.cond, Compare):
                terms.append(node.cond)
        taken = np.zeros((self.batch, self.n), dtype=np.int64)
        for cond in terms:
            taken += self.compare(cond, mem, temps, active)
        bad = (taken > 1) & active
        if np.any(bad):
            raise self.fail(
                f"more than one selection of an exclusive sum is taken (for {self.where(bad)})",
                expr.span,
            )

    def check_margin(self, expr: Compare, diff: np.ndarray, active: np.ndarray) -> None:
        m = expr.margin
        if expr.op in (">", "<="):
            bad, zone = (diff > 0) & (diff < m), f"(0, {m:g})"
        elif expr.op in ("<", ">="):
            bad, zone = (diff < 0) & (diff > -m), f"({-m:g}, 0)"
        else:
            bad, zone = (diff != 0) & (np.abs(diff) < m), f"(-{m:g}, {m:g}) without 0"
        bad = bad & active
        if bad.any():
            at = np.unravel_index(int(np.argmax(bad)), bad.shape)
            raise self.fail(
                f"margin violated: left − right = {float(diff[at])!r} lies in {zone}"
                f" (for {self.where(bad)})",
                expr.span,
            )

    # ------------------------------------------------------------ statements

    def block(
        self,
        body: tuple[Stmt, ...],
        mem: dict[str, np.ndarray],
        temps: dict[str, np.ndarray],
        active: np.ndarray | None,
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        shape = (self.batch, self.n)
        for stmt in body:
            if isinstance(stmt, Assign):
                with np.errstate(over="ignore", invalid="ignore"):
                    value = self.value(stmt.expr, mem, temps, active)
                value = np.array(np.broadcast_to(value, shape), dtype=np.float64)
                if not np.all(np.isfinite(value)):
                    raise self.fail(
                        f"{stmt.target!r} overflows float64 (beyond ±1.8e308) "
                        f"(for {self.where(~np.isfinite(value))})",
                        stmt.span,
                    )
                if stmt.target in self.slot_names:
                    mem[stmt.target] = value
                else:
                    temps[stmt.target] = value
                continue
            mask = self.condition(stmt.cond, mem, temps, active)
            then_mem, then_temps = self.block(
                stmt.then, dict(mem), dict(temps), None if active is None else active & mask
            )
            else_mem, else_temps = self.block(
                stmt.otherwise, dict(mem), dict(temps), None if active is None else active & ~mask
            )
            for name in mem:
                if then_mem[name] is not mem[name] or else_mem[name] is not mem[name]:
                    mem[name] = np.where(mask, then_mem[name], else_mem[name])
            merged: dict[str, np.ndarray] = {}
            for name in then_temps.keys() & else_temps.keys():
                a, b = then_temps[name], else_temps[name]
                merged[name] = a if a is b else np.where(mask, a, b)
            temps.clear()
            temps.update(merged)
        return mem, temps

    def receive(self, values: np.ndarray, source: StaticExpr, default: float) -> np.ndarray:
        src = self.static(source)
        n = self.n
        if not isinstance(src, np.ndarray):
            if 0 <= src < n:
                return np.repeat(values[:, src : src + 1], n, axis=1)
            return np.full((self.batch, n), default)
        valid = ((src >= 0) & (src < n)).astype(bool)
        index = np.zeros(n, dtype=np.int64)
        index[valid] = src[valid].astype(np.int64)
        out = values[:, index]
        out[:, ~valid] = default
        return out

    def send(self, values: np.ndarray, dests: np.ndarray, send: Send) -> list[np.ndarray]:
        """``send``: machine i's ``values`` go to machine ``dests[i]`` (nothing when it is
        outside 0..n-1); one array per target, the k-th holding on machine j the value of
        the k-th lowest-numbered sender to j (or the default). CraspError for a
        destination that is not an integer, or more senders to one machine than the send
        has targets."""
        n, capacity = self.n, send.capacity
        out = [np.full((self.batch, n), send.default, dtype=np.float64) for _ in send.targets]
        for b in range(self.batch):
            seen: dict[int, list[int]] = {}
            for i in range(n):
                d = float(dests[b, i])
                if d != math.floor(d):
                    raise self.fail(
                        f"`send` to a destination that is not an integer: machine i = {i} "
                        f"sends to {d!r} (for {env_text(self.env, None)})",
                        send.span,
                    )
                if not 0 <= d < n:
                    continue
                j = int(d)
                senders = seen.setdefault(j, [])
                if len(senders) == capacity:
                    batch = f", input {b}" if self.batch > 1 else ""
                    which = " and ".join(str(s) for s in [*senders, i])
                    raise self.fail(
                        f"`send` collision in round r = {self.env.get('r')}: machines "
                        f"{which} all send to machine {j}{batch}, more than "
                        f"{send.text()} receives ({capacity})"
                        if capacity > 1
                        else f"`send` collision in round r = {self.env.get('r')}: machines "
                        f"{which} both send to machine {j}{batch}",
                        send.span,
                    )
                out[len(senders)][b, j] = values[b, i]
                senders.append(i)
        return out

    def check_bounds(self, mem: dict[str, np.ndarray], when: str) -> None:
        for slot in self.program.slots:
            if slot.bound is None:
                continue
            bad = np.abs(mem[slot.name]) > slot.bound
            if bad.any():
                at = np.unravel_index(int(np.argmax(bad)), bad.shape)
                i = int(at[1])
                batch = f", input {int(at[0])}" if self.batch > 1 else ""
                raise self.fail(
                    f"slot {slot.name!r} exceeds its bound {slot.bound:g} {when}: machine i = {i}"
                    f"{batch} holds {float(mem[slot.name][at])!r}",
                    slot.span,
                )

    def run(self, values: np.ndarray) -> Trace:
        program, n = self.program, self.n
        rounds = check_pcoc(program, n)
        mem: dict[str, np.ndarray] = {}
        for slot in program.slots:
            mem[slot.name] = np.full((self.batch, n), slot.init, dtype=np.float64)
        for k, name in enumerate(program.inputs):
            mem[name] = np.array(values[:, k, :], dtype=np.float64)
        if self.check:
            self.check_bounds(mem, "in the initial memory")
        history = [dict(mem)]
        envs = []
        for round_, env in rounds:
            self.env, self.cache = env, {}
            start = dict(mem)
            temps = {
                receive.target: self.receive(start[receive.slot], receive.source, receive.default)
                for receive in round_.receives
            }
            for send in round_.sends:
                got = self.send(start[send.slot], start[send.dest], send)
                temps.update(zip(send.targets, got, strict=True))
            active = np.ones((self.batch, n), dtype=bool) if self.check else None
            mem, _ = self.block(round_.body, dict(mem), temps, active)
            if self.check:
                self.check_bounds(mem, f"after round r = {env['r']}")
            history.append(mem)
            envs.append(dict(env))
        outputs = {name: mem[name].copy() for name in program.outputs}
        return Trace(n, [{k: v.copy() for k, v in m.items()} for m in history], outputs, envs)


def _reduce(fn: np.ufunc, values: list[_Value]) -> _Value:
    out = values[0]
    for value in values[1:]:
        out = fn(out, value)
    return out


def _input_array(
    program: Program,
    n: int,
    inputs: Sequence[Sequence[float]] | np.ndarray | None,
    batched: bool,
) -> np.ndarray:
    """Inputs as an array of shape (B, k, n) (k input slots)."""
    k = len(program.inputs)
    names = ", ".join(program.inputs) or "none"
    try:
        values = np.asarray(inputs if inputs is not None else np.zeros((0, n)), dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise CraspError(f"inputs are not an array of numbers: {err}", filename="<input>") from None
    if k == 0 and values.size == 0 and not batched:
        values = np.zeros((0, n))
    if batched and values.ndim == 2 and k == 1:
        values = values[:, None, :]
    if not batched and values.ndim == 1 and k == 1:
        values = values[None, :]
    if not batched:
        values = values[None]
    expected = "(batch, k, n)" if batched else "(k, n)"
    if values.ndim != 3 or values.shape[1:] != (k, n):
        shape = values.shape[1:] if not batched else values.shape
        raise CraspError(
            f"expected inputs of shape {expected} with k = {k} input slot(s) ({names}) and"
            f" n = {n}, got shape {tuple(shape)}",
            filename="<input>",
        )
    if not np.isfinite(values).all():
        raise CraspError("inputs must be finite numbers (no nan or inf)", filename="<input>")
    return values


def check_input_bounds(program: Program, values: np.ndarray, on_beyond: str = "error") -> None:
    """Inputs ``(B, k, n)`` outside the declared bounds of their slots: ``on_beyond`` is
    ``"error"`` (:class:`CraspError`), ``"warn"`` or ``"ignore"``. The program's
    guarantees (and its compiled models') hold only within the bounds."""
    if on_beyond not in ("error", "warn", "ignore"):
        raise ValueError(f"on_beyond must be error, warn or ignore, not {on_beyond!r}")
    problems = []
    for k, name in enumerate(program.inputs):
        bound = program.slot(name).bound
        if bound is None or on_beyond == "ignore":
            continue
        bad = np.abs(values[:, k, :]) > bound
        if bad.any():
            b, i = np.unravel_index(int(np.argmax(bad)), bad.shape)
            where = f"machine {int(i)}" + (f" of input {int(b)}" if len(values) > 1 else "")
            problems.append(
                f"input {name!r} holds {float(values[b, k, i])!r} at {where}, outside its "
                f"declared bound {bound:g}"
            )
    if not problems:
        return
    message = "; ".join(problems)
    if on_beyond == "error":
        raise CraspError(
            message + " (allow it with --beyond-guarantee warn, or on_beyond='warn')",
            filename=program.filename,
        )
    warnings.warn(message, stacklevel=3)


def interpreter_bytes(program: Program, n: int, batch: int) -> int:
    """The bytes a run of ``program`` on ``batch`` inputs of ``n`` machines holds at its
    peak, estimated before it starts: ``8·B·n`` times ``2·(R + 1)·S + 4·S + 16`` for R
    rounds and S slots: every slot after every round, twice (the history and the trace's
    copy of it), the memory and temporaries of the round being run, and the static values
    (machine indices, sources, masks) of one round. Loop bounds that have no value count
    no rounds (the checker reports them)."""
    try:
        rounds = sum(1 for _ in iter_rounds(program, n, lambda failure, env, span: None))
    except UnrollLimit:
        rounds = 0  # refused by the checker
    slots = len(program.slots)
    return 8 * batch * n * (2 * (rounds + 1) * slots + 4 * slots + 16)


def require_interpreter_memory(program: Program, n: int, batch: int) -> None:
    """CraspError when :func:`interpreter_bytes` exceed the memory budget."""
    require_memory(
        interpreter_bytes(program, n, batch),
        f"interpreting the program on {batch:,} input{'s' * (batch != 1)} of n = {n:,}",
        program.filename,
    )


def interpret_program(
    program: Program,
    n: int,
    inputs: Sequence[Sequence[float]] | np.ndarray,
    *,
    check_promises: bool = False,
    on_beyond: str = "error",
) -> Trace:
    """Run ``program`` on ``n`` machines. ``inputs`` holds one vector of ``n`` numbers per
    input slot (shape ``(len(program.inputs), n)``; a single vector of length n when the
    program has one input). float64, exact comparisons. Inputs outside their declared
    bounds are refused (``on_beyond``: see :func:`check_input_bounds`). With
    ``check_promises``, a data comparison whose operands come within its margin of the
    threshold (on a machine where it takes effect) or a slot outside its declared bound
    raises :class:`CraspError`."""
    n = validate_n(n, program.filename)
    require_interpreter_memory(program, n, 1)
    values = _input_array(program, n, inputs, batched=False)
    if not check_promises:  # which checks every slot's bound, from the initial memory on
        check_input_bounds(program, values, on_beyond)
    trace = _Machine(program, n, 1, check_promises).run(values)
    trace.rounds = [{k: v[0] for k, v in m.items()} for m in trace.rounds]
    trace.outputs = {k: v[0] for k, v in trace.outputs.items()}
    return trace


def interpret_batch(
    program: Program,
    n: int,
    inputs: np.ndarray,
    *,
    check_promises: bool = False,
    on_beyond: str = "error",
) -> Trace:
    """:func:`interpret_program` on many inputs at once: ``inputs`` of shape
    ``(batch, len(program.inputs), n)`` (or ``(batch, n)`` for one input slot); the trace's
    arrays have shape ``(batch, n)``."""
    n = validate_n(n, program.filename)
    values = _input_array(program, n, inputs, batched=True)
    require_interpreter_memory(program, n, values.shape[0])
    if not check_promises:
        check_input_bounds(program, values, on_beyond)
    return _Machine(program, n, values.shape[0], check_promises).run(values)


# ================================================================== text input and output

NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_FIELD = re.compile(r"\S+")


def read_vectors(
    text: str, n: int | None, filename: str = "input", slots: int = 1
) -> list[np.ndarray]:
    """The input vectors in ``text``: one per non-empty line, each line holding
    ``slots · n`` numbers separated by whitespace (the vector of the first input slot, then
    the next, ...). Returns one array of shape ``(slots, n)`` per line. With ``n=None``,
    n is each line's count divided by ``slots``. Bad numbers and wrong counts raise
    :class:`CraspError` at their line and column."""
    diagnostics: list[Diagnostic] = []
    vectors: list[np.ndarray] = []
    for number, line in enumerate(text.split("\n"), start=1):
        fields = list(_FIELD.finditer(line.rstrip("\r")))
        if not fields:
            continue
        values, ok = [], True
        for match in fields:
            word = match.group()
            span = Span(number, match.start() + 1, number, match.end() + 1)
            if not NUMBER.fullmatch(word):
                diagnostics.append(
                    Diagnostic(
                        f"{word!r} is not a number",
                        span,
                        "expected a number such as 3, -0.5 or 1e6",
                    )
                )
                ok = False
                continue
            value = float(word)
            if not math.isfinite(value):
                diagnostics.append(Diagnostic(f"{word} is out of range", span))
                ok = False
                continue
            values.append(value)
        if not ok:
            continue
        count = len(fields)
        expected = None if n is None else slots * n
        per = f" ({slots} input slots × n = {n})" if slots != 1 else f" (n = {n})"
        if n is None and count % slots:
            diagnostics.append(
                Diagnostic(
                    f"{count} numbers do not split into {slots} input vectors of equal length",
                    Span(number, fields[0].start() + 1, number, fields[-1].end() + 1),
                )
            )
            continue
        if expected is not None and count != expected:
            if count < expected:
                end = fields[-1].end() + 1
                span = Span(number, end, number, end + 1)
                message = f"expected {expected} numbers{per}, found only {count}"
            else:
                extra = fields[expected]
                span = Span(number, extra.start() + 1, number, fields[-1].end() + 1)
                message = f"expected {expected} numbers{per}, found {count}"
            diagnostics.append(Diagnostic(message, span))
            continue
        vectors.append(np.array(values, dtype=np.float64).reshape(slots, -1))
        if len(diagnostics) >= MAX_ERRORS:
            break
    if diagnostics:
        raise CraspError(diagnostics[:MAX_ERRORS], text, filename)
    return vectors


def format_number(value: float) -> str:
    """A number as text: integers without ``.0`` (below 1e16), otherwise the shortest text
    that reads back as the same float64."""
    value = float(value)
    if value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


def format_vector(values: npt.ArrayLike) -> str:
    """Numbers separated by spaces (see :func:`format_number`)."""
    return " ".join(format_number(v) for v in np.asarray(values, dtype=np.float64).ravel())
