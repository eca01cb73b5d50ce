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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from crasp_compiler.errors import CraspError
from crasp_compiler.experiments.tasks.base import NumericTask
from crasp_compiler.languages.pcoc import interpret_pcoc_batch, load_pcoc
from crasp_compiler.languages.pcoc.compile import compile_pcoc, run_pcoc
from crasp_compiler.languages.pcoc.nodes import Program
from crasp_compiler.model.model import Model

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
    """A numeric task whose targets come from ``function`` (inputs ``(..., n)`` to outputs
    of the same shape) and whose program is a PCOC file with one output slot ``output``."""

    function: Callable[[np.ndarray], np.ndarray] | None = field(default=None, repr=False)
    output: str = "x"
    _program: Program | None = field(default=None, init=False, repr=False, compare=False)
    _models: dict[tuple[int, str], Model] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def target(self, inputs: np.ndarray) -> np.ndarray:
        return self.function(np.asarray(inputs, dtype=np.float64))

    def pcoc_program(self) -> Program:
        """The task's PCOC program (parsed once)."""
        if self._program is None:
            self._program = load_pcoc(self.program_path)
        return self._program

    def compiled_model(self, n: int, mode: str = "hard") -> Model:
        """The program compiled for ``n`` machines in ``mode`` (default tolerance;
        compiled once per (n, mode))."""
        key = (n, mode)
        if key not in self._models:
            self._models[key] = compile_pcoc(self.pcoc_program(), n, mode=mode)
        return self._models[key]

    def compiled_values(
        self, inputs: np.ndarray, mode: str = "hard", backend: str = "compiled"
    ) -> np.ndarray:
        values = np.asarray(inputs, dtype=np.float64)
        if values.ndim != 2:
            raise CraspError(f"inputs must have shape (batch, n), not {values.shape}")
        n = values.shape[1]
        if backend == "interpreter":
            trace = interpret_pcoc_batch(self.pcoc_program(), n, values)
            return trace.outputs[self.output]
        if backend != "compiled":
            raise CraspError(f"backend must be one of {BACKENDS}, not {backend!r}")
        if len(values) == 0:
            return np.zeros((0, n))
        return run_pcoc(self.compiled_model(n, mode), list(values))[self.output]


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
