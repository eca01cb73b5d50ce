"""The ``crasp`` command: a thin view over the Python API.

Exit status: 0 on success, 1 on a user error (message on stderr), 2 on misuse.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import click
import numpy as np

from crasp_compiler.compiler import compile_program
from crasp_compiler.display import value_table
from crasp_compiler.errors import CraspError
from crasp_compiler.ir import format_expr, interpret
from crasp_compiler.ir.nodes import Program, Sort
from crasp_compiler.model import Model, load_model, save_model
from crasp_compiler.pcoc.parse import PCOC_SUFFIXES
from crasp_compiler.program import load_program, tokenize
from crasp_compiler.runtime import run


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


def input_lines(text: str | None) -> Iterator[tuple[int, list[str]]]:
    """The inputs to run: the argument, or one per stdin line (blank and // lines skipped)."""
    if text is not None:
        yield 0, tokenize(text)
        return
    if sys.stdin is None:  # started with stdin closed
        raise CraspError("no input: give INPUT, or one input per line on stdin", filename="<stdin>")
    # Read bytes and decode here: a strict text stdin would raise UnicodeDecodeError.
    stream = getattr(sys.stdin, "buffer", sys.stdin)
    for number, raw in enumerate(stream, start=1):
        try:
            line = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        except UnicodeDecodeError as err:
            raise CraspError(
                f"the input line is not valid UTF-8 (byte {raw[err.start]:#04x} at offset {err.start})",
                filename=f"<stdin>:{number}",
            ) from None
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            continue
        yield number, tokenize(stripped)


def _located(err: CraspError, number: int) -> CraspError:
    if number:
        err.filename = f"<stdin>:{number}"
    return err


@main.command("interpret")
@click.argument("program", type=click.Path(exists=True, dir_okay=False))
@click.argument("input", required=False)
@click.option("--trace", is_flag=True, help="Print every definition at every position.")
@click.option("--outputs", is_flag=True, help="Print every named output at every position.")
@_alphabet_option
@click.option(
    "--n", "machines", type=click.IntRange(min=1), help="Number of machines (PCOC programs)."
)
def interpret_command(
    program: str,
    input: str | None,
    trace: bool,
    outputs: bool,
    alphabet: str | None,
    machines: int | None,
) -> None:
    """Run PROGRAM with the reference interpreter on INPUT (or one input per stdin line).

    INPUT is a whitespace-separated token string, e.g. "( ( ) )". Prints True or False
    per input: whether the acceptance output holds at the last position.

    A PCOC program (.pcoc) needs --n; INPUT is then a file of input vectors (default:
    stdin), one per line: n numbers per input slot. Prints each output vector on one line
    (`slot: ` first when there are several output slots), as `crasp run` does; --trace
    prints every slot after every round.
    """
    if _is_pcoc(program):
        if alphabet is not None or outputs:
            raise click.UsageError("--alphabet and --outputs are for C-RASP programs")
        if machines is None:
            raise click.UsageError("a PCOC program needs --n N, the number of machines")
        _interpret_pcoc(program, input, machines, trace)
        return
    if machines is not None:
        raise click.UsageError("--n is for PCOC programs (.pcoc)")
    prog = _load(program, alphabet)
    if prog.accept is None and not (trace or outputs):
        raise CraspError(
            "the program has no acceptance output; use --outputs or --trace",
            filename=program,
        )
    for number, tokens in input_lines(input):
        try:
            result = interpret(prog, tokens)
        except CraspError as err:
            raise _located(err, number) from None
        if trace:
            rows = [(name, result.values[name]) for name in prog.names]
            click.echo(value_table(result.tokens, rows))
        elif outputs:
            rows = [(name, result.values[name]) for name in prog.outputs]
            click.echo(value_table(result.tokens, rows))
        if prog.accept is not None:
            click.echo(str(result.accepted))


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
    from crasp_compiler.pcoc.interpret import read_vectors

    if slots == 0:
        return [np.zeros((0, n))]
    text, filename = _vector_text(input)
    # `//` comment lines are skipped, as for token inputs
    lines = ["" if line.strip().startswith("//") else line for line in text.split("\n")]
    return read_vectors("\n".join(lines), n, filename, slots=slots)


def _echo_pcoc(outputs: dict[str, np.ndarray], names: list[str]) -> None:
    """One line per output slot: the vector (``slot: `` first with several slots)."""
    from crasp_compiler.pcoc.interpret import format_vector

    for name in names:
        line = format_vector(outputs[name])
        click.echo(f"{name}: {line}" if len(names) > 1 else line)


def _interpret_pcoc(path: str, input: str | None, n: int, trace: bool) -> None:
    from crasp_compiler.pcoc.interpret import check_pcoc, format_vector, interpret_pcoc
    from crasp_compiler.pcoc.parse import load_pcoc

    program = load_pcoc(path)
    check_pcoc(program, n)
    for vectors in _pcoc_vectors(input, n, len(program.inputs)):
        result = interpret_pcoc(program, n, vectors)
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
    _need_torch()
    from crasp_compiler.verify import check_model

    model = _load_model(path)
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
        f"{model.info['dependency_bound']}), width {model.width}, "
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
    from crasp_compiler.pcoc.compile import compile_pcoc
    from crasp_compiler.pcoc.parse import load_pcoc

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
        f"{output}: {_pcoc_shape(model)}, width {model.width}, "
        f"{_parameters(model)}; {model.guarantee.text}"
    )


