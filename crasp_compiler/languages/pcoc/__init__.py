"""PCOC: programs of machines that receive along fixed patterns and compute locally.

- :func:`parse_pcoc`, :func:`load_pcoc`: program text to the IR of :mod:`.nodes`;
- :func:`check_pcoc`: static checks for a given ``n`` (returns the unrolled rounds);
- :func:`interpret_pcoc`, :func:`interpret_pcoc_batch`: the reference semantics, as a
  :class:`Trace`;
- :func:`read_vectors`, :func:`format_vector`: input and output text.

The names are imported on first use, so that the registry can read :mod:`.declaration`
cheaply.
"""

from typing import TYPE_CHECKING

from crasp_compiler.lazy import exports

if TYPE_CHECKING:
    from crasp_compiler.languages.pcoc.interpret import (
        Trace,
        check_pcoc,
        format_number,
        format_vector,
        interpret_pcoc,
        interpret_pcoc_batch,
        read_vectors,
    )
    from crasp_compiler.languages.pcoc.nodes import span_of
    from crasp_compiler.languages.pcoc.parse import PCOC_SUFFIXES, load_pcoc, parse_pcoc

_INTERPRET = "crasp_compiler.languages.pcoc.interpret"
_PARSE = "crasp_compiler.languages.pcoc.parse"
__getattr__ = exports(
    __name__,
    {
        "Trace": _INTERPRET,
        "check_pcoc": _INTERPRET,
        "format_number": _INTERPRET,
        "format_vector": _INTERPRET,
        "interpret_pcoc": _INTERPRET,
        "interpret_pcoc_batch": _INTERPRET,
        "read_vectors": _INTERPRET,
        "span_of": "crasp_compiler.languages.pcoc.nodes",
        "PCOC_SUFFIXES": _PARSE,
        "load_pcoc": _PARSE,
        "parse_pcoc": _PARSE,
    },
)

__all__ = [
    "PCOC_SUFFIXES",
    "Trace",
    "check_pcoc",
    "format_number",
    "format_vector",
    "interpret_pcoc",
    "interpret_pcoc_batch",
    "load_pcoc",
    "parse_pcoc",
    "read_vectors",
    "span_of",
]
