"""Adding a language is one module and one ``register`` call: the *ballot* language of
:mod:`tests.support.ballot`, registered before the CLI is imported, gets its suffix, its
option as a flag, check, interpret, compile, run, info and model checks, with nothing
else changed."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BOOT = (
    "import sys\n"
    "from crasp_compiler.languages import register\n"
    "from tests.support.ballot import BALLOT\n"
    "register(BALLOT)\n"
    "from crasp_compiler.cli import main\n"
    "sys.argv[0] = 'crasp'\n"
    "main()\n"
)


def crasp(*args: object, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BOOT, *map(str, args)],
        cwd=ROOT,
        input=input,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_registered_language_works_through_every_command(tmp_path):
    program = tmp_path / "vote.ballot"
    program.write_text("# more yes than no\nyes beats no\n")
    checked = crasp("check", program)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith(f"{program}: ok\n") and "W" in checked.stdout
    assert crasp("interpret", program, "yes no yes").stdout == "True\n"
    assert crasp("interpret", program, "yes no yes", "--margin", "1").stdout == "False\n"
    assert crasp("interpret", program, "--echo", input="yes\nno\n").stdout == (
        "yes\tTrue\nno\tFalse\n"
    )
    model = tmp_path / "vote.npz"
    compiled = crasp("compile", program, "--margin", "1", "-o", model)
    assert compiled.returncode == 0, compiled.stderr
    assert crasp("run", model, "yes yes yes no").stdout == "True\n"
    assert crasp("run", model, "yes yes no").stdout == "False\n"  # a lead of 1 is not > 1
    assert crasp("run", model, "yes no").stdout == "False\n"
    assert "source:      C-RASP[∅]" in crasp("info", model).stdout
    if importlib.util.find_spec("torch") is not None:
        verified = crasp("check", model, "--samples", 20, "--max-len", 16)
        assert verified.returncode == 0, verified.stderr
        assert "runtimes: interpreter, numpy, torch" in verified.stdout


def test_its_option_and_errors_are_its_own(tmp_path):
    crasp_file = ROOT / "examples" / "crasp" / "dyck1.cr"
    misused = crasp("check", crasp_file, "--margin", "2")
    assert misused.returncode == 2
    assert "--margin: only for Ballot programs (.ballot)" in misused.stderr
    bad = tmp_path / "bad.ballot"
    bad.write_text("yes against no\n")
    result = crasp("check", bad)
    assert result.returncode == 1
    assert f"{bad}:1:1: error: a ballot program is one line: X beats Y" in result.stderr


def test_registering_twice_or_a_taken_suffix_is_refused():
    from crasp_compiler.languages import register
    from tests.support.ballot import Ballot

    clash = Ballot()
    clash.suffixes = (".cr",)
    with pytest.raises(ValueError, match="clashes"):
        register(clash)
