"""The Chomsky-hierarchy tasks (crasp_compiler/experiments/tasks/chomsky.py): every generator against
an independent check of the task's definition (Python's eval, int(), sorted(), a stack
simulation, isqrt bounds) on random inputs, the input construction (query tokens, scored
positions, output lengths) and the token and label sets."""

from __future__ import annotations

import math

import numpy as np
import pytest

from crasp_compiler.experiments.tasks.base import Example
from crasp_compiler.experiments.tasks.chomsky import EOS, QUERY, TASKS

BY_NAME = {task.name: task for task in TASKS}
LENGTHS = [*range(1, 14), 40, 41, 97, 200]

OUTPUT_LENGTHS = {
    "even_pairs": lambda n: 1,
    "modular_arithmetic": lambda n: 1,
    "parity_check": lambda n: 1,
    "cycle_navigation": lambda n: 1,
    "stack_manipulation": lambda n: n + 1,
    "reverse_string": lambda n: n,
    "modular_arithmetic_brackets": lambda n: 1,
    "solve_equation": lambda n: 1,
    "duplicate_string": lambda n: 2 * n,
    "missing_duplicate_string": lambda n: 1,
    "odds_first": lambda n: n,
    "binary_addition": lambda n: n + 1,
    "binary_multiplication": lambda n: n,
    "compute_sqrt": lambda n: (n + 1) // 2,
    "bucket_sort": lambda n: n,
}
LEVELS = {
    "R": {"even_pairs", "modular_arithmetic", "parity_check", "cycle_navigation"},
    "DCF": {
        "stack_manipulation",
        "reverse_string",
        "modular_arithmetic_brackets",
        "solve_equation",
    },
}


def _split(task, example: Example) -> tuple[list[str], list[str | None]]:
    """The task input and the targets at the query positions."""
    k = task.output_length(example.length)
    return list(example.tokens[:-k]), list(example.targets[-k:])


def _scored(outputs: list[str | None]) -> list[str]:
    return [o for o in outputs if o is not None]


def _little_endian(bits: list[str]) -> int:
    return int("".join(reversed(bits)), 2)


# ------------------------------------------------------------------ independent checks


def check_even_pairs(x, y, n):
    assert len(x) == n
    assert y == [str(int(x[0] != x[-1]))]


def check_modular_arithmetic(x, y, n):
    assert len(x) == (n if n % 2 else n - 1)
    assert all(t.isdigit() for t in x[::2]) and all(t in "+-*" for t in x[1::2])
    assert y == [str(eval("".join(x)) % 5)]


def check_parity_check(x, y, n):
    assert y == [str(sum(int(b) for b in x) % 2)]


def check_cycle_navigation(x, y, n):
    assert y == [str(sum(int(m) for m in x) % 5)]


def check_stack_manipulation(x, y, n):
    if n == 1:
        assert x[0] in "01" and y == [x[0], EOS]
        return
    size = next(k for k, t in enumerate(x) if t not in ("0", "1"))
    assert 1 <= size <= n - 1
    stack = x[:size]
    pushes = {"PUSH0": "0", "PUSH1": "1"}
    for action in x[size:]:
        assert action in ("POP", *pushes)
        if action == "POP":
            del stack[-1:]  # nothing to pop on an empty stack
        else:
            stack.append(pushes[action])
    top_first = stack[::-1]
    assert y == [*top_first, EOS] + [None] * (n - len(stack))


def check_reverse_string(x, y, n):
    assert y == [x[n - 1 - i] for i in range(n)]


def check_modular_arithmetic_brackets(x, y, n):
    assert len(x) == n
    depth = 0
    for t in x:
        depth += (t == "(") - (t == ")")
        assert depth >= 0
    assert depth == 0
    assert y == [str(eval("".join(x)) % 5)]


def check_solve_equation(x, y, n):
    assert len(x) == n
    if n < 3:
        assert x == ["0"] * n and y == ["0"]
        return
    assert x.count("x") == 1 and x[-2] == "=" and x[-1].isdigit()
    assert "*" not in x
    lhs = "".join(x[:-2])
    solutions = [d for d in range(5) if eval(lhs.replace("x", str(d))) % 5 == int(x[-1])]
    assert y == [str(d) for d in solutions]


def check_duplicate_string(x, y, n):
    assert y == x + x


def check_missing_duplicate_string(x, y, n):
    if n == 1:
        assert x == ["1"] and y == ["1"]
        return
    half = n // 2
    assert x[2 * half :] == ["#"] * (n % 2)
    body = x[: 2 * half]
    assert body.count("_") == 1
    hole = body.index("_")
    twin = hole + half if hole < half else hole - half
    assert y == [body[twin]]
    assert all(body[k] == body[k + half] for k in range(half) if hole not in (k, k + half))


def check_odds_first(x, y, n):
    # 1-based positions 2, 4, ... first, then 1, 3, ...
    assert y == [x[p - 1] for p in range(2, n + 1, 2)] + [x[p - 1] for p in range(1, n + 1, 2)]


