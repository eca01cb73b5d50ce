"""Loading C-RASP programs from text or files, and tokenising inputs."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from crasp_compiler.errors import CraspError, Diagnostic
from crasp_compiler.files import read_program_text
from crasp_compiler.languages.crasp.declaration import DECLARATION
from crasp_compiler.languages.crasp.nodes import Program, TokenIs, walk
from crasp_compiler.model.model import BOS

PROGRAM_SUFFIXES = DECLARATION.suffixes


def parse_program(
    text: str, filename: str = "<string>", alphabet: Iterable[str] | None = None
) -> Program:
    """Parse and check a C-RASP program. ``alphabet`` overrides the declared or inferred one."""
    # the parser (lark) is imported here, not with the module: running a compiled model
    # reads its inputs with this module and needs no parser
    from crasp_compiler.languages.crasp.build import build_program
    from crasp_compiler.languages.crasp.syntax import parse_tree

    program = build_program(parse_tree(text, filename), text, filename)
    if alphabet is not None:
        program = with_alphabet(program, alphabet)
    return program


def load_program(path: str | Path, alphabet: Iterable[str] | None = None) -> Program:
    """Read a ``.crasp`` or ``.cr`` file and check it."""
    return parse_program(read_program_text(path), str(path), alphabet)


def with_alphabet(program: Program, alphabet: Iterable[str]) -> Program:
    """The same program over another alphabet, which must contain every token it tests."""
    symbols = tuple(dict.fromkeys(alphabet))
    if not symbols:
        raise CraspError("the alphabet is empty", filename=program.filename)
    for symbol in symbols:
        if symbol == BOS:
            raise CraspError(
                f"alphabet symbol {symbol!r} is reserved: it is the compiled models' BOS token",
                filename=program.filename,
            )
        if not symbol or not symbol.isprintable() or any(ch.isspace() for ch in symbol):
            problem = "contains an unprintable character" if symbol.strip() else "is empty"
            if any(ch.isspace() for ch in symbol):
                problem = "contains whitespace"
            raise CraspError(f"alphabet symbol {symbol!r} {problem}", filename=program.filename)
    used = {n.symbol for d in program.definitions for n in walk(d.expr) if isinstance(n, TokenIs)}
    missing = sorted(used - set(symbols))
    if missing:
        raise CraspError(
            "the alphabet lacks token(s) the program tests: " + ", ".join(repr(s) for s in missing),
            filename=program.filename,
        )
    return Program(
        program.definitions,
        symbols,
        program.accept,
        program.outputs,
        source=program.source,
        filename=program.filename,
        warnings=program.warnings,
        stand_in=tuple(s for s in program.stand_in if s in symbols),
    )


def require_alphabet(program: Program) -> Program:
    """``program``, unless its alphabet is empty (it declares none and tests no token):
    a model or a training task needs tokens to read, so that is an error at the output
    that decides (the acceptance output, else the first)."""
    if program.alphabet:
        return program
    name = program.accept or (program.outputs[0] if program.outputs else None)
    span = program[name].span if name is not None and name in program else None
    raise CraspError(
        [
            Diagnostic(
                "the program tests no token, so it has no alphabet: a model needs at "
                "least one token to read",
                span,
                'declare one in the program (`alphabet "a", "b"`) or give it with --alphabet',
            )
        ],
        program.source,
        program.filename,
    )


def tokenize(line: str) -> list[str]:
    """Split an input line into whitespace-separated tokens."""
    return line.split()
