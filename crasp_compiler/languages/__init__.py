"""Source languages: one folder each, registered here (see :mod:`.registry`).

A new language is a folder beside ``crasp/`` and ``pcoc/`` with its grammar, nodes,
checker, interpreter, lowering and compile entry, plus a
:class:`~crasp_compiler.languages.registry.Language` object, registered below by its
:class:`~crasp_compiler.languages.registry.Declaration` (the object is imported on first
use).
"""

from crasp_compiler.languages.crasp.declaration import DECLARATION as CRASP
from crasp_compiler.languages.pcoc.declaration import DECLARATION as PCOC
from crasp_compiler.languages.registry import (
    Declaration,
    Item,
    Language,
    Option,
    Outputs,
    declaration_for_path,
    declarations,
    get_language,
    language_for_path,
    language_of_model,
    language_of_program,
    languages,
    register,
)

register(CRASP)
register(PCOC)

__all__ = [
    "Declaration",
    "Item",
    "Language",
    "Option",
    "Outputs",
    "declaration_for_path",
    "declarations",
    "get_language",
    "language_for_path",
    "language_of_model",
    "language_of_program",
    "languages",
    "register",
]