def _check_binary(x, y, n, op, total):
    if n <= 2:
        assert op not in x and len(x) == n
        return
    assert x.count(op) == 1
    k = x.index(op)
    a, b = x[:k], x[k + 1 :]
    assert a and b and int("".join(a), 2) > 0 and int("".join(b), 2) > 0
    result = y[: y.index(EOS)]
    want = (
        _little_endian(a) + _little_endian(b)
        if op == "+"
        else _little_endian(a) * _little_endian(b)
    )
    assert _little_endian(result) == want and result[-1] == "1"
    assert y[len(result) + 1 :] == [None] * (total - len(result) - 1)


def check_binary_addition(x, y, n):
    _check_binary(x, y, n, "+", n + 1)
    if n <= 2:
        value = _little_endian(x)
        assert value <= 2**n - 2
        result = y[: y.index(EOS)]
        assert _little_endian(result) == value and (result == ["0"] or result[-1] == "1")


def check_binary_multiplication(x, y, n):
    _check_binary(x, y, n, "*", n)
    if n <= 2:
        assert y == ["0"] * (n - 1) + [EOS]


def check_compute_sqrt(x, y, n):
    value, root = int("".join(x), 2), int("".join(y), 2)
    assert len(x) == n and value >= 1
    assert root * root <= value < (root + 1) ** 2
    assert len(y) == math.ceil(n / 2)


def check_bucket_sort(x, y, n):
    assert y == sorted(x, key=int)


CHECKS = {name: globals()[f"check_{name}"] for name in OUTPUT_LENGTHS}


# ------------------------------------------------------------------ tests


def test_all_fifteen_tasks():
    assert len(TASKS) == 15
    assert set(BY_NAME) == set(OUTPUT_LENGTHS)
    for task in TASKS:
        assert task.family == "chomsky"
        assert task.encoder and task.train_max == 40 and task.min_length == 1
        assert task.crasp_class == "none" and task.program is None
        assert task.vocab[-1] == QUERY and len(set(task.vocab)) == len(task.vocab)
        assert QUERY not in task.labels
        expected = next((lvl for lvl, names in LEVELS.items() if task.name in names), "CS")
        assert task.level == expected
    invariant = {t.name for t in TASKS if t.permutation_invariant}
    assert invariant == {"parity_check", "cycle_navigation", "bucket_sort"}


@pytest.mark.parametrize("name", sorted(OUTPUT_LENGTHS))
def test_generator_matches_the_definition(name):
    task, check = BY_NAME[name], CHECKS[name]
    rng = np.random.default_rng(7)
    for n in LENGTHS:
        assert task.output_length(n) == OUTPUT_LENGTHS[name](n)
        for _ in range(30 if n <= 13 else 5):
            example = task.sample(rng, n)
            assert example.length == n
            x, y = _split(task, example)
            k = task.output_length(n)
            assert example.tokens[-k:] == (QUERY,) * k
            assert QUERY not in x
            assert example.targets[: len(x)] == (None,) * len(x)
            assert y[0] is not None
            check(x, y, n)


@pytest.mark.parametrize("name", sorted(OUTPUT_LENGTHS))
def test_tokens_and_labels_are_the_declared_sets(name):
    task = BY_NAME[name]
    rng = np.random.default_rng(11)
    tokens, labels = set(), set()
    for n in [*range(1, 13), 25] * 10:
        example = task.sample(rng, n)
        tokens.update(example.tokens)
        labels.update(_scored(list(example.targets)))
    assert tokens == set(task.vocab)
    assert labels == set(task.labels)


@pytest.mark.parametrize("name", sorted(OUTPUT_LENGTHS))
def test_sampling_is_reproducible_and_varied(name):
    task = BY_NAME[name]
    first = [task.sample(np.random.default_rng(3), 20) for _ in range(2)]
    assert first[0] == first[1]
    rng = np.random.default_rng(3)
    assert len({task.sample(rng, 20).tokens for _ in range(20)}) > 10


def test_scored_positions_end_at_the_terminator():
    task = BY_NAME["stack_manipulation"]
    rng = np.random.default_rng(5)
    for _ in range(50):
        example = task.sample(rng, 9)
        _, y = _split(task, example)
        end = y.index(EOS)
        assert all(label is not None for label in y[: end + 1])
        assert all(label is None for label in y[end + 1 :])


def test_examples_from_the_benchmark():
    # binary addition: 001+01101 (4 + 22 = 26) gives 01011 then the terminator
    assert _little_endian(list("01011")) == 26
    # the generators reject LEN 0
    for task in TASKS:
        with pytest.raises(ValueError):
            task.sample(np.random.default_rng(0), 0)


def test_class_balance_of_classification_tasks():
    rng = np.random.default_rng(9)
    for name in ("even_pairs", "parity_check", "cycle_navigation", "missing_duplicate_string"):
        task = BY_NAME[name]
        counts = {label: 0 for label in task.labels}
        for _ in range(400):
            counts[_split(task, task.sample(rng, 30))[1][0]] += 1
        assert min(counts.values()) > 400 / len(counts) / 2
