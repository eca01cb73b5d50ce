"""Lowering: source IR to cookbook blocks on a builder."""

from crasp_compiler.lower.crasp import lower_program

__all__ = ["lower_program"]
