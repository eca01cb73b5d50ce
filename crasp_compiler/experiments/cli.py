"""The experiment commands of ``crasp`` (registered into it by :mod:`crasp_compiler.cli`):
``tasks``, ``train``, ``sweep``, ``finetune``, ``plot``, ``compare``. torch, tqdm and matplotlib are
imported only when a command runs."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click
import numpy as np

from crasp_compiler.console import need_torch, warnings_on_stderr
from crasp_compiler.errors import CraspError, Diagnostic

if TYPE_CHECKING:
    from crasp_compiler.experiments.tasks.base import Task
    from crasp_compiler.experiments.train.loop import TrainConfig


@click.command("tasks")
@click.option(
    "--family",
    type=click.Choice(["regular", "algorithmic", "numeric", "chomsky"]),
    help="Only the tasks of this family.",
)
def tasks_command(family: str | None) -> None:
    """List the registered tasks: name, family, C-RASP class, program file, description."""
    from crasp_compiler.experiments.tasks.registry import all_tasks

    rows = [("name", "family", "class", "program", "description")]
    rows += [
        (task.name, task.family, task.crasp_class, task.program or "-", _short(task.description))
        for task in all_tasks().values()
        if family is None or task.family == family
    ]
    click.echo(_table(rows))


def _short(text: str, width: int = 60) -> str:
    """The first line of ``text``, cut to ``width`` characters."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def _digits(text: str) -> bool:
    """Only ASCII digits (``"²".isdigit()`` is true, yet ``int("²")`` fails)."""
    return text.isascii() and text.isdigit()


