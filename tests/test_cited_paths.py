"""Every repository path the docs, examples and code cite exists, and no committed text
names a path of a particular machine."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# a path inside the repository, as the docs and docstrings cite them
CITED = re.compile(
    r"(?<![\w/.-])((?:crasp_compiler|tests|benchmarks|examples|docs)/[\w./-]*?"
    r"\.(?:py|md|cr|crasp|pcoc|json|toml|lark|png|svg|html))(?![\w.])"
)
# the home or work folder of some machine (POSIX or Windows)
MACHINE = re.compile(r"(?<![\w.])(?:/home/\w|/root/|/Users/\w|/work/\w|[A-Z]:\\\\Users)")
TEXT = (".md", ".py", ".toml", ".json", ".cr", ".crasp", ".pcoc", ".txt", ".lark", ".cfg")


def _tracked() -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / line for line in out.splitlines() if line.endswith(TEXT)]


def test_every_cited_path_exists() -> None:
    """Docs, examples, the package and the benchmarks (the tests write scratch paths of
    their own, placeholders such as NAME are not paths, and the raw records under
    docs/results/ quote what their run saw)."""
    missing = []
    for path in _tracked():
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(("tests/", "docs/results/")) or not path.exists():
            continue
        for match in CITED.finditer(path.read_text(errors="replace")):
            cited = match.group(1)
            if not re.search(r"[A-Z]{3,}", cited) and not (ROOT / cited).exists():
                missing.append(f"{relative}: {cited}")
    assert not missing, "\n".join(missing)


def test_no_machine_paths() -> None:
    found = []
    for path in _tracked():
        if not path.exists() or path == Path(__file__).resolve():  # its own pattern
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if MACHINE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}")
    assert not found, "\n".join(found)
