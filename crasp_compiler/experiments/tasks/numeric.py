"""The numeric tasks of the positional-attention papers (Back de Luca et al.), each with a
PCOC program.

n reals in, n reals out (machine / position i gets ``y_i``), as the papers define them
(digest ``positional-attention-pcoc.md`` §5.1):

- ``num_cumsum``: ``y_i = x_0 + ... + x_i``;
- ``num_cummin``: ``y_i = min(x_0, ..., x_i)``;
- ``num_median``: the *cumulative* median ``y_i = median(x_0, ..., x_i)`` (the mean of the
  two middle values for an even count, as the papers' code computes it);
- ``num_sort``: ``y = sort(x)``, ascending;
- ``num_max_subarray``: the *cumulative* maximum-sum subarray
  ``y_i = max_{j <= k <= i} (x_j + ... + x_k)`` over non-empty subarrays (Kadane).

Inputs are drawn as the papers do (§5.2; :meth:`NumericTask.sample`, ``value_range``
R = 2): γ_l ≤ γ_u uniform in [−Rc, Rc] (c = 1 in training, the scale factor of a test),
the n values uniform in [γ_l, γ_u], and at a test with c > 1 the interval is redrawn
until it leaves [−R, R]. ``sampling="uniform"`` (``TrainConfig.numeric_sampling``)
draws every value uniform in [−Rc, Rc] instead, as the harness did before. The programs (``programs/num_*.pcoc``) declare bounds
of 1e9, far beyond c = 10 (see each file).

Any PCOC program with one input and one output slot is a numeric task the same way
(:meth:`PcocNumericTask.from_file`, ``crasp train --program PROG.pcoc``): its targets are
the reference interpreter's outputs (:func:`interpret_batch`) instead of a numpy
function, R is 2 or the input slot's declared bound if that is smaller, and a scale c
with R·c above the bound is refused (the program's guarantees hold only within it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from crasp_compiler.errors import CraspError, Diagnostic
from crasp_compiler.experiments.tasks.base import (
    PROGRAM_FAMILY,
    NumericExample,
    NumericTask,
    pcoc_language,
)
from crasp_compiler.model.model import Model
from crasp_compiler.runtime.numpy_exec import run_tokens

BACKENDS = ("interpreter", "compiled")


def cumulative_sum(inputs: np.ndarray) -> np.ndarray:
    """``y_i = x_0 + ... + x_i`` along the last axis."""
    return np.cumsum(inputs, axis=-1)


def cumulative_min(inputs: np.ndarray) -> np.ndarray:
    """``y_i = min(x_0, ..., x_i)`` along the last axis."""
    return np.minimum.accumulate(inputs, axis=-1)


def sort_values(inputs: np.ndarray) -> np.ndarray:
    """The values in ascending order along the last axis."""
    return np.sort(inputs, axis=-1)


def cumulative_median(inputs: np.ndarray) -> np.ndarray:
    """``y_i = median(x_0, ..., x_i)`` along the last axis (mean of the two middle values
    for an even count)."""
    values = np.asarray(inputs, dtype=np.float64)
    out = np.empty_like(values)
    for i in range(values.shape[-1]):
        out[..., i] = np.median(values[..., : i + 1], axis=-1)
    return out


def cumulative_max_subarray(inputs: np.ndarray) -> np.ndarray:
    """``y_i`` = the largest sum of a non-empty subarray of ``x_0, ..., x_i`` along the
    last axis (Kadane: the best sum ending at i is ``max(x_i, best ending at i−1 + x_i)``)."""
    values = np.asarray(inputs, dtype=np.float64)
    out = np.empty_like(values)
    ending = best = values[..., 0]
    out[..., 0] = best
    for i in range(1, values.shape[-1]):
        ending = np.maximum(values[..., i], ending + values[..., i])
        best = np.maximum(best, ending)
        out[..., i] = best
    return out


@dataclass
class PcocNumericTask(NumericTask):
    """A numeric task whose program is a PCOC file with one input and one output slot
    ``output``. Targets come from ``function`` (inputs ``(..., n)`` to outputs of the same
    shape; the registered tasks) or, without one, from the reference interpreter (a task
    made from a file, ``path``)."""

    function: Callable[[np.ndarray], np.ndarray] | None = field(default=None, repr=False)
    output: str = "x"
    path: str = ""
    _program: Any = field(default=None, init=False, repr=False, compare=False)
    _models: dict[tuple[int, str], Model] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def from_file(cls, path: str | Path) -> PcocNumericTask:
        """The task of the PCOC file ``path``: a CraspError naming the file when it cannot
        be read or parsed, or has other than one input and one output slot."""
        language = pcoc_language()
        program = language.load(path)
        for what, names in (("input", program.inputs), ("output", program.outputs)):
            if len(names) != 1:
                raise CraspError(
                    [
                        Diagnostic(
                            f"the program has {len(names)} {what} slots "
                            f"({', '.join(names) or 'none'}); a numeric task needs exactly one",
                            hint="--program trains a PCOC program of one input vector to "
                            "one output vector",
                        )
                    ],
                    filename=str(path),
                )
        bound = language.input_bounds(program)[program.inputs[0]]
        task = cls(
            name=Path(path).stem,
            family=PROGRAM_FAMILY,
            description=f"the output {program.outputs[0]} of {path} for one input vector",
            crasp_class="PCOC",
            program=Path(path).name,
            value_range=min(NumericTask.value_range, np.inf if bound is None else bound),
            output=program.outputs[0],
            path=str(path),
        )
        task._program = program
        return task

    @property
    def program_path(self) -> Path | None:
        return Path(self.path) if self.path else super().program_path

    @property
    def identity(self) -> str:
        """The task as a run's key records it: its name, and for a task made from a file a
        digest of the program's source (an edited program is another run)."""
        if not self.path:
            return self.name
        digest = hashlib.sha256(self.pcoc_program().source.encode()).hexdigest()[:12]
        return f"{self.name}@{digest}"

    @property
    def reports_agreement(self) -> bool:
        """Results also give the MSE between the trained and the compiled outputs (tasks
        made from a file)."""
        return bool(self.path)

    def pcoc_program(self) -> Any:
        """The task's PCOC program (parsed once)."""
        if self._program is None:
            path = self.program_path
            if path is None:
                raise CraspError(f"task {self.name!r} has no program")
            self._program = pcoc_language().load(path)
        return self._program

    def _interpret(self, values: np.ndarray) -> np.ndarray:
        """The interpreter's output slot for inputs ``(batch, n)``."""
        result = pcoc_language().interpret(self.pcoc_program(), list(values), n=values.shape[1])
        return result.values[self.output]

    def target(self, inputs: np.ndarray) -> np.ndarray:
        values = np.asarray(inputs, dtype=np.float64)
        if self.function is not None:
            return self.function(values)
        return self._interpret(values.reshape(-1, values.shape[-1])).reshape(values.shape)

    def check_scales(self, scales: Iterable[float]) -> None:
        """Refuse a scale factor c whose values (up to R·c) would exceed the declared bound
        of the input slot."""
        program = self.pcoc_program()
        bound = pcoc_language().input_bounds(program)[program.inputs[0]]
        for c in scales:
            if bound is not None and self.value_range * c > bound:
                raise CraspError(
                    [
                        Diagnostic(
                            f"scale {c:g} draws values up to {self.value_range * c:g}, beyond "
                            f"the declared bound {bound:g} of input {program.inputs[0]!r}",
                            hint=f"use scales up to {bound / self.value_range:g}, or declare "
                            "a larger bound",
                        )
                    ],
                    filename=str(self.program_path),
                )

    def sample(
        self, rng: np.random.Generator, n: int, scale: float = 1.0, sampling: str = "interval"
    ) -> NumericExample:
        """:meth:`NumericTask.sample`, refusing a scale beyond the declared bound."""
        self.check_scales([scale])
        return super().sample(rng, n, scale, sampling)

    def compiled_model(self, n: int, mode: str = "hard") -> Model:
        """The program compiled for ``n`` machines in ``mode`` (default tolerance;
        compiled once per (n, mode))."""
        key = (n, mode)
        if key not in self._models:
            self._models[key] = pcoc_language().compile(self.pcoc_program(), n=n, mode=mode)
        return self._models[key]

    def compiled_values(
        self, inputs: np.ndarray, mode: str = "hard", backend: str = "compiled"
    ) -> np.ndarray:
        values = np.asarray(inputs, dtype=np.float64)
        if values.ndim != 2:
            raise CraspError(f"inputs must have shape (batch, n), not {values.shape}")
        n = values.shape[1]
        if backend == "interpreter":
            return self._interpret(values)
        if backend != "compiled":
            raise CraspError(f"backend must be one of {BACKENDS}, not {backend!r}")
        if len(values) == 0:
            return np.zeros((0, n))
        model, batch = self.compiled_model(n, mode), list(values)
        language = pcoc_language()
        tokens, numeric = language.model_inputs(model, batch)
        raw = run_tokens(model, tokens, values=numeric).outputs[self.output]
        return language.model_outputs(model, batch, raw)


