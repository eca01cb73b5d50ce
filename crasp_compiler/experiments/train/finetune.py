"""Compiled weights as a starting point: fine-tune a compiled model on its own task and
measure whether exactness survives.

The compiled PCOC model of a numeric task (softmax positional attention, so every weight
has a gradient) becomes a trainable torch module of exactly the compiled shape. It is
trained on the task's data with MSE, updating either every weight (``params="all"``) or
only the value maps ``W_V``, ``W_O`` of the heads (``params="values"``, the positional
paper's V-only fine-tuning), and evaluated before and after at every value scale c:

    MSE_c / c²   (the squared error normalised by the scale, as the paper reports it)
    max_c        (the largest absolute error over the test set)

``exact_before`` / ``exact_after`` say whether the largest error at every scale is within
the compiled model's stated tolerance times c (the compiled model's error grows with the
values it carries).

``bound`` re-bounds the program before compiling it (:func:`rebound_program`): the task
programs declare ``|x| ≤ 1e9`` and use ±1e9 as the defaults that must dominate every
value (big-M constants, which make the loss very sharp around the compiled weights). A
re-bounded model is used only when it is exact on the test sets before fine-tuning; the
results record the bound used.

:func:`finetune_runs` runs many configurations into one JSON file of small records,
resumably (see there).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from crasp_compiler.errors import CraspError
from crasp_compiler.experiments.tasks.base import NumericTask, pcoc_language
from crasp_compiler.experiments.tasks.numeric import PcocNumericTask
from crasp_compiler.experiments.tasks.registry import get_task
from crasp_compiler.experiments.train.provenance import provenance
from crasp_compiler.files import write_text
from crasp_compiler.model.model import Model

if TYPE_CHECKING:
    import torch

    from crasp_compiler.runtime.torch_module import TorchTransformer

PARAMS = ("all", "values")
OPTIMIZERS = ("adamw", "sgd")


# fine-tuning draws values uniformly in [−2c, 2c], in training at train_scale c as at
# test (the papers' interval scheme rejects in-range intervals for c > 1, a test notion)
UNIFORM = "uniform"


@dataclass
class FinetuneConfig:
    task: str = "num_cumsum"
    n: int = 8
    mode: str = "softmax"  # the compiled model's attention
    params: str = "all"  # "all" or "values" (W_V and W_O of every head)
    optimizer: str = "adamw"
    steps: int = 200
    lr: float = 1e-4
    weight_decay: float = 0.01
    batch_size: int = 64
    train_scale: float = 1.0  # training values uniform in [−2c, 2c] for this c
    scales: list[float] = field(default_factory=lambda: [float(c) for c in range(1, 11)])
    test_size: int = 256
    seed: int = 0
    bound: float | None = None  # the program's declared bound B (None: its own)


def rebound_program(program: Any, bound: float) -> Any:
    """``program`` (PCOC) with its declared bound B replaced by ``bound``: every number
    literal equal to B (the slots' bounds, and the defaults and initial values ±B that
    must dominate every value, as in the task programs) becomes ``bound``; the rewritten
    text is parsed and checked again (:meth:`~crasp_compiler.languages.registry.Language.
    rebound`). Literals equal to B are taken to mean the bound."""
    return pcoc_language().rebound(program, bound)


def _forward(
    module: TorchTransformer, model: Model, inputs: np.ndarray, output: int
) -> torch.Tensor:
    """The module (of the compiled ``model``) output slot at the n machine positions, for
    inputs (B, n)."""
    tokens, _ = pcoc_language().model_inputs(model, list(inputs))
    ids, lengths = module.encode(tokens)
    values = module.encode_values(list(inputs), lengths)
    out: torch.Tensor = module(ids, lengths, values)[:, 1:, output]
    return out


def _evaluate(
    module: TorchTransformer,
    model: Model,
    task: NumericTask,
    tests: dict[float, np.ndarray],
    output: int,
) -> dict[str, Any]:
    """MSE/c² and the largest absolute error at every test scale c."""
    import torch

    out = {}
    with torch.no_grad():
        for scale, inputs in tests.items():
            got = _forward(module, model, inputs, output).numpy()
            err = got - task.target(inputs)
            out[str(scale)] = {
                "mse_over_c2": float(np.mean(err**2) / scale**2),
                "max_abs_error": float(np.abs(err).max()),
            }
    return out


def _largest(values: Sequence[float]) -> float:
    """The largest of ``values`` (0 for none), NaN if any is NaN (``max`` would depend on
    the order)."""
    return math.nan if any(math.isnan(v) for v in values) else max(values, default=0.0)


def worst_error(scores: dict[str, Any]) -> float:
    """The largest ``max_abs_error`` over the scales of ``scores`` (NaN if any is NaN)."""
    return _largest([s["max_abs_error"] for s in scores.values()])


def _exact(scores: dict[str, Any], tolerance: float) -> bool:
    """Whether the largest error at every scale c is within ``tolerance`` · max(1, c)."""
    return all(s["max_abs_error"] <= tolerance * max(1.0, float(c)) for c, s in scores.items())


def finetune(config: FinetuneConfig) -> dict[str, Any]:
    """Fine-tune the compiled model of ``config.task`` and return the results (JSON-able)."""
    import torch

    from crasp_compiler.runtime.torch_module import TorchTransformer

    task = get_task(config.task)
    if not isinstance(task, PcocNumericTask):
        raise CraspError(f"task {config.task!r} is not a numeric task with a PCOC program")
    if config.params not in PARAMS:
        raise CraspError(f"params must be one of {PARAMS}, not {config.params!r}")
    if config.optimizer not in OPTIMIZERS:
        raise CraspError(f"optimizer must be one of {OPTIMIZERS}, not {config.optimizer!r}")
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    language = pcoc_language()
    program = task.pcoc_program()
    if config.bound is None:
        bound = language.input_bounds(program)[program.inputs[0]]
        model = task.compiled_model(config.n, config.mode)
    else:
        bound = float(config.bound)
        largest = task.value_range * max([*config.scales, config.train_scale])
        if bound < largest:
            raise CraspError(
                f"bound {bound:g} is smaller than the largest value drawn ({largest:g}: "
                f"values in [-{task.value_range:g}c, {task.value_range:g}c] up to "
                f"c = {largest / task.value_range:g})"
            )
        program = rebound_program(program, bound)
        model = language.compile(program, n=config.n, mode=config.mode)
    if len(model.inputs) != 1:
        raise CraspError(f"task {config.task!r}: expected one numeric input channel")
    output = [o.name for o in model.outputs].index(task.output)
    tolerance = float(model.options.get("tolerance", 0.0))
    module = TorchTransformer(model)
    module.train()
    names = []
    for name, parameter in module.named_parameters():
        chosen = config.params == "all" or name.rsplit(".", 1)[-1] in ("w_v", "w_o")
        keep = chosen and parameter.numel() > 0  # n = 1 has empty (0-wide) position maps
        parameter.requires_grad_(keep)
        names += [name] if keep else []
    trainable = [p for p in module.parameters() if p.requires_grad]
    if not trainable:
        raise CraspError(
            f"nothing to train: the compiled model of {config.task} at n={config.n} has no "
            f"attention, so no value maps (params {config.params!r})"
        )
    opt: torch.optim.Optimizer
    if config.optimizer == "adamw":
        opt = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=config.weight_decay)
    else:
        opt = torch.optim.SGD(trainable, lr=config.lr, weight_decay=config.weight_decay)

    tests = {
        c: np.stack(
            [task.sample(rng, config.n, c, UNIFORM).inputs for _ in range(config.test_size)]
        )
        for c in config.scales
    }
    if config.bound is not None:
        for c, inputs in tests.items():  # every slot within the new bound
            try:
                language.interpret(program, list(inputs), n=config.n, check_promises=True)
            except CraspError as err:
                raise CraspError(
                    f"bound {bound:g} is too small for {config.task} at c = {c:g}: {err}"
                ) from None
    before = _evaluate(module, model, task, tests, output)
    if config.bound is not None and not _exact(before, tolerance):
        raise CraspError(
            f"the model of {config.task} compiled with bound {bound:g} is not exact on the "
            f"test sets before fine-tuning (largest error {worst_error(before):.3g}, "
            f"tolerance {tolerance:g} x c)"
        )
    start_weights = {n: p.detach().clone() for n, p in module.named_parameters()}
    start = time.perf_counter()
    losses = []
    for _ in range(config.steps):
        inputs = np.stack(
            [
                task.sample(rng, config.n, config.train_scale, UNIFORM).inputs
                for _ in range(config.batch_size)
            ]
        )
        target = torch.tensor(task.target(inputs))
        loss = torch.mean((_forward(module, model, inputs, output) - target) ** 2)
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        losses.append(float(loss.detach()))
    after = _evaluate(module, model, task, tests, output)
    moved = _largest(
        [
            float((p.detach() - start_weights[n]).abs().max())
            for n, p in module.named_parameters()
            if p.numel()
        ]
    )
    return {
        "config": asdict(config),
        "bound": bound,
        "trainable": names,
        "tolerance": tolerance,
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "largest_weight_change": moved,
        "before": before,
        "after": after,
        "exact_before": _exact(before, tolerance),
        "exact_after": _exact(after, tolerance),
        "seconds": time.perf_counter() - start,
        "provenance": provenance("cpu", str(trainable[0].dtype).removeprefix("torch.")),
    }


# ------------------------------------------------------------------ many runs, one file

NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _encode(value: Any) -> Any:
    """``value`` with every non-finite float replaced by "nan", "inf" or "-inf"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    """The inverse of :func:`_encode`: the strings "nan", "inf", "-inf" become floats."""
    if isinstance(value, str):
        return NON_FINITE.get(value, value)
    if isinstance(value, dict):
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def dump_records(records: list[dict[str, Any]]) -> str:
    """``records`` as strict JSON (non-finite floats as the strings "nan", "inf", "-inf"),
    one record per line."""
    lines = [json.dumps(_encode(r), allow_nan=False) for r in records]
    return "[\n" + ",\n".join(lines) + "\n]\n"


