"""The 17 regular-language tasks against oracles written here, independently of the module.

Membership is a regular expression or a count per language (``MEMBER``). Next-symbol sets
are brute force over completions: ``x`` may follow ``u`` iff some ``u x v`` with
``|v| <= K`` is a member (``K`` at least the longest shortest completion), memoised by
learning each language's Myhill–Nerode classes from those membership signatures.
"""

from __future__ import annotations

import functools
import itertools
import re

import numpy as np
import pytest

from crasp_compiler import load_program
from crasp_compiler.errors import CraspError
from crasp_compiler.experiments.tasks.base import CLASSES, Example
from crasp_compiler.experiments.tasks.regular import TASKS


def _runs_ok(word: str) -> bool:
    """Tomita 3 (Bhattamishra et al.): no odd run of 1s directly followed by an odd run of 0s."""
    runs = re.findall("1+|0+", word)
    return not any(a[0] == "1" and len(a) % 2 and len(b) % 2 for a, b in itertools.pairwise(runs))


def _dyck_regex(depth: int) -> str:
    """D_n = (a D_{n-1} b)*, D_0 = ε, spelled out as nested groups."""
    inner = ""
    for _ in range(depth):
        inner = f"(?:a{inner}b)*"
    return inner


def _regex(pattern: str):
    compiled = re.compile(pattern)
    return lambda word: compiled.fullmatch(word) is not None


# name -> (alphabet, membership, completion bound K)
MEMBER = {
    "tomita1": ("01", _regex("1*"), 3),
    "tomita2": ("01", _regex("(?:10)*"), 3),
    "tomita3": ("01", _runs_ok, 4),
    "tomita4": ("01", lambda w: "000" not in w, 3),
    "tomita5": ("01", lambda w: w.count("0") % 2 == 0 and w.count("1") % 2 == 0, 3),
    "tomita6": ("01", lambda w: (w.count("0") - w.count("1")) % 3 == 0, 3),
    "tomita7": ("01", _regex("0*1*0*1*"), 4),
    "d2": ("ab", _regex(_dyck_regex(2)), 3),
    "d3": ("ab", _regex(_dyck_regex(3)), 4),
    "d4": ("ab", _regex(_dyck_regex(4)), 5),
    "d12": ("ab", _regex(_dyck_regex(12)), 12),
    "aa_star": ("a", _regex("(?:aa)*"), 3),
    "aaaa_star": ("a", _regex("(?:aaaa)*"), 4),
    "abab_star": ("ab", _regex("(?:abab)*"), 4),
    "abcde": ("abcde", _regex("a+b+c+d+e+"), 5),
    "abdbc": ("abcd", _regex("[ab]*d[bc]*"), 3),
    "sigma_02star": ("012", _regex("[012]*02*"), 3),
}
NO_PROGRAM = {"tomita3", "tomita5", "tomita6", "sigma_02star"}
EMPTY_CLASS = {"tomita1", "tomita2", "tomita7", "d2", "d3", "d4", "d12", "abcde", "abdbc"}
EXHAUSTIVE = 10
TASK = {task.name: task for task in TASKS}
PROGRAM_TASKS = [task.name for task in TASKS if task.program is not None]


class Oracle:
    """One language's Myhill–Nerode classes, learned from membership of ``u v``, |v| <= K."""

    def __init__(self, name: str) -> None:
        self.alphabet, self.member, bound = MEMBER[name]
        self.suffixes = [
            "".join(p) for n in range(bound + 1) for p in itertools.product(self.alphabet, repeat=n)
        ]
        self.start = self.signature("")
        self.classes = {self.start}
        self.step: dict[tuple, tuple] = {}
        todo = [("", self.start)]
        while todo:
            word, state = todo.pop()
            for x in self.alphabet:
                target = self.step[state, x] = self.signature(word + x)
                if target not in self.classes:
                    self.classes.add(target)
                    todo.append((word + x, target))

    def signature(self, word: str) -> tuple[bool, ...]:
        return tuple(self.member(word + v) for v in self.suffixes)

    def states(self, word: str) -> list[tuple]:
        states = [self.start]
        for x in word:
            states.append(self.step[states[-1], x])
        return states

    def label(self, state: tuple) -> str:
        legal = [x for x in self.alphabet if any(self.step[state, x])]
        return "|".join(legal + ["EOS"] * state[0])  # suffixes[0] is the empty suffix

    def targets(self, word: str) -> tuple[str, ...]:
        return tuple(self.label(state) for state in self.states(word))

    def labels(self) -> set[str]:
        return {self.label(state) for state in self.classes if any(state)}

    def count(self, length: int) -> int:
        """Members of length ``length``, by path counting over the learned classes."""
        ways = {self.start: 1}
        for _ in range(length):
            nxt: dict[tuple, int] = {}
            for state, n in ways.items():
                for x in self.alphabet:
                    target = self.step[state, x]
                    nxt[target] = nxt.get(target, 0) + n
            ways = nxt
        return sum(n for state, n in ways.items() if state[0])

    def members(self, max_length: int) -> list[str]:
        """Every member of length <= max_length (depth-first over live classes)."""
        found, stack = [], [("", self.start)]
        while stack:
            word, state = stack.pop()
            if state[0]:
                found.append(word)
            if len(word) < max_length:
                for x in self.alphabet:
                    target = self.step[state, x]
                    if any(target):
                        stack.append((word + x, target))
        return found


@functools.cache
def oracle(name: str) -> Oracle:
    result = Oracle(name)
    # the learned classes reproduce membership on every short string
    max_length = 8 if len(result.alphabet) <= 2 else 5
    for n in range(max_length + 1):
        for word in map("".join, itertools.product(result.alphabet, repeat=n)):
            assert result.states(word)[-1][0] == result.member(word), (name, word)
    return result


