"""PCOC: programs of machines that receive along fixed patterns and compute locally.

- :func:`parse_program`, :func:`load_program`: program text to the IR of :mod:`.nodes`;
- :func:`check_pcoc`: static checks for a given ``n`` (returns the unrolled rounds);
- :func:`interpret_program`, :func:`interpret_batch`: the reference semantics, as a
  :class:`Trace`;
- :func:`read_vectors`, :func:`format_vector`: input and output text.

The names are imported on first use, so that the registry can read :mod:`.declaration`
cheaply.
"""

from typing import TYPE_CHECKING

from crasp_compiler.lazy import exports

if TYPE_CHECKING:
    from crasp_compiler.languages.pcoc.check import check_pcoc
    from crasp_compiler.languages.pcoc.interpret import (
        Trace,
        format_number,
        format_vector,
        interpret_batch,
        interpret_program,
        read_vectors,
    )
    from crasp_compiler.languages.pcoc.nodes import span_of
    from crasp_compiler.languages.pcoc.program import PROGRAM_SUFFIXES, load_program, parse_program

_INTERPRET = "crasp_compiler.languages.pcoc.interpret"
_PROGRAM = "crasp_compiler.languages.pcoc.program"
__getattr__ = exports(
    __name__,
    {
        "Trace": _INTERPRET,
        "check_pcoc": "crasp_compiler.languages.pcoc.check",
        "format_number": _INTERPRET,
        "format_vector": _INTERPRET,
        "interpret_program": _INTERPRET,
        "interpret_batch": _INTERPRET,
        "read_vectors": _INTERPRET,
        "span_of": "crasp_compiler.languages.pcoc.nodes",
        "PROGRAM_SUFFIXES": _PROGRAM,
        "load_program": _PROGRAM,
        "parse_program": _PROGRAM,
    },
)

__all__ = [
    "PROGRAM_SUFFIXES",
    "Trace",
    "check_pcoc",
    "format_number",
    "format_vector",
    "interpret_batch",
    "interpret_program",
    "load_program",
    "parse_program",
    "read_vectors",
    "span_of",
]
