"""The worked constructions of the Transformer Cookbook §9 (``examples/python``).

Every model is run on every short string (exhaustively) and on seeded random strings up
to length 30, by the numpy executor and by the torch module (raw outputs within 1e-9 of
each other, decided values equal), and compared with plain-Python references written
from the definitions; models are saved, loaded and run again; layer and head counts are
the documented ones. The paper's own examples are checked by hand.
"""

from __future__ import annotations

import itertools
import random
import sys
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

from crasp_compiler.errors import CraspError
from crasp_compiler.model.io import read_model, save_model
from crasp_compiler.model.model import Model
from crasp_compiler.runtime.numpy_exec import run_tokens
from crasp_compiler.runtime.torch_module import TorchTransformer
from tests.model.test_model_file import assert_same_model

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "python"))

import dyck
import induction_heads as induction

pytestmark = pytest.mark.usefixtures("one_torch_thread")

MAX_RANDOM_LEN = 30


# ---------------------------------------------------------------------------- helpers


def all_words(alphabet: Sequence[str], max_len: int) -> list[list[str]]:
    return [list(w) for n in range(max_len + 1) for w in itertools.product(alphabet, repeat=n)]


def random_words(alphabet: Sequence[str], count: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [
        [rng.choice(alphabet) for _ in range(rng.randint(0, MAX_RANDOM_LEN))] for _ in range(count)
    ]


def near_dyck_words(k: int, depth: int, count: int, seed: int) -> list[list[str]]:
    """Random walks of at most 15 steps that mostly stay well nested within ``depth``,
    with occasional deeper opens and wrong closes; half are closed at the end (length
    ≤ 30), so that members and near-misses both occur often."""
    rng = random.Random(seed)
    pairs = dyck.bracket_pairs(k)
    words = []
    for _ in range(count):
        stack: list[int] = []
        word = []
        for _ in range(rng.randint(0, MAX_RANDOM_LEN // 2)):
            if stack and (rng.random() < 0.5 or (len(stack) >= depth and rng.random() < 0.9)):
                c = stack.pop()
                word.append(pairs[c if rng.random() < 0.97 else rng.randrange(k)][1])
            else:
                c = rng.randrange(k)
                stack.append(c)
                word.append(pairs[c][0])
        if rng.random() < 0.5:
            word += [pairs[c][1] for c in reversed(stack)]
        words.append(word)
    return words


def run_both(model: Model, words: list[list[str]]):
    """The numpy result, after checking the torch module against it: raw outputs within
    1e-9 and equal decided values at every real position (BOS included)."""
    result = run_tokens(model, words, on_overlength="ignore")
    module = TorchTransformer(model)
    ids, lengths = module.encode(words)
    with torch.no_grad():
        raw = module(ids, lengths).double().numpy()
    decided = module.decide(torch.tensor(raw))
    real = np.arange(raw.shape[1])[None, :] <= result.lengths[:, None]
    for k, out in enumerate(model.outputs):
        np.testing.assert_allclose(
            raw[..., k][real], result.outputs[out.name][real], rtol=0, atol=1e-9
        )
        np.testing.assert_array_equal(
            decided[out.name].numpy()[real], np.asarray(result.values[out.name])[real]
        )
    return result


def saved_and_loaded(model: Model, tmp_path: Path, name: str) -> Model:
    path = tmp_path / f"{name}.npz"
    save_model(model, path)
    loaded = read_model(path)
    assert_same_model(model, loaded)
    return loaded


def heads(model: Model) -> list[int]:
    return [len(layer.heads) for layer in model.layers]


# ---------------------------------------------------------------------------- induction


def test_induction_paper_examples_by_hand():
    word = induction.PAPER_INPUT
    assert word == "ACABDACDCA"
    # Pred as listed in §9.1.1: 0, A, C, A, B, D, A, C, D, C
    assert [None, *word[:-1]] == [None, *"ACABDACDC"]
    # most recent: the paper prints ACCBDBAAC (9 letters for 10 positions); its Retrieve
    # line e_A e_C e_C e_B e_D e_B e_A e_A e_D e_C is the right answer
    assert "".join(induction.induct_most_recent(word)) == "ACCBDBAADC"
    assert len("ACCBDBAAC") == 9 != len(word)
    # at the last position: A; the A before it (position 6) is followed by C
    assert induction.induct_most_recent(word)[-1] == "C"
    # most frequent: as printed; the last A has followers C, B, C
    assert "".join(induction.induct_most_frequent(word, "ABCD")) == "ACCBDBAAAC"
    # BigramCount_AC(ACABDACDCA) = 0,1,1,1,1,1,2,2,2,2 (bigrams ending at positions <= i)
    counts = [sum(word[j - 1 : j + 1] == "AC" for j in range(1, i + 1)) for i in range(10)]
    assert counts == [0, 1, 1, 1, 1, 1, 2, 2, 2, 2]
    # the paper's Bigram display has (C; D) at position 7 and (D; A) at 8: wrong
    assert (word[6], word[5]) == ("C", "A") and (word[7], word[6]) == ("D", "C")
    # the paper's comparison rule alone (alphabetically first maximal count) would give
    # A at position 2 (no earlier C: all counts 0); its example says C, the fallback
    assert induction.induct_most_frequent(word, "ABCD")[1] == "C"


def test_induction_references_on_definitional_cases():
    assert induction.induct_most_recent("") == []
    assert induction.induct_most_recent("AA") == ["A", "A"]  # the bigram ending here counts
    assert induction.induct_most_recent("ABAC") == ["A", "B", "B", "C"]
    assert induction.induct_most_recent("ABACA") == ["A", "B", "B", "C", "C"]
    # most frequent: ties broken by the alphabet order given, not by recency
    assert induction.induct_most_frequent("ACABA", "ABC") == list("ACCBB")
    assert induction.induct_most_frequent("ACABA", "CBA") == list("ACCBC")
    assert induction.induct_most_frequent("ABABACA", "ABC") == list("ABBABCB")
    with pytest.raises(ValueError, match="not in the alphabet"):
        induction.induct_most_frequent("AXA", "AB")


def check_induction(model: Model, words: list[list[str]], reference) -> None:
    result = run_both(model, words)
    symbols = model.vocab[1:]
    for row, word in enumerate(words):
        assert induction.decode(model, result.values, row, len(word)) == reference(word), word
        onehot = np.stack([result.outputs[f"next={a}"][row, : len(word) + 1] for a in symbols])
        # exactly one symbol predicted at each token, with raw values in {0, 1}; none at BOS
        assert np.all(np.isclose(onehot, 0, atol=1e-9) | np.isclose(onehot, 1, atol=1e-9))
        np.testing.assert_allclose(onehot[:, 1:].sum(0), 1.0, atol=1e-9)
        np.testing.assert_allclose(onehot[:, 0], 0.0, atol=1e-9)


@pytest.mark.parametrize("weighting", ["hard-right", "hard"])
def test_most_recent_induction(weighting, tmp_path):
    model = induction.most_recent_induction("ABC", weighting=weighting)
    assert len(model.layers) == 2 and heads(model) == [1, 1] and model.mlp_width == 0
    assert model.width == 3 * 3 + 2 + (2 if weighting == "hard" else 0)
    assert model.guarantee.max_len is None
    words = all_words("ABC", 5) + random_words("ABC", 150, seed=1)
    check_induction(model, words, induction.induct_most_recent)
    big = induction.most_recent_induction("ABCDE", weighting=weighting)
    words = [*random_words("ABCDE", 150, seed=2), list(induction.PAPER_INPUT)]
    check_induction(big, words, induction.induct_most_recent)
    check_induction(saved_and_loaded(big, tmp_path, "recent"), words, induction.induct_most_recent)


@pytest.mark.parametrize("max_len", [None, MAX_RANDOM_LEN])
def test_most_frequent_induction(max_len, tmp_path):
    model = induction.most_frequent_induction("ABC", max_len=max_len)
    assert len(model.layers) == 4 and heads(model) == [1, 1, 0, 0]
    k = 3
    assert model.width == 3 * k * k + 4 * k + 3 + k * (k - 1) // 2
    comparators = k * (k - 1) // 2 + 2 if max_len is None else k * (k - 1) + 3
    assert [layer.mlp.w1.shape[0] for layer in model.layers] == [
        k * k,
        2 * k * k,
        comparators,
        2 * k,
    ]
    assert model.guarantee.max_len == max_len
    heaviside = any("heaviside" in layer.mlp.activations for layer in model.layers if layer.mlp)
    assert heaviside == (max_len is None)

    def reference(word):
        return induction.induct_most_frequent(word, "ABC")

    words = all_words("ABC", 5) + random_words("ABC", 150, seed=3)
    # long runs of one follower pair make many ties
    words += [list("AB" * 7 + "AC" * 7 + "A"), list("ACAB" * 7 + "A")]
    check_induction(model, words, reference)
    big = induction.most_frequent_induction("DCBA", max_len=max_len)  # alphabet order DCBA

    def reference_big(word):
        return induction.induct_most_frequent(word, "DCBA")

    words = [*random_words("ABCD", 120, seed=4), list(induction.PAPER_INPUT)]
    check_induction(big, words, reference_big)
    check_induction(saved_and_loaded(big, tmp_path, "frequent"), words, reference_big)


def test_most_frequent_relu_comparators_guarantee():
    model = induction.most_frequent_induction("AB", max_len=6)
    assert model.guarantee.max_len == 6
    with pytest.raises(CraspError, match="exceeds the model's guarantee"):
        run_tokens(model, [list("ABABABA")])


def test_induction_invalid_arguments():
    with pytest.raises(ValueError, match="at least 2 distinct symbols"):
        induction.most_recent_induction("A")
    with pytest.raises(ValueError, match="at least 2 distinct symbols"):
        induction.most_frequent_induction("ABA")
    with pytest.raises(ValueError, match="weighting must be one of"):
        induction.most_recent_induction("AB", weighting="softmax")
    with pytest.raises(ValueError, match="max_len must be None or an integer"):
        induction.most_frequent_induction("AB", max_len=0)


# ---------------------------------------------------------------------------- references


def dyck1_by_grammar(max_len: int) -> set[str]:
    """Dyck-1 from the grammar S → ε | (S)S, every word up to ``max_len``."""
    words: dict[int, set[str]] = {0: {""}}
    for n in range(2, max_len + 1, 2):
        words[n] = {
            "(" + inner + ")" + rest
            for m in range(0, n - 1, 2)
            for inner in words[m]
            for rest in words[n - 2 - m]
        }
    return set().union(*words.values())


def max_depth(word: str) -> int:
    depth = best = 0
    for symbol in word:
        depth += 1 if symbol in "([{<" else -1
        best = max(best, depth)
    return best


def test_dyck_reference_recogniser_against_the_grammar():
    grammar = dyck1_by_grammar(10)
    for word in map("".join, all_words("()", 10)):
        members = dyck.dyck_prefix_members(word)
        assert members[-1] == (word in grammar), word
        assert members == [word[:t] in grammar for t in range(len(word) + 1)]
        for depth in (1, 2, 3):
            bounded = dyck.dyck_prefix_members(word, 1, depth)
            assert bounded[-1] == (word in grammar and max_depth(word) <= depth), (word, depth)
    # two types: a word is in Dyck-2 iff erasing types gives a Dyck-1 word whose pairs
    # (matched by the stack) agree in type; spot checks plus a count
    assert dyck.dyck_prefix_members("([])[]", 2) == [True, False, False, False, True, False, True]
    assert dyck.dyck_prefix_members("([)]", 2)[-1] is False
    assert not dyck.dyck_prefix_members("[[[]]]", 2, 2)[-1]
    assert dyck.dyck_prefix_members("[[[]]]", 2, 3)[-1]
    n_members = sum(dyck.dyck_prefix_members(w, 2)[-1] for w in all_words("()[]", 6))
    assert n_members == 1 + 2 + 8 + 40  # 2^m · Catalan(m) words of length 2m, m = 0..3
    with pytest.raises(ValueError, match="is not a bracket"):
        dyck.dyck_prefix_members("(x)")


def test_paper_dyck_statements():
    # "the string ((()) is in DYCK-1, while )())() is not": the first is not either
    assert dyck.dyck_prefix_members("((())")[-1] is False
    assert dyck.dyck_prefix_members(")())()")[-1] is False
    # §9.2.2's example has depth 3: not in Dyck-1-2 ...
    example = dyck.PAPER_DYCK12_EXAMPLE
    assert dyck.dyck_prefix_members(example)[-1] and max_depth(example) == 3
    assert not dyck.dyck_prefix_members(example, 1, 2)[-1]
    # ... round 1 marks "()()()" but leaves "(())" (the paper says "()"); 3 rounds needed
    after_one = dyck.iterated_matching(example, 1, 1)
    assert "".join(s for s, a in zip(example, after_one, strict=True) if not a) == "()()()"
    assert "".join(s for s, a in zip(example, after_one, strict=True) if a) == "(())"
    assert any(dyck.iterated_matching(example, 1, 2))
    assert not any(dyck.iterated_matching(example, 1, 3))
    # a string with the narrated behaviour: "()()()" marked, then "()" left, then done
    narrated = "(()())()"
    after_one = dyck.iterated_matching(narrated, 1, 1)
    assert "".join(s for s, a in zip(narrated, after_one, strict=True) if a) == "()"
    assert not any(dyck.iterated_matching(narrated, 1, 2))


@pytest.mark.parametrize("k, max_len", [(1, 12), (2, 7)])
def test_iterated_matching_recognises_dyck_kd(k, max_len):
    """The paper's algorithm: a whole word is in Dyck-k-D iff D rounds leave nothing."""
    symbols = [s for pair in dyck.bracket_pairs(k) for s in pair]
    for word in all_words(symbols, max_len):
        for depth in (1, 2, 3, 4):
            cleared = not any(dyck.iterated_matching(word, k, depth))
            assert cleared == dyck.dyck_prefix_members(word, k, depth)[-1], (word, depth)


def test_dyck1_smallest_nonzero_magnitudes():
    """|b_t| ≥ 1/(t+1) and err_t ≥ 1/(t+1)² when nonzero (the tolerances), attained."""
    smallest_b, smallest_err = {}, {}
    for word in all_words("()", 11):
        balance, error = dyck.dyck1_statistics(word)
        t = len(word)
        if balance[t]:
            smallest_b[t] = min(smallest_b.get(t, 1), abs(balance[t]))
        if error[t]:
            smallest_err[t] = min(smallest_err.get(t, 1), error[t])
    for t, value in smallest_b.items():
        # B_t has the parity of t: |B_t| ≥ 1, and ≥ 2 at even t
        assert value == Fraction(1 if t % 2 else 2, t + 1)
    for t, value in smallest_err.items():
        bound = Fraction(1, (t + 1) ** 2)
        assert value >= bound
        assert (value == bound) == (t % 2 == 1)  # B_t = -1 only at odd t


# ---------------------------------------------------------------------------- Dyck-1


def dyck1_words() -> list[list[str]]:
    return all_words("()", 8) + random_words("()", 100, seed=5) + near_dyck_words(1, 4, 100, 6)


def test_dyck1_uniform(tmp_path):
    model = dyck.dyck1_uniform()
    assert len(model.layers) == 2 and heads(model) == [1, 1] and model.mlp_width == 1
    assert model.width == 7
    assert model.guarantee.max_len is None
    words = dyck1_words()
    for m in (model, saved_and_loaded(model, tmp_path, "dyck1")):
        result = run_both(m, words)
        accepted = 0
        for row, word in enumerate(words):
            balance, error = dyck.dyck1_statistics(word)
            got_b = result.outputs["balance"][row, : len(word) + 1]
            got_e = result.outputs["error"][row, : len(word) + 1]
            np.testing.assert_allclose(got_b, [float(v) for v in balance], rtol=0, atol=1e-12)
            np.testing.assert_allclose(got_e, [float(v) for v in error], rtol=0, atol=1e-12)
            decisions = [
                dyck.dyck1_external_accept(got_b[t], got_e[t], t) for t in range(len(word) + 1)
            ]
            assert decisions == dyck.dyck_prefix_members(word), word
            accepted += decisions[-1]
        assert 60 < accepted < len(words) - 60


def test_dyck1_external_accept_thresholds():
    n = 5  # outputs at the last position of a 5-token input
    assert dyck.dyck1_external_accept(0.0, 0.0, n)
    assert not dyck.dyck1_external_accept(1 / 6, 0.0, n)  # smallest nonzero balance
    assert not dyck.dyck1_external_accept(-1 / 6, 0.0, n)
    assert not dyck.dyck1_external_accept(0.0, 1 / 36, n)  # smallest nonzero error
    assert dyck.dyck1_external_accept(1e-12, 1e-15, n)  # rounding noise
    assert dyck.dyck1_external_accept(0.0, 0.0, 0)  # the empty input
    with pytest.raises(ValueError, match="length must be an integer"):
        dyck.dyck1_external_accept(0.0, 0.0, -1)


@pytest.mark.parametrize("max_len", [11, MAX_RANDOM_LEN])
def test_dyck1_nonuniform(max_len, tmp_path):
    model = dyck.dyck1_nonuniform(max_len)
    assert len(model.layers) == 3 and heads(model) == [1, 1, 0] and model.width == 10
    assert [layer.mlp.w1.shape[0] for layer in model.layers] == [4, 3, 1]
    assert model.guarantee.max_len == max_len and model.accept == "accept"
    words = [w for w in dyck1_words() if len(w) <= max_len]
    # the tight cases at length N: err = 1/(N+1)² and b = ±1/(N+1) (odd N), and
    # err = 1/(N(N+1)) with b = 0 (even N), inside the band of the paper's 1/N²
    n = max_len
    tight = ["()" * (n // 2) + ")", "()" * (n // 2) + "(", "(" + "()" * (n // 2)]
    tight += ["()" * ((n - 2) // 2) + ")(" + "()"]
    words += [list(w[:n]) for w in tight]
    for m in (model, saved_and_loaded(model, tmp_path, "dyck1n")):
        result = run_both(m, words)
        for row, word in enumerate(words):
            raw = result.outputs["accept"][row, : len(word) + 1]
            assert np.all(np.isclose(raw, 0, atol=1e-9) | np.isclose(raw, 1, atol=1e-9)), word
            got = list(result.values["accept"][row, : len(word) + 1])
            assert got == dyck.dyck_prefix_members(word), word
    with pytest.raises(CraspError, match="exceeds the model's guarantee"):
        run_tokens(model, [["("] * (max_len + 1)])


def test_dyck1_paper_tolerances_are_too_loose_with_bos():
    """With the paper's 1/N and 1/N² (averages over 1..i), EqZero is inexact here."""
    n = 11
    word = list("()" * 5 + ")")  # err_11 = 1/12², inside (0, 1/11²)
    ours = dyck.dyck1_nonuniform(n)
    paper = dyck._dyck1_decided(n, 1 / n, 1 / n**2)
    for model, expected in ((ours, 0.0), (paper, 1 - (n / (n + 1)) ** 2)):
        result = run_tokens(model, [word])
        assert result.outputs["error"][0, n] == pytest.approx(1 / (n + 1) ** 2, abs=1e-15)
        # the EqZero output itself, read from the residual stream
        residual = run_tokens(model, [word], residuals=True).residuals[-1][1][0, n]
        assert residual[model.residual.index("no violation")] == pytest.approx(expected, abs=1e-9)
    balanced = list("()" * 5 + "(")  # b_11 = 1/12, inside (0, 1/11)
    residual = run_tokens(paper, [balanced], residuals=True).residuals[-1][1][0, n]
    assert residual[paper.residual.index("balanced")] == pytest.approx(1 - n / (n + 1), abs=1e-9)


def test_dyck1_invalid_arguments():
    for bad in (0, -3, 2.5, True, None):
        with pytest.raises(ValueError, match="max_len must be an integer"):
            dyck.dyck1_nonuniform(bad)


# ---------------------------------------------------------------------------- Dyck-k-D


@pytest.mark.parametrize(
    "k, depth, weighting, max_len, exhaustive",
    [
        (1, 2, "unique", None, 8),
        (1, 2, "average", MAX_RANDOM_LEN, 8),
        (1, 3, "average", None, 8),
        (1, 1, "unique", None, 6),
        (2, 2, "unique", MAX_RANDOM_LEN, 4),
        (2, 3, "average", None, 4),
        (3, 2, "unique", None, 3),
    ],
)
def test_dyck_kd(k, depth, weighting, max_len, exhaustive, tmp_path):
    model = dyck.dyck_kd(k, depth, weighting=weighting, max_len=max_len)
    assert len(model.layers) == depth + 1
    assert heads(model) == [3] + [2] * (depth - 1) + [1]  # the balance head is in layer 1
    variables = 4 * k * depth + 2 * k + 6 + (2 if weighting == "average" else 0)  # the paper's
    held = model.occupants or [[(0, label)] for label in model.residual]
    assert len({label for dimension in held for _, label in dimension if label}) == variables
    assert model.width <= variables  # dead ones share dimensions where that stores less
    assert model.guarantee.max_len == max_len and model.accept == "accept"
    symbols = [s for pair in dyck.bracket_pairs(k) for s in pair]
    words = all_words(symbols, exhaustive)
    words += random_words(symbols, 60, seed=7) + near_dyck_words(k, depth, 150, seed=8)
    models = [model]
    if weighting == "unique":
        models.append(saved_and_loaded(model, tmp_path, "dyckkd"))
    for m in models:
        result = run_both(m, words)
        accepted = 0
        for row, word in enumerate(words):
            n = len(word)
            raw = result.outputs["accept"][row, : n + 1]
            assert np.all(np.isclose(raw, 0, atol=1e-9) | np.isclose(raw, 1, atol=1e-9))
            got = list(result.values["accept"][row, : n + 1])
            assert got == dyck.dyck_prefix_members(word, k, depth), word
            unmatched = list(result.values["unmatched"][row, 1 : n + 1])
            assert unmatched == dyck.iterated_matching(word, k, depth), word
            accepted += got[-1] and n > 0
        assert accepted >= 20


def test_dyck_kd_on_the_paper_example():
    example = list(dyck.PAPER_DYCK12_EXAMPLE)
    for depth, expected in ((2, False), (3, True)):
        result = run_both(dyck.dyck_kd(1, depth), [example])
        assert bool(result.final("accept")[0]) is expected
    result = run_both(dyck.dyck_kd(1, 2), [list("(()())()")])
    assert list(result.values["accept"][0]) == dyck.dyck_prefix_members("(()())()")
    assert bool(result.final("accept")[0])


def test_dyck_kd_long_input_uniform():
    """The unique-hard, Heaviside model needs no length bound: a 400-token word."""
    model = dyck.dyck_kd(2, 2)
    word = list("([][])" * 60 + "[()()]" * 6 + "(")
    result = run_tokens(model, [word])
    assert list(result.values["accept"][0]) == dyck.dyck_prefix_members(word, 2, 2)


def test_nearest_active_head_and_invalid_arguments():
    with pytest.raises(ValueError, match="number of bracket types"):
        dyck.dyck_kd(0, 2)
    with pytest.raises(ValueError, match="depth must be an integer"):
        dyck.dyck_kd(1, 0)
    with pytest.raises(ValueError, match="weighting must be one of"):
        dyck.dyck_kd(1, 2, weighting="softmax")
    with pytest.raises(ValueError, match="max_len must be None or an integer"):
        dyck.dyck_kd(1, 2, max_len=0)
    with pytest.raises(ValueError, match="side must be"):
        dyck.nearest_active({"a": 1.0}, {"x": {"a": 1.0}}, side="up", one={"one": 1.0})
    assert dyck.bracket_pairs(6)[4:] == [("(5", ")5"), ("(6", ")6")]
