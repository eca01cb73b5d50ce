"""crasp_compiler: C-RASP and PCOC programs to exact transformer weights.

The Python API, the same for every language (:mod:`crasp_compiler.api`)::

    from crasp_compiler import load, interpret, compile, run
    program = load("examples/crasp/dyck1.cr")   # or load(text, language="crasp")
    interpret(program, ["(", ")"]).accepted      # True
    model = compile(program)
    run(model, [["(", ")"]]).values["D"]         # decided outputs at every position

C-RASP helpers (:mod:`crasp_compiler.languages.crasp`) are exported here too:
``parse_program``, ``load_program``, ``interpret_batch``, ``accepts``, ...

The names are imported on first use (:mod:`crasp_compiler.lazy`), so that importing the
package (as every ``crasp`` command does) loads no language.
"""

from typing import TYPE_CHECKING

from crasp_compiler.errors import CraspError, Diagnostic, Span
from crasp_compiler.lazy import exports

if TYPE_CHECKING:
    from crasp_compiler.api import check, compile, interpret, load, load_model, run
    from crasp_compiler.assemble.builder import Builder
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

_API = "crasp_compiler.api"
_CRASP = "crasp_compiler.languages.crasp"
_PROGRAM = "crasp_compiler.languages.crasp.program"
__getattr__ = exports(
    __name__,
    {
        "check": _API,
        "compile": _API,
        "interpret": _API,
        "load": _API,
        "load_model": _API,
        "run": _API,
        "Builder": "crasp_compiler.assemble.builder",
        "Program": _CRASP,
        "Sort": _CRASP,
        "Trace": _CRASP,
        "accepts": _CRASP,
        "check_tokens": _CRASP,
        "format_expr": _CRASP,
        "format_program": _CRASP,
        "interpret_batch": _CRASP,
        "load_program": _PROGRAM,
        "parse_program": _PROGRAM,
        "tokenize": _PROGRAM,
        "with_alphabet": _PROGRAM,
    },
)

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
