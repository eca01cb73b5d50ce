"""The training loop: :class:`TrainConfig`, :func:`train` and :func:`load`.

``train(config)`` trains a :class:`~crasp_compiler.experiments.train.models.SequenceModel` on a
sequence task (cross-entropy on the scored positions) or a
:class:`~crasp_compiler.experiments.train.models.NumericModel` on a numeric task (MSE on the n
outputs) with AdamW, on batches drawn afresh at every step, and evaluates it on fixed test
sets. Everything is deterministic given ``seed`` (training data, initialisation, positions)
and ``test_seed`` (the test sets, and the randomized positions used at test).

Files written to ``out_dir`` (when given; it is created and checked writable before
training starts): ``model.safetensors`` (the state dict), ``config.json``
(``{"train": TrainConfig, "model_class": ..., "model": model config}``) and, last,
``results.json``. Each is written to a temporary file and renamed (:mod:`.files`), so an
interrupted or failed write never leaves a truncated file.

Checkpoints: at every evaluation ``train`` also writes ``checkpoint.pt`` (model,
optimiser and scheduler state, step, histories and random-generator states). A run
started again with the same config (:func:`train_key`: every field but ``out_dir`` and
``progress``) and ``out_dir`` resumes from it, taking the same steps as an uninterrupted
run would (exactly so on the CPU); the checkpoint is removed once ``results.json`` is
written.

``results.json`` is a dict with the keys (the schema every reader checks:
:mod:`.records`):

- every task: ``task``, ``family``, ``kind`` (``"sequence"`` or ``"numeric"``),
  ``model_class``, ``config`` (the TrainConfig as a dict), ``model_config``, ``device``,
  ``n_parameters``, ``n_trainable``, ``steps`` (optimiser steps taken), ``early_stopped``,
  ``wall_time_s`` (training, evaluations during training included), ``eval_time_s``
  (the final evaluation), ``final_loss`` (mean training loss over the last window),
  ``loss_history`` (``[step, mean training loss since the previous entry]``),
  ``eval_history`` (``[step, value]``: in-distribution accuracy, or MSE at the first scale),
  ``compiled_error`` (why the program could not be run, else ``None``), ``resumed_from``
  (the step of the checkpoint the run resumed from, else ``None``; ``wall_time_s`` then
  counts the last session only);
- sequence tasks: ``bins`` (``{"lo-hi": [lo, hi]}``), ``test_size``, ``max_positions``,
  ``accuracy`` (``{"lo-hi": fraction of sequences exactly right}``), and, for tasks with
  a program (``None`` otherwise), ``compiled_accuracy`` and ``agreement`` (same keys);
  for tasks with ``per_position_metrics`` (program and Chomsky tasks) also ``balanced_accuracy``,
  ``position_accuracy`` and ``label_balance`` (same keys; see :mod:`.evaluate`);
- numeric tasks: ``n``, ``scales``, ``test_size``, ``metrics``
  (``{"c": {"mse", "mae", "rel_error", "close_accuracy"}}``) and ``compiled_metrics``
  (same shape, or ``None``).

Extension points (compiled initialisation, fine-tuning only some weights): ``train``
accepts a ready ``model`` and a ``param_filter(name, parameter) -> bool`` that picks the
parameters to optimise (the others are frozen).
"""

from __future__ import annotations

import io
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import Any, TypeGuard, cast, overload

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.optim import AdamW, Optimizer
from torch.optim.lr_scheduler import LambdaLR, LRScheduler
from tqdm.auto import tqdm

from crasp_compiler.errors import CraspError, Diagnostic
from crasp_compiler.experiments.tasks.base import SAMPLINGS, NumericTask, SequenceTask, Task
from crasp_compiler.experiments.tasks.program import ProgramTask, task_theory
from crasp_compiler.experiments.train.data import (
    IGNORE,
    bin_name,
    default_bins,
    encode,
    feasible_lengths,
    make_numeric_test_sets,
    make_test_sets,
    numeric_batch,
    sample_examples,
)
from crasp_compiler.experiments.train.evaluate import (
    evaluate_numeric,
    evaluate_sequence,
    one_line,
    predict,
    same_where_scored,
    target_ids,
)
from crasp_compiler.experiments.train.models import (
    NUMERIC_KINDS,
    PES,
    RANDOM_BASES,
    SEQUENCE_MODELS,
    NumericModel,
    NumericModelConfig,
    SequenceModel,
    SequenceModelConfig,
)
from crasp_compiler.experiments.train.provenance import provenance
from crasp_compiler.files import writable_dir, write_bytes, write_text

