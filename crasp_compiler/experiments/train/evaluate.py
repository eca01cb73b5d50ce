"""Evaluation: a trained model's predictions on fixed test sets, per-sequence exact match,
the compiled model's accuracy and its per-sequence agreement with the trained model
(sequence tasks), and error metrics per scale factor (numeric tasks).

Definitions:

- a sequence is *right* when the prediction equals the target at every scored position
  (targets that are not ``None``); *accuracy* is the fraction of right sequences;
- *balanced accuracy*: over the scored positions of a bin, the mean over the labels that
  occur there of the fraction of their positions predicted right (per-class recall);
  *position accuracy*: the fraction of scored positions predicted right;
  *label balance*: the fraction of each label over the scored positions (``positions``)
  and over each sequence's last scored position (``last``);
- *agreement*: the fraction of sequences on which the trained and the compiled model
  predict the same label at every scored position (right or wrong alike);
- numeric, per scale factor c (inputs scaled by c): ``mse`` and ``mae`` (means over every
  entry), ``rel_error`` (sum of absolute errors over the sum of absolute targets) and
  ``close_accuracy`` (the fraction of lists whose every entry passes
  ``|pred - y| <= 0.05 + 0.05·|y|``, i.e. ``isclose`` with absolute and relative
  tolerance 0.05: the positional paper's "closeness" transformation); for a task made
  from a PCOC file (``reports_agreement``) also ``agreement``: the MSE between the trained
  and the compiled outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from crasp_compiler.errors import PROGRAM, CraspError
from crasp_compiler.experiments.tasks.base import Example, NumericTask, SequenceTask
from crasp_compiler.experiments.train.data import IGNORE, encode, label_ids
from crasp_compiler.experiments.train.models import NumericModel, SequenceModel

ATTENTION_BUDGET = 2**26  # attention-matrix entries per evaluation chunk (memory cap)


def one_line(err: BaseException) -> str:
    """An error as one line to put inside another message: a CraspError as ``file:line:
    col: message (hint)`` per diagnostic, joined by ``; ``, without its ``error:`` prefix
    (its formatted text has one and several lines); other exceptions as their text."""
    if not isinstance(err, CraspError):
        return " ".join(str(err).split())
    parts = []
    for d in err.diagnostics:
        where = "" if err.filename == PROGRAM else err.filename
        if d.span is not None:
            where += f":{d.span.line}:{d.span.column}"
        text = d.message + (f" ({d.hint})" if d.hint else "")
        parts.append(" ".join((f"{where}: {text}" if where else text).split()))
    return "; ".join(parts)


@torch.no_grad()
def predict(
    model: SequenceModel,
    task: SequenceTask,
    examples: Sequence[Example],
    *,
    device: torch.device | str = "cpu",
    batch_size: int = 256,
    seed: int = 0,
    offsets: bool = False,
) -> list[np.ndarray]:
    """The argmax label id at every position of every example (in input order).

    Examples are run in chunks sorted by length; positions come from
    ``model.sample_positions(train=False)`` with a CPU generator seeded by ``seed`` (so
    randomized positions are drawn afresh for every chunk, reproducibly), ``offsets`` asks
    for random APE offsets at test. With randomized positions a chunk holds one length
    only (its sorted sample then spans the range for every sequence, as in training).
    """
    was_training = model.training
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    order = sorted(range(len(examples)), key=lambda i: len(examples[i].tokens))
    heads = model.config.n_heads
    out: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * len(examples)
    start = 0
    while start < len(order):
        width = len(examples[order[min(start + batch_size, len(order)) - 1]].tokens)
        rows = max(1, min(batch_size, ATTENTION_BUDGET // (heads * max(width, 1) ** 2)))
        chunk = order[start : start + rows]
        if model.config.pe == "random":
            first = len(examples[chunk[0]].tokens)
            chunk = [i for i in chunk if len(examples[i].tokens) == first]
            rows = len(chunk)
        batch = encode(task, [examples[i] for i in chunk])
        positions = model.sample_positions(
            batch.lengths, batch.tokens.shape[1], offsets=offsets, generator=generator
        )
        logits = model(batch.tokens.to(device), positions)
        predicted = logits.argmax(-1).cpu().numpy()
        for row, i in enumerate(chunk):
            out[i] = predicted[row, : len(examples[i].tokens)]
        start += rows
    model.train(was_training)
    return out


def target_ids(task: SequenceTask, examples: Sequence[Example]) -> list[np.ndarray]:
    """The target label ids of every example (``IGNORE`` where not scored)."""
    return [label_ids(task, ex.targets) for ex in examples]


def same_where_scored(
    targets: Sequence[np.ndarray], first: Sequence[np.ndarray], second: Sequence[np.ndarray]
) -> np.ndarray:
    """Per sequence: ``first`` equals ``second`` at every position where ``targets`` is
    scored (not ``IGNORE``)."""
    return np.array(
        [
            bool(np.all(a[t != IGNORE] == b[t != IGNORE]))
            for t, a, b in zip(targets, first, second, strict=True)
        ],
        dtype=bool,
    )


def position_scores(
    targets: Sequence[np.ndarray], predicted: Sequence[np.ndarray]
) -> tuple[float | None, float | None]:
    """Balanced accuracy and position accuracy over the scored positions (module
    docstring); None when nothing is scored."""
    scored = [t != IGNORE for t in targets]
    truth = np.concatenate([t[s] for t, s in zip(targets, scored, strict=True)] or [[]])
    guess = np.concatenate([p[s] for p, s in zip(predicted, scored, strict=True)] or [[]])
    if truth.size == 0:
        return None, None
    right = truth == guess
    recalls = [float(right[truth == label].mean()) for label in np.unique(truth)]
    return float(np.mean(recalls)), float(right.mean())


def label_balance(task: SequenceTask, examples: Sequence[Example]) -> dict[str, dict[str, float]]:
    """The fraction of each label over the scored positions (``positions``) and over each
    example's last scored position (``last``), labels in ``task.labels`` order."""
    positions = dict.fromkeys(task.labels, 0)
    last = dict.fromkeys(task.labels, 0)
    for example in examples:
        scored = [t for t in example.targets if t is not None]
        for label in scored:
            positions[label] = positions.get(label, 0) + 1
        if scored:
            last[scored[-1]] = last.get(scored[-1], 0) + 1

    def fractions(counts: dict[str, int]) -> dict[str, float]:
        total = sum(counts.values()) or 1
        return {label: n / total for label, n in counts.items() if n}

    return {"positions": fractions(positions), "last": fractions(last)}


