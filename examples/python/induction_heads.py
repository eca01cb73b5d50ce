"""Induction heads built by hand (Transformer Cookbook §9.1), with plain-Python references.

Induction predicts, at every position, the next symbol: if the current symbol is ``a``
and an earlier occurrence of ``a`` was followed by ``b``, predict ``b``; if ``a`` has
no earlier occurrence, predict ``a`` itself.

- :func:`most_recent_induction` (§9.1.1): ``b`` follows the *last* earlier occurrence.
  2 layers, 2 heads, no MLP; exact at every length.
- :func:`most_frequent_induction` (§9.1.2): ``b`` is the symbol that followed earlier
  occurrences of ``a`` most often, ties broken by the order of the alphabet.
  4 layers (2 heads, 4 MLPs); exact at every length with Heaviside comparators, or for
  inputs of length ≤ N with the ReLU comparators of §4.7 (``max_len=N``).

"Earlier occurrences" are the positions ``j < i`` holding ``a``: the bigrams
``x_j x_{j+1}`` with ``j + 1 ≤ i``, so the bigram that *ends* at the current position
counts (in ``AA`` the second ``A`` predicts ``A``) and the one that starts there does not
(it is the future). :func:`induct_most_recent` and :func:`induct_most_frequent` are the
references, written from this definition.

Outputs (both models): one ``bool`` output ``next=b`` per symbol ``b`` (exactly one is
true at every token) and one ``int`` output ``next``, the index of the predicted symbol
in the alphabet. BOS predicts nothing (every ``next=b`` is 0 there).

The paper's examples, checked by hand (and in the tests): its input is written both
``ACABDACPDA`` and ``ACABDACDCA``; the embeddings it lists are those of ``ACABDACDCA``,
for which most-recent induction gives ``ACCBDBAADC`` (the paper prints ``ACCBDBAAC``,
9 letters: the ``D`` at position 9 is missing; its ``Retrieve`` line has all 10) and
most-frequent induction gives ``ACCBDBAAAC`` (as printed). Its ``Bigram`` display has a
3-row first entry and wrong predecessors at positions 7 and 8 (``C`` follows ``A`` at 7,
``D`` follows ``C`` at 8). Its comparison rule ("the alphabetically first σ' whose count
is maximal") alone predicts ``A`` where the current symbol never occurred before (all
counts 0), while its own example predicts the current symbol: that fallback is a separate
case here.

Run ``python examples/python/induction_heads.py`` for a demo.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from crasp_compiler.assemble.builder import Builder
from crasp_compiler.cookbook import attention, ffn
from crasp_compiler.cookbook.blocks import Exactness, FFNBlock, Form, HeadBlock, form_add, var
from crasp_compiler.model.model import Model

PAPER_INPUT = "ACABDACDCA"  # the input of §9.1 (the embeddings it lists)
WEIGHTINGS = ("hard-right", "hard")  # unique-hard, or average-hard with tie-breaking


# ---------------------------------------------------------------------------- references


def _check_word(word: Sequence[str], alphabet: Sequence[str]) -> None:
    unknown = sorted(set(word) - set(alphabet))
    if unknown:
        raise ValueError(f"symbols {unknown} are not in the alphabet {list(alphabet)}")


def induct_most_recent(word: Sequence[str]) -> list[str]:
    """Per position i: the symbol after the last ``j < i`` with ``word[j] == word[i]``,
    or ``word[i]`` when there is none (from the definition, O(n²))."""
    out = []
    for i, symbol in enumerate(word):
        earlier = [j for j in range(i) if word[j] == symbol]
        out.append(word[earlier[-1] + 1] if earlier else symbol)
    return out


def induct_most_frequent(word: Sequence[str], alphabet: Sequence[str]) -> list[str]:
    """Per position i: the symbol that most often follows an occurrence ``j < i`` of
    ``word[i]`` (that is, among ``word[j + 1]``), ties broken by the order of
    ``alphabet``; ``word[i]`` when there is no earlier occurrence (O(n²))."""
    _check_word(word, alphabet)
    rank = {symbol: k for k, symbol in enumerate(alphabet)}
    out = []
    for i, symbol in enumerate(word):
        followers = Counter(word[j + 1] for j in range(i) if word[j] == symbol)
        if not followers:
            out.append(symbol)
        else:
            out.append(min(followers, key=lambda b: (-followers[b], rank[b])))
    return out


# ---------------------------------------------------------------------------- helpers


def _alphabet(alphabet: Sequence[str]) -> list[str]:
    symbols = list(alphabet)
    if len(symbols) < 2 or len(set(symbols)) != len(symbols):
        raise ValueError(f"the alphabet must be at least 2 distinct symbols, not {symbols!r}")
    return symbols


def _weighting(weighting: str) -> str:
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, not {weighting!r}")
    return weighting


def _with_values(head: HeadBlock, values: dict[str, Form]) -> HeadBlock:
    """``head`` (a library construction) reading a vector value instead of one number:
    the same scores, one value dimension per entry (the paper's W_V on the one-hot
    embedding), so the k lookups are one head."""
    return replace(head, values=dict(values))


def _predecessor(b: Builder, symbols: list[str], weighting: str) -> dict[str, Form]:
    """Pred (§5.4): ``pred_a = 1[x_{t−1} = a]`` (0 at the first token, which reads BOS)."""
    lookup = "hard-right" if weighting == "hard-right" else "hard"
    if lookup == "hard":
        b.feature("index")
    head = attention.predecessor_strict(
        b.token(symbols[0]), "pred", weighting=lookup, label="Pred: one-hot of x_{t-1}"
    )
    names = {a: f"pred={a}" for a in symbols}
    b.add(_with_values(head, {names[a]: b.token(a) for a in symbols}))
    return {a: var(names[a]) for a in symbols}


def _bounded(block: FFNBlock, max_len: int | None) -> FFNBlock:
    """A ReLU comparator on counts: its band (0, 1/(N+1)) holds no count difference at
    lengths ≤ N, so it is exact for those lengths (Heaviside ones: at every length)."""
    if max_len is not None:
        block.exact = Exactness(
            f"{block.exact.text}; count differences are >= 1/(t+1), so exact for inputs "
            f"of length <= {max_len}",
            max_len=max_len,
        )
    return block


def _outputs(symbols: list[str], predicted: dict[str, Form]) -> dict[str, tuple[Form, str]]:
    outputs: dict[str, tuple[Form, str]] = {f"next={a}": (predicted[a], "bool") for a in symbols}
    outputs["next"] = (form_add(*((k, predicted[a]) for k, a in enumerate(symbols))), "int")
    return outputs


def decode(model: Model, values: dict, row: int, length: int) -> list[str]:
    """The predicted symbols of input ``row`` (positions 1..length) from decided outputs
    (``RunResult.values`` of the numpy runtime or ``TorchTransformer.run``)."""
    symbols = model.vocab[1:]
    return [symbols[int(values["next"][row][t])] for t in range(1, length + 1)]


# ---------------------------------------------------------------------------- §9.1.1


def most_recent_induction(
    alphabet: Sequence[str] = "ABCD", *, weighting: str = "hard-right"
) -> Model:
    """Most-recent induction (§9.1.1): 2 layers, 2 heads, no MLP; exact at every length.

    Layer 1, Pred (:func:`~crasp_compiler.cookbook.attention.predecessor_strict`, strict
    future mask): ``pred_t = e_{x_{t−1}}`` (0 at the first token, whose only key is BOS).
    Layer 2, Retrieve: query ``e_{x_t}``, key ``pred_s``, value ``e_{x_s}``, causal
    mask: the score ``e_{x_t}·e_{x_{s−1}} = 1[x_{s−1} = x_t]`` is 1 exactly at the
    positions s ≤ t that follow an occurrence of the current symbol, and the rightmost of
    them, s = j + 1 for the last occurrence j < t, holds the prediction. Where there is
    none every score is 0, and the rightmost key is t itself: the head then returns the
    current symbol — the fallback comes for free. (The key s = t counts: it follows
    t − 1, the last earlier occurrence when ``x_{t−1} = x_t``.)

    ``weighting="hard-right"``: rightmost unique-hard attention (the paper's); ``"hard"``:
    average-hard attention in both heads, the predecessor by its ``t·s`` score and the
    retrieval made rightmost by :func:`~crasp_compiler.cookbook.attention.tie_break`
    (gap 1; reads ``index`` and ``inverse``). Outputs: ``next=b`` (bool) per symbol and
    ``next`` (int, the symbol's index in ``alphabet``). Width 3k + 2 (+2 features for ``"hard"``).
    """
    symbols, weighting = _alphabet(alphabet), _weighting(weighting)
    b = Builder(symbols)
    pred = _predecessor(b, symbols, weighting)
    # Retrieve: not a library lookup (the key is data, not a position): nearest match to
    # the left by one-hot scores, rightmost maximum.
    retrieve = HeadBlock(
        [b.token(a) for a in symbols],
        [pred[a] for a in symbols],
        {f"retrieve={a}": b.token(a) for a in symbols},
        Exactness("exact at every length (rightmost key that follows the current symbol)"),
        weighting=weighting,
        label="Retrieve: the symbol after the last occurrence of x_t",
    )
    if weighting == "hard":
        b.feature("inverse")
        retrieve = attention.tie_break(retrieve, side="right", gap=1.0)
    b.add(retrieve)
    predicted = {a: var(f"retrieve={a}") for a in symbols}
    return b.build(_outputs(symbols, predicted), info={"example": "most-recent induction"})


# ---------------------------------------------------------------------------- §9.1.2


def most_frequent_induction(
    alphabet: Sequence[str] = "ABCD", *, max_len: int | None = None
) -> Model:
    """Most-frequent induction (§9.1.2): 4 layers, 2 heads.

    1. Pred (:func:`~crasp_compiler.cookbook.attention.predecessor_strict`, rightmost
       unique-hard) and, in the MLP, the bigram indicators
       ``g_ab = 1[x_{t−1} = a ∧ x_t = b]`` (:func:`~crasp_compiler.cookbook.ffn.boolean_function`,
       k² units).
    2. BigramCount: one uniform causal head (:func:`~crasp_compiler.cookbook.attention.average`)
       reads all k² indicators: ``c_ab = #{s ≤ t : x_{s−1}x_s = ab}/(t + 1)``. The MLP
       selects the row of the current symbol, ``r_b = Σ_a 1[x_t = a]·c_ab``
       (:func:`~crasp_compiler.cookbook.ffn.conditional_bigm`, M = 1, 2k² units).
    3. Comparisons (§4.7): ``ge_bb' = 1[r_b ≥ r_b']`` for b before b' in the alphabet, and
       the fallback ``f = 1[Σ_b r_b = 0]`` (no earlier occurrence of ``x_t``).
    4. ``win_b = ¬f ∧ ⋀_{b' before b} ¬ge_b'b ∧ ⋀_{b' after b} ge_bb'`` (b beats the
       symbols before it strictly and ties or beats those after it: the first maximal
       count) and ``fall_b = f ∧ 1[x_t = b]`` (:func:`~crasp_compiler.cookbook.ffn.boolean_function`,
       1 unit each). The prediction is ``next=b = win_b + fall_b`` (exclusive).

    The counts are integers over t + 1, so different counts differ by ≥ 1/(t+1):
    ``max_len=None`` compares with Heaviside units (tolerance 0): exact at every length
    (in float64 too: equal counts are equal floats, since the head sums 0/1 values
    exactly and divides them by the same t + 1). ``max_len=N``: the paper's ReLU
    comparators with tolerance 1/(N + 1), exact for inputs of length ≤ N.
    Outputs as :func:`most_recent_induction`.
    """
    symbols = _alphabet(alphabet)
    if max_len is not None and (
        isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1
    ):
        raise ValueError(f"max_len must be None or an integer ≥ 1, not {max_len!r}")
    tolerance = 0.0 if max_len is None else 1.0 / (max_len + 1)
    b = Builder(symbols)
    pred = _predecessor(b, symbols, "hard-right")
    pairs = [(a, c) for a in symbols for c in symbols]
    for a, c in pairs:
        b.add(
            ffn.boolean_function(
                [pred[a], b.token(c)], all, f"bigram={a}{c}", label=f"bigram {a}{c}"
            )
        )
    count = attention.average(b.token(symbols[0]), "count", label="BigramCount (causal average)")
    b.add(_with_values(count, {f"count={a}{c}": var(f"bigram={a}{c}") for a, c in pairs}))
    # r_b = Σ_a 1[x_t = a]·c_ab: the counts in the row of the current symbol
    for a, c in pairs:
        b.add(
            ffn.conditional_bigm(
                b.token(a),
                var(f"count={a}{c}"),
                Form(),
                f"sel={a}{c}",
                bound=1.0,
                label=f"select count {a}{c}",
            )
        )
    row = {c: form_add(*((1, var(f"sel={a}{c}")) for a in symbols)) for c in symbols}
    # comparisons, exact at every length (Heaviside) or for lengths <= max_len (ReLU)
    for i, c in enumerate(symbols):
        for d in symbols[i + 1 :]:
            compare = ffn.ge_zero(
                row[c] - row[d], f"ge={c}{d}", tolerance=tolerance, label=f"{c} >= {d}"
            )
            b.add(_bounded(compare, max_len))
    total = form_add(*((1, row[c]) for c in symbols))
    none = ffn.eq_zero(total, "fallback", tolerance=tolerance, label="no earlier occurrence")
    fallback = b.add(_bounded(none, max_len))
    predicted: dict[str, Form] = {}
    for i, c in enumerate(symbols):
        before, after = symbols[:i], symbols[i + 1 :]
        inputs = (
            [fallback] + [var(f"ge={d}{c}") for d in before] + [var(f"ge={c}{d}") for d in after]
        )
        nb = len(before)

        def wins(bits: tuple[bool, ...], nb: int = nb) -> bool:
            return not bits[0] and not any(bits[1 : 1 + nb]) and all(bits[1 + nb :])

        b.add(ffn.boolean_function(inputs, wins, f"win={c}", label=f"{c} is the first maximum"))
        b.add(
            ffn.boolean_function(
                [fallback, b.token(c)], all, f"fall={c}", label=f"fallback: current is {c}"
            )
        )
        predicted[c] = var(f"win={c}") + var(f"fall={c}")
    return b.build(_outputs(symbols, predicted), info={"example": "most-frequent induction"})


# ---------------------------------------------------------------------------- demo


def _demo() -> None:
    from crasp_compiler.runtime.numpy_exec import run_tokens

    words = [PAPER_INPUT, "ABABAB", "AAAA", "ABCDABDDCBA"]
    for name, model, reference in (
        ("most-recent", most_recent_induction(), induct_most_recent),
        ("most-frequent", most_frequent_induction(), lambda w: induct_most_frequent(w, "ABCD")),
    ):
        heads = sum(len(layer.heads) for layer in model.layers)
        print(
            f"{name} induction: {len(model.layers)} layers, {heads} heads, width "
            f"{model.width}, MLP width {model.mlp_width}, {model.parameter_count()} parameters"
        )
        print(f"  guarantee: {model.guarantee.text}")
        result = run_tokens(model, [list(w) for w in words])
        for row, word in enumerate(words):
            got = "".join(decode(model, result.values, row, len(word)))
            expected = "".join(reference(word))
            print(f"  {word:<12} -> {got}   (reference {expected})")


if __name__ == "__main__":
    _demo()