MODEL_CLASSES = {"SequenceModel": SequenceModel, "NumericModel": NumericModel}
RANDOM_PE_POSITIONS = 2048  # default max_positions for randomized PE (the paper's L)
MAX_LEN = 100_000  # the longest LEN a bin or train_max may ask for
CHECKPOINT = "checkpoint.pt"
PROGRAM_DIR = "program"  # a program task's source, in its run directory
# Presets: TrainConfig values a run starts from. ``quick`` (the defaults) finishes in
# minutes on a 2-core CPU; ``paper`` is the scale of the C-RASP paper (30k steps, 2,000
# test samples per bin): hours on a CPU. ``randomized-pe`` is the setting of Ruoss et al.
# (2023) for the Chomsky tasks: a 5-layer, 8-head encoder of width 64, dropout 0.1, Adam
# without weight decay at lr 3e-4 (the middle of their three), batch 128, positions
# sampled from [0, 2048), train LEN <= 40, test 41-500, 2M steps without early stopping
# (weeks of CPU: override ``steps`` for a budget).
PRESETS: dict[str, dict[str, Any]] = {
    "quick": {"steps": 1_000, "test_size": 200, "eval_every": 200},
    "paper": {"steps": 30_000, "test_size": 2_000, "eval_every": 500},
    "randomized-pe": {
        "steps": 2_000_000,
        "test_size": 500,
        "eval_every": 10_000,
        "early_stop": False,
        "n_layers": 5,
        "n_heads": 8,
        "d_model": 64,
        "dropout": 0.1,
        "batch_size": 128,
        "lr": 3e-4,
        "weight_decay": 0.0,
        "max_positions": RANDOM_PE_POSITIONS,
        "train_max": 40,
        "bins": [[1, 40], [41, 500]],
    },
}
# The expected training time is printed when it is at least LONG_RUN_S seconds; it is
# measured on the run's own first steps: from the end of the first step (which pays
# one-time costs) until ESTIMATE_STEPS more steps or ESTIMATE_S seconds have passed.
LONG_RUN_S = 30.0
ESTIMATE_STEPS = 10
ESTIMATE_S = 2.0
ParamFilter = Callable[[str, nn.Parameter], bool]


def _integer(lo: int, hi: int = 2**63 - 1) -> tuple[str, Callable[[object], bool]]:
    what = f"an integer >= {lo}" if hi == 2**63 - 1 else f"an integer in [{lo}, {hi}]"
    return what, lambda v: type(v) is int and lo <= v <= hi


def _number(v: object) -> TypeGuard[int | float]:
    """A finite JSON number (an integer beyond float's range is not one: it overflows)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _one_of(options: tuple[str, ...]) -> tuple[str, Callable[[object], bool]]:
    return f"one of {', '.join(options)}", lambda v: isinstance(v, str) and v in options


def _bins(v: object) -> bool:
    return (
        isinstance(v, list | tuple)
        and len(v) > 0
        and all(
            isinstance(b, list | tuple)
            and len(b) == 2
            and all(type(x) is int for x in b)
            and 0 <= b[0] <= b[1] <= MAX_LEN
            for b in v
        )
    )


_BOOL = ("true or false", lambda v: type(v) is bool)
_SIZE = _integer(1, 2**31 - 1)
# What each TrainConfig field (but ``task``) must be; OPTIONAL ones may also be None.
FIELD_RULES: dict[str, tuple[str, Callable[[object], bool]]] = {
    "pe": _one_of(PES),
    "steps": _integer(1),
    "seed": _integer(0),
    "batch_size": _SIZE,
    "lr": ("a number > 0", lambda v: _number(v) and v > 0),
    "weight_decay": ("a number >= 0", lambda v: _number(v) and v >= 0),
    "d_model": _SIZE,
    "n_layers": _SIZE,
    "n_heads": _SIZE,
    "dropout": ("a number in [0, 1)", lambda v: _number(v) and 0 <= v < 1),
    "max_positions": _SIZE,
    "random_base": _one_of(RANDOM_BASES),
    "model": _one_of(SEQUENCE_MODELS),
    "train_scale": ("a number > 0", lambda v: _number(v) and v > 0),
    "warmup_steps": _integer(0),
    "grad_clip": ("a number > 0", lambda v: _number(v) and v > 0),
    "eval_every": _integer(1),
    "early_stop": _BOOL,
    "test_size": _SIZE,
    "test_seed": _integer(0),
    "eval_batch_size": _SIZE,
    "bins": (f"a non-empty list of [lo, hi] pairs with 0 <= lo <= hi <= {MAX_LEN}", _bins),
    "train_max": _integer(0, MAX_LEN),
    "test_offsets": _BOOL,
    "numeric_kind": _one_of(NUMERIC_KINDS),
    "numeric_sampling": _one_of(SAMPLINGS),
    "numeric_n": _SIZE,
    "scales": (
        "a non-empty list of positive numbers",
        lambda v: (
            isinstance(v, list | tuple) and len(v) > 0 and all(_number(c) and c > 0 for c in v)
        ),
    ),
    "compare_compiled": _BOOL,
    "compiled_backend": _one_of(("compiled", "interpreter")),
    "compiled_mode": _one_of(("hard", "softmax")),
    "select": _one_of(("last", "best")),
    "device": ("a torch device name (a string)", lambda v: isinstance(v, str)),
    "out_dir": ("a path (a string)", lambda v: isinstance(v, str) and "\0" not in v),
    "progress": _BOOL,
}
OPTIONAL = {"n_layers", "max_positions", "grad_clip", "bins", "train_max", "out_dir"}


def field_problem(name: str, value: object) -> str | None:
    """What is wrong with ``value`` for the TrainConfig field ``name`` (``"must be ...,
    not ..."``), or None when it is fine."""
    what, ok = FIELD_RULES[name]
    if ok(value) or (value is None and name in OPTIONAL):
        return None
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:59] + "…"
    return f"must be {what}, not {shown}"