def compiled_predictions(
    task: SequenceTask, examples: Sequence[Example], backend: str = "compiled"
) -> list[np.ndarray]:
    """The label ids the task's program gives (``task.compiled_labels``)."""
    return [label_ids(task, labels) for labels in task.compiled_labels(list(examples), backend)]


def evaluate_sequence(
    model: SequenceModel,
    task: SequenceTask,
    test_sets: dict[str, list[Example]],
    *,
    device: torch.device | str = "cpu",
    batch_size: int = 256,
    seed: int = 0,
    offsets: bool = False,
    compiled: bool = True,
    backend: str = "compiled",
    per_position: bool = False,
) -> dict[str, Any]:
    """Per bin: ``accuracy``; with ``per_position`` also ``balanced_accuracy``,
    ``position_accuracy`` and ``label_balance`` (module docstring); and, when ``compiled`` and the task has a program,
    ``compiled_accuracy`` and ``agreement`` (else ``None``). ``compiled_error`` holds the
    message if the program could not be run (CraspError or NotImplementedError)."""
    result: dict[str, Any] = {
        "accuracy": {},
        "compiled_accuracy": None,
        "agreement": None,
        "compiled_error": None,
    }
    if per_position:
        result |= {"balanced_accuracy": {}, "position_accuracy": {}, "label_balance": {}}
    use_compiled = compiled and task.program is not None
    if use_compiled:
        result["compiled_accuracy"], result["agreement"] = {}, {}
    for name, examples in test_sets.items():
        targets = target_ids(task, examples)
        trained = predict(
            model, task, examples, device=device, batch_size=batch_size, seed=seed, offsets=offsets
        )
        result["accuracy"][name] = float(same_where_scored(targets, trained, targets).mean())
        if per_position:
            balanced, positions = position_scores(targets, trained)
            result["balanced_accuracy"][name] = balanced
            result["position_accuracy"][name] = positions
            result["label_balance"][name] = label_balance(task, examples)
        if not use_compiled or result["compiled_error"] is not None:
            continue
        try:
            reference = compiled_predictions(task, examples, backend)
        except (CraspError, NotImplementedError) as exc:
            result["compiled_error"] = one_line(exc)
            result["compiled_accuracy"] = result["agreement"] = None
            continue
        right = same_where_scored(targets, reference, targets)
        result["compiled_accuracy"][name] = float(right.mean())
        result["agreement"][name] = float(same_where_scored(targets, trained, reference).mean())
    return result


