"""The training loop: :class:`TrainConfig`, :func:`train` and :func:`load`.

``train(config)`` trains a :class:`~crasp_compiler.train.models.SequenceModel` on a
sequence task (cross-entropy on the scored positions) or a
:class:`~crasp_compiler.train.models.NumericModel` on a numeric task (MSE on the n
outputs) with AdamW, on batches drawn afresh at every step, and evaluates it on fixed test
sets. Everything is deterministic given ``seed`` (training data, initialisation, positions)
and ``test_seed`` (the test sets, and the randomized positions used at test).

Files written to ``out_dir`` (when given): ``model.safetensors`` (the state dict),
``config.json`` (``{"train": TrainConfig, "model_class": ..., "model": model config}``)
and ``results.json``, a dict with the keys:

- every task: ``task``, ``family``, ``kind`` (``"sequence"`` or ``"numeric"``),
  ``model_class``, ``config`` (the TrainConfig as a dict), ``model_config``, ``device``,
  ``n_parameters``, ``n_trainable``, ``steps`` (optimiser steps taken), ``early_stopped``,
  ``wall_time_s`` (training, evaluations during training included), ``eval_time_s``
  (the final evaluation), ``final_loss`` (mean training loss over the last window),
  ``loss_history`` (``[step, mean training loss since the previous entry]``),
  ``eval_history`` (``[step, value]``: in-distribution accuracy, or MSE at the first scale),
  ``compiled_error`` (why the program could not be run, else ``None``);
- sequence tasks: ``bins`` (``{"lo-hi": [lo, hi]}``), ``test_size``, ``max_positions``,
  ``accuracy`` (``{"lo-hi": fraction of sequences exactly right}``), and, for tasks with
  a program (``None`` otherwise), ``compiled_accuracy`` and ``agreement`` (same keys);
- numeric tasks: ``n``, ``scales``, ``test_size``, ``metrics``
  (``{"c": {"mse", "mae", "rel_error", "close_accuracy"}}``) and ``compiled_metrics``
  (same shape, or ``None``).

Extension points (compiled initialisation, fine-tuning only some weights): ``train``
accepts a ready ``model`` and a ``param_filter(name, parameter) -> bool`` that picks the
parameters to optimise (the others are frozen).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from crasp_compiler.errors import CraspError, Diagnostic
from crasp_compiler.tasks.base import NumericTask, SequenceTask, Task
from crasp_compiler.train.data import (
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
from crasp_compiler.train.evaluate import (
    evaluate_numeric,
    evaluate_sequence,
    predict,
    same_where_scored,
    target_ids,
)
from crasp_compiler.train.models import (
    PES,
    NumericModel,
    NumericModelConfig,
    SequenceModel,
    SequenceModelConfig,
)

MODEL_CLASSES = {"SequenceModel": SequenceModel, "NumericModel": NumericModel}
CONFIG_CLASSES = {"SequenceModel": SequenceModelConfig, "NumericModel": NumericModelConfig}
RANDOM_PE_POSITIONS = 2048  # default max_positions for randomized PE (the paper's L)
ParamFilter = Callable[[str, nn.Parameter], bool]


@dataclass
class TrainConfig:
    """One training run.

    Model: ``pe`` (sequence tasks: ``ape``/``nope``/``sin``/``random``), ``numeric_kind``
    (numeric tasks: ``positional``/``standard``), ``d_model``, ``n_layers`` (``None``: 2
    for sequence tasks, ``ceil(log2 n) + 1`` for numeric ones), ``n_heads``, ``dropout``,
    ``max_positions`` (``None``: the longest test sequence, and at least 2048 for
    ``random``), ``random_base`` (``sin``/``learned``).
    Optimisation: AdamW (no weight decay on biases and LayerNorm parameters), linear
    warm-up over ``warmup_steps`` then a constant ``lr``, gradient norm clipped at
    ``grad_clip`` (``None``: no clipping).
    Data: ``seed`` draws the training batches, the initialisation and the training
    positions; ``test_seed`` the test sets (``test_size`` per bin or scale, the same for
    every training seed) and the randomized positions at test.
    Evaluation: every ``eval_every`` steps on the in-distribution test set (the first
    bin; numeric: the first scale, 1 by default), stopping early at 100% accuracy when
    ``early_stop`` (sequence tasks only); at the end on every bin / scale. ``bins``: ``None`` for
    :func:`~crasp_compiler.train.data.default_bins`; ``train_max``: ``None`` for the
    task's; ``test_offsets``: random APE offsets at test too. ``numeric_n``: the n of
    numeric tasks; ``scales``: the scale factors c tested. ``compare_compiled``: also
    evaluate the task's compiled program (``compiled_backend``, ``compiled_mode``).
    ``device``: ``"auto"`` is CUDA when available; ``out_dir``: ``None`` writes nothing.
    """

    task: str | Task
    pe: str = "ape"
    steps: int = 30_000
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
    eval_every: int = 500
    early_stop: bool = True
    test_size: int = 2000
    test_seed: int = 0
    eval_batch_size: int = 256
    bins: list[tuple[int, int]] | None = None
    train_max: int | None = None
    test_offsets: bool = False
    numeric_kind: str = "positional"
    numeric_n: int = 8
    scales: tuple[float, ...] = field(default_factory=lambda: tuple(range(1, 11)))
    compare_compiled: bool = True
    compiled_backend: str = "compiled"
    compiled_mode: str = "hard"
    device: str = "auto"
    out_dir: str | None = None
    progress: bool = True

    def to_dict(self) -> dict:
        """A JSON-ready dict (a Task object is stored by its name)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["task"] = self.task if isinstance(self.task, str) else self.task.name
        data["bins"] = None if self.bins is None else [list(b) for b in self.bins]
        data["scales"] = list(self.scales)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> TrainConfig:
        """The inverse of :meth:`to_dict` (unknown keys are refused)."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise CraspError(f"unknown TrainConfig fields: {', '.join(unknown)}")
        data = dict(data)
        if data.get("bins") is not None:
            data["bins"] = [tuple(b) for b in data["bins"]]
        if "scales" in data:
            data["scales"] = tuple(data["scales"])
        return cls(**data)


def resolve_task(task: str | Task) -> Task:
    """A Task object: ``task`` itself, or the registered task of that name."""
    if isinstance(task, Task):
        return task
    from crasp_compiler.tasks.registry import get_task

    return get_task(task)


def resolve_device(device: str) -> torch.device:
    """``"auto"``: CUDA when available, else the CPU; any other torch device string."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def build_model(config: TrainConfig, task: Task, max_positions: int = 512) -> nn.Module:
    """The untrained model the config describes for ``task``."""
    if isinstance(task, NumericTask):
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
        )
    )


