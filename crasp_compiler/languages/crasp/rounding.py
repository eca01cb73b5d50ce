"""Rounding analysis of compiled C-RASP models: how long they stay exact in float64 / float32.

A compiled model is exact in real arithmetic. Run in floating point, every matrix product
rounds; this module bounds those errors, so that the compiler can record, per float type,
the longest input it *proves* the outputs exact for (``Guarantee.dtypes``), and refuse a
program whose float64 model would be exact for no input at all.

**Units.** At token position ``t ≥ 1`` a count-valued variable holds ``x = X/(t+1)`` with
``X`` an integer (a prefix count, a constant times ``ONE``, a min, max or conditional of
those); a Boolean holds ``b ∈ {0, 1}``. Every variable carries two polynomials in t with
nonnegative coefficients (:class:`Poly`; they grow with t, so a condition that holds at
``t = n`` holds at every ``t ≤ n``), both in *integer units* (value × (t + 1)):

- ``mag``: ``|x|·(t+1) ≤ mag(t)`` (a Boolean: ``t + 1``);
- ``err``: ``|x̃ − x|·(t+1) ≤ err(t)·u``, where x̃ is the computed value and u the unit
  roundoff of the float type the model runs in (2^-53 for float64, 2^-24 for float32).

**Rules** (the standard model: one operation rounds by a factor ``1 ± u``; a dot product
of K terms is off by at most ``γ_K Σ|w_k y_k|`` with ``γ_K = Ku/(1 − Ku) ≤ 1.01 K u``
while ``K u ≤ 0.01``; the runtimes' float64 prefix sums count with u64 in a float32 run
too; one :class:`Analysis` per float type):

- a linear form ``z = Σ α_k v_k`` read by one matrix row (K terms, plus one for the
  rounding of the coefficients to the float type): ``err_z = Σ|α_k| err_k +
  1.01 (K + 1) Σ|α_k| mag_k`` and ``mag_z = Σ|α_k| mag_k`` (:meth:`Analysis.form`);
- a uniform head averaging a value form v (a count): the runtimes add prefix sums in
  float64, exactly when v holds integers (exact Booleans, integer coefficients) and the
  sum stays below 2^53; otherwise they add the values' errors and at most
  ``1.01 t Σ_s |v_s|`` float64 roundings of their own (while ``t·u64 ≤ 0.01``). Dividing
  by ``t + 1`` in float64 and casting to the float type round once more each
  (:meth:`Analysis.average`);
- a comparison thresholds ``Z = D ± 1/2`` (D an integer, so ``|Z| ≥ 1/2``). A Heaviside
  unit or the layer-norm sign decides it correctly while ``err_Z(t)·u < 1/2``; a
  Heaviside unit then outputs exactly 0 or 1, the layer norm of the pair ``(z, 0)``
  almost (its mean ``z/2``, deviations ``±z/2`` and std ``√(fl((z/2)²)) = |z/2|`` are
  exact in binary floating point where the square root is correctly rounded; torch's CPU
  one is sometimes 1 ulp off, so the output is taken to be within 8 u of 0 or 1). A relu
  ramp ``ReLU(z/δ + 1) − ReLU(z/δ)`` with ``δ ≤ 1/(4(t+1))`` is saturated with a slack
  of 1/4 in integer units: an error in z below it cancels in the difference of the two
  units, which are then off only by their own rounding (:meth:`Analysis.threshold`);
- ReLU is 1-Lipschitz; a big-M gate ``ReLU(x + Mp − M) − ReLU(−x + Mp − M)`` is off by
  the error of x plus the rounding of both rows (:meth:`Analysis.gate`); a soft gate and
  the ramp that makes a soft bit exact cancel the bit's error while it stays below its
  slack of 1/20; a truth table of exact 0/1 inputs with integer weights is exact, of
  inexact inputs it is off by twice their errors (:meth:`Analysis.table`);
- hard attention that picks one key copies that key's value and error; a softmax lookup
  on the integer scores ``3(2(t − c)j − j²)`` computes them exactly while they stay
  below ``2^p = 1/u`` (``9t² + 6ct``) and then adds at most 32 u (a handful of
  exponentials, sums and one division);
- a decided output: a Boolean ``out > 1/2`` is right while its error is below 1/2; a
  count ``round(out·(t + 1))`` is right while its error, plus the rounding of the
  product, is below 1/2 in integer units.

The BOS position (t = 0) holds input-independent values and is guarded by terms
``−M·bos`` that put every comparison at least 1 below its threshold there; those guards
hold while the rounding at BOS stays below 1 (:meth:`Analysis.bos_check`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

# The float types the analysis covers, with their unit roundoff u = eps / 2.
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24}
# Longest input ever claimed: the float64 prefix sums of the runtimes count exactly below
# 2^53, and the γ_K bound needs K·u ≤ 0.01.
MAX_CLAIM = 2**53 - 1
# The layer-norm sign is 1 within this many units of roundoff (an inexact square root).
LAYERNORM_ERROR = 8.0
# A few roundings per softmax weight (exp, sum, division) over one lookup, in units of u.
SOFTMAX_LOOKUP_ERROR = 32.0


@dataclass(frozen=True)
class Poly:
    """``Σ_k c_k t^k`` with nonnegative coefficients, evaluated at positions t ≥ 0."""

    coefs: tuple[float, ...] = ()

    def __post_init__(self) -> None:  # no trailing zeros: equal polynomials compare equal
        coefs = tuple(float(c) for c in self.coefs)
        while coefs and coefs[-1] == 0:
            coefs = coefs[:-1]
        object.__setattr__(self, "coefs", coefs)

    @staticmethod
    def const(value: float) -> Poly:
        return Poly((float(value),))

    @staticmethod
    def linear(c0: float, c1: float) -> Poly:
        """``c0 + c1·t``."""
        return Poly((float(c0), float(c1)))

    def __add__(self, other: Poly) -> Poly:
        n = max(len(self.coefs), len(other.coefs))
        a = self.coefs + (0.0,) * (n - len(self.coefs))
        b = other.coefs + (0.0,) * (n - len(other.coefs))
        return Poly(tuple(x + y for x, y in zip(a, b, strict=True)))

    def scale(self, factor: float) -> Poly:
        return Poly(tuple(abs(float(factor)) * c for c in self.coefs))

    def max(self, other: Poly) -> Poly:
        """A polynomial bound on ``max(p(t), q(t))``: the larger coefficient of each power."""
        n = max(len(self.coefs), len(other.coefs))
        a = self.coefs + (0.0,) * (n - len(self.coefs))
        b = other.coefs + (0.0,) * (n - len(other.coefs))
        return Poly(tuple(max(x, y) for x, y in zip(a, b, strict=True)))

    def stored_max(self) -> float:
        """``max_t p(t)/(t + 1)`` over t ≥ 0 for a polynomial of degree ≤ 1: the larger of
        its two coefficients (a value bound in stored units)."""
        c = (*self.coefs, 0.0, 0.0)
        if len(self.coefs) > 2:
            raise ValueError("stored_max needs a polynomial of degree at most 1")
        return max(c[0], c[1])

    def times_t1(self) -> Poly:
        """``p(t)·(t + 1)``."""
        return Poly((*self.coefs, 0.0)) + Poly((0.0, *self.coefs))

    def over_t1(self) -> Poly:
        """A polynomial bound on ``p(t)/(t + 1)`` for t ≥ 1:
        ``c0/(t+1) ≤ c0/2``, ``c1 t/(t+1) ≤ c1``, ``c_k t^k/(t+1) ≤ c_k t^(k−1)``."""
        c = (*self.coefs, 0.0, 0.0)
        return Poly((c[0] / 2 + c[1], *c[2:]))

    def prefix_sum(self) -> Poly:
        """A polynomial bound on ``Σ_{s=1..t} p(s)/(s + 1)`` (the sum of stored values
        whose integer-unit bound is p): ``c0 t/2 + Σ_{k≥1} c_k t^k``."""
        c = (*self.coefs, 0.0, 0.0)
        return Poly((0.0, c[0] / 2 + c[1], *c[2:]))

    def __call__(self, t: float) -> float:
        return sum(c * float(t) ** k for k, c in enumerate(self.coefs))


def t1() -> Poly:
    """``t + 1``: the integer-unit magnitude of a Boolean."""
    return Poly.linear(1, 1)


ZERO = Poly()


@dataclass(frozen=True)
class Check:
    """``err(t)·u < limit`` at every token position up to the input length (or at BOS
    when ``at_bos``); ``what`` names the construction and ``node`` the expression."""

    err: Poly
    limit: float
    what: str
    node: object = None
    at_bos: bool = False
    fixed: bool = False  # err(t) < limit without the factor u (e.g. exact float64 sums)


@dataclass
class Analysis:
    """Magnitudes and errors of the variables of one lowering run in ``dtype``, and the
    checks that decide its float horizon (see the module docstring). Errors are in units
    of the dtype's u; the runtimes' float64 prefix sums and divisions count ``f64`` of
    them (u64/u: 1 in float64, 2^-29 in float32), and a float32 run casts once more."""

    dtype: str
    mag: dict[str, Poly] = field(default_factory=dict)
    err: dict[str, Poly] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)

    @property
    def f64(self) -> float:
        return UNIT_ROUNDOFF["float64"] / UNIT_ROUNDOFF[self.dtype]

    @property
    def divide_and_cast(self) -> float:
        """Roundings of ``S/(t+1)`` in float64, then the cast to the dtype."""
        return 1.01 * (self.f64 + (0.0 if self.dtype == "float64" else 1.0))

    def exact_input(self, name: str, magnitude: Poly) -> None:
        """An embedding or positional variable: exact, ``|X| ≤ magnitude``."""
        self.mag[name], self.err[name] = magnitude, ZERO

    def set(self, name: str, magnitude: Poly, error: Poly) -> None:
        self.mag[name], self.err[name] = magnitude, error

    def is_exact(self, form: Mapping[str, float]) -> bool:
        """Whether ``form`` holds exact integers: exact variables, integer coefficients
        (a Boolean form read by a count head)."""
        return all(self.err[v] == ZERO and float(c).is_integer() for v, c in form.items())

    def form(
        self, form: Mapping[str, float], extra_terms: int = 0, rounded: bool = True
    ) -> tuple[Poly, Poly]:
        """(mag, err) of a linear form read by one matrix row (``extra_terms``: other
        terms in the same row, such as a bias); ``rounded=False`` leaves out the row's
        own rounding (the errors of the variables only)."""
        mag, err = ZERO, ZERO
        for name, coef in form.items():
            mag = mag + self.mag[name].scale(coef)
            err = err + self.err[name].scale(coef)
        if not rounded or (self.is_exact(form) and all(abs(c) < 2**24 for c in form.values())):
            # small integers times exact 0/1 values: every partial sum is exact
            return mag, err
        terms = len(form) + extra_terms + 1
        return mag, err + mag.scale(1.01 * terms)

    def average(self, name: str, value: Mapping[str, float], node: object = None) -> None:
        """``name`` := the causal uniform average of ``value``, a form that is 0 at BOS
        (integer units: the prefix sum S of the values over the tokens)."""
        value_mag, value_err = self.form(value)
        if all(self.mag[v] == t1() for v in value):  # Booleans: S ≤ (Σ|α|)·t
            mag = Poly.linear(0, sum(abs(c) for c in value.values()))
        else:
            mag = value_mag.prefix_sum()
        if self.is_exact(value):
            err = ZERO
            self.checks.append(Check(mag, float(2**53), "an exact prefix sum", node, fixed=True))
        else:
            err = value_err.prefix_sum() + mag.times_t1().scale(1.01 * self.f64)
            self.checks.append(Check(Poly.linear(0, self.f64), 0.01, "a float64 prefix sum", node))
        self.set(name, mag, err + mag.scale(self.divide_and_cast))

    def one(self, name: str) -> None:
        """``name`` := ``1/(t + 1)``, the average of the BOS indicator (S = 1 exactly)."""
        self.set(name, Poly.const(1), Poly.const(self.divide_and_cast))

    def threshold(
        self,
        name: str,
        z: Mapping[str, float],
        mode: str,
        node: object,
        what: str,
        ramp_width: float = 0.0,
    ) -> None:
        """``name`` := the Boolean deciding ``Z ≥ 0`` (|Z| ≥ 1/2 in integer units) by a
        Heaviside unit, the layer-norm sign, or (``mode="relu"``) the ramp
        ``ReLU(z/δ + 1) − ReLU(z/δ)`` with ``δ = ramp_width ≤ 1/(4(t+1))``."""
        mag, err = self.form(z, extra_terms=1)
        if mode != "relu":
            self.checks.append(Check(err, 0.5, what, node))
            # Heaviside units give exactly 0 or 1; so does the layer norm of (z, 0)
            # where the square root is correctly rounded (LAYERNORM_ERROR otherwise)
            error = ZERO if mode == "heaviside" else Poly.const(LAYERNORM_ERROR).times_t1()
            self.set(name, t1(), error)
            return
        # |z| ≥ 1/(2(t+1)) ≥ 2δ: the ramp is saturated with a slack of at least δ, i.e.
        # 1/4 in integer units, so an error in z below it cancels in the difference of the
        # two units; what remains is each unit's own rounding, up to 1.01(K+2)|a| with
        # |a| ≤ |z|/δ + 1, and one rounding of the result
        slack = err + t1().scale(1.01 * (len(z) + 2) * ramp_width)
        self.checks.append(Check(slack, 0.25, what, node))
        size = mag.over_t1().scale(1 / ramp_width) + Poly.const(1)
        stored = size.scale(2 * 1.01 * (len(z) + 2)) + Poly.const(1.01)
        self.checks.append(Check(stored, 0.5, what, node))
        self.set(name, t1(), stored.times_t1())

    def table(self, name: str, inputs: Sequence[Mapping[str, float]], node: object) -> None:
        """``name`` := a truth-table FFN over {0,1} input forms (:func:`ffn.boolean_function`:
        row units ``ReLU(2(2a − 1)·x − 2|a| + 1)``, other rows at ≤ −1). Exact for exact
        inputs; otherwise only the matching row moves, by twice the inputs' errors plus
        its own rounding, while that stays below the other rows' slack of 1."""
        if all(self.is_exact(x) for x in inputs):
            self.set(name, t1(), ZERO)
            return
        m = len(inputs)
        unit = Poly.const(1.01 * (m + 2) * (4 * m + 1))
        for x in inputs:
            unit = unit + self.form(x, rounded=False)[1].over_t1().scale(2)
        self.checks.append(Check(unit, 1.0, "a Boolean formula", node))
        self.set(name, t1(), (unit + Poly.const(2.02)).times_t1())

    def clean(self, name: str, soft: Mapping[str, float], node: object) -> None:
        """``name`` := ``2·ReLU(b − 1/4) − 2·ReLU(b − 3/4)``: the soft bit b, at most 1/5
        from 0 or 1 in real arithmetic, made exactly 0 or 1 (an error in b below the
        slack 1/20 cancels; each unit rounds once on values up to 1.75)."""
        self._soft_slack(soft, node)
        stored = Poly.const(4 * 1.01 * 3 * 1.75 + 1.01)
        self.set(name, t1(), stored.times_t1())

    def _soft_slack(self, soft: Mapping[str, float], node: object) -> None:
        self.checks.append(
            Check(self.form(soft, rounded=False)[1].over_t1(), 0.05, "a softmax lookup", node)
        )

    def relu(self, name: str, z: Mapping[str, float], value: Poly | None = None) -> None:
        """``name`` := ``ReLU(z)``: one unit, copied out with weight 1. ``value`` bounds
        ``|z|`` when the program gives a tighter bound than the variables of z do."""
        mag, err = self.form(z)
        self.set(name, value or mag, err)

    def gate(
        self,
        name: str,
        bit: Mapping[str, float],
        x: Mapping[str, float],
        bound: float,
        value: Poly | None = None,
    ) -> None:
        """``name`` := ``bit·x`` by the big-M pair ``ReLU(±x + M·bit − M)`` (|x| ≤ M,
        stored units; ``value`` bounds ``|x|`` in integer units when the program gives a
        tighter bound than the variables of x do)."""
        x_mag, x_err = self.form(x, rounded=False)
        x_mag = value or x_mag
        bit_err = self.form(bit, rounded=False)[1]
        # ReLU(x̃ + r1) − ReLU(−x̃ + r2) is within |r1| + |r2| of x̃ (r: each row's own
        # rounding and M times the bit's error), and x̃ within x_err of x; h1 − h2 with
        # exact ±1 products rounds once more
        rows = bit_err.scale(bound) + (x_mag + t1().scale(2 * bound)).scale(
            1.01 * (len(x) + len(bit) + 2)
        )
        self.set(name, x_mag, x_err + rows.scale(2) + x_mag.scale(1.01))

    def lookup(self, name: str, value: Mapping[str, float]) -> None:
        """``name`` := ``value`` at another position (hard attention copies it)."""
        mag, err = self.form(value)
        self.set(name, mag, err)

    def soft_lookup(self, name: str, value: Mapping[str, float], offset: int, node: object) -> None:
        """``name`` := the softmax lookup of the bit ``value`` at ``t − offset`` on the
        integer scores ``3(2(t − c)j − j²)``: exact while every integer met on the way
        stays below ``2^p = 1/u`` (``9t² + 6ct``, the module's ``err·u < 1``); the
        exponentials, sums and the division then add :data:`SOFTMAX_LOOKUP_ERROR`."""
        self.checks.append(
            Check(Poly((0.0, 6.0 * offset, 9.0)), 1.0, "the integer scores of a lookup", node)
        )
        mag, err = self.form(value)
        stored = err.over_t1() + Poly.const(SOFTMAX_LOOKUP_ERROR)
        self.set(name, mag, stored.times_t1())

    def soft_gate(
        self, name: str, bit: Mapping[str, float], x: Mapping[str, float], node: object
    ) -> None:
        """``name`` := ``x`` where the soft bit is ≥ 3/4, 0 where ≤ 1/4, for 0 ≤ x ≤ 1
        stored: ``ReLU(x + 2(b − 3/4)) − ReLU(2(b − 3/4))``. The soft bit is at most 1/5
        from 0 or 1 in real arithmetic: an error in it below the slack 1/20 cancels."""
        self._soft_slack(bit, node)
        x_mag, x_err = self.form(x, rounded=False)
        pre = x_err + (x_mag + t1().scale(3.5)).scale(1.01 * (len(x) + 2))
        self.set(name, x_mag, pre.scale(2) + (x_mag + t1()).scale(1.01))

    def output(self, form: Mapping[str, float], rule: str, node: object, what: str) -> None:
        """The decision of an output read from ``form``."""
        mag, err = self.form(form)
        if rule == "bool":
            self.checks.append(Check(err.over_t1(), 0.5, what, node))
        else:  # round(out·(t+1)): the product rounds once more, in float64
            self.checks.append(Check(err + mag.scale(1.01 * self.f64), 0.5, what, node))

    def bos_check(self, form: Mapping[str, float], guard: float, node: object, what: str) -> None:
        """At BOS, ``form − guard`` must stay below its threshold, which it misses by 1 in
        real arithmetic: the rounding there must stay below 1 (the bounds are doubled, as
        some of them are derived for t ≥ 1)."""
        _, err = self.form(form, extra_terms=1)
        total = err + Poly.const(1.01 * (len(form) + 2) * abs(guard))
        self.checks.append(Check(total.scale(2), 1.0, what, node, at_bos=True))


def horizon(
    checks: Iterable[Check], dtype: str, cap: int | None = None
) -> tuple[int, Check | None]:
    """The longest input length every check allows in ``dtype`` (at most ``cap`` and
    :data:`MAX_CLAIM`), with the check that limits it (None if none does); −1 when a
    check fails at BOS, so that no input is covered."""
    u = UNIT_ROUNDOFF[dtype]
    limit = MAX_CLAIM if cap is None else min(cap, MAX_CLAIM)
    worst: Check | None = None

    def ok(check: Check, t: int) -> bool:
        value = check.err(t) if check.fixed else check.err(t) * u
        return value < check.limit

    for check in checks:
        if check.at_bos:
            if not ok(check, 0):
                return -1, check
            continue
        if ok(check, limit):
            continue
        lo, hi = 0, limit  # ok(lo) (or lo = 0), not ok(hi)
        if not ok(check, 1):
            limit, worst = 0, check
            continue
        lo = 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok(check, mid):
                lo = mid
            else:
                hi = mid
        limit, worst = lo, check
    return limit, worst
