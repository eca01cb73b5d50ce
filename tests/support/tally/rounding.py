"""How long a compiled Tally model stays exact in float64 and in float32.

The model (:mod:`tests.support.tally.lower`) is exact at every length in real
arithmetic. At position t (BOS is t = 0) its heads write averages ``y = S/(t + 1)``
with S an integer (a prefix count; t for ``length``; 1 for ``ONE``), and each Heaviside
unit reads ``z = Σ_k w_k y_k`` over K nonzero weights: ``z* = N/(t + 1)`` in real
arithmetic, with ``N = s·Z + c₀``, Z an integer and c₀ = ±1/2, so ``|z*| ≥ 1/(2(t + 1))``.

Rounding (unit roundoff u of the run's type: 2^-53 for float64, 2^-24 for float32;
u₆₄ = 2^-53):

- *averages*: the runtimes add a uniform head's values (0/1 token tests) in float64 —
  integers below 2^53, no rounding — divide by t + 1 in float64 and cast to the run's
  type, so ``ỹ = y(1 + θ)``, ``|θ| ≤ u' = (1 + u)(1 + u₆₄) − 1``; the head's output
  matrix copies (one weight 1 per row) into a dimension that held 0 (the model has one
  layer: no dimension is reused before its MLP): exact;
- *the unit's row*: its weights are integers and half-integers of magnitude at most
  2^20 + 1/2 (:data:`tests.support.tally.parse.LIMIT`), exact in both types, and the
  bias is 0; a dot product of K nonzero terms, summed in any order, is within
  ``γ_K Σ|w_k ỹ_k|`` of ``Σ w_k ỹ_k``, ``γ_K = K u/(1 − K u)`` (Higham, *Accuracy and
  Stability of Numerical Algorithms*, §3.1).

So ``|z̃ − z*| ≤ E·Σ_k |w_k| y_k`` with ``E = u' + γ_K(1 + u')``, and
``(t + 1) Σ_k |w_k| y_k ≤ m·t + |c|``, where ``m = max_a |α_a| + |α_length|`` (the counts
add up to t) and c is the weight on ONE. The unit is decided right, ``H(z̃) = H(z*)``,
when ``E·(m·t + |c|) < 1/2``. The bound grows with t, so the horizon is the largest t
for which it holds (every length when m = 0), capped at 2^53 − 1, beyond which the
float64 sums stop being exact. A Heaviside unit decided right is exactly 0 or 1, a rule's
bit is an integer combination of its units plus an integer (exact), the readout copies
it and ``out > 1/2`` decides it: every unit decided right makes every output exact.
"""

from __future__ import annotations

import math
from fractions import Fraction

# The float types analysed, with their unit roundoff.
UNIT_ROUNDOFF = {"float64": Fraction(1, 2**53), "float32": Fraction(1, 2**24)}
# The longest input ever claimed: t + 1 and every prefix count exact in float64.
MAX_CLAIM = 2**53 - 1


def unit_error(terms: int, dtype: str) -> Fraction:
    """E: the error of a unit's pre-activation relative to ``Σ|w_k| y_k`` (module doc)."""
    u = UNIT_ROUNDOFF[dtype]
    average = (1 + u) * (1 + UNIT_ROUNDOFF["float64"]) - 1
    dot = terms * u / (1 - terms * u)
    return average + dot * (1 + average)


def horizon(terms: int, slope: int, constant: Fraction, dtype: str) -> int:
    """The longest input on which a unit with ``terms`` nonzero weights, count weights
    adding up to ``slope`` (m) and weight ``constant`` on ONE is decided right in
    ``dtype``: the largest t with ``E·(m·t + |c|) < 1/2`` (−1: not even the empty
    input)."""
    error = unit_error(terms, dtype)
    room = Fraction(1, 2) - error * abs(constant)
    if room <= 0:
        return -1
    if slope == 0:
        return MAX_CLAIM
    return min(MAX_CLAIM, math.ceil(room / (error * slope)) - 1)
