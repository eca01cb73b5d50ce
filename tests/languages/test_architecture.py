"""The package's shape: the language registry drives everything, there are no import
cycles, and the compiler core runs without the experiment stack."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crasp_compiler.errors import CraspError
from crasp_compiler.languages import (
    Declaration,
    declarations,
    get_language,
    language_for_path,
    language_of_model,
    languages,
)
from crasp_compiler.languages.crasp import lower as crasp_lower
from crasp_compiler.languages.pcoc import lower as pcoc_lower
from crasp_compiler.model import Provenance

ROOT = Path(__file__).resolve().parents[2]


def test_core_runs_without_the_experiment_stack():
    code = (
        "import sys\n"
        "import crasp_compiler, crasp_compiler.cli\n"
        "from crasp_compiler import load, compile, run, interpret\n"
        "p = load('examples/crasp/dyck1.cr')\n"
        "assert run(compile(p), [['(', ')']]).values['D'][0, -1]\n"
        "q = load('examples/pcoc/cumsum.pcoc')\n"
        "assert list(run(compile(q, n=4), [[[1, 2, 3, 4]]]).values['x'][0]) == [1, 3, 6, 10]\n"
        "assert list(interpret(q, [1, 2, 3, 4]).outputs['x']) == [1, 3, 6, 10]\n"
        "heavy = [m for m in ('torch', 'tqdm', 'matplotlib', 'ray') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(shutil.which("lint-imports") is None, reason="import-linter not installed")
def test_no_import_cycles_no_experiment_stack_in_the_core_and_one_lark_importer():
    proc = subprocess.run(
        ["lint-imports", "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 kept, 0 broken" in proc.stdout


def test_registry_lookups():
    assert [language.name for language in languages()] == ["crasp", "pcoc"]
    assert language_for_path("x.cr").name == language_for_path("x.crasp").name == "crasp"
    assert language_for_path("x.pcoc").name == "pcoc"
    assert get_language("C-RASP").name == "crasp" and get_language("PCOC").name == "pcoc"
    with pytest.raises(CraspError, match=r"unknown program suffix '\.txt'"):
        language_for_path("x.txt")
    with pytest.raises(CraspError, match="unknown language 'lisp'"):
        get_language("lisp")


def test_languages_are_declared_and_imported_on_first_use():
    code = (
        "import sys\n"
        "from crasp_compiler.languages import declarations, language_for_path\n"
        "from crasp_compiler.languages import language_of_program\n"
        "from crasp_compiler.languages.pcoc import parse_program\n"
        "impl = ['crasp_compiler.languages.crasp.language',\n"
        "        'crasp_compiler.languages.pcoc.language']\n"
        "assert [d.name for d in declarations()] == ['crasp', 'pcoc']\n"
        "assert not [m for m in impl if m in sys.modules]\n"
        "assert language_for_path('x.cr').name == 'crasp'\n"
        "assert [m for m in impl if m in sys.modules] == impl[:1]\n"
        "program = parse_program(open('examples/pcoc/cumsum.pcoc').read())\n"
        "assert language_of_program(program).name == 'pcoc'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    for declared in declarations():  # a declaration is what its language says of itself
        language = get_language(declared.name)
        assert Declaration.of(language) == dataclasses.replace(declared, implementation="")
    lowerings = {"crasp": crasp_lower.MODES, "pcoc": pcoc_lower.MODES}
    assert {name: set(get_language(name).modes) for name in lowerings} == {
        name: set(modes) for name, modes in lowerings.items()
    }


def test_one_api_for_both_languages(tmp_path):
    from crasp_compiler import api

    crasp = api.load("examples/crasp/dyck1.cr")
    pcoc = api.load((ROOT / "examples/pcoc/cumsum.pcoc").read_text(), language="pcoc")
    assert api.check(crasp)[0].startswith("  class:")
    assert any("rounds:      2 for n = 4" in line for line in api.check(pcoc, n=4))
    model = api.compile(pcoc, n=4)
    assert language_of_model(model).name == "pcoc"
    assert api.interpret(crasp, ["(", ")"]).accepted
    with pytest.raises(CraspError, match="takes no option"):
        api.compile(crasp, n=4)
    with pytest.raises(CraspError, match="needs language="):
        api.load("x = # a\n")
    path = tmp_path / "m.npz"
    from crasp_compiler.model import save_model

    save_model(model, path)
    assert api.load_model(path).provenance == Provenance("PCOC", "hard", 4)
    assert api.compile(crasp).provenance == Provenance("C-RASP", "heaviside", None)
    from crasp_compiler import Builder

    assert Builder(["a"]).build({}).provenance is None  # built by hand
