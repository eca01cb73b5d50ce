"""Writing an export directory safely.

The files are written into a fresh directory next to the target, which is renamed into
place only once they are complete: a failure (a full disk) leaves no half-written export
and any previous export as it was. A re-export replaces the previous export completely
(no stale weights file of another format stays behind). A non-empty directory that is not
a previous export (torch or lens) is never overwritten. Every file written has the mode
``0o666 & ~umask`` of a new file, whatever mode the library writing it chose.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

from crasp_compiler.errors import CraspError
from crasp_compiler.files import set_new_file_modes

CONFIG_FILE = "config.json"
EXPORT_FILES = (CONFIG_FILE, "model.safetensors", "model.pt", "tokenizer.json")
EXPORT_FORMATS = ("crasp-torch-export", "crasp-lens-export")


def write_export(out_dir: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(directory)`` on a fresh directory, then put it in place of
    ``out_dir``; any failure raises :class:`CraspError` naming ``out_dir``."""
    out = Path(out_dir)
    target = Path(os.path.realpath(out))  # a link to a directory: replace the directory
    try:
        _check_target(out, target)
        target.parent.mkdir(parents=True, exist_ok=True)
        fresh = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
        fresh.mkdir()
        try:
            write(fresh)
            set_new_file_modes(fresh)  # safetensors writes owner-only files
            if target.is_dir():
                fresh.chmod(target.stat().st_mode & 0o7777)
            _swap(fresh, target)
        finally:
            shutil.rmtree(fresh, ignore_errors=True)
    except _write_errors() as err:
        raise CraspError(f"cannot write export {out}: {err}", filename=str(out)) from None
    return out


def _write_errors() -> tuple[type[Exception], ...]:
    """What a failed write raises: OSError, torch's RuntimeError, safetensors' own."""
    try:
        from safetensors import SafetensorError
    except ImportError:
        return (OSError, RuntimeError)
    return (OSError, RuntimeError, SafetensorError)


def _check_target(out: Path, target: Path) -> None:
    """Refuse a target that is not a directory, or a non-empty directory that is not a
    previous export (only its files, and a ``config.json`` of an export format)."""
    if not target.exists():
        return
    if not target.is_dir():
        raise CraspError(f"cannot export to {out}: it is not a directory", filename=str(out))
    names = sorted(path.name for path in target.iterdir())
    unknown = [name for name in names if name not in EXPORT_FILES]
    if names and (unknown or not _is_export(target / CONFIG_FILE)):
        shown = ", ".join(unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        held = f" (it holds {shown})" if unknown else ""
        raise CraspError(
            f"cannot export to {out}: the directory is not empty and is not a previous "
            f"crasp export{held}; choose a new or an empty directory",
            filename=str(out),
        )


def _is_export(config: Path) -> bool:
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("format") in EXPORT_FORMATS


def _swap(fresh: Path, target: Path) -> None:
    """Rename ``fresh`` to ``target``; a previous ``target`` is moved aside first, put
    back when the rename fails and removed when it succeeds."""
    if not target.exists():
        fresh.rename(target)
        return
    old = target.parent / f".{target.name}.{secrets.token_hex(4)}.old"
    target.rename(old)
    try:
        fresh.rename(target)
    except OSError:
        old.rename(target)
        raise
    shutil.rmtree(old, ignore_errors=True)
