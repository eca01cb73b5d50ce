"""Dyck languages built by hand (Transformer Cookbook §9.2), with plain-Python references.

- :func:`dyck1_uniform` (§9.2.1, uniform): 2 layers, 2 heads. Outputs the scaled balance
  ``B_t/(t+1)`` and the averaged error ``err_t``; the decision is external,
  :func:`dyck1_external_accept`. Exact at every length.
- :func:`dyck1_nonuniform` (§9.2.1, non-uniform): the same two layers plus EqZero
  comparators and a Boolean AND: one ``bool`` output ``accept`` per position (the prefix
  up to t is in Dyck-1), exact for inputs of length ≤ N.
- :func:`dyck_kd` (§9.2.2–9.2.3): Dyck-k-D (k bracket types, depth ≤ D) by D rounds of
  iterated matching: D + 1 layers, 2D + 2 heads. One ``bool`` output ``accept`` per
  position (the prefix up to t is in Dyck-k-D) and ``unmatched`` (the position is still
  active after D rounds). Exact at every length (Heaviside zero test) or for lengths ≤ N
  (ReLU zero test, ``max_len=N``). Dyck-1-2 is ``dyck_kd(1, 2)``.

References: :func:`dyck_prefix_members` (a stack recogniser with a depth bound),
:func:`dyck1_statistics` (the exact balance and error values), :func:`iterated_matching`
(the paper's rounds on a plain list).

Positions: BOS is t = 0 and token i is t = i. The paper averages over the tokens 1..i;
our causal averages also see BOS, so every denominator is t + 1 instead of i (see
:func:`dyck1_nonuniform` for the tolerances this changes).

What the tests found in the paper (§9.2): "((())" is not in Dyck-1 as stated (3 opens,
2 closes); the Dyck-1-2 example "((())())()" has depth 3, so it is *not* in Dyck-1-2,
and filtering out the first round's matches "()()()" leaves "(())", not "()" (a
string with the narrated behaviour is "(()())()"); the error bound 1/n² becomes
1/(N+1)² here.

Run ``python examples/python/dyck.py`` for a demo.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from itertools import pairwise

from crasp_compiler.assemble.builder import Builder
from crasp_compiler.cookbook import attention, ffn
from crasp_compiler.cookbook.blocks import Exactness, Form, HeadBlock, form_add, var
from crasp_compiler.model.model import Model

PAIRS = [("(", ")"), ("[", "]"), ("{", "}"), ("<", ">")]
PAPER_DYCK12_EXAMPLE = "((())())()"  # §9.2.2's example: depth 3
RELU_KNOTS = ((-1.0, 0.0), (0.0, 0.0), (1.0, 1.0))  # ReLU as a one-unit CPWL function
WEIGHTINGS = ("unique", "average")


def bracket_pairs(k: int) -> list[tuple[str, str]]:
    """The k (open, close) pairs: ``()``, ``[]``, ``{}``, ``<>``, then ``(5 )5``, …"""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"the number of bracket types must be an integer ≥ 1, not {k!r}")
    return PAIRS[:k] + [(f"({c}", f"){c}") for c in range(len(PAIRS) + 1, k + 1)]


# ---------------------------------------------------------------------------- references


def dyck_prefix_members(word: Sequence[str], k: int = 1, depth: int | None = None) -> list[bool]:
    """Entry t (t = 0..n): whether ``word[:t]`` is in Dyck-k (with nesting depth ≤
    ``depth`` when given). A stack recogniser: once a close has no matching open or the
    stack exceeds the depth, no longer prefix is in the language."""
    pairs = bracket_pairs(k)
    opens = {o: c for c, (o, _) in enumerate(pairs)}
    closes = {x: c for c, (_, x) in enumerate(pairs)}
    stack: list[int] = []
    broken = False
    out = [True]
    for symbol in word:
        if symbol not in opens and symbol not in closes:
            raise ValueError(f"{symbol!r} is not a bracket of Dyck-{k}")
        if not broken:
            if symbol in opens:
                stack.append(opens[symbol])
                broken = depth is not None and len(stack) > depth
            elif stack and stack[-1] == closes[symbol]:
                stack.pop()
            else:
                broken = True
        out.append(not broken and not stack)
    return out


def dyck1_statistics(word: Sequence[str]) -> tuple[list[Fraction], list[Fraction]]:
    """Exact values, t = 0..n, of the uniform construction's outputs: the scaled balance
    ``b_t = B_t/(t+1)`` and the error ``err_t = (1/(t+1)) Σ_{s≤t} max(0, −b_s)``
    (B_t = #( − #) in the first t tokens; BOS contributes 0)."""
    balance, error = [Fraction(0)], [Fraction(0)]
    depth, errors = 0, Fraction(0)
    for t, symbol in enumerate(word, start=1):
        if symbol not in ("(", ")"):
            raise ValueError(f"{symbol!r} is not a bracket of Dyck-1")
        depth += 1 if symbol == "(" else -1
        b = Fraction(depth, t + 1)
        errors += max(Fraction(0), -b)
        balance.append(b)
        error.append(errors / (t + 1))
    return balance, error


def iterated_matching(word: Sequence[str], k: int, rounds: int) -> list[bool]:
    """The paper's algorithm (§9.2.2) on a list: in each round every active position
    finds its nearest active neighbour on each side; an open whose right neighbour is its
    close (or a close whose left neighbour is its open) is matched and made inactive.
    Returns, per token, whether it is still active after ``rounds`` rounds."""
    pairs = bracket_pairs(k)
    kind = {}
    for c, (o, x) in enumerate(pairs):
        kind[o], kind[x] = (c, +1), (c, -1)
    active = [True] * len(word)
    for _ in range(rounds):
        alive = [i for i, a in enumerate(active) if a]
        matched = set()
        for left, right in pairwise(alive):
            (c, sign), (d, other) = kind[word[left]], kind[word[right]]
            if c == d and sign == +1 and other == -1:
                matched |= {left, right}
        for i in matched:
            active[i] = False
    return active


# ---------------------------------------------------------------------------- Dyck-1


def _balance(b: Builder) -> Form:
    """Layer 1 (Avg←, §5.1.2): ``b_t = (#( − #))/(t + 1) = B_t/(t+1)``."""
    o = b.token("(") - b.token(")")
    return b.add(attention.average(o, "balance", label="balance B_t/(t+1)"))


def _error(b: Builder, balance: Form) -> Form:
    """``E_t = ReLU(−b_t)`` (1 unit), then ``err_t = (1/(t+1)) Σ_{s≤t} E_s`` (Avg←)."""
    violation = b.add(ffn.cpwl(-balance, RELU_KNOTS, "E", label="E_t = ReLU(-B_t/(t+1))"))
    return b.add(attention.average(violation, "error", label="err_t = average of E"))


def dyck1_uniform() -> Model:
    """Dyck-1, uniform (§9.2.1): 2 layers (heads: 1, 1; MLP: 1 unit), width 7.

    Layer 1: ``b_t = B_t/(t+1)`` (uniform causal head) and ``E_t = ReLU(−b_t)``;
    layer 2: ``err_t = (1/(t+1)) Σ_{s≤t} E_s``. Outputs ``balance`` = b_t and ``error`` =
    err_t (rule ``value``). The prefix up to t is in Dyck-1 iff ``err_t = 0`` (no prefix
    went negative) and ``b_t = 0`` (balanced): decided outside the model by
    :func:`dyck1_external_accept`. Exact at every length (real arithmetic; in float64
    both are exactly 0 when they should be: sums of ±1 and of zeros).
    """
    b = Builder(["(", ")"])
    balance = _balance(b)
    error = _error(b, balance)
    return b.build(
        {"balance": balance, "error": error},
        info={"example": "Dyck-1 (uniform)", "decision": "dyck1_external_accept"},
    )


def dyck1_external_accept(balance: float, error: float, length: int) -> bool:
    """The external decision of :func:`dyck1_uniform`: the input of ``length`` tokens
    (the outputs at its last position t = length) is in Dyck-1 iff both outputs are 0.

    Thresholds at half the smallest nonzero magnitudes (with n = length): ``|b_n| ≥
    1/(n+1)`` and ``err_n ≥ 1/(n+1)²`` when nonzero (see :func:`dyck1_nonuniform`), so
    the decision is ``|b_n| < 1/(2(n+1))`` and ``err_n < 1/(2(n+1)²)``: the exact-zero
    test, robust to float rounding. It depends on n — the part of the decision that a
    uniform model cannot make."""
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise ValueError(f"length must be an integer ≥ 0, not {length!r}")
    scale = length + 1
    return abs(balance) < 1 / (2 * scale) and abs(error) < 1 / (2 * scale * scale)


def _dyck1_decided(max_len: int, balance_tolerance: float, error_tolerance: float) -> Model:
    b = Builder(["(", ")"])
    balance = _balance(b)
    error = _error(b, balance)
    text = f"exact for inputs of length <= {max_len}"
    zero_b = ffn.eq_zero(balance, "balanced", tolerance=balance_tolerance, label="B_t = 0")
    zero_e = ffn.eq_zero(error, "no violation", tolerance=error_tolerance, label="err_t = 0")
    for block in (zero_b, zero_e):
        block.exact = Exactness(f"{block.exact.text}: {text}", max_len=max_len)
        b.add(block)
    accept = b.add(
        ffn.boolean_function([var("balanced"), var("no violation")], all, "accept", label="AND")
    )
    return b.build(
        {"accept": (accept, "bool"), "balance": balance, "error": error},
        accept="accept",
        info={"example": f"Dyck-1 (non-uniform, N = {max_len})"},
    )


def dyck1_nonuniform(max_len: int) -> Model:
    """Dyck-1 with a 0/1 decision (§9.2.1, non-uniform): 3 layers (heads 1, 1, 0;
    MLP units 4, 3, 1), exact for inputs of length ≤ N = ``max_len``.

    After :func:`dyck1_uniform`'s two layers, EqZero (§4.7,
    :func:`~crasp_compiler.cookbook.ffn.eq_zero`, ReLU) tests ``b_t`` with tolerance
    ``1/(N+1)`` and ``err_t`` with tolerance ``1/(N+1)²``, and a Boolean AND
    (:func:`~crasp_compiler.cookbook.ffn.boolean_function`) gives ``accept``: the prefix
    up to t is in Dyck-1. BOS (the empty prefix) accepts.

    Smallest nonzero magnitudes at t ≤ N (our averages see BOS, so the denominators are
    t + 1): ``|b_t| = |B_t|/(t+1) ≥ 1/(N+1)``; a violation at s ≤ t has ``B_s ≤ −1``, so
    ``E_s ≥ 1/(s+1)`` and ``err_t ≥ E_s/(t+1) ≥ 1/(t+1)² ≥ 1/(N+1)²``. EqZero_δ is exact
    when ``x = 0`` or ``|x| ≥ δ``, so these tolerances are exact for every N, and the
    largest exact ones for odd N: ``(`` + ``()…()`` and ``()…()`` + ``)`` of length N
    reach ``b_N = 1/(N+1)`` and ``err_N = 1/(N+1)²`` (B_t has the parity of t). The paper
    (averages over 1..i) has ``1/n`` and ``1/n²``; those tolerances here would leave
    ``b_N = 1/(N+1)`` and ``err_N = 1/(N+1)²`` (odd N), or ``err_N = 1/(N(N+1))`` with
    ``b_N = 0`` (even N: ``()…()`` + ``)(``), inside EqZero's band, where its output is
    strictly between 0 and 1.
    """
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"max_len must be an integer ≥ 1, not {max_len!r}")
    scale = max_len + 1
    return _dyck1_decided(max_len, 1 / scale, 1 / (scale * scale))