def load_records(path: Path) -> list[dict[str, Any]]:
    """The records of a file written by :func:`dump_records` ([] if there is none)."""
    if not path.exists():
        return []
    try:
        records = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise CraspError(f"cannot read fine-tuning records: {err}", filename=str(path)) from None
    if not isinstance(records, list):
        raise CraspError("fine-tuning records must be a JSON list", filename=str(path))
    return [_decode(r) for r in records]


def record_key(config: dict[str, Any]) -> str:
    """The key of a run: its configuration as canonical JSON."""
    return json.dumps(_encode(config), sort_keys=True)


def summary(result: dict[str, Any], cpu_seconds: float) -> dict[str, Any]:
    """The small record of one :func:`finetune` result: the configuration, the bound and
    tolerance, exactness, the worst error over the scales before and after, the errors
    per scale after, the largest weight change, the first and last loss, the training
    seconds (wall), the whole run's CPU seconds and the run's provenance."""
    keys = ("config", "bound", "tolerance", "exact_before", "exact_after")
    return {
        **{k: result[k] for k in keys},
        "worst_error_before": worst_error(result["before"]),
        "worst_error_after": worst_error(result["after"]),
        "after": result["after"],
        **{k: result[k] for k in ("largest_weight_change", "loss_first", "loss_last")},
        "seconds": result["seconds"],
        "cpu_seconds": cpu_seconds,
        "provenance": result["provenance"],
    }


def finetune_runs(
    configs: Sequence[FinetuneConfig],
    path: Path,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Fine-tune every configuration whose record is not yet in ``path`` and return all
    records. Each new record (:func:`summary`) is appended and the file rewritten
    atomically at once, so an interrupted run loses only the run in progress and a rerun
    resumes; ``progress`` is called with each new record."""
    records = load_records(path)
    done = {record_key(r["config"]) for r in records}
    for config in configs:
        if record_key(asdict(config)) in done:
            continue
        start = time.process_time()
        result = finetune(config)
        records.append(summary(result, time.process_time() - start))
        done.add(record_key(result["config"]))
        write_text(path, dump_records(records))
        if progress is not None:
            progress(records[-1])
    return records
