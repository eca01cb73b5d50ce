"""Rounding analysis of compiled PCOC models: a proven bound on every output's float error.

A compiled PCOC model is exact in real arithmetic (hard mode) or within ``A·e^{−T}`` of
that (softmax mode). Run in floating point every matrix product rounds; this module and
the rules the lowering (:mod:`crasp_compiler.languages.pcoc.lower`) applies with it bound
how far each output can then be from the interpreter's, per float type, so that the
compiler records only what it proves (``Guarantee.dtypes``, ``Guarantee.errors``).

**What is bounded.** The *reference* of a value is its value in real arithmetic, in the
average-hard model, with every data comparison decided as the interpreter
(:func:`~crasp_compiler.languages.pcoc.interpret.interpret_program`, float64) decides it.
Each value carries three bounds, at every position (the sink, BOS, included):

- ``err[d]``: ``|computed − reference|`` when the model runs in float type d, for the
  value's form ``Σ c·x̃`` evaluated exactly on the computed variables x̃ (the rounding of
  evaluating the form itself is added where a block reads it, :meth:`Floats.read`);
- ``ref``: ``|interpreter − reference|`` (the interpreter's own float64 rounding);
- ``leak`` (softmax): ``|softmax model − average-hard model| ≤ leak·e^{−T}`` in real
  arithmetic.

An output read from form f is then within ``E_d = err[d] + read_d(f) + ref (+ leak·e^{−T})``
of the interpreter's output, for inputs within their declared bounds on which every data
comparison stays outside its margin (the interpreter's ``check_promises``; it checks the
exclusive selections of a send's routing too, which distinct destinations ensure).

**Rounding model** (u = 2^-53 in float64, 2^-24 in float32; p = 53 or 24 bits; γ_k =
k·u/(1 − k·u)):

- IEEE arithmetic with round to nearest: ``fl(a ∘ b) = (a ∘ b)(1 + δ)``, ``|δ| ≤ u``, plus
  an absolute ``η`` (half the smallest subnormal) where a product underflows; a result
  that is a float is computed exactly;
- a matrix product computes each entry as a sum of its products in some order (BLAS,
  sparse, FMA or not): for K terms that are nonzero at a position, each rounding at most
  π_max times (its product, unless the coefficient is a power of two or the variable an
  exact multiple of ``2^g`` whose product fits the significand; in float32 also the
  cast of a coefficient float32 cannot hold),
  ``|fl(Σ c_k x̃_k) − Σ c_k x̃_k| ≤ γ_{K−1+π_max}·Σ|c_k x̃_k| + K·η``;
  exact zero terms (a one-hot feature away from its position, a variable outside its
  support) add nothing; a sum whose terms are all integer multiples of ``2^g`` with
  ``Σ|c_k x̃_k| < 2^{p+g}`` is exact (every partial sum is a float); one nonzero term is
  exact when its product is;
- a bias is added after the product (:func:`~crasp_compiler.runtime.forward.mlp_hidden`):
  one more term; the residual stream adds every block's output to a dimension holding 0
  (a fresh one, or one cancelled exactly), so it adds no rounding;
- the inputs are float64 numbers; a float32 run rounds them once (``u·|x|``);
- average-hard routing heads (:func:`~crasp_compiler.cookbook.attention.route`): queries
  and keys are exact one-hot features, so every score is exactly 0 or 1 (× the scale),
  the source is the only key within the tie tolerance (``hard_tolerance``: 1e-9 or 1e-4,
  against a gap of 1) and gets weight exactly 1, the others exactly 0: the head copies its
  value form's computed value at the source exactly;
- softmax routing heads (the chunked path: scores ``T̃·{0, 1}`` exact, ``T̃`` the scale in
  the float type): ``exp`` within 4 ulp (relative ``8u``) of ``e^x`` and exactly 1 at 0
  (numpy's and torch's are within a few ulp), so with the sum of the n + 1 weights and
  the division every weight is ``α_s(1 + θ_s)`` with ``|θ_s| ≤ θ = γ_{n+12}``,
  and the weighted sum of n + 1 values adds ``γ_{n+1}·Σ α̃_s|ṽ_s|``.

**Rules** (the lowering states each at its construction; E is a value's ``err[d]``, r the
rounding of a unit's pre-activation from :meth:`Floats.read`, r_out that of its output sum):

- linear forms: ``E(Σ c_i v_i) = Σ|c_i| E(v_i)``, no rounding until a block reads them;
- a ReLU unit is 1-Lipschitz: a block ``Σ_u a_u ReLU(pre_u) + b`` computing ``f(X)`` of
  its input forms X is off by ``L·E_X + Σ_u |a_u| r_u + r_out`` (L the Lipschitz constant
  of f: ``abs``, ``relu``, ``clamp``); an identity pair ``ReLU(X) − ReLU(−X)`` only by
  ``max(r_1, r_2)`` (where both fire, ``|X| ≤ max(r_1, r_2)``); so ``min``/``max`` are
  off by ``max(E_x, E_y) + max(r_1, r_2) + r_3 + r_out``;
- a block whose inputs are all exact, on known grids, whose every pre-activation and
  output sum is an exact sum (above), is exact: integer keys, ranks, bits and flags stay
  exact however long the program runs;
- a Heaviside comparison at the middle of its margin m (hard mode; its threshold is
  ``m/2`` times the constant 1, so BOS, where every value is 0, keeps the slack too)
  outputs exactly 0 or 1 when ``E_d + r + ref_d < m/2`` (strictly): the computed ``d``
  keeps the side of the threshold the interpreter's value keeps by m. Error does not pass
  through it. A comparison with margin 0 is exact only where ``d`` is computed exactly;
- a softmax comparison is a ReLU ramp from ``m/4`` to ``3m/4`` (for ``==``: two of them):
  it outputs exactly 0 below and ``1 ± Σ_u r_u`` above while ``E_d + ref_d +
  leak_d·e^{−T} < m/4 − (m/2)·max_u r_u``. Before a big-M gate reads it (which would
  multiply that by M) it may be made exact by ``2·ReLU(p − 1/4) − 2·ReLU(p − 3/4)``,
  off by its own rounding only (one layer more; the compiler does so where the tolerance
  needs it);
- a big-M gate ``ReLU(z + M'p − M') − ReLU(−z + M'p − M')`` with ``M' = M(1 + 2^-6)``
  (M bounds |z|) on a bit p: where ``p = 1`` it is z off by ``E_z + max(r_1, r_2) +
  M'·E_p``; where ``p = 0`` both units are exactly 0 while ``E_z + ref_z + r < M' − M``
  (*robust*; else off by ``E_z + r``); so a selection ``y + p(x − y)`` is off by
  ``max(E_x, E_y) + max(r_1, r_2) + r_out``; a per-machine selection (p a positional
  0/1) by the error of the candidate each machine takes plus its gate's rounding, each
  gate exactly 0 off its machines (its support); a sum of selections by the sum of the
  selected ones' errors, or by the largest where their conditions are exclusive (a
  routing entry of :mod:`~crasp_compiler.languages.pcoc.benes`, a promise the
  interpreter checks), whose output sum then has one nonzero pair: ``γ_1`` of it;
- a ``min``/``max`` inside a per-machine branch, ``x ∓ ReLU(±(x − y) − K·1[i ∉ S])`` with
  ``K = 2|x − y| + 1``: inside S it is the ``min``/``max`` above; outside, its unit is
  exactly 0 (its support is S) while ``E_x + E_y + r < K/2 + 1``;
- a routing head (hard) copies: ``E = E_v + read(v)``; softmax: ``(1 + θ)(E_v + read(v))
  + (θ + γ_{n+1}(1 + θ))·V`` (V the largest value it averages), and the leak
  ``leak_v + n·R`` (R the width of the values' range, the sink's 0 included);
- the sink: a value's form is ``var − c·bos`` with c the variable's value at BOS as the
  compiler computes it in float64; the reference takes that c, so at BOS a block is off by
  its rule plus the difference between c and the block's exact value on the BOS values
  (known numbers: computed in rational arithmetic, :func:`bos_defect`; usually 0);
- the interpreter: ``+``, ``−`` and ``c·`` round once each (``u64·|result|``; exact for
  ``c = ±2^k``, for a term that is 0, and for exact values on a grid whose sums stay
  below ``2^(53 + grid)``); ``min``, ``max``, ``abs``, ``relu``, ``clamp``, selections
  and receives are exact on its own values, and it decides comparisons exactly on them.

Magnitudes: a variable's computed magnitude is its reference bound (the value's interval,
derived from the input bounds, which the runtimes check; the reference within ``ref`` of
it) plus its errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import TypeVar

import numpy as np

from crasp_compiler.cookbook.blocks import FFNBlock
from crasp_compiler.model.features import onehot

# The float types analysed, in this order in every Pair.
DTYPES = ("float64", "float32")
UNIT = (2.0**-53, 2.0**-24)
BITS = (53, 24)
# The largest float32: a float32 run of a larger input overflows.
FLOAT32_MAX = float(np.finfo(np.float32).max)
# Half the smallest subnormal: the absolute error of an underflowing product.
TINY = (2.0**-1075, 2.0**-150)
# Relative error of one softmax weight beyond its sum, in units of u: exp within 4 ulp
# (8u; numpy's SIMD float32 exp is documented within about 2.5 ulp), the division, slack.
SOFTMAX_WEIGHT_ROUNDINGS = 12
# The slack a big-M gate's M' keeps above the bound M of its input: M' = M(1 + 2^-6).
GATE_SLACK = 2.0**-6

T = TypeVar("T")
Pair = tuple[float, float]
ZERO: Pair = (0.0, 0.0)
BOTH = (True, True)


def gamma(k: float, d: int) -> float:
    """γ_k = k·u/(1 − k·u) for float type number d (inf when k·u ≥ 1)."""
    if k <= 0:
        return 0.0
    ku = k * UNIT[d]
    return math.inf if ku >= 1 else ku / (1 - ku)


def pair(f: Callable[[int], T]) -> tuple[T, T]:
    """``(f(0), f(1))``: a quantity per float type."""
    return (f(0), f(1))


def padd(*items: Pair) -> Pair:
    return (sum(a for a, _ in items), sum(b for _, b in items))


def pmax(*items: Pair) -> Pair:
    return (max((a for a, _ in items), default=0.0), max((b for _, b in items), default=0.0))


def pscale(c: float, a: Pair) -> Pair:
    return (times(c, a[0]), times(c, a[1]))


def psub(a: Pair, b: Pair) -> Pair:
    """``a − b`` for a bound a that b is part of: infinite where a is (not ∞ − ∞)."""
    return (_minus(a[0], b[0]), _minus(a[1], b[1]))


def _minus(a: float, b: float) -> float:
    return math.inf if math.isinf(a) else a - b


def times(a: float, b: float) -> float:
    """``a·b`` with ``∞·0 = 0`` (an infinite bound times nothing)."""
    return 0.0 if a == 0 or b == 0 else a * b


@lru_cache(maxsize=1 << 16)
def grid(value: float) -> int | None:
    """The exponent g of the lowest set bit of a float64 number (``value = m·2^g``, m an
    odd integer); None for 0 (a multiple of every power of two)."""
    if value == 0 or not math.isfinite(value):
        return None
    numerator, denominator = abs(float(value)).as_integer_ratio()
    return (numerator & -numerator).bit_length() - denominator.bit_length()


@lru_cache(maxsize=1 << 16)
def representable(value: float, d: int) -> bool:
    """Whether float type d holds ``value`` (a float64 number) exactly."""
    if d == 0:
        return True
    return abs(value) <= FLOAT32_MAX and float(np.float32(value)) == value


@lru_cache(maxsize=1 << 16)
def _power_of_two(value: float) -> bool:
    return value != 0 and math.isfinite(value) and math.frexp(abs(value))[0] == 0.5


def _grid_min(*grids: int | None) -> int | None:
    """The common grid of terms (None: some term has no known grid)."""
    known = [g for g in grids if g is not None]
    return min(known) if known else 0


@dataclass
class Var:
    """A residual variable as the model computes it, per float type: ``mag`` bounds its
    computed value at the machines (outside ``support``, when given, it is exactly 0),
    ``bos`` at BOS; ``exact[d]``: the computed value is the reference at every position;
    ``grid``: the reference is an integer multiple of ``2^grid`` (None: unknown); a
    ``feature`` (``"bos"``, ``"machines"`` or a position) is an exact positional 0/1."""

    mag: Pair
    bos: Pair
    exact: tuple[bool, bool] = (False, False)
    grid: int | None = None
    support: frozenset[int] | None = None
    feature: str | int | None = None


@dataclass(frozen=True)
class Reading:
    """A form (plus bias) as one matrix row computes it, per float type: the rounding of
    the dot product against its exact value on the computed variables; whether it is
    computed exactly on exact variables (so it is the reference); the grid of the
    reference (None: unknown); bounds on the computed value at the machines and at BOS."""

    rounding: Pair
    exact: tuple[bool, bool]
    grid: int | None
    mag: Pair
    bos: Pair


class Floats:
    """The variables of one lowering as the model computes them (:class:`Var`), and the
    rounding of a matrix row that reads them (:meth:`read`). ``n`` machines."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.vars: dict[str, Var] = {}

    # ---------------------------------------------------------------- declarations

    def feature(self, name: str, where: str | int) -> None:
        """An exact positional 0/1: ``"bos"`` (1 at BOS), ``"machines"`` (1 at every
        machine) or position k (``onehot:k``)."""
        at_bos = 1.0 if where in ("bos", 0) else 0.0
        at_machines = 0.0 if where in ("bos", 0) else 1.0
        self.vars[name] = Var((at_machines, at_machines), (at_bos, at_bos), BOTH, 0, feature=where)

    def onehot(self, position: int) -> None:
        self.feature(onehot(position), position)

    def input(self, name: str, bound: float) -> None:
        """A numeric input, |x| ≤ bound (0 at BOS): exact in float64, rounded once to float32."""
        mag32 = bound * (1 + UNIT[1]) if math.isfinite(bound) else math.inf
        self.vars[name] = Var((bound, mag32), ZERO, (True, False), None)

    def define(self, name: str, var: Var) -> None:
        self.vars[name] = var

    # ---------------------------------------------------------------- reading

    def read(self, form: Mapping[str, float], bias: float = 0.0) -> Reading:
        """The dot product ``Σ c·x̃ + bias`` as a matrix row computes it (module docstring)."""
        bos_sum, bos_count = abs(bias), 1 if bias else 0  # the bias is a term everywhere
        machine_sum, machine_count = bos_sum, bos_count
        positions: dict[int, float] = {}  # onehot:k, k ≥ 1: 1 at machine k − 1 only
        data: list[tuple[float, float, Var]] = []  # (c, |c|, x)
        constants = [bias] if bias else []  # terms c·1: only the cast of c may round
        known = True
        grids: list[int] = [] if not bias else [grid(bias) or 0]
        for name, coef in form.items():
            if coef == 0:
                continue
            var = self.vars[name]
            feature = var.feature
            if feature is None:
                data.append((coef, abs(coef), var))
                if var.grid is None:
                    known = False
                else:
                    grids.append((grid(coef) or 0) + var.grid)
                continue
            constants.append(coef)
            grids.append(grid(coef) or 0)
            if feature == "bos" or feature == 0:
                bos_sum, bos_count = bos_sum + abs(coef), bos_count + 1
            elif feature == "machines":
                machine_sum, machine_count = machine_sum + abs(coef), machine_count + 1
            else:
                positions[int(feature)] = abs(coef)
        ref_grid = min(grids, default=0) if known else None
        per_machine = bool(positions) or any(v.support is not None for _, _, v in data)
        out: list[tuple[float, bool, float, float]] = []
        for d in range(2):
            pi = max((_product_roundings(c, d, False) for c in constants), default=0)
            exact = all(representable(c, d) for c in constants)
            sum_b, count_b = bos_sum, bos_count
            sum_m, count_m = machine_sum, machine_count
            for c, size, v in data:
                pi = max(pi, _var_product(c, v, d))
                exact = exact and v.exact[d] and representable(c, d)
                if v.bos[d]:
                    sum_b, count_b = sum_b + size * v.bos[d], count_b + 1
                if v.mag[d] and not per_machine:
                    sum_m, count_m = sum_m + size * v.mag[d], count_m + 1
            if per_machine:
                sums = np.full(self.n, sum_m)
                counts = np.full(self.n, float(count_m))
                for k, c in positions.items():
                    if 1 <= k <= self.n:
                        sums[k - 1] += c
                        counts[k - 1] += 1
                for _, size, v in data:
                    if v.mag[d]:
                        where = slice(None) if v.support is None else sorted(v.support)
                        sums[where] += size * v.mag[d]
                        counts[where] += 1
                sum_m, count_m = float(sums.max(initial=0.0)), int(counts.max(initial=0.0))
                worst = max(
                    (_sum_error(k, t, pi, d) for k, t in zip(counts, sums, strict=True)),
                    default=0.0,
                )
            else:
                worst = _sum_error(count_m, sum_m, pi, d)
            worst = max(worst, _sum_error(count_b, sum_b, pi, d))
            if exact and ref_grid is not None and max(sum_m, sum_b) < 2.0 ** (BITS[d] + ref_grid):
                worst = 0.0  # integer multiples of 2^grid: every partial sum is a float
            elif max(count_m, count_b) <= 1 and pi == 0:
                worst = 0.0  # one nonzero term, an exact product
            out.append((worst, exact and worst == 0.0, sum_m + worst, sum_b + worst))
        (r0, e0, m0, b0), (r1, e1, m1, b1) = out
        return Reading((r0, r1), (e0, e1), ref_grid, (m0, m1), (b0, b1))

    def grid(self, form: Mapping[str, float]) -> int | None:
        """The grid of a form's reference: every term's, the coarsest that divides all
        (None where a variable's is unknown)."""
        grids = []
        for name, coef in form.items():
            if coef:
                g = _grid_sum(coef, self.vars[name].grid)
                if g is None:
                    return None
                grids.append(g)
        return min(grids, default=0)

    def mlp(self, block: FFNBlock) -> Mlp:
        """Every unit's pre-activation and every output's sum as the model computes them."""
        # a reading depends on the coefficients' magnitudes only: a pair of units
        # ReLU(±x + b) shares one
        readings: dict[tuple[frozenset[tuple[str, float]], float], Reading] = {}
        units = []
        for unit in block.units:
            key = (frozenset((name, abs(c)) for name, c in unit.form.items() if c), abs(unit.bias))
            if key not in readings:
                readings[key] = self.read(unit.form, unit.bias)
            units.append(readings[key])
        hidden: list[Hidden] = []
        for unit, reading in zip(block.units, units, strict=True):
            if unit.activation == "heaviside":
                hidden.append(Hidden((1.0, 1.0), (1.0, 1.0), reading.exact, 0))
            elif unit.activation == "relu":
                hidden.append(Hidden(reading.mag, reading.bos, reading.exact, reading.grid))
            else:  # pragma: no cover - the PCOC lowering makes no GELU units
                raise ValueError(f"no rounding rule for {unit.activation} units")
        outputs = {
            name: _output_sum(block.outputs.get(name, {}), block.constants.get(name, 0.0), hidden)
            for name in block.writes
        }
        return Mlp(units, hidden, outputs)


