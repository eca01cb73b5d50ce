"""Feed-forward constructions (Transformer Cookbook, Table 1 and §4; comparators §4.7/§7.1.1).

Each construction is one function returning one :class:`FFNBlock` whose ``exact`` states
when it computes its definition (in real arithmetic):

- linear maps: :func:`identity`, :func:`add`, :func:`subtract`, :func:`scale` (§4.3, §4.5,
  §8.2); in place: :func:`assign` (``name := value``, the f' of §4.2) and :func:`cancel`
  (``name := 0``, cancelling the residual);
- :func:`minimum`, :func:`maximum` (§4.4), their one-unit forms :func:`minimum_one_unit`,
  :func:`maximum_one_unit` (the result is a linear read), and :func:`cpwl`, any continuous
  piecewise-linear function of one input through given knots (§4.1), with the named cases
  :func:`relu`, :func:`absolute`, :func:`clamp` and :func:`clean_bit` (a soft bit made
  exact);
- :func:`multiply`, ``x·y`` approximately, with GELU units (§4.6);
- comparators :func:`gt_zero`, :func:`ge_zero`, :func:`eq_zero` with a fixed tolerance
  (ReLU, §4.7 eqs. 29–31), tolerance 0 (Heaviside units, the "rounding" of §7.1.1) or an
  input-dependent tolerance form ε (eqs. 32–34, outputs scaled by ε) (the layer-norm
  comparison ``1[z > 0]`` is :func:`crasp_compiler.cookbook.layernorm.positive`), and
  :func:`step_ramp`, a centred ReLU ramp exact in floating point on one side;
- :func:`boolean_function`, any Boolean function of m bits by its truth table (§4.8);
- conditionals: :func:`conditional` (§4.9, values in [0, 1]), :func:`conditional_bigm`
  (big-M gating, values in [−M, M]) and :func:`soft_gate` (gating by a bit that is only
  known to lie within 1/4 of {0, 1}).

A residual variable is added to by the block only when it is listed in ``in_place``
(:func:`assign`, :func:`cancel`); every other construction writes a fresh variable.
Our model has a BOS position (t = 0): the constructions here are position-wise, so they
compute the same function there; :func:`boolean_function` can force its output to 0 at
BOS (``nonbos``), and BOS guards for comparisons are a linear term ``−M·bos`` added to
the compared form by the caller.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise, product

from crasp_compiler.cookbook.blocks import (
    EXACT,
    Exactness,
    FFNBlock,
    Form,
    Unit,
    as_form,
    form_add,
    output_name,
    var,
)

# GELU (tanh form): gelu(z) = z/2 · (1 + tanh(A (z + B z³))).
_GELU_A = math.sqrt(2 / math.pi)
_GELU_B = 0.044715
# Its Taylor expansion at 0 is z/2 + z²/√(2π) + C4·z⁴ + O(z⁶) (no cubic term).
_GELU_C4 = _GELU_A * _GELU_B / 2 - _GELU_A**3 / 6
# multiply(): GELU inputs are scaled by λ = MULTIPLY_SCALE / bound unless told otherwise.
MULTIPLY_SCALE = 0.01


# ---------------------------------------------------------------------------- helpers


def _number(name: str, value: float, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, not {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        need = "a finite number > 0" if positive else "a finite number ≥ 0"
        raise ValueError(f"{name} must be {need}, not {value!r}")
    return value


def _block(
    units: list[Unit],
    outputs: dict[str, dict[int, float]],
    exact: Exactness,
    label: str,
    constants: dict[str, float] | None = None,
) -> FFNBlock:
    """An FFN block; a block that needs no unit (a constant) gets one idle unit, so that
    every MLP it is scheduled into has at least one hidden unit."""
    if not units:
        units = [Unit(Form(), 0.0)]
    return FFNBlock(units, outputs, exact, label, constants=dict(constants or {}))


def _g(value: float) -> str:
    """``value`` for exactness texts, rounded to 4 significant digits."""
    return f"{value:.4g}"


def _up(value: float) -> str:
    """``value`` rounded *up* to 2 significant digits (for stated error bounds)."""
    if value == 0:
        return "0"
    exponent = math.floor(math.log10(value)) - 1
    return f"{math.ceil(value / 10**exponent) * 10**exponent:.2g}"


# ---------------------------------------------------------------------------- linear maps


def identity(x: Form, out: str, *, label: str = "") -> FFNBlock:
    """``out = ReLU(x) − ReLU(−x) = x`` (§4.3, eq. 21). Exact; 2 units.

    ``x`` is any linear form, so every linear map of the residual stream into one fresh
    variable is this block (the paper's d-dimensional identity, eq. 22, is d copies)."""
    x = as_form(x)
    return _block(
        [Unit(x, 0.0), Unit(-x, 0.0)], {output_name(out): {0: 1.0, 1: -1.0}}, EXACT, label
    )


def add(x: Form, y: Form, out: str, *, label: str = "") -> FFNBlock:
    """``out = x + y`` (§4.5): :func:`identity` of the form ``x + y``. Exact; 2 units
    (the paper's 4-unit version is one identity pair per input)."""
    return identity(form_add((1, x), (1, y)), out, label=label)


def subtract(x: Form, y: Form, out: str, *, label: str = "") -> FFNBlock:
    """``out = x − y`` (§4.5): :func:`identity` of ``x − y``. Exact; 2 units."""
    return identity(form_add((1, x), (-1, y)), out, label=label)


def scale(x: Form, c: float, out: str, *, label: str = "") -> FFNBlock:
    """``out = c·x`` (§4.6, §8.2): :func:`identity` of ``c·x``. Exact; 2 units."""
    if isinstance(c, bool) or not isinstance(c, numbers.Real) or not math.isfinite(c):
        raise ValueError(f"the factor c must be a finite number, not {c!r}")
    return identity(form_add((float(c), x)), out, label=label)


def assign(name: str, value: Form, *, label: str = "") -> FFNBlock:
    """In place, ``name := value``: adds ``value − name`` to the existing variable
    ``name`` (``in_place={name}``), so that with the residual connection it holds
    ``value`` — the paper's f' with ``f'(x) + x = f(x)`` (§4.2) for ``f = value``.

    Units ``ReLU(value − name)`` and ``ReLU(name − value)`` (out: +1, −1): the paper's
    f' stacks f's units with the pair ``±I`` on ``name``; since f is linear here the two
    identity pairs merge into one. ``value`` may read ``name`` itself (the block sees
    the old value). Exact; 2 units."""
    block = identity(form_add((1, value), (-1, var(name))), output_name(name), label=label)
    block.in_place = frozenset({name})
    return block


def cancel(name: str, *, label: str = "") -> FFNBlock:
    """In place, ``name := 0`` (cancelling the residual, §4.2): :func:`assign` of the
    zero form, i.e. adds ``−ReLU(name) + ReLU(−name)``. Exact; 2 units. (Built directly:
    the assembler makes one per reused dimension, tens of thousands in a large model.)"""
    name = output_name(name)
    units = [Unit(Form({name: -1.0}), 0.0), Unit(Form({name: 1.0}), 0.0)]
    block = FFNBlock(units, {name: {0: 1.0, 1: -1.0}}, EXACT, label)
    block.in_place = frozenset({name})
    return block


# ---------------------------------------------------------------------------- CPWL


def _min_max(x: Form, y: Form, out: str, sign: float, label: str) -> FFNBlock:
    x, y = as_form(x), as_form(y)
    block = identity(x, out, label=label)
    # min(x, y) = x − ReLU(x − y);  max(x, y) = x + ReLU(y − x)
    block.units.append(Unit(form_add((-sign, x), (sign, y)), 0.0))
    block.outputs[out][2] = sign
    return block


def minimum(x: Form, y: Form, out: str, *, label: str = "") -> FFNBlock:
    """``out = min(x, y) = ReLU(x) − ReLU(−x) − ReLU(x − y)`` (§4.4). Exact; 3 units."""
    return _min_max(x, y, out, -1.0, label)


def maximum(x: Form, y: Form, out: str, *, label: str = "") -> FFNBlock:
    """``out = max(x, y) = ReLU(x) − ReLU(−x) + ReLU(y − x)`` (§4.4). Exact; 3 units."""
    return _min_max(x, y, out, 1.0, label)


def cpwl(x: Form, knots: Sequence[tuple[float, float]], out: str, *, label: str = "") -> FFNBlock:
    """``out = f(x)`` for the continuous piecewise-linear f through ``knots`` (§4.1).

    ``knots`` are points ``(x_k, y_k)`` with strictly increasing ``x_k`` (at least 2);
    f interpolates linearly between them and extends the first and last pieces with
    their slopes. With slopes ``m_k`` and slope changes ``s_k = m_k − m_{k−1}`` at the
    *breakpoints* (inner knots where the slope changes, C of them), every breakpoint
    gets one unit with coefficient ``s_k``, facing left (``ReLU(x_k − x)``) or right
    (``ReLU(x − x_k)``), plus a constant:

    - if some piece is flat (slope 0), breakpoints left of it face left and those right
      of it face right, and the constant is f on that piece: **C units**;
    - otherwise the paper's form anchored at the first breakpoint ``x_j``:
      ``f(x) = y_j − m_{j−1}·ReLU(x_j − x) + m_j·ReLU(x − x_j)
      + Σ_{k>j} s_k·ReLU(x − x_k)``: **C + 1 units** (the paper's eq. uses
      ``ReLU(x)`` and ``ReLU(−x)`` for the first slope: one unit more);
    - with no breakpoint f is affine: 2 units (:func:`identity`-like), or none (one idle
      unit) when f is constant.

    Exact for every x. This is a function of one input ``x`` (a linear form, so ridge
    functions ``f(w·v + b)`` of several variables are covered, and sums of them by
    adding outputs). A general CPWL function of d ≥ 2 inputs is not always computable
    by one FFN layer (e.g. ``max(0, u, v)``: the kinks of a one-hidden-layer ReLU
    network lie on whole hyperplanes); the paper refers it to Arora et al. (2018), with
    O(log k) layers, and gives no construction.
    """
    points = [(float(a), float(b)) for a, b in knots]
    if len(points) < 2:
        raise ValueError(f"cpwl needs at least 2 knots, got {len(points)}")
    if not all(math.isfinite(v) for point in points for v in point):
        raise ValueError(f"cpwl knots must be finite numbers: {points}")
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    if any(b <= a for a, b in pairwise(xs)):
        raise ValueError(f"cpwl knots need strictly increasing x: {xs}")
    x = as_form(x)
    out = output_name(out)
    slopes = [(ys[k + 1] - ys[k]) / (xs[k + 1] - xs[k]) for k in range(len(xs) - 1)]
    # breakpoints: (x_k, y_k, slope left, slope right) with a slope change
    breaks = [
        (xs[k], ys[k], slopes[k - 1], slopes[k])
        for k in range(1, len(xs) - 1)
        if slopes[k] != slopes[k - 1]
    ]
    exact = Exactness("exact")
    if not breaks:
        m = slopes[0]
        if m == 0:
            return _block([], {out: {}}, exact, label, {out: ys[0]})
        pair = [Unit(form_add((1, x)), -xs[0]), Unit(form_add((-1, x)), xs[0])]
        return _block(pair, {out: {0: m, 1: -m}}, exact, label, {out: ys[0]})
    piece_slopes = [breaks[0][2]] + [b[3] for b in breaks]  # slope of piece p, p = 0..C
    flat = next((p for p, m in enumerate(piece_slopes) if m == 0), None)
    units: list[Unit] = []
    coefs: dict[int, float] = {}

    def unit(at: float, facing_right: bool, coef: float) -> None:
        """``coef·ReLU(x − at)`` (facing right) or ``coef·ReLU(at − x)`` (facing left)."""
        if coef != 0:
            sign = 1 if facing_right else -1
            coefs[len(units)] = coef
            units.append(Unit(form_add((sign, x)), -sign * at))

    if flat is not None:
        # piece p lies between breakpoints p − 1 and p; f there is the y of either one
        constant = breaks[flat][1] if flat < len(breaks) else breaks[flat - 1][1]
        for p, (at, _, left, right) in enumerate(breaks):
            unit(at, p >= flat, right - left)
    else:
        at, constant, left, right = breaks[0]
        unit(at, False, -left)
        unit(at, True, right)
        for at, _, left, right in breaks[1:]:
            unit(at, True, right - left)
    return _block(units, {out: coefs}, exact, label, {out: constant} if constant else {})


# ReLU, |x| and the soft-bit cleaner as continuous piecewise-linear functions (cpwl knots).
RELU_KNOTS = ((-1.0, 0.0), (0.0, 0.0), (1.0, 1.0))
ABS_KNOTS = ((-1.0, 1.0), (0.0, 0.0), (1.0, 1.0))
CLEAN_KNOTS = ((0.0, 0.0), (0.25, 0.0), (0.75, 1.0), (1.0, 1.0))


def relu(x: Form, out: str, *, label: str = "") -> FFNBlock:
    """``out = ReLU(x)``: :func:`cpwl` through :data:`RELU_KNOTS`. Exact; 1 unit."""
    return cpwl(x, RELU_KNOTS, out, label=label)


def absolute(x: Form, out: str, *, label: str = "") -> FFNBlock:
    """``out = |x| = ReLU(−x) + ReLU(x)``: :func:`cpwl` through :data:`ABS_KNOTS`.
    Exact; 2 units."""
    return cpwl(x, ABS_KNOTS, out, label=label)


def clamp_knots(low: float, high: float) -> tuple[tuple[float, float], ...]:
    """The knots of ``clamp(x, low, high)`` for :func:`cpwl`: the ramp from (low, low) to
    (high, high) with flat pieces of width ``max(1, |bound|)`` on either side (a unit
    step would vanish next to a bound such as 1e300). ValueError when ``low > high`` or a
    flat piece's end overflows float64."""
    low, high = float(low), float(high)
    if not (math.isfinite(low) and math.isfinite(high)) or low > high:
        raise ValueError(f"clamp needs finite bounds low <= high, not {low!r}, {high!r}")
    below, above = low - max(1.0, abs(low)), high + max(1.0, abs(high))
    if not (math.isfinite(below) and math.isfinite(above)):
        raise ValueError(f"clamp(x, {low:g}, {high:g}): the bounds overflow float64")
    if low == high:
        return ((below, low), (above, high))
    return ((below, low), (low, low), (high, high), (above, high))


def clamp(x: Form, low: float, high: float, out: str, *, label: str = "") -> FFNBlock:
    """``out = clamp(x, low, high) = min(max(x, low), high)``: :func:`cpwl` through
    :func:`clamp_knots`, ``low + ReLU(x − low) − ReLU(x − high)``. Exact; 2 units
    (none, a constant, when ``low = high``)."""
    return cpwl(x, clamp_knots(low, high), out, label=label)


def clean_bit(b: Form, out: str, *, label: str = "") -> FFNBlock:
    """A soft bit made exact: ``out = 2·ReLU(b − 1/4) − 2·ReLU(b − 3/4)`` (:func:`cpwl`
    through :data:`CLEAN_KNOTS`) is 0 for ``b ≤ 1/4`` and 1 for ``b ≥ 3/4`` (in [0, 1]
    between), so a bit known to within 1/4 of {0, 1} (a softmax lookup,
    :func:`crasp_compiler.cookbook.attention.soft_offset_lookup`) comes out exactly 0 or 1.
    Exact for b ∉ (1/4, 3/4); 2 units."""
    block = cpwl(b, CLEAN_KNOTS, out, label=label)
    block.exact = Exactness("exact (0 or 1) for b ∉ (1/4, 3/4)")
    return block


def _divided(form: Form, factor: float) -> Form:
    """``form / factor``; integer coefficients that an integer ``factor`` divides stay
    exact integers (Python ints of any size)."""
    if factor == 1:
        return form

    def divide(c: float) -> float:
        whole = isinstance(c, int) or float(c).is_integer()
        if whole and isinstance(factor, int) and int(c) % factor == 0:
            return int(c) // factor
        return c / factor

    return Form({name: divide(c) for name, c in form.items()})


def _min_max_one_unit(
    kind: str, x: Form, y: Form, out: str, factor: float, label: str
) -> tuple[FFNBlock, Form]:
    if isinstance(factor, bool) or not isinstance(factor, numbers.Real) or not factor > 0:
        raise ValueError(f"factor must be a number > 0, not {factor!r}")
    x, y = as_form(x), as_form(y)
    # min: the unit reads (x − y)/g; max: (y − x)/g (the terms of y come first)
    sign = -1 if kind == "min" else 1
    block = relu(_divided(form_add((sign, y), (-sign, x)), factor), out, label=label)
    return block, form_add((1, x), (sign * factor, {output_name(out): 1}))


def minimum_one_unit(
    x: Form, y: Form, out: str, *, factor: float = 1, label: str = ""
) -> tuple[FFNBlock, Form]:
    """``min(x, y) = x − g·ReLU((x − y)/g)`` with one unit: returns the block writing
    ``out = ReLU((x − y)/g)`` and the form ``x − g·out`` of the minimum (a linear read).

    :func:`minimum` writes the minimum itself (3 units); this one needs x to be readable
    where the minimum is (it is a form). ``factor`` g > 0 (default 1) keeps a common
    factor of the coefficients of ``x − y`` out of the weights (the C-RASP compiler
    passes their gcd: ``ReLU(g·z) = g·ReLU(z)``). Exact; 1 unit."""
    return _min_max_one_unit("min", x, y, out, factor, label)


def maximum_one_unit(
    x: Form, y: Form, out: str, *, factor: float = 1, label: str = ""
) -> tuple[FFNBlock, Form]:
    """``max(x, y) = x + g·ReLU((y − x)/g)`` with one unit: returns the block writing
    ``out = ReLU((y − x)/g)`` and the form ``x + g·out`` of the maximum (see
    :func:`minimum_one_unit`). Exact; 1 unit."""
    return _min_max_one_unit("max", x, y, out, factor, label)


# ---------------------------------------------------------------------------- multiply


def multiply_error(bound: float, scale: float) -> float:
    """The error bound of :func:`multiply`: ``max |out − xy|`` over ``|x|, |y| ≤ bound``
    with GELU inputs scaled by ``scale`` (see :func:`multiply` for the derivation)."""
    z = 2 * scale * bound
    a, b = _GELU_A, _GELU_B
    spread = max(a**3 * ((1 + b * z * z) ** 3 - 1) / 6, a**5 * z * z * (1 + b * z * z) ** 5 / 15)
    return math.sqrt(math.pi / 2) * scale**2 * bound**4 * (14 * abs(_GELU_C4) + 18 * spread)


def multiply(
    x: Form, y: Form, out: str, *, bound: float, scale: float | None = None, label: str = ""
) -> FFNBlock:
    """``out ≈ x·y`` for ``|x|, |y| ≤ bound`` with three GELU units (§4.6):

    ``out = √(π/2)/λ² · (gelu(λ(x + y)) − gelu(λx) − gelu(λy))``,

    λ = ``scale`` (default ``0.01/bound``). Our gelu is the tanh form
    ``gelu(z) = z/2·(1 + tanh(a(z + b z³)))``, a = √(2/π), b = 0.044715, whose expansion
    at 0 is ``z/2 + z²/√(2π) + c₄z⁴ + …`` with **no cubic term** (gelu(z) − z/2 is
    even), c₄ = ab/2 − a³/6 ≈ −0.0668. The linear terms cancel, the quadratic ones give
    ``xy``. Writing ``gelu(z) = z/2 + z²/√(2π) + z⁴ρ(z)``, the bounds
    ``u − u³/3 ≤ tanh u ≤ u − u³/3 + 2u⁵/15`` (u ≥ 0) give, for ``|z| ≤ Z``,
    ``|ρ(z) − c₄| ≤ Δ(Z) = max(a³((1 + bZ²)³ − 1)/6, a⁵Z²(1 + bZ²)⁵/15)``. With
    ``|(x+y)⁴ − x⁴ − y⁴| ≤ 14B⁴`` and ``(x+y)⁴ + x⁴ + y⁴ ≤ 18B⁴`` on the box:

    ``|out − xy| ≤ √(π/2)·λ²B⁴·(14|c₄| + 18Δ(2λB))`` (:func:`multiply_error`),

    attained at x = y = ±B up to a factor 1.0003 with the default λ, where it is about
    ``1.17e-4·B²``: a choice that keeps float32 rounding (which grows like 1/λ) below
    the bound. Pass a smaller ``scale`` in float64 (λ = 1e-3/B: about 1.2e-6·B²).

    The paper's bound ``|ε| ≤ (|x| + |y|)³/4`` (λ = 1) misses that the cubic term
    vanishes (the error is O(λ²), not O(λ)), and its constant does not follow from
    ``|R(z)| ≤ |z|³/6``: at x = y that gives ``√(π/2)·10/48·(|x|+|y|)³ ≈ 0.261(|x|+|y|)³``.
    """
    bound = _number("bound", bound, positive=True)
    lam = MULTIPLY_SCALE / bound if scale is None else _number("scale", scale, positive=True)
    error = multiply_error(bound, lam)
    x, y = as_form(x), as_form(y)
    units = [
        Unit(form_add((lam, x), (lam, y)), 0.0, "gelu"),
        Unit(form_add((lam, x)), 0.0, "gelu"),
        Unit(form_add((lam, y)), 0.0, "gelu"),
    ]
    c = math.sqrt(math.pi / 2) / lam**2
    text = f"approximate: |out − xy| ≤ {_up(error)} for |x|, |y| ≤ {_g(bound)} (GELU)"
    return _block(
        units, {output_name(out): {0: c, 1: -c, 2: -c}}, Exactness(text, error=error), label
    )


# ---------------------------------------------------------------------------- comparators


def _comparator(
    kind: str, x: Form, out: str, tolerance: float | Mapping[str, float], label: str
) -> FFNBlock:
    x, out = as_form(x), output_name(out)
    # unit offsets and output coefficients of the paper's ReLU constructions (eqs. 29–34):
    # out·δ = Σ coef · ReLU(x + offset·δ)
    relu = {
        "gt": [(0, 1.0), (-1, -1.0)],
        "ge": [(1, 1.0), (0, -1.0)],
        "eq": [(1, 1.0), (0, -2.0), (-1, 1.0)],
    }[kind]
    what = {"gt": "1[x > 0]", "ge": "1[x ≥ 0]", "eq": "1[x = 0]"}[kind]
    if isinstance(tolerance, Mapping):
        eps = as_form(tolerance)
        if not eps:
            raise ValueError("the tolerance form is zero; use tolerance=0.0 for Heaviside units")
        units = [Unit(form_add((1, x), (offset, eps)), 0.0) for offset, _ in relu]
        band = {"gt": "x ∉ (0, ε)", "ge": "x ∉ (−ε, 0)", "eq": "x = 0 or |x| ≥ ε"}[kind]
        text = f"exact: out = ε·{what} (ε = tolerance form ≥ 0) when {band}"
        return _block(units, {out: {k: c for k, (_, c) in enumerate(relu)}}, Exactness(text), label)
    delta = _number("tolerance", tolerance)
    if delta == 0:
        # Heaviside H(z) = 1[z ≥ 0]: 1[x > 0] = 1 − H(−x), 1[x = 0] = H(x) + H(−x) − 1
        signs, constant = {"gt": ([-1.0], 1.0), "ge": ([1.0], 0.0), "eq": ([1.0, -1.0], -1.0)}[kind]
        units = [Unit(form_add((s, x)), 0.0, "heaviside") for s in signs]
        coefs = {k: (-1.0 if kind == "gt" else 1.0) for k in range(len(units))}
        const = {out: constant} if constant else {}
        return _block(units, {out: coefs}, Exactness("exact (Heaviside units)"), label, const)
    # the paper's weights with the 1/δ moved from W2 into W1: out = Σ coef·ReLU(x/δ + offset)
    units = [Unit(form_add((1 / delta, x)), float(offset)) for offset, _ in relu]
    coefs = {k: c for k, (_, c) in enumerate(relu)}
    band = {
        "gt": f"x ≤ 0 or x ≥ {_g(delta)}",
        "ge": f"x ≥ 0 or x ≤ −{_g(delta)}",
        "eq": f"x = 0 or |x| ≥ {_g(delta)}",
    }[kind]
    return _block(units, {out: coefs}, Exactness(f"exact when {band}"), label)


def gt_zero(x: Form, out: str, *, tolerance: float | Form, label: str = "") -> FFNBlock:
    """``out = 1[x > 0]`` (§4.7).

    - ``tolerance`` δ > 0 (eq. 29): ``(ReLU(x) − ReLU(x − δ))/δ``, which is
      ``clamp(x/δ, 0, 1)``: exact when ``x ≤ 0`` or ``x ≥ δ``, in [0, 1] between. 2 units.
      (As in all fixed-tolerance comparators the factor 1/δ sits in W1, not in W2:
      ``ReLU(x/δ) − ReLU(x/δ − 1)``.)
    - ``tolerance=0``: ``1 − H(−x)`` with a Heaviside unit: exact for every x. 1 unit.
    - ``tolerance`` a form ε (input-dependent, e.g. ``1/(2(t+1))``; eq. 32):
      ``ReLU(x) − ReLU(x − ε) = ε·1[x > 0]`` when ``x ≤ 0`` or ``x ≥ ε`` (ε ≥ 0), and in
      ``[0, ε]`` between. The output is scaled by ε: dividing by an input-dependent ε
      is not CPWL, so no ReLU FFN outputs ``1[x > 0]`` itself (§7.1.1 gets it by
      rounding values below ε to 0; Heaviside units are that rounding). 2 units.
    """
    return _comparator("gt", x, out, tolerance, label)


def ge_zero(x: Form, out: str, *, tolerance: float | Form, label: str = "") -> FFNBlock:
    """``out = 1[x ≥ 0]`` (§4.7).

    - ``tolerance`` δ > 0 (eq. 30): ``(ReLU(x + δ) − ReLU(x))/δ = clamp(1 + x/δ, 0, 1)``:
      exact when ``x ≥ 0`` or ``x ≤ −δ``. 2 units.
    - ``tolerance=0``: ``H(x)``, one Heaviside unit: exact for every x.
    - ``tolerance`` a form ε (eq. 33): ``ReLU(x + ε) − ReLU(x) = ε·1[x ≥ 0]`` when
      ``x ≥ 0`` or ``x ≤ −ε`` (ε ≥ 0), in ``[0, ε]`` between (see :func:`gt_zero`). 2 units.
    """
    return _comparator("ge", x, out, tolerance, label)


def step_ramp(
    x: Form,
    out: str,
    *,
    width: float,
    exact_at: int = 0,
    hold: Form | None = None,
    hold_bias: float = 0.0,
    label: str = "",
) -> FFNBlock:
    """``out = 1[x ≥ 0]`` for ``x ∉ (−w, w)`` (w = ``width``): the ramp
    ``clamp(y, 0, 1)``, ``y = x/(2w) + 1/2``, centred on 0 so that both sides keep a
    slack of ``1/2 − w`` against a margin of 1/2, written so that one side is *exact in
    floating point* (no unit is active there):

    - ``exact_at=0``: ``ReLU(y) − ReLU(y − 1)``: both units off for ``x ≤ −w``;
    - ``exact_at=1``: ``h − ReLU(1 − y) + ReLU(−y)`` with ``h = ReLU(hold + hold_bias)``
      (a {0,1} unit, e.g. ``nonbos``, or an and of guards): both ramp units off for
      ``x ≥ w``, where out is h; for ``x ≤ −w`` it is ``h − 1`` (so 0 where h = 1).

    On the other side the units are active and their difference is 1 (or 0) up to their
    own rounding: an error in x cancels between them. Exact for x ∉ (−w, w); 2 units (3).
    """
    w = _number("width", width, positive=True)
    x = as_form(x)
    slope = 1 / (2 * w)
    if exact_at == 0:
        units = [Unit(form_add((slope, x)), 0.5), Unit(form_add((slope, x)), -0.5)]
        coefs = {0: 1.0, 1: -1.0}
    elif exact_at == 1:
        if hold is None:
            raise ValueError("step_ramp(exact_at=1) needs the form of its hold unit")
        units = [
            Unit(as_form(hold), float(hold_bias)),
            Unit(form_add((-slope, x)), 0.5),
            Unit(form_add((-slope, x)), -0.5),
        ]
        coefs = {0: 1.0, 1: -1.0, 2: 1.0}
    else:
        raise ValueError(f"exact_at must be 0 or 1, not {exact_at!r}")
    side = "x ≤ −w" if exact_at == 0 else "x ≥ w"
    text = f"exact when |x| ≥ w = {_g(w)} (no unit active for {side})"
    return _block(units, {output_name(out): coefs}, Exactness(text), label)


def eq_zero(x: Form, out: str, *, tolerance: float | Form, label: str = "") -> FFNBlock:
    """``out = 1[x = 0]`` (§4.7).

    - ``tolerance`` δ > 0 (eq. 31): ``(ReLU(x + δ) − 2ReLU(x) + ReLU(x − δ))/δ
      = max(0, 1 − |x|/δ)``: exact when ``x = 0`` or ``|x| ≥ δ``. 3 units.
    - ``tolerance=0``: ``H(x) + H(−x) − 1``, two Heaviside units: exact for every x.
    - ``tolerance`` a form ε (eq. 34): ``ReLU(x + ε) − 2ReLU(x) + ReLU(x − ε)
      = ε·1[x = 0]`` when ``x = 0`` or ``|x| ≥ ε`` (ε ≥ 0), in ``[0, ε]`` between. 3 units.
    """
    return _comparator("eq", x, out, tolerance, label)


# ---------------------------------------------------------------------------- Booleans


def boolean_function(
    inputs: Sequence[Form],
    table: Callable[[tuple[bool, ...]], bool],
    out: str,
    *,
    nonbos: str | None = None,
    complement: bool | None = None,
    label: str = "",
) -> FFNBlock:
    """Any Boolean function φ of m {0,1} inputs, by its truth table (§4.8, eq. 35).

    Row ``a ∈ {0,1}^m`` gets the unit ``ReLU(2(2a − 1)·x − 2|a| + 1)``, which is
    ``1[x = a]`` for {0,1} inputs: 1 at ``x = a`` and ``1 − 2k ≤ −1`` for an x that
    differs from a in k ≥ 1 bits (the paper's ``ReLU((2a − 1)·x − |a| + 1)`` with its
    argument doubled, so that inputs slightly off {0,1} — rounding — leave the other rows
    at 0); rows are exclusive, so ``φ(x) = Σ_{φ(a)} 1[x = a]`` (the paper lists all 2^m
    rows with output weights φ(a); rows with weight 0 are dropped) — or
    ``1 − Σ_{¬φ(a)} 1[x = a]`` (the *complement*) when φ has more true rows than false
    ones, or when ``complement`` says so. With ``nonbos`` the first form has no unit
    active where φ is 0 and the complement none where φ is 1, so that side is exact in
    floating point whatever the rounding of the inputs.
    Size: ``min(#true rows, #false rows)`` units (+1 below), or the rows ``complement``
    picks.

    With ``nonbos`` (a variable that is 1 at tokens and 0 at BOS), the constant 1 in every
    unit and in the complement is ``nonbos`` (the complement's ``nonbos`` takes one more
    unit): at BOS every unit is ≤ 0, so the output is 0 there whatever the {0,1} inputs.
    Exact for {0,1} inputs.
    """
    inputs = [as_form(x) for x in inputs]
    rows = list(product((False, True), repeat=len(inputs)))
    true_rows = [row for row in rows if table(row)]
    if complement is None:
        complement = len(true_rows) > len(rows) // 2
    chosen = [row for row in rows if bool(table(row)) != complement]
    one = {nonbos: 1.0} if nonbos is not None else {}
    units: list[Unit] = []
    coefs: dict[int, float] = {}
    for k, row in enumerate(chosen):
        terms = [(2 if bit else -2, x) for bit, x in zip(row, inputs, strict=True)]
        bias = -2.0 * sum(row) + (0.0 if nonbos is not None else 1.0)
        units.append(Unit(form_add(*terms, (1, one)), bias))
        coefs[k] = -1.0 if complement else 1.0
    constants: dict[str, float] = {}
    if complement:
        if nonbos is not None:
            coefs[len(units)] = 1.0
            units.append(Unit(one, 0.0))
        else:
            constants[output_name(out)] = 1.0
    text = "exact for {0,1} inputs" + (" (0 at BOS)" if nonbos is not None else "")
    return _block(units, {output_name(out): coefs}, Exactness(text), label, constants)


# ---------------------------------------------------------------------------- conditionals


def all_of(
    inputs: Sequence[Form],
    out: str,
    *,
    nonbos: str | None = None,
    exact_at: int = 0,
    label: str = "",
) -> FFNBlock:
    """The n-ary AND of k {0,1} inputs. ``exact_at=0``: one unit ``ReLU(2Σx − 2k + 1)``,
    which is 1 when every input is 1 and ``≤ −1`` before the ReLU otherwise (a slack of 1
    for inputs slightly off {0,1}, as in :func:`boolean_function`), so no unit is active
    where the AND is 0. ``exact_at=1``: ``1 − ReLU(2k − 1 − 2Σx) + ReLU(2k − 2 − 2Σx)``
    (with f inputs at 0: ``1 − (2f − 1) + (2f − 2) = 0`` for f ≥ 1), no unit active where
    it is 1. With ``nonbos`` every constant 1 is ``nonbos``, so the output is 0 at BOS
    whatever the {0,1} inputs there. Exact for {0,1} inputs; 1 unit (3), linear in k (a
    truth table has ``2^(k−1)`` rows)."""
    inputs = [as_form(x) for x in inputs]
    if not inputs:
        raise ValueError("all_of needs at least one input")
    k = len(inputs)
    text = "exact for {0,1} inputs" + (" (0 at BOS)" if nonbos is not None else "")
    if exact_at == 1:
        return _clamped([(-2, x) for x in inputs], 2 * k - 1, out, nonbos, text, label)
    one = {nonbos: 1.0} if nonbos is not None else {}
    form = form_add(*((2, x) for x in inputs), (1, one))
    bias = -2.0 * k + (0.0 if nonbos is not None else 1.0)
    return _block([Unit(form, bias)], {output_name(out): {0: 1.0}}, Exactness(text), label)


def any_of(
    inputs: Sequence[Form],
    out: str,
    *,
    nonbos: str | None = None,
    exact_at: int = 1,
    label: str = "",
) -> FFNBlock:
    """The n-ary OR of k {0,1} inputs. ``exact_at=1``: ``1 − ReLU(1 − 2Σx)`` (1 when some
    input is 1, the unit's argument then ``≤ −1``), no unit active where the OR is 1.
    ``exact_at=0``: ``ReLU(2Σx − 1) − ReLU(2Σx − 2)`` (``(2f − 1) − (2f − 2) = 1`` for f ≥ 1
    inputs at 1), no unit active where it is 0. With ``nonbos`` for the constant 1 the
    output is 0 at BOS whatever the {0,1} inputs there. Exact for {0,1} inputs; 1 unit (+1
    for the constant ``nonbos``), or 2."""
    inputs = [as_form(x) for x in inputs]
    if not inputs:
        raise ValueError("any_of needs at least one input")
    text = "exact for {0,1} inputs" + (" (0 at BOS)" if nonbos is not None else "")
    one = {nonbos: 1.0} if nonbos is not None else {}
    if exact_at == 0:
        units = [
            Unit(form_add(*((2, x) for x in inputs), (-1, one)), 0.0 if one else -1.0),
            Unit(form_add(*((2, x) for x in inputs), (-2, one)), 0.0 if one else -2.0),
        ]
        return _block(units, {output_name(out): {0: 1.0, 1: -1.0}}, Exactness(text), label)
    return _clamped([(-2, x) for x in inputs], 1, out, nonbos, text, label, pair=False)


def _clamped(
    terms: list[tuple[float, Form]],
    top: int,
    out: str,
    nonbos: str | None,
    text: str,
    label: str,
    pair: bool = True,
) -> FFNBlock:
    """``1 − ReLU(Σ terms + top) + ReLU(Σ terms + top − 1)`` (the second unit only with
    ``pair``), every constant 1 as ``nonbos`` where given: 1 where ``Σ terms + top ≤ 0``,
    with no unit active."""
    one = {nonbos: 1.0} if nonbos is not None else {}
    units: list[Unit] = []
    coefs: dict[int, float] = {}
    constants: dict[str, float] = {}
    for k, shift in enumerate((top, top - 1) if pair else (top,)):
        form = form_add(*terms, (shift, one))
        coefs[len(units)] = -1.0 if k == 0 else 1.0
        units.append(Unit(form, 0.0 if one else float(shift)))
    if one:
        coefs[len(units)] = 1.0
        units.append(Unit(one, 0.0))
    else:
        constants[output_name(out)] = 1.0
    return _block(units, {output_name(out): coefs}, Exactness(text), label, constants)


def conditional(p: Form, x: Form, y: Form, out: str, *, label: str = "") -> FFNBlock:
    """``out = x if p = 1 else y`` (§4.9): ``ReLU(x + p − 1) + ReLU(y − p)``.

    For p = 1 this is ``ReLU(x) + ReLU(y − 1) = x``, for p = 0 ``ReLU(x − 1) + ReLU(y) = y``.
    Exact for p ∈ {0, 1} and x, y ∈ [0, 1]; 2 units."""
    p, x, y = as_form(p), as_form(x), as_form(y)
    units = [Unit(form_add((1, x), (1, p)), -1.0), Unit(form_add((1, y), (-1, p)), 0.0)]
    return _block(
        units,
        {output_name(out): {0: 1.0, 1: 1.0}},
        Exactness("exact for p ∈ {0, 1} and x, y ∈ [0, 1]"),
        label,
    )


def conditional_bigm(
    p: Form, x: Form, y: Form, out: str, *, bound: float, label: str = ""
) -> FFNBlock:
    """``out = x if p = 1 else y`` for ``|x|, |y| ≤ M`` (M = ``bound``) by big-M gating:

    ``ReLU(x + Mp − M) − ReLU(−x + Mp − M) + ReLU(y − Mp) − ReLU(−y − Mp)``.

    For p = 1 the x pair is ``ReLU(x) − ReLU(−x) = x`` and the y pair is 0 (``|y| ≤ M``);
    for p = 0 the other way round. A branch that is the zero form gets no units, so
    ``conditional_bigm(p, x, Form(), …) = p·x`` is 2 units. Exact for p ∈ {0, 1} and
    ``|x|, |y| ≤ M``; 4 units."""
    m = _number("bound", bound)
    units: list[Unit] = []
    if any(x.values()):  # the unit forms drop zero coefficients themselves
        units += gate_units(p, x, m)
    if any(y.values()):
        units += [Unit(form_add((1, y), (-m, p)), 0.0), Unit(form_add((-1, y), (-m, p)), 0.0)]
    coefs = {k: (1.0 if k % 2 == 0 else -1.0) for k in range(len(units))}
    text = f"exact for p ∈ {{0, 1}} and |x|, |y| ≤ {_g(m)}"
    return _block(units, {output_name(out): coefs}, Exactness(text), label)


def gate_units(p: Form, x: Form, m: float) -> list[Unit]:
    """The pair ``ReLU(x + Mp − M)``, ``ReLU(−x + Mp − M)`` of :func:`conditional_bigm`,
    whose difference (out: +1, −1) is ``p·x`` for p ∈ {0, 1} and ``|x| ≤ M``: several
    pairs with their outputs summed into one variable are a sum of gated values."""
    return [Unit(form_add((1, x), (m, p)), -m), Unit(form_add((-1, x), (m, p)), -m)]


def soft_gate(p: Form, x: Form, out: str, *, bound: float, label: str = "") -> FFNBlock:
    """``out = x`` where ``p ≥ 3/4`` and ``0`` where ``p ≤ 1/4``, for ``0 ≤ x ≤ B``
    (B = ``bound``): ``ReLU(x + K(p − 3/4)) − ReLU(K(p − 3/4))`` with K = 2B.

    For p ≥ 3/4 both arguments are ≥ 0 and the difference is x; for p ≤ 1/4,
    ``K(p − 3/4) ≤ −B`` makes both 0. Gates by a *soft* bit (e.g. a softmax lookup of a
    {0,1} value, :func:`crasp_compiler.cookbook.attention.soft_offset_lookup`) in one
    layer. Exact for p ∉ (1/4, 3/4) and 0 ≤ x ≤ B; 2 units."""
    k = 2.0 * _number("bound", bound)
    gap = form_add((k, p))
    units = [Unit(form_add((1, x), (1, gap)), -0.75 * k), Unit(gap, -0.75 * k)]
    return _block(
        units,
        {output_name(out): {0: 1.0, 1: -1.0}},
        Exactness(f"exact for p ∉ (1/4, 3/4), 0 ≤ x ≤ {_g(bound)}"),
        label,
    )
