"""The ``crasp`` command: a thin view over the Python API (:mod:`crasp_compiler.api`).

Every program and model command works through the language registry
(:mod:`crasp_compiler.languages`): the file's suffix (or the model's recorded language)
picks the language, and the options each language declares become flags. The
experiment commands (``tasks``, ``train``, ``sweep``, ``finetune``, ``plot``) live in
:mod:`crasp_compiler.experiments.cli`, imported only when one of them runs or the
commands are listed. A command imports only what it runs: its language, and scipy,
torch or matplotlib only where it needs them.

Exit status: 0 on success, 1 on a user error (message on stderr), 2 on misuse.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import click

from crasp_compiler import api
from crasp_compiler.console import need_torch, warnings_on_stderr
from crasp_compiler.errors import CraspError
from crasp_compiler.export import EXPORTERS
from crasp_compiler.languages import (
    Declaration,
    Item,
    Language,
    Option,
    Outputs,
    declarations,
    language_for_path,
)
from crasp_compiler.model import Model, save_model

# a command function, as click's decorators take and return it
_F = TypeVar("_F", bound=Callable[..., Any])


class _Command(click.Group):
    """Turns :class:`CraspError` into a message on stderr and exit status 1; finds the
    experiment commands in :mod:`crasp_compiler.experiments.cli` when asked for them."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*self.commands, *_experiment_commands()])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self.commands.get(cmd_name) or _experiment_commands().get(cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CraspError as err:
            click.echo(err.format(), err=True)
            ctx.exit(1)
        except BrokenPipeError:
            sys.stderr.close()
            ctx.exit(0)
        except MemoryError:  # a last resort: commands estimate their memory first
            click.echo(
                "crasp: error: out of memory (the work did not fit in this machine's memory; "
                "try a shorter input, a smaller n, or a machine with more memory)",
                err=True,
            )
            ctx.exit(1)


# ------------------------------------------------------------------ help, from the registry


def _titles() -> str:
    """The registered languages' titles: ``C-RASP and PCOC``."""
    titles = [language.title for language in declarations()]
    return " and ".join([", ".join(titles[:-1]), titles[-1]] if len(titles) > 1 else titles)


def _help(first: str, *paragraphs: str) -> str:
    """A command's help: its first line, then every paragraph that says something."""
    return "\n\n".join([first, *(p for p in paragraphs if p)])


def _reading(language: Declaration, lead: str) -> str:
    """``lead`` and what a language's INPUT is and what is printed per input ("" when
    the language says neither)."""
    text = " ".join(t for t in (language.input_help, language.output_help) if t)
    return f"{lead}: {text}" if text else ""


def _needs(language: Declaration, stage: str) -> str:
    """`` (needs --n)``: the flags a language requires at ``stage``."""
    flags = [option.flag for option in language.options if stage in option.required]
    return f" (needs {', '.join(flags)})" if flags else ""


@click.group(
    cls=_Command,
    context_settings={"help_option_names": ["-h", "--help"]},
    help=f"Compile {_titles()} programs into transformers, and run them.",
)
@click.version_option(package_name="crasp-compiler")
def main() -> None:
    """The ``crasp`` command group (its help names the registered languages)."""


def _experiment_commands() -> dict[str, click.Command]:
    from crasp_compiler.experiments.cli import COMMANDS

    return {command.name: command for command in COMMANDS if command.name}


# ------------------------------------------------------------------ language options


def _click_type(
    option: Option,
) -> click.Choice[str] | click.IntRange | click.FloatRange | type[str]:
    if option.kind == "choice":
        return click.Choice(list(option.choices))
    if option.kind == "int":
        return click.IntRange(min=None if option.minimum is None else int(option.minimum))
    if option.kind == "float":
        return click.FloatRange(min=option.minimum, min_open=option.open_minimum)
    return str


def _language_options(stage: str) -> Callable[[_F], _F]:
    """Every registered language's options for ``stage`` (and its ``load`` options) as
    flags; which language takes which is checked by :func:`_language_for`."""

    def decorate(f: _F) -> _F:
        seen: dict[str, Option] = {}
        for language in declarations():
            for option in language.options:
                if option.name not in seen and (stage in option.stages or "load" in option.stages):
                    seen[option.name] = option
        for option in reversed(list(seen.values())):
            f = click.option(
                option.flag,
                option.name,
                type=_click_type(option),
                metavar=option.metavar,
                help=option.help,
            )(f)
        return f

    return decorate