@dataclass(frozen=True)
class Hidden:
    """A hidden unit's output as computed: bounds at the machines and at BOS, whether it
    is the reference, its grid."""

    mag: Pair
    bos: Pair
    exact: tuple[bool, bool]
    grid: int | None


@dataclass(frozen=True)
class Mlp:
    """An MLP block as computed (:meth:`Floats.mlp`): per unit its pre-activation
    (:class:`Reading`) and output (:class:`Hidden`), per output variable its sum."""

    units: list[Reading]
    hidden: list[Hidden]
    outputs: dict[str, Reading]

    def pre(self, unit: int) -> Pair:
        """The rounding of unit ``unit``'s pre-activation."""
        return self.units[unit].rounding


def _output_sum(coefs: Mapping[int, float], const: float, hidden: Sequence[Hidden]) -> Reading:
    """``Σ_u a_u h_u + const`` (the bias added after the product) as computed."""
    terms = [(a, hidden[u]) for u, a in coefs.items() if a]
    values = [a for a, _ in terms] + ([const] if const else [])
    exact = pair(
        lambda d: all(h.exact[d] for _, h in terms) and all(representable(c, d) for c in values)
    )
    known = all(h.grid is not None for _, h in terms)
    ref_grid = (
        _grid_min(*(_grid_sum(a, h.grid) for a, h in terms), *map(grid, values)) if known else None
    )
    rounding, mag, bos = [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]
    for d in range(2):
        pi = max((_product_roundings(c, d, False) for c in values[len(terms) :]), default=0)
        pi = max([pi, *(_product_roundings(a, d) for a, _ in terms)])
        machines = [abs(a) * h.mag[d] for a, h in terms if h.mag[d]] + (
            [abs(const)] if const else []
        )
        sink = [abs(a) * h.bos[d] for a, h in terms if h.bos[d]] + ([abs(const)] if const else [])
        sum_m, sum_b = sum(machines), sum(sink)
        err_m, err_b = _sum_error(len(machines), sum_m, pi, d), _sum_error(len(sink), sum_b, pi, d)
        if exact[d] and ref_grid is not None and max(sum_m, sum_b) < 2.0 ** (BITS[d] + ref_grid):
            err_m = err_b = 0.0
        if len(machines) <= 1 and pi == 0:
            err_m = 0.0
        if len(sink) <= 1 and pi == 0:
            err_b = 0.0
        rounding[d] = max(err_m, err_b)
        mag[d], bos[d] = sum_m + rounding[d], sum_b + err_b
    computed = pair(lambda d: exact[d] and rounding[d] == 0.0)
    return Reading(
        (rounding[0], rounding[1]), computed, ref_grid, (mag[0], mag[1]), (bos[0], bos[1])
    )


