"""Where a training run was made: what a rerun elsewhere needs to compare against.

Training is deterministic for a given seed on one machine and library build, but not
across them: CPU kernels (oneDNN, BLAS) and library versions change the last bits of the
updates, and over hundreds of steps a seed may flip from success to failure. Every run's
results therefore carry :func:`provenance`: the code (the git commit of the checkout the
package was imported from, and whether it was modified), the versions of Python, numpy
and torch, the CPU, platform and device, torch's thread count and the dtype of training.
Nothing names a machine's folders.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

import crasp_compiler

PACKAGE = Path(crasp_compiler.__file__).resolve().parent


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``, else :func:`platform.processor`)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except (OSError, IndexError):
        pass
    return platform.processor() or "unknown"


def sent_commit() -> str | None:
    """The commit a tree sent to another machine was made from, as its sender gives it in
    ``CRASP_SOURCE_COMMIT`` (a lent GPU machine's copy may carry an older ``.git``)."""
    return os.environ.get("CRASP_SOURCE_COMMIT") or None


def code_revision() -> dict[str, Any]:
    """The commit of the git checkout the package was imported from and whether the
    package differs from it (None for both outside a checkout or without git); a sent
    tree's :func:`sent_commit`, where given, with ``modified`` unknown."""
    if sent := sent_commit():
        return {"commit": sent, "modified": None}

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *args],
                cwd=PACKAGE,
                capture_output=True,
                text=True,
                check=True,
                timeout=30,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    commit = git("rev-parse", "HEAD")
    if not commit:
        return {"commit": None, "modified": None}
    status = git("status", "--porcelain", "--", ".")
    return {"commit": commit, "modified": None if status is None else bool(status)}


def provenance(device: str, dtype: str) -> dict[str, Any]:
    """The record of where and how a run was made (module docstring)."""
    import torch

    out: dict[str, Any] = {
        **code_revision(),
        "package_version": crasp_compiler.__version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "cpu": cpu_model(),
        "platform": platform.platform(),
        "device": device,
        "torch_threads": torch.get_num_threads(),
        "dtype": dtype,
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        out["device_name"] = torch.cuda.get_device_name(torch.device(device))
    return out