def _optimizer(config: TrainConfig, model: nn.Module, param_filter: ParamFilter | None):
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param_filter is not None and not param_filter(name, param):
            param.requires_grad_(False)
            continue
        (decay if param.ndim >= 2 else no_decay).append(param)
    if not decay and not no_decay:
        raise CraspError("the parameter filter leaves nothing to train")
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=config.lr)
    warmup = max(config.warmup_steps, 0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup else 1.0
    )
    return optimizer, schedule


def _fit(
    config: TrainConfig,
    model: nn.Module,
    param_filter: ParamFilter | None,
    batch_loss: Callable[[], Tensor],
    check: Callable[[], tuple[float, bool]],
    name: str,
) -> dict:
    """The optimisation loop shared by both kinds of task: ``batch_loss`` draws a batch and
    returns its loss; ``check`` evaluates and says whether to stop."""
    optimizer, schedule = _optimizer(config, model, param_filter)
    trainable = [p for p in model.parameters() if p.requires_grad]
    model.train()
    loss_history, eval_history = [], []
    window, window_steps, step, stopped = 0.0, 0, 0, False
    start = time.perf_counter()
    bar = tqdm(total=config.steps, desc=name, disable=not config.progress, leave=False)
    while step < config.steps and not stopped:
        loss = batch_loss()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip is not None:
            nn.utils.clip_grad_norm_(trainable, config.grad_clip)
        optimizer.step()
        schedule.step()
        step += 1
        window = window + loss.detach()
        window_steps += 1
        bar.update(1)
        if step % config.eval_every == 0 or step == config.steps:
            mean_loss = float(window) / window_steps
            loss_history.append([step, mean_loss])
            window, window_steps = 0.0, 0
            value, stopped = check()
            model.train()
            eval_history.append([step, value])
            bar.set_postfix(loss=f"{mean_loss:.4g}", eval=f"{value:.4g}")
    bar.close()
    return {
        "steps": step,
        "early_stopped": stopped and step < config.steps,
        "wall_time_s": time.perf_counter() - start,
        "final_loss": loss_history[-1][1] if loss_history else None,
        "loss_history": loss_history,
        "eval_history": eval_history,
    }