def _parse_bins(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> list[tuple[int, int]] | None:
    """``"1-50,51-100"`` as ``[(1, 50), (51, 100)]``."""
    if value is None:
        return None
    bins = []
    for part in value.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not (sep and _digits(lo.strip()) and _digits(hi.strip())):
            raise click.BadParameter(f"{part.strip()!r} is not LO-HI", ctx, param)
        if int(lo) > int(hi):
            raise click.BadParameter(f"{part.strip()!r}: LO is above HI", ctx, param)
        bins.append((int(lo), int(hi)))
    return bins


def _parse_scales(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[float, ...] | None:
    """``"1,2.5,10"`` as ``(1, 2.5, 10)`` (integers stay integers: they name the results)."""
    if value is None:
        return None
    scales = []
    for part in value.split(","):
        try:
            number = float(part)
        except ValueError:
            raise click.BadParameter(f"{part.strip()!r} is not a number", ctx, param) from None
        if not number > 0 or not np.isfinite(number):
            raise click.BadParameter(f"{part.strip()}: scales must be positive", ctx, param)
        scales.append(int(number) if _digits(part.strip()) else number)
    return tuple(scales)


_SEQUENCE_ONLY = ("pe", "bins", "train_max", "model", "random_base", "max_positions")
_NUMERIC_ONLY = ("numeric_kind", "numeric_sampling", "n", "scales")


def _parse_range(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[int, int] | None:
    """``"1-50"`` as ``(1, 50)``."""
    bins = _parse_bins(ctx, param, value)
    if bins is None:
        return None
    if len(bins) != 1:
        raise click.BadParameter(f"{value!r} is not one LO-HI range", ctx, param)
    return bins[0]


def _parse_alphabet(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[str, ...] | None:
    """``"a,b,c"`` as ``("a", "b", "c")``."""
    if value is None:
        return None
    symbols = tuple(part.strip() for part in value.split(","))
    if not all(symbols):
        raise click.BadParameter(f"{value!r}: an empty symbol", ctx, param)
    return symbols


_PROGRAM_ONLY = ("alphabet", "lengths", "generator")  # C-RASP programs only


@click.command("train")
@click.argument("task", required=False)
@click.option(
    "--program",
    metavar="PROG.cr|PROG.pcoc",
    type=click.Path(dir_okay=False),
    help="Train on this program instead of a TASK; the compiled program is the reference. "
    "C-RASP (.cr, .crasp): the label at every position is the program's output on that "
    "prefix (reference interpreter). PCOC (.pcoc, one input and one output slot): a numeric "
    "task, the targets the interpreter's outputs. See the README, 'Trained vs compiled'.",
)
@click.option(
    "--alphabet",
    metavar="A,B,...",
    callback=_parse_alphabet,
    help="With --program: the alphabet (default: the program's declared or inferred one).",
)
@click.option(
    "--lengths",
    metavar="LO-HI",
    callback=_parse_range,
    help="With --program: the training range of LEN (default 1-50; the first default test bin).",
)
@click.option(
    "--generator",
    metavar="MODULE:FUNCTION",
    help="With a C-RASP --program: draw the strings with FUNCTION(rng, length) -> symbols "
    "(from an importable MODULE or a FILE.py) instead of the built-in sampler.",
)
@click.option(
    "--pe",
    default="ape",
    show_default=True,
    help="Positional encoding (sequence tasks): ape, nope, sin, random (sinusoidal at "
    "randomized positions), rope, alibi or relative (Transformer-XL).",
)
@click.option(
    "--random-base",
    type=click.Choice(["sin", "learned", "rope", "alibi", "relative"]),
    default="sin",
    show_default=True,
    help="With --pe random: the encoding that reads the randomized positions.",
)
@click.option(
    "--max-positions",
    type=click.IntRange(min=1),
    help="Sequence tasks: the positions an encoding can read (ape's table; random's range: "
    "default the longest test sequence, at least 2048 for random).",
)
@click.option(
    "--preset",
    type=click.Choice(["quick", "paper", "randomized-pe"]),
    default="quick",
    show_default=True,
    help="Settings a run starts from: quick (1000 steps, 200 test samples, minutes on a "
    "CPU), paper (30000 steps, 2000 test samples, an evaluation every 500 steps: hours on a "
    "CPU) or randomized-pe (the randomized-PE paper's Chomsky setting: 5 layers x 8 heads, "
    "dropout 0.1, batch 128, lr 3e-4, bins 1-40,41-500, 2M steps: set --steps); an option "
    "given on the command line overrides it.",
)
@click.option("--steps", type=click.IntRange(min=1), default=1_000, show_default=True)
@click.option(
    "--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Training seed."
)
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=1e-3, show_default=True)
@click.option("--d-model", type=click.IntRange(min=1), default=64, show_default=True)
@click.option(
    "--layers",
    type=click.IntRange(min=1),
    help="Layers (default: 2 for sequence tasks, ceil(log2 n) + 1 for numeric tasks).",
)
@click.option("--heads", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
@click.option(
    "--dropout", type=click.FloatRange(min=0, max=1, max_open=True), default=0.0, show_default=True
)
@click.option("--weight-decay", type=click.FloatRange(min=0), default=0.01, show_default=True)
@click.option(
    "--test-size",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="Test examples per length bin or value scale.",
)
@click.option(
    "--bins",
    "--test-bins",
    "bins",
    metavar="LO-HI,...",
    callback=_parse_bins,
    help='Length bins (sequence tasks), e.g. "1-50,51-100,101-150,151-500"; the first is '
    "the in-distribution bin (default: from the task's training range).",
)
@click.option(
    "--train-max",
    type=click.IntRange(min=0),
    help="Longest training LEN (sequence tasks; default: the task's, at most the end of "
    "the first bin).",
)
@click.option(
    "--eval-every",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="Steps between in-distribution evaluations (early stop at 100%).",
)
@click.option("--no-early-stop", is_flag=True, help="Train every step even at 100% accuracy.")
@click.option(
    "--select",
    type=click.Choice(["last", "best"]),
    default="last",
    show_default=True,
    help="The model scored at the end: after the last step, or at the evaluation with the "
    "best in-distribution score (the C-RASP paper's rule).",
)
@click.option(
    "--model",
    type=click.Choice(["transformer", "token_mlp"]),
    default="transformer",
    show_default=True,
    help="Sequence tasks: the transformer, or the C-RASP paper's random baseline token_mlp "
    "(a two-layer MLP over the current token's embedding: no attention, no positions).",
)
@click.option(
    "--device", default="auto", show_default=True, help="Torch device; auto: CUDA if available."
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    help="Output directory (default: runs/TASK-PE-seedS, PE random-BASE for a --random-base; "
    "numeric: runs/TASK-KIND-seedS).",
)
@click.option(
    "--numeric-kind",
    type=click.Choice(["positional", "standard"]),
    default="positional",
    show_default=True,
    help="Numeric tasks: positional attention or a standard transformer.",
)
@click.option(
    "--numeric-sampling",
    type=click.Choice(["interval", "uniform"]),
    default="interval",
    show_default=True,
    help="Numeric tasks: values uniform in a random sub-interval, test intervals outside "
    "the training range (the papers'), or every value uniform in the range.",
)
@click.option(
    "--n", type=click.IntRange(min=1), default=8, show_default=True, help="Numeric tasks: n."
)
@click.option(
    "--scales",
    metavar="C,...",
    callback=_parse_scales,
    help='Numeric tasks: the value scales tested (default "1,2,...,10").',
)
@click.option("--no-compiled", is_flag=True, help="Do not evaluate the compiled program.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.pass_context
def train_command(ctx: click.Context, /, task: str | None, **options: Any) -> None:
    """Train a transformer on TASK (or on the program of --program) and compare it with
    the compiled program.

    Sequence tasks: accuracy per length bin of the trained and the compiled model and
    their agreement; numeric tasks: MSE and close-accuracy per value scale (PCOC programs
    also the MSE between the trained and the compiled outputs). Writes
    model.safetensors, config.json and results.json to --out. The defaults take minutes
    on a CPU (--preset paper: hours); a run expected to train for 30 s or more says how
    long after its first steps (unless --quiet)."""
    from crasp_compiler.experiments.tasks.base import NumericTask
    from crasp_compiler.experiments.tasks.numeric import PcocNumericTask
    from crasp_compiler.experiments.tasks.registry import get_task

    program = options.pop("program")
    if program is not None and task is not None:
        raise click.UsageError("give a TASK or --program, not both")
    if program is None and task is None:
        raise click.UsageError("give a TASK (see `crasp tasks`) or --program PROG.cr")
    alphabet, lengths = options.pop("alphabet"), options.pop("lengths")
    generator = options.pop("generator")
    from crasp_compiler.languages import declaration_for_path

    declared = None if program is None else declaration_for_path(program)
    pcoc = declared is not None and declared.name == "pcoc"
    given = [
        "--" + name
        for name in _PROGRAM_ONLY
        if ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT
    ]
    if given and (program is None or pcoc):
        where = "--program" if program is None else "a C-RASP --program (.cr, .crasp)"
        raise click.UsageError(f"{', '.join(given)}: only with {where}")
    if (
        program is not None
        and not pcoc
        and ctx.get_parameter_source("train_max") != click.core.ParameterSource.DEFAULT
    ):
        raise click.UsageError("--train-max: with --program, give the range as --lengths LO-HI")
    if program is not None:
        from crasp_compiler.experiments.tasks.program import (
            ProgramTask,
            UserGenerator,
            load_program_task,
        )

        sampler = None if generator is None else UserGenerator(generator)
        found: Task = load_program_task(program, alphabet, lengths, sampler)
        if isinstance(found, ProgramTask):
            options["train_max"] = found.train_max
    else:
        assert task is not None
        found = get_task(task)
    numeric = isinstance(found, NumericTask)
    misplaced = [
        "--" + name.replace("_", "-")
        for name in (_SEQUENCE_ONLY if numeric else _NUMERIC_ONLY)
        if ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT
    ]
    if misplaced:
        kind = "sequence" if numeric else "numeric"
        raise click.UsageError(f"{', '.join(misplaced)}: only for {kind} tasks")
    need_torch()
    from crasp_compiler.experiments.train.loop import train
    from crasp_compiler.experiments.train.models import PES

    if options["model"] != "transformer" and not _given(ctx, "pe"):
        options["pe"] = "nope"  # the baseline reads no positions
    if _given(ctx, "random_base") and options["pe"] != "random":
        raise click.UsageError("--random-base: only with --pe random")
    if not numeric and options["pe"] not in PES:
        raise CraspError(
            [Diagnostic(f"unknown positional encoding {options['pe']!r}", hint=", ".join(PES))]
        )
    _check_device(options["device"])
    from crasp_compiler.experiments.train.loop import PRESETS

    preset = PRESETS[options.pop("preset")]
    config = dataclasses.replace(
        _train_config(found, options),
        **{
            field: value
            for field, value in preset.items()
            if not _given(ctx, field) and not (field == "train_max" and program is not None)
        },
    )
    if isinstance(found, PcocNumericTask):  # before training: a scale beyond the input bound
        found.check_scales(config.scales)
    try:
        results = train(config)
    except KeyboardInterrupt:
        _interrupted(cast(str, config.out_dir))  # _train_config always sets out_dir
    click.echo(_train_summary(results, generator))


def _interrupted(out_dir: str) -> None:
    """Ctrl-C during ``crasp train``: say where the run can resume; exit status 130."""
    from crasp_compiler.experiments.train.loop import CHECKPOINT

    if (Path(out_dir) / CHECKPOINT).exists():
        resume = f"the same command resumes from the checkpoint in {out_dir}"
    else:
        resume = "no checkpoint was written yet"
    click.echo(f"interrupted; {resume}", err=True)
    sys.exit(130)


def _check_device(device: str) -> None:
    """Refuse a device torch does not know or cannot compute on (meta, backends that are
    not built in, CUDA where there is none) before any training starts."""
    if device == "auto":
        return
    from crasp_compiler.runtime.torch_module import torch_device

    torch_device(device, "float32")


# TrainConfig fields set by a `crasp train` option of another name
_OPTION_OF = {"n_layers": "layers", "n_heads": "heads", "early_stop": "no_early_stop"}


def _given(ctx: click.Context, field: str) -> bool:
    """Whether the command line sets the TrainConfig ``field`` (so a preset leaves it)."""
    source = ctx.get_parameter_source(_OPTION_OF.get(field, field))
    return source not in (None, click.core.ParameterSource.DEFAULT)


def _train_config(task: Task, options: dict[str, Any]) -> TrainConfig:
    """The TrainConfig of a ``crasp train`` call: ``--out`` defaults to
    ``runs/TASK-PE-seedS`` (numeric tasks: the model kind for PE); with ``--bins`` and no
    ``--train-max``, training stops at the first bin's end (or the task's own, if lower)."""
    from crasp_compiler.experiments.tasks.base import NumericTask, SequenceTask
    from crasp_compiler.experiments.train.loop import TrainConfig

    numeric = isinstance(task, NumericTask)
    variant = options["numeric_kind"] if numeric else options["pe"]
    if variant == "random" and options["random_base"] != "sin":
        variant = f"random-{options['random_base']}"
    if options["model"] != "transformer":
        variant = options["model"]
    out = options["out"] or str(Path("runs") / f"{task.name}-{variant}-seed{options['seed']}")
    train_max = options["train_max"]
    if train_max is None and options["bins"] and isinstance(task, SequenceTask):
        train_max = min(task.train_max, options["bins"][0][1])
    extra = {"scales": options["scales"]} if options["scales"] else {}
    return TrainConfig(
        task=task if task.family == "program" else task.name,  # a program task is no name
        pe=options["pe"],
        random_base=options["random_base"],
        max_positions=options["max_positions"],
        steps=options["steps"],
        seed=options["seed"],
        lr=options["lr"],
        d_model=options["d_model"],
        n_layers=options["layers"],
        n_heads=options["heads"],
        batch_size=options["batch_size"],
        dropout=options["dropout"],
        weight_decay=options["weight_decay"],
        test_size=options["test_size"],
        bins=options["bins"],
        train_max=train_max,
        eval_every=options["eval_every"],
        early_stop=not options["no_early_stop"],
        select=options["select"],
        model=options["model"],
        device=options["device"],
        out_dir=out,
        numeric_kind=options["numeric_kind"],
        numeric_sampling=options["numeric_sampling"],
        numeric_n=options["n"],
        compare_compiled=not options["no_compiled"],
        progress=not options["quiet"],
        **extra,
    )


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _table(rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns, two spaces apart."""
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _train_summary(results: dict[str, Any], generator: str | None = None) -> str:
    """The ``crasp train`` report: the table per bin or scale, the run, the files
    (``generator``: the spec of the user's sampler of a program task, if any)."""
    config = results["config"]
    if results["kind"] == "sequence":
        compiled = results.get("compiled_accuracy") or {}
        agreement = results.get("agreement") or {}
        tokens = results.get("position_accuracy")
        table = _table(
            [
                ["bin", "trained", *(["per token"] if tokens else []), "compiled", "agreement"],
                *(
                    [
                        name,
                        _fmt(value),
                        *([_fmt(tokens.get(name))] if tokens else []),
                        _fmt(compiled.get(name)),
                        _fmt(agreement.get(name)),
                    ]
                    for name, value in results["accuracy"].items()
                ),
            ]
        )
        pe = config["pe"]
        if pe == "random" and config.get("random_base", "sin") != "sin":
            pe += f" ({config['random_base']} at the sampled positions)"
        head = f"{results['task']} ({results['family']}), pe {pe}, seed {config['seed']}"
        measure = "accuracy: fraction of test sequences exactly right"
        if tokens:
            measure += "; per token: fraction of scored output positions right"
        if results["family"] == "program":
            sampler = f"generator {generator}" if generator else _STEERED
            table, measure = _program_table(results), _PROGRAM_MEASURE.format(sampler=sampler)
    else:
        compiled = results.get("compiled_metrics") or {}
        program = "agreement" in results  # a PCOC program: also trained vs compiled
        agreement = results.get("agreement") or {}
        rows = [
            [
                "scale",
                "mse trained",
                "mse compiled",
                *(["agreement"] if program else []),
                "close trained",
                "close compiled",
            ]
        ]
        for scale, metrics in results["metrics"].items():
            other = compiled.get(scale, {})
            rows.append(
                [
                    scale,
                    _fmt(metrics["mse"], ".3g"),
                    _fmt(other.get("mse"), ".3g"),
                    *([_fmt(agreement.get(scale), ".3g")] if program else []),
                    _fmt(metrics["close_accuracy"]),
                    _fmt(other.get("close_accuracy")),
                ]
            )
        table = _table(rows)
        family = "PCOC program" if program else "numeric"
        head = (
            f"{results['task']} ({family}, n={results['n']}), {config['numeric_kind']} model, "
            f"seed {config['seed']}"
        )
        measure = "close: fraction of test lists with every entry within 0.05 + 0.05|y|"
        if program:
            measure = (
                "mse: against the interpreter's outputs; agreement: MSE between the trained "
                "and the compiled outputs\n" + measure
            )
    stop = "early stop at 100% in distribution" if results["early_stopped"] else "no early stop"
    if results.get("selected_step") is not None:
        stop += f"; scored at the best in-distribution evaluation, step {results['selected_step']}"
    if results.get("resumed_from") is not None:
        stop += f"; resumed from the checkpoint at step {results['resumed_from']}"
    lines = [
        head,
        table,
        measure,
        f"steps: {results['steps']} ({stop}); final training loss "
        f"{_fmt(results['final_loss'], '.4g')}",
        f"wall time: {results['wall_time_s']:.1f} s training, {results['eval_time_s']:.1f} s "
        f"final evaluation on {results['device']}; {results['n_parameters']} parameters",
    ]
    theory = results.get("theory")
    if theory:
        lines.append(
            f"theory ({theory['source']}): {theory['class']}; predicted length generalisation: "
            f"APE {theory['ape'] or 'not predicted'}, NoPE {theory['nope'] or 'not predicted'}"
        )
    if results.get("compiled_error"):
        lines.append(f"compiled program not evaluated: {results['compiled_error']}")
    if config.get("out_dir"):
        lines.append(f"files: model.safetensors, config.json, results.json in {config['out_dir']}")
    return "\n".join(lines)


_PROGRAM_MEASURE = (
    "trained, compiled: fraction of test sequences right at every position; agreement: "
    "trained = compiled at every position\n"
    "balanced: mean per-label recall over positions; positions: fraction of positions right\n"
    "labels: share of each label over all positions / at the last position (the sampler: "
    "{sampler})"
)
_STEERED = "half uniform, half steered toward acceptance"


def _program_table(results: dict[str, Any]) -> str:
    """The ``crasp train --program`` table: accuracies, agreement and label balance per bin."""
    compiled = results.get("compiled_accuracy") or {}
    agreement = results.get("agreement") or {}
    balance = results.get("label_balance") or {}
    rows = [["bin", "trained", "balanced", "positions", "compiled", "agreement", "labels"]]
    for name, value in results["accuracy"].items():
        shares = balance.get(name, {})
        labels = " / ".join(
            " ".join(f"{label}:{share:.0%}" for label, share in shares.get(part, {}).items())
            for part in ("positions", "last")
        )
        rows.append(
            [
                name,
                _fmt(value),
                _fmt(results["balanced_accuracy"].get(name)),
                _fmt(results["position_accuracy"].get(name)),
                _fmt(compiled.get(name)),
                _fmt(agreement.get(name)),
                labels,
            ]
        )
    return _table(rows)


@click.command("sweep")
@click.argument("grid", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--ray-address",
    metavar="ADDR",
    help="Run every run as a Ray task: auto, local or ray://host:port (Ray Client: "
    'pip install "ray[client]").',
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="Local worker processes (default: the grid file's workers).",
)
@click.option(
    "--bar/--no-bar",
    default=None,
    help="The progress bar on stderr (default: when stderr is a terminal; otherwise a "
    "progress line after every run).",
)
@click.option("--quiet", is_flag=True, help="No progress bar or lines: only the runs' lines.")
def sweep_command(
    grid: str, ray_address: str | None, workers: int | None, bar: bool | None, quiet: bool
) -> None:
    """Train every run of the GRID file not finished yet (the format: docs/grids.md).

    Prints one line per run: first those finished earlier, then each run as it ends
    (steps and accuracy per bin, or MSE per scale, and its time), with a progress bar of
    the whole sweep on stderr (runs done, failed and left, elapsed, estimated time left).
    Ctrl-C stops every run (exit status 130); the same command then resumes."""
    need_torch()
    from crasp_compiler.experiments.train.sweep import (
        SweepProgress,
        finished,
        load_grid,
        run_sweep,
        unreadable,
    )

    runs, settings = load_grid(grid)  # refuses unknown tasks and encodings before anything trains
    earlier = [(run, results) for run in runs if (results := finished(run)) is not None]
    for run in runs:  # a damaged file is not a finished run: retrained, or its record rewritten
        for line in unreadable(run):
            click.echo(f"warning: {line}", err=True)
    todo = len(runs) - len(earlier)
    count = workers or settings["workers"]
    where = f"Ray at {ray_address}" if ray_address else f"{count} worker{'s' * (count != 1)}"
    if not quiet:
        click.echo(
            f"{grid}: {len(runs)} runs, {len(earlier)} finished earlier, {todo} to train ({where})",
            err=True,
        )
    progress = SweepProgress([run.name for run in runs], todo, bar=bar, quiet=quiet)
    for run, results in earlier:
        progress.earlier(run, results)
    interrupted = False
    try:
        run_sweep(grid, ray_address=ray_address, workers=workers, on_finish=progress.finished)
    except KeyboardInterrupt:
        interrupted = True
        progress.catch_up(runs)  # runs that ended as the interrupt came
    finally:
        progress.close()
        done = sum(finished(run) is not None for run in runs)
        failed = f", {progress.failed} failed" if progress.failed else ""
        click.echo(f"{done} of {len(runs)} runs finished{failed}")
    if interrupted:
        click.echo("interrupted; the same command resumes the unfinished runs", err=True)
        sys.exit(130)


@click.command("finetune")
@click.argument("task")
@click.option(
    "--params",
    type=click.Choice(["all", "values"]),
    default="all",
    show_default=True,
    help="Weights trained: all, or the value maps W_V, W_O of every head.",
)
@click.option(
    "--optimizer", type=click.Choice(["adamw", "sgd"]), default="adamw", show_default=True
)
@click.option("--steps", type=click.IntRange(min=0), default=200, show_default=True)
@click.option("--lr", type=click.FloatRange(min=0), default=1e-4, show_default=True)
@click.option("--weight-decay", type=click.FloatRange(min=0), default=0.01, show_default=True)
@click.option("--n", type=click.IntRange(min=1), default=8, show_default=True, help="Machines.")
@click.option(
    "--mode",
    type=click.Choice(["softmax", "hard"]),
    default="softmax",
    show_default=True,
    help="The compiled model's attention.",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option(
    "--test-size",
    type=click.IntRange(min=1),
    default=256,
    show_default=True,
    help="Test lists per value scale.",
)
@click.option(
    "--scales",
    metavar="C,...",
    callback=_parse_scales,
    help='The value scales tested (default "1,2,...,10").',
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), help="Write the results as JSON here."
)
def finetune_command(
    task: str, output: str | None, scales: tuple[float, ...] | None, **options: Any
) -> None:
    """Fine-tune the compiled model of a numeric TASK on its own data and report whether
    it stays exact: the largest error per value scale before and after."""
    need_torch()
    from crasp_compiler.experiments.train.finetune import FinetuneConfig, finetune
    from crasp_compiler.files import writable_dir, write_text

    if output is not None:  # before the work, so a bad path loses none
        writable_dir(Path(output).parent)
    extra: dict[str, Any] = {"scales": [float(c) for c in scales]} if scales else {}
    results = finetune(FinetuneConfig(task=task, **options, **extra))
    config = results["config"]
    click.echo(
        f"{config['task']}, n={config['n']}, {config['mode']} model: {config['optimizer']} on "
        f"{config['params']} weights ({len(results['trainable'])} tensors), "
        f"{config['steps']} steps, lr {config['lr']:g}, weight decay {config['weight_decay']:g}"
    )
    rows = [["scale", "max error before", "max error after", "mse/c² before", "mse/c² after"]]
    rows += [
        [
            scale,
            _fmt(before["max_abs_error"], ".3g"),
            _fmt(results["after"][scale]["max_abs_error"], ".3g"),
            _fmt(before["mse_over_c2"], ".3g"),
            _fmt(results["after"][scale]["mse_over_c2"], ".3g"),
        ]
        for scale, before in results["before"].items()
    ]
    click.echo(_table(rows))
    click.echo(
        f"training loss {_fmt(results['loss_first'], '.3g')} -> "
        f"{_fmt(results['loss_last'], '.3g')}; largest weight change "
        f"{results['largest_weight_change']:.3g}"
    )
    verdict = "survived" if results["exact_after"] else "lost"
    if not results["exact_before"]:
        verdict = "not there to begin with"
    click.echo(f"exactness (max error <= {results['tolerance']:g} * c at every scale): {verdict}")
    if output is not None:
        write_text(output, json.dumps(results, indent=2) + "\n")
        click.echo(f"results: {output}")


@click.command("plot")
@click.argument("sources", nargs=-1, required=True, type=click.Path())
@click.option(
    "-o", "--output", required=True, type=click.Path(file_okay=False), help="Output directory."
)
def plot_command(sources: tuple[str, ...], output: str) -> None:
    """Plot the results of SOURCES (grid TOML files, run directories, or directories of run
    directories): accuracy per length bin for sequence tasks, MSE per value scale for
    numeric tasks, each against the compiled program (program runs: with the trained
    model's agreement with it)."""
    from crasp_compiler.experiments.train.plots import (
        load_results,
        plot_length_bins,
        plot_value_scales,
    )

    with warnings_on_stderr():  # e.g. a truncated results.json, skipped
        results = load_results(sources)
    if not results:
        raise CraspError("no complete results.json here", filename=", ".join(sources))
    paths = plot_length_bins(results, Path(output)) + plot_value_scales(results, Path(output))
    for path in paths:
        click.echo(str(path))


@click.command("compare")
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option(
    "-o", "--output", required=True, type=click.Path(file_okay=False), help="Output directory."
)
@click.option(
    "--program",
    type=click.Path(dir_okay=False),
    help="The program of a --program run that does not hold it (runs written before runs "
    "kept their program); checked against the run's digest.",
)
@click.option(
    "--alphabet", callback=_parse_alphabet, help="With --program: the alphabet it was trained on."
)
@click.option(
    "--fit",
    type=click.IntRange(min=8),
    default=256,
    show_default=True,
    help="Examples of the training lengths the probes are fitted on.",
)
@click.option(
    "--test",
    type=click.IntRange(min=1),
    default=128,
    show_default=True,
    help="Held-out examples per length bin.",
)
@click.option(
    "--pairs",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    help="Input pairs per interchange intervention.",
)
@click.option(
    "--longer",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="How many of the run's longer length bins to probe.",
)
@click.option(
    "--max-length",
    type=click.IntRange(min=1),
    default=150,
    show_default=True,
    help="The longest LEN probed.",
)
@click.option(
    "--against",
    type=click.Path(dir_okay=False),
    help="Read the run against this program instead of its own: another program of the "
    "same function (a hypothesis of how the model computes it), refused unless it gives "
    "the run's labels on every probe input.",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--no-figure", is_flag=True, help="Write the JSON record only.")
def compare_command(
    run_dir: str,
    output: str,
    program: str | None,
    alphabet: tuple[str, ...] | None,
    fit: int,
    test: int,
    pairs: int,
    longer: int,
    max_length: int,
    against: str | None,
    seed: int,
    no_figure: bool,
) -> None:
    """Read the trained model of RUN_DIR (a `crasp train` run of a task with a C-RASP
    program, or of --program) against its compiled program: where each program
    variable lives (linear probes per residual stage, against the same network before
    training and shuffled targets), which heads match the compiled heads, and interchange
    interventions along each variable's direction. Writes compare.json and compare.png
    to --output."""
    need_torch()
    from crasp_compiler.experiments.compare import Settings, compare, summary, write

    settings = Settings(
        fit=fit, test=test, pairs=pairs, longer=longer, max_length=max_length, seed=seed
    )
    with warnings_on_stderr():
        record = compare(run_dir, settings, program, alphabet, against)
    paths = write(record, output, figure=not no_figure)
    click.echo(summary(record))
    for path in paths:
        click.echo(str(path))


COMMANDS = [
    tasks_command,
    train_command,
    sweep_command,
    finetune_command,
    plot_command,
    compare_command,
]
