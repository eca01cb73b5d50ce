"""Rounding analysis of compiled C-RASP models: how long they stay exact in float64 / float32.

A compiled model is exact in real arithmetic. Run in floating point, every matrix product
rounds; this module proves bounds on those errors, so that the compiler can record, per
float type, the longest input it *proves* every output exact for (``Guarantee.dtypes``),
and refuse a program whose float64 model would be exact for no input at all.

**Rounding model.** The standard model of the float type the model runs in (unit
roundoff u: 2^-53 for float64, 2^-24 for float32; float64's is written u₆₄): every
operation rounds to nearest, ``fl(a ∘ b) = (a ∘ b)(1 + θ)``, ``|θ| ≤ u``. A matrix row
``Σ_k w_k y_k + b`` is summed in an order the BLAS picks: with r roundings on the way
(K nonzero terms give K − 1 additions, plus one for the bias, one for products whose
weight is not a power of two and three for weights float64 and then the dtype cannot
hold), it is within ``γ_r (Σ|w_k ỹ_k| + |b|)`` of the real sum of the computed inputs ỹ,
``γ_r = (1 + u)^r − 1`` (≤ r u/(1 − r u)); more precisely, its last rounding is relative
to its result, and each other partial sum is a sub-sum of the terms, within the larger of
their positive and negative parts. Terms that are exactly 0 (the BOS indicator at a
token) add nothing. The
runtimes add the values of a uniform head in float64, divide by t + 1 in float64 and cast
to the model's type (relative error ``u' = (1 + u)(1 + u₆₄) − 1``), and take a layer
norm's square root in float64 (correctly rounded after the cast), so that the layer norm
of ``(z, 0)`` is exactly ``(±1, ∓1)``.

**Units.** At token position ``t ≥ 1`` a count-valued variable holds ``x = X/(t+1)`` with
``X`` an integer (a prefix count, ``ONE = 1/(t+1)``, a min, max or conditional of those); a
Boolean holds ``b ∈ {0, 1}``, ``X = b(t + 1)``. Every variable carries (:class:`Var`), in
integer units, ``|X| ≤ mag(t)`` and an error bound ``|X̃ − X| ≤ err(t) + rel·X`` (``rel``
only for variables that are never negative); a Boolean also carries its *bit errors*
``(e₀, e₁)``: ``|b̃ − b|`` when b is 0 and when it is 1 (so ``err = e₀(t+1)``, ``rel =
e₁ − e₀``). Polynomials (:class:`Poly`) have nonnegative coefficients and grow with t, so
a condition that holds at ``t = n`` holds at every ``t ≤ n``.

**Rules** (one :class:`Analysis` per float type):

- *a matrix row* ``z = Σ α_k x_k + b`` (:meth:`Analysis.row`): the errors of its inputs,
  ``Σ |α_k|(err_k + rel_k X_k)``, plus its rounding ``γ_r Σ |α_k||X̃_k| + γ_r|b|(t+1)``:
  an *affine* bound ``A(t) + Σ c_k X_k`` over the nonnegative variables (:class:`Affine`).
  A row of integer coefficients over exact bits computes exact integers (no rounding);
- *a decision* ``Z = Σ α_k X_k + β ≥ 0``, with ``|Z| ≥ 1/2`` (Z is an integer plus 1/2):
  decided right when ``A + Σ c_k X_k + σ < |Z|`` for every feasible X (σ: the part of the
  margin a ramp uses). On the side ``sZ ≥ 1/2`` (s = ±1) weak duality with a multiplier
  ``μ = 1 − λ ≥ 0`` on that constraint and ``X_k ∈ [0, mag_k]`` gives the sufficient
  condition ``A + σ − λsβ + Σ_k max(c_k − λ s α_k, 0)·mag_k + λ/2 < 1/2`` for any
  ``λ ≤ 1``: the error may grow with the distance from the threshold (a count of
  inexact bits compared with a small constant), and the best λ is 0, 1 or one of the
  ratios ``c_k/(sα_k)`` (:class:`Decision`). The row's last rounding is relative to Z
  itself (κ = (1 + u)/(1 − u) on the rest), its other partial sums count only the terms
  whose sign wins on the side, and the prefix counts of distinct tokens, which add up
  to t, share a second multiplier;
- *saturated units output exact values*: a Heaviside unit and the layer-norm sign decided
  right output exactly 0 or 1; a ReLU ramp ``clamp(z/2w + 1/2, 0, 1)`` (width w =
  1/(4(N + 1)) in relu mode) decided right outputs an exact 0 on one side (both units
  off) and ``1 ± E`` on the other, where the input error cancels between the two units and
  E is their own rounding, ``E = 2γ_r W + γ(…)`` with ``W`` the row's magnitude over 2w.
  The lowering picks the exact side where the bit is used (*polarity*): 0 for a bit that
  is counted, 1 for a guard or a conditional's condition (:meth:`Analysis.threshold`);
- *a prefix count* of a Boolean form with bit errors ``(e₀, e₁)``: the float64 sum is exact
  when the values are (exact bits, integer coefficients, below 2^53), otherwise off by
  ``Σ_s e(b_s) = e₀ t + (e₁ − e₀) C`` and the float64 rounding ``1.01 t u₆₄ Σ|v_s|``; then
  the division and cast, ``u'`` relative (:meth:`Analysis.average`). Errors of bits that
  are exact on the counted side do not add up with t;
- *a truth table, and, or* over bits (:meth:`Analysis.table`): rows that do not match sit
  at ≤ −1 before their ReLU, so input errors below 1/2 leave them at an exact 0; the one
  matching row is off by twice the inputs' errors plus its rounding. Which side is exact
  is the construction's (the truth-table rows and a one-unit and: 0; the complement and a
  one-unit or: 1; the clamped and/or of :func:`ffn.all_of`/:func:`ffn.any_of`: either);
- ReLU is 1-Lipschitz (min, max: :meth:`Analysis.relu`); a big-M gate ``ReLU(±x + Mp −
  M)`` passes the error of x and M times the bit's where p = 1, and none where p = 0 when
  M exceeds |x| by more than the rounding (:meth:`Analysis.gate`); hard attention
  copies one key's value and its errors (:meth:`Analysis.lookup`); a softmax lookup on the
  integer scores ``3(2(t − c)j − j²)`` computes them exactly while they stay below 2^p
  and then adds at most 32u, and the ramps that follow it (a cleaner, a soft gate) absorb
  an error below 1/20 (:meth:`Analysis.soft_lookup`);
- *a decided output*: a Boolean ``out > 1/2`` is right while its error is below 1/2; a
  count ``round(out·(t + 1))`` while its error in integer units, plus the rounding of
  the float64 product, is below 1/2 (:meth:`Analysis.output`);
- *pushes*: a guard ``M(Σℓ − r)`` or the BOS term ``−M·bos`` must move a threshold to its
  exact side by more than the row's error (:meth:`Analysis.threshold`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

# The float types the analysis covers, with their unit roundoff u = eps / 2.
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24}
# Significand bits (integers below 2^p are exact).
PRECISION = {"float64": 53, "float32": 24}
# Longest input ever claimed: the float64 prefix sums of the runtimes count exactly below
# 2^53.
MAX_CLAIM = 2**53 - 1
# A few roundings per softmax weight (exp, sum, division) over one lookup, in units of u.
SOFTMAX_LOOKUP_ERROR = 32.0
# The error a soft bit (a softmax lookup) may carry into the ramp that reads it.
SOFT_SLACK = 0.05


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
        if len(self.coefs) > 2:
            raise ValueError("stored_max needs a polynomial of degree at most 1")
        c = (*self.coefs, 0.0, 0.0)
        return max(c[0], c[1])

    def token_max(self) -> float:
        """``max_t p(t)/(t + 1)`` over the tokens, t ≥ 1, for a polynomial of degree ≤ 1."""
        if len(self.coefs) > 2:
            raise ValueError("token_max needs a polynomial of degree at most 1")
        c = (*self.coefs, 0.0, 0.0)
        return max((c[0] + c[1]) / 2, c[1])

    def times_t1(self) -> Poly:
        """``p(t)·(t + 1)``."""
        return Poly((*self.coefs, 0.0)) + Poly((0.0, *self.coefs))

    def over_t1(self) -> Poly:
        """A polynomial bound on ``p(t)/(t + 1)`` for t ≥ 0: ``c0/(t+1) ≤ c0``,
        ``c1 t/(t+1) ≤ c1``, ``c_k t^k/(t+1) ≤ c_k t^(k−1)``."""
        c = (*self.coefs, 0.0, 0.0)
        return Poly((c[0] + c[1], *c[2:]))

    def __call__(self, t: float) -> float:
        return sum(c * float(t) ** k for k, c in enumerate(self.coefs))


def t1() -> Poly:
    """``t + 1``: the integer-unit magnitude of a Boolean."""
    return Poly.linear(1, 1)


ZERO = Poly()
# one λ of Decision.side_ok: λsβ, λ/2, the weights max(d_k, 0) of the ungrouped terms,
# d_k = c_k − λsα_k of every term, the candidate νs of the grouped ones (0 and their
# max(d_k, 0)), and |λ|
Multiplier = tuple[float, float, list[float], list[float], set[float], float]
Pair = tuple[float, float]  # bit errors (when 0, when 1), stored units
EXACT: Pair = (0.0, 0.0)


@dataclass(frozen=True)
class Var:
    """What the analysis knows of a residual variable, in integer units ``X = x·(t+1)``:
    ``|X| ≤ mag(t)``; ``|X̃ − X| ≤ err(t) + rel·X`` (``rel`` where ``nonneg``); ``fixed``:
    X is this number at every token (``ONE``); ``bits``: a Boolean's errors when 0 and 1;
    ``soft``: a softmax lookup's error beyond its real-arithmetic deviation; ``ones``: a
    bit that is 1 at every token (nonbos); ``token``: a token's bit, or the prefix count
    of one (the counts of distinct tokens add up to at most t)."""

    mag: Poly
    err: Poly = ZERO
    rel: float = 0.0
    nonneg: bool = False
    fixed: float | None = None
    bits: Pair | None = None
    soft: float | None = None
    ones: bool = False
    token: str | None = None


def boolean(pair: Pair) -> Var:
    """A Boolean with bit errors ``pair``."""
    e0, e1 = pair
    return Var(t1(), t1().scale(e0), e1 - e0, nonneg=True, bits=pair)


@dataclass(frozen=True)
class Affine:
    """An error bound ``const(t) + Σ_k coefs[k]·X_k`` over nonnegative variables
    ``X_k ∈ [0, mag_k(t)]`` (a coefficient may be negative)."""

    const: Poly
    coefs: Mapping[str, float]


# ---------------------------------------------------------------------------- checks


@dataclass(frozen=True)
class Check:
    """A condition the float horizon must keep at every token position up to the input
    length (or only at BOS, t = 0, when ``at_bos``); ``what`` names the construction and
    ``node`` the expression."""

    what: str
    node: object

    @property
    def at_bos(self) -> bool:
        return False

    def ok(self, t: int) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class Bound(Check):
    """``value(t) < limit``."""

    value: Poly = ZERO
    limit: float = 1.0
    bos: bool = False

    @property
    def at_bos(self) -> bool:
        return self.bos

    def ok(self, t: int) -> bool:
        return self.value(t) < self.limit


@dataclass(frozen=True)
class Decision(Check):
    """``Z = Σ α_k X_k + β`` (``|Z| ≥ 1/2``) decided right: its error ``const(t) + Σ c_k X_k``
    (``const`` includes the margin σ a ramp uses) stays below ``|Z|`` at every feasible X
    (module docstring). ``terms``: per nonnegative variable ``(α_k, c_k, mag_k)``, where
    ``c_k`` holds on the side ``sZ ≥ 1/2`` with s α_k ≤ 0 and ``c_k + rounding[k]`` where
    s α_k > 0 (partial sums are within the larger of the row's positive and negative
    parts, which is the positive one where Z > 0); ``signed``: ``(α_k, mag_k)`` of
    variables that may be negative."""

    const: Poly = ZERO
    beta: float = 0.0
    terms: tuple[tuple[float, float, Poly], ...] = ()
    rounding: tuple[float, ...] = ()
    signed: tuple[tuple[float, Poly], ...] = ()
    group: tuple[int, ...] = ()  # terms whose variables add up to at most t (tokens)

    def ok(self, t: int) -> bool:
        return all(self.side_ok(s, t) for s in (1, -1))

    @cached_property
    def _multipliers(self) -> dict[int, list[Multiplier] | None]:
        """Per side: None once a position has asked, the list from the second on."""
        return {}

    def multipliers(self, s: int) -> Iterable[Multiplier]:
        """The candidate λs of side s (0, 1, the ratios ``c_k/(sα_k)`` below 1 and where
        two grouped terms' coefficients cross), each as :data:`Multiplier`; kept from the
        second position that asks on (a horizon search asks at many; most checks are
        asked once)."""
        if s not in self._multipliers:
            self._multipliers[s] = None
            return self._candidates(s)
        kept = self._multipliers[s]
        if kept is None:
            kept = self._multipliers[s] = list(self._candidates(s))
        return kept

    def _candidates(self, s: int) -> Iterator[Multiplier]:
        """:meth:`multipliers`, made one λ at a time."""
        rounding = self.rounding or (0.0,) * len(self.terms)
        coefs = [  # (α_k, c_k), with the rounding where sα_k > 0
            (a, c + (r if s * a > 0 else 0.0))
            for (a, c, _), r in zip(self.terms, rounding, strict=True)
        ]
        candidates = {0.0, 1.0} | {c / (s * a) for a, c in coefs if a and c / (s * a) < 1}
        for j in self.group:
            for k in self.group:
                (aj, cj), (ak, ck) = coefs[j], coefs[k]
                if aj != ak and (cj - ck) / (s * (aj - ak)) < 1:
                    candidates.add((cj - ck) / (s * (aj - ak)))
        grouped = set(self.group)
        for lam in candidates:
            d = [c - lam * s * a for a, c in coefs]
            free = [max(x, 0.0) for k, x in enumerate(d) if k not in grouped]
            nus = {0.0, *(max(d[k], 0.0) for k in self.group)}
            yield lam * s * self.beta, lam / 2, free, d, nus, abs(lam)

    def side_ok(self, s: int, t: int) -> bool:
        """The side ``sZ ≥ 1/2`` is decided right at position t (or cannot occur): the
        module docstring's condition at the best λ (0, 1 or a ratio ``c_k/(sα_k)``) and,
        for grouped terms, the best multiplier ν ≥ 0 on ``Σ X_k ≤ t``."""
        grouped = set(self.group)
        mags = [m(t) for _, _, m in self.terms]
        signed = sum(abs(a) * m(t) for a, m in self.signed)
        reach = s * self.beta + sum(
            max(s * a, 0.0) * m
            for k, ((a, _, _), m) in enumerate(zip(self.terms, mags, strict=True))
            if k not in grouped
        )
        if grouped:
            reach += max(max(s * self.terms[k][0], 0.0) for k in grouped) * t
        if reach + signed < 0.5:
            return True  # sZ < 1/2 everywhere: this side never happens
        base = self.const(t)
        best = math.inf
        free = [m for k, m in enumerate(mags) if k not in grouped]
        for shift, half, weights, d, nus, size in self.multipliers(s):
            value = base - shift + half
            value += sum(w * m for w, m in zip(weights, free, strict=True))
            if grouped:  # a multiplier ν ≥ 0 on Σ X_k ≤ t
                value += min(
                    nu * t + sum(max(d[k] - nu, 0.0) * mags[k] for k in self.group) for nu in nus
                )
            value += size * signed
            best = min(best, value)
        return best < 0.5


def horizon(
    checks: Iterable[Check], dtype: str, cap: int | None = None
) -> tuple[int, Check | None]:
    """The longest input length every check allows (at most ``cap`` and
    :data:`MAX_CLAIM`), with the check that limits it (None if none does); −1 when a
    check fails at BOS, so that no input is covered. ``dtype`` is unused: the checks of
    an :class:`Analysis` are already for its float type."""
    del dtype
    limit = MAX_CLAIM if cap is None else min(cap, MAX_CLAIM)
    worst: Check | None = None
    for check in checks:
        if check.at_bos:
            if not check.ok(0):
                return -1, check
            continue
        if check.ok(limit):
            continue
        if not check.ok(1):
            limit, worst = 0, check
            continue
        lo, hi = 1, limit  # ok(lo), not ok(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if check.ok(mid):
                lo = mid
            else:
                hi = mid
        limit, worst = lo, check
    return limit, worst


# ---------------------------------------------------------------------------- analysis


def _power_of_two(c: float) -> bool:
    m, _ = math.frexp(abs(c))
    return m == 0.5


@dataclass
class Analysis:
    """Magnitudes and errors of the variables of one lowering run in ``dtype``, the bit
    errors of Boolean forms, and the checks that decide its float horizon (module
    docstring)."""

    dtype: str
    vars: dict[str, Var] = field(default_factory=dict)
    forms: dict[frozenset[tuple[str, float]], Pair] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)

    # ------------------------------------------------------------ arithmetic

    @property
    def u(self) -> float:
        return UNIT_ROUNDOFF[self.dtype]

    @property
    def u64(self) -> float:
        return UNIT_ROUNDOFF["float64"]

    @property
    def divide_and_cast(self) -> float:
        """``u'``: the relative error of ``S/(t + 1)`` in float64 cast to the dtype."""
        if self.dtype == "float64":
            return self.u64
        return (1 + self.u) * (1 + self.u64) - 1

    def gamma(self, r: int) -> float:
        """``(1 + u)^r − 1``, the relative error of r roundings in a row (at most ``γ_r =
        r u/(1 − r u)``), rounded up."""
        return math.expm1(r * math.log1p(self.u)) * (1 + 1e-12)

    def roundings(self, form: Mapping[str, float], bias: float = 0.0, scale: float = 1.0) -> int:
        """The roundings of one row ``scale·(Σ α_k x_k) + b``: additions of its nonzero
        terms and bias, one for products by weights that are not powers of two, and three
        for weights the model's float64 and then the dtype cannot hold exactly (the
        weight rounds twice, then the product)."""
        terms = [c * scale for v, c in form.items() if c and self.vars[v].mag != ZERO]
        r = max(len(terms) - 1, 0) + (1 if bias else 0)
        kind = np.float64 if self.dtype == "float64" else np.float32
        if any(float(kind(c)) != c for c in terms):
            r += 3
        elif any(not _power_of_two(c) for c in terms):
            r += 1
        return r

    def exact_form(self, form: Mapping[str, float], bias: float = 0.0) -> bool:
        """Whether the row ``Σ α_k x_k + b`` computes exact integers: exact bits, integer
        weights and bias whose absolute sum is below 2^p (every partial sum an integer
        the dtype holds)."""
        if not float(bias).is_integer():
            return False
        size = abs(bias)
        for v, c in form.items():
            if self.vars[v].bits != EXACT or not float(c).is_integer():
                return False
            size += abs(c)
        return size < 2.0 ** PRECISION[self.dtype]

    def row(
        self,
        form: Mapping[str, float],
        bias: float = 0.0,
        roundings: int | None = None,
        last: bool = True,
    ) -> Affine:
        """The error of one matrix row ``Σ α_k x_k + b`` (integer units; ``b`` stored);
        ``roundings``: those of the whole row where ``form`` is only part of it. Without
        ``last`` the last rounding is left out: it is relative to the row's result (the
        caller's to count, as :meth:`threshold` does against ``|Z|``)."""
        if roundings is None:
            if self.exact_form(form, bias):
                return Affine(ZERO, {})
            roundings = self.roundings(form, bias)
        gamma = self.gamma(roundings if last else max(roundings - 1, 0))
        const = t1().scale(gamma * abs(bias))
        coefs: dict[str, float] = {}
        for name, alpha in form.items():
            v, a = self.vars[name], abs(alpha)
            if v.nonneg:
                # |α|(err + rel X) in, γ|α|(X + err + rel X) rounding
                const = const + v.err.scale(a * (1 + gamma))
                coefs[name] = coefs.get(name, 0.0) + a * (v.rel * (1 + gamma) + gamma)
            else:
                worst = v.err + v.mag.scale(max(v.rel, 0.0))
                const = const + worst.scale(a * (1 + gamma)) + v.mag.scale(a * gamma)
        return Affine(const, coefs)

    def collapse(self, bound: Affine) -> Poly:
        """``const + Σ c_k X_k`` at its largest over ``X_k ∈ [0, mag_k]``."""
        total = bound.const
        for name, c in bound.coefs.items():
            if c > 0:
                total = total + self.vars[name].mag.scale(c)
        return total

    def magnitude(self, form: Mapping[str, float]) -> Poly:
        """A bound on ``Σ |α_k||X_k|``."""
        total = ZERO
        for name, alpha in form.items():
            total = total + self.vars[name].mag.scale(alpha)
        return total

    def pair(self, form: Mapping[str, float]) -> Pair:
        """The bit errors of a Boolean form (value 0 or 1): registered, a single bit
        (possibly ``1 − b``), or the sum of its bits' worst errors."""
        key = frozenset(form.items())
        if key in self.forms:
            return self.forms[key]
        inexact = {v: c for v, c in form.items() if self.vars[v].bits != EXACT}
        if not inexact:
            return EXACT
        rest = {v: c for v, c in form.items() if v not in inexact}
        if len(inexact) == 1:  # b, or 1 − b with the 1 an exact bit that is 1 at tokens
            ((name, c),) = inexact.items()
            bits = self.vars[name].bits
            if bits is not None and c == 1 and not rest:
                return bits
            if bits is not None and c == -1 and len(rest) == 1 and self._one(rest):
                return (bits[1], bits[0])
        worst = 0.0
        for name, c in inexact.items():
            bits = self.vars[name].bits
            e = max(bits) if bits is not None else math.inf
            worst += abs(c) * e
        return (worst, worst)

    def _one(self, form: Mapping[str, float]) -> bool:
        """Whether ``form`` is a single exact bit that is 1 at every token (nonbos)."""
        ((name, c),) = form.items()
        v = self.vars[name]
        return c == 1 and v.ones

    def value_pair(self, form: Mapping[str, float]) -> Pair:
        """The bit errors of a Boolean form as one matrix row computes it."""
        e0, e1 = self.pair(form)
        if self.exact_form(form):
            return (e0, e1)
        rounding = self.gamma(self.roundings(form)) * sum(
            abs(c) * (1 + max(self.vars[v].bits or (math.inf, math.inf))) for v, c in form.items()
        )
        return (e0 + rounding, e1 + rounding)

    def register(self, form: Mapping[str, float], pair: Pair) -> None:
        """The bit errors of a Boolean form the lowering built from exclusive parts."""
        self.forms[frozenset(form.items())] = pair

    def exclusive(self, form: Mapping[str, float], parts: Sequence[Mapping[str, float]]) -> None:
        """The bit errors of ``form``, the sum of the Boolean forms ``parts`` that are
        exclusive (at most one part's guards hold, the others are an exact 0): the worst
        part's, on each side."""
        pairs = [self.pair(part) for part in parts]
        worst = (max((p[0] for p in pairs), default=0.0), max((p[1] for p in pairs), default=0.0))
        self.register(form, worst)

    def equality(
        self,
        eq: Mapping[str, float],
        neq: Mapping[str, float],
        low: Mapping[str, float],
        high: Mapping[str, float],
        conj: Mapping[str, float],
    ) -> None:
        """The bit errors of ``eq = low + high − conj`` and ``neq = conj − eq`` (``low =
        [D ≤ k]``, ``high = [D ≥ k]``, both exact 0 where the guards ``conj`` fail): where
        they hold, D = k makes both 1 and D ≠ k exactly one of them."""
        (l0, l1), (h0, h1), (c0, c1) = self.pair(low), self.pair(high), self.pair(conj)
        one_of = max(l1 + h0, l0 + h1)
        self.register(eq, (max(one_of + c1, c0), l1 + h1 + c1))
        self.register(neq, (max(2 * c1 + l1 + h1, 2 * c0), 2 * c1 + one_of))

    # ------------------------------------------------------------ inputs

    def exact_input(
        self, name: str, magnitude: Poly | None = None, ones: bool = False, token: bool = False
    ) -> None:
        """An embedding or positional Boolean (``magnitude``: a variable that is 0 at every
        token, such as the BOS indicator; ``ones``: 1 at every token, such as nonbos;
        ``token``: a token's own bit, of which one holds at each position)."""
        if magnitude is not None:
            self.vars[name] = Var(magnitude, bits=EXACT)
            return
        self.vars[name] = Var(
            t1(), nonneg=True, bits=EXACT, ones=ones, token=name if token else None
        )

    def one(self, name: str) -> None:
        """``name`` := ``1/(t + 1)``, the average of the BOS indicator (S = 1 exactly)."""
        self.vars[name] = Var(
            Poly.const(1), Poly.const(self.divide_and_cast), nonneg=True, fixed=1.0
        )

    # ------------------------------------------------------------ counts

    def average(self, name: str, value: Mapping[str, float], node: object) -> None:
        """``name`` := the causal uniform average of the Boolean form ``value`` (0 at BOS):
        the prefix sum S ≤ t of its values, off by ``e₀ t + (e₁ − e₀) S``."""
        e0, e1 = self.value_pair(value)
        mag = Poly.linear(0, 1)
        if e0 == e1 == 0:
            self.checks.append(Bound("an exact prefix sum", node, mag, float(2**53)))
            err, rel = ZERO, 0.0
        else:
            peak = 1 + max(e0, e1)  # |ṽ_s|
            sums = Poly((0.0, 1.0, 1.0)).scale(1.01 * self.u64 * peak)  # float64 running sum
            self.checks.append(Bound("a float64 prefix sum", node, Poly.linear(0, self.u64), 0.01))
            err, rel = Poly.linear(0, e0) + sums, e1 - e0
        u = self.divide_and_cast
        worst = err + mag.scale(max(rel, 0.0))
        ((first, coef),) = value.items() if len(value) == 1 else ((None, 0.0),)
        token = self.vars[first].token if first is not None and coef == 1 else None
        self.vars[name] = Var(mag, err + worst.scale(u), rel + u, nonneg=True, token=token)

    # ------------------------------------------------------------ thresholds

    def threshold(
        self,
        name: str,
        z: Mapping[str, float],
        row: Mapping[str, float],
        node: object,
        what: str,
        *,
        mode: str,
        guards: Sequence[Mapping[str, float]] = (),
        push: float = 0.0,
        bos_push: float = 0.0,
        width: float = 0.0,
        exact_at: int = 0,
        length: int | None = None,
    ) -> None:
        """``name`` := ``1[Z ≥ 0]`` for the form ``z`` (``|Z| ≥ 1/2``) where the guards
        ``ℓ_i`` hold; the units read ``row``: z, the guard ``∓push·(r − Σℓ)`` and the BOS
        term ``∓bos_push·bos`` (``−`` for ``exact_at`` 0, ``+`` for 1), through a Heaviside
        unit, the layer-norm sign, or (relu) the ramp ``clamp(y/2w + 1/2, 0, 1)`` of
        half-width ``w = width`` for inputs of length at most ``length``.

        Checks: (1) with the guards holding (their error when 1 counted), the decision of
        Z with the margin σ = w(t+1) used by the ramp; (2) a failing guard and (3) BOS
        move the row past the ramp by more than its error (stored units, M − |z| − w = 1).
        Result: exact bits for Heaviside and layer norm; for the ramp an exact value on
        the ``exact_at`` side and ``E`` (the units' own rounding) on the other."""
        # the ramp's units read row/(2w) ± 1/2; its w is ours up to float64's rounding
        r = self.roundings(row, 0.5, 1 / (2 * width)) if width else self.roundings(row)
        gamma = self.gamma(r)
        # (1) the decision, guards holding: their terms cancel in value, not in rounding.
        # The row's last rounding is relative to its result: |Z̃ − Z| ≤ E + u|Z̃| with E
        # the rest, which holds Z̃'s sign where κE + σ/(1 − u) < |Z|, κ = (1 + u)/(1 − u).
        # Every other partial sum is within the larger of the row's positive and negative
        # parts (a sub-sum of the terms of each sign): on the side where Z > 0 the
        # positive one, so only the terms of that sign count there; the guards' M·ℓ_i and
        # −rM·nonbos add at most rM(1 + e₁) to either.
        inner = self.gamma(max(r - 1, 0))
        inputs = self.row(z, roundings=0)  # the input errors alone
        const = inputs.const + t1().scale(inner * width)
        rounding: dict[str, float] = {}
        for var_name, alpha in z.items():
            v = self.vars[var_name]
            const = const + v.err.scale(inner * abs(alpha))
            if v.nonneg:
                rounding[var_name] = inner * abs(alpha) * (1 + v.rel)
            else:
                const = const + v.mag.scale(inner * abs(alpha) * (1 + max(v.rel, 0.0)))
        if guards:
            e1s = [self.pair(g)[1] for g in guards]
            const = const + t1().scale(
                push * sum(e1s) + inner * push * len(guards) * (1 + max(e1s))
            )
        kappa = (1 + self.u) / (1 - self.u) if r else 1.0
        const = const.scale(kappa) + t1().scale(width * (1 + 1e-9) * kappa)
        error = Affine(const, {v: c * kappa for v, c in inputs.coefs.items()})
        self._decision(z, error, what, node, {v: c * kappa for v, c in rounding.items()})
        # (2, 3) pushes: row error plus the guards' errors, below the slack of 1 (stored)
        row_err = self.collapse(self.row(row, width, roundings=r)).over_t1()
        if guards:
            worst = sum(push * max(self.pair(g)) for g in guards)
            self.checks.append(Bound(what + " (its guard)", node, row_err + Poly.const(worst)))
        if bos_push:
            at_bos = Poly.const(2 * (row_err(0) + gamma * bos_push))
            self.checks.append(Bound(what + " (its BOS guard)", node, at_bos, bos=True))
        if mode == "layernorm":  # (z/2)² must not overflow: |z| below 2^(e_max/2 − 1)
            limit = 2.0 ** (60 if self.dtype == "float32" else 500)
            size = self.magnitude(row).over_t1()
            self.checks.append(Bound(what + " (its layer norm)", node, size, limit))
        if mode != "relu":
            self.vars[name] = boolean(EXACT)
            return
        # the ramp's units on their active side: each within γ(W) of its real value on the
        # computed inputs (whose error cancels in their difference), then the output sum
        assert length is not None
        stored = self.magnitude(row).stored_max() + row_err(length)
        w_row = stored / (2 * width) + 0.5
        active = 2 * gamma * w_row
        if exact_at == 0:
            self.vars[name] = boolean((0.0, active + self.u * (1 + active)))
            return
        g_err = self.pair_of_all(guards)[1]
        active += self.gamma(2) * (2 + 2 * w_row + g_err)
        self.vars[name] = boolean((active + g_err, g_err))

    def pair_of_all(self, guards: Sequence[Mapping[str, float]]) -> Pair:
        """The bit errors of the unit ``ReLU(2Σℓ − 2r + nonbos)`` (``ReLU(nonbos)`` for no
        guard): exact at 0 while the slack holds, twice the inputs' errors at 1."""
        if not guards:
            return EXACT
        inputs = [max(self.pair(g)) for g in guards]
        if not any(inputs):
            return EXACT
        rounding = self.gamma(len(guards) + 1) * (2 * len(guards) * 2 + 1)
        return (0.0, 2 * sum(inputs) + rounding)

    def _decision(
        self,
        z: Mapping[str, float],
        error: Affine,
        what: str,
        node: object,
        rounding: Mapping[str, float],
    ) -> None:
        beta, const = 0.0, error.const
        terms: list[tuple[float, float, Poly]] = []
        sided: list[float] = []
        signed: list[tuple[float, Poly]] = []
        group: list[int] = []
        tokens: set[str] = set()
        coefs = dict(error.coefs)
        for name, alpha in z.items():
            v = self.vars[name]
            if v.fixed is not None:
                beta += alpha * v.fixed
                worst = max(coefs.pop(name, 0.0), 0.0) + rounding.get(name, 0.0)
                const = const + Poly.const(worst * v.fixed)
            elif v.nonneg:
                if v.token is not None and v.bits is None and v.token not in tokens:
                    tokens.add(v.token)
                    group.append(len(terms))
                terms.append((alpha, coefs.pop(name, 0.0), v.mag))
                sided.append(rounding.get(name, 0.0))
            else:
                signed.append((alpha, v.mag))
        for name, c in coefs.items():  # error terms of variables Z does not read
            terms.append((0.0, c, self.vars[name].mag))
            sided.append(0.0)
        check = Decision(
            what,
            node,
            const,
            beta,
            tuple(terms),
            rounding=tuple(sided),
            signed=tuple(signed),
            group=tuple(group),
        )
        self.checks.append(check)

    # ------------------------------------------------------------ Boolean functions

    def table(
        self, name: str, inputs: Sequence[Mapping[str, float]], node: object, exact_at: int
    ) -> None:
        """``name`` := a Boolean function of {0,1} forms by units over ``±2x``
        (:func:`ffn.boolean_function`, :func:`ffn.all_of`, :func:`ffn.any_of`) with no
        unit active on the side ``exact_at``. Units that should be off stay at
        ≤ −1 + 2Σe + ρ < 0 (checked); on the other side the output is off by ``2Σe + ρ``,
        ρ the units' rounding."""
        errors = [max(self.pair(x)) for x in inputs]
        if not any(errors) and all(self.exact_form(x) for x in inputs):
            self.vars[name] = boolean(EXACT)
            return
        m = len(inputs)
        terms = sum(len(x) for x in inputs) + 1  # the inputs' variables and nonbos
        rho = self.gamma(terms) * (2 * sum(1 + e for e in errors) + 2 * m + 1)
        active = 2 * sum(errors) + rho
        self.checks.append(Bound("a Boolean formula", node, Poly.const(active), 1.0))
        if exact_at == 0:
            self.vars[name] = boolean((0.0, active))
        else:
            self.vars[name] = boolean((active + self.u * (1 + active), 0.0))

    # ------------------------------------------------------------ min, max, gates

    def relu(self, name: str, z: Mapping[str, float], value: Poly | None = None) -> None:
        """``name`` := ``ReLU(z)``: one unit, nonnegative, 1-Lipschitz. ``value`` bounds
        ``|z|`` when the program gives a tighter bound than the variables of z do."""
        self.vars[name] = Var(value or self.magnitude(z), self.collapse(self.row(z)), nonneg=True)

    def gate(
        self,
        name: str,
        bit: Mapping[str, float],
        x: Mapping[str, float],
        bound: float,
        value: Poly | None = None,
        nonneg: bool = False,
        node: object = None,
    ) -> None:
        """``name`` := ``p·x`` by the big-M pair ``ReLU(±x + M·p − M)`` (|x| ≤ M stored):
        off by the error of x, M times the bit's error where p = 1, and the rounding of
        the pair (2 terms more than x, magnitudes |x| + 2M). Where p = 0 both units are
        off while ``|x| + err_x + M e₀ + ρ < M`` (checked where |x| stays below M at the
        tokens), so the bit's error there does not pass; otherwise it does. ``value``
        bounds ``|x|`` in integer units when the program gives a tighter bound than the
        variables of x do."""
        e0, e1 = self.pair(bit)
        # x's terms, the bit, the bias: the last rounding is relative to the result (|x|
        # where p = 1), the others to partial sums, which hold M·p and −M at most once
        # each (together they are 0): |partial| ≤ |x| + M
        inner = self.gamma(self.roundings(x) + len(bit))
        mag = value or self.magnitude(x)
        inputs = self.collapse(self.row(x))
        rows = (mag + t1().scale(bound)).scale(inner) + mag.scale(2 * self.u)
        slack = bound - mag.token_max()
        if e0 and slack > 0:
            off = inputs.over_t1() + rows.over_t1() + Poly.const(bound * e0)
            self.checks.append(Bound("a conditional's gate", node, off, slack))
            e = e1
        else:
            e = max(e0, e1)
        self.vars[name] = Var(mag, inputs + t1().scale(bound * e) + rows, nonneg=nonneg)

    def lookup(self, name: str, value: Mapping[str, float]) -> None:
        """``name`` := ``value`` at another position: hard attention copies it exactly."""
        pair = self.value_pair(value)
        self.vars[name] = boolean(pair)

    def soft_lookup(self, name: str, value: Mapping[str, float], offset: int, node: object) -> None:
        """``name`` := the softmax lookup of the bit ``value`` at ``t − offset`` on the
        integer scores ``3(2(t − c)j − j²)``: exact while every integer met on the way is
        below ``2^p`` (``9t² + 6ct``); the exponentials, sums and the division then add
        :data:`SOFTMAX_LOOKUP_ERROR` u, and the values their worst error."""
        limit = float(2 ** PRECISION[self.dtype])
        scores = Poly((0.0, 6.0 * offset, 9.0))
        self.checks.append(Bound("the integer scores of a lookup", node, scores, limit))
        e = max(self.value_pair(value))
        self.vars[name] = Var(t1(), nonneg=True, soft=e + SOFTMAX_LOOKUP_ERROR * self.u)

    def _soft_slack(self, soft: str, node: object) -> None:
        error = self.vars[soft].soft
        assert error is not None
        self.checks.append(Bound("a softmax lookup", node, Poly.const(error), SOFT_SLACK))

    def clean(self, name: str, soft: str, node: object) -> None:
        """``name`` := ``2·ReLU(b − 1/4) − 2·ReLU(b − 3/4)``: the soft bit b made exactly
        0 (both units off) or 1 (each unit rounds once on values below 1, the weights 2
        are exact, the sum rounds once)."""
        self._soft_slack(soft, node)
        unit = self.gamma(1) * (1.1 + 0.75)
        self.vars[name] = boolean((0.0, 4 * unit + self.u * (1 + 4 * unit)))

    def soft_gate(self, name: str, soft: str, x: Mapping[str, float], node: object) -> None:
        """``name`` := ``x`` where the soft bit is ≥ 3/4, 0 where ≤ 1/4, for 0 ≤ x ≤ 1
        stored: ``ReLU(x + 2(b − 3/4)) − ReLU(2(b − 3/4))``: exact 0 on one side; on the
        other the bit's error cancels and each unit rounds on values below 4.7."""
        self._soft_slack(soft, node)
        gamma = self.gamma(self.roundings(x) + 2)
        stored = gamma * 4.7 + self.gamma(2) * 3.7 + self.u * 1.1
        inputs = self.collapse(self.row(x))
        self.vars[name] = Var(Poly.const(1), inputs + t1().scale(stored), nonneg=True)

    # ------------------------------------------------------------ outputs

    def output(self, form: Mapping[str, float], rule: str, node: object, what: str) -> None:
        """The decision of an output read from ``form``: a Boolean ``> 1/2``, a count
        ``round(out·(t + 1))`` (the product rounds once more, in float64)."""
        err = self.collapse(self.row(form))
        # at BOS the readout adds (e − w·x_BOS)·bos, e the empty prefix's value: one more
        # term, of magnitude at most 1 + the form's (the BOS values are the form's at t = 0)
        at_bos = err(0) + self.gamma(self.roundings(form) + 2) * (1 + 2 * self.magnitude(form)(0))
        self.checks.append(Bound(what + " (at BOS)", node, Poly.const(2 * at_bos), 0.5, bos=True))
        if rule == "bool":
            self.checks.append(Bound(what, node, err.over_t1(), 0.5))
            return
        total = err + (self.magnitude(form) + err).scale(self.u64)
        self.checks.append(Bound(what, node, total, 0.5))
