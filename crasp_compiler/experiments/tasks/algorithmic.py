"""The 8 algorithmic tasks of the C-RASP paper (Huang et al., App. E.2.1, Table 3).

Every example is ``$ input SEP output EOS`` (addition: ``$ x + y = z EOS``). The model
input is the whole sequence; the target at a position is the next token when that token
belongs to the output part (the position of ``SEP`` predicts y_1, …, the last output
token predicts ``EOS``) and ``None`` elsewhere, so the loss covers the output only.
``Example.length`` is the paper's LEN: the length of the input part (binary majority
interleave: the 3n interleaved bits; addition: ``|x| + |y| + 2``). ``lengths(lo, hi)``
lists the feasible LENs; ``sample`` raises ValueError for others (binary majority
interleave: multiples of 3; sort and copy (unique): at most ``vocab_size``).

``crasp_class`` is the paper's (Table 3). Programs: binary majority, majority, binary
majority interleave, sort and copy (unique) have C-RASP programs with one output
``NEXT_<label>`` per label; the label at a scored position is the one label whose output
holds (:data:`UNDECIDED` when none or several do). :func:`program_text` writes the
program for a task's vocabulary; ``tasks/programs/algo_<name>.cr`` holds it for the
registered (default) task. The sort and copy (unique) programs count outputs instead of
reading the last output token (see the tasks' ``notes``): both are C-RASP[∅] with O(|V|)
operations.

How a sequence maps onto a program input: the program reads the example without its
leading ``$`` (the compiled model's BOS plays ``$``), so the program alphabet is
``vocab`` without ``$`` and program position p is example position p + 1. A definition's
value after the first t tokens of the program input (``Trace.values[name][t]``, and the
compiled model's output at position t, BOS = 0) is then the prediction at example
position t.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from crasp_compiler.errors import CraspError, Diagnostic
from crasp_compiler.experiments.tasks.base import Example, SequenceTask, crasp_language
from crasp_compiler.model.model import Model
from crasp_compiler.runtime.numpy_exec import run_tokens

FAMILY = "algorithmic"
SOS, SEP, EOS = "$", "SEP", "EOS"
EMPTY, PERIODIC_LOCAL, NONE = "C-RASP[∅]", "C-RASP[periodic,local]", "none"
# The paper's vocabulary of sort and copy (unique): 150 non-special tokens, the longest
# test length (tokens are unique, so LEN never exceeds the vocabulary).
PAPER_VOCAB_SIZE = 150
# The label compiled_labels reports where not exactly one NEXT_<label> output holds.
UNDECIDED = "?"
# The number of interleaved streams of binary majority interleave.
STREAMS = 3
# Examples per run of the compiled model (bounds the executor's memory).
RUN_BATCH = 16


@dataclass
class AlgorithmicTask(SequenceTask):
    """A task of the family: the example format, feasible lengths and, for tasks with a
    program, the interpreter and compiled-model labels."""

    name: str = ""
    family: str = FAMILY
    description: str = ""
    _program: Any = field(default=None, init=False, repr=False, compare=False)
    _model: Model | None = field(default=None, init=False, repr=False, compare=False)

    # ------------------------------------------------------------------ lengths

    def feasible(self, length: int) -> bool:
        """Whether examples of LEN ``length`` exist."""
        return length >= self.min_length

    def lengths(self, lo: int, hi: int) -> list[int]:
        """The feasible LENs in ``[lo, hi]``."""
        return [n for n in range(max(lo, 0), hi + 1) if self.feasible(n)]

    def _check_length(self, length: int) -> None:
        if not self.feasible(length):
            raise ValueError(f"task {self.name!r} has no example of LEN {length}")

    def _example(self, prompt: Sequence[str], output: Sequence[str], length: int) -> Example:
        """``$ prompt output EOS`` with the next token as target from the last prompt token
        (SEP or =) to the last output token."""
        tokens = (SOS, *prompt, *output, EOS)
        first = len(prompt)  # index of the last prompt token ("$" is index 0)
        targets = tuple(
            tokens[t + 1] if first <= t < len(tokens) - 1 else None for t in range(len(tokens))
        )
        return Example(tokens, targets, length)

    # ------------------------------------------------------------------ programs

    def program_text(self) -> str:
        """The task's C-RASP program for its vocabulary (outputs ``NEXT_<label>``)."""
        raise CraspError([Diagnostic(f"task {self.name!r} has no C-RASP program")])

    def crasp_program(self) -> Any:
        """The parsed and checked program (parsed once)."""
        if self._program is None:
            alphabet = [token for token in self.vocab if token != SOS]
            self._program = crasp_language().parse(
                self.program_text(), f"<{self.name}>", alphabet=alphabet
            )
        return self._program

    def compiled_model(self) -> Model:
        """The program compiled in heaviside mode (exact at every length; compiled once)."""
        if self._model is None:
            self._model = crasp_language().compile(self.crasp_program())
        return self._model

    def compiled_labels(
        self, examples: list[Example], backend: str = "compiled"
    ) -> list[list[str | None]]:
        """The program's label at every scored position (see :class:`SequenceTask`);
        :data:`UNDECIDED` where not exactly one ``NEXT_<label>`` output holds."""
        if self.program is None:
            return super().compiled_labels(examples, backend)
        if backend not in ("interpreter", "compiled"):
            raise CraspError(
                [Diagnostic(f"unknown backend {backend!r}", hint="interpreter or compiled")]
            )
        program = self.crasp_program()
        names = {f"NEXT_{label}": label for label in self.labels}
        inputs = [list(example.tokens[1:]) for example in examples]
        # holds[k][name]: the output at every example position of example k
        holds: list[dict[str, np.ndarray]] = [{} for _ in examples]
        if backend == "interpreter":
            language = crasp_language()
            by_length: dict[int, list[int]] = defaultdict(list)
            for k, tokens in enumerate(inputs):
                by_length[len(tokens)].append(k)
            for group in by_length.values():
                values = language.definition_values(program, [inputs[k] for k in group])
                for row, k in enumerate(group):
                    holds[k] = {name: values[name][row] for name in names}
        else:
            model = self.compiled_model()
            order = sorted(range(len(inputs)), key=lambda k: len(inputs[k]))
            for start in range(0, len(order), RUN_BATCH):
                group = order[start : start + RUN_BATCH]
                result = run_tokens(model, [inputs[k] for k in group])
                for row, k in enumerate(group):
                    holds[k] = {name: result.values[name][row] for name in names}
        return [
            self.labels_from_values(example, outputs)
            for example, outputs in zip(examples, holds, strict=True)
        ]

    def labels_from_values(
        self, example: Example, values: Mapping[str, np.ndarray]
    ) -> list[str | None]:
        """The one label whose ``NEXT_<label>`` output holds (:data:`UNDECIDED` where not
        exactly one does) at every scored position."""
        row: list[str | None] = []
        for t, target in enumerate(example.targets):
            true = [
                label for label in self.labels if target is not None and values[f"NEXT_{label}"][t]
            ]
            row.append(None if target is None else true[0] if len(true) == 1 else UNDECIDED)
        return row


