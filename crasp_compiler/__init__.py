"""crasp_compiler: C-RASP programs to exact transformer weights.

The Python API::

    from crasp_compiler import parse_program, interpret, accepts
    program = parse_program('C_open = # "("\\nC_close = # ")"\\n...')
    accepts(program, ["(", ")"])          # True
    trace = interpret(program, ["(", ")"])
    trace.values["C_open"]                 # counts at the empty prefix and each position
"""

from crasp_compiler.assemble.builder import Builder
from crasp_compiler.errors import CraspError, Diagnostic, Span
from crasp_compiler.languages.crasp import (
    Program,
    Sort,
    Trace,
    accepts,
    check_tokens,
    format_expr,
    format_program,
    interpret,
    interpret_batch,
)
from crasp_compiler.languages.crasp.program import (
    load_program,
    parse_program,
    tokenize,
    with_alphabet,
)

__version__ = "0.1.0"

__all__ = [
    "Builder",
    "CraspError",
    "Diagnostic",
    "Program",
    "Sort",
    "Span",
    "Trace",
    "accepts",
    "check_tokens",
    "format_expr",
    "format_program",
    "interpret",
    "interpret_batch",
    "load_program",
    "parse_program",
    "tokenize",
    "with_alphabet",
]
