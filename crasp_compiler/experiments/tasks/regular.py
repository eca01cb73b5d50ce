"""The 17 regular languages of the C-RASP paper (Table 2) as next-symbol-set tasks.

An example of LEN ``L`` is ``("$", w_1, ..., w_L)`` for a member ``w`` of the language with
``|w| = L``. The target at position ``t`` (``t = 0`` is ``"$"``) is the set of symbols that
may follow the prefix ``w_1 .. w_t`` in some member of the language, plus ``EOS`` when the
prefix is itself a member, coded as one atomic label: the symbols in alphabet order, then
``EOS``, joined by ``|`` (``"0|1|EOS"``, ``"a"``, ``"EOS"``).

Each language is given by a trimmed DFA (every state can still reach acceptance). The
generator draws ``w`` uniformly among the members of length ``L`` by counting the accepted
continuations of every state (exact big-integer counts turned into float64 transition
probabilities, so LEN 500 samples as well as LEN 5). A length with no member raises
``ValueError``; :meth:`RegularTask.lengths` lists the feasible ones. ``min_length`` is the
length of the shortest non-empty member. Tomita 2, (aa)*, (aaaa)* and (abab)* have one
member per feasible length (Tomita 1 one per length).

| name | language | alphabet | class (Table 2) | min_length |
|---|---|---|---|---|
| tomita1 .. tomita7 | Tomita 1-7 (Tomita 3: Bhattamishra et al.'s DFA) | 0 1 | see TASKS | 1; 2 for 2, 5, 6 |
| d2, d3, d4, d12 | D_n = (a D_{n-1} b)*, D_0 = ε | a b | C-RASP[∅] | 2 |
| aa_star, aaaa_star | (aa)*, (aaaa)* | a | C-RASP[periodic,local] | 2, 4 |
| abab_star | (abab)* | a b | C-RASP[periodic,local] | 4 |
| abcde | aa*bb*cc*dd*ee* | a b c d e | C-RASP[∅] | 5 |
| abdbc | {a,b}*d{b,c}* | a b c d | C-RASP[∅] | 1 |
| sigma_02star | {0,1,2}*02* | 0 1 2 | none | 1 |

Thirteen languages have next-symbol programs (``tasks/programs/next_<name>.cr``, the rules
of the paper digest §3.3) with one Boolean output ``NEXT_x`` per symbol ``x`` and
``NEXT_EOS``. Entry 0 of an output (the empty prefix, position −1: BOS for the compiled
model, where the compiler fixes every output to the interpreter's empty-prefix value) is
the label at ``"$"``, entry ``t`` the label after ``t`` symbols.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar, cast

import numpy as np

from crasp_compiler.errors import CraspError, Diagnostic
from crasp_compiler.experiments.tasks.base import Example, SequenceTask, crasp_language
from crasp_compiler.model.model import Model
from crasp_compiler.runtime.numpy_exec import run_tokens

START = "$"
EOS = "EOS"
# sequences per call of the numpy executor (bounds the padded batch's memory)
RUN_BATCH = 256
State = TypeVar("State", bound=Hashable)  # the states of a DFA given by its step function


@dataclass(frozen=True)
class Dfa:
    """A trimmed DFA: states ``0..k-1`` with ``0`` the start state, every state live (an
    accepting state is reachable from it); ``delta[q][a]`` is the state after symbol
    ``alphabet[a]``, or ``None`` where no member continues that way."""

    alphabet: tuple[str, ...]
    delta: tuple[tuple[int | None, ...], ...]
    accepting: frozenset[int]
    # _counts[n][q]: the number of words of length n leading from q to acceptance;
    # _steps[n][q]: (symbol index, cumulative probability) of the first symbol of a uniform
    # such word, over the symbols with a continuation (the last probability is 1.0)
    _counts: list[tuple[int, ...]] = field(
        default_factory=list, init=False, repr=False, compare=False
    )
    _steps: list[tuple[tuple[tuple[int, float], ...], ...]] = field(
        default_factory=list, init=False, repr=False, compare=False
    )

    @classmethod
    def build(
        cls,
        alphabet: Sequence[str],
        start: State,
        step: Callable[[State, str], State | None],
        accepting: Callable[[State], bool],
    ) -> Dfa:
        """The trimmed DFA of the states reachable from ``start`` under ``step`` (``None``:
        the dead state), numbered in breadth-first order."""
        order, edges, queue = [start], {}, deque([start])
        seen = {start}
        while queue:
            state = queue.popleft()
            edges[state] = [step(state, symbol) for symbol in alphabet]
            for target in edges[state]:
                if target is not None and target not in seen:
                    seen.add(target)
                    order.append(target)
                    queue.append(target)
        live = {state for state in order if accepting(state)}
        grew = True
        while grew:
            grew = False
            for state in order:
                if state not in live and any(t in live for t in edges[state]):
                    live.add(state)
                    grew = True
        if start not in live:
            raise ValueError("the language is empty")
        kept = [state for state in order if state in live]
        number = {state: k for k, state in enumerate(kept)}
        delta = tuple(
            tuple(None if t is None else number.get(t) for t in edges[state]) for state in kept
        )
        return cls(tuple(alphabet), delta, frozenset(number[s] for s in kept if accepting(s)))

    @cached_property
    def _index(self) -> dict[str, int]:
        return {symbol: a for a, symbol in enumerate(self.alphabet)}

    @cached_property
    def labels(self) -> tuple[str, ...]:
        """Per state, the label of the legal next symbols (EOS when accepting)."""
        return tuple(
            "|".join(
                [s for s, t in zip(self.alphabet, row, strict=True) if t is not None]
                + [EOS] * (q in self.accepting)
            )
            for q, row in enumerate(self.delta)
        )

    def states(self, word: Sequence[str]) -> list[int]:
        """The state after each prefix of ``word`` (``len(word) + 1`` states); ValueError
        when a prefix can no longer be completed to a member."""
        states = [0]
        for position, symbol in enumerate(word):
            a = self._index.get(symbol)
            target = None if a is None else self.delta[states[-1]][a]
            if target is None:
                raise ValueError(f"{symbol!r} at position {position} leaves the language")
            states.append(target)
        return states

    def count(self, length: int) -> int:
        """The number of members of length ``length`` (exact)."""
        if length < 0:
            return 0
        counts, steps = self._counts, self._steps
        if not counts:
            counts.append(tuple(int(q in self.accepting) for q in range(len(self.delta))))
            steps.append(())
        while len(counts) <= length:
            last = counts[-1]
            counts.append(tuple(sum(last[t] for t in row if t is not None) for row in self.delta))
            steps.append(tuple(_first_symbol(row, last) for row in self.delta))
        return counts[length][0]

    def sample(self, rng: np.random.Generator, length: int) -> tuple[str, ...]:
        """A member of length ``length``, uniformly at random (up to float64 rounding of
        the transition probabilities); ValueError if there is none."""
        if self.count(length) == 0:
            raise ValueError(f"the language has no string of length {length}")
        state, word = 0, []
        for remaining, u in zip(range(length, 0, -1), rng.random(length).tolist(), strict=True):
            a = next(a for a, cumulative in self._steps[remaining][state] if u < cumulative)
            word.append(self.alphabet[a])
            state = cast(int, self.delta[state][a])  # _steps has symbols with a continuation
        return tuple(word)


def _first_symbol(
    row: tuple[int | None, ...], counts: tuple[int, ...]
) -> tuple[tuple[int, float], ...]:
    """The first-symbol distribution of a uniform word from a state with transitions
    ``row``, given the counts ``counts`` of the words one shorter from every state."""
    ways = [(a, counts[t]) for a, t in enumerate(row) if t is not None and counts[t] > 0]
    total, running, out = sum(n for _, n in ways), 0, []
    for a, n in ways:
        running += n
        out.append((a, 1.0 if running == total else running / total))
    return tuple(out)


@dataclass(kw_only=True)
class RegularTask(SequenceTask):
    """A regular language as a next-symbol-set task (see the module docstring)."""

    dfa: Dfa
    _program: Any = field(default=None, init=False, repr=False, compare=False)
    _model: Model | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def alphabet(self) -> tuple[str, ...]:
        """The language's symbols (the vocabulary without ``"$"``)."""
        return self.dfa.alphabet

    def lengths(self, lo: int, hi: int) -> list[int]:
        """The lengths ``lo <= L <= hi`` that have a member (the LENs ``sample`` accepts)."""
        return [n for n in range(max(lo, 0), hi + 1) if self.dfa.count(n) > 0]

    def targets(self, word: Sequence[str]) -> tuple[str, ...]:
        """The label at ``"$"`` and after each symbol of ``word`` (a valid prefix)."""
        return tuple(self.dfa.labels[state] for state in self.dfa.states(word))

    def sample(self, rng: np.random.Generator, length: int) -> Example:
        """A uniformly random member of length ``length`` with its labels; ValueError when
        the language has no member of that length."""
        try:
            word = self.dfa.sample(rng, length)
        except ValueError as err:
            raise ValueError(f"task {self.name!r}: {err} (see lengths(lo, hi))") from None
        return Example((START, *word), self.targets(word), length)

    def program_labels(
        self, tokens: Sequence[str], outputs: Mapping[str, Sequence[bool] | np.ndarray]
    ) -> list[str]:
        """Labels aligned with ``tokens`` (``"$"`` first) from the program's ``NEXT_x`` and
        ``NEXT_EOS`` outputs, whose entry ``t`` is the value after the first ``t``
        symbols (entry 0: the empty prefix). No legal symbol gives the label ``""``."""
        if not tokens or tokens[0] != START:
            raise ValueError(f"tokens must start with {START!r}")
        symbols = (*self.alphabet, EOS)
        columns = [outputs[f"NEXT_{symbol}"] for symbol in symbols]
        return [
            "|".join(s for s, column in zip(symbols, columns, strict=True) if column[t])
            for t in range(len(tokens))
        ]

    def compiled_labels(
        self, examples: list[Example], backend: str = "compiled"
    ) -> list[list[str | None]]:
        """The program's labels at every position of every example, from the reference
        interpreter (``backend="interpreter"``) or the compiled model (heaviside mode,
        exact at every length) on the numpy executor (``"compiled"``, compiled once)."""
        if self.program is None:
            return super().compiled_labels(examples, backend)
        words = [tuple(example.tokens[1:]) for example in examples]
        if backend == "interpreter":
            outputs = self._interpreter_outputs(words)
        elif backend == "compiled":
            outputs = self._compiled_outputs(words)
        else:
            raise CraspError(
                [Diagnostic(f"unknown backend {backend!r}", hint="use 'interpreter' or 'compiled'")]
            )
        return [
            [
                None if target is None else label
                for label, target in zip(
                    self.program_labels(example.tokens, out), example.targets, strict=True
                )
            ]
            for example, out in zip(examples, outputs, strict=True)
        ]

    def crasp_program(self) -> Any:
        return self.loaded_program()

    def labels_from_values(
        self, example: Example, values: Mapping[str, np.ndarray]
    ) -> list[str | None]:
        labels = self.program_labels(example.tokens, values)
        return [
            None if t is None else label for label, t in zip(labels, example.targets, strict=True)
        ]

    def loaded_program(self) -> Any:
        """The task's next-symbol program (parsed once)."""
        path = self.program_path
        if path is None:
            raise NotImplementedError(f"task {self.name!r} has no program")
        if self._program is None:
            self._program = crasp_language().load(path)
        return self._program

    def compiled_model(self) -> Model:
        """The program compiled in heaviside mode (compiled once and cached)."""
        if self._model is None:
            self._model = crasp_language().compile(self.loaded_program())
        return self._model

    def _interpreter_outputs(self, words: list[tuple[str, ...]]) -> list[dict[str, np.ndarray]]:
        program = self.loaded_program()
        language = crasp_language()
        outputs: list[dict[str, np.ndarray]] = [{} for _ in words]
        by_length: dict[int, list[int]] = defaultdict(list)
        for k, word in enumerate(words):
            by_length[len(word)].append(k)
        for group in by_length.values():
            values = language.definition_values(program, [words[k] for k in group])
            for row, k in enumerate(group):
                outputs[k] = {name: values[name][row] for name in program.outputs}
        return outputs

    def _compiled_outputs(self, words: list[tuple[str, ...]]) -> list[dict[str, np.ndarray]]:
        model = self.compiled_model()
        outputs: list[dict[str, np.ndarray]] = [{} for _ in words]
        order = sorted(range(len(words)), key=lambda k: len(words[k]))
        for start in range(0, len(order), RUN_BATCH):
            group = order[start : start + RUN_BATCH]
            result = run_tokens(model, [words[k] for k in group])
            for row, k in enumerate(group):
                size = len(words[k]) + 1
                outputs[k] = {name: value[row, :size] for name, value in result.values.items()}
        return outputs