def program_text(task: SequenceTask) -> str:
    """The C-RASP program of an algorithmic task, written for the task's vocabulary."""
    if not isinstance(task, AlgorithmicTask):
        raise CraspError([Diagnostic(f"task {task.name!r} is not an algorithmic task")])
    return task.program_text()


def _balanced(function: str, terms: Sequence[str]) -> str:
    """``function`` (an associative binary min or max) over ``terms`` as a balanced tree."""
    if len(terms) == 1:
        return terms[0]
    half = len(terms) // 2
    left, right = _balanced(function, terms[:half]), _balanced(function, terms[half:])
    return f"{function}({left}, {right})"


def _header(title: str, alphabet: Sequence[str], ranged: int = 0) -> list[str]:
    """The program's first lines; ``ranged``: the alphabet's first symbols are "0" … the
    given count − 1, declared ``range`` (they stand in for a growing alphabet)."""
    assert list(alphabet[:ranged]) == [str(k) for k in range(ranged)]
    items = [f"range 0..{ranged - 1}"] if ranged else []
    items += [f'"{token}"' for token in alphabet[ranged:]]
    shown = ", ".join(items)
    return [
        *(f"// {line}" for line in title.split("\n")),
        '// Input: the example without its leading "$" (BOS plays "$"); the outputs at',
        "// position i give the token that follows token i + 1 of the example.",
        f"alphabet {shown}",
    ]