def _parameters(model: Model) -> str:
    """``N parameters``, with the nonzero count when the weights are stored sparse."""
    if model.is_sparse():
        return f"{model.parameter_count()} parameters ({model.nonzero_count()} nonzero, sparse)"
    return f"{model.parameter_count()} parameters"


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


def _run_pcoc(model: Model, input: str | None, float32: bool) -> None:
    from crasp_compiler.pcoc.compile import machines, run_pcoc

    n = machines(model)
    batch = _pcoc_vectors(input, n, len(model.inputs))
    outputs = run_pcoc(model, batch, dtype=np.float32 if float32 else np.float64)
    names = [out.name for out in model.outputs]
    for row in range(len(batch)):
        _echo_pcoc({name: outputs[name][row] for name in names}, names)


@main.command("run")
@click.argument("model_file", metavar="MODEL", type=click.Path(exists=True))
@click.argument("input", required=False)
@click.option("--outputs", is_flag=True, help="Print every named output at every position.")
@click.option("--trace", is_flag=True, help="Print the residual stream after every sublayer.")
@click.option("--float32", is_flag=True, help="Compute in float32 instead of float64.")
@click.option(
    "--beyond-guarantee",
    type=click.Choice(["error", "warn"]),
    default="error",
    show_default=True,
    help="What to do with inputs longer than the model's guarantee.",
)
def run_command(
    model_file: str,
    input: str | None,
    outputs: bool,
    trace: bool,
    float32: bool,
    beyond_guarantee: str,
) -> None:
    """Run a compiled MODEL on INPUT (or one input per stdin line), like `crasp interpret`.

    A model compiled from PCOC reads INPUT as a file of input vectors (default: stdin),
    one per line with exactly n numbers per input slot, and prints each output vector on
    one line (`slot: ` first when there are several output slots)."""
    model = _load_model(model_file)
    from crasp_compiler.pcoc.compile import is_pcoc

    if is_pcoc(model):
        if outputs or trace:
            raise click.UsageError("--outputs and --trace are for C-RASP models")
        _run_pcoc(model, input, float32)
        return
    if model.accept is None and not (trace or outputs):
        raise CraspError(
            "the model has no acceptance output; use --outputs or --trace", filename=model_file
        )
    dtype = np.float32 if float32 else np.float64
    for number, tokens in input_lines(input):
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result = run(
                    model, [tokens], dtype=dtype, residuals=trace, on_overlength=beyond_guarantee
                )
        except CraspError as err:
            raise _located(err, number) from None
        where = f"<stdin>:{number}" if number else "input"
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
        if model.accept is not None:
            click.echo(str(bool(result.final(model.accept)[0])))


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
        click.echo(f"  source:      {info.get('language', '?')} {info.get('class', '')}")
        click.echo(
            f"  layers:      {len(model.layers)} (dependency bound "
            f"{info.get('dependency_bound', '?')})"
        )
    click.echo(f"  heads:       {[len(layer.heads) for layer in model.layers]} per layer")
    click.echo(f"  width:       {model.width}")
    click.echo(f"  mlp width:   {model.mlp_width}")
    click.echo(f"  parameters:  {model.parameter_count()}")
    if model.is_sparse():
        click.echo(f"  nonzero:     {model.nonzero_count()} (large matrices stored sparse)")
    click.echo(f"  vocabulary:  {' '.join(model.vocab)}")
    click.echo(f"  positional:  {', '.join(model.features) or '(none)'}")
    click.echo(f"  outputs:     {', '.join(f'{o.name} ({o.rule})' for o in model.outputs)}")
    click.echo(f"  accept:      {model.accept or '-'}")
    click.echo(f"  guarantee:   {model.guarantee.text}")
    click.echo(f"  options:     {model.options}")
    click.echo("  residual layout:")
    for k, label in enumerate(model.residual):
        click.echo(f"    {k:>4}  {label}")


if __name__ == "__main__":  # pragma: no cover
    main()
