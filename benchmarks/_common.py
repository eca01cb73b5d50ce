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


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the OS does not report them)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine() -> dict:
    """CPU model, core count, memory, Python and numpy versions, BLAS thread setting,
    and the load average when the run started."""
    cpu, memory = "unknown", None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = round(int(line.split()[1]) / 2**20, 1)  # kB -> GiB
                break
    except (OSError, ValueError, IndexError):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": memory,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "load_average_start": load_average(),
    }


def revision() -> dict:
    """The git commit of the checkout the scripts run from, whether ``crasp_compiler/``
    or ``benchmarks/`` differ from it, and the ``crasp_compiler`` package actually
    imported (it must lie in that checkout for the commit to describe it)."""

    def git(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
            )
        except (OSError, subprocess.CalledProcessError):
            return ""
        return done.stdout.strip()

    import crasp_compiler
    from crasp_compiler.experiments.train.provenance import sent_commit

    package = Path(crasp_compiler.__file__).resolve()
    if sent := sent_commit():  # a tree sent to a GPU machine
        return {"commit": sent, "sent_tree": True, "crasp_compiler_file": "sent tree"}
    return {
        "commit": git("rev-parse", "HEAD") or None,
        "compiler_modified": bool(git("status", "--porcelain", "--", "crasp_compiler")),
        "benchmarks_modified": bool(git("status", "--porcelain", "--", "benchmarks")),
        # repository-relative, so that no record names a machine's folders
        "crasp_compiler_file": str(package.relative_to(ROOT))
        if package.is_relative_to(ROOT)
        else "outside this checkout",
    }


def provenance_line(data: dict) -> str:
    """One markdown line saying when, where and on which revision a run was made."""
    m, r = data["machine"], data.get("revision", {})
    commit = (r.get("commit") or "unknown")[:10]
    dirty = " (with uncommitted changes in crasp_compiler/)" if r.get("compiler_modified") else ""
    if r.get("benchmarks_modified"):
        dirty += " (benchmark scripts newer than the commit)"
    return (
        f"_{data['date']} · {m['cpu']}, {m['cores']} cores · Python {m['python']}, "
        f"numpy {m['numpy']} · commit {commit}{dirty} · `{data['command']}`_"
    )
