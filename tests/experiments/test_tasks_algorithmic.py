"""The algorithmic tasks (crasp_compiler/experiments/tasks/algorithmic.py): generators against
straightforward Python (format, LEN, answers, constraints), and the programs' labels (the
interpreter and the compiled model) against the targets."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from crasp_compiler.errors import CraspError
from crasp_compiler.experiments.tasks.algorithmic import (
    EOS,
    SEP,
    SOS,
    TASKS,
    UNDECIDED,
    CopyUnique,
    Majority,
    Sort,
    program_text,
)
from crasp_compiler.experiments.tasks.base import Example

TABLE_3 = {
    "binary_majority": "C-RASP[∅]",
    "binary_majority_interleave": "C-RASP[periodic,local]",
    "majority": "C-RASP[∅]",
    "sort": "C-RASP[∅]",
    "copy_unique": "C-RASP[periodic,local]",
    "copy_repeat": "none",
    "parity": "none",
    "addition": "none",
}
L_MIN = {
    "binary_majority": 1,
    "binary_majority_interleave": 3,
    "majority": 1,
    "sort": 1,
    "copy_unique": 1,
    "copy_repeat": 1,
    "parity": 0,
    "addition": 4,
}
WITH_PROGRAM = {"binary_majority", "binary_majority_interleave", "majority", "sort", "copy_unique"}
BY_NAME = {task.name: task for task in TASKS}
SMALL = 12  # vocabulary of the cheap sort / copy (unique) instances


def split(example: Example, separator: str = SEP) -> tuple[list[str], list[str]]:
    """The input part (between $ and the separator) and the output part (before EOS)."""
    tokens = list(example.tokens)
    assert tokens[0] == SOS and tokens[-1] == EOS
    cut = tokens.index(separator)
    return tokens[1:cut], tokens[cut + 1 : -1]


def answer(name: str, example: Example) -> list[str]:
    """The expected output, computed independently of the task module."""
    if name == "addition":
        prompt, _ = split(example, "=")
        x, y = "".join(prompt).split("+")
        return list(bin(int(x, 2) + int(y, 2))[2:])
    inputs, _ = split(example)
    if name == "binary_majority":
        return ["1" if inputs.count("1") > inputs.count("0") else "0"]
    if name == "binary_majority_interleave":
        streams = [inputs[m::3] for m in range(3)]
        return ["1" if s.count("1") > s.count("0") else "0" for s in streams]
    if name == "majority":
        return [max(set(inputs), key=inputs.count)]
    if name == "sort":
        return [str(k) for k in sorted(int(s) for s in inputs)]
    if name in ("copy_unique", "copy_repeat"):
        return list(inputs)
    if name == "parity":
        return ["e" if inputs.count("1") % 2 == 0 else "o"]
    raise AssertionError(name)


def check_constraints(name: str, example: Example) -> None:
    if name == "addition":
        prompt, _ = split(example, "=")
        x, y = "".join(prompt).split("+")
        assert x and y and set(x + y) <= {"0", "1"}
        assert x == "0" or x[0] == "1"
        assert y == "0" or y[0] == "1"
        assert example.length == len(x) + len(y) + 2
        return
    inputs, _ = split(example)
    assert example.length == len(inputs)
    if name == "binary_majority":
        assert 2 * inputs.count("1") != len(inputs)
    elif name == "binary_majority_interleave":
        assert len(inputs) % 3 == 0
        assert all(2 * inputs[m::3].count("1") != len(inputs) // 3 for m in range(3))
    elif name == "majority":
        counts = sorted(Counter(inputs).values(), reverse=True)
        assert len(counts) == 1 or counts[0] > counts[1]
    elif name in ("sort", "copy_unique"):
        assert len(set(inputs)) == len(inputs)


def lengths_of(task, top: int = 60) -> list[int]:
    return [n for n in (0, 1, 2, 3, 4, 5, 6, 7, 9, 12, 13, 30, 50, 51, top) if task.feasible(n)]


def test_the_eight_tasks() -> None:
    assert [task.name for task in TASKS] == list(TABLE_3)
    for task in TASKS:
        assert task.family == "algorithmic"
        assert task.crasp_class == TABLE_3[task.name]
        assert task.min_length == L_MIN[task.name]
        assert task.train_max == 50
        assert task.vocab[0] == SOS and len(set(task.vocab)) == len(task.vocab)
        assert set(task.labels) <= set(task.vocab) and EOS in task.labels
        assert (task.program is not None) == (task.name in WITH_PROGRAM)


@pytest.mark.parametrize("name", list(TABLE_3))
def test_generators(name: str) -> None:
    task = BY_NAME[name]
    rng = np.random.default_rng(7)
    for length in [*lengths_of(task), 150]:
        for _ in range(20):
            example = task.sample(rng, length)
            assert example.length == length
            assert set(example.tokens) <= set(task.vocab)
            check_constraints(name, example)
            separator = "=" if name == "addition" else SEP
            first = example.tokens.index(separator)
            _, output = split(example, separator)
            assert output == answer(name, example)
            # targets: the next token from the separator to the last output token
            for t, target in enumerate(example.targets):
                if first <= t < len(example.tokens) - 1:
                    assert target == example.tokens[t + 1] and target in task.labels
                else:
                    assert target is None


def test_feasible_lengths() -> None:
    interleave, sort = BY_NAME["binary_majority_interleave"], BY_NAME["sort"]
    assert interleave.lengths(1, 10) == [3, 6, 9]
    assert sort.lengths(148, 152) == [148, 149, 150]
    assert BY_NAME["parity"].lengths(0, 2) == [0, 1, 2]
    assert BY_NAME["addition"].lengths(0, 5) == [4, 5]
    rng = np.random.default_rng(0)
    for task, length in [
        (interleave, 7),
        (sort, 151),
        (CopyUnique(vocab_size=SMALL), SMALL + 1),
        (BY_NAME["addition"], 3),
        (BY_NAME["majority"], 0),
    ]:
        with pytest.raises(ValueError):
            task.sample(rng, length)
    with pytest.raises(ValueError):
        Sort(vocab_size=0)


def test_vocabulary_size_parameter() -> None:
    task = Sort(vocab_size=SMALL)
    assert task.vocab == (SOS, *(str(k) for k in range(SMALL)), SEP, EOS)
    assert task.labels == (*(str(k) for k in range(SMALL)), EOS)
    assert len(BY_NAME["copy_unique"].labels) == 151
    example = task.sample(np.random.default_rng(1), SMALL)
    assert sorted(split(example)[0], key=int) == [str(k) for k in range(SMALL)]


def test_parity_ones_are_uniform_given_len() -> None:
    rng = np.random.default_rng(3)
    ones = Counter(split(BY_NAME["parity"].sample(rng, 4))[0].count("1") for _ in range(2500))
    assert sorted(ones) == [0, 1, 2, 3, 4]
    assert all(400 <= ones[k] <= 600 for k in range(5))  # 500 expected each


def test_addition_first_operand_length_is_uniform() -> None:
    rng = np.random.default_rng(4)
    addition = BY_NAME["addition"]
    sizes = Counter(split(addition.sample(rng, 7), "=")[0].index("+") for _ in range(800))
    assert sorted(sizes) == [1, 2, 3, 4]  # |x| in [1, LEN - 3]: y is never empty
    assert all(150 <= sizes[k] <= 250 for k in sizes)  # 200 expected each


def test_program_files_match_the_generated_programs() -> None:
    for task in TASKS:
        if task.program is None:
            with pytest.raises(CraspError):
                program_text(task)
            continue
        assert task.program_path.read_text(encoding="utf-8") == program_text(task)


def program_tasks() -> list:
    small = [Sort(vocab_size=SMALL), CopyUnique(vocab_size=SMALL)]
    return [
        BY_NAME[n] for n in ("binary_majority", "binary_majority_interleave", "majority")
    ] + small


@pytest.mark.parametrize("task", program_tasks(), ids=lambda task: task.name)
def test_program_labels_equal_the_targets(task) -> None:
    rng = np.random.default_rng(11)
    examples = [
        task.sample(rng, length)
        for length in lengths_of(task, top=90) + task.lengths(140, 150)
        for _ in range(6)
    ]
    expected = [list(example.targets) for example in examples]
    assert task.compiled_labels(examples, backend="interpreter") == expected
    assert task.compiled_labels(examples, backend="compiled") == expected
    relation = task.crasp_program().relation_class
    assert relation == ("C-RASP[periodic]" if "interleave" in task.name else "C-RASP[∅]")


@pytest.mark.parametrize("name", ["sort", "copy_unique"])
def test_paper_vocabulary_programs(name: str) -> None:
    """The 150-token programs: the interpreter on long inputs, the compiled model on a
    few short ones (it is wide: about 1000 residual dimensions)."""
    task = type(BY_NAME[name])()
    rng = np.random.default_rng(5)
    examples = [task.sample(rng, length) for length in (1, 2, 17, 75, 149, 150) for _ in range(3)]
    expected = [list(example.targets) for example in examples]
    assert task.compiled_labels(examples, backend="interpreter") == expected
    assert task.compiled_labels(examples[:9], backend="compiled") == expected[:9]


def test_undecided_where_not_exactly_one_output_holds() -> None:
    task = Majority()
    tie = ("$", "a", "b", SEP, "a", EOS)  # a tie: not a task input, two outputs hold
    example = Example(tie, (None, None, None, "a", EOS, None), 2)
    for backend in ("interpreter", "compiled"):
        assert task.compiled_labels([example], backend=backend) == [
            [None, None, None, UNDECIDED, EOS, None]
        ]


def test_errors() -> None:
    example = BY_NAME["parity"].sample(np.random.default_rng(0), 3)
    with pytest.raises(NotImplementedError):
        BY_NAME["parity"].compiled_labels([example])
    with pytest.raises(CraspError):
        BY_NAME["binary_majority"].compiled_labels([], backend="torch")
