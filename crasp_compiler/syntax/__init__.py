"""Surface syntax: the Lark grammar and a parser that reports errors with locations."""

from crasp_compiler.syntax.parser import parse_tree

__all__ = ["parse_tree"]