# ---------------------------------------------------------------------------- Dyck-k-D


def nearest_active(
    active: Form,
    values: dict[str, Form],
    *,
    side: str,
    one: Form,
    weighting: str = "unique",
    label: str = "",
) -> HeadBlock:
    """The values at the nearest active position strictly left (``side="left"``, mask
    ``strict``, s < t) or right (``"right"``, mask ``strict-past``, s > t) of each query.

    Not a library lookup (the key is data): scores ``a_s`` (query ``one``, key the
    {0,1} active bit), so the active keys are the maxima, gap 1, and the nearest one is
    the rightmost (left side) or leftmost (right side) of them. ``weighting="unique"``:
    rightmost / leftmost unique-hard attention; ``"average"``: average-hard attention
    tie-broken by :func:`~crasp_compiler.cookbook.attention.tie_break` (gap 1; left:
    ``γ·s/(t+1)``, right: the paper's ``1/j`` term ``γ/(s+1)``). With no active key the
    head reads an *inactive* position (t − 1 or t + 1; BOS for t = 1 on the left; nothing,
    i.e. 0, at the last position on the right), so values that are 0 at inactive
    positions (active-and-type bits) read 0: "no active neighbour". Exact at every length
    (average: in float64 for lengths up to about 3·10⁴, the tie terms' 1e-9 resolution).
    """
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', not {side!r}")
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, not {weighting!r}")
    mask = "strict" if side == "left" else "strict-past"
    unique = "hard-right" if side == "left" else "hard-left"
    head = HeadBlock(
        [one],
        [active],
        dict(values),
        Exactness(f"exact at every length (nearest active position to the {side})"),
        weighting=unique if weighting == "unique" else "hard",
        mask=mask,
        label=label,
    )
    if weighting == "average":
        if side == "left":
            head = attention.tie_break(head, side="right", gap=1.0)
        else:
            head = attention.tie_break(head, side="left", gap=1.0, positional="inverse", one=one)
    return head