def _language_for(
    path: str, stage: str, options: dict[str, Any]
) -> tuple[Language, dict[str, Any]]:
    """The language of the program at ``path`` and the options it takes at ``stage``
    (UsageError for an option only another language takes, or a missing one)."""
    language = language_for_path(path)
    takes = {o.name: o for o in language.options if stage in o.stages or "load" in o.stages}
    misplaced = [name for name, value in options.items() if value is not None and name not in takes]
    if misplaced:
        owners = [
            lang for lang in declarations() if any(o.name == misplaced[0] for o in lang.options)
        ]
        flags = ", ".join("--" + name.replace("_", "-") for name in misplaced)
        where = " or ".join(f"{o.title} programs ({', '.join(o.suffixes)})" for o in owners)
        raise click.UsageError(f"{flags}: only for {where}")
    for option in takes.values():
        if stage in option.required and options.get(option.name) is None:
            raise click.UsageError(
                f"a {language.title} program needs {option.flag} N: {option.help.lower()}"
            )
    return language, {name: value for name, value in options.items() if value is not None}


# ------------------------------------------------------------------ inputs, one at a time


def _batch(
    items: Iterable[Item],
    evaluate: Callable[[Any, str], str | None],
    echo: bool,
    invalid: str,
) -> None:
    """Evaluate every input with ``evaluate(value, where)``, which prints any tables and
    returns the verdict (or None). An input read from stdin or a file that cannot be
    evaluated (a token outside the alphabet, bad UTF-8, a value outside its bound) is
    reported on stderr, prints nothing (``invalid="skip"``) or ``False``
    (``invalid="false"``) on stdout, and the others go on; the command then exits 1.
    ``echo`` puts the input and a tab before each verdict (``ε`` for the empty string)."""
    failed = 0
    for item in items:
        try:
            if isinstance(item.value, CraspError):
                raise item.value
            verdict = evaluate(item.value, item.where)
        except CraspError as err:
            if not item.line:
                raise
            err.filename = item.where
            click.echo(err.format(), err=True)
            failed += 1
            verdict = "False" if invalid == "false" else ("invalid" if echo else None)
        if verdict is not None:
            click.echo(f"{item.text}\t{verdict}" if echo else verdict)
    if failed:
        raise CraspError(
            f"{failed} input line(s) could not be evaluated (see above)", filename="<stdin>"
        )


def _beyond_option(help: str) -> Callable[[_F], _F]:
    """``--beyond-guarantee error|warn``: inputs the guarantee does not cover."""
    return click.option(
        "--beyond-guarantee",
        type=click.Choice(["error", "warn"]),
        default="error",
        show_default=True,
        help=help,
    )


def _batch_options(f: _F) -> _F:
    f = click.option(
        "--invalid",
        type=click.Choice(["skip", "false"]),
        default="skip",
        show_default=True,
        help="A stdin line that cannot be evaluated (token outside the alphabet): print "
        "nothing for it, or False. Either way the error goes to stderr, the other lines are "
        "evaluated, and the exit status is 1.",
    )(f)
    return click.option(
        "--echo", is_flag=True, help="Print each input and a tab before its verdict."
    )(f)


def _show_outputs(language: Language, result: Outputs) -> None:
    rows = [(name, values[0]) for name, values in result.values.items()]
    click.echo(language.table(result.labels[0], rows))


@main.command(
    "interpret",
    help=_help(
        "Run PROGRAM with the reference interpreter on INPUT (or one input per stdin line).",
        *(
            _reading(language, language.title + _needs(language, "interpret"))
            for language in declarations()
        ),
    ),
)
@click.argument("program", type=click.Path(exists=True, dir_okay=False))
@click.argument("input", required=False)
@click.option("--trace", is_flag=True, help="Print every definition at every position.")
@click.option("--outputs", is_flag=True, help="Print every named output at every position.")
@_language_options("interpret")
@_batch_options
@_beyond_option("PCOC: what to do with inputs outside their declared bounds.")
def interpret_command(
    program: str,
    input: str | None,
    trace: bool,
    outputs: bool,
    echo: bool,
    invalid: str,
    beyond_guarantee: str,
    **options: Any,
) -> None:
    """Run PROGRAM with the reference interpreter on INPUT (or one input per stdin line);
    what INPUT is and what is printed, per language: the declarations' help texts."""
    language, options = _language_for(program, "interpret", options)
    prog = language.load(program, **options)
    for warning in language.warnings(prog):
        click.echo(warning, err=True)
    if not (trace or outputs) and not language.has_verdict(prog):
        raise CraspError(
            "the program has no acceptance output; use --outputs or --trace", filename=program
        )
    options["on_beyond"] = beyond_guarantee

    def evaluate(value: Any, where: str) -> str | None:
        with warnings_on_stderr():
            if trace:
                click.echo("\n".join(language.trace(prog, value, **options)))
            result = language.interpret(prog, [value], **options)
        if outputs:
            _show_outputs(language, result)
        return language.verdict(prog, result, 0)

    _batch(language.read_inputs(input, prog, **options), evaluate, echo, invalid)


