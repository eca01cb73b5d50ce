"""Data for training and testing: examples to padded tensors, training batches with LEN
uniform over the task's feasible lengths, and fixed test sets per length bin (sequence
tasks) or per scale factor (numeric tasks), each drawn once from a seed.

Length bins are inclusive ranges of LEN. The default bins follow the C-RASP paper
(``[min_length, 50]``, ``[51, 100]``, ``[101, 150]``) plus ``[151, 500]``; the first bin
ends at the task's ``train_max`` (the in-distribution bin: ``[1, 40], [41, 100], ...``
for ``train_max = 40``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import torch
from torch import Tensor

from crasp_compiler.errors import CraspError, Diagnostic
from crasp_compiler.experiments.tasks.base import Example, NumericTask, SequenceTask

IGNORE = -100  # the label id of unscored positions and padding (cross-entropy ignores it)
BIN_EDGES = (100, 150, 500)  # upper ends of the bins after the training range

Bin = tuple[int, int]


@dataclass
class SequenceBatch:
    """Right-padded token ids and label ids ``(batch, T)``; ``lengths`` ``(batch,)``."""

    tokens: Tensor
    labels: Tensor
    lengths: Tensor


def bin_name(bin_: Bin) -> str:
    """The key of a length bin in results: ``"lo-hi"``."""
    return f"{bin_[0]}-{bin_[1]}"


def label_ids(task: SequenceTask, labels: Sequence[str | None]) -> np.ndarray:
    """Label ids by ``task.labels`` (``IGNORE`` for ``None``; -1 for a label the task does
    not list, which matches no prediction)."""
    index = {label: i for i, label in enumerate(task.labels)}
    return np.array(
        [IGNORE if label is None else index.get(label, -1) for label in labels], dtype=np.int64
    )


def encode(task: SequenceTask, examples: Sequence[Example]) -> SequenceBatch:
    """Token ids by ``task.vocab`` (padding id ``len(task.vocab)``) and label ids by
    ``task.labels`` (``IGNORE`` for ``None`` and padding)."""
    vocab = {token: i for i, token in enumerate(task.vocab)}
    labels = {label: i for i, label in enumerate(task.labels)}
    width = max((len(ex.tokens) for ex in examples), default=0)
    tokens = torch.full((len(examples), width), len(task.vocab), dtype=torch.long)
    targets = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    for row, ex in enumerate(examples):
        try:
            tokens[row, : len(ex.tokens)] = torch.tensor([vocab[t] for t in ex.tokens])
            targets[row, : len(ex.targets)] = torch.tensor(
                [IGNORE if t is None else labels[t] for t in ex.targets]
            )
        except KeyError as exc:
            raise CraspError(
                [
                    Diagnostic(
                        f"task {task.name!r}: {exc.args[0]!r} is not in its vocab or labels",
                        hint="the task's vocab/labels must list every token and label it emits",
                    )
                ]
            ) from None
    lengths = torch.tensor([len(ex.tokens) for ex in examples], dtype=torch.long)
    return SequenceBatch(tokens, targets, lengths)


def feasible_lengths(task: SequenceTask, lo: int, hi: int) -> list[int]:
    """The LEN values in ``[lo, hi]`` the task can sample: ``task.lengths(lo, hi)`` when
    the task offers it, else every integer from ``max(lo, min_length)`` to ``hi``."""
    if hasattr(task, "lengths"):
        return sorted(int(n) for n in task.lengths(lo, hi))
    return list(range(max(lo, task.min_length), hi + 1))


def default_bins(task: SequenceTask, train_max: int | None = None) -> list[Bin]:
    """``[min_length, train_max]`` (in distribution), then ``[edge + 1, next edge]`` over
    the edges 100, 150, 500 above ``train_max`` (``train_max`` defaults to the task's):
    ``[1, 50], [51, 100], [101, 150], [151, 500]`` for ``train_max = 50``."""
    top = task.train_max if train_max is None else train_max
    edges = [top, *(e for e in BIN_EDGES if e > top)]
    return [(task.min_length, top)] + [(a + 1, b) for a, b in pairwise(edges)]


def sample_examples(
    task: SequenceTask, rng: np.random.Generator, lengths: Sequence[int], count: int
) -> list[Example]:
    """``count`` examples, each of a LEN drawn uniformly from ``lengths`` (all at once by
    ``task.sample_batch(rng, lens)`` when the task has it, e.g. a program task)."""
    if not lengths:
        raise CraspError(f"task {task.name!r} has no feasible length in the requested range")
    if hasattr(task, "sample_batch"):
        lens = [int(rng.choice(lengths)) for _ in range(count)]
        batch: list[Example] = task.sample_batch(rng, lens)
        return batch
    return [task.sample(rng, int(rng.choice(lengths))) for _ in range(count)]


def make_test_sets(
    task: SequenceTask, bins: Iterable[Bin], size: int, seed: int
) -> dict[str, list[Example]]:
    """One fixed test set of ``size`` examples per bin (LEN uniform over the bin's feasible
    lengths), keyed by :func:`bin_name`; bins without a feasible length are left out."""
    sets = {}
    for index, bin_ in enumerate(bins):
        lengths = feasible_lengths(task, *bin_)
        if lengths:
            rng = np.random.default_rng([seed, index])
            sets[bin_name(bin_)] = sample_examples(task, rng, lengths, size)
    return sets


def numeric_batch(
    task: NumericTask,
    rng: np.random.Generator,
    size: int,
    n: int,
    scale: float = 1.0,
    sampling: str = "interval",
) -> tuple[np.ndarray, np.ndarray]:
    """``size`` examples of n values from ``task.sample``: inputs and targets ``(size, n)``."""
    examples = [task.sample(rng, n, scale, sampling) for _ in range(size)]
    return (
        np.stack([ex.inputs for ex in examples]).astype(np.float64),
        np.stack([ex.targets for ex in examples]).astype(np.float64),
    )


def make_numeric_test_sets(
    task: NumericTask,
    n: int,
    scales: Iterable[float],
    size: int,
    seed: int,
    sampling: str = "interval",
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """One fixed test set per scale factor c (:meth:`NumericTask.sample` at scale c),
    keyed by ``str(c)``."""
    return {
        str(c): numeric_batch(task, np.random.default_rng([seed, index]), size, n, c, sampling)
        for index, c in enumerate(scales)
    }
