"""Typed IR of C-RASP programs, its checker, printer and reference interpreter.

``build_program`` is imported on first use (it brings the Lark front end), so that the
registry can read :mod:`.declaration` cheaply.
"""

from typing import TYPE_CHECKING

from crasp_compiler.languages.crasp.interpret import (
    Trace,
    accepts,
    check_tokens,
    interpret,
    interpret_batch,
)
from crasp_compiler.languages.crasp.nodes import Program, Sort
from crasp_compiler.languages.crasp.printer import format_expr, format_program
from crasp_compiler.lazy import exports

if TYPE_CHECKING:
    from crasp_compiler.languages.crasp.build import build_program

__getattr__ = exports(__name__, {"build_program": "crasp_compiler.languages.crasp.build"})

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