def _is_model_path(path: str) -> bool:
    """An export directory, or a file that starts like a zip archive (``.npz``)."""
    if Path(path).is_dir() or Path(path).name == "config.json":
        return True
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"PK\x03\x04"
    except OSError:
        return False


@main.command("check")
@click.argument("file", metavar="PROGRAM|MODEL", type=click.Path(exists=True))
@_language_options("check")
@click.option("--device", default="cpu", show_default=True, help="Torch device (MODEL only).")
@click.option(
    "--samples",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="Random inputs to compare (MODEL only).",
)
@click.option(
    "--max-len",
    type=click.IntRange(min=0),
    default=64,
    show_default=True,
    help="Longest sampled input (MODEL only; C-RASP).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed (MODEL only).")
@click.option("--float32", is_flag=True, help="Run numpy and torch in float32 (MODEL only).")
@click.pass_context
def check_command(
    ctx: click.Context,
    /,
    file: str,
    device: str,
    samples: int,
    max_len: int,
    seed: int,
    float32: bool,
    **options: Any,
) -> None:
    """Validate a PROGRAM and summarise it; or verify a compiled MODEL (.npz or export
    directory): interpreter, numpy and torch must agree on random inputs, per output and
    length bucket. Exits 1 on any disagreement."""
    model_only = ("device", "samples", "max_len", "seed", "float32")
    given = [
        name
        for name in model_only
        if ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT
    ]
    if _is_model_path(file):
        program_options = [name for name, value in options.items() if value is not None]
        if program_options:
            flags = ", ".join("--" + name.replace("_", "-") for name in program_options)
            raise click.UsageError(f"{flags} applies to programs, not models")
        _check_model(file, device, samples, max_len, seed, float32)
        return
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise click.UsageError(f"{flags}: only for models (.npz or export directory)")
    language, options = _language_for(file, "check", options)
    prog = language.load(file, **options)
    for warning in language.warnings(prog):
        click.echo(warning, err=True)
    summary = language.summary(prog, **options)  # compiles it: ok only if compile would be
    click.echo(f"{file}: ok")
    click.echo("\n".join(summary))


def _check_model(
    path: str, device: str, samples: int, max_len: int, seed: int, float32: bool
) -> None:
    model = api.load_model(path)  # a broken model file is reported as such, torch or not
    need_torch()
    from crasp_compiler.verify import check_model, span_text

    try:
        dtype = "float32" if float32 else "float64"
        report = check_model(model, samples, max_len, device, dtype, seed)
    except CraspError as err:
        if err.source is None:  # a refusal about the model as a whole names the model
            err.filename = path
        raise
    click.echo(
        f"{path}: {report.samples} inputs of length <= {report.longest} on {report.device} "
        f"({report.dtype}); runtimes: {', '.join(report.runtimes)}"
    )
    click.echo("positions where runtimes differ:")
    click.echo(report.table())
    click.echo(f"largest |numpy - torch| raw output difference: {report.max_raw_difference:.3g}")
    if report.disagreements:
        for tally in report.tallies.values():
            if tally.example:
                click.echo(f"first disagreement: {tally.example}", err=True)
                break
        raise CraspError(f"{report.disagreements} disagreeing positions", filename=path)
    if report.unsampled:
        count = len(report.buckets)
        raise CraspError(
            f"not sampled: lengths {', '.join(map(span_text, report.unsampled))} (--samples "
            f"{samples} reaches {samples} of the {count} length buckets up to --max-len "
            f"{max_len}; use --samples {count} or more)",
            filename=path,
        )
    if report.skipped:
        click.echo(f"{report.skipped} sampled input(s) skipped: the interpreter refuses them")
    click.echo("all runtimes agree")


