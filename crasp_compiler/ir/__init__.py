"""Typed IR of C-RASP programs, its checker, printer and reference interpreter."""

from crasp_compiler.ir.build import build_program
from crasp_compiler.ir.interpret import Trace, accepts, check_tokens, interpret, interpret_batch
from crasp_compiler.ir.nodes import Program, Sort
from crasp_compiler.ir.printer import format_expr, format_program

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
