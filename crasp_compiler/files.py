"""Writing files safely: model files, and every file the training harness writes
(models, checkpoints, JSON, plots), are written to a temporary file in their directory
(:func:`replacing`; :func:`write_bytes` for data serialised in memory), then renamed over
the target. So an interrupted or failed write
(Ctrl-C, a full disk) leaves the old file whole or no file at all, never a truncated one,
and a write error is always an ``OSError`` here (torch and matplotlib raise other kinds
when they write files themselves), reported as a :class:`CraspError` naming the file."""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from crasp_compiler.errors import CraspError


def read_program_text(path: str | Path) -> str:
    """A program file's text (a leading BOM is not program text); CraspError naming the
    file when it cannot be read or is not UTF-8."""
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as err:
        raise CraspError(f"cannot read program: {err}", filename=str(path)) from None


@contextmanager
def replacing(path: str | Path, what: str = "") -> Iterator[Path]:
    """A temporary path next to ``path``: write it in the ``with`` block; when the block
    succeeds it replaces ``path`` at once, otherwise it is removed. An ``OSError`` in the
    block or the rename is raised as a :class:`CraspError` naming ``path`` (and ``what``
    it is: ``cannot write model file: ...``)."""
    path = Path(path)
    action = f"cannot write {what}" if what else "cannot write"
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:  # mode 0o666 less the umask, as for any new file (mkstemp would give 0o600)
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except OSError as err:
        raise CraspError(f"{action}: {err.strerror or err}", filename=str(path)) from None
    try:
        yield tmp
        with open(tmp, "rb") as written:  # on disk before it replaces the old file
            os.fsync(written.fileno())
        os.replace(tmp, path)
    except OSError as err:
        raise CraspError(f"{action}: {err.strerror or err}", filename=str(path)) from None
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` (see :func:`replacing`)."""
    with replacing(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | Path, text: str) -> None:
    """Replace ``path`` with ``text`` in UTF-8."""
    write_bytes(path, text.encode())


def writable_dir(path: str | Path) -> Path:
    """``path``, created if need be and checked writable (a file is created and removed
    there), so an unusable output directory is refused before any work is done."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as err:
        raise CraspError(
            f"cannot write to the output directory: {err.strerror or err}", filename=str(path)
        ) from None
    return path
