"""The ``crasp`` command: a thin view over the Python API.

Exit status: 0 on success, 1 on a user error (message on stderr), 2 on misuse.
"""

from __future__ import annotations

import contextlib
import json
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click
import numpy as np

from crasp_compiler.display import value_table
from crasp_compiler.errors import CraspError, Diagnostic
from crasp_compiler.languages.crasp import format_expr, interpret
from crasp_compiler.languages.crasp.compile import compile_program
from crasp_compiler.languages.crasp.nodes import Program, Sort
from crasp_compiler.languages.crasp.program import load_program, tokenize
from crasp_compiler.languages.pcoc.parse import PCOC_SUFFIXES
from crasp_compiler.model import Model, load_model, save_model
from crasp_compiler.runtime import run

if TYPE_CHECKING:
    from crasp_compiler.experiments.tasks.base import Task
    from crasp_compiler.experiments.train.loop import TrainConfig


class _Command(click.Group):
    """Turns :class:`CraspError` into a message on stderr and exit status 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except CraspError as err:
            click.echo(err.format(), err=True)
            ctx.exit(1)
        except BrokenPipeError:
            sys.stderr.close()
            ctx.exit(0)


@click.group(cls=_Command, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="crasp-compiler")
def main() -> None:
    """Compile C-RASP programs into transformers, and run them."""


def _alphabet_option(f):
    return click.option(
        "--alphabet",
        metavar="SYMBOLS",
        help="Whitespace-separated symbols; overrides the program's alphabet.",
    )(f)


def _load(path: str, alphabet: str | None) -> Program:
    return load_program(path, alphabet.split() if alphabet is not None else None)


# A stdin line holding only this token is the empty string (unless it is a symbol).
EMPTY = "ε"


def input_lines(text: str | None) -> Iterator[tuple[int, str, list[str] | CraspError]]:
    """The inputs to run: the argument (line 0), or one per stdin line, as (line number,
    text, tokens); blank lines and ``//`` comment lines are skipped, and a line that is
    not UTF-8 yields its error instead of tokens."""
    if text is not None:
        yield 0, text.strip(), tokenize(text)
        return
    if sys.stdin is None:  # started with stdin closed
        raise CraspError("no input: give INPUT, or one input per line on stdin", filename="<stdin>")
    # Read bytes and decode here: a strict text stdin would raise UnicodeDecodeError.
    stream = getattr(sys.stdin, "buffer", sys.stdin)
    for number, raw in enumerate(stream, start=1):
        try:
            line = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        except UnicodeDecodeError as err:
            yield (
                number,
                raw.decode("utf-8", "replace").strip(),
                CraspError(
                    f"the input line is not valid UTF-8 (byte {raw[err.start]:#04x} at offset "
                    f"{err.start})",
                    filename=f"<stdin>:{number}",
                ),
            )
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            continue
        yield number, stripped, tokenize(stripped)


def _located(err: CraspError, number: int) -> CraspError:
    if number:
        err.filename = f"<stdin>:{number}"
    return err


def _batch(
    input: str | None,
    symbols: Sequence[str],
    evaluate: Callable[[list[str], str], str | None],
    echo: bool,
    invalid: str,
) -> None:
    """Evaluate every input (see :func:`input_lines`) with ``evaluate(tokens, where)``,
    which prints any tables and returns the verdict line (or None). A stdin line that cannot be evaluated
    (a token outside the alphabet, bad UTF-8) is reported on stderr, prints nothing
    (``invalid="skip"``) or ``False`` (``invalid="false"``) on stdout, and the others
    go on; the command then exits 1. ``echo`` puts the input and a tab before each
    verdict (``ε`` for the empty string)."""
    failed = 0
    for number, text, tokens in input_lines(input):
        try:
            if isinstance(tokens, CraspError):
                raise tokens
            if tokens == [EMPTY] and EMPTY not in symbols:
                tokens = []
            verdict = evaluate(tokens, f"<stdin>:{number}" if number else "input")
        except CraspError as err:
            if not number:
                raise
            click.echo(_located(err, number).format(), err=True)
            failed += 1
            verdict = "False" if invalid == "false" else ("invalid" if echo else None)
        if verdict is not None:
            click.echo(f"{text or EMPTY}\t{verdict}" if echo else verdict)
    if failed:
        raise CraspError(
            f"{failed} input line(s) could not be evaluated (see above)", filename="<stdin>"
        )


def _beyond_option(help: str):
    """``--beyond-guarantee error|warn``: inputs the guarantee does not cover."""
    return click.option(
        "--beyond-guarantee",
        type=click.Choice(["error", "warn"]),
        default="error",
        show_default=True,
        help=help,
    )


def _batch_options(f):
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


@main.command("interpret")
@click.argument("program", type=click.Path(exists=True, dir_okay=False))
@click.argument("input", required=False)
@click.option("--trace", is_flag=True, help="Print every definition at every position.")
@click.option("--outputs", is_flag=True, help="Print every named output at every position.")
@_alphabet_option
@click.option(
    "--n", "machines", type=click.IntRange(min=1), help="Number of machines (PCOC programs)."
)
@_batch_options
@_beyond_option("PCOC: what to do with inputs outside their declared bounds.")
def interpret_command(
    program: str,
    input: str | None,
    trace: bool,
    outputs: bool,
    alphabet: str | None,
    machines: int | None,
    echo: bool,
    invalid: str,
    beyond_guarantee: str,
) -> None:
    """Run PROGRAM with the reference interpreter on INPUT (or one input per stdin line).

    INPUT is a whitespace-separated token string, e.g. "( ( ) )". Prints True or False
    per input: whether the acceptance output holds at the last position. On stdin, blank
    and `//` lines are skipped and a line holding only ε is the empty string.

    A PCOC program (.pcoc) needs --n; INPUT is then a file of input vectors (default:
    stdin), one per line: n numbers per input slot. Prints each output vector on one line
    (`slot: ` first when there are several output slots), as `crasp run` does; --trace
    prints every slot after every round.
    """
    if _is_pcoc(program):
        if alphabet is not None or outputs or echo or invalid != "skip":
            raise click.UsageError(
                "--alphabet, --outputs, --echo and --invalid are for C-RASP programs"
            )
        if machines is None:
            raise click.UsageError("a PCOC program needs --n N, the number of machines")
        _interpret_pcoc(program, input, machines, trace, beyond_guarantee)
        return
    if machines is not None or beyond_guarantee != "error":
        raise click.UsageError("--n and --beyond-guarantee are for PCOC programs (.pcoc)")
    prog = _load(program, alphabet)
    for warning in prog.warnings:
        click.echo(warning.format(prog.source, prog.filename), err=True)
    if prog.accept is None and not (trace or outputs):
        raise CraspError(
            "the program has no acceptance output; use --outputs or --trace",
            filename=program,
        )

    def evaluate(tokens: list[str], where: str) -> str | None:
        result = interpret(prog, tokens)
        if trace:
            rows = [(name, result.values[name]) for name in prog.names]
            click.echo(value_table(result.tokens, rows))
        elif outputs:
            rows = [(name, result.values[name]) for name in prog.outputs]
            click.echo(value_table(result.tokens, rows))
        return str(result.accepted) if prog.accept is not None else None

    _batch(input, prog.alphabet, evaluate, echo, invalid)


# ------------------------------------------------------------------ PCOC


def _is_pcoc(path: str) -> bool:
    return Path(path).suffix in PCOC_SUFFIXES


def _vector_text(input: str | None) -> tuple[str, str]:
    """The text of the input vectors: the file INPUT (``-`` or none: stdin)."""
    if input is not None and input != "-":
        try:
            raw = Path(input).read_bytes()
        except OSError as err:
            raise CraspError(
                f"cannot read the input vectors: {err.strerror}", filename=input
            ) from None
        filename = input
    else:
        if sys.stdin is None:
            raise CraspError(
                "no input: give a file of vectors, or vectors on stdin", filename="<stdin>"
            )
        stream = getattr(sys.stdin, "buffer", sys.stdin)
        raw = stream.read()
        filename = "<stdin>"
    if isinstance(raw, str):
        return raw, filename
    try:
        return raw.decode("utf-8"), filename
    except UnicodeDecodeError as err:
        raise CraspError(
            f"the input is not valid UTF-8 (byte {raw[err.start]:#04x} at offset {err.start})",
            filename=filename,
        ) from None


def _pcoc_vectors(input: str | None, n: int, slots: int) -> list[np.ndarray]:
    """Input vectors, one ``(slots, n)`` array per non-empty line (a program without
    input slots runs once, on nothing)."""
    from crasp_compiler.languages.pcoc.interpret import read_vectors

    if slots == 0:
        return [np.zeros((0, n))]
    text, filename = _vector_text(input)
    # `//` comment lines are skipped, as for token inputs
    lines = ["" if line.strip().startswith("//") else line for line in text.split("\n")]
    return read_vectors("\n".join(lines), n, filename, slots=slots)


def _echo_pcoc(outputs: dict[str, np.ndarray], names: list[str]) -> None:
    """One line per output slot: the vector (``slot: `` first with several slots)."""
    from crasp_compiler.languages.pcoc.interpret import format_vector

    for name in names:
        line = format_vector(outputs[name])
        click.echo(f"{name}: {line}" if len(names) > 1 else line)


@contextlib.contextmanager
def _warnings_on_stderr() -> Iterator[None]:
    """Python warnings raised inside, printed as ``warning: ...`` lines on stderr."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for warning in caught:
        click.echo(f"warning: {warning.message}", err=True)