def _footer(labels: Sequence[str]) -> list[str]:
    return ["output " + ", ".join(f"NEXT_{label}" for label in labels)]


def _uniform_bits(rng: np.random.Generator, n: int) -> list[str]:
    """n uniformly random bits with #0 ≠ #1 (rejection sampling)."""
    while True:
        bits = rng.integers(0, 2, size=n)
        if 2 * int(bits.sum()) != n:
            return [str(b) for b in bits]


def _majority_bit(bits: Sequence[str]) -> str:
    return "1" if bits.count("1") > bits.count("0") else "0"


# ---------------------------------------------------------------------------- tasks


@dataclass
class BinaryMajority(AlgorithmicTask):
    """``$ b_1 … b_n SEP y EOS``: y the more frequent bit; uniform bits with #0 ≠ #1."""

    name: str = "binary_majority"
    description: str = "the more frequent bit of n random bits (no ties)"
    crasp_class: str = EMPTY
    program: str | None = "algo_binary_majority.cr"
    vocab: tuple[str, ...] = (SOS, "0", "1", SEP, EOS)
    labels: tuple[str, ...] = ("0", "1", EOS)
    min_length: int = 1

    def sample(self, rng: np.random.Generator, length: int) -> Example:
        self._check_length(length)
        bits = _uniform_bits(rng, length)
        return self._example([*bits, SEP], [_majority_bit(bits)], length)

    def program_text(self) -> str:
        return "\n".join(
            [
                *_header("Binary majority: $ b_1 … b_n SEP y EOS. C-RASP[∅].", self.vocab[1:]),
                'Seen = # "SEP" >= 1   // SEP at or before i',
                'Ones = # "1"          // at SEP: the 1s of the input',
                'Zeros = # "0"',
                'NEXT_0 = "SEP" && Zeros > Ones',
                'NEXT_1 = "SEP" && Ones > Zeros',
                'NEXT_EOS = Seen && !"SEP"',
                *_footer(self.labels),
                "",
            ]
        )


@dataclass
class BinaryMajorityInterleave(AlgorithmicTask):
    """``$ x¹₁ x²₁ x³₁ … x¹ₙ x²ₙ x³ₙ SEP y¹ y² y³ EOS``: three interleaved binary majority
    inputs of length n (each without ties), LEN = 3n."""

    name: str = "binary_majority_interleave"
    description: str = "the more frequent bit of each of 3 interleaved bit streams"
    crasp_class: str = PERIODIC_LOCAL
    program: str | None = "algo_binary_majority_interleave.cr"
    vocab: tuple[str, ...] = (SOS, "0", "1", SEP, EOS)
    labels: tuple[str, ...] = ("0", "1", EOS)
    min_length: int = STREAMS

    def feasible(self, length: int) -> bool:
        return length >= self.min_length and length % STREAMS == 0

    def sample(self, rng: np.random.Generator, length: int) -> Example:
        self._check_length(length)
        n = length // STREAMS
        streams = [_uniform_bits(rng, n) for _ in range(STREAMS)]
        interleaved = [streams[m][k] for k in range(n) for m in range(STREAMS)]
        answers = [_majority_bit(bits) for bits in streams]
        return self._example([*interleaved, SEP], answers, length)

    def program_text(self) -> str:
        m = STREAMS
        lines = [
            *_header(
                "Binary majority interleave: $ x¹₁ x²₁ x³₁ … x³ₙ SEP y¹ y² y³ EOS. "
                "C-RASP[periodic].",
                self.vocab[1:],
            ),
            "// the bits of stream s + 1 sit at positions i % 3 == s; SEP (position 3n) and",
            "// y¹, y² (positions 3n + 1, 3n + 2) predict the stream of their own residue",
            'Seen = # "SEP" >= 1',
            "After = # Seen        // 1 at SEP, 2 at y¹, 3 at y², 4 at y³",
        ]
        ones, zeros = [], []
        for s in range(m):
            lines += [
                f'Ones_{s} = # ("1" && !Seen && i % {m} == {s})',
                f'Zeros_{s} = # ("0" && !Seen && i % {m} == {s})',
            ]
            ones.append(f"(i % {m} == {s} && Ones_{s} > Zeros_{s})")
            zeros.append(f"(i % {m} == {s} && Zeros_{s} > Ones_{s})")
        lines += [
            f"Answer = Seen && After <= {m}",
            f"NEXT_0 = Answer && ({' || '.join(zeros)})",
            f"NEXT_1 = Answer && ({' || '.join(ones)})",
            f"NEXT_EOS = After == {m + 1}",
            *_footer(self.labels),
            "",
        ]
        return "\n".join(lines)


