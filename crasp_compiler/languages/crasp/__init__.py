"""Typed IR of C-RASP programs, its checker, printer and reference interpreter."""

from crasp_compiler.languages.crasp.build import build_program
from crasp_compiler.languages.crasp.interpret import (
    Trace,
    accepts,
    check_tokens,
    interpret,
    interpret_batch,
)
from crasp_compiler.languages.crasp.nodes import Program, Sort
from crasp_compiler.languages.crasp.printer import format_expr, format_program

__all__ = [
    "Program",
    "Sort",
    "Trace",
    "accepts",
    "build_program",
    "check_tokens",
    "format_expr",
    "format_program",
    "interpret",
    "interpret_batch",
]