def _interpret_pcoc(path: str, input: str | None, n: int, trace: bool, beyond: str) -> None:
    from crasp_compiler.languages.pcoc.interpret import check_pcoc, format_vector, interpret_pcoc
    from crasp_compiler.languages.pcoc.parse import load_pcoc

    program = load_pcoc(path)
    check_pcoc(program, n)
    for vectors in _pcoc_vectors(input, n, len(program.inputs)):
        with _warnings_on_stderr():
            result = interpret_pcoc(program, n, vectors, on_beyond=beyond)
        if trace:
            for number, memory in enumerate(result.rounds):
                click.echo(f"== {'initial' if number == 0 else f'after round {number}'}")
                for name, values in memory.items():
                    click.echo(f"{name}: {format_vector(values)}")
            click.echo("== outputs")
        _echo_pcoc(result.outputs, list(program.outputs))


def _is_export(path: str) -> bool:
    return Path(path).is_dir() or Path(path).name == "config.json"


def _is_model_path(path: str) -> bool:
    """An export directory, or a file that starts like a zip archive (``.npz``)."""
    if _is_export(path):
        return True
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"PK\x03\x04"
    except OSError:
        return False


def _load_model(path: str) -> Model:
    """A ``.npz`` model file or an export directory (the latter needs torch)."""
    if not _is_export(path):
        return load_model(path)
    _need_torch()
    from crasp_compiler.export.torch_files import load_export

    return load_export(path)


