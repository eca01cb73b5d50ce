"""The memory budget of work whose size the input decides: running a model on long
inputs, interpreting a program at a large ``n``, drawing a long trace. Each such command
estimates the bytes it will hold from the model and the input *before* allocating, and
:func:`require_memory` refuses an estimate above the budget with one line naming what
needs it, how much, and the variable that sets the limit.

The budget is ``$CRASP_MAX_MEMORY`` (bytes, or a number with a ``K``/``M``/``G``/``T``
suffix in powers of 1,024), else :data:`MEMORY_BUDGET` (4 GiB). A ``MemoryError`` that
escapes an estimate is still caught at the command line (:mod:`crasp_compiler.cli`)."""

from __future__ import annotations

import os

from crasp_compiler.errors import CraspError

MEMORY_BUDGET = 4 << 30
MEMORY_VARIABLE = "CRASP_MAX_MEMORY"
_SUFFIXES = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}


def memory_budget() -> int:
    """The most bytes one command may plan to hold: ``$CRASP_MAX_MEMORY`` or 4 GiB."""
    text = os.environ.get(MEMORY_VARIABLE)
    if text is None:
        return MEMORY_BUDGET
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    suffix = value[-1:] if value[-1:] in _SUFFIXES else ""
    number = value[: len(value) - len(suffix)].strip()
    if not number.isdecimal():
        raise CraspError(
            f"{MEMORY_VARIABLE}={text!r} is not a size (bytes, or a number with K, M, G or T)"
        )
    return int(number) << _SUFFIXES[suffix]


def format_bytes(count: float) -> str:
    """``count`` bytes in the largest binary unit that keeps it at least 1 (``3.2 GiB``)."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift:
            return f"{count / (1 << shift):.3g} {unit}"
    return f"{int(count)} bytes"


def require_memory(needed: float, what: str, filename: str = "<input>") -> None:
    """CraspError when ``needed`` bytes (an estimate made before allocating) exceed the
    budget: ``WHAT needs about N GiB; the limit is M (set CRASP_MAX_MEMORY)``."""
    budget = memory_budget()
    if needed > budget:
        raise CraspError(
            f"{what} needs about {format_bytes(needed)}; the limit is {format_bytes(budget)} "
            f"(set {MEMORY_VARIABLE}, e.g. {MEMORY_VARIABLE}=16G, to allow more)",
            filename=filename,
        )
