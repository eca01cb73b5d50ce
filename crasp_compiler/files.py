"""Writing files safely: model files, and every file the training harness writes
(models, checkpoints, JSON, plots), are written to a temporary file in their directory
(:func:`replacing`; :func:`write_bytes` for data serialised in memory), then renamed over
the target. So an interrupted or failed write
(Ctrl-C, a full disk) leaves the old file whole or no file at all, never a truncated one,
and a write error is always an ``OSError`` here (torch and matplotlib raise other kinds
when they write files themselves), reported as a :class:`CraspError` naming the file.
Every file written has the usual mode ``0o666 & ~umask`` (:func:`new_file_mode`), also
where a library writing it chose another (safetensors writes ``0o600``)."""

from __future__ import annotations

import os
import re
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


def new_file_mode() -> int:
    """The mode of a new file: ``0o666 & ~umask`` (the umask read from
    ``/proc/self/status`` where there is one, else set and restored)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            line = next(line for line in status if line.startswith("Umask:"))
        umask = int(line.split()[1], 8)
    except (OSError, StopIteration, ValueError, IndexError):
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o666 & ~umask


def set_new_file_modes(directory: Path) -> None:
    """Give every file directly in ``directory`` the mode of a new file
    (:func:`new_file_mode`)."""
    mode = new_file_mode()
    for path in directory.iterdir():
        if path.is_file() and not path.is_symlink():
            path.chmod(mode)


@contextmanager
def replacing(path: str | Path, what: str = "") -> Iterator[Path]:
    """A temporary path next to ``path``: write it in the ``with`` block; when the block
    succeeds it replaces ``path`` at once, otherwise it is removed. An ``OSError`` in the
    block or the rename is raised as a :class:`CraspError` naming ``path`` (and ``what``
    it is: ``cannot write model file: ...``)."""
    path = Path(path)
    action = f"cannot write {what}" if what else "cannot write"
    tmp = path.with_name(f".{path.name}.{os.urandom(4).hex()}.tmp")
    try:  # mode 0o666 less the umask, as for any new file (mkstemp would give 0o600)
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except OSError as err:
        raise CraspError(f"{action}: {err.strerror or err}", filename=str(path)) from None
    try:
        yield tmp
        with open(tmp, "rb") as written:  # on disk before it replaces the old file
            os.fsync(written.fileno())
        tmp.chmod(new_file_mode())  # a library may have recreated it with its own mode
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


_JSON_MARKS = re.compile(r'"(?:[^"\\]|\\.)*"|[][{}:,]')


def json_nesting(text: str, limit: int) -> str:
    """Where the JSON ``text`` first nests deeper than ``limit`` levels, as the path of
    keys and indices that leads there (``cfg.attn_only[0][0]…``), read without recursion
    and without parsing (for the message when ``json.loads`` raises ``RecursionError``);
    ``""`` when it does not, or when the text is a list (no field names it)."""
    open_: list[list[object]] = []  # per open container: its bracket, the current child
    last = ""
    for mark in _JSON_MARKS.finditer(text):
        token = mark.group()
        if token[0] == '"':
            last = token[1:-1]
        elif token in "[{":
            open_.append([token, 0 if token == "[" else ""])
            if len(open_) > limit:
                break
        elif token in "]}":
            if open_:
                open_.pop()
        elif open_ and token == ":":
            open_[-1][1] = last
        elif open_ and token == "," and open_[-1][0] == "[":
            open_[-1][1] = int(str(open_[-1][1])) + 1
    else:
        return ""
    if open_[0][0] == "[":
        return ""
    parts = [f"[{child}]" if bracket == "[" else f".{child}" for bracket, child in open_[:-1]]
    shown = "".join(parts[:6]) + ("…" if len(parts) > 6 else "")
    return shown[1:]
