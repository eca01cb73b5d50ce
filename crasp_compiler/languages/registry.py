"""The :class:`Language` interface and the registry of source languages.

A source language is one folder under ``crasp_compiler/languages/`` (grammar, nodes,
checker, interpreter, lowering, compile entry) plus one :class:`Language` object that
tells the rest of the package how to use it: which files are its programs, which options
its stages take, how to load, summarise, interpret and compile a program, and how its
inputs and outputs map to the model family's token and numeric inputs, and what tools
read from its programs and models (definitions, dependencies, theory, bounds, counts,
routing). The CLI, ``crasp check`` (programs and models), the verifier, the public API
(:mod:`crasp_compiler.api`), ``crasp show`` and the experiments work only through this
interface (an import-linter contract keeps them from importing a language's modules), so
adding a language is one folder and one :func:`register` call in
:mod:`crasp_compiler.languages`.

A language is registered by its :class:`Declaration` (names, suffixes, modes, options,
help texts: all the CLI's flags, its help and the look-ups need) and its
:class:`Language` object is imported on first use (:func:`language_for_path`,
:func:`get_language`, ...): a command imports only the language it runs. A :class:`Language` object may be registered directly too.

Inputs in this interface are the language's own: a token list for C-RASP, an array of
input vectors ``(slots, n)`` for PCOC. Every stage works on a *batch* of inputs; results
are :class:`Outputs`, one array per named output with one column per *position* (a
prefix for C-RASP, a machine for PCOC).
"""

from __future__ import annotations

import importlib
import random
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from crasp_compiler.display import value_table
from crasp_compiler.errors import CraspError
from crasp_compiler.files import read_program_text
from crasp_compiler.model.io import HEADER_CHECKS, HeaderProblem
from crasp_compiler.model.model import Model


@dataclass(frozen=True)
class Option:
    """An option of a language's stages: a keyword of the API and a ``--flag`` of the CLI.

    ``stages`` are the stages that take it (``load``: every stage; ``interpret``,
    ``compile``, ``check``), ``required`` those that cannot go without it;
    ``kind`` is ``str``, ``int``, ``float`` or ``choice`` (then ``choices`` lists them);
    ``minimum`` bounds numbers from below (``open_minimum``: strictly)."""

    name: str
    help: str
    stages: frozenset[str]
    kind: str = "str"
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    open_minimum: bool = False
    metavar: str | None = None
    required: frozenset[str] = frozenset()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass
class Outputs:
    """Named outputs of a batch: ``values[name]`` has shape ``(batch, positions)``
    (decided values: bool, int or float per the output's rule); ``labels[b]`` names the
    positions of input ``b`` (tokens with ``ε`` for the empty prefix, or machine indices).
    ``raw`` holds the models' raw outputs (same shapes) when a model computed them, and
    ``residuals`` the residual stream after every sublayer when asked for."""

    values: dict[str, np.ndarray]
    labels: list[list[str]]
    raw: dict[str, np.ndarray] = field(default_factory=dict)
    residuals: list[tuple[str, np.ndarray]] | None = None


@dataclass(frozen=True)
class Item:
    """One input read from text: its line (0: a command-line argument), its text, the
    input itself or the error that reading it raised, and where it came from (for
    messages: ``input``, ``<stdin>:3``, ``FILE:3``)."""

    line: int
    text: str
    value: Any
    where: str


# The members a :class:`Declaration` holds and its :class:`Language` shares.
DECLARED = (
    "name",
    "title",
    "suffixes",
    "modes",
    "options",
    "input_help",
    "output_help",
    "mode_help",
    "compile_help",
)


