"""The task interface shared by the registry, the training harness and the comparison.

A :class:`SequenceTask` maps token sequences to a label at every scored position; a
:class:`NumericTask` maps a vector of n reals to n reals. Both draw examples with a
``numpy.random.Generator`` so every data set is reproducible from a seed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from crasp_compiler.languages import Language, get_language

PROGRAMS = Path(__file__).parent / "programs"

FAMILIES = ("regular", "algorithmic", "numeric", "chomsky")
PROGRAM_FAMILY = "program"  # tasks made from a program file (``crasp train --program``)
# Expressivity classes of the C-RASP paper (Tables 2 and 3): the smallest class with a
# program, or "none" (no program exists or none was found).
CLASSES = ("C-RASP[∅]", "C-RASP[periodic,local]", "none")


@dataclass(frozen=True)
class Example:
    """One sequence: the model input (special tokens included) and, per position, the
    label the model must output there (``None``: not scored). ``length`` is the task's
    LEN (the quantity the length bins use)."""

    tokens: tuple[str, ...]
    targets: tuple[str | None, ...]
    length: int

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.targets):
            raise ValueError("one target per token")


@dataclass(frozen=True)
class NumericExample:
    """n input values and the n target values (one per machine / position)."""

    inputs: np.ndarray
    targets: np.ndarray


@dataclass
class Task(ABC):
    name: str
    family: str
    description: str
    # the smallest C-RASP class with a program (or "none"); numeric tasks: "PCOC"
    crasp_class: str = "none"
    # file name under tasks/programs (C-RASP ".cr" or PCOC ".pcoc"), or None
    program: str | None = None
    notes: str = ""
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def program_path(self) -> Path | None:
        return None if self.program is None else PROGRAMS / self.program


@dataclass
class SequenceTask(Task):
    """Token sequences with per-position labels.

    ``vocab``: every input token (specials included, in a fixed order); ``labels``: every
    output class. ``min_length``/``train_max``: the training range of LEN. ``encoder``:
    the model may look at the whole sequence (Chomsky tasks); otherwise causal.
    """

    vocab: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    min_length: int = 1
    train_max: int = 50
    encoder: bool = False

    @abstractmethod
    def sample(self, rng: np.random.Generator, length: int) -> Example:
        """A random example of LEN ``length`` (from the task's generator)."""

    def compiled_labels(
        self, examples: list[Example], backend: str = "compiled"
    ) -> list[list[str | None]]:
        """The labels the task's program gives at every position of every example
        (aligned with ``Example.tokens``; ``None`` where the example's target is
        ``None``). ``backend``: ``"interpreter"`` (the reference interpreter) or
        ``"compiled"`` (the compiled model on the numpy executor, compiled once and
        cached). Tasks with a program override this."""
        raise NotImplementedError(f"task {self.name!r} has no program")

    def crasp_program(self) -> Any:
        """The task's C-RASP program (tasks with one override this; a program of the
        registered language ``crasp``: :func:`crasp_language`)."""
        raise NotImplementedError(f"task {self.name!r} has no C-RASP program")

    def labels_from_values(
        self, example: Example, values: Mapping[str, np.ndarray]
    ) -> list[str | None]:
        """The labels the program's ``values`` (name → value at every position of
        ``example``, entry 0 the empty prefix, as the interpreter gives them) mean at the
        example's scored positions (``None`` elsewhere). Tasks with a program override
        this; :func:`~crasp_compiler.experiments.compare` reads interventions with it."""
        raise NotImplementedError(f"task {self.name!r} has no C-RASP program")


def crasp_language() -> Language:
    """C-RASP, as the registry gives it: the language of the sequence tasks' programs."""
    return get_language("crasp")


def pcoc_language() -> Language:
    """PCOC, as the registry gives it: the language of the numeric tasks' programs."""
    return get_language("pcoc")


SAMPLINGS = ("interval", "uniform")
"""How numeric inputs are drawn (:meth:`NumericTask.sample`)."""


@dataclass
class NumericTask(Task):
    """Vectors of ``n`` reals in ``[-R c, R c]`` (R = ``value_range``; c = 1 in training,
    the scale factor c of a value-generalisation test)."""

    value_range: float = 2.0

    @abstractmethod
    def target(self, inputs: np.ndarray) -> np.ndarray:
        """The n target values for n inputs."""

    def compiled_values(
        self, inputs: np.ndarray, mode: str = "hard", backend: str = "compiled"
    ) -> np.ndarray:
        """The program's outputs for a batch ``inputs`` of shape (batch, n): the PCOC
        interpreter (``backend="interpreter"``) or the model compiled for n machines
        (``mode`` hard or softmax; compiled once per (n, mode) and cached)."""
        raise NotImplementedError(f"task {self.name!r} has no program")

    def sample(
        self, rng: np.random.Generator, n: int, scale: float = 1.0, sampling: str = "interval"
    ) -> NumericExample:
        """One vector of ``n`` values at scale factor ``scale`` (c).

        ``"interval"`` (the papers' scheme, positional-attention paper §5.2 and its code):
        draw γ_l ≤ γ_u uniformly in [−Rc, Rc], then the n values uniformly in [γ_l, γ_u];
        for c > 1 the interval is drawn again until it leaves [−R, R] (γ_l < −R or
        γ_u > R), so a test vector is not an in-range one. ``"uniform"``: every value
        uniform in [−Rc, Rc] (the harness's earlier scheme)."""
        r = self.value_range
        if sampling == "uniform":
            inputs = scale * rng.uniform(-r, r, size=n)
        elif sampling == "interval":
            while True:
                low, high = np.sort(rng.uniform(-r * scale, r * scale, size=2))
                if scale <= 1 or low < -r or high > r:
                    break
            inputs = rng.uniform(low, high, size=n)
        else:
            raise ValueError(f"sampling must be one of {SAMPLINGS}, not {sampling!r}")
        return NumericExample(inputs, self.target(inputs))
