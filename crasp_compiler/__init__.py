"""crasp_compiler: C-RASP and PCOC programs to exact transformer weights.

The Python API, the same for every language (:mod:`crasp_compiler.api`)::

    from crasp_compiler import load, interpret, compile, run
    program = load("examples/crasp/dyck1.cr")   # or load(text, language="crasp")
    interpret(program, ["(", ")"]).accepted      # True
    model = compile(program)
    run(model, [["(", ")"]]).values["D"]         # decided outputs at every position

C-RASP helpers (:mod:`crasp_compiler.languages.crasp`) are exported here too:
``parse_program``, ``load_program``, ``interpret_batch``, ``accepts``, ...
"""

from crasp_compiler.api import check, compile, interpret, load, load_model, run
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
    "check",
    "check_tokens",
    "compile",
    "format_expr",
    "format_program",
    "interpret",
    "interpret_batch",
    "load",
    "load_model",
    "load_program",
    "parse_program",
    "run",
    "tokenize",
    "with_alphabet",
]