@main.command(
    "compile",
    help=_help(
        "Compile PROGRAM into transformer weights written to OUTPUT.",
        *(
            f"A {language.title} program ({', '.join(language.suffixes)}) {language.compile_help}"
            for language in declarations()
            if language.compile_help
        ),
    ),
)
@click.argument("program", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False), help="Model file (.npz)."
)
@click.option(
    "--mode",
    type=click.Choice([mode for language in declarations() for mode in language.modes]),
    help=" ".join(
        f"{language.title} (default {language.modes[0]}): {language.mode_help}"
        for language in declarations()
        if language.mode_help
    ),
)
@click.option(
    "--no-reuse",
    is_flag=True,
    help="Give every variable its own residual dimension (one label per dimension at every "
    "stage, for interpretability work; by default a dead variable's dimension is reused "
    "when that makes the model smaller).",
)
@_language_options("compile")
def compile_command(
    program: str, output: str, mode: str | None, no_reuse: bool, **options: Any
) -> None:
    """Compile PROGRAM into transformer weights written to OUTPUT (what each language's
    programs compile to: the declarations' help texts)."""
    language, options = _language_for(program, "compile", options)
    if mode is not None and mode not in language.modes:
        owner = next(lang for lang in declarations() if mode in lang.modes)
        raise click.UsageError(
            f"--mode {mode} is for {owner.title} programs; {language.title} modes are "
            f"{', '.join(language.modes)}"
        )
    problem = language.misuse("compile", {**options, "mode": mode})
    if problem:
        raise click.UsageError(problem)
    prog = language.load(program, **options)
    model = language.compile(prog, mode=mode, reuse=False if no_reuse else None, **options)
    save_model(model, output)
    click.echo(
        f"{output}: {language.headline(model)}, width {model.width:,}, "
        f"{_parameters(model)}; {model.guarantee.text}"
    )


@main.command(
    "run",
    help=_help(
        "Run a compiled MODEL on INPUT (or one input per stdin line), like `crasp interpret`.",
        *(
            _reading(language, f"A model compiled from {language.title}")
            for language in declarations()
        ),
    ),
)
@click.argument("model_file", metavar="MODEL", type=click.Path(exists=True))
@click.argument("input", required=False)
@click.option("--outputs", is_flag=True, help="Print every named output at every position.")
@click.option("--trace", is_flag=True, help="Print the residual stream after every sublayer.")
@click.option("--float32", is_flag=True, help="Compute in float32 instead of float64.")
@_beyond_option(
    "What to do with inputs the model's guarantee does not cover (longer than it covers "
    "in this float type; PCOC: values outside their declared bounds, send destinations "
    "that are not integers or collide)."
)
@_batch_options
def run_command(
    model_file: str,
    input: str | None,
    outputs: bool,
    trace: bool,
    float32: bool,
    beyond_guarantee: str,
    echo: bool,
    invalid: str,
) -> None:
    """Run a compiled MODEL on INPUT (or one input per stdin line), like `crasp interpret`
    (what INPUT is and what is printed, per language: the declarations' help texts)."""
    model = api.load_model(model_file, check_source=False)  # runs weights: no parser
    language = api.model_language(model)
    if not (trace or outputs) and not language.has_verdict(model):
        raise CraspError(
            "the model has no acceptance output; use --outputs or --trace", filename=model_file
        )
    dtype = "float32" if float32 else "float64"

    def evaluate(value: Any, where: str) -> str | None:
        with warnings_on_stderr(where):
            result = api.run(
                model, [value], dtype=dtype, on_beyond=beyond_guarantee, residuals=trace
            )
        if trace:
            assert result.residuals is not None
            labels = language.position_labels(model, value)
            stage_of = {"embed": 0}
            for number in range(1, len(model.layers) + 1):
                stage_of[f"layer {number} attention"] = 2 * number - 1
                stage_of[f"layer {number} mlp"] = 2 * number
            for label, x in result.residuals:
                click.echo(f"== {label}")
                names = model.labels_at(stage_of[label])
                rows = [(name, list(x[0, :, k])) for k, name in enumerate(names)]
                click.echo(language.table(labels, rows))
        if outputs:
            _show_outputs(language, result)
        return language.verdict(model, result, 0)

    _batch(language.read_inputs(input, model), evaluate, echo, invalid)


