"""Any C-RASP program as a sequence task (``crasp train --program PROG.cr``).

An example of LEN ``L`` is ``(START, w_1, ..., w_L)`` over the program's alphabet
(``START`` is ``"$"``, or ``"<s>"``/``"^"`` when the alphabet has ``"$"``). The target at
position ``t`` (``t = 0`` is ``START``) is the program's output on the prefix
``w_1 .. w_t``, from the reference interpreter (:func:`interpret_batch`):

- one output (``accept X``, or a single Boolean output): ``"1"`` or ``"0"``;
- several outputs: the outputs' values in the program's output order
  (``Program.outputs``, printed by ``crasp train``) as one class string of ``1``/``0``
  digits, e.g. ``"101"`` for ``A = true, B = false, C = true``. Every output must be
  Boolean (a count output is refused); at most :data:`MAX_OUTPUTS` of them.

Sampler: each example is, with probability 1/2, a uniform random string of length ``L``,
otherwise a string *steered toward acceptance*: a randomized greedy search over the
interpreter that grows the string symbol by symbol. At every step it evaluates every
continuation ``w·u`` with ``|u| = D`` (``D = 2`` when ``|Σ|² <= 16``, else ``D = 1``)
with one :func:`interpret_batch` call for all strings being grown, scores each next
symbol ``a`` by the shortest ``d <= D`` at which some ``w·a·…`` prefix of length
``|w| + d`` is accepted (score ``D + 1 - d``; 0 if none), and appends a best-scoring
symbol (ties at random), or with a small probability a uniform one (the rate is drawn
per string, log-uniform between ``1 / (2 L)`` and :data:`EXPLORE`). Steering
follows the ``accept`` output, or the first output when there is none. Because
C-RASP is causal, the strings of a batch are grown together to the longest LEN needed
and each example of LEN ``L`` is the prefix of length ``L`` of its own string, so a batch
costs one interpreter call per symbol of its longest member.

A user's sampler replaces this one when given (:class:`UserGenerator`, ``crasp train
--generator MODULE:FUNCTION`` or ``FILE.py:FUNCTION``): ``function(rng, length)`` returns
the ``length`` symbols of one string, each in the alphabet.

The compiled model of the program (heaviside mode, compiled once and cached) gives the
compiled labels (exact at every length where the compiler guarantees it).

:func:`load_program_task` makes the task of any program file by its extension: this
sequence task for C-RASP (``.cr``, ``.crasp``), a
:class:`~crasp_compiler.experiments.tasks.numeric.PcocNumericTask` for PCOC (``.pcoc``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from crasp_compiler.errors import CraspError, Diagnostic
from crasp_compiler.experiments.tasks.base import (
    PROGRAM_FAMILY,
    Example,
    SequenceTask,
    crasp_language,
)
from crasp_compiler.experiments.tasks.numeric import PcocNumericTask
from crasp_compiler.experiments.tasks.regular import RUN_BATCH
from crasp_compiler.languages import declaration_for_path, language_of_program
from crasp_compiler.model.model import Model
from crasp_compiler.runtime.numpy_exec import run_tokens

FAMILY = PROGRAM_FAMILY
MAX_OUTPUTS = 8  # 2**8 classes at most
EXPLORE = 0.2  # the highest probability of a uniform symbol in a steered string
STEERED = 0.5  # fraction of steered examples
LOOKAHEAD_BUDGET = 16  # |Σ|**D continuations per string and step at most


def _start_token(alphabet: Sequence[str]) -> str:
    return next(s for s in ("$", "<s>", "^", "<start>") if s not in alphabet)


def _flat(text: object) -> str:
    return " ".join(str(text).split())


class UserGenerator:
    """A user's sampler named by ``spec``: ``MODULE:FUNCTION`` (an importable module) or
    ``FILE.py:FUNCTION`` (a file, relative to ``base``); ``FUNCTION`` may be dotted. The
    function is loaded at once (a CraspError naming ``spec`` when it cannot be) and again
    after unpickling (in a sweep's worker). ``identity``: ``module:qualname``, and for a
    file its name and a digest of its bytes."""

    def __init__(self, spec: str, base: str | Path | None = None) -> None:
        self.spec = spec
        location, sep, self.qualname = spec.rpartition(":")
        if not (sep and location and self.qualname):
            raise CraspError(
                [
                    Diagnostic(
                        f"generator {spec!r}: not MODULE:FUNCTION or FILE.py:FUNCTION",
                        hint="e.g. mygens:balanced or gens/dyck.py:sample",
                    )
                ]
            )
        is_file = location.endswith(".py") or "/" in location
        self.file = str(Path(base or ".") / location) if is_file else None
        self.module = location
        self.function, digest = self._load()
        module = getattr(self.function, "__module__", self.module)
        qualname = getattr(self.function, "__qualname__", self.qualname)
        self.identity = (
            f"{Path(location).name}@{digest}:{qualname}" if is_file else f"{module}:{qualname}"
        )

    def _fail(self, message: str) -> CraspError:
        return CraspError(f"generator {self.spec}: {_flat(message)}")

    def _load(self) -> tuple[Callable[..., Any], str]:
        """The function and, for a file, the digest of the file's bytes."""
        digest = ""
        if self.file is not None:
            try:
                data = Path(self.file).read_bytes()
            except OSError as err:
                raise self._fail(f"cannot read {self.file}: {err.strerror or err}") from None
            digest = hashlib.sha256(data).hexdigest()[:12]
            spec = importlib.util.spec_from_file_location(f"crasp_generator_{digest}", self.file)
            if spec is None or spec.loader is None:
                raise self._fail(f"{self.file} is not a Python file")
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except (Exception, SystemExit) as err:  # the user's code: any error, as one line
                raise self._fail(f"loading {self.file}: {type(err).__name__}: {err}") from None
        else:
            try:
                module = importlib.import_module(self.module)
            except (Exception, SystemExit) as err:  # the user's code: any error, as one line
                raise self._fail(
                    f"cannot import {self.module}: {type(err).__name__}: {err}"
                ) from None
        found: object = module
        for part in self.qualname.split("."):
            if not hasattr(found, part):
                raise self._fail(f"{self.file or self.module} has no {self.qualname!r}")
            found = getattr(found, part)
        if not callable(found):
            raise self._fail(f"{self.qualname!r} is not a function")
        return found, digest

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "function"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.function, _ = self._load()

    def word(
        self, rng: np.random.Generator, length: int, alphabet: Sequence[str]
    ) -> tuple[str, ...]:
        """One string of ``length`` symbols of ``alphabet`` from the function; a CraspError
        (one line, naming the generator) when it raises or returns anything else."""
        try:
            result = self.function(rng, length)
            word = tuple(result)
        except (Exception, SystemExit) as err:  # the user's code: any error, as one line
            raise self._fail(f"raised {type(err).__name__}: {err}") from None
        for position, symbol in enumerate(word):
            if not isinstance(symbol, str) or symbol not in alphabet:
                raise self._fail(
                    f"symbol {symbol!r} at position {position} (from 0) is not in the "
                    f"alphabet {', '.join(alphabet)}"
                )
        if len(word) != length:
            raise self._fail(f"returned {len(word)} symbols for length {length}")
        return word


def load_program_task(
    path: str | Path,
    alphabet: Iterable[str] | None = None,
    lengths: tuple[int, int] | None = None,
    generator: UserGenerator | None = None,
) -> ProgramTask | PcocNumericTask:
    """The task of the program file ``path`` by its extension: a :class:`ProgramTask` for
    C-RASP (``.cr``, ``.crasp``; ``lengths`` default 1-50), a numeric task for PCOC
    (``.pcoc``; no ``alphabet``, ``lengths`` or ``generator``). A CraspError naming the
    file otherwise."""
    suffix = Path(path).suffix
    declared = declaration_for_path(path)
    language = declared.name if declared is not None else None
    if language == "pcoc":
        given = [
            name
            for name, value in (
                ("alphabet", alphabet),
                ("lengths", lengths),
                ("generator", generator),
            )
            if value is not None
        ]
        if given:
            raise CraspError(
                f"{', '.join(given)}: only for C-RASP programs (a PCOC program is a numeric task)",
                filename=str(path),
            )
        return PcocNumericTask.from_file(path)
    if language == "crasp":
        return ProgramTask.from_file(path, alphabet, lengths or (1, 50), generator)
    raise CraspError(
        [
            Diagnostic(
                f"unknown program file type {suffix or '(no extension)'!r}",
                hint="C-RASP: .cr or .crasp; PCOC: .pcoc",
            )
        ],
        filename=str(path),
    )


@dataclass(kw_only=True)
class ProgramTask(SequenceTask):
    """A C-RASP program's output at every prefix (see the module docstring)."""

    crasp: Any  # a program of the registered language "crasp"
    path: str = ""
    generator: UserGenerator | None = None
    _model: Model | None = field(default=None, init=False, repr=False, compare=False)
    # results also give balanced and per-position accuracy and the label balance per bin
    per_position_metrics: ClassVar[bool] = True

    @property
    def identity(self) -> str:
        """The task as a run's key records it: the file's name and a digest of what the
        program is (its source and alphabet) and of its training lengths, so that a run
        of an edited program never resumes from a checkpoint of the old one; with a
        generator, also ``generator=`` its identity (in the digest too)."""
        parts = [self.crasp.source or "", *self.crasp.alphabet]
        parts += [str(self.min_length), str(self.train_max)]
        sampler = ""
        if self.generator is not None:
            sampler = f" generator={self.generator.identity}"
            parts.append(sampler)
        text = "\0".join(parts)
        return f"{self.name}@{hashlib.sha256(text.encode()).hexdigest()[:12]}{sampler}"

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        alphabet: Iterable[str] | None = None,
        lengths: tuple[int, int] = (1, 50),
        generator: UserGenerator | None = None,
    ) -> ProgramTask:
        """The task of the program file ``path`` (CraspError when it cannot be read or
        parsed, or its outputs are not Boolean), trained on LEN ``lengths[0]..lengths[1]``,
        its strings drawn by ``generator`` when given."""
        language = crasp_language()
        options = {} if alphabet is None else {"alphabet": list(alphabet)}
        program = language.require_tokens(language.load(path, **options))
        outputs = program.outputs
        if not outputs:
            raise CraspError(
                "the program has no output to train on",
                filename=str(path),
            )
        sorts = language.definition_sorts(program)
        counts = [name for name in outputs if sorts[name] != "bool"]
        if counts:
            raise CraspError(
                [
                    Diagnostic(
                        f"output(s) {', '.join(counts)} are counts",
                        hint="--program trains on Boolean outputs only",
                    )
                ],
                filename=str(path),
            )
        if len(outputs) > MAX_OUTPUTS:
            raise CraspError(
                f"{len(outputs)} outputs give too many classes (at most {MAX_OUTPUTS} outputs)",
                filename=str(path),
            )
        labels = tuple("".join(bits) for bits in product("01", repeat=len(outputs)))
        lo, hi = lengths
        return cls(
            name=Path(path).stem,
            family=FAMILY,
            description=f"the outputs ({', '.join(outputs)}) of {path} at every prefix",
            crasp_class="C-RASP",
            program=Path(path).name,
            vocab=(_start_token(program.alphabet), *program.alphabet),
            labels=labels,
            min_length=lo,
            train_max=hi,
            crasp=program,
            path=str(path),
            generator=generator,
        )

    @property
    def program_path(self) -> Path:
        return Path(self.path)

    @property
    def alphabet(self) -> tuple[str, ...]:
        alphabet: tuple[str, ...] = self.crasp.alphabet
        return alphabet

    @property
    def steer_output(self) -> str:
        """The output the sampler steers toward: ``accept``, else the first output."""
        output: str = self.crasp.accept or self.crasp.outputs[0]
        return output

    def lengths(self, lo: int, hi: int) -> list[int]:
        return list(range(max(lo, 0), hi + 1))

    def crasp_program(self) -> Any:
        return self.crasp

    def labels_from_values(
        self, example: Example, values: Mapping[str, np.ndarray]
    ) -> list[str | None]:
        row = self._labels(
            {k: np.asarray(v)[None] for k, v in values.items()}, 0, len(example.tokens)
        )
        return [None if t is None else label for label, t in zip(row, example.targets, strict=True)]

    def compiled_model(self) -> Model:
        """The program compiled in heaviside mode (compiled once and cached)."""
        if self._model is None:
            self._model = crasp_language().compile(self.crasp)
        return self._model

    # ---- labels

    def _labels(self, outputs: dict[str, np.ndarray], row: int, size: int) -> list[str]:
        columns = [
            np.asarray(outputs[name][row, :size]).astype(bool) for name in self.crasp.outputs
        ]
        return ["".join("1" if c[t] else "0" for c in columns) for t in range(size)]

    def interpreter_labels(self, words: Sequence[Sequence[str]]) -> list[list[str]]:
        """Per word, the label after each prefix (``len(word) + 1`` labels)."""
        out: list[list[str]] = [[] for _ in words]
        by_length: dict[int, list[int]] = defaultdict(list)
        for k, word in enumerate(words):
            by_length[len(word)].append(k)
        language = crasp_language()
        for size, group in by_length.items():
            values = language.definition_values(self.crasp, [words[k] for k in group])
            for row, k in enumerate(group):
                out[k] = self._labels(values, row, size + 1)
        return out

    def _compiled_labels(self, words: Sequence[Sequence[str]]) -> list[list[str]]:
        model = self.compiled_model()
        out: list[list[str]] = [[] for _ in words]
        order = sorted(range(len(words)), key=lambda k: len(words[k]))
        for start in range(0, len(order), RUN_BATCH):
            group = order[start : start + RUN_BATCH]
            result = run_tokens(model, [words[k] for k in group])
            for row, k in enumerate(group):
                out[k] = self._labels(result.values, row, len(words[k]) + 1)
        return out

    def compiled_labels(
        self, examples: list[Example], backend: str = "compiled"
    ) -> list[list[str | None]]:
        words = [tuple(example.tokens[1:]) for example in examples]
        if backend == "interpreter":
            labels = self.interpreter_labels(words)
        elif backend == "compiled":
            labels = self._compiled_labels(words)
        else:
            raise CraspError(
                [Diagnostic(f"unknown backend {backend!r}", hint="use 'interpreter' or 'compiled'")]
            )
        return [
            [None if t is None else label for label, t in zip(row, ex.targets, strict=True)]
            for row, ex in zip(labels, examples, strict=True)
        ]

    # ---- sampling

    def steered(self, rng: np.random.Generator, count: int, length: int) -> list[tuple[str, ...]]:
        """``count`` strings of length ``length`` grown together by the randomized greedy
        search of the module docstring."""
        sigma = self.alphabet
        depth = 2 if len(sigma) ** 2 <= LOOKAHEAD_BUDGET else 1
        tails = list(product(range(len(sigma)), repeat=depth))
        words: list[list[str]] = [[] for _ in range(count)]
        name = self.steer_output
        language = crasp_language()
        # per string, an exploration rate log-uniform in [1 / (2 length), EXPLORE]: some
        # strings wander off (and may stay rejected), some stay near acceptance throughout
        low = np.log(min(EXPLORE, 1 / (2 * max(length, 1))))
        rates = np.exp(rng.uniform(low, np.log(EXPLORE), size=count))
        for t in range(length):
            depth_now = min(depth, length - t)
            cands = [(*w, *(sigma[a] for a in tail[:depth_now])) for w in words for tail in tails]
            accepted = language.definition_values(self.crasp, cands)[name]
            accepted = accepted[:, t + 1 : t + 1 + depth_now]
            accepted = np.asarray(accepted, dtype=bool).reshape(count, len(sigma), -1, depth_now)
            # first depth d (1-based) at which some continuation through symbol a is accepted
            hit = accepted.any(axis=2)  # (count, |Σ|, depth_now)
            score = np.where(hit.any(-1), depth_now + 1 - (hit.argmax(-1) + 1), 0)  # (count, |Σ|)
            noise = rng.random((count, len(sigma)))
            best = np.argmax(score + 0.5 * noise, axis=1)
            explore = rng.random(count) < rates
            uniform = rng.integers(len(sigma), size=count)
            for k in range(count):
                words[k].append(sigma[int(uniform[k] if explore[k] else best[k])])
        return [tuple(w) for w in words]

    def sample_batch(self, rng: np.random.Generator, lengths: Sequence[int]) -> list[Example]:
        """One example per LEN in ``lengths``: from the user's generator, else uniform or
        steered (module docstring)."""
        sigma = self.alphabet
        if self.generator is not None:
            words = [self.generator.word(rng, n, sigma) for n in lengths]
            return self._examples(words)
        steer = rng.random(len(lengths)) < STEERED
        words = [()] * len(lengths)
        for k, n in enumerate(lengths):
            if not steer[k]:
                words[k] = tuple(sigma[int(a)] for a in rng.integers(len(sigma), size=n))
        chosen = [k for k in range(len(lengths)) if steer[k]]
        if chosen:
            longest = max(lengths[k] for k in chosen)
            grown = self.steered(rng, len(chosen), longest)
            for k, word in zip(chosen, grown, strict=True):
                words[k] = word[: lengths[k]]
        return self._examples(words)

    def _examples(self, words: Sequence[tuple[str, ...]]) -> list[Example]:
        """The examples of ``words``, labelled by the interpreter."""
        labels = self.interpreter_labels(words)
        start = self.vocab[0]
        return [
            Example((start, *word), tuple(row), len(word))
            for word, row in zip(words, labels, strict=True)
        ]

    def sample(self, rng: np.random.Generator, length: int) -> Example:
        return self.sample_batch(rng, [length])[0]


def task_theory(task: object) -> dict[str, Any] | None:
    """What the theory predicts for a task, as a run's results record it
    (:meth:`~crasp_compiler.languages.registry.Language.theory`): for a C-RASP
    ``--program`` task, its program's class and prediction (None where the program shows
    nothing); for a registered task with a C-RASP class, that class (the smallest with a
    program, from the papers) and the predictions it implies; None for the others."""
    if isinstance(task, ProgramTask):
        found = language_of_program(task.crasp).theory(task.crasp)
        return None if found is None else {"source": "program", **found}
    klass = getattr(task, "crasp_class", None)
    if isinstance(klass, str) and klass.startswith("C-RASP"):
        return {
            "source": "registry",
            "class": klass,
            "ape": "yes",
            "nope": "yes" if klass == "C-RASP[∅]" else None,
            "text": [],
        }
    return None