def dyck_kd(k: int, depth: int, *, weighting: str = "unique", max_len: int | None = None) -> Model:
    """Dyck-k-D by iterated matching (§9.2.2–9.2.3): D + 1 layers, 2D + 2 heads.

    State: per type c, ``open_c`` and ``close_c`` — 1 at a still-active open / close of
    type c (initially the token indicators); the active bit is their sum
    ``a = Σ_c open_c + close_c``. Round r (layer r), for r = 1..D:

    - two heads (:func:`nearest_active`): ``L_c`` = open_c at the nearest active position
      to the left, ``R_c`` = close_c at the nearest active position to the right (round 1:
      the predecessor and successor, everything being active);
    - MLP (:func:`~crasp_compiler.cookbook.ffn.boolean_function`, 1 unit each):
      ``open_c ← open_c ∧ ¬R_c`` and ``close_c ← close_c ∧ ¬L_c``. If t's nearest active
      neighbour to the right is s, then t is s's nearest active neighbour to the left, so
      both ends of a pair see each other and are cleared together (fresh variables per
      round).

    Each round removes every adjacent matched pair of the still-active subsequence; a
    pair whose inside has nesting height h − 1 goes in round h (its inside starts with an
    open and ends with a close until cleared), so a Dyck-k word is cleared in D rounds iff
    its depth is ≤ D, and a non-word is never cleared. Moreover the prefix up to t is in
    Dyck-k-D iff no position s ≤ t is active after D rounds and ``B_t = 0``: closes match
    to the left, so with every s ≤ t matched and as many opens as closes, the opens match
    inside the prefix too.

    Layer D + 1: ``any_t`` = 1 iff some s ≤ t is active (average-hard head, score and
    value ``a_s``: the maximum); the balance ``b_t = B_t/(t+1)`` (uniform head, layer
    1); ``EqZero(b_t)`` (:func:`~crasp_compiler.cookbook.ffn.eq_zero`): tolerance 0
    (Heaviside, exact at every length) or, with ``max_len=N``, the ReLU EqZero with
    tolerance 1/(N + 1), exact for lengths ≤ N; ``accept = ¬any ∧ EqZero(b)``.

    Outputs: ``accept`` (bool, per position: the prefix is in Dyck-k-D; the empty prefix
    at BOS accepts) and ``unmatched`` (bool, per token: still active after D rounds).
    ``weighting``: ``"unique"`` (unique-hard heads) or ``"average"`` (average-hard with
    tie-breaking, reads ``index`` and ``inverse``).
    """
    pairs = bracket_pairs(k)
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be an integer ≥ 1, not {depth!r}")
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, not {weighting!r}")
    if max_len is not None and (
        isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1
    ):
        raise ValueError(f"max_len must be None or an integer ≥ 1, not {max_len!r}")
    b = Builder([symbol for pair in pairs for symbol in pair])
    if weighting == "average":
        b.feature("index")
        b.feature("inverse")
    opens = [b.token(o) for o, _ in pairs]
    closes = [b.token(x) for _, x in pairs]
    for r in range(1, depth + 1):
        active = form_add(*((1, f) for f in opens + closes))
        b.add(
            nearest_active(
                active,
                {f"L{r}.{c}": opens[c] for c in range(k)},
                side="left",
                one=b.one,
                weighting=weighting,
                label=f"round {r}: nearest active to the left",
            )
        )
        b.add(
            nearest_active(
                active,
                {f"R{r}.{c}": closes[c] for c in range(k)},
                side="right",
                one=b.one,
                weighting=weighting,
                label=f"round {r}: nearest active to the right",
            )
        )
        new_opens, new_closes = [], []
        for c in range(k):
            new_opens.append(
                b.add(
                    ffn.boolean_function(
                        [opens[c], var(f"R{r}.{c}")],
                        lambda x: x[0] and not x[1],
                        f"open{r + 1}.{c}",
                        label=f"round {r}: open {pairs[c][0]} still active",
                    )
                )
            )
            new_closes.append(
                b.add(
                    ffn.boolean_function(
                        [closes[c], var(f"L{r}.{c}")],
                        lambda x: x[0] and not x[1],
                        f"close{r + 1}.{c}",
                        label=f"round {r}: close {pairs[c][1]} still active",
                    )
                )
            )
        opens, closes = new_opens, new_closes
    active = form_add(*((1, f) for f in opens + closes))
    # Not in the library: max-pooling of the active bit. Scores a_s, average-hard: the
    # head averages the active positions s ≤ t (value 1) if any, else every key (value 0).
    found = b.add(
        HeadBlock(
            [b.one],
            [active],
            {"any active": active},
            Exactness("exact at every length (max of a {0,1} value by average-hard attention)"),
            weighting="hard",
            label="some position s <= t is still active",
        )
    )
    balance = b.add(
        attention.average(
            form_add(*((1, b.token(o)) for o, _ in pairs), *((-1, b.token(x)) for _, x in pairs)),
            "balance",
            label="balance B_t/(t+1)",
        )
    )
    tolerance = 0.0 if max_len is None else 1 / (max_len + 1)
    zero = ffn.eq_zero(balance, "balanced", tolerance=tolerance, label="B_t = 0")
    if max_len is not None:
        zero.exact = Exactness(
            f"{zero.exact.text}: |B_t/(t+1)| >= 1/(N+1) when nonzero, exact for inputs of "
            f"length <= {max_len}",
            max_len=max_len,
        )
    balanced = b.add(zero)
    accept = b.add(
        ffn.boolean_function(
            [found, balanced], lambda x: not x[0] and x[1], "accept", label="accept"
        )
    )
    return b.build(
        {"accept": (accept, "bool"), "unmatched": (active, "bool")},
        accept="accept",
        info={"example": f"Dyck-{k}-{depth} (iterated matching, {weighting}-hard heads)"},
    )


