"""Assembly: circuits of blocks to layered models."""

from crasp_compiler.assemble.assemble import assemble_layers, schedule

__all__ = ["assemble_layers", "schedule"]
