"""A PCOC program with its declared bound replaced (fine-tuning a compiled model of values
smaller than the task programs' bounds: ``crasp_compiler.experiments.train.finetune``)."""

from __future__ import annotations

import math
from typing import cast

from crasp_compiler.errors import CraspError
from crasp_compiler.languages.pcoc.nodes import Program
from crasp_compiler.languages.pcoc.program import parse_program
from crasp_compiler.languages.pcoc.syntax import parse_tree


def declared_bound(program: Program) -> float:
    """The one bound B that every input and bounded slot of ``program`` declares
    (CraspError if there is none or they differ)."""
    bounds = {slot.bound for slot in program.slots if slot.bound is not None}
    inputs = {program.slot(name).bound for name in program.inputs}
    if len(bounds) != 1 or inputs != bounds:
        raise CraspError(
            f"{program.filename}: re-bounding needs one bound declared on every input and "
            f"bounded slot, not {sorted(bounds | inputs, key=str)}"
        )
    return float(bounds.pop())


def rebound_program(program: Program, bound: float) -> Program:
    """``program`` with its declared bound B replaced by ``bound``: every number literal
    equal to B (the slots' bounds, and the defaults and initial values ±B that must
    dominate every value, as in the task programs) becomes ``bound``; the rewritten text
    is parsed and checked again. Literals equal to B are taken to mean the bound."""
    if not (math.isfinite(bound) and bound > 0):
        raise CraspError(f"the bound must be a finite number > 0, not {bound!r}")
    old = declared_bound(program)
    literals = [
        token
        for token in parse_tree(program.source, program.filename).scan_values(
            lambda v: getattr(v, "type", None) == "NUMBER"
        )
        if float(token) == old
    ]
    text = program.source
    # a lexed token has its position (lark types it optional for tokens made by hand)
    for token in sorted(literals, key=lambda t: cast(int, t.start_pos), reverse=True):
        text = text[: token.start_pos] + repr(float(bound)) + text[token.end_pos :]
    return parse_program(text, f"{program.filename} (bound {bound:g})")