def bos_defect(block: FFNBlock, values: Mapping[str, float], computed: float, name: str) -> float:
    """How far ``computed`` (the float64 value of ``block``'s output ``name`` at BOS, as
    the compiler evaluates it) is from the block's real value on the BOS values
    ``values`` (known numbers: exact rational arithmetic)."""
    if _exact_at_bos(block, values, name):
        return 0.0
    hidden = []
    for unit in block.units:
        pre = Fraction(unit.bias) + sum(
            (Fraction(c) * Fraction(values[v]) for v, c in unit.form.items() if values[v]),
            Fraction(0),
        )
        if unit.activation == "heaviside":
            hidden.append(Fraction(1 if pre >= 0 else 0))
        else:
            hidden.append(max(pre, Fraction(0)))
    exact = Fraction(block.constants.get(name, 0.0)) + sum(
        (Fraction(c) * hidden[u] for u, c in block.outputs.get(name, {}).items()), Fraction(0)
    )
    difference = abs(Fraction(computed) - exact)
    return 0.0 if difference == 0 else math.nextafter(float(difference), math.inf)


def _exact_sum(terms: Sequence[tuple[float, float]]) -> tuple[bool, float]:
    """Whether the float64 sum of the products ``c·v`` of known numbers is exact whatever
    the order (every product and partial sum a multiple of the coarsest grid, below
    ``2^(53 + grid)``), and a bound on its magnitude."""
    live = [(c, v) for c, v in terms if c and v]
    size = sum(abs(c * v) for c, v in live)
    grids = [grid(c) + grid(v) for c, v in live]  # type: ignore[operator]
    return (not grids or size < 2.0 ** (BITS[0] + min(grids))), size


