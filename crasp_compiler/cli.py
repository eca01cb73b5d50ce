"""The ``crasp`` command: a thin view over the Python API.

Exit status: 0 on success, 1 on a user error (message on stderr), 2 on misuse.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import click

from crasp_compiler.display import value_table
from crasp_compiler.errors import CraspError
from crasp_compiler.ir import format_expr, interpret
from crasp_compiler.ir.nodes import Program, Sort
from crasp_compiler.program import load_program, tokenize


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
    for number, line in enumerate(sys.stdin, start=1):
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
def interpret_command(
    program: str, input: str | None, trace: bool, outputs: bool, alphabet: str | None
) -> None:
    """Run PROGRAM with the reference interpreter on INPUT (or one input per stdin line).

    INPUT is a whitespace-separated token string, e.g. "( ( ) )". Prints True or False
    per input: whether the acceptance output holds at the last position.
    """
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


@main.command("check")
@click.argument("program", type=click.Path(exists=True, dir_okay=False))
@_alphabet_option
def check_command(program: str, alphabet: str | None) -> None:
    """Validate PROGRAM and summarise it: definitions, sorts, outputs, relation class."""
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


if __name__ == "__main__":  # pragma: no cover
    main()
