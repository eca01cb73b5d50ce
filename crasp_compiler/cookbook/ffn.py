"""Feed-forward constructions (Transformer Cookbook §4), on {0,1} Booleans and bounded values.

Every construction here is exact in real arithmetic under the condition it states.
``nonbos`` and ``bos`` name the variables that are 1 on tokens / at BOS (0 elsewhere):
guarding with them keeps every Boolean 0 at BOS, so BOS never counts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import product

from crasp_compiler.cookbook.blocks import EXACT, Exactness, FFNBlock, Form, Unit, form_add


def threshold(z: Form, out: str, bound: float, bos: str, label: str = "") -> FFNBlock:
    """``out = H(z − M·bos)`` with ``H(v) = 1[v ≥ 0]``: 1 iff ``z ≥ 0`` at tokens, 0 at BOS.

    Exact when ``|z| ≤ bound`` at BOS (M = bound + 1) and z is never in (−margin, 0).
    """
    unit = Unit(form_add((1, z), (-(bound + 1), {bos: 1})), 0.0, "heaviside")
    return FFNBlock([unit], {out: {0: 1.0}}, Exactness("exact at every length (Heaviside)"), label)


def ramp(z: Form, out: str, margin: float, bound: float, bos: str, label: str = "") -> FFNBlock:
    """ReLU stand-in for ``threshold``: ``clamp(z/(2δ) + 1/2, 0, 1)`` with δ = ``margin``.

    Equals ``1[z ≥ 0]`` whenever ``|z| ≥ δ`` (exact for lengths where the margin holds).
    """
    guarded = form_add((1, z), (-(bound + margin + 1), {bos: 1}))
    s = {var: coef / (2 * margin) for var, coef in guarded.items()}
    units = [Unit(s, 0.5), Unit(s, -0.5)]
    return FFNBlock(
        units, {out: {0: 1.0, 1: -1.0}}, Exactness(f"exact when |z| ≥ {margin:.3g}"), label
    )


def sign_threshold(z: Form, out: str, bound: float, bos: str, label: str = "") -> FFNBlock:
    """``out = 1[z ≥ 0]`` with ReLU units and layer norm (Yang & Chiang's sign).

    The pair ``(z', −z')`` with ``z' = z − M·bos`` is layer-normalised (ε = 0) to
    ``(sign z', −sign z')``; ``ReLU`` of the first is ``1[z' > 0]``. Exact at every length
    in real arithmetic when z is never 0 (comparisons threshold at half-integer multiples
    of ``ONE``) and ``|z| ≤ bound`` at BOS (M = bound + 1), so BOS reads 0.
    """
    guarded = form_add((1, z), (-(bound + 1), {bos: 1}))
    units = [Unit(guarded, 0.0), Unit(form_add((-1, guarded)), 0.0)]
    return FFNBlock(
        units,
        {out: {0: 1.0}},
        Exactness("exact at every length when z ≠ 0 (layer norm, ε = 0)"),
        label,
        norm_groups=[[0, 1]],
    )


def boolean_function(
    inputs: Sequence[Form],
    table: Callable[[tuple[bool, ...]], bool],
    out: str,
    nonbos: str,
    label: str = "",
) -> FFNBlock:
    """Any Boolean function of m {0,1} inputs, by its truth table (one unit per row).

    Row ``a`` gets ``ReLU(Σ_{a_k=1} x_k − Σ_{a_k=0} x_k − |a| + nonbos)``, which is 1 iff
    ``x = a`` on a token and 0 at BOS; rows are exclusive, so the output is the sum over
    true rows — or ``nonbos`` minus the sum over false rows, whichever is smaller.
    Exact for {0,1} inputs that are 0 at BOS.
    """
    rows = list(product((False, True), repeat=len(inputs)))
    true_rows = [row for row in rows if table(row)]
    complement = len(true_rows) > len(rows) // 2
    chosen = [row for row in rows if table(row) != complement]
    units, coefs = [], {}
    for k, row in enumerate(chosen):
        terms = [(1 if bit else -1, x) for bit, x in zip(row, inputs, strict=True)]
        form = form_add(*terms, (1, {nonbos: 1}))
        units.append(Unit(form, -float(sum(row))))
        coefs[k] = -1.0 if complement else 1.0
    block = FFNBlock(units, {out: coefs}, Exactness("exact for {0,1} inputs"), label)
    if complement:
        coefs[len(units)] = 1.0
        units.append(Unit({nonbos: 1}, 0.0))
    return block


def gate(b: Form, x: Form, bound: float, out: str, label: str = "") -> FFNBlock:
    """Big-M gating ``out = b · x`` for ``b ∈ {0,1}`` and ``|x| ≤ M``:
    ``ReLU(x + M·b − M) − ReLU(−x + M·b − M)``. Exact when ``|x| ≤ bound``."""
    m = float(bound)
    units = [
        Unit(form_add((1, x), (m, b)), -m),
        Unit(form_add((-1, x), (m, b)), -m),
    ]
    return FFNBlock(units, {out: {0: 1.0, 1: -1.0}}, Exactness(f"exact for |x| ≤ {m:g}"), label)


def soft_gate(b: Form, x: Form, bound: float, out: str, label: str = "") -> FFNBlock:
    """``out = x`` where ``b ≥ 3/4`` and ``0`` where ``b ≤ 1/4``, for ``0 ≤ x ≤ bound``:
    ``ReLU(x + K(b − 3/4)) − ReLU(K(b − 3/4))`` with ``K = 2·bound``. Reads a soft bit
    (a softmax lookup of a {0,1} value) and gates in one layer."""
    k = 2.0 * bound
    gap = form_add((k, b))
    units = [Unit(form_add((1, x), (1, gap)), -0.75 * k), Unit(gap, -0.75 * k)]
    return FFNBlock(
        units,
        {out: {0: 1.0, 1: -1.0}},
        Exactness(f"exact for b ∉ (1/4, 3/4), 0 ≤ x ≤ {bound:g}"),
        label,
    )


def relu_of(z: Form, out: str, label: str = "") -> FFNBlock:
    """``out = ReLU(z)``: with a linear read this gives ``min(x, y) = y − ReLU(y − x)``
    and ``max(x, y) = y + ReLU(x − y)``. Exact."""
    return FFNBlock([Unit(dict(z), 0.0)], {out: {0: 1.0}}, EXACT, label)
