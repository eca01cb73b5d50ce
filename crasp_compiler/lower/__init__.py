"""Lowering: source IR to circuits of cookbook blocks."""

from crasp_compiler.lower.crasp import Circuit, lower_program

__all__ = ["Circuit", "lower_program"]
