"""Assembly: blocks on named variables to layered models, and the builder API."""

from crasp_compiler.assemble.assemble import assemble_layers, schedule
from crasp_compiler.assemble.builder import Builder

__all__ = ["Builder", "assemble_layers", "schedule"]
