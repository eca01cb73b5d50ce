"""Source languages: one folder each, registered here (see :mod:`.registry`).

A new language is a folder beside ``crasp/`` and ``pcoc/`` with its grammar, nodes,
checker, interpreter, lowering and compile entry, plus a
:class:`~crasp_compiler.languages.registry.Language` object registered below.
"""

from crasp_compiler.languages.crasp.language import CRASP
from crasp_compiler.languages.pcoc.language import PCOC
from crasp_compiler.languages.registry import (
    Item,
    Language,
    Option,
    Outputs,
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
    "Item",
    "Language",
    "Option",
    "Outputs",
    "get_language",
    "language_for_path",
    "language_of_model",
    "language_of_program",
    "languages",
    "register",
]
