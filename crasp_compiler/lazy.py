"""Names a package exports but imports on first use (PEP 562): a ``crasp`` command
imports :mod:`crasp_compiler` and the packages on its way, and pays only for what it
runs."""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def exports(package: str, sources: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each name of ``sources`` is imported from
    the module it maps to on first use, and then kept in the package."""

    def __getattr__(name: str) -> Any:
        if name not in sources:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(sources[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


def deprecated(module: str, renamed: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module`` that still answers the old names of
    ``renamed`` (old -> new), each with a :class:`DeprecationWarning` naming the new one
    (kept one release, then removed)."""

    def __getattr__(name: str) -> Any:
        if name not in renamed:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        new = renamed[name]
        warnings.warn(
            f"{module}.{name} is deprecated: use {module}.{new}", DeprecationWarning, stacklevel=2
        )
        return getattr(sys.modules[module], new)

    return __getattr__