def _need_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise CraspError(
            "this needs torch: pip install 'crasp-compiler[torch]' (torch>=2.4)"
        ) from None


@main.command("check")
@click.argument("file", metavar="PROGRAM|MODEL", type=click.Path(exists=True))
@_alphabet_option
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
    help="Longest sampled input (MODEL only).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed (MODEL only).")
@click.option("--float32", is_flag=True, help="Run numpy and torch in float32 (MODEL only).")
@click.pass_context
def check_command(
    ctx: click.Context,
    file: str,
    alphabet: str | None,
    device: str,
    samples: int,
    max_len: int,
    seed: int,
    float32: bool,
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
        if alphabet is not None:
            raise click.UsageError("--alphabet applies to programs, not models")
        _check_model(file, device, samples, max_len, seed, float32)
        return
    if given:
        options = ", ".join("--" + name.replace("_", "-") for name in given)
        raise click.UsageError(f"{options}: only for models (.npz or export directory)")
    _check_program(file, alphabet)


def _check_model(
    path: str, device: str, samples: int, max_len: int, seed: int, float32: bool
) -> None:
    model = _load_model(path)  # a broken model file is reported as such, torch or not
    _need_torch()
    from crasp_compiler.verify import buckets, check_model, span_text

    report = check_model(model, samples, max_len, device, "float32" if float32 else "float64", seed)
    click.echo(
        f"{path}: {report.samples} inputs of length <= {max_len} on {report.device} "
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
        count = len(buckets(max_len))
        raise CraspError(
            f"not sampled: lengths {', '.join(map(span_text, report.unsampled))} (--samples "
            f"{samples} reaches {samples} of the {count} length buckets up to --max-len "
            f"{max_len}; use --samples {count} or more)",
            filename=path,
        )
    click.echo("all runtimes agree")


def _check_program(program: str, alphabet: str | None) -> None:
    prog = _load(program, alphabet)
    sorts = [d.sort for d in prog.definitions]
    click.echo(f"{program}: ok")
    click.echo(f"  class:       {prog.relation_class}")
    click.echo(f"  alphabet:    {' '.join(prog.alphabet)}")
    click.echo(
        f"  definitions: {len(sorts)} ({sorts.count(Sort.BOOL)} Boolean, "
        f"{sorts.count(Sort.COUNT)} count)"
    )
    click.echo(f"  accept:      {prog.accept or '-'}")
    click.echo(f"  outputs:     {', '.join(prog.outputs)}")
    width = max(len(d.name) for d in prog.definitions)
    for d in prog.definitions:
        click.echo(f"  {d.name.ljust(width)}  {d.sort.value:<5}  {format_expr(d.expr)}")


@main.command("export")
@click.argument("model_file", metavar="MODEL", type=click.Path(exists=True))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["safetensors", "torch", "lens"]),
    default="safetensors",
    show_default=True,
    help="safetensors/torch: the torch module's weights; lens: TransformerLens names "
    "and shapes (standard models only).",
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
    model = _load_model(model_file)
    if fmt == "lens":
        from crasp_compiler.export.lens import export_lens

        export_lens(model, output, n_ctx)
    else:
        _need_torch()
        from crasp_compiler.export.torch_files import export_model

        export_model(model, output, fmt)
    click.echo(f"{output}: {fmt} export of {model_file}")


@main.command("compile")
@click.argument("program", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False), help="Model file (.npz)."
)
@click.option(
    "--mode",
    type=click.Choice(["heaviside", "relu", "layernorm", "hard", "softmax"]),
    help="C-RASP (default heaviside): heaviside: Heaviside units, exact at every length; "
    "layernorm: ReLU units and layer-norm signs, exact at every length; relu: plain "
    "softmax/ReLU model, exact up to --max-len. PCOC (default hard): hard: average-hard "
    "routing, exact; softmax: softmax routing within --tolerance of it.",
)
@click.option(
    "--max-len", type=click.IntRange(min=0), help="Longest input a relu model must be exact for."
)
@_alphabet_option
@click.option(
    "--n", "machines", type=click.IntRange(min=1), help="Number of machines (PCOC programs)."
)
@click.option(
    "--tolerance",
    type=click.FloatRange(min=0, min_open=True),
    help="PCOC softmax: largest distance of an output from the hard model (default 1e-6).",
)
@click.option(
    "--dtype",
    type=click.Choice(["float64", "float32"]),
    help="PCOC softmax: the float type the tolerance is budgeted for (default float64).",
)
def compile_command(
    program: str,
    output: str,
    mode: str | None,
    max_len: int | None,
    alphabet: str | None,
    machines: int | None,
    tolerance: float | None,
    dtype: str | None,
) -> None:
    """Compile PROGRAM into transformer weights written to OUTPUT.

    A PCOC program (.pcoc) compiles for exactly --n machines: one layer per round (plus
    the MLP depth its local computations need), one routing head per source pattern."""
    if _is_pcoc(program):
        _compile_pcoc(program, output, mode, max_len, alphabet, machines, tolerance, dtype)
        return
    pcoc_only = {"--n": machines, "--tolerance": tolerance, "--dtype": dtype}
    given = [name for name, value in pcoc_only.items() if value is not None]
    if given:
        raise click.UsageError(f"{', '.join(given)}: only for PCOC programs (.pcoc)")
    mode = mode or "heaviside"
    if mode in ("hard", "softmax"):
        raise click.UsageError(
            f"--mode {mode} is for PCOC programs; C-RASP modes are heaviside, relu, layernorm"
        )
    if mode == "relu" and max_len is None:
        raise click.UsageError("--mode relu needs --max-len N")
    prog = _load(program, alphabet)
    model = compile_program(prog, mode=mode, max_len=max_len if mode == "relu" else None)
    save_model(model, output)
    click.echo(
        f"{output}: {len(model.layers)} layers (dependency bound "
        f"{model.info['dependency_bound']}), width {model.width:,}, "
        f"{_parameters(model)}; {model.guarantee.text}"
    )


