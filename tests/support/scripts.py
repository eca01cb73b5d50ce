"""Benchmark scripts imported as modules by the tests of their pure helpers."""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@functools.cache
def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/NAME.py`` as a module, imported with ``benchmarks/`` on the path; the
    thread settings it puts in the environment at import are taken back out."""
    script = BENCHMARKS / f"{name}.py"
    saved = dict(os.environ)
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(f"crasp_{name}", script)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
        os.environ.clear()
        os.environ.update(saved)
    return module
