"""Runtimes for compiled models: one forward pass (:mod:`.forward`) over an array shim
(:mod:`.backend`), run by the numpy reference executor (:mod:`.numpy_exec`) and the torch
module (:mod:`.torch_module`, which needs torch).

``run`` is the old name of :func:`run_tokens` (deprecated: ``crasp_compiler.run`` runs a
model on any language's inputs; this one takes token lists).
"""

from crasp_compiler.lazy import deprecated
from crasp_compiler.runtime.forward import Observer
from crasp_compiler.runtime.numpy_exec import (
    HARD_TOLERANCE,
    RunResult,
    beyond_guarantee,
    decide,
    numeric_matrix,
    run_tokens,
)

__all__ = [
    "HARD_TOLERANCE",
    "Observer",
    "RunResult",
    "beyond_guarantee",
    "decide",
    "numeric_matrix",
    "run_tokens",
]

__getattr__ = deprecated(__name__, {"run": "run_tokens"})
