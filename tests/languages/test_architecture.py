"""The package's shape: the language registry drives everything, there are no import
cycles, and the compiler core runs without the experiment stack."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
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
def test_no_import_cycles_no_experiment_stack_in_the_core_one_lark_importer_and_no_internals():
    proc = subprocess.run(
        ["lint-imports", "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 kept, 0 broken" in proc.stdout


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


def test_what_tools_read_from_programs_and_models():
    """The registry's members that ``crasp show`` and the experiments read (they import no
    module of a language): definitions, dependencies, theory, bounds, counts, routing."""
    crasp, pcoc = get_language("crasp"), get_language("pcoc")
    dyck = crasp.load(ROOT / "examples/crasp/dyck1.cr")
    sorts = crasp.definition_sorts(dyck)
    assert sorts == {
        "C_open": "count",
        "C_close": "count",
        "V": "bool",
        "CV": "count",
        "M": "bool",
        "B": "bool",
        "D": "bool",
    }
    values = crasp.definition_values(dyck, [["(", ")"], [")", "("]])
    assert list(values) == list(sorts) and values["D"].tolist() == [
        [True, False, True],
        [True, False, False],
    ]
    patched = crasp.definition_values(dyck, [["(", ")"]], {"V": np.ones((1, 3), dtype=bool)})
    assert patched["CV"].tolist() == [[0, 1, 2]]  # V counted at every token
    assert (
        crasp.dependencies(dyck)["D"] == {"M", "B"} and crasp.dependencies(dyck)["C_open"] == set()
    )
    assert crasp.theory(dyck)["class"] == "C-RASP[∅]"
    model = crasp.compile(dyck)
    assert {"C_open", "C_close", "CV"} <= crasp.count_forms(model)
    assert crasp.routing_labels(model) is None and crasp.input_bounds(dyck) == {}
    with pytest.raises(CraspError, match="no bounds"):
        crasp.rebound(dyck, 10.0)

    cummax = pcoc.load(ROOT / "examples/pcoc/cummax.pcoc")
    assert pcoc.input_bounds(cummax) == {"x": 1e9}
    assert "x bound 100.0" in pcoc.rebound(cummax, 100.0).source
    assert pcoc.definition_sorts(cummax) == {} and pcoc.dependencies(cummax) == {}
    assert pcoc.theory(cummax) is None and pcoc.require_tokens(cummax) is cummax
    with pytest.raises(CraspError, match="no named definitions"):
        pcoc.definition_values(cummax, [])
    permute = pcoc.load(ROOT / "examples/pcoc_sends/permute.pcoc")
    routed = pcoc.compile(permute, n=4)
    assert set(pcoc.routing_labels(routed).values()) == {"send x to d"}
    assert pcoc.count_forms(routed) is None


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