def _compile_pcoc(
    path: str,
    output: str,
    mode: str | None,
    max_len: int | None,
    alphabet: str | None,
    machines: int | None,
    tolerance: float | None,
    dtype: str | None,
) -> None:
    from crasp_compiler.languages.pcoc.compile import compile_pcoc
    from crasp_compiler.languages.pcoc.parse import load_pcoc

    if max_len is not None or alphabet is not None:
        raise click.UsageError("--max-len and --alphabet are for C-RASP programs")
    if machines is None:
        raise click.UsageError("a PCOC program needs --n N, the number of machines")
    mode = mode or "hard"
    if mode not in ("hard", "softmax"):
        raise click.UsageError(
            f"--mode {mode} is for C-RASP programs; PCOC modes are hard, softmax"
        )
    if mode == "hard" and (tolerance is not None or dtype is not None):
        raise click.UsageError("--tolerance and --dtype are for --mode softmax")
    model = compile_pcoc(
        load_pcoc(path),
        machines,
        mode=mode,
        tolerance=1e-6 if tolerance is None else tolerance,
        dtype=dtype or "float64",
    )
    save_model(model, output)
    click.echo(
        f"{output}: {_pcoc_shape(model)}, width {model.width:,}, "
        f"{_parameters(model)}; {model.guarantee.text}"
    )


