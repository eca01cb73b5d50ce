"""Surface syntax, shared by the languages: one recovering Lark front end
(:class:`~crasp_compiler.syntax.engine.Frontend`), configured by each language next to its
grammar, and Lark helpers (:mod:`~crasp_compiler.syntax.lark_tools`)."""

from crasp_compiler.syntax.engine import MAX_ERRORS, Frontend
from crasp_compiler.syntax.lark_tools import span

__all__ = ["MAX_ERRORS", "Frontend", "span"]