def _exact_at_bos(block: FFNBlock, values: Mapping[str, float], name: str) -> bool:
    """Whether float64 computes ``block``'s output ``name`` exactly on the BOS values."""
    hidden = []
    for unit in block.units:
        terms = [(c, values[v]) for v, c in unit.form.items()] + [(1.0, unit.bias)]
        exact, _ = _exact_sum(terms)
        if not exact:
            return False
        pre = sum(c * v for c, v in terms)
        hidden.append(float(pre >= 0) if unit.activation == "heaviside" else max(pre, 0.0))
    outputs = [(c, hidden[u]) for u, c in block.outputs.get(name, {}).items()]
    return _exact_sum([*outputs, (1.0, block.constants.get(name, 0.0))])[0]


def _grid_sum(coef: float, g: int | None) -> int | None:
    cg = grid(coef)
    return None if g is None or cg is None else cg + g


def _product_roundings(coef: float, d: int, product: bool = True) -> int:
    """Roundings a term with this coefficient may take in float type d: the cast of the
    coefficient (float32) and, for a ``product`` with a variable, the product itself (not
    for a power of two)."""
    cast = 0 if representable(coef, d) else 1
    return cast + (1 if product and not _power_of_two(coef) else 0)


def _var_product(coef: float, var: Var, d: int) -> int:
    """Roundings of ``coef·x̃`` in float type d: none for a power of two, or for an exact
    x̃ on a grid whose product with the coefficient fits the significand."""
    cast = 0 if representable(coef, d) else 1
    if cast == 0 and var.exact[d] and var.grid is not None:
        cg = grid(coef)
        size = abs(coef) * max(var.mag[d], var.bos[d])
        if cg is not None and size < 2.0 ** (BITS[d] + cg + var.grid):
            return 0
    return cast + (0 if _power_of_two(coef) else 1)


def _sum_error(count: float, total: float, pi: int, d: int) -> float:
    """The rounding bound of a sum of ``count`` nonzero products whose magnitudes sum to
    ``total`` (``pi``: roundings per product at most)."""
    if count <= 0 or total == 0:
        return 0.0
    if not math.isfinite(total):
        return math.inf
    return gamma(count - 1 + pi, d) * total + count * TINY[d]


__all__ = [
    "BITS",
    "DTYPES",
    "FLOAT32_MAX",
    "GATE_SLACK",
    "SOFTMAX_WEIGHT_ROUNDINGS",
    "UNIT",
    "ZERO",
    "Floats",
    "Mlp",
    "Pair",
    "Reading",
    "Var",
    "bos_defect",
    "gamma",
    "grid",
    "padd",
    "pair",
    "pmax",
    "pscale",
    "psub",
    "representable",
    "times",
]