@dataclass
class TrainConfig:
    """One training run.

    Model: ``pe`` (sequence tasks: ``ape``/``nope``/``sin``/``random``/``rope``/``alibi``/
    ``relative``), ``numeric_kind`` (numeric tasks: ``positional``/``standard``),
    ``d_model``, ``n_layers`` (``None``: 2 for sequence tasks, ``ceil(log2 n) + 1`` for
    numeric ones), ``n_heads``, ``dropout``, ``max_positions`` (``None``: the longest test
    sequence, and at least 2048 for ``random``), ``random_base``
    (``sin``/``learned``/``rope``/``alibi``/``relative``), ``model`` (sequence tasks:
    ``transformer``, or ``token_mlp``, the C-RASP paper's random baseline, with
    ``pe = "nope"``). ``train_scale``: numeric tasks train on values at this scale factor
    c (default 1; the positional paper's fine-tuning on 10× data uses 10).
    Optimisation: AdamW (no weight decay on biases, relative attention's ``u`` and ``v``
    among them, and LayerNorm parameters), linear warm-up over ``warmup_steps`` then a
    constant ``lr``, gradient norm clipped at ``grad_clip`` (``None``: no clipping).
    Data: ``seed`` draws the training batches, the initialisation and the training
    positions; ``test_seed`` the test sets (``test_size`` per bin or scale, the same for
    every training seed) and the randomized positions at test.
    Evaluation: every ``eval_every`` steps on the in-distribution test set (the first
    bin; numeric: the first scale, 1 by default), stopping early at 100% accuracy when
    ``early_stop`` (sequence tasks only); at the end on every bin / scale. ``bins``: ``None`` for
    :func:`~crasp_compiler.experiments.train.data.default_bins`; ``train_max``: ``None`` for the
    task's; ``test_offsets``: random APE offsets at test too. ``numeric_n``: the n of
    numeric tasks; ``scales``: the scale factors c tested;
    ``numeric_sampling``: ``interval`` (the papers') or ``uniform``
    (:meth:`~crasp_compiler.experiments.tasks.base.NumericTask.sample`). ``compare_compiled``: also
    evaluate the task's compiled program (``compiled_backend``, ``compiled_mode``).
    ``device``: ``"auto"`` is CUDA when available; ``select``: the model scored at
    the end, ``"last"`` (after the last step) or ``"best"`` (the evaluation with the best
    in-distribution score, as the C-RASP paper selects; the first of equal ones);
    ``out_dir``: ``None`` writes nothing.
    Every field is checked (:data:`FIELD_RULES`) when the config is made and when it is
    trained: a bad value is a :class:`CraspError` naming the field.
    Sizes: ``steps``, ``test_size`` and ``eval_every`` default to :data:`PRESETS`
    ``"quick"`` (1,000 steps, 200 test samples, an evaluation every 200 steps: minutes on
    a 2-core CPU); ``PRESETS["paper"]`` holds the paper-scale ones. With ``progress``, a
    run expected to take :data:`LONG_RUN_S` seconds or more says so on stderr after its
    first steps (:func:`estimate_message`).
    """

    task: str | Task
    pe: str = "ape"
    steps: int = 1_000  # PRESETS["quick"]
    seed: int = 0
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.01
    d_model: int = 64
    n_layers: int | None = None
    n_heads: int = 2
    dropout: float = 0.0
    max_positions: int | None = None
    random_base: str = "sin"
    warmup_steps: int = 0
    grad_clip: float | None = 1.0
    eval_every: int = 200  # PRESETS["quick"]
    early_stop: bool = True
    test_size: int = 200  # PRESETS["quick"]
    test_seed: int = 0
    eval_batch_size: int = 256
    bins: list[tuple[int, int]] | None = None
    train_max: int | None = None
    test_offsets: bool = False
    numeric_kind: str = "positional"
    numeric_sampling: str = "interval"
    numeric_n: int = 8
    scales: tuple[float, ...] = field(default_factory=lambda: tuple(range(1, 11)))
    compare_compiled: bool = True
    compiled_backend: str = "compiled"
    compiled_mode: str = "hard"
    device: str = "auto"
    select: str = "last"
    model: str = "transformer"
    train_scale: float = 1.0
    out_dir: str | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.out_dir, os.PathLike):
            self.out_dir = os.fspath(self.out_dir)
        self.check()
        if self.bins is not None:
            self.bins = [(lo, hi) for lo, hi in self.bins]
        self.scales = tuple(self.scales)

    def check(self) -> None:
        """Refuse a field of the wrong type or range (a CraspError naming the field)."""
        if not isinstance(self.task, str | Task):
            raise CraspError(f"task must be a task name (a string), not {self.task!r}")
        for name in FIELD_RULES:
            problem = field_problem(name, getattr(self, name))
            if problem:
                raise CraspError(f"{name} {problem}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (a Task object is stored by its name)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        task = self.task
        # a task object made from a file (ProgramTask) is recorded with a digest of it
        data["task"] = task if isinstance(task, str) else getattr(task, "identity", task.name)
        data["bins"] = None if self.bins is None else [list(b) for b in self.bins]
        data["scales"] = list(self.scales)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """The inverse of :meth:`to_dict` (unknown keys are refused)."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise CraspError(f"unknown TrainConfig fields: {', '.join(unknown)}")
        if "task" not in data:
            raise CraspError("a TrainConfig needs a task")
        return cls(**data)


# Fields added after runs were recorded, with their defaults: in a run's key only away
# from the default, so the keys (run directories, records) of earlier runs stay theirs.
LATER_FIELDS: dict[str, object] = {"select": "last", "model": "transformer", "train_scale": 1.0}


def train_key(config: TrainConfig | dict[str, Any]) -> dict[str, Any]:
    """What determines a run's results: the config as a dict without ``out_dir`` and
    ``progress`` (and the :data:`LATER_FIELDS` at their defaults). A checkpoint (or, in a
    sweep, a finished run) is reused only when its key equals the new run's."""
    data = (config if isinstance(config, TrainConfig) else TrainConfig.from_dict(config)).to_dict()
    del data["out_dir"], data["progress"]
    for name, default in LATER_FIELDS.items():
        if data[name] == default:
            del data[name]
    return data


def resolve_task(task: str | Task) -> Task:
    """A Task object: ``task`` itself, or the registered task of that name."""
    if isinstance(task, Task):
        return task
    from crasp_compiler.experiments.tasks.registry import get_task

    return get_task(task)


def resolve_device(device: str) -> torch.device:
    """``"auto"``: CUDA when available, else the CPU; any other torch device string."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


@overload
def build_model(
    config: TrainConfig, task: SequenceTask, max_positions: int = 512
) -> SequenceModel: ...
@overload
def build_model(
    config: TrainConfig, task: NumericTask, max_positions: int = 512
) -> NumericModel: ...
def build_model(
    config: TrainConfig, task: SequenceTask | NumericTask, max_positions: int = 512
) -> SequenceModel | NumericModel:
    """The untrained model the config describes for ``task``."""
    if isinstance(task, NumericTask):
        if config.model != "transformer":
            raise CraspError(f"model {config.model!r} is a baseline for sequence tasks only")
        return NumericModel(
            NumericModelConfig(
                n=config.numeric_n,
                kind=config.numeric_kind,
                d_model=config.d_model,
                n_layers=config.n_layers,
                n_heads=config.n_heads,
            )
        )
    return SequenceModel(
        SequenceModelConfig(
            vocab_size=len(task.vocab),
            n_labels=len(task.labels),
            d_model=config.d_model,
            n_layers=2 if config.n_layers is None else config.n_layers,
            n_heads=config.n_heads,
            pe=config.pe,
            max_positions=max_positions,
            dropout=config.dropout,
            causal=not task.encoder,
            random_base=config.random_base,
            model=config.model,
        )
    )


def _optimizer(
    config: TrainConfig, model: nn.Module, param_filter: ParamFilter | None
) -> tuple[AdamW, LambdaLR]:
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for name, param in model.named_parameters():
        if param_filter is not None and not param_filter(name, param):
            param.requires_grad_(False)
            continue
        bias = param.ndim < 2 or name.endswith("_bias")  # relative attention's u and v
        (no_decay if bias else decay).append(param)
    if not decay and not no_decay:
        raise CraspError("the parameter filter leaves nothing to train")
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    optimizer = AdamW(groups, lr=config.lr)
    warmup = max(config.warmup_steps, 0)
    schedule = LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup else 1.0)
    return optimizer, schedule


class _Randomness:
    """The random generators a run draws from while training (saved in checkpoints):
    ``rng`` the batches, ``generator`` the training positions, torch's global generator
    anything else (dropout)."""

    def __init__(self, rng: np.random.Generator, generator: torch.Generator | None = None):
        self.rng, self.generator = rng, generator

    def state(self) -> dict[str, Any]:
        return {
            "numpy": self.rng.bit_generator.state,
            "generator": None if self.generator is None else self.generator.get_state(),
            "torch": torch.get_rng_state(),
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["numpy"]
        if self.generator is not None:
            self.generator.set_state(state["generator"])
        torch.set_rng_state(state["torch"])


Parts = dict[str, nn.Module | Optimizer | LRScheduler]  # a run's model, optimizer and schedule


def _resume(
    path: Path | None, config: TrainConfig, parts: Parts, randomness: _Randomness
) -> dict[str, Any] | None:
    """Load the checkpoint at ``path`` into ``parts`` (model, optimizer, schedule) and
    ``randomness`` when it was written for this config; its state, or None."""
    if path is None or not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch.load raises many kinds; a bad checkpoint is only lost time
        warnings.warn(
            f"{path}: unreadable checkpoint ({one_line(err)}); training from the start",
            stacklevel=3,
        )
        return None
    if not isinstance(state, dict) or state.get("config") != train_key(config):
        return None
    for name in ("model", "optimizer", "schedule"):
        parts[name].load_state_dict(state[name])
    randomness.restore(state["randomness"])
    return state


def duration(seconds: float) -> str:
    """``seconds`` for people: ``40 s``, ``3 min``, ``2 h 05 min``."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 90 else f"{minutes // 60} h {minutes % 60:02d} min"


def estimate_message(name: str, steps: int, rate: float, measured: int) -> str:
    """What a long run says before it goes on: the time ``steps`` more steps take at
    ``rate`` steps/s (measured over ``measured`` steps)."""
    return (
        f"{name}: about {duration(steps / rate)} of training ({steps:,} steps at "
        f"~{rate:.3g} steps/s, timed on its first {measured} steps; less if it stops "
        "early, plus the evaluations)"
    )


class _Estimate:
    """Times a run's first steps; :meth:`step` returns None while measuring, then once
    the message of :func:`estimate_message`, or ``""`` for a short run."""

    def __init__(self, name: str, steps: int) -> None:
        self.name, self.steps = name, steps
        self.first: tuple[int, float] | None = None

    def step(self, step: int) -> str | None:
        now = time.perf_counter()
        if self.first is None:
            self.first = (step, now)
            return None
        measured, seconds = step - self.first[0], now - self.first[1]
        if measured < ESTIMATE_STEPS and seconds < ESTIMATE_S and step < self.steps:
            return None
        rate = measured / max(seconds, 1e-9)
        left = self.steps - step
        if left / rate < LONG_RUN_S:
            return ""
        return estimate_message(self.name, left, rate, measured)


def _fit(
    config: TrainConfig,
    model: nn.Module,
    param_filter: ParamFilter | None,
    batch_loss: Callable[[], Tensor],
    check: Callable[[], tuple[float, bool]],
    name: str,
    randomness: _Randomness,
    higher_is_better: bool = True,
) -> dict[str, Any]:
    """The optimisation loop shared by both kinds of task: ``batch_loss`` draws a batch and
    returns its loss; ``check`` evaluates and says whether to stop. With an ``out_dir``,
    resumes from its checkpoint and writes one at every evaluation. With
    ``select = "best"`` the results also hold the weights of its best evaluation
    (``higher_is_better``: accuracy; else an error) as ``best_weights``, its step as
    ``selected_step`` (:func:`_select_best` puts them in the model)."""
    optimizer, schedule = _optimizer(config, model, param_filter)
    trainable = [p for p in model.parameters() if p.requires_grad]
    parts: Parts = {"model": model, "optimizer": optimizer, "schedule": schedule}
    path = None if config.out_dir is None else Path(config.out_dir) / CHECKPOINT
    resumed = _resume(path, config, parts, randomness)
    loss_history, eval_history, step, stopped = [], [], 0, False
    best: dict[str, Any] | None = None  # {"step", "value", "model"} of the best evaluation
    if resumed is not None:
        step, stopped = resumed["step"], resumed["stopped"]
        loss_history, eval_history = resumed["loss_history"], resumed["eval_history"]
        best = resumed.get("best")
    model.train()
    window: float | Tensor = 0.0  # the sum of the losses since the last evaluation
    window_steps = 0
    start = time.perf_counter()
    bar = tqdm(
        total=config.steps, initial=step, desc=name, disable=not config.progress, leave=False
    )
    timer = _Estimate(name, config.steps) if config.progress else None
    while step < config.steps and not stopped:
        loss = batch_loss()
        optimizer.zero_grad(set_to_none=True)
        # torch leaves Tensor.backward unannotated
        loss.backward()  # type: ignore[no-untyped-call]
        if config.grad_clip is not None:
            nn.utils.clip_grad_norm_(trainable, config.grad_clip)
        optimizer.step()
        schedule.step()
        step += 1
        window = window + loss.detach()
        window_steps += 1
        bar.update(1)
        if timer is not None and (message := timer.step(step)) is not None:
            timer = None  # measured: no more timing
            if message:
                bar.write(message, file=sys.stderr)
        if step % config.eval_every == 0 or step == config.steps:
            mean_loss = float(window) / window_steps
            loss_history.append([step, mean_loss])
            window, window_steps = 0.0, 0
            value, stopped = check()
            model.train()
            eval_history.append([step, value])
            if config.select == "best" and (
                best is None
                or (value > best["value"] if higher_is_better else value < best["value"])
            ):
                weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
                best = {"step": step, "value": value, "model": weights}
            bar.set_postfix(loss=f"{mean_loss:.4g}", eval=f"{value:.4g}")
            if path is not None:
                state: dict[str, Any] = {k: part.state_dict() for k, part in parts.items()}
                state |= {"config": train_key(config), "step": step, "stopped": stopped}
                state |= {"loss_history": loss_history, "eval_history": eval_history}
                if best is not None:
                    state["best"] = best
                buffer = io.BytesIO()
                torch.save({**state, "randomness": randomness.state()}, buffer)
                write_bytes(path, buffer.getvalue())
    bar.close()
    selected = {}
    if config.select == "best" and best is not None:
        # the caller scores the last weights, then these (_select_best)
        selected = {"selected_step": best["step"], "best_weights": best["model"]}
    return {
        **selected,
        "resumed_from": None if resumed is None else resumed["step"],
        "steps": step,
        "early_stopped": stopped and step < config.steps,
        "wall_time_s": time.perf_counter() - start,
        "final_loss": loss_history[-1][1] if loss_history else None,
        "loss_history": loss_history,
        "eval_history": eval_history,
    }


def _select_best(
    model: nn.Module, results: dict[str, Any], field: str, score: Callable[[], object]
) -> None:
    """With ``select = "best"``: the last weights' scores under ``field`` (``score()``), so
    that a record holds both checkpoints' and the two rules compare on one run; then the
    best evaluation's weights go into the model, to be scored as the run's."""
    best = results.pop("best_weights", None)
    if best is None:
        return
    if results["selected_step"] != results["steps"]:
        results[field] = score()
    model.load_state_dict(best)


def _train_sequence(
    config: TrainConfig,
    task: SequenceTask,
    device: torch.device,
    model: SequenceModel | None,
    param_filter: ParamFilter | None,
) -> tuple[SequenceModel, dict[str, Any]]:
    if config.train_scale != 1:
        raise CraspError("train_scale is for numeric tasks only (a scale factor of values)")
    train_max = task.train_max if config.train_max is None else config.train_max
    bins = default_bins(task, train_max) if config.bins is None else list(config.bins)
    test_sets = make_test_sets(task, bins, config.test_size, config.test_seed)
    if not test_sets:
        raise CraspError(f"task {task.name!r}: no bin has a feasible length")
    longest = max(len(ex.tokens) for examples in test_sets.values() for ex in examples)
    lengths = feasible_lengths(task, task.min_length, train_max)
    if lengths:  # the training sequences need positions too
        sample = task.sample(np.random.default_rng(config.seed), lengths[-1])
        longest = max(longest, len(sample.tokens))
    max_positions = config.max_positions or (
        max(longest, RANDOM_PE_POSITIONS) if config.pe == "random" else longest
    )
    torch.manual_seed(config.seed)
    if model is None:
        model = build_model(config, task, max_positions)
    elif model.config.pe in ("ape", "random") and model.config.max_positions < longest:
        raise CraspError(
            [
                Diagnostic(
                    f"the model has {model.config.max_positions} positions; "
                    f"the test sets need {longest}",
                    hint="build it with a larger max_positions",
                )
            ]
        )
    model.to(device)
    train_lengths = feasible_lengths(task, task.min_length, train_max)
    rng = np.random.default_rng(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    in_distribution = next(iter(test_sets.values()))

    def batch_loss() -> Tensor:
        # randomized positions (Ruoss et al.): one length per batch, so its sorted sample
        # of positions spreads over the whole range for every sequence of the batch
        lengths = [int(rng.choice(train_lengths))] if config.pe == "random" else train_lengths
        batch = encode(task, sample_examples(task, rng, lengths, config.batch_size))
        positions = model.sample_positions(
            batch.lengths, batch.tokens.shape[1], train=True, generator=generator
        )
        logits = model(batch.tokens.to(device), positions)
        labels = batch.labels.to(device)
        total = F.cross_entropy(
            logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE, reduction="sum"
        )
        return total / (labels != IGNORE).sum().clamp(min=1)

    def check() -> tuple[float, bool]:
        predicted = predict(
            model,
            task,
            in_distribution,
            device=device,
            batch_size=config.eval_batch_size,
            seed=config.test_seed,
            offsets=config.test_offsets,
        )
        targets = target_ids(task, in_distribution)
        accuracy = float(same_where_scored(targets, predicted, targets).mean())
        return accuracy, config.early_stop and accuracy == 1.0

    randomness = _Randomness(rng, generator)
    results = _fit(config, model, param_filter, batch_loss, check, task.name, randomness)
    start = time.perf_counter()
    evaluate = partial(
        evaluate_sequence,
        model,
        task,
        test_sets,
        device=device,
        batch_size=config.eval_batch_size,
        seed=config.test_seed,
        offsets=config.test_offsets,
    )
    _select_best(model, results, "last_accuracy", lambda: evaluate(compiled=False)["accuracy"])
    results.update(
        evaluate(
            compiled=config.compare_compiled,
            backend=config.compiled_backend,
            per_position=getattr(task, "per_position_metrics", False),
        )
    )
    results["eval_time_s"] = time.perf_counter() - start
    results["bins"] = {bin_name(b): list(b) for b in bins if bin_name(b) in test_sets}
    results["test_size"] = config.test_size
    results["max_positions"] = model.config.max_positions
    return model, results


def _train_numeric(
    config: TrainConfig,
    task: NumericTask,
    device: torch.device,
    model: NumericModel | None,
    param_filter: ParamFilter | None,
) -> tuple[NumericModel, dict[str, Any]]:
    n = config.numeric_n
    if not config.scales:
        raise CraspError("scales is empty: give at least one scale factor")
    test_sets = make_numeric_test_sets(
        task, n, config.scales, config.test_size, config.test_seed, config.numeric_sampling
    )
    torch.manual_seed(config.seed)
    if model is None:
        model = build_model(config, task)
    model.to(device)
    rng = np.random.default_rng(config.seed)
    first_scale, in_distribution = next(iter(test_sets.items()))

    def batch_loss() -> Tensor:
        inputs, targets = numeric_batch(
            task, rng, config.batch_size, n, config.train_scale, config.numeric_sampling
        )
        predicted = model(torch.as_tensor(inputs, dtype=torch.float32, device=device))
        return F.mse_loss(predicted, torch.as_tensor(targets, dtype=torch.float32, device=device))

    def check() -> tuple[float, bool]:
        result = evaluate_numeric(
            model, task, {first_scale: in_distribution}, device=device, compiled=False
        )
        return result["metrics"][first_scale]["mse"], False

    results = _fit(
        config,
        model,
        param_filter,
        batch_loss,
        check,
        task.name,
        _Randomness(rng),
        higher_is_better=False,  # an MSE
    )
    start = time.perf_counter()
    evaluate = partial(
        evaluate_numeric, model, task, test_sets, device=device, batch_size=config.eval_batch_size
    )
    _select_best(model, results, "last_metrics", lambda: evaluate(compiled=False)["metrics"])
    results.update(
        evaluate(
            compiled=config.compare_compiled,
            mode=config.compiled_mode,
            backend=config.compiled_backend,
        )
    )
    results["eval_time_s"] = time.perf_counter() - start
    results["n"] = n
    results["scales"] = list(config.scales)
    results["test_size"] = config.test_size
    return model, results


def train(
    config: TrainConfig,
    *,
    model: nn.Module | None = None,
    param_filter: ParamFilter | None = None,
) -> dict[str, Any]:
    """Train, evaluate, write ``out_dir`` (see the module docstring) and return the results.

    ``model``: train this model (a :class:`SequenceModel` or :class:`NumericModel` of the
    task's shape, e.g. a compiled initialisation) instead of a fresh one; its
    ``max_positions`` must cover the test sets. ``param_filter(name, parameter)``: only the
    parameters it accepts are optimised, the others are frozen.
    """
    config.check()
    task = resolve_task(config.task)
    device = resolve_device(config.device)
    if not isinstance(task, SequenceTask | NumericTask):
        raise CraspError(f"task {task.name!r} is neither a sequence nor a numeric task")
    model_type = SequenceModel if isinstance(task, SequenceTask) else NumericModel
    if model is not None and not isinstance(model, model_type):
        raise CraspError(f"task {task.name!r} trains a {model_type.__name__}")
    if config.out_dir is not None:  # before training, so a bad path loses no work
        writable_dir(config.out_dir)
    # a given model is a model_type (checked above)
    trained: SequenceModel | NumericModel
    if isinstance(task, SequenceTask):
        trained, results = _train_sequence(
            config, task, device, cast(SequenceModel | None, model), param_filter
        )
    else:
        trained, results = _train_numeric(
            config, task, device, cast(NumericModel | None, model), param_filter
        )
    dtype = str(next(trained.parameters()).dtype).removeprefix("torch.")
    results = {
        "task": task.name,
        "family": task.family,
        "kind": "numeric" if isinstance(task, NumericTask) else "sequence",
        "model_class": type(trained).__name__,
        "config": config.to_dict(),
        "model_config": asdict(trained.config),
        "device": str(device),
        "n_parameters": sum(p.numel() for p in trained.parameters()),
        "n_trainable": sum(p.numel() for p in trained.parameters() if p.requires_grad),
        **results,
        "provenance": provenance(str(device), dtype),
    }
    theory = task_theory(task)
    if theory is not None:
        results["theory"] = theory
    if config.out_dir is not None:
        save(trained, config, results, config.out_dir)
        (Path(config.out_dir) / CHECKPOINT).unlink(missing_ok=True)
    return results


def save(
    model: SequenceModel | NumericModel,
    config: TrainConfig,
    results: dict[str, Any],
    out_dir: str | Path,
) -> None:
    """Write ``model.safetensors``, ``config.json`` and, last, ``results.json`` to
    ``out_dir``, each replaced whole (:func:`~crasp_compiler.files.write_bytes`); for a
    program task also the program's source under ``program/`` (``config.json`` then
    says where, with its alphabet and training lengths)."""
    from safetensors import torch as safetensors_torch

    out = writable_dir(out_dir)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    write_bytes(out / "model.safetensors", safetensors_torch.save(state))
    meta = {
        "train": config.to_dict(),
        "model_class": type(model).__name__,
        "model": asdict(model.config),
    }
    if isinstance(config.task, ProgramTask):  # the program itself, for `crasp compare`
        task = config.task
        write_text(writable_dir(out / PROGRAM_DIR) / Path(task.path).name, task.crasp.source or "")
        meta["program"] = {
            "file": f"{PROGRAM_DIR}/{Path(task.path).name}",
            "alphabet": list(task.alphabet),
            "lengths": [task.min_length, task.train_max],
        }
    write_text(out / "config.json", json.dumps(meta, indent=2) + "\n")
    write_text(out / "results.json", json.dumps(results, indent=2) + "\n")


def load_config(out_dir: str | Path) -> TrainConfig:
    """The TrainConfig of a run written to ``out_dir`` (the task by name)."""
    meta = _read_meta(out_dir)
    return TrainConfig.from_dict(meta["train"])


def load(out_dir: str | Path, device: str = "cpu") -> SequenceModel | NumericModel:
    """The trained model written to ``out_dir``, in eval mode on ``device``."""
    from safetensors.torch import load_file

    meta = _read_meta(out_dir)
    name = meta.get("model_class")
    if name not in MODEL_CLASSES:
        raise CraspError(f"{out_dir}: unknown model class {name!r} in config.json")
    config = meta["model"]
    model: SequenceModel | NumericModel = (
        SequenceModel(SequenceModelConfig(**config))
        if name == "SequenceModel"
        else NumericModel(NumericModelConfig(**config))
    )
    model.load_state_dict(load_file(Path(out_dir) / "model.safetensors"))
    return model.to(device).eval()


def _read_meta(out_dir: str | Path) -> dict[str, Any]:
    path = Path(out_dir) / "config.json"
    try:
        meta: dict[str, Any] = json.loads(path.read_text())
        return meta
    except (OSError, json.JSONDecodeError) as exc:
        raise CraspError(
            [Diagnostic(f"cannot read {path}: {exc}", hint="a directory written by train()")]
        ) from None


__all__ = [
    "PRESETS",
    "TrainConfig",
    "build_model",
    "load",
    "load_config",
    "resolve_device",
    "resolve_task",
    "save",
    "train",
]
