"""The examples in the public API's docstrings run as written, from the repository root."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import crasp_compiler.api

ROOT = Path(__file__).resolve().parents[1]


def test_api_docstrings_run(monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    result = doctest.testmod(crasp_compiler.api, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 7
    assert result.failed == 0


@pytest.mark.parametrize(
    ("module", "old", "new"),
    [
        ("crasp_compiler.runtime", "run", "run_tokens"),
        ("crasp_compiler.runtime.numpy_exec", "run", "run_tokens"),
        ("crasp_compiler.model", "load_model", "read_model"),
        ("crasp_compiler.model.io", "load_model", "read_model"),
    ],
)
def test_an_old_name_still_works_for_one_release_with_a_warning(module, old, new):
    """One name per concept in the public API: the lower-level ``run`` and ``load_model``
    became ``run_tokens`` and ``read_model`` (``crasp_compiler.run`` and
    ``crasp_compiler.load_model`` are the language-aware ones)."""
    package = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=f"{module}.{old} is deprecated: use .*{new}"):
        assert getattr(package, old) is getattr(package, new)
    with pytest.raises(AttributeError):
        package.no_such_name  # noqa: B018