# ---------------------------------------------------------------------------- demo


def _size(model: Model) -> str:
    heads = sum(len(layer.heads) for layer in model.layers)
    return (
        f"{len(model.layers)} layers, {heads} heads, width {model.width}, "
        f"MLP width {model.mlp_width}, {model.parameter_count()} parameters"
    )


def _demo() -> None:
    from crasp_compiler.runtime.numpy_exec import run_tokens

    words = ["", "()", "(())()", "(()", "())(", "((()))", PAPER_DYCK12_EXAMPLE, "(()())()"]
    model = dyck1_uniform()
    print(f"Dyck-1 uniform: {_size(model)}")
    result = run_tokens(model, [list(w) for w in words])
    for row, word in enumerate(words):
        n = len(word)
        balance, error = result.outputs["balance"][row, n], result.outputs["error"][row, n]
        verdict = dyck1_external_accept(balance, error, n)
        print(f"  {word!r:<14} B/(n+1) = {balance:+.4f}  err = {error:.5f}  -> {verdict}")
    for name, model in (
        ("Dyck-1 non-uniform (N = 16)", dyck1_nonuniform(16)),
        ("Dyck-1-2", dyck_kd(1, 2)),
        ("Dyck-1-3", dyck_kd(1, 3)),
    ):
        print(f"{name}: {_size(model)}; {model.guarantee.text}")
        result = run_tokens(model, [list(w) for w in words])
        for row, word in enumerate(words):
            print(f"  {word!r:<14} -> {bool(result.final('accept')[row])}")
    model = dyck_kd(2, 3)
    print(f"Dyck-2-3: {_size(model)}")
    for word in ["([])[]", "([)]", "[[[]]]", "[[[[]]]]"]:
        print(f"  {word!r:<14} -> {bool(run_tokens(model, [list(word)]).final('accept')[0])}")


if __name__ == "__main__":
    _demo()