@torch.no_grad()
def predict_numeric(
    model: NumericModel,
    inputs: np.ndarray,
    *,
    device: torch.device | str = "cpu",
    batch_size: int = 1024,
) -> np.ndarray:
    """The model's outputs ``(batch, n)`` for inputs ``(batch, n)``, as float64."""
    was_training = model.training
    model.eval()
    outputs = [
        model(torch.as_tensor(inputs[i : i + batch_size], dtype=torch.float32, device=device))
        .double()
        .cpu()
        .numpy()
        for i in range(0, len(inputs), batch_size)
    ]
    model.train(was_training)
    return np.concatenate(outputs) if outputs else np.empty_like(inputs)


def numeric_metrics(predicted: np.ndarray, targets: np.ndarray) -> dict[str, float]:
    """``mse``, ``mae``, ``rel_error`` and ``close_accuracy`` (module docstring)."""
    error = np.abs(predicted - targets)
    close = error <= 0.05 + 0.05 * np.abs(targets)
    return {
        "mse": float(np.mean(error**2)),
        "mae": float(np.mean(error)),
        "rel_error": float(error.sum() / max(np.abs(targets).sum(), 1e-12)),
        "close_accuracy": float(np.all(close, axis=1).mean()),
    }


def evaluate_numeric(
    model: NumericModel,
    task: NumericTask,
    test_sets: dict[str, tuple[np.ndarray, np.ndarray]],
    *,
    device: torch.device | str = "cpu",
    batch_size: int = 1024,
    compiled: bool = True,
    mode: str = "hard",
    backend: str = "compiled",
) -> dict[str, Any]:
    """Per scale factor: ``metrics`` of the trained model and, when ``compiled`` and the task
    has a program, ``compiled_metrics`` of ``task.compiled_values`` (else ``None``);
    ``compiled_error`` as in :func:`evaluate_sequence`. Tasks with ``reports_agreement``
    also get ``agreement``: the MSE between the trained and the compiled outputs per scale
    (``None`` without the compiled values)."""
    result: dict[str, Any] = {"metrics": {}, "compiled_metrics": None, "compiled_error": None}
    use_compiled = compiled and task.program is not None
    agreement = getattr(task, "reports_agreement", False)
    if agreement:
        result["agreement"] = {} if use_compiled else None
    if use_compiled:
        result["compiled_metrics"] = {}
    for scale, (inputs, targets) in test_sets.items():
        predicted = predict_numeric(model, inputs, device=device, batch_size=batch_size)
        result["metrics"][scale] = numeric_metrics(predicted, targets)
        if not use_compiled or result["compiled_error"] is not None:
            continue
        try:
            values = np.asarray(task.compiled_values(inputs, mode=mode, backend=backend))
        except (CraspError, NotImplementedError) as exc:
            result["compiled_error"] = one_line(exc)
            result["compiled_metrics"] = None
            if agreement:
                result["agreement"] = None
            continue
        values = values.astype(np.float64)
        result["compiled_metrics"][scale] = numeric_metrics(values, targets)
        if agreement:
            result["agreement"][scale] = float(np.mean((predicted - values) ** 2))
    return result
