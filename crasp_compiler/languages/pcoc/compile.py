"""Compile a PCOC program to a positional transformer, and run compiled PCOC models.

:func:`compile_pcoc` lowers the program (:mod:`crasp_compiler.languages.pcoc.lower`) for exactly
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
from crasp_compiler.languages.pcoc.benes import has_sends, lower_sends
from crasp_compiler.languages.pcoc.interpret import check_pcoc
from crasp_compiler.languages.pcoc.lower import MODES, TOKEN, Comparison, Lowered, lower_pcoc
from crasp_compiler.languages.pcoc.nodes import Assign, Program, Round, Stmt, span_of
from crasp_compiler.model.model import Guarantee, Model
from crasp_compiler.runtime.numpy_exec import beyond_guarantee, numeric_matrix, run

DTYPES = {"float64": np.float64, "float32": np.float32}
# The most machines a model is compiled for (the interpreter goes to 10^7).
MAX_COMPILE_MACHINES = 100_000
# exp(−T) underflows in float64 past about 745; no program needs that much.
MAX_TEMPERATURE = 700.0
LANGUAGE = "PCOC"

Inputs = Mapping[str, Sequence[float]] | Sequence[Sequence[float]] | np.ndarray


def temperature_for(
    leaks: Mapping[str, float],
    noises: Mapping[str, float],
    n: int,
    tolerance: float,
    dtype: str,
) -> tuple[float, dict[str, float], dict[str, float]]:
    """The temperature T of the softmax model, with the real-arithmetic error bound and
    the estimated rounding of every output.

    Output k deviates from the average-hard model by at most ``A_k·e^{−T}`` in real
    arithmetic (``A_k`` = ``leaks[k]``, see :mod:`crasp_compiler.languages.pcoc.lower`), and each
    of the two models rounds by about ``ρ_k = noise_k · u`` (u the dtype's unit
    roundoff). The budget for the softmax deviation is ``β_k = τ − 2ρ_k``, but at least
    ``τ/2``; T is the smallest temperature with ``A_k e^{−T} ≤ β_k`` for every output,
    ``T = max_k ln(A_k/β_k)`` (``ln(2n/τ)`` when no output depends on a routed value).
    """
    unit = float(np.finfo(DTYPES[dtype]).eps) / 2
    rounding = {name: noise * unit for name, noise in noises.items()}
    needed = []
    for name, leak in leaks.items():
        if leak > 0:
            budget = max(tolerance - 2 * rounding[name], tolerance / 2)
            needed.append(math.log(leak / budget))
    temperature = max(needed) if needed else math.log(2 * n / tolerance)
    temperature = max(temperature, 1.0)
    bounds = {name: leak * math.exp(-temperature) for name, leak in leaks.items()}
    return temperature, bounds, rounding


def compile_pcoc(
    program: Program,
    n: int,
    *,
    mode: str = "hard",
    tolerance: float = 1e-6,
    dtype: str = "float64",
) -> Model:
    """Compile ``program`` for exactly ``n`` machines to a :class:`Model`.

    Machine i is position t = i + 1, BOS (t = 0) is the sink; every position holds the
    token ``m`` and the input slots are numeric input channels (``Model.inputs``, in
    declaration order). The outputs are the program's output slots (rule ``value``).

    - ``mode="hard"``: routing heads with average-hard attention. Exact in real
      arithmetic for n machines, for inputs within their declared bounds and data
      comparisons outside their margins.
    - ``mode="softmax"``: the same heads with softmax attention and scores ×T. The
      temperature comes from the error analysis of :mod:`crasp_compiler.languages.pcoc.lower`:
      a routing head's row puts weight ``≤ n·e^{−T}`` off its source (its n other keys
      score 0, the source 1), so a routed value with range width R over the positions
      (``R ≤ 2B`` for ``|value| ≤ B``, the sink's 0 included) is off by
      ``≤ Δ + n·e^{−T}·R`` where Δ is the error of the slot it reads; linear maps scale
      errors by ``Σ|c|``, min/max/abs/relu/clamp by 1, a comparison with margin m by
      1/m, a conditional ``y + p·(x − y)`` with ``|x − y| ≤ M`` adds ``M·Δp``. Every
      output is thus within ``A·e^{−T}`` of the hard model (A from n, the value
      bounds, the margins and the rounds: every round adds its routing term, and errors
      routed earlier are carried along — the scan ``x = x + left`` of cumsum.pcoc doubles
      the error and the bound of x each round, ``A = nBR·2^R`` for R rounds and inputs
      ``|x| ≤ B``; a data
      conditional multiplies the error of its comparison by M/m); T is the smallest
      temperature making
      ``A·e^{−T}`` at most the tolerance less the estimated ``dtype`` rounding of both
      models (but at least half the tolerance): see :func:`temperature_for`. T, the
      tolerance, the bound and the rounding estimate are recorded in the guarantee, the
      options and the info. Every routed slot needs a bound and every comparison a
      positive margin (:class:`CraspError` otherwise).

    The guarantee covers exactly n machines: ``max_len`` = n, and :func:`run_pcoc`
    rejects inputs of any other length. Data-dependent sends route exactly only to
    integral destinations, distinct among the machines 0..n−1 they name: the guarantee
    says so, records the input slots that are destinations for the runtimes to check
    (``Guarantee.destinations``), and names a send whose destination the program
    computes as the caller's condition (:func:`_send_condition`). ``info`` reports the
    layers and heads next to the simulation theorem's counts (R layers for R rounds, s
    heads for a memory of s words: the slots plus the values received in a round).
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
    if not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance) and tolerance > 0):
        raise CraspError(
            f"the tolerance must be a number > 0, not {tolerance!r}", filename=program.filename
        )
    # the static checks of the reference semantics for n machines (CraspError); the rounds
    # they unroll count the send rounds below
    unrolled = check_pcoc(program, n)
    original = program
    if has_sends(program):
        program = lower_sends(program, n)
    temperature = None
    softmax: dict[str, object] = {}
    if mode == "softmax":
        # the error coefficients do not depend on T: analyse once, then build with T
        analysis = lower_pcoc(program, n, "softmax", temperature=1.0)
        leaks = {name: analysis.slots[name].leak for name in program.outputs}
        noises = {name: analysis.slots[name].noise for name in program.outputs}
        temperature, bounds, rounding = temperature_for(leaks, noises, n, tolerance, dtype)
        if temperature > MAX_TEMPERATURE:
            raise CraspError(
                f"the softmax model would need temperature {temperature:.4g} (> "
                f"{MAX_TEMPERATURE:g}) for tolerance {tolerance:g}; use mode hard, a larger "
                "tolerance, or tighter bounds and margins",
                filename=program.filename,
            )
        softmax = {
            "temperature": temperature,
            "tolerance": tolerance,
            "error_bound": bounds,
            "rounding_estimate": rounding,
            "dtype": dtype,
        }
    lowered = lower_pcoc(program, n, mode, temperature)
    rounds = len(lowered.rounds)
    # the theorem's memory s: the slots plus the values a machine receives in a round
    memory = len(program.slots) + max((r.receives for r in lowered.rounds), default=0)
    # hard mode: Heaviside comparisons at the middle of each margin are exact in a float
    # type whose rounding of left − right stays below it (softmax mode states its rounding
    # estimate against the tolerance instead, in the guarantee's text)
    resolved = {d: _margins_resolved(lowered.comparisons, d) for d in DTYPES}
    if mode == "hard" and resolved["float64"] is not None:
        raise _margin_error(program, resolved["float64"], "float64")
    if mode == "hard":
        estimate = max(_rounding(lowered, program, "float64").values(), default=0.0)
        text = (
            f"exact for n = {n} machines (exactly {n} numbers per input slot) in real "
            "arithmetic, with average-hard attention, for inputs within their declared bounds "
            "and data comparisons outside their margins; estimated float64 rounding of the "
            + (f"outputs {estimate:.3g}" if math.isfinite(estimate) else "outputs not bounded")
        )
    else:
        worst = max(bounds.values(), default=0.0)
        noise = max(rounding.values(), default=0.0)
        text = (
            f"approximate (softmax attention, T = {temperature:.6g}): for n = {n} machines "
            f"every output is within {tolerance:g} of the average-hard model (real-arithmetic "
            f"bound {worst:.3g}, estimated {dtype} rounding {noise:.3g}), for inputs within "
            "their declared bounds and data comparisons outside their margins"
        )
        if 2 * noise > tolerance / 2:
            text += f"; the {dtype} rounding estimate exceeds half the tolerance"
    if mode == "hard" and resolved["float32"] is not None:
        text += "; not float32: a comparison margin is below float32 rounding"
    destinations, condition = _send_condition(original, unrolled, n)
    text += condition
    dtypes = {d: (n if problem is None else -1) for d, problem in resolved.items()}
    bounds = {s.name: s.bound for s in program.slots if s.name in program.inputs}
    model = lowered.builder.build(
        {name: (lowered.slots[name].form, "value") for name in program.outputs},
        guarantee=Guarantee(
            n,
            text,
            dtypes if mode == "hard" else {},
            {name: float(bound) for name, bound in bounds.items() if bound is not None},
            destinations,
        ),
        filename=program.filename,
        options={
            "language": LANGUAGE,
            "n": n,
            "mode": mode,
            "tolerance": tolerance if mode == "softmax" else None,
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
            **(softmax or {"rounding_estimate": _rounding(lowered, program, "float64")}),
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
) -> tuple[list[str], str]:
    """The condition under which the sends of ``program`` route exactly, as the guarantee
    records it: the input slots that are the destinations of a send as they were read
    (no round before it assigns them), which the runtimes check, and the words for the
    guarantee's text (empty without sends). A send whose destination the program
    computes cannot be checked before the routing: the text names it."""
    checked: list[str] = []
    computed: list[str] = []
    assigned: set[str] = set()
    for rnd, _ in rounds:
        for send in rnd.sends:
            if send.dest in program.inputs and send.dest not in assigned:
                checked.append(send.dest)
            else:
                line = f" (line {send.span.line})" if send.span is not None else ""
                computed.append(f"`{send.target} = send {send.slot} to {send.dest}`{line}")
        assigned |= _assigned(rnd.body)
    if not checked and not computed:
        return [], ""
    checked, computed = list(dict.fromkeys(checked)), list(dict.fromkeys(computed))
    text = (
        "; data-dependent sends route exactly only when their destinations are integers, "
        f"distinct among the machines whose destination is in 0..{n - 1} (one outside sends "
        "nothing)"
    )
    if checked:
        names = ", ".join(repr(name) for name in checked)
        text += f", which the runtimes check on input(s) {names} as they check the bounds"
    if computed:
        text += (
            f"; the destinations of {', '.join(computed)} are computed by the program and "
            "cannot be checked before the routing: that they meet this condition is the "
            "caller's to ensure"
        )
    return checked, text


# A data comparison is resolved in a float type when the estimated rounding of
# left − right is at most this fraction of its margin.
MARGIN_FRACTION = 0.25


def _rounding(lowered: Lowered, program: Program, dtype: str) -> dict[str, float]:
    """The estimated rounding of every output of a hard-mode model in ``dtype``."""
    unit = float(np.finfo(DTYPES[dtype]).eps) / 2
    return {name: lowered.slots[name].noise * unit for name in program.outputs}


def _margins_resolved(comparisons: Sequence[Comparison], dtype: str) -> Comparison | None:
    """The comparison whose declared margin is smallest against the estimated rounding of
    ``left − right`` in ``dtype`` (:data:`MARGIN_FRACTION`), or None when every margin is
    wide enough. A margin of 0 (a Heaviside step, exact in real arithmetic) is not
    checked: such a comparison is decided exactly where ``left − right`` is computed
    with the right sign."""
    unit = float(np.finfo(DTYPES[dtype]).eps) / 2
    worst, ratio = None, MARGIN_FRACTION
    for comparison in comparisons:
        if comparison.margin > 0 and comparison.noise * unit / comparison.margin > ratio:
            worst, ratio = comparison, comparison.noise * unit / comparison.margin
    return worst


def _margin_error(program: Program, comparison: Comparison, dtype: str) -> CraspError:
    unit = float(np.finfo(DTYPES[dtype]).eps) / 2
    rounding = comparison.noise * unit
    need = rounding / MARGIN_FRACTION
    return CraspError(
        [
            Diagnostic(
                f"the margin {comparison.margin:g} of this comparison is below what {dtype} "
                f"resolves: left − right (values up to {comparison.magnitude:g}) is computed "
                f"only to within about {rounding:.3g}",
                span_of(comparison.node) or comparison.span,
                f"declare `margin {need:.2g}` or more, or tighter bounds on the values",
            )
        ],
        program.source or None,
        program.filename,
    )


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
    mapping ``slot -> vector`` or, as :func:`~crasp_compiler.languages.pcoc.interpret.interpret_pcoc`
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
        result = run(model, tokens, dtype=dtype, values=matrices, on_overlength=on_beyond)
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