def _task(
    name: str,
    description: str,
    dfa: Dfa,
    crasp_class: str,
    notes: str = "",
) -> RegularTask:
    """A task named ``name``; its program is ``next_<name>.cr`` unless the class is "none"."""
    has_program = crasp_class != "none"
    labels = sorted(set(dfa.labels))
    generator = "uniform over the members of length LEN (exact counts)"
    # a shortest non-empty member: one step, then at most |Q| - 1 steps to acceptance
    shortest = next(n for n in range(1, len(dfa.delta) + 1) if dfa.count(n) > 0)
    return RegularTask(
        name=name,
        family="regular",
        description=description,
        crasp_class=crasp_class,
        program=f"next_{name}.cr" if has_program else None,
        notes=f"{notes} Generator: {generator}.".strip(),
        vocab=(START, *dfa.alphabet),
        labels=tuple(labels),
        min_length=shortest,
        train_max=50,
        dfa=dfa,
    )


def _table_dfa(
    alphabet: str, table: Mapping[int, Iterable[int | None]], accepting: set[int]
) -> Dfa:
    """A DFA from a transition table ``state -> (target per symbol)`` with start 0."""
    rows = {state: tuple(targets) for state, targets in table.items()}
    return Dfa.build(
        tuple(alphabet), 0, lambda q, s: rows[q][alphabet.index(s)], lambda q: q in accepting
    )