@main.command("info")
@click.argument("model_file", metavar="MODEL", type=click.Path(exists=True))
@click.option(
    "--layout", is_flag=True, help="Print the full residual layout, one line a dimension."
)
def info_command(model_file: str, layout: bool) -> None:
    """Describe a compiled MODEL: layers, heads, widths, parameters, guarantee, and which
    definitions live where (a summary of a few dozen lines at any width; --layout lists
    every residual dimension)."""
    from crasp_compiler.show.data import definitions, layout_groups, occupant_sites

    model = api.load_model(model_file)
    click.echo(f"{model_file}")
    for line in api.model_language(model).describe_model(model):
        click.echo(f"  {line}")
    click.echo(f"  heads:       {_bounded([len(layer.heads) for layer in model.layers])} per layer")
    click.echo(f"  width:       {model.width:,}")
    click.echo(f"  mlp width:   {model.mlp_width:,}")
    click.echo(f"  parameters:  {model.parameter_count():,}")
    if model.is_sparse():
        click.echo(f"  nonzero:     {model.nonzero_count():,} (large matrices stored sparse)")
    click.echo(f"  vocabulary:  {_few(model.vocab, 40, ' ')}")
    click.echo(f"  positional:  {_few(model.features, 20) or '(none)'}")
    outputs = [f"{o.name} ({o.rule})" for o in model.outputs]
    click.echo(f"  outputs:     {_few(outputs, 20)}")
    click.echo(f"  accept:      {model.accept or '-'}")
    click.echo(f"  guarantee:   {model.guarantee.text}")
    click.echo(f"  options:     {model.options}")
    if layout:
        click.echo("  residual layout:")
        for k, held in enumerate(occupant_sites(model)):
            click.echo(f"    {k:>4}  " + " → ".join(f"{label}  [{site}]" for label, site in held))
        return
    shown = 24
    defs = definitions(model)
    if defs:
        click.echo("  definitions (name = residual form, computed at):")
        for name, form, site in defs[:shown]:
            click.echo(f"    {name} = {_clip(form, 60)}  [{site}]")
        if len(defs) > shown:
            click.echo(f"    ... {len(defs) - shown} more")
    groups = layout_groups(model)
    click.echo(f"  residual layout: {model.width:,} dimensions by kind (--layout lists each)")
    for name, count, first, last in groups[:shown]:
        span = f"{first}" if count == 1 else f"{first}-{last}"
        click.echo(f"    {span:>15}  {name}" + (f"* ({count:,} dimensions)" if count > 1 else ""))
    if len(groups) > shown:
        rest = sum(count for _, count, _, _ in groups[shown:])
        click.echo(f"    ... {len(groups) - shown} more labels ({rest:,} dimensions)")


def _few(items: Iterable[str], limit: int, sep: str = ", ") -> str:
    """At most ``limit`` items joined, then how many more."""
    items = list(items)
    text = sep.join(items[:limit])
    return text + (f"{sep}... ({len(items) - limit:,} more)" if len(items) > limit else "")


def _bounded(counts: list[int], limit: int = 32) -> str:
    """``[1, 2, 1]``, or its first ``limit`` entries and how many more."""
    if len(counts) <= limit:
        return str(counts)
    return f"{str(counts[:limit])[:-1]}, ... ({len(counts) - limit:,} more)]"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


