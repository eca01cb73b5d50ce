"""Layer-norm constructions (Transformer Cookbook §6, and the hash of §5.3.3).

Our layer norm is *selective*: an MLP may layer-normalise groups of its hidden
pre-activations (``FFNBlock.norm_groups``; ε = 0, population std, no gain or bias; a
group with zero variance becomes 0), the W^(N)-before-LN architecture of §5.3.3.

- :func:`normalize` (§6.3): the zero-mean group ``(x, −x)`` is only rescaled, to
  ``x / √(mean x²)``, and read back signed;
- :func:`clip` (§6.4): ``clip(x, −δ, δ)`` with two ReLUs;
- :func:`sign` (§6.4): clip then normalise: ``sign(x_k)`` when every ``|x_k| ≥ δ``;
- :func:`positive`: ``1[z > 0]`` from the normalised pair ``(z, 0)``, no clipping (Yang &
  Chiang's comparison; the C-RASP compiler's ``layernorm`` mode);
- :func:`layernorm_hash` (§5.3.3): ``lh(x) = LN([x, 1, −x, −1])`` from ``(x·s, s)``, any
  scale s > 0, for :func:`crasp_compiler.cookbook.attention.lookup_layernorm_hash`.

"""

from __future__ import annotations

import math
from collections.abc import Sequence

from crasp_compiler.cookbook.blocks import (
    EXACT,
    Exactness,
    FFNBlock,
    Form,
    Unit,
    as_form,
    output_name,
    var,
)


def _names(outs: Sequence[str], count: int) -> list[str]:
    outs = list(outs)
    if len(outs) != count:
        raise ValueError(f"expected {count} output names, got {len(outs)}")
    for out in outs:
        output_name(out)
    if len(set(outs)) != len(outs):
        raise ValueError(f"output names must be distinct: {outs}")
    return outs


def _delta(delta: float) -> float:
    if isinstance(delta, bool) or not isinstance(delta, (int, float)):
        raise ValueError(f"delta must be a number, not {delta!r}")
    if not math.isfinite(delta) or delta <= 0:
        raise ValueError(f"delta must be a finite number > 0, not {delta!r}")
    return float(delta)


def normalize(xs: Sequence[Form], outs: Sequence[str], *, label: str = "") -> FFNBlock:
    """Layer norm that only rescales (§6.3): ``out_k = x_k / √((1/m) Σ_j x_j²)``.

    The 2m hidden pre-activations ``(x_1..x_m, −x_1..−x_m)`` form one norm group. Their
    mean is 0 and their population variance ``(1/2m) Σ_j 2x_j² = (1/m) Σ_j x_j²``, so
    layer norm (ε = 0) gives ``u = (c·x, −c·x)`` with ``c = 1/√(mean_j x_j²) = √m/‖x‖``;
    ``out_k = ReLU(u_k) − ReLU(u_{k+m}) = c·x_k``. The output has ``Σ out_k² = m``, any
    scale of x gives the same output. Exact whenever some x_k ≠ 0; when every x_k = 0
    the group has zero variance and every output is 0 (in float64: while the squares of
    the x_k do not underflow, |x_k| above about 1e-150). 2m units, one norm group.
    """
    xs = [as_form(x) for x in xs]
    if not xs:
        raise ValueError("normalize needs at least one input")
    m = len(xs)
    outs = _names(outs, m)
    units = [Unit(x, 0.0) for x in xs] + [Unit(-x, 0.0) for x in xs]
    outputs = {out: {k: 1.0, k + m: -1.0} for k, out in enumerate(outs)}
    text = "exact: out_k = x_k / sqrt(mean_j x_j^2) (all 0 when every x_k = 0)"
    return FFNBlock(units, outputs, Exactness(text), label, norm_groups=[list(range(2 * m))])


def clip(x: Form, out: str, *, delta: float, label: str = "") -> FFNBlock:
    """``out = clip(x, −δ, δ) = ReLU(x + δ) − ReLU(x − δ) − δ`` (§6.4, ``clip_δ``).

    For x ≥ δ: ``2δ − δ = δ``; for x ≤ −δ: ``−δ``; between: ``x + δ − δ = x``. Exact for
    every x; 2 units (the paper's ``b_2 = [−δ, δ]`` is this for the pair (x, −x))."""
    delta = _delta(delta)
    (out,) = _names([out], 1)
    units = [Unit(as_form(x), delta), Unit(as_form(x), -delta)]
    return FFNBlock(units, {out: {0: 1.0, 1: -1.0}}, EXACT, label, constants={out: -delta})