class Language(ABC):
    """A source language, as the rest of the package sees it (see the module doc).
    ``class L(Language, declared=DECLARATION)`` takes the :data:`DECLARED` members from
    the language's :class:`Declaration`."""

    def __init_subclass__(cls, declared: Declaration | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for member in DECLARED if declared is not None else ():
            setattr(cls, member, getattr(declared, member))

    name: str  # short, lower case: the ``language=`` argument ("crasp", "pcoc")
    title: str  # as people write it ("C-RASP", "PCOC"); also ``Model.provenance.language``
    suffixes: tuple[str, ...]  # program file suffixes
    modes: tuple[str, ...]  # compile modes, the default first
    options: tuple[Option, ...]
    input_help: str  # what a CLI INPUT is for this language
    # CLI help (:class:`Declaration`): what `interpret`/`run` print per input, what each
    # compile mode does, what compiling a program of this language gives ("": nothing)
    output_help: str = ""
    mode_help: str = ""
    compile_help: str = ""

    # ------------------------------------------------------------ programs

    @abstractmethod
    def parse(self, text: str, filename: str, **options: Any) -> Any:
        """Parse and check program text (CraspError with located diagnostics)."""

    def load(self, path: str | Path, **options: Any) -> Any:
        """Read a program file and :meth:`parse` it."""
        return self.parse(read_program_text(path), str(path), **options)

    @abstractmethod
    def owns(self, program: object) -> bool:
        """Whether ``program`` is a loaded program of this language."""

    @abstractmethod
    def summary(self, program: Any, **options: Any) -> list[str]:
        """Lines describing a checked program (``crasp check PROGRAM``)."""

    def warnings(self, program: Any) -> list[str]:
        """Formatted warnings of a checked program."""
        return []

    # ------------------------------------------------------------ inputs and outputs

    @abstractmethod
    def read_inputs(self, argument: str | None, source: Any, **options: Any) -> Iterator[Item]:
        """The inputs of a CLI run: from the INPUT argument or stdin. ``source`` is the
        program or model they are for."""

    @abstractmethod
    def sample_inputs(self, model: Model, rng: random.Random, length: int, count: int) -> list[Any]:
        """``count`` random inputs of ``length`` positions for ``model`` (``crasp check``)."""

    @abstractmethod
    def format_input(self, item: Any) -> str:
        """One input as text (in messages)."""

    def input_buckets(self, model: Model, max_len: int) -> list[tuple[int, int]]:
        """The input-length ranges ``crasp check MODEL`` samples (:func:`length_buckets`)."""
        return length_buckets(max_len)

    def tolerance(self, model: Model, dtype: str) -> float:
        """How far a raw ``value`` output of the model may be from the interpreter's."""
        return 1e-9 if dtype == "float64" else 1e-4

    # ------------------------------------------------------------ stages

    def misuse(self, stage: str, options: dict[str, Any]) -> str | None:
        """Why options given together make no sense at ``stage`` (None: they do)."""
        return None

    @abstractmethod
    def evaluate(self, program: Any, item: Any, **options: Any) -> Any:
        """The reference interpreter on one input: the language's own trace object."""

    @abstractmethod
    def interpret(self, program: Any, inputs: Sequence[Any], **options: Any) -> Outputs:
        """The reference semantics on a batch of inputs."""

    @abstractmethod
    def trace(self, program: Any, item: Any, **options: Any) -> list[str]:
        """Lines showing every definition of ``program`` on one input (``--trace``)."""

    def has_verdict(self, program_or_model: Any) -> bool:
        """Whether :meth:`verdict` has something to say without ``--outputs``."""
        return True

    def verdict(self, program_or_model: Any, outputs: Outputs, row: int) -> str | None:
        """The line ``crasp interpret`` / ``crasp run`` prints for input ``row`` without
        ``--outputs`` or ``--trace``, or None when there is nothing to say."""
        return None

    @abstractmethod
    def compile(self, program: Any, **options: Any) -> Model:
        """Exact transformer weights for ``program``."""

    @abstractmethod
    def headline(self, model: Model) -> str:
        """A compiled model's layers, next to the bound the language proves (``compile``)."""

    @abstractmethod
    def describe_model(self, model: Model) -> list[str]:
        """Lines on a compiled model's source and shape (``crasp info``)."""

    def table(self, labels: Sequence[str], rows: Sequence[tuple[str, Sequence[Any]]]) -> str:
        """Named values at every position as text (``labels[0]`` is the empty prefix)."""
        return value_table(list(labels[1:]), rows)

    @abstractmethod
    def model_program(self, model: Model) -> Any | None:
        """The program a model was compiled from (from its stored source), or None."""

    def model_options(self, model: Model) -> dict[str, Any]:
        """The interpreter options that reproduce what a compiled model computes."""
        return {}

    def check_header(self, model: Model, source: bool = True) -> None:
        """HeaderProblem unless a loaded model's options and info are what this
        language's compiler writes; by default, that its source parses in this language
        with the model's outputs (registered as the file format's header check).
        ``source=False`` leaves the source unparsed (a runtime that reads only the
        weights, ``crasp run``, need not import the parser)."""
        if not (model.source and source):
            return
        try:
            program = self.model_program(model)
        except (CraspError, RecursionError) as err:
            reason = err.diagnostics[0].message if isinstance(err, CraspError) else "too deep"
            raise HeaderProblem(
                f"header field 'source' does not parse as {self.title} ({reason})"
            ) from None
        want = {"outputs": [o.name for o in model.outputs]}
        if model.inputs:
            want = {"inputs": list(model.inputs), **want}
        for key, names in want.items():
            got = list(getattr(program, key))
            if got != names:
                raise HeaderProblem(
                    f"header field 'source' is a {self.title} program whose {key} "
                    f"({', '.join(got)}) are not the model's ({', '.join(names)})"
                )

    @abstractmethod
    def model_inputs(
        self, model: Model, inputs: Sequence[Any]
    ) -> tuple[list[list[str]], list[np.ndarray] | None]:
        """The model family's inputs for a batch: token lists (without BOS) and, for
        models with numeric inputs, one ``(tokens, channels)`` array per input."""

    @abstractmethod
    def model_outputs(self, model: Model, inputs: Sequence[Any], decided: np.ndarray) -> np.ndarray:
        """A ``(batch, T)`` array over the model's positions (BOS first) as the
        language's positions ``(batch, positions)``."""

    def position_labels(self, model: Model, item: Any) -> list[str]:
        """Labels of the model's positions (BOS first) for one input (``run --trace``)."""
        tokens, _ = self.model_inputs(model, [item])
        return ["ε", *tokens[0]]

    # ------------------------------------------------------------ what tools read from programs
    #
    # ``crasp show``, the task registry and ``crasp compare`` (``experiments/``) read these;
    # a language that has none of what one asks for keeps the default.

    def definition_sorts(self, program: Any) -> dict[str, str]:
        """Every named definition of ``program``, in program order, with its sort as the
        language writes it (C-RASP: ``bool`` or ``count``); {} for a language without
        named definitions."""
        return {}

    def definition_values(
        self,
        program: Any,
        inputs: Sequence[Any],
        overrides: Mapping[str, np.ndarray] | None = None,
    ) -> dict[str, np.ndarray]:
        """Every definition of :meth:`definition_sorts` on a batch of inputs of one length:
        name → ``(batch, positions)`` array. ``overrides`` (name → such an array) replaces
        those definitions, and every later one reads the replacement (an interchange
        intervention). CraspError for a language without named definitions."""
        raise CraspError(f"{self.title} programs have no named definitions to evaluate")

    def dependencies(self, program: Any) -> dict[str, set[str]]:
        """Each named definition of ``program`` (in program order) → the names of the
        definitions it reads (the program graph of ``crasp show``); {} for a language
        without named references."""
        return {}

    def theory(self, program: Any) -> dict[str, Any] | None:
        """What the language's theory predicts for ``program`` (a run's results record
        it): its ``class``, whether a transformer learns it so as to generalise in length
        with absolute (``ape``) or no (``nope``) positional encodings (``"yes"``, or None
        where the program shows nothing), and the lines that say so (``text``); None for a
        language without such a theory."""
        return None

    def require_tokens(self, program: Any) -> Any:
        """``program``, or a CraspError where a model of it (or a training task made from
        it) would have no token to read (C-RASP: an empty alphabet)."""
        return program

    def input_bounds(self, program: Any) -> dict[str, float | None]:
        """Each numeric input of ``program`` (in order) → the bound its values are declared
        to keep (None: none declared); {} for a language without numeric inputs."""
        return {}

    def rebound(self, program: Any, bound: float) -> Any:
        """``program`` with the one bound its inputs declare replaced by ``bound``
        everywhere the program writes it, parsed and checked again (fine-tuning a model
        compiled for smaller values); CraspError for a language without declared bounds."""
        raise CraspError(f"{self.title} programs declare no bounds to replace")

    # ------------------------------------------------------------ what tools read from models

    def count_forms(self, model: Model) -> set[str] | None:
        """The source expressions and residual labels of a compiled model whose values are
        counts ``c`` stored as ``c/(t+1)`` (``crasp show`` colours them as counts, beside
        what causal uniform heads write); None for a language whose models store no counts
        so."""
        return None

    def routing_labels(self, model: Model) -> dict[tuple[int, int], str] | None:
        """``(round, send) → "send x to d"`` for every data-dependent send of a compiled
        model's program (rounds unrolled), which the model's routing slots and heads are
        named after (``crasp show`` names them by their send and the other rows by the
        program text); None for a language whose models are named by the program as they
        are."""
        return None


def length_buckets(max_len: int) -> list[tuple[int, int]]:
    """Length ranges ``[0, 0], [1, 4], [5, 16], …`` (powers of 4), the last one ending at
    ``max_len``."""
    out = [(0, 0)]
    low, high = 1, 4
    while low <= max_len:
        out.append((low, min(high, max_len)))
        low, high = high + 1, high * 4
    return out


@dataclass(frozen=True)
class Declaration:
    """A registered language before it is used: the :class:`Language` members that the
    CLI's flags, its help and the registry's look-ups read, and ``implementation``, the
    ``module:attribute`` of the :class:`Language` object, imported on first use (empty
    for an object registered as it is).

    The help texts, each a sentence or more ("": nothing to say): ``input_help``, what a
    CLI INPUT is; ``output_help``, what ``crasp interpret`` and ``crasp run`` print per
    input; ``mode_help``, what each compile mode gives; ``compile_help``, what compiling a
    program gives beyond the weights."""

    name: str
    title: str
    suffixes: tuple[str, ...]
    modes: tuple[str, ...]
    options: tuple[Option, ...]
    implementation: str = ""
    input_help: str = ""
    output_help: str = ""
    mode_help: str = ""
    compile_help: str = ""

    @classmethod
    def of(cls, language: Language) -> Declaration:
        """The declaration of a :class:`Language` object registered as it is."""
        return cls(**{member: getattr(language, member) for member in DECLARED})


_DECLARED: dict[str, Declaration] = {}
_LOADED: dict[str, Language] = {}


def expect(condition: bool, message: str) -> None:
    """HeaderProblem(message) unless ``condition`` (for :meth:`Language.check_header`)."""
    if not condition:
        raise HeaderProblem(message)


def register(language: Language | Declaration) -> None:
    """Make ``language`` known to the CLI, the API, the verifier and the model file
    format (its header check); a :class:`Declaration` is imported on first use."""
    declared = language if isinstance(language, Declaration) else Declaration.of(language)
    taken = {s for other in _DECLARED.values() for s in other.suffixes}
    clash = taken.intersection(declared.suffixes)
    if declared.name in _DECLARED or clash:
        raise ValueError(f"language {declared.name!r} clashes with a registered one")
    _DECLARED[declared.name] = declared
    if isinstance(language, Language):
        _LOADED[declared.name] = language

    def check_header(model: Model, source: bool) -> None:
        _implementation(declared).check_header(model, source)

    HEADER_CHECKS[declared.title] = check_header


def _implementation(declared: Declaration) -> Language:
    """The :class:`Language` object of a registered language (imported on first use)."""
    language = _LOADED.get(declared.name)
    if language is None:
        module, _, attribute = declared.implementation.partition(":")
        language = getattr(importlib.import_module(module), attribute)
        assert isinstance(language, Language), declared.implementation
        _LOADED[declared.name] = language
    return language


def declarations() -> list[Declaration]:
    """Every registered language's declaration, in registration order (imports none)."""
    return list(_DECLARED.values())


def declaration_for_path(path: str | Path) -> Declaration | None:
    """The declaration of the language whose suffix ``path`` has (None: no language's;
    imports none)."""
    suffix = Path(path).suffix
    return next((d for d in _DECLARED.values() if suffix in d.suffixes), None)


def languages() -> list[Language]:
    """Every registered language, in registration order (imports them all)."""
    return [_implementation(declared) for declared in _DECLARED.values()]


def get_language(name: str) -> Language:
    """The language called ``name`` (its ``name`` or ``title``, any case)."""
    for declared in _DECLARED.values():
        if name.lower() in (declared.name, declared.title.lower()):
            return _implementation(declared)
    known = ", ".join(_DECLARED)
    raise CraspError(f"unknown language {name!r} (known: {known})")


def language_for_path(path: str | Path) -> Language:
    """The language whose suffix ``path`` has."""
    suffix = Path(path).suffix
    for declared in _DECLARED.values():
        if suffix in declared.suffixes:
            return _implementation(declared)
    known = ", ".join(s for declared in _DECLARED.values() for s in declared.suffixes)
    raise CraspError(
        f"unknown program suffix {suffix!r}: programs end in {known} (or name the language)",
        filename=str(path),
    )


def language_of_model(model: Model) -> Language | None:
    """The language a model was compiled from (None: built by hand)."""
    provenance = model.provenance
    for declared in _DECLARED.values():
        if provenance is not None and provenance.language == declared.title:
            return _implementation(declared)
    return None


def language_of_program(program: object) -> Language:
    """The language of a loaded program object (asking the languages already imported
    first: a program's language is one of them unless its objects were made directly)."""
    imported = [_LOADED[name] for name in _DECLARED if name in _LOADED]
    for language in imported:
        if language.owns(program):
            return language
    for language in languages():  # imports the others only when none of those owns it
        if language.owns(program):
            return language
    raise TypeError(f"not a program of a registered language: {type(program).__name__}")
