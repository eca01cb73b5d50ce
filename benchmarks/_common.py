"""Helpers shared by the benchmark scripts: example discovery and run provenance."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES_DIR = ROOT / "examples" / "crasp"


def example_names() -> list[str]:
    return sorted(p.name for p in EXAMPLES_DIR.iterdir() if p.suffix in (".crasp", ".cr"))


def machine() -> dict:
    """CPU model, core count, Python and numpy versions, BLAS thread setting."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
    }


def revision() -> dict:
    """The git commit and whether ``crasp_compiler/`` differs from it."""

    def git(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
            )
        except (OSError, subprocess.CalledProcessError):
            return ""
        return done.stdout.strip()

    return {
        "commit": git("rev-parse", "HEAD") or None,
        "compiler_modified": bool(git("status", "--porcelain", "--", "crasp_compiler")),
    }


def provenance_line(data: dict) -> str:
    """One markdown line saying when, where and on which revision a run was made."""
    m, r = data["machine"], data.get("revision", {})
    commit = (r.get("commit") or "unknown")[:10]
    dirty = " (with uncommitted changes in crasp_compiler/)" if r.get("compiler_modified") else ""
    return (
        f"_{data['date']} · {m['cpu']}, {m['cores']} cores · Python {m['python']}, "
        f"numpy {m['numpy']} · commit {commit}{dirty} · `{data['command']}`_"
    )
