"""Runtimes for compiled models: one forward pass (:mod:`.forward`) over an array shim
(:mod:`.backend`), run by the numpy reference executor (:mod:`.numpy_exec`) and the torch
module (:mod:`.torch_module`, which needs torch)."""

from crasp_compiler.runtime.forward import Observer
from crasp_compiler.runtime.numpy_exec import (
    HARD_TOLERANCE,
    RunResult,
    beyond_guarantee,
    decide,
    numeric_matrix,
    run,
)

__all__ = [
    "HARD_TOLERANCE",
    "Observer",
    "RunResult",
    "beyond_guarantee",
    "decide",
    "numeric_matrix",
    "run",
]
