"""Runtimes for compiled models: the numpy reference executor."""

from crasp_compiler.runtime.numpy_exec import RunResult, run

__all__ = ["RunResult", "run"]