def _dyck(depth: int) -> Dfa:
    """D_n: the state is the current depth #a − #b, which must stay in [0, n]."""
    return Dfa.build(
        ("a", "b"),
        0,
        lambda d, s: (d + 1 if d < depth else None) if s == "a" else (d - 1 if d > 0 else None),
        lambda d: d == 0,
    )


def _cycle(word: str) -> Dfa:
    """``(word)*``: the state is the position in ``word``."""
    alphabet = tuple(sorted(set(word)))
    return Dfa.build(
        alphabet,
        0,
        lambda k, s: (k + 1) % len(word) if s == word[k] else None,
        lambda k: k == 0,
    )


def _abcde_step(last: int, symbol: str) -> int | None:
    """aa*bb*cc*dd*ee*: the state is 1 + the index of the last letter (0: empty)."""
    k = "abcde".index(symbol)
    return k + 1 if k in (last - 1, last) else None


TOMITA3_NOTE = (
    "Tomita 3 as Bhattamishra et al.'s DFA (states q0..q4, accepting q0-q2, q4 dead): an odd "
    "run of 1s directly followed by an odd run of 0s is rejected, whether the 0s end the "
    "string or a 1 follows."
)

TASKS: list[RegularTask] = [
    _task(
        "tomita1",
        "Tomita 1 = 1* over {0, 1}",
        _table_dfa("01", {0: (None, 0)}, {0}),
        "C-RASP[∅]",
    ),
    _task(
        "tomita2",
        "Tomita 2 = (10)* over {0, 1}",
        _table_dfa("01", {0: (None, 1), 1: (0, None)}, {0}),
        "C-RASP[∅]",
    ),
    _task(
        "tomita3",
        "Tomita 3 over {0, 1}: no odd run of 1s directly followed by an odd run of 0s",
        _table_dfa("01", {0: (0, 1), 1: (3, 0), 2: (3, 1), 3: (2, None)}, {0, 1, 2}),
        "none",
        TOMITA3_NOTE,
    ),
    _task(
        "tomita4",
        "Tomita 4 over {0, 1}: no substring 000",
        Dfa.build(
            ("0", "1"),
            0,
            lambda zeros, s: 0 if s == "1" else (zeros + 1 if zeros < 2 else None),
            lambda zeros: True,
        ),
        "C-RASP[periodic,local]",
        "Program in C-RASP[local] (the 0 before the last); not in C-RASP[∅].",
    ),
    _task(
        "tomita5",
        "Tomita 5 over {0, 1}: an even number of 0s and an even number of 1s",
        Dfa.build(
            ("0", "1"),
            (0, 0),
            lambda p, s: (1 - p[0], p[1]) if s == "0" else (p[0], 1 - p[1]),
            lambda p: p == (0, 0),
        ),
        "none",
    ),
    _task(
        "tomita6",
        "Tomita 6 over {0, 1}: #0 − #1 divisible by 3",
        Dfa.build(("0", "1"), 0, lambda r, s: (r + (1 if s == "0" else -1)) % 3, lambda r: r == 0),
        "none",
    ),
    _task(
        "tomita7",
        "Tomita 7 = 0*1*0*1* over {0, 1}",
        _table_dfa("01", {0: (0, 1), 1: (2, 1), 2: (2, 3), 3: (None, 3)}, {0, 1, 2, 3}),
        "C-RASP[∅]",
        "Program: 0 may follow unless the prefix has the subsequence 101.",
    ),
    *(
        _task(
            f"d{n}",
            f"D_{n} = (a D_{n - 1} b)* over {{a, b}} (D_0 = ε): balanced, nesting depth ≤ {n}",
            _dyck(n),
            "C-RASP[∅]",
        )
        for n in (2, 3, 4, 12)
    ),
    _task(
        "aa_star",
        "(aa)* over {a}",
        _cycle("aa"),
        "C-RASP[periodic,local]",
        "Program in C-RASP[periodic]; not in C-RASP[∅]. One member per even LEN.",
    ),
    _task(
        "aaaa_star",
        "(aaaa)* over {a}",
        _cycle("aaaa"),
        "C-RASP[periodic,local]",
        "Program in C-RASP[periodic]; not in C-RASP[∅]. One member per LEN divisible by 4.",
    ),
    _task(
        "abab_star",
        "(abab)* over {a, b}",
        _cycle("abab"),
        "C-RASP[periodic,local]",
        "Program in C-RASP[periodic]; not in C-RASP[∅]. One member per LEN divisible by 4.",
    ),
    _task(
        "abcde",
        "aa*bb*cc*dd*ee* over {a, b, c, d, e}",
        Dfa.build(tuple("abcde"), 0, _abcde_step, lambda last: last == 5),
        "C-RASP[∅]",
    ),
    _task(
        "abdbc",
        "{a,b}*d{b,c}* over {a, b, c, d}",
        _table_dfa("abcd", {0: (0, 0, None, 1), 1: (None, 1, 1, None)}, {1}),
        "C-RASP[∅]",
    ),
    _task(
        "sigma_02star",
        "{0,1,2}*02* over {0, 1, 2} (Σ*be* with b = 0, e = 2)",
        _table_dfa("012", {0: (1, 0, 0), 1: (1, 0, 1)}, {1}),
        "none",
        "Not in C-RASP[periodic,local] (Lemma 36).",
    ),
]
