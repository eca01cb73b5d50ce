"""Loading PCOC programs from text or files."""

from __future__ import annotations

from pathlib import Path

from crasp_compiler.files import read_program_text
from crasp_compiler.languages.pcoc.declaration import DECLARATION
from crasp_compiler.languages.pcoc.nodes import Program

PROGRAM_SUFFIXES = DECLARATION.suffixes


def parse_program(text: str, filename: str = "<program>") -> Program:
    """Parse and check PCOC program text; raise :class:`CraspError` on any error."""
    from crasp_compiler.languages.pcoc.build import build_program
    from crasp_compiler.languages.pcoc.syntax import parse_tree

    return build_program(parse_tree(text, filename), text, filename)


def load_program(path: str | Path) -> Program:
    """Read a ``.pcoc`` file and check it."""
    return parse_program(read_program_text(path), str(path))