def _train_sequence(
    config: TrainConfig,
    task: SequenceTask,
    device: torch.device,
    model: nn.Module | None,
    param_filter: ParamFilter | None,
) -> tuple[nn.Module, dict]:
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
        batch = encode(task, sample_examples(task, rng, train_lengths, config.batch_size))
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

    results = _fit(config, model, param_filter, batch_loss, check, task.name)
    start = time.perf_counter()
    results.update(
        evaluate_sequence(
            model,
            task,
            test_sets,
            device=device,
            batch_size=config.eval_batch_size,
            seed=config.test_seed,
            offsets=config.test_offsets,
            compiled=config.compare_compiled,
            backend=config.compiled_backend,
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
    model: nn.Module | None,
    param_filter: ParamFilter | None,
) -> tuple[nn.Module, dict]:
    n = config.numeric_n
    if not config.scales:
        raise CraspError("scales is empty: give at least one scale factor")
    test_sets = make_numeric_test_sets(task, n, config.scales, config.test_size, config.test_seed)
    torch.manual_seed(config.seed)
    if model is None:
        model = build_model(config, task)
    model.to(device)
    rng = np.random.default_rng(config.seed)
    first_scale, in_distribution = next(iter(test_sets.items()))

    def batch_loss() -> Tensor:
        inputs, targets = numeric_batch(task, rng, config.batch_size, n)
        predicted = model(torch.as_tensor(inputs, dtype=torch.float32, device=device))
        return F.mse_loss(predicted, torch.as_tensor(targets, dtype=torch.float32, device=device))

    def check() -> tuple[float, bool]:
        result = evaluate_numeric(
            model, task, {first_scale: in_distribution}, device=device, compiled=False
        )
        return result["metrics"][first_scale]["mse"], False

    results = _fit(config, model, param_filter, batch_loss, check, task.name)
    start = time.perf_counter()
    results.update(
        evaluate_numeric(
            model,
            task,
            test_sets,
            device=device,
            batch_size=config.eval_batch_size,
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
) -> dict:
    """Train, evaluate, write ``out_dir`` (see the module docstring) and return the results.

    ``model``: train this model (a :class:`SequenceModel` or :class:`NumericModel` of the
    task's shape, e.g. a compiled initialisation) instead of a fresh one; its
    ``max_positions`` must cover the test sets. ``param_filter(name, parameter)``: only the
    parameters it accepts are optimised, the others are frozen.
    """
    task = resolve_task(config.task)
    device = resolve_device(config.device)
    for name in ("steps", "batch_size", "eval_every", "test_size"):
        if getattr(config, name) < 1:
            raise CraspError(
                [Diagnostic(f"{name} must be at least 1", hint=f"got {getattr(config, name)}")]
            )
    if not isinstance(task, SequenceTask | NumericTask):
        raise CraspError(f"task {task.name!r} is neither a sequence nor a numeric task")
    model_type = SequenceModel if isinstance(task, SequenceTask) else NumericModel
    if model is not None and not isinstance(model, model_type):
        raise CraspError(f"task {task.name!r} trains a {model_type.__name__}")
    if isinstance(task, SequenceTask):
        if config.pe not in PES:
            raise CraspError(
                [Diagnostic(f"unknown positional encoding {config.pe!r}", hint=str(PES))]
            )
        model, results = _train_sequence(config, task, device, model, param_filter)
    else:
        model, results = _train_numeric(config, task, device, model, param_filter)
    results = {
        "task": task.name,
        "family": task.family,
        "kind": "numeric" if isinstance(task, NumericTask) else "sequence",
        "model_class": type(model).__name__,
        "config": config.to_dict(),
        "model_config": asdict(model.config),
        "device": str(device),
        "n_parameters": sum(p.numel() for p in model.parameters()),
        "n_trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
        **results,
    }
    if config.out_dir is not None:
        save(model, config, results, config.out_dir)
    return results


def save(model: nn.Module, config: TrainConfig, results: dict, out_dir: str | Path) -> None:
    """Write ``model.safetensors``, ``config.json`` and ``results.json`` to ``out_dir``."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(state, out / "model.safetensors")
    meta = {
        "train": config.to_dict(),
        "model_class": type(model).__name__,
        "model": asdict(model.config),
    }
    (out / "config.json").write_text(json.dumps(meta, indent=2) + "\n")
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")


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
    model = MODEL_CLASSES[name](CONFIG_CLASSES[name](**meta["model"]))
    model.load_state_dict(load_file(Path(out_dir) / "model.safetensors"))
    return model.to(device).eval()


def _read_meta(out_dir: str | Path) -> dict:
    path = Path(out_dir) / "config.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CraspError(
            [Diagnostic(f"cannot read {path}: {exc}", hint="a directory written by train()")]
        ) from None


__all__ = [
    "TrainConfig",
    "build_model",
    "load",
    "load_config",
    "resolve_device",
    "resolve_task",
    "save",
    "train",
]