@main.command("show")
@click.argument("model_file", metavar="MODEL", type=click.Path(exists=True))
@click.argument("input", required=False)
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False),
    help="Picture file: .png or .svg (matplotlib), or .html (one self-contained page).",
)
@click.option(
    "--picture",
    type=click.Choice(["all", "residual", "attention", "outputs", "program"]),
    default="all",
    show_default=True,
    help="PNG/SVG: which picture (program: the definitions by dependency depth, each with "
    "the sublayer computing it, C-RASP); all writes OUTPUT (residual) and, beside it, "
    "OUTPUT's name with .attention, "
    ".outputs and .program before the suffix (those the model has).",
)
@click.option(
    "--line",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="PCOC: which input line of the vector file to show.",
)
@click.option("--dpi", type=click.IntRange(min=10), default=100, show_default=True)
@click.option(
    "--ablate",
    metavar="TARGET",
    help="Also draw the outputs with TARGET set to 0 beside the compiled ones: a head "
    "('L1 head 1'), a layer's MLP ('L2 mlp'), a definition or a residual label.",
)
@click.option(
    "--patch-from",
    metavar="INPUT",
    help="With --ablate: take TARGET's value from the pass on INPUT (same length; PCOC: "
    "a vector file, the same --line) instead of 0.",
)
@_beyond_option("What to do with an input the model's guarantee does not cover.")
def show_command(
    model_file: str,
    input: str | None,
    output: str,
    picture: str,
    line: int,
    dpi: int,
    ablate: str | None,
    patch_from: str | None,
    beyond_guarantee: str,
) -> None:
    """Picture a compiled MODEL on one INPUT (as `crasp run` reads it: a token string
    for C-RASP, a vector file for PCOC): the residual stream after every sublayer (rows
    a sublayer changed framed), every head's attention pattern, each output's decision
    per position, and (C-RASP) the program graph: the definitions by dependency depth,
    each with the sublayer that computes it. Layers and heads count from 1 (L1 head 1), positions from BOS at -1, as
    in `crasp info` and `crasp run --trace`. .html writes one self-contained page (no
    network access) where you pick a view and hover a cell for its row, position and
    value, or a token for what each head of a layer attends to from it. A picture too
    large for one file is written in parts (OUTPUT's name with .part2, ... before the
    suffix). PNG and SVG need matplotlib (pip install 'crasp-compiler[train]')."""
    from crasp_compiler.budget import require_memory
    from crasp_compiler.files import write_text
    from crasp_compiler.show import data as show_trace

    suffix = Path(output).suffix.lower()
    if suffix not in (".png", ".svg", ".html", ".htm"):
        raise click.UsageError(f"-o {output}: the suffix must be .png, .svg or .html")
    folder = Path(output).parent
    if not folder.is_dir():  # as `crasp compile -o`: no folder is created
        raise CraspError("cannot write pictures: no such folder", filename=str(folder))
    if patch_from is not None and ablate is None:
        raise click.UsageError("--patch-from needs --ablate TARGET: what to patch")
    if ablate is not None and picture not in ("all", "outputs") and suffix not in (".html", ".htm"):
        raise click.UsageError(
            f"--ablate draws the outputs beside the compiled ones: use --picture outputs "
            f"or all, not {picture}"
        )
    model = api.load_model(model_file)
    item = show_trace.read_input(model, input, line)
    length = show_trace.positions(model, item)
    source = None if patch_from is None else show_trace.read_input(model, patch_from, line)

    def intervention() -> show_trace.Intervention | None:
        if ablate is None:
            return None
        return show_trace.intervene(model, item, ablate, source, on_beyond=beyond_guarantee)

    if suffix in (".html", ".htm"):
        from crasp_compiler.show.html import keeps_patterns, page, page_bytes

        patterns = keeps_patterns(length)
        needed = show_trace.trace_bytes(model, length, patterns) + page_bytes(model, length)
        require_memory(needed, f"the page of {length:,} positions", output)
        with warnings_on_stderr():
            run = show_trace.trace(model, item, on_beyond=beyond_guarantee, patterns=patterns)
            changed = intervention()
        title = f"{Path(model_file).name} on {input or ''}"
        write_text(output, page(model, run, title, changed))
        click.echo(output)
        return
    from crasp_compiler.show import figures as show_figures

    shown = show_figures.pictures(model, length, picture, ablate is not None)
    needed = show_trace.trace_bytes(model, length)
    needed += show_figures.require_drawable(shown, dpi, output)
    require_memory(needed, f"the pictures of {length:,} positions", output)
    with warnings_on_stderr():
        run = show_trace.trace(model, item, on_beyond=beyond_guarantee)
        changed = intervention()
    for one in shown:
        path = one.path(output, beside=picture == "all")
        show_figures.save(show_figures.draw(model, run, one, changed), path, dpi)
        click.echo(path)


@main.command("export")
@click.argument("model_file", metavar="MODEL", type=click.Path(exists=True))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(list(EXPORTERS)),
    default=next(iter(EXPORTERS)),
    show_default=True,
    help="; ".join(f"{name}: {exporter.help}" for name, exporter in EXPORTERS.items()) + ".",
)
@click.option(
    "-o", "--output", required=True, type=click.Path(file_okay=False), help="Output directory."
)
@click.option(
    "--n-ctx",
    type=click.IntRange(min=1),
    help="Context length for --format lens (default: the guarantee + 1).",
)
def export_command(model_file: str, fmt: str, output: str, n_ctx: int | None) -> None:
    """Export a compiled MODEL to a directory: weights plus a JSON config."""
    model = api.load_model(model_file)
    exporter = EXPORTERS[fmt]
    if exporter.needs_torch:
        need_torch()
    exporter.write(model, output, n_ctx)
    click.echo(f"{output}: {fmt} export of {model_file}")


def _parameters(model: Model) -> str:
    """``N parameters``, with the nonzero count when the weights are stored sparse."""
    if model.is_sparse():
        return f"{model.parameter_count():,} parameters ({model.nonzero_count():,} nonzero, sparse)"
    return f"{model.parameter_count():,} parameters"


if __name__ == "__main__":  # pragma: no cover
    main()