@dataclass
class Majority(AlgorithmicTask):
    """``$ x_1 … x_n SEP y EOS``: i.i.d. letters from ``a``–``z`` conditioned on a unique
    most frequent letter y."""

    name: str = "majority"
    description: str = "the most frequent of n random letters (unique answer)"
    crasp_class: str = EMPTY
    program: str | None = "algo_majority.cr"
    vocab: tuple[str, ...] = (SOS, *"abcdefghijklmnopqrstuvwxyz", SEP, EOS)
    labels: tuple[str, ...] = (*"abcdefghijklmnopqrstuvwxyz", EOS)
    min_length: int = 1
    notes: str = (
        "Program: y is the letter whose count reaches the maximum (a balanced tree of max);"
        " the paper's A2 compares every pair of counts (650 comparisons). The two agree on"
        " the task's inputs, whose answer is unique."
    )

    @property
    def letters(self) -> tuple[str, ...]:
        return self.labels[:-1]

    def sample(self, rng: np.random.Generator, length: int) -> Example:
        self._check_length(length)
        while True:
            letters = [self.letters[k] for k in rng.integers(0, len(self.letters), size=length)]
            counts = Counter(letters).most_common()
            if len(counts) == 1 or counts[0][1] > counts[1][1]:
                return self._example([*letters, SEP], [counts[0][0]], length)

    def program_text(self) -> str:
        counts = [f"C_{s}" for s in self.letters]
        return "\n".join(
            [
                *_header("Majority: $ x_1 … x_n SEP y EOS. C-RASP[∅].", self.vocab[1:]),
                "// y is the letter whose count reaches the maximum (the generator makes it unique)",
                *(f'C_{s} = # "{s}"' for s in self.letters),
                f"Top = {_balanced('max', counts)}",
                *(f'NEXT_{s} = "SEP" && C_{s} >= Top' for s in self.letters),
                'Seen = # "SEP" >= 1',
                'NEXT_EOS = Seen && !"SEP"',
                *_footer(self.labels),
                "",
            ]
        )


@dataclass
class _UniqueTokens(AlgorithmicTask):
    """Tasks over ``vocab_size`` number tokens ``"0"``, ``"1"``, … whose input holds
    distinct tokens, so LEN ≤ ``vocab_size`` (the paper uses 150, the longest test length;
    a smaller vocabulary makes cheap experiments and small compiled models)."""

    vocab_size: int = PAPER_VOCAB_SIZE

    def __post_init__(self) -> None:
        if self.vocab_size < 1:
            raise ValueError("vocab_size must be at least 1")
        numbers = tuple(str(k) for k in range(self.vocab_size))
        self.vocab = (SOS, *numbers, SEP, EOS)
        self.labels = (*numbers, EOS)
        if self.vocab_size != PAPER_VOCAB_SIZE:
            self.notes += (
                f" Vocabulary of {self.vocab_size} tokens: the file `program` names holds the"
                f" program for {PAPER_VOCAB_SIZE}; program_text(task) gives this one."
            )

    def feasible(self, length: int) -> bool:
        return self.min_length <= length <= self.vocab_size

    def _distinct(self, rng: np.random.Generator, length: int) -> list[int]:
        if length > self.vocab_size:
            raise ValueError(
                f"task {self.name!r}: LEN {length} exceeds the {self.vocab_size} distinct tokens"
            )
        self._check_length(length)
        return [int(k) for k in rng.choice(self.vocab_size, size=length, replace=False)]