def _parameters(model: Model) -> str:
    """``N parameters``, with the nonzero count when the weights are stored sparse."""
    if model.is_sparse():
        return f"{model.parameter_count():,} parameters ({model.nonzero_count():,} nonzero, sparse)"
    return f"{model.parameter_count():,} parameters"


def _pcoc_shape(model: Model) -> str:
    """Layers and heads next to the simulation theorem's counts."""
    info = model.info
    theorem = info.get("theorem", {})
    benes = info.get("benes")
    sends = (
        f"; {benes['send_rounds']} send round(s) routed by Beneš in those rounds "
        f"(theorem: 2R⌈log₂ n⌉ = {benes['bound_2Rlog2n']})"
        if benes
        else ""
    )
    return (
        f"{len(model.layers)} layers for {info.get('rounds', '?')} round(s) (theorem: "
        f"{theorem.get('layers', '?')} layers, {theorem.get('heads_per_layer', '?')} heads per "
        f"layer{sends}), heads per layer {[len(layer.heads) for layer in model.layers]}"
    )


def _run_pcoc(model: Model, input: str | None, float32: bool, beyond: str) -> None:
    from crasp_compiler.languages.pcoc.compile import machines, run_pcoc

    n = machines(model)
    batch = _pcoc_vectors(input, n, len(model.inputs))
    with _warnings_on_stderr():
        outputs = run_pcoc(
            model, batch, dtype=np.float32 if float32 else np.float64, on_beyond=beyond
        )
    names = [out.name for out in model.outputs]
    for row in range(len(batch)):
        _echo_pcoc({name: outputs[name][row] for name in names}, names)


