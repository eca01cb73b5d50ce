"""Writing results safely (:mod:`crasp_compiler.files`): a file is replaced whole or
not at all, a failed write names the file and keeps what was there, and an output
directory is checked before any work is done."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from crasp_compiler.errors import CraspError
from crasp_compiler.files import replacing, writable_dir, write_text


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_write_text_replaces_the_file(tmp_path):
    path = tmp_path / "results.json"
    write_text(path, "old")
    write_text(path, "new")
    assert path.read_text() == "new"
    assert leftovers(tmp_path) == []


def test_a_failed_write_keeps_the_old_file_and_names_it(tmp_path):
    path = tmp_path / "results.json"
    path.write_text('{"complete": true}')
    with pytest.raises(CraspError) as caught, replacing(path) as tmp:
        tmp.write_text('{"compl')  # half written, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")
    message = caught.value.format()
    assert str(path) in message and "No space left on device" in message
    assert path.read_text() == '{"complete": true}'
    assert leftovers(tmp_path) == []


def test_an_interrupted_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt), replacing(path) as tmp:
        tmp.write_bytes(b"ne")
        raise KeyboardInterrupt
    assert path.read_bytes() == b"old"
    assert leftovers(tmp_path) == []


def test_writable_dir_creates_the_directory_or_names_it(tmp_path):
    assert writable_dir(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert (tmp_path / "a" / "b").is_dir() and list((tmp_path / "a" / "b").iterdir()) == []
    (tmp_path / "file").write_text("x")
    with pytest.raises(CraspError, match="cannot write to the output directory") as caught:
        writable_dir(tmp_path / "file" / "run")
    assert str(tmp_path / "file" / "run") in caught.value.format()