def sign(
    xs: Sequence[Form], outs: Sequence[str], *, delta: float, label: str = ""
) -> list[FFNBlock]:
    """``out_k = sign(x_k)`` by clipping and layer norm with ε = 0 (§6.4).

    Each x_k is clipped to [−δ, δ] (:func:`clip`, output ``out_k + ".clip"``), then the
    clipped vector is normalised with its negation (:func:`normalize`). When every
    ``|x_k| ≥ δ`` the clipped values are ±δ, their mean square δ², so ``out_k = ±1``.
    Exact when every ``|x_k| ≥ δ``; every output is 0 when every x_k = 0 (the paper's
    "outputs 0 on inputs of 0"); otherwise the outputs are ``clip(x_k)/√(mean clip²)``,
    not signs. 2m + 2m units in two MLP sublayers (two layers). With selective layer
    norm one pair per group (:func:`positive`) needs no clipping and one layer.
    """
    delta = _delta(delta)
    xs = [as_form(x) for x in xs]
    if not xs:
        raise ValueError("sign needs at least one input")
    outs = _names(outs, len(xs))
    clips = [
        clip(x, f"{out}.clip", delta=delta, label=label) for x, out in zip(xs, outs, strict=True)
    ]
    norm = normalize([var(f"{out}.clip") for out in outs], outs, label=label)
    norm.exact = Exactness(f"exact: out_k = sign(x_k) when every |x_k| >= {delta:g}")
    return [*clips, norm]


def positive(z: Form, out: str, *, label: str = "") -> FFNBlock:
    """``out = 1[z > 0]``: the layer norm of the pair ``(z, 0)`` is
    ``(sign z, −sign z)`` at any scale of z (mean ``z/2``, deviations ``±z/2``, std
    ``|z|/2``); ReLU of the first is ``1[z > 0]``.

    Exact for every z in real arithmetic (z = 0 gives 0: a zero-variance group), so a
    comparison whose argument is never 0 is decided at every length. In binary floating
    point the mean, the deviations and ``√(fl((z/2)²)) = |z/2|`` are exact (while the
    square does not underflow: |z| above about 1e-150 in float64, 1e-18 in float32), so
    the output is exactly 0 or 1 where the square root is correctly rounded, and within
    a few units of roundoff of it otherwise. (The pair ``(z, −z)`` would be exact only if
    its two rows rounded alike.) 2 units, one norm group, one layer.
    """
    z = as_form(z)
    units = [Unit(z, 0.0), Unit(Form(), 0.0)]
    return FFNBlock(
        units,
        {output_name(out): {0: 1.0}},
        Exactness("exact: out = 1[z > 0] (layer norm, ε = 0)"),
        label,
        norm_groups=[[0, 1]],
    )


def layernorm_hash(xs: Form, s: Form, outs: tuple[str, str], *, label: str = "") -> FFNBlock:
    """The layer-norm hash (§5.3.3): ``lh(x) = LN([x, 1, −x, −1]) = √(2/(x²+1))·(x, 1, −x, −1)``.

    ``xs`` is the form of ``x·s`` and ``s`` of a scale ``s > 0`` (s = ``one`` for a plain
    x; ``s = inverse`` when only ``x/(t+1)`` and ``1/(t+1)`` are at hand). This is
    :func:`normalize` of ``(x·s, s)``: ``(a, b) = (x·s, s)/√(((x·s)² + s²)/2)
    = √2·(x, 1)/√(x² + 1)`` for every s > 0 (scale invariance), written to
    ``outs = (a, b)``; the hash is ``(a, b, −a, −b)`` and
    ``lh(q)·lh(k) = 2(aa' + bb') = 4(qk + 1)/√((q²+1)(k²+1))``, which is at most 4 with
    equality exactly at q = k (Cauchy–Schwarz on (q, 1) and (k, 1)). Exact for s > 0
    (s < 0 negates the hash; s = 0 = x·s gives 0). 4 units, one norm group.
    """
    block = normalize([xs, s], outs, label=label)
    block.exact = Exactness("exact for s > 0: (a, b) = sqrt(2)·(x, 1)/sqrt(x^2 + 1)")
    return block