@main.command("run")
@click.argument("model_file", metavar="MODEL", type=click.Path(exists=True))
@click.argument("input", required=False)
@click.option("--outputs", is_flag=True, help="Print every named output at every position.")
@click.option("--trace", is_flag=True, help="Print the residual stream after every sublayer.")
@click.option("--float32", is_flag=True, help="Compute in float32 instead of float64.")
@_beyond_option(
    "What to do with inputs the model's guarantee does not cover (longer than it covers "
    "in this float type; PCOC: values outside their declared bounds)."
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
    """Run a compiled MODEL on INPUT (or one input per stdin line), like `crasp interpret`.

    A model compiled from PCOC reads INPUT as a file of input vectors (default: stdin),
    one per line with exactly n numbers per input slot, and prints each output vector on
    one line (`slot: ` first when there are several output slots)."""
    model = _load_model(model_file)
    from crasp_compiler.languages.pcoc.compile import is_pcoc

    if is_pcoc(model):
        if outputs or trace or echo or invalid != "skip":
            raise click.UsageError("--outputs, --trace, --echo and --invalid are for C-RASP models")
        _run_pcoc(model, input, float32, beyond_guarantee)
        return
    if model.accept is None and not (trace or outputs):
        raise CraspError(
            "the model has no acceptance output; use --outputs or --trace", filename=model_file
        )
    dtype = np.float32 if float32 else np.float64

    def evaluate(tokens: list[str], where: str) -> str | None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = run(
                model, [tokens], dtype=dtype, residuals=trace, on_overlength=beyond_guarantee
            )
        for warning in caught:
            click.echo(f"{where}: warning: {warning.message}", err=True)
        if trace:
            assert result.residuals is not None
            for label, x in result.residuals:
                click.echo(f"== {label}")
                rows = [(name, x[0, :, k]) for k, name in enumerate(model.residual)]
                click.echo(value_table(tokens, rows))
        if outputs:
            rows = [(name, result.values[name][0]) for name in (o.name for o in model.outputs)]
            click.echo(value_table(tokens, rows))
        return str(bool(result.final(model.accept)[0])) if model.accept is not None else None

    _batch(input, model.vocab[1:], evaluate, echo, invalid)


@main.command("info")
@click.argument("model_file", metavar="MODEL", type=click.Path(exists=True))
def info_command(model_file: str) -> None:
    """Describe a compiled MODEL: layers, heads, widths, parameters, guarantee, layout."""
    model = _load_model(model_file)
    info = model.info
    click.echo(f"{model_file}")
    if info.get("language") == "PCOC":
        click.echo(f"  source:      PCOC, n = {info.get('n', '?')} machines")
        click.echo(f"  layers:      {_pcoc_shape(model)}")
        click.echo(f"  inputs:      {', '.join(model.inputs) or '(none)'} (numeric)")
        if info.get("temperature") is not None:
            click.echo(
                f"  softmax:     temperature {info['temperature']:.6g}, tolerance "
                f"{info.get('tolerance', '?')} ({info.get('dtype', '?')})"
            )
    else:
        click.echo(f"  source:      {info.get('class') or info.get('language', '?')}")
        click.echo(
            f"  layers:      {len(model.layers)} (dependency bound "
            f"{info.get('dependency_bound', '?')})"
        )
    click.echo(f"  heads:       {[len(layer.heads) for layer in model.layers]} per layer")
    click.echo(f"  width:       {model.width:,}")
    click.echo(f"  mlp width:   {model.mlp_width:,}")
    click.echo(f"  parameters:  {model.parameter_count():,}")
    if model.is_sparse():
        click.echo(f"  nonzero:     {model.nonzero_count():,} (large matrices stored sparse)")
    click.echo(f"  vocabulary:  {' '.join(model.vocab)}")
    click.echo(f"  positional:  {', '.join(model.features) or '(none)'}")
    click.echo(f"  outputs:     {', '.join(f'{o.name} ({o.rule})' for o in model.outputs)}")
    click.echo(f"  accept:      {model.accept or '-'}")
    click.echo(f"  guarantee:   {model.guarantee.text}")
    click.echo(f"  options:     {model.options}")
    click.echo("  residual layout:")
    for k, label in enumerate(model.residual):
        click.echo(f"    {k:>4}  {label}")


# ------------------------------------------------------------------ training


@main.command("tasks")
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


_SEQUENCE_ONLY = ("pe", "bins", "train_max")
_NUMERIC_ONLY = ("numeric_kind", "n", "scales")


@main.command("train")
@click.argument("task")
@click.option(
    "--pe",
    default="ape",
    show_default=True,
    help="Positional encoding (sequence tasks): ape, nope, sin or random.",
)
@click.option("--steps", type=click.IntRange(min=1), default=30_000, show_default=True)
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
    "--test-size",
    type=click.IntRange(min=1),
    default=2000,
    show_default=True,
    help="Test examples per length bin or value scale.",
)
@click.option(
    "--bins",
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
    default=500,
    show_default=True,
    help="Steps between in-distribution evaluations (early stop at 100%).",
)
@click.option("--no-early-stop", is_flag=True, help="Train every step even at 100% accuracy.")
@click.option(
    "--device", default="auto", show_default=True, help="Torch device; auto: CUDA if available."
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    help="Output directory (default: runs/TASK-PE-seedS; numeric: runs/TASK-KIND-seedS).",
)
@click.option(
    "--numeric-kind",
    type=click.Choice(["positional", "standard"]),
    default="positional",
    show_default=True,
    help="Numeric tasks: positional attention or a standard transformer.",
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
def train_command(ctx: click.Context, task: str, **options) -> None:
    """Train a transformer on TASK and compare it with the task's compiled program.

    Sequence tasks: accuracy per length bin of the trained and the compiled model and
    their agreement; numeric tasks: MSE and close-accuracy per value scale. Writes
    model.safetensors, config.json and results.json to --out."""
    from crasp_compiler.experiments.tasks.base import NumericTask
    from crasp_compiler.experiments.tasks.registry import get_task

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
    _need_torch()
    from crasp_compiler.experiments.train.loop import train
    from crasp_compiler.experiments.train.models import PES

    if not numeric and options["pe"] not in PES:
        raise CraspError(
            [Diagnostic(f"unknown positional encoding {options['pe']!r}", hint=", ".join(PES))]
        )
    _check_device(options["device"])
    config = _train_config(found, options)
    try:
        results = train(config)
    except KeyboardInterrupt:
        _interrupted(config.out_dir)
    click.echo(_train_summary(results))


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


def _train_config(task: Task, options: dict) -> TrainConfig:
    """The TrainConfig of a ``crasp train`` call: ``--out`` defaults to
    ``runs/TASK-PE-seedS`` (numeric tasks: the model kind for PE); with ``--bins`` and no
    ``--train-max``, training stops at the first bin's end (or the task's own, if lower)."""
    from crasp_compiler.experiments.tasks.base import NumericTask
    from crasp_compiler.experiments.train.loop import TrainConfig

    numeric = isinstance(task, NumericTask)
    variant = options["numeric_kind"] if numeric else options["pe"]
    out = options["out"] or str(Path("runs") / f"{task.name}-{variant}-seed{options['seed']}")
    train_max = options["train_max"]
    if train_max is None and options["bins"] and not numeric:
        train_max = min(task.train_max, options["bins"][0][1])
    extra = {"scales": options["scales"]} if options["scales"] else {}
    return TrainConfig(
        task=task.name,
        pe=options["pe"],
        steps=options["steps"],
        seed=options["seed"],
        lr=options["lr"],
        d_model=options["d_model"],
        n_layers=options["layers"],
        n_heads=options["heads"],
        batch_size=options["batch_size"],
        test_size=options["test_size"],
        bins=options["bins"],
        train_max=train_max,
        eval_every=options["eval_every"],
        early_stop=not options["no_early_stop"],
        device=options["device"],
        out_dir=out,
        numeric_kind=options["numeric_kind"],
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


def _train_summary(results: dict) -> str:
    """The ``crasp train`` report: the table per bin or scale, the run, the files."""
    config = results["config"]
    if results["kind"] == "sequence":
        compiled = results.get("compiled_accuracy") or {}
        agreement = results.get("agreement") or {}
        table = _table(
            [
                ["bin", "trained", "compiled", "agreement"],
                *(
                    [name, _fmt(value), _fmt(compiled.get(name)), _fmt(agreement.get(name))]
                    for name, value in results["accuracy"].items()
                ),
            ]
        )
        head = f"{results['task']} ({results['family']}), pe {config['pe']}, seed {config['seed']}"
        measure = "accuracy: fraction of test sequences exactly right"
    else:
        compiled = results.get("compiled_metrics") or {}
        rows = [["scale", "mse trained", "mse compiled", "close trained", "close compiled"]]
        for scale, metrics in results["metrics"].items():
            other = compiled.get(scale, {})
            rows.append(
                [
                    scale,
                    _fmt(metrics["mse"], ".3g"),
                    _fmt(other.get("mse"), ".3g"),
                    _fmt(metrics["close_accuracy"]),
                    _fmt(other.get("close_accuracy")),
                ]
            )
        table = _table(rows)
        head = (
            f"{results['task']} (numeric, n={results['n']}), {config['numeric_kind']} model, "
            f"seed {config['seed']}"
        )
        measure = "close: fraction of test lists with every entry within 0.05 + 0.05|y|"
    stop = "early stop at 100% in distribution" if results["early_stopped"] else "no early stop"
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
    if results.get("compiled_error"):
        lines.append(f"compiled program not evaluated: {results['compiled_error']}")
    if config.get("out_dir"):
        lines.append(f"files: model.safetensors, config.json, results.json in {config['out_dir']}")
    return "\n".join(lines)


@main.command("sweep")
@click.argument("grid", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--ray-address",
    metavar="ADDR",
    help="Run every run as a Ray task: auto, local or ray://host:port.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="Local worker processes (default: the grid file's workers).",
)
def sweep_command(grid: str, ray_address: str | None, workers: int | None) -> None:
    """Train every run of the GRID file not finished yet (see crasp_compiler.experiments.train.sweep
    for the format), then print one line per finished run. Ctrl-C stops every run (exit
    status 130); the same command then resumes."""
    _need_torch()
    from crasp_compiler.experiments.train.sweep import collect, load_grid, run_sweep

    runs, _ = load_grid(grid)  # refuses unknown tasks and encodings before anything trains
    interrupted = False
    try:
        run_sweep(grid, ray_address=ray_address, workers=workers)
    except KeyboardInterrupt:
        interrupted = True
    finished = collect(grid)
    width = max((len(r["run"]) for r in finished), default=0)
    for results in finished:
        click.echo(f"{results['run'].ljust(width)}  {_sweep_line(results)}")
    click.echo(f"{len(finished)} of {len(runs)} runs finished")
    if interrupted:
        click.echo("interrupted; the same command resumes the unfinished runs", err=True)
        sys.exit(130)


def _scale_metrics(metrics: dict | None, scale: float) -> dict | None:
    """The metrics of one scale factor (keys are ``str(c)``: "1" or "1.0")."""
    for key, value in (metrics or {}).items():
        if float(key) == scale:
            return value
    return None


def _sweep_line(results: dict) -> str:
    """Steps, then accuracy per bin (sequence) or MSE at c = 1 and 10 (numeric)."""
    steps = f"{results['steps']:>6} steps"
    if results["kind"] == "sequence":
        return f"{steps}  " + "  ".join(
            f"{name}: {value:.3f}" for name, value in results["accuracy"].items()
        )
    parts = []
    for c in (1, 10):
        trained = _scale_metrics(results["metrics"], c)
        compiled = _scale_metrics(results.get("compiled_metrics"), c)
        if trained is not None:
            ref = "" if compiled is None else f" (compiled {compiled['mse']:.3g})"
            parts.append(f"mse c={c}: {trained['mse']:.3g}{ref}")
    return f"{steps}  " + "  ".join(parts)


@main.command("finetune")
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
    task: str, output: str | None, scales: tuple[float, ...] | None, **options
) -> None:
    """Fine-tune the compiled model of a numeric TASK on its own data and report whether
    it stays exact: the largest error per value scale before and after."""
    _need_torch()
    from crasp_compiler.experiments.train.finetune import FinetuneConfig, finetune
    from crasp_compiler.files import writable_dir, write_text

    if output is not None:  # before the work, so a bad path loses none
        writable_dir(Path(output).parent)
    extra = {"scales": [float(c) for c in scales]} if scales else {}
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


@main.command("plot")
@click.argument("sources", nargs=-1, required=True, type=click.Path())
@click.option(
    "-o", "--output", required=True, type=click.Path(file_okay=False), help="Output directory."
)
def plot_command(sources: tuple[str, ...], output: str) -> None:
    """Plot the results of SOURCES (grid TOML files, run directories, or directories of run
    directories): accuracy per length bin for sequence tasks, MSE per value scale for
    numeric tasks, each against the compiled program."""
    from crasp_compiler.experiments.train.plots import (
        load_results,
        plot_length_bins,
        plot_value_scales,
    )

    with _warnings_on_stderr():  # e.g. a truncated results.json, skipped
        results = load_results(sources)
    if not results:
        raise CraspError("no complete results.json here", filename=", ".join(sources))
    paths = plot_length_bins(results, Path(output)) + plot_value_scales(results, Path(output))
    for path in paths:
        click.echo(str(path))


if __name__ == "__main__":  # pragma: no cover
    main()