def as_example(word: str, targets: tuple[str, ...]) -> Example:
    return Example(("$", *word), targets, len(word))


def test_registry_shape():
    assert len(TASKS) == 17
    assert [t.name for t in TASKS] == list(MEMBER)
    assert len(PROGRAM_TASKS) == 13
    for task in TASKS:
        alphabet = tuple(MEMBER[task.name][0])
        assert task.family == "regular"
        assert task.crasp_class in CLASSES
        assert task.vocab == ("$", *alphabet)
        assert task.train_max == 50
        if task.name in NO_PROGRAM:
            assert task.program is None and task.crasp_class == "none"
            continue
        assert task.program == f"next_{task.name}.cr"
        program = load_program(task.program_path)
        assert program.alphabet == alphabet
        assert program.outputs == tuple(f"NEXT_{s}" for s in (*alphabet, "EOS"))
        if task.name in EMPTY_CLASS:
            assert task.crasp_class == program.relation_class == "C-RASP[∅]"
        else:
            assert task.crasp_class == "C-RASP[periodic,local]"
            assert program.relation_class in ("C-RASP[periodic]", "C-RASP[local]")


@pytest.mark.parametrize("name", list(MEMBER))
def test_lengths_and_labels(name):
    task, truth = TASK[name], oracle(name)
    feasible = [n for n in range(31) if truth.count(n) > 0]
    assert task.lengths(0, 30) == feasible
    assert task.lengths(7, 12) == [n for n in feasible if 7 <= n <= 12]
    assert task.min_length == min(n for n in feasible if n > 0)
    assert set(task.labels) == truth.labels()
    rng = np.random.default_rng(0)
    for n in [-1, *sorted(set(range(31)) - set(feasible))]:
        with pytest.raises(ValueError):
            task.sample(rng, n)


@pytest.mark.parametrize("name", list(MEMBER))
def test_samples_are_members_with_brute_force_targets(name):
    task, truth = TASK[name], oracle(name)
    rng = np.random.default_rng(1)
    lengths = (
        task.lengths(0, 20)
        + list(rng.choice(task.lengths(21, 150), 20))
        + [task.lengths(500, 510)[0]]
    )
    for n in lengths:
        example = task.sample(rng, int(n))
        word = "".join(example.tokens[1:])
        assert example.tokens[0] == "$" and len(word) == n == example.length
        assert truth.member(word), word
        assert example.targets == truth.targets(word)
        assert set(example.targets) <= set(task.labels)


@pytest.mark.parametrize("name", list(MEMBER))
def test_generator_diversity(name):
    """Small lengths: every member shows up, none far more often than uniform; LEN 40:
    distinct strings wherever the language has many members."""
    task, truth = TASK[name], oracle(name)
    rng = np.random.default_rng(2)
    small = [n for n in task.lengths(1, 12) if 2 <= truth.count(n) <= 40]
    for n in small[:2]:
        members = truth.count(n)
        draws = ["".join(task.sample(rng, n).tokens[1:]) for _ in range(25 * members)]
        counts = {word: draws.count(word) for word in set(draws)}
        assert len(counts) == members
        assert max(counts.values()) <= 75
    n = task.lengths(40, 44)[0]
    if truth.count(n) >= 10_000:
        assert len({task.sample(rng, n).tokens for _ in range(50)}) >= 45
    assert name in {"tomita1", "tomita2", "aa_star", "aaaa_star", "abab_star"} or small


@pytest.mark.parametrize("name", PROGRAM_TASKS)
@pytest.mark.parametrize("backend", ["interpreter", "compiled"])
def test_program_labels_exhaustive(name, backend):
    task, truth = TASK[name], oracle(name)
    words = truth.members(EXHAUSTIVE)
    assert all(truth.member(word) for word in words)
    assert len(words) >= 3
    examples = [as_example(word, truth.targets(word)) for word in words]
    labels = task.compiled_labels(examples, backend)
    for example, got in zip(examples, labels, strict=True):
        assert tuple(got) == example.targets, example.tokens


@pytest.mark.parametrize("name", PROGRAM_TASKS)
@pytest.mark.parametrize("backend", ["interpreter", "compiled"])
def test_program_labels_random_long(name, backend):
    task = TASK[name]
    rng = np.random.default_rng(3)
    examples = [task.sample(rng, int(n)) for n in rng.choice(task.lengths(11, 150), 40)]
    labels = task.compiled_labels(examples, backend)
    for example, got in zip(examples, labels, strict=True):
        assert tuple(got) == example.targets, example.tokens


def test_unscored_positions_stay_unscored():
    task = TASK["d2"]
    example = Example(("$", "a", "b"), (None, "a|b", None), 2)
    assert task.compiled_labels([example], "interpreter") == [[None, "a|b", None]]


def test_program_labels_alignment_and_errors():
    task = TASK["abdbc"]
    outputs = {
        "NEXT_a": [True, False],
        "NEXT_b": [True, True],
        "NEXT_c": [False, True],
        "NEXT_d": [True, False],
        "NEXT_EOS": [False, True],
    }
    assert task.program_labels(("$", "d"), outputs) == ["a|b|d", "b|c|EOS"]
    with pytest.raises(ValueError):
        task.program_labels(("d",), outputs)
    with pytest.raises(CraspError):
        task.compiled_labels([task.sample(np.random.default_rng(0), 3)], "gpu")


@pytest.mark.parametrize("name", sorted(NO_PROGRAM))
def test_tasks_without_program(name):
    task = TASK[name]
    with pytest.raises(NotImplementedError):
        task.compiled_labels([task.sample(np.random.default_rng(0), task.min_length)])
