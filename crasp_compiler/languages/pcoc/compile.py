"""Compile a PCOC program to a positional transformer, and run compiled PCOC models.

:func:`compile_program` lowers the program (:mod:`crasp_compiler.languages.pcoc.lower`) for exactly
``n`` machines: one transformer layer per communication round, one positional routing
head per distinct source pattern of the round, and the MLP depth each local computation
needs (the builder schedules blocks as early as their inputs allow, so a round whose
local computation is linear or one MLP deep costs exactly one layer).
:func:`run_pcoc` runs such a model on input vectors with the numpy executor (or the
torch module), checking that every vector has exactly n numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from crasp_compiler.errors import CraspError, Diagnostic
from crasp_compiler.languages.pcoc.benes import Probe, destination_probe, has_sends, lower_sends
from crasp_compiler.languages.pcoc.check import check_pcoc
from crasp_compiler.languages.pcoc.lower import (
    MODES,
    TOKEN,
    Comparison,
    Lowered,
    Unresolved,
    lower_pcoc,
    unresolved,
)
from crasp_compiler.languages.pcoc.nodes import Assign, Program, Round, Stmt
from crasp_compiler.languages.pcoc.rounding import DTYPES, UNIT, times
from crasp_compiler.model.model import Guarantee, Model, Provenance
from crasp_compiler.runtime.numpy_exec import beyond_guarantee, numeric_matrix, run_tokens

# The most machines a model is compiled for (the interpreter goes to 10^7).
MAX_COMPILE_MACHINES = 100_000
# exp(−T) underflows in float64 past about 745; no program needs that much.
MAX_TEMPERATURE = 700.0
# Lowerings of a softmax model before its temperature must have settled.
SETTLE_ROUNDS = 12
LANGUAGE = "PCOC"

Inputs = Mapping[str, Sequence[float]] | Sequence[Sequence[float]] | np.ndarray


def decay(temperature: float | None, d: int) -> float:
    """The most weight a softmax row puts on one key off its source, per unit of n
    (``e^{−T̃}``, with T̃ the scale as float type number d holds it, at least ``T(1 − u)``);
    0 for the average-hard model."""
    if temperature is None:
        return 0.0
    return math.exp(-temperature * (1 - UNIT[d]))


def temperature_for(
    lowered: Lowered, tolerance: float | None, d: int
) -> tuple[float, dict[str, float]]:
    """The smallest temperature at which the softmax model of ``lowered`` decides every
    data comparison exactly in float type d (``leak·e^{−T} < slack − err − ref``) and,
    with a ``tolerance`` τ, keeps every output within τ of the interpreter
    (``leak·e^{−T} ≤ τ − err − ref``); without one, within its rounding plus one rounding
    of its bound B (``leak·e^{−T} ≤ u·(B + 1)``). Returns T (at least 1) and,
    for a τ that the rounding alone reaches, the outputs that reach it with their
    rounding (T is then meaningless)."""
    scale = 1 - UNIT[d]
    needed = [1.0]
    for comparison in lowered.comparisons:
        room = comparison.slack[d] - comparison.err[d] - comparison.ref
        if comparison.leak > 0 and room > 0:
            needed.append(math.log(comparison.leak / (room * (1 - 2**-20))) / scale)
    over: dict[str, float] = {}
    for name, bound in lowered.bounds.items():
        rounding = bound.total(d)
        if tolerance is None:  # the softmax error: one rounding of the output's bound
            room = UNIT[d] * (lowered.slots[name].magnitude + 1)
        else:
            room = tolerance - rounding
            if room <= 0:
                over[name] = rounding
                continue
        if bound.leak > 0:  # a little below the room: log and exp round
            needed.append(math.log(bound.leak / (room * (1 - 2**-20))) / scale)
    return max(needed), over


def _softmax(
    program: Program, n: int, tolerance: float | None, dtype: str
) -> tuple[Lowered, float]:
    """The softmax model's lowering and temperature: :func:`_softmax_at` as lowered, and
    where that fails, with every data bit a big-M gate reads made exact first (one layer
    more per such comparison, but a bit's rounding is no longer multiplied by M)."""
    try:
        return _softmax_at(program, n, tolerance, dtype, clean=False)
    except CraspError:
        return _softmax_at(program, n, tolerance, dtype, clean=True)


def _softmax_at(
    program: Program, n: int, tolerance: float | None, dtype: str, clean: bool
) -> tuple[Lowered, float]:
    """The softmax model's lowering and temperature (:func:`temperature_for`): analysed
    once at a temperature so high that no softmax weight off a source is felt (the errors
    do not depend on T), then lowered at T, whose errors (the values then carry their
    softmax leak too) are checked; T is raised and the program lowered again if they need
    it. CraspError for a comparison no temperature decides exactly, a tolerance the
    rounding alone reaches, or a T beyond :data:`MAX_TEMPERATURE`."""
    d = DTYPES.index(dtype)
    lowered = lower_pcoc(program, n, "softmax", MAX_TEMPERATURE, dtype, clean)
    for comparison in lowered.comparisons:
        if not comparison.holds(d, 0.0):
            raise unresolved(comparison, program, dtype)
    temperature = None
    for _ in range(SETTLE_ROUNDS):
        needed, over = temperature_for(lowered, tolerance, d)
        if over:
            raise _tolerance_error(program, lowered, tolerance, dtype, over)
        if temperature is not None and needed <= temperature:
            # lowered at T, the values carry their softmax leak: a comparison it pushes
            # past its slack needs a higher T (the leak falls with it)
            failing = [c for c in lowered.comparisons if not c.holds(d, decay(temperature, d))]
            if not failing:
                return lowered, temperature
            needed = temperature * 1.25 + 1
            if needed > MAX_TEMPERATURE:
                raise unresolved(failing[0], program, dtype)
        if needed > MAX_TEMPERATURE:
            raise CraspError(
                f"the softmax model would need temperature {needed:.4g} (> "
                f"{MAX_TEMPERATURE:g}) for tolerance {tolerance or 'the float rounding'}; use "
                "mode hard, a larger tolerance, or tighter bounds and margins",
                filename=program.filename,
            )
        temperature = needed
        lowered = lower_pcoc(program, n, "softmax", temperature, dtype, clean)
    raise CraspError(
        f"the softmax temperature did not settle in {SETTLE_ROUNDS} lowerings; use mode hard, "
        "a larger tolerance, or tighter bounds and margins",
        filename=program.filename,
    )


def _tolerance_error(
    program: Program,
    lowered: Lowered,
    tolerance: float | None,
    dtype: str,
    over: Mapping[str, float],
) -> CraspError:
    """A tolerance that the float rounding of some output reaches on its own."""
    name, rounding = max(over.items(), key=lambda item: item[1])
    size = lowered.slots[name].magnitude
    text = (
        f"tolerance {tolerance:g} cannot be met in {dtype}: the rounding of output {name!r} "
        f"alone may reach {rounding:.3g} (values up to {size:.3g})"
    )
    widest = max(b.total(DTYPES.index(dtype)) for b in lowered.bounds.values())
    hints = [f"a tolerance of {_round_up(2 * widest)} or more compiles"]
    if dtype == "float32":
        wide64 = max(b.total(0) for b in lowered.bounds.values())
        if math.isfinite(wide64) and wide64 < (tolerance or 0):
            hints.append("--dtype float64 compiles this tolerance")
        elif math.isfinite(wide64):
            hints.append(f"in float64, a tolerance of {_round_up(2 * wide64)} or more")
    hints.append("tighter bounds shrink it, and mode hard has no softmax error")
    return CraspError(
        [Diagnostic(text, None, "; ".join(hints))], program.source or None, program.filename
    )


def _round_up(value: float) -> str:
    """``value`` rounded up to 2 significant digits, as text."""
    if not math.isfinite(value) or value <= 0:
        return f"{value:g}"
    exponent = math.floor(math.log10(value)) - 1
    return f"{math.ceil(value / 10**exponent) * 10**exponent:.2g}"


def compile_program(
    program: Program,
    n: int,
    *,
    mode: str = "hard",
    tolerance: float | None = None,
    dtype: str = "float64",
    reuse: bool | None = None,
) -> Model:
    """Compile ``program`` for exactly ``n`` machines to a :class:`Model`.

    Machine i is position t = i + 1, BOS (t = 0) is the sink; every position holds the
    token ``m`` and the input slots are numeric input channels (``Model.inputs``, in
    declaration order). The outputs are the program's output slots (rule ``value``).

    The guarantee is against the interpreter (:func:`~crasp_compiler.languages.pcoc.
    interpret.interpret`, float64), for inputs within their declared bounds on which
    every data comparison stays outside its margin (the interpreter's ``check_promises``):
    per float type, whether the model is covered (``Guarantee.dtypes``: n,
    or −1 where a data comparison is not provably decided exactly) and a bound on how far
    any output may be from the interpreter's (``Guarantee.errors``), from the rounding
    analysis of :mod:`crasp_compiler.languages.pcoc.rounding`.

    - ``mode="hard"``: routing heads with average-hard attention: exact in real
      arithmetic. A data comparison float64 cannot decide exactly is refused when the
      lowering reaches it (naming it and the margin that would compile).
    - ``mode="softmax"``: the same heads with softmax attention and scores ×T. In real
      arithmetic a routing row puts weight ``≤ n·e^{−T}`` off its source, so every value
      is within ``leak·e^{−T}`` of the hard model (:mod:`~crasp_compiler.languages.pcoc.
      lower`); data comparisons are ReLU ramps with a slack of a quarter margin on either
      side, which the softmax error does not cross. T is the smallest temperature at which
      every comparison stays exact and every output, rounding in ``dtype`` included, is
      within ``tolerance`` of the interpreter (:func:`temperature_for`); without a
      tolerance, the softmax error is at most one rounding of each output's bound (u·B),
      and the bound (rounding plus that) is recorded as the tolerance.
      A tolerance the rounding alone reaches is refused, saying what would compile.

    The guarantee covers exactly n machines: ``max_len`` = n, and :func:`run_pcoc`
    rejects inputs of any other length. Data-dependent sends route exactly only to
    integral destinations, distinct among the machines 0..n−1 they name: the guarantee
    says so, records the input slots that are destinations for the runtimes to check
    (``Guarantee.destinations``), and names a send whose destination the program
    computes as the caller's condition (:func:`_send_condition`). ``info`` reports the
    layers and heads next to the simulation theorem's counts (R layers for R rounds, s
    heads for a memory of s words: the slots plus the values received in a round), and
    the bounds per output. ``reuse`` as in
    :meth:`~crasp_compiler.assemble.builder.Builder.build` (``False``: one residual
    dimension per variable).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise CraspError(f"n must be an integer >= 1, not {n!r}", filename=program.filename)
    n = int(n)
    if n > MAX_COMPILE_MACHINES:
        raise CraspError(
            f"n = {n:,} machines is more than the compiler builds ({MAX_COMPILE_MACHINES:,}: "
            "the model is O(n) wide and the lowering O(n) per round); the interpreter runs "
            "up to 10,000,000",
            filename=program.filename,
        )
    if mode not in MODES:
        raise CraspError(f"mode must be one of {MODES}, not {mode!r}", filename=program.filename)
    if dtype not in DTYPES:
        raise CraspError(
            f"dtype must be one of {tuple(DTYPES)}, not {dtype!r}", filename=program.filename
        )
    if tolerance is not None and not (
        isinstance(tolerance, (int, float)) and math.isfinite(tolerance) and tolerance > 0
    ):
        raise CraspError(
            f"the tolerance must be a number > 0, not {tolerance!r}", filename=program.filename
        )
    # the static checks of the reference semantics for n machines (CraspError); the rounds
    # they unroll count the send rounds below
    unrolled = check_pcoc(program, n)
    original = program
    if has_sends(program):
        _probe_destinations(program, n, mode, dtype)
        program = lower_sends(program, n)
    temperature = None
    if mode == "softmax":
        lowered, temperature = _softmax(program, n, tolerance, dtype)
    else:
        lowered = lower_pcoc(program, n, mode)
        for comparison in lowered.comparisons:  # float64 must decide every one exactly
            if not comparison.holds(0):
                raise unresolved(comparison, program, "float64")
    rounds = len(lowered.rounds)
    # the theorem's memory s: the slots plus the values a machine receives in a round
    memory = len(program.slots) + max((r.receives for r in lowered.rounds), default=0)
    covered = {
        name: all(c.holds(d, decay(temperature, d)) for c in lowered.comparisons)
        for d, name in enumerate(DTYPES)
    }
    bounds = {
        name: {out: float(b.total(d, decay(temperature, d))) for out, b in lowered.bounds.items()}
        for d, name in enumerate(DTYPES)
        if covered[name]
    }
    errors = {
        name: max(per.values(), default=0.0)
        for name, per in bounds.items()
        if all(math.isfinite(v) for v in per.values())
    }
    if mode == "softmax" and dtype not in errors:  # a tolerance needs a finite bound
        raise CraspError(
            f"the softmax model's outputs have no finite error bound in {dtype} (a value "
            "without a bound); declare bounds on the inputs, or use mode hard",
            filename=program.filename,
        )
    target = errors.get(dtype, math.inf) if mode == "softmax" else None
    text = _guarantee_text(n, mode, temperature, target, dtype, covered, errors)
    destinations, capacities, condition = _send_condition(original, unrolled, n)
    text += condition
    input_bounds = {s.name: s.bound for s in program.slots if s.name in program.inputs}
    softmax: dict[str, object] = {}
    if temperature is not None:
        softmax = {
            "temperature": temperature,
            "tolerance": target if tolerance is None else tolerance,
            "dtype": dtype,
            "leak_bound": {
                out: times(b.leak, decay(temperature, DTYPES.index(dtype)))
                for out, b in lowered.bounds.items()
            },
        }
    model = lowered.builder.build(
        {name: (lowered.slots[name].form, "value") for name in program.outputs},
        guarantee=Guarantee(
            n,
            text,
            {name: (n if ok else -1) for name, ok in covered.items()},
            {name: float(bound) for name, bound in input_bounds.items() if bound is not None},
            destinations,
            errors,
            capacities,
        ),
        filename=program.filename,
        reuse=reuse,
        provenance=Provenance(LANGUAGE, mode, n),
        options={
            "language": LANGUAGE,
            "n": n,
            "mode": mode,
            "tolerance": softmax.get("tolerance"),
            "dtype": dtype,
            "temperature": temperature,
        },
        source=program.source or "",
        info={
            "language": LANGUAGE,
            "n": n,
            "rounds": rounds,
            "slots": [s.name for s in program.slots],
            "pcoc_inputs": list(program.inputs),
            "pcoc_outputs": list(program.outputs),
            "heads_per_round": [len(r.heads) for r in lowered.rounds],
            "theorem": {"nodes": n + 1, "layers": rounds, "heads_per_layer": memory},
            "error_bounds": bounds,
            **softmax,
        },
    )
    model.info["layers"] = len(model.layers)
    model.info["heads"] = [len(layer.heads) for layer in model.layers]
    model.info["extra_depth"] = len(model.layers) - rounds
    if program is not original:
        k = (n - 1).bit_length()
        sends = sum(1 for rnd, _ in unrolled if rnd.sends)
        model.info["benes"] = {
            "send_rounds": sends,
            "rounds": rounds,
            "layers": len(model.layers),
            "bound_2Rlog2n": 2 * sends * k,
        }
    return model


def _assigned(body: Sequence[Stmt]) -> set[str]:
    """The names a round's statements assign, in either branch of every ``if``."""
    names: set[str] = set()
    for stmt in body:
        if isinstance(stmt, Assign):
            names.add(stmt.target)
        else:
            names |= _assigned(stmt.then) | _assigned(stmt.otherwise)
    return names


def _send_condition(
    program: Program, rounds: Sequence[tuple[Round, dict[str, int]]], n: int
) -> tuple[list[str], dict[str, int], str]:
    """The condition under which the sends of ``program`` route exactly, as the guarantee
    records it: the input slots that are the destinations of a send as they were read
    (no round before it assigns them), which the runtimes check, with their capacities
    above 1 (the smallest of the sends that read them), and the words for the
    guarantee's text (empty without sends). A send whose destination the program
    computes cannot be checked before the routing: the text names it."""
    checked: dict[str, int] = {}
    computed: list[str] = []
    assigned: set[str] = set()
    for rnd, _ in rounds:
        for send in rnd.sends:
            if send.dest in program.inputs and send.dest not in assigned:
                checked[send.dest] = min(checked.get(send.dest, send.capacity), send.capacity)
            else:
                line = f" (line {send.span.line})" if send.span is not None else ""
                computed.append(f"{send.text()}{line}")
        assigned |= _assigned(rnd.body)
    if not checked and not computed:
        return [], {}, ""
    computed = list(dict.fromkeys(computed))
    capacities = {name: c for name, c in checked.items() if c > 1}
    text = (
        "; data-dependent sends route exactly only when their destinations are integers, "
        f"distinct among the machines whose destination is in 0..{n - 1} (one outside sends "
        "nothing)"
    )
    if capacities or any(send.capacity > 1 for rnd, _ in rounds for send in rnd.sends):
        text += " or, for a send into c names, named by at most c machines each"
    if checked:
        names = ", ".join(
            repr(name) + (f" (at most {checked[name]} per machine)" if checked[name] > 1 else "")
            for name in checked
        )
        text += f", which the runtimes check on input(s) {names} as they check the bounds"
    if computed:
        text += (
            f"; the destinations of {', '.join(computed)} are computed by the program and "
            "cannot be checked before the routing: that they meet this condition is the "
            "caller's to ensure"
        )
    return list(checked), capacities, text


def _guarantee_text(
    n: int,
    mode: str,
    temperature: float | None,
    tolerance: float | None,
    dtype: str,
    covered: Mapping[str, bool],
    errors: Mapping[str, float],
) -> str:
    """The guarantee in words: what is covered and each float type's bound."""
    promises = (
        "for inputs within their declared bounds on which every data comparison stays "
        "outside its margin (the interpreter checks it with check_promises)"
    )
    if mode == "hard":
        head = (
            f"exact for n = {n} machines (exactly {n} numbers per input slot) in real "
            f"arithmetic, with average-hard attention, {promises}"
        )
    else:
        head = (
            f"approximate (softmax attention, T = {temperature:.6g}): for n = {n} machines "
            f"every output is within {tolerance:.3g} of the interpreter's (float64) output "
            f"when the model runs in {dtype}, {promises}"
        )
    parts = []
    for name in DTYPES:
        if not covered[name]:
            parts.append(f"not {name}: a data comparison is within {name} rounding of its margin")
        elif name in errors:
            parts.append(
                f"in {name} every output is within {errors[name]:.3g} of the interpreter's"
            )
        else:
            parts.append(f"in {name} the rounding is not bounded (values without bounds)")
    return head + "; " + "; ".join(parts)


def _probe_destinations(program: Program, n: int, mode: str, dtype: str) -> None:
    """Refuse, before the routing is lowered, a send whose
    destination the routing cannot compare exactly in ``dtype``: the rounds before the
    first send round and the tests of that round's first routing step, lowered alone
    (:func:`~crasp_compiler.languages.pcoc.benes.destination_probe`; the routing compares
    only the destination with data, everything else it compares is an exact integer). The
    message names the destination slot and, where it has a bound, the largest bound that
    compiles."""
    probe = destination_probe(program, n)
    if probe is None:
        return
    temperature = MAX_TEMPERATURE if mode == "softmax" else None
    d = DTYPES.index(dtype)
    before = len(lower_pcoc(probe.before, n, mode, temperature, dtype).comparisons)
    failure = _probe_failure(probe.program, n, mode, temperature, dtype, before)
    if failure is None:
        return
    send, slot = probe.send, probe.program.slot(probe.send.dest)
    text = (
        f"{send.text()}: the compiler routes it by "
        f"comparing the destination {send.dest!r} (values up to {failure.magnitude:g}) with "
        f"the machine numbers (margin 0.5, offset routing), but {dtype} computes their "
        f"difference only to within {failure.rounding(d):.3g} and the routing needs it "
        f"within {failure.threshold:g}"
    )
    hint = f"tighter bounds on the values {send.dest!r} is computed from"
    if slot.bound is not None:
        best = _largest_bound(probe, n, mode, temperature, dtype, before, slot.bound)
        if best is not None:
            keyword = "input" if slot.name in program.inputs else "slot"
            hint = f"declare `{keyword} {slot.name} bound {best}` or less (it is {slot.bound:g})"
    raise CraspError([Diagnostic(text, send.span, hint)], program.source or None, program.filename)


def _probe_failure(
    probe: Program, n: int, mode: str, temperature: float | None, dtype: str, before: int
) -> Comparison | None:
    """The first comparison of the probe's routing step (after the ``before`` ones of
    the program's own rounds) that ``dtype`` cannot decide exactly, or None."""
    d = DTYPES.index(dtype)
    try:
        lowered = lower_pcoc(probe, n, mode, temperature, dtype)
    except Unresolved as err:
        return err.comparison
    failing = [c for c in lowered.comparisons[before:] if not c.holds(d)]
    return failing[0] if failing else None


def _largest_bound(
    probe: Probe,
    n: int,
    mode: str,
    temperature: float | None,
    dtype: str,
    before: int,
    bound: float,
) -> str | None:
    """The largest bound of the destination slot (two significant digits, rounded down)
    with which the probe compiles, by bisection (None if not even 1 does)."""

    def compiles(value: float) -> bool:
        program = probe.with_bound(value)
        return _probe_failure(program, n, mode, temperature, dtype, before) is None

    if not compiles(1.0):
        return None
    lo, hi = 1.0, float(bound)
    while hi / lo > 1.001:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if compiles(mid) else (lo, mid)
    exponent = math.floor(math.log10(lo)) - 1
    return f"{math.floor(lo / 10**exponent) * 10**exponent:.2g}"


def is_pcoc(model: Model) -> bool:
    """Whether ``model`` was compiled from a PCOC program."""
    return model.provenance is not None and model.provenance.language == LANGUAGE


def machines(model: Model) -> int:
    """The number of machines a compiled PCOC model is for."""
    if not is_pcoc(model):
        raise CraspError("this model was not compiled from a PCOC program")
    size = model.provenance.size if model.provenance is not None else None
    if size is None:
        raise CraspError("this PCOC model does not record its number of machines (info 'n')")
    return size


def input_matrix(model: Model, inputs: Inputs, where: str = "input") -> np.ndarray:
    """One run's inputs as an ``(n, k)`` array (k input slots, declaration order), from a
    mapping ``slot -> vector`` or, as :func:`~crasp_compiler.languages.pcoc.interpret.interpret_program`
    takes them, one vector per input slot (shape ``(k, n)``; a single vector for one
    input slot). CraspError unless every vector has exactly n finite numbers."""
    n, names = machines(model), list(model.inputs)
    if isinstance(inputs, Mapping):
        missing = [name for name in names if name not in inputs]
        extra = [name for name in inputs if name not in names]
        if missing or extra:
            raise CraspError(
                f"the inputs name {sorted(inputs)}, the model reads {names}", filename=where
            )
        columns = [np.asarray(inputs[name], dtype=np.float64) for name in names]
    else:
        try:
            array = np.asarray(inputs, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise CraspError(
                f"the inputs are not vectors of numbers: {err}", filename=where
            ) from None
        if array.ndim == 1 and len(names) == 1:
            array = array[None]
        if array.ndim != 2 or array.shape[0] != len(names):
            raise CraspError(
                f"expected {len(names)} input vector(s) ({', '.join(names) or 'none'}) of "
                f"{n} numbers, got an array of shape {array.shape}",
                filename=where,
            )
        columns = list(array)
    for name, column in zip(names, columns, strict=True):
        if column.shape != (n,):
            got = column.shape[0] if column.ndim == 1 else column.shape
            raise CraspError(
                f"the model is compiled for exactly n = {n} machines: input {name!r} has "
                f"{got} numbers, expected {n}",
                filename=where,
            )
        if not np.all(np.isfinite(column)):
            raise CraspError(f"input {name!r} has a number that is not finite", filename=where)
    if not names:
        return np.zeros((n, 0))
    return np.stack(columns, axis=1)


def run_pcoc(
    model: Model,
    batch: Sequence[Inputs],
    *,
    dtype: type = np.float64,
    runtime: str = "numpy",
    on_beyond: str = "error",
) -> dict[str, np.ndarray]:
    """Run a compiled PCOC model on a batch of inputs (each as :func:`input_matrix`
    takes it); returns ``{output slot: array (B, n)}``, machine i in column i.
    ``runtime``: ``"numpy"`` (the reference executor) or ``"torch"``. Inputs outside the
    declared bounds, send destinations that are not integers or collide
    (``Guarantee.destinations``), or a float type the model is not exact in, are refused
    (``on_beyond="warn"`` warns, ``"ignore"`` runs them anyway)."""
    n = machines(model)
    matrices = [input_matrix(model, inputs) for inputs in batch]
    if not matrices:
        return {out.name: np.zeros((0, n)) for out in model.outputs}
    tokens = [[TOKEN] * n for _ in matrices]
    if runtime == "numpy":
        result = run_tokens(model, tokens, dtype=dtype, values=matrices, on_overlength=on_beyond)
        return {name: raw[:, 1:] for name, raw in result.outputs.items()}
    if runtime != "torch":
        raise ValueError(f"runtime must be numpy or torch, not {runtime!r}")
    import torch

    from crasp_compiler.runtime.torch_module import TorchTransformer

    guarantee = model.guarantee
    problems = [guarantee.length_problem(n, np.dtype(dtype).name)]
    sizes = np.full(len(matrices), n, dtype=np.int64)
    problems += guarantee.input_problems(
        model.inputs, numeric_matrix(model.inputs, sizes, matrices), sizes
    )
    beyond_guarantee([p for p in problems if p], on_beyond)
    module = TorchTransformer(model)
    if dtype == np.float32:
        module = module.float()
    ids, lengths = module.encode(tokens)
    values = module.encode_values(matrices, lengths)
    with torch.no_grad():
        raw = module(ids, lengths, values.to(module.embed.w_e.dtype)).double().cpu().numpy()
    return {out.name: raw[:, 1:, k] for k, out in enumerate(model.outputs)}