@dataclass
class Sort(_UniqueTokens):
    """``$ x SEP sorted(x) EOS``: distinct numbers, ascending by value."""

    name: str = "sort"
    description: str = "sort distinct numbers ascending"
    crasp_class: str = EMPTY
    program: str | None = "algo_sort.cr"
    min_length: int = 1
    notes: str = (
        "Program: the next output is the number s with #(input < s) <= #outputs so far"
        " < #(input <= s) (one comparison per token), instead of the paper's 'smallest"
        " input number larger than the last output' (A4), whose disjunctions over tokens"
        " need O(|V|^2) operations."
    )

    def sample(self, rng: np.random.Generator, length: int) -> Example:
        numbers = self._distinct(rng, length)
        inputs = [str(k) for k in numbers]
        return self._example([*inputs, SEP], [str(k) for k in sorted(numbers)], length)

    def program_text(self) -> str:
        numbers = self.labels[:-1]
        lines = [
            *_header("Sort: $ x SEP sorted(x) EOS (distinct numbers). C-RASP[∅].", self.vocab[1:]),
            "// After k outputs (the k smallest inputs) the next output is the number s with",
            "// In(< s) <= k < In(<= s), In(<= s) counting the input numbers <= s. Upto_s counts",
            "// the occurrences of numbers <= s so far, In(<= s) + min(k, In(<= s)), so",
            "// In(<= s) <= k iff Upto_s <= 2k.",
            'Seen = # "SEP" >= 1',
            "Out = # Seen - 1          // k: the output tokens at or before i",
        ]
        for k, s in enumerate(numbers):
            previous = f"Upto_{numbers[k - 1]} + " if k else ""
            lines.append(f'Upto_{s} = {previous}# "{s}"')
        lines += [
            f"Done_{s} = Upto_{s} <= 2 * Out   // every input number <= {s} is output"
            for s in numbers
        ]
        for k, s in enumerate(numbers):
            below = f"Done_{numbers[k - 1]} && " if k else ""
            lines.append(f"NEXT_{s} = Seen && {below}!Done_{s}")
        lines += [f"NEXT_EOS = Seen && Done_{numbers[-1]}", *_footer(self.labels), ""]
        return "\n".join(lines)


@dataclass
class CopyUnique(_UniqueTokens):
    """``$ x SEP x EOS``: distinct numbers copied in order."""

    name: str = "copy_unique"
    description: str = "copy a sequence of distinct tokens"
    crasp_class: str = PERIODIC_LOCAL
    program: str | None = "algo_copy_unique.cr"
    min_length: int = 1
    notes: str = (
        "crasp_class is the paper's (Table 3: the induction head, C-RASP[local]; not in"
        " C-RASP[∅] as an unbounded task). Program: the next output after k outputs is"
        " the token with k input tokens before it, which is C-RASP[∅] on this task's"
        " inputs (one pass, distinct tokens, a fixed vocabulary) with O(|V|) operations;"
        " the paper's induction-head program (A5) needs |V|^2 bigram counts."
    )

    def sample(self, rng: np.random.Generator, length: int) -> Example:
        inputs = [str(k) for k in self._distinct(rng, length)]
        return self._example([*inputs, SEP], inputs, length)

    def program_text(self) -> str:
        numbers = self.labels[:-1]
        lines = [
            *_header(
                "Copy (unique): $ x SEP x EOS (distinct tokens). C-RASP[∅] for its "
                f"{len(numbers)}-token\nalphabet only: the task's alphabet grows with its "
                "length (`range`), so this\nprogram shows no class for the task (the paper: "
                "C-RASP[local], not [∅]).",
                self.vocab[1:],
                ranged=len(numbers),
            ),
            "// After k outputs the next output is the token with k input tokens before it.",
            "// Before_s counts the positions before the first s: the input tokens before s",
            "// when s occurs in the input, i + 1 > k otherwise.",
            'Seen = # "SEP" >= 1',
            "Out = # Seen - 1          // k: the output tokens at or before i",
        ]
        for s in numbers:
            lines += [f'Had_{s} = # "{s}" >= 1', f"Before_{s} = # !Had_{s}"]
        lines += [f"NEXT_{s} = Seen && Before_{s} == Out" for s in numbers]
        lines += ["NEXT_EOS = Seen && # !Seen <= Out   // every input token is output"]
        lines += [*_footer(self.labels), ""]
        return "\n".join(lines)