def _task(
    name: str,
    description: str,
    function: Callable[[np.ndarray], np.ndarray],
    output: str = "x",
    notes: str = "",
) -> PcocNumericTask:
    return PcocNumericTask(
        name=name,
        family="numeric",
        description=description,
        crasp_class="PCOC",
        program=f"{name}.pcoc",
        notes=notes,
        function=function,
        output=output,
    )


TASKS: list[NumericTask] = [
    _task(
        "num_cumsum",
        "cumulative sum: y_i = x_0 + ... + x_i",
        cumulative_sum,
        notes="Hillis-Steele scan, ceil_log2(n) rounds",
    ),
    _task(
        "num_cummin",
        "cumulative minimum: y_i = min(x_0, ..., x_i)",
        cumulative_min,
        notes="Hillis-Steele scan with min, ceil_log2(n) rounds",
    ),
    _task(
        "num_median",
        "cumulative median: y_i = median(x_0, ..., x_i) (mean of the two middle values "
        "for an even count)",
        cumulative_median,
        output="y",
        notes="systolic priority queue, n + n div 2 + 1 rounds",
    ),
    _task(
        "num_sort",
        "sorting: y = sort(x), ascending",
        sort_values,
        notes="odd-even transposition sort, n rounds",
    ),
    _task(
        "num_max_subarray",
        "cumulative maximum-sum subarray: y_i = max over j <= k <= i of x_j + ... + x_k",
        cumulative_max_subarray,
        output="best",
        notes="prefix sums, prefix minima and a prefix maximum, 3 ceil_log2(n) + 2 rounds",
    ),
]
