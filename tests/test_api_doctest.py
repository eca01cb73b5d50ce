"""The examples in the public API's docstrings run as written, from the repository root."""

from __future__ import annotations

import doctest
from pathlib import Path

import crasp_compiler.api

ROOT = Path(__file__).resolve().parents[1]


def test_api_docstrings_run(monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    result = doctest.testmod(crasp_compiler.api, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 7
    assert result.failed == 0
