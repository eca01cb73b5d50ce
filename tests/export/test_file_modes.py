"""File modes: every file the project writes (model files, exports of each format, the
training harness's models, records and checkpoints, anything through
:mod:`crasp_compiler.files`) gets the usual ``0o666 & ~umask``, also where the library
writing it chooses another (safetensors writes ``0o600``), so collaborators on shared
storage can read what a group-readable umask lets them."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from crasp_compiler.cli import main
from crasp_compiler.export.lens import export_lens
from crasp_compiler.export.torch_files import export_model
from crasp_compiler.files import new_file_mode, replacing, write_bytes, write_text
from crasp_compiler.model import save_model
from tests.languages.test_compiler import model

UMASKS = [0o022, 0o077, 0o002]


@pytest.fixture(params=UMASKS, ids=oct)
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def modes(directory: Path) -> dict[str, int]:
    """The permission bits of every file under ``directory``, by relative path."""
    return {
        str(path.relative_to(directory)): stat.S_IMODE(path.stat().st_mode)
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def test_the_mode_of_a_new_file_is_0666_less_the_umask(umask):
    assert new_file_mode() == 0o666 & ~umask


@pytest.mark.parametrize("fmt", ["safetensors", "torch", "lens"])
def test_every_export_file_has_the_mode_of_a_new_file(tmp_path, umask, fmt):
    compiled = model("dyck1.cr", "relu")  # a standard model: every format takes it
    out = tmp_path / "export"
    if fmt == "lens":
        export_lens(compiled, out)
    else:
        export_model(compiled, out, fmt)
    written = modes(out)
    weights = "model.pt" if fmt == "torch" else "model.safetensors"
    tokenizer = {"tokenizer.json"} if fmt == "lens" else set()
    assert set(written) == {"config.json", weights, *tokenizer}
    assert written == dict.fromkeys(written, 0o666 & ~umask)
    export_model(compiled, out, "safetensors")  # a re-export replaces it, modes too
    assert modes(out) == dict.fromkeys(["config.json", "model.safetensors"], 0o666 & ~umask)


def test_model_files_and_the_cli_writers_have_the_mode_of_a_new_file(tmp_path, umask):
    save_model(model("dyck1.cr", "heaviside"), tmp_path / "m.npz")
    runner = CliRunner()
    program = Path(__file__).resolve().parents[2] / "examples" / "pcoc" / "cumsum.pcoc"
    result = runner.invoke(
        main, ["compile", str(program), "--n", "4", "-o", str(tmp_path / "c.npz")]
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["export", str(tmp_path / "c.npz"), "-o", str(tmp_path / "e")])
    assert result.exit_code == 0, result.output
    written = modes(tmp_path)
    assert set(written) == {"m.npz", "c.npz", "e/config.json", "e/model.safetensors"}
    assert written == dict.fromkeys(written, 0o666 & ~umask)


def test_a_file_a_library_recreates_owner_only_still_gets_the_mode_of_a_new_file(tmp_path, umask):
    """:func:`replacing` sets the mode after the block: a writer that removes the
    temporary and creates it again ``0o600`` (as safetensors' ``save_file`` does) changes
    nothing."""
    target = tmp_path / "weights.bin"
    with replacing(target) as tmp:
        tmp.unlink()
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        tmp.write_bytes(b"data")
    write_bytes(tmp_path / "checkpoint.pt", b"state")
    write_text(tmp_path / "results.json", "{}")
    assert modes(tmp_path) == dict.fromkeys(
        ["checkpoint.pt", "results.json", "weights.bin"], 0o666 & ~umask
    )


@pytest.mark.usefixtures("one_torch_thread")
def test_training_outputs_have_the_mode_of_a_new_file(tmp_path, umask):
    out = tmp_path / "run"
    tiny = ["--steps", "3", "--eval-every", "3", "--test-size", "10", "--device", "cpu"]
    args = ["train", "tomita2", *tiny, "--quiet", "--bins", "1-8", "--out", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    written = modes(out)
    assert {"model.safetensors", "config.json", "results.json"} <= set(written)
    assert written == dict.fromkeys(written, 0o666 & ~umask)