@dataclass
class CopyRepeat(AlgorithmicTask):
    """``$ x SEP x EOS``: i.i.d. uniform symbols from {a, b}."""

    name: str = "copy_repeat"
    description: str = "copy a random string over {a, b}"
    crasp_class: str = NONE
    vocab: tuple[str, ...] = (SOS, "a", "b", SEP, EOS)
    labels: tuple[str, ...] = ("a", "b", EOS)
    min_length: int = 1

    def sample(self, rng: np.random.Generator, length: int) -> Example:
        self._check_length(length)
        symbols = [("a", "b")[k] for k in rng.integers(0, 2, size=length)]
        return self._example([*symbols, SEP], symbols, length)


@dataclass
class Parity(AlgorithmicTask):
    """``$ x SEP e|o EOS``: n bits whose number of 1s is uniform in 0..n (positions
    uniform); ``e`` for an even number of 1s, ``o`` for odd."""

    name: str = "parity"
    description: str = "whether a bit string has an even (e) or odd (o) number of 1s"
    crasp_class: str = NONE
    vocab: tuple[str, ...] = (SOS, "0", "1", SEP, "e", "o", EOS)
    labels: tuple[str, ...] = ("e", "o", EOS)
    min_length: int = 0

    def sample(self, rng: np.random.Generator, length: int) -> Example:
        self._check_length(length)
        ones = int(rng.integers(0, length + 1))
        bits = np.zeros(length, dtype=int)
        bits[rng.choice(length, size=ones, replace=False)] = 1
        answer = "o" if ones % 2 else "e"
        return self._example([*(str(b) for b in bits), SEP], [answer], length)


@dataclass
class Addition(AlgorithmicTask):
    """``$ x + y = z EOS`` in binary, most significant bit first, LEN = |x| + |y| + 2.

    |x| is uniform in [1, LEN − 3] and y takes the rest, so both operands are non-empty
    (the paper prints [1, LEN − 2], which allows an empty y). Operands are numerals
    without leading zeros (a numeral longer than one bit starts with 1; the other bits
    are uniform); z = x + y without leading zeros."""

    name: str = "addition"
    description: str = "binary addition x + y = z, most significant bit first"
    crasp_class: str = NONE
    vocab: tuple[str, ...] = (SOS, "0", "1", "+", "=", EOS)
    labels: tuple[str, ...] = ("0", "1", EOS)
    min_length: int = 4
    notes: str = (
        "|x| ~ U[1, LEN-3] (the paper prints U[1, LEN-2], which allows an empty y);"
        " operands and sum are binary numerals without leading zeros."
    )

    @staticmethod
    def _numeral(rng: np.random.Generator, size: int) -> str:
        bits = [str(b) for b in rng.integers(0, 2, size=size)]
        if size > 1:
            bits[0] = "1"
        return "".join(bits)

    def sample(self, rng: np.random.Generator, length: int) -> Example:
        self._check_length(length)
        size_x = int(rng.integers(1, length - 2))  # uniform in [1, LEN - 3]
        x = self._numeral(rng, size_x)
        y = self._numeral(rng, length - 2 - size_x)
        z = format(int(x, 2) + int(y, 2), "b")
        return self._example([*x, "+", *y, "="], list(z), length)


TASKS: list[SequenceTask] = [
    BinaryMajority(),
    BinaryMajorityInterleave(),
    Majority(),
    Sort(),
    CopyUnique(),
    CopyRepeat(),
    Parity(),
    Addition(),
]
