"""Surface syntax, shared by the languages: one recovering Lark front end
(:class:`~crasp_compiler.syntax.engine.Frontend`), configured by each language next to its
grammar, and Lark helpers (:mod:`~crasp_compiler.syntax.lark_tools`).

Lark is imported here first, and the languages take its tree types from here
(``Token``, ``Tree``), so that it is imported without the optional ``regex`` module:
lark imports ``regex`` when it is installed, for its ``regex=True`` option and Unicode
categories in grammars, neither of which the project's grammars use; the import cost
about a third of a compile command's own start-up.
"""

import sys


def _import_lark() -> None:
    """Import lark with ``import regex`` failing (``None`` in :data:`sys.modules` makes an
    import raise ``ImportError``); ``regex`` stays importable for everyone else."""
    if "lark" in sys.modules or "regex" in sys.modules:
        return
    sys.modules["regex"] = None  # type: ignore[assignment]  # typeshed has no None here
    try:
        import lark  # noqa: F401
    finally:
        del sys.modules["regex"]


_import_lark()

from lark import Token, Tree  # noqa: E402

from crasp_compiler.syntax.engine import MAX_ERRORS, Frontend  # noqa: E402
from crasp_compiler.syntax.lark_tools import span  # noqa: E402

__all__ = ["MAX_ERRORS", "Frontend", "Token", "Tree", "span"]
