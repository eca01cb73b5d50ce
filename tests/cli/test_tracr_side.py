"""The pure helpers of benchmarks/tracr_side.py: its test inputs, the interleaved CPU
timing, the ratios and the tables. None of this needs tracr, jax or torch."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "tracr_side.py"


def _load():
    return load_benchmark("tracr_side")


def _nested(word: list[str], pairs: list[str]) -> bool:
    stack = []
    for c in word:
        opening = [p for p in pairs if p[0] == c]
        if opening:
            stack.append(opening[0][1])
        elif not stack or stack.pop() != c:
            return False
    return not stack


def test_inputs_are_uniform_balanced_and_changed():
    side = _load()
    for pairs in (["()"], ["()", "{}"]):
        for n in (8, 9):
            words = side.inputs(pairs, n, seed=n)
            assert len(words) == 3 * side.SAMPLES
            assert all(len(w) == n for w in words)
            balanced = words[side.SAMPLES : 2 * side.SAMPLES]
            changed = words[2 * side.SAMPLES :]
            if n % 2 == 0:
                assert all(_nested(w, pairs) for w in balanced)
            for b, c in zip(balanced, changed, strict=True):
                assert sum(x != y for x, y in zip(b, c, strict=True)) == 1
            assert words == side.inputs(pairs, n, seed=n)  # seeded


def test_interleaved_medians_and_rotation():
    side = _load()
    now = [0.0]
    calls: list[str] = []

    def case(name: str, cost: float):
        def go():
            calls.append(name)
            now[0] += cost

        return go

    cases = {"a": case("a", 0.01), "b": case("b", 0.05), "c": case("c", 0.001)}
    seconds = side.interleaved(cases, repeats=3, min_sample_s=0.02, clock=lambda: now[0])
    assert seconds == pytest.approx({"a": 0.01, "b": 0.05, "c": 0.001})
    # one warm-up each, then k calls per sample (k: 2, 1, 20) in rotated order
    assert calls[:3] == ["a", "b", "c"]
    rounds = calls[3:]
    assert rounds.count("a") == 6 and rounds.count("b") == 3 and rounds.count("c") == 60
    firsts = [rounds[0], rounds[2 + 1 + 20], rounds[2 * (2 + 1 + 20)]]
    assert firsts == ["a", "b", "c"]


def test_ratios_and_span():
    side = _load()
    seconds = {"tracr jit": 0.01, "tracr jit forward only": 0.008, "numpy f32": 0.001}
    assert side.ratios(seconds, "tracr jit") == {"numpy f32": 10.0}
    assert side.ratios(seconds, "tracr jit forward only") == {"numpy f32": 8.0}
    assert side.span([6.2, 9.4, 7.0]) == "6–9"
    assert side.span([1234.4, 1234.3]) == "1,234"


def _row(one_at_a_time: bool) -> dict:
    side = _load()
    ms = {"tracr jit": 4.8, "tracr jit forward only": 4.2} | dict.fromkeys(side.OURS, 0.6)
    row = {
        "program": "Dyck-1",
        "max_seq_len": 8,
        "inputs": 120,
        "batch_shape": [120, 9],
        "tracr": {
            "compile_cpu_s": 2.7,
            "jit_compile_cpu_s": 0.28,
            "width": 47,
            "layers": 6,
            "parameters": 173447,
            "wrong": 0,
            "evaluator_wrong": 0,
        },
        "ours": {
            "compile_cpu_s": 0.0058,
            "width": 13,
            "layers": 2,
            "parameters": 421,
            "wrong": dict.fromkeys(side.OURS, 0),
        },
        "batch_cpu_ms": ms,
        "tracr_jit_over": side.ratios(ms, "tracr jit"),
        "tracr_forward_only_over": side.ratios(ms, "tracr jit forward only"),
    }
    if one_at_a_time:
        row["one_at_a_time"] = {
            "tracr_apply_unjitted_tokens_per_cpu_s": 278,
            "numpy_float64_tokens_per_cpu_s": 39898,
        }
    return row


def test_markdown_tables():
    side = _load()
    text = side.markdown_rows([_row(False)])
    assert "| Dyck-1 | 8 | tracr | 2.70 (+ jit 0.28) | 47 | 6 | 173,447 | 0 / 120 |" in text
    assert "| Dyck-1 | 8 | 120 × 9 | 4.80 | 4.20 | 0.60 | 0.60 | 0.60 | 0.60 | 8× | 7× |" in text
    assert "One input at a time" not in text
    text = side.markdown_rows([_row(True)])
    assert "not like with like" in text
    assert "| Dyck-1 | 8 | 278 | 39,898 | 144× |" in text
