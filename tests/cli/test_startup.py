"""A ``crasp`` command imports only what it runs: its language (not the other's front
end), no experiment stack, scipy only for a model with sparse weights, no parser to run a
model, and the Lark parse tables from the cache on disk. Checked in fresh interpreters by what is in
``sys.modules`` after the command, and by CPU time against ``import numpy`` (never by
wall-clock time)."""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from crasp_compiler.errors import CraspError
from crasp_compiler.experiments.cli import COMMANDS
from crasp_compiler.languages.crasp.compile import compile_program
from crasp_compiler.languages.crasp.program import load_program
from crasp_compiler.languages.crasp.syntax import CRASP_SYNTAX
from crasp_compiler.model import model as model_module
from crasp_compiler.model import save_model

ROOT = Path(__file__).resolve().parents[2]
DYCK = ROOT / "examples" / "crasp" / "dyck1.cr"

# `crasp ARGS` in a fresh interpreter; its last line of output: the modules it imported
PROBE = (
    "import json, sys\n"
    "from crasp_compiler.cli import main\n"
    "try:\n"
    "    main(sys.argv[1:], prog_name='crasp')\n"
    "except SystemExit as exit:\n"
    "    assert not exit.code, exit.code\n"
    "print(json.dumps(sorted(sys.modules)))\n"
)

# what no command below imports
NEVER = {"torch", "scipy", "matplotlib", "tqdm", "ray", "crasp_compiler.experiments"}
PCOC = {
    "crasp_compiler.languages.pcoc.language",
    "crasp_compiler.languages.pcoc.build",
    "crasp_compiler.languages.pcoc.syntax",
}
COMPILER = {
    "crasp_compiler.languages.crasp.compile",
    "crasp_compiler.cookbook",
    "crasp_compiler.assemble",
}
PARSER = {"lark", "crasp_compiler.syntax", "crasp_compiler.languages.crasp.build"}


def crasp(*args: object) -> tuple[str, set[str]]:
    """The output of ``crasp ARGS`` run in a fresh interpreter, and its modules."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    *lines, modules = proc.stdout.splitlines()
    return "\n".join(lines), set(json.loads(modules))


@pytest.fixture(scope="module")
def dyck_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("startup") / "dyck1.npz"
    save_model(compile_program(load_program(DYCK)), path)
    return path


def test_compile_imports_crasp_and_its_compiler_only(tmp_path):
    # --output: click reads `-o` as a long option first and imports difflib to suggest one
    output, modules = crasp("compile", DYCK, "--output", tmp_path / "dyck1.npz")
    assert output.startswith(f"{tmp_path / 'dyck1.npz'}: 2 layers")
    assert modules >= COMPILER  # what it runs
    assert not modules & (NEVER | PCOC | {"crasp_compiler.runtime"})
    # lark without the optional `regex` (crasp_compiler.syntax), difflib only on an error
    assert "regex" not in modules and "difflib" not in modules


def test_run_imports_the_runtime_and_not_the_compiler_or_the_parser(dyck_model):
    """A run reads the model's weights, not its source: no Lark, no C-RASP front end."""
    output, modules = crasp("run", dyck_model, "( )")
    assert output == "True"
    assert "crasp_compiler.runtime.numpy_exec" in modules
    assert not modules & (NEVER | PCOC | COMPILER | PARSER)


def test_the_api_compiles_and_runs_a_program_without_the_other_language():
    code = (
        "import json, sys\n"
        "from crasp_compiler import compile, interpret, load, run\n"
        "program = load(sys.argv[1])\n"
        "assert interpret(program, list('()')).accepted\n"
        "assert run(compile(program), [list('()')]).values['D'][0, -1]\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(DYCK)], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert not set(json.loads(proc.stdout)) & (NEVER | PCOC)


def test_help_lists_every_command_and_imports_no_language():
    output, modules = crasp("--help")
    builtin = ["check", "compile", "export", "info", "interpret", "run", "show"]
    listed = [line.split()[0] for line in output.split("Commands:\n")[1].splitlines()]
    assert listed == sorted(builtin + [command.name for command in COMMANDS])
    assert "lark" not in modules
    assert not modules & ((NEVER - {"crasp_compiler.experiments"}) | PCOC | COMPILER)
    assert "crasp_compiler.languages.crasp.language" not in modules


def test_an_experiment_command_is_found_when_named():
    output, modules = crasp("train", "--help")
    assert output.startswith("Usage: crasp train [OPTIONS] [TASK]") and "--steps" in output
    assert "crasp_compiler.experiments.cli" in modules
    assert not modules & {"torch", "matplotlib", "crasp_compiler.languages.crasp.language"}


def test_sparse_weights_load_scipy_when_read(monkeypatch, tmp_path):
    monkeypatch.setattr(model_module, "DENSE_LIMIT", 0)
    path = tmp_path / "sparse.npz"
    model = compile_program(load_program(DYCK))
    assert model.is_sparse()
    save_model(model, path)
    output, modules = crasp("run", path, "( ( ) ) (")
    assert output == "False" and "scipy" in modules
    output, _ = crasp("run", path, "( ( ) )")
    assert output == "True"


# ---------------------------------------------------------------- the parse tables on disk


def fresh_parser(cache: Path, monkeypatch: pytest.MonkeyPatch):
    """A C-RASP front end that has not built its parser yet, caching under ``cache``."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return dataclasses.replace(CRASP_SYNTAX)


def errors(frontend, text: str) -> str:
    with pytest.raises(CraspError) as caught:
        frontend.parse(text, "x.cr")
    return caught.value.format()


BROKEN = 'A = # "a" +\nB = (\n'


def test_regex_stays_importable_after_the_parser():
    """Lark is imported with ``import regex`` failing; ``regex`` itself is untouched."""
    code = (
        "import importlib.util, sys\n"
        "from crasp_compiler.syntax import Tree\n"
        "import lark.utils\n"
        "assert not lark.utils._has_regex and 'regex' not in sys.modules\n"
        "print(importlib.util.find_spec('regex') is None or bool(__import__('regex')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "True", proc.stderr


def test_parse_tables_are_cached_and_give_the_same_parser(monkeypatch, tmp_path):
    built = fresh_parser(tmp_path, monkeypatch)
    tree = built.parse(DYCK.read_text(), "dyck1.cr")
    (cached,) = (tmp_path / "crasp-compiler").glob("crasp-*.lark-cache")
    written = cached.read_bytes()
    loaded = fresh_parser(tmp_path, monkeypatch)
    assert loaded.parse(DYCK.read_text(), "dyck1.cr") == tree
    assert cached.read_bytes() == written  # loaded, not built and written again
    assert errors(loaded, BROKEN) == errors(built, BROKEN)
    assert "expected an expression" in errors(loaded, BROKEN)
    assert list((tmp_path / "crasp-compiler").iterdir()) == [cached]


@pytest.mark.parametrize("damage", ["garbage", "cut short", "empty"])
def test_a_damaged_cache_is_rebuilt(monkeypatch, tmp_path, damage):
    tree = fresh_parser(tmp_path, monkeypatch).parse(DYCK.read_text(), "dyck1.cr")
    (cached,) = (tmp_path / "crasp-compiler").glob("*.lark-cache")
    whole = cached.read_bytes()
    bad = {"garbage": os.urandom(len(whole)), "cut short": whole[: len(whole) // 2]}.get(
        damage, b""
    )
    cached.write_bytes(bad)
    assert fresh_parser(tmp_path, monkeypatch).parse(DYCK.read_text(), "dyck1.cr") == tree
    repaired = cached.read_bytes()  # written again, with its digest first
    assert repaired != bad and repaired.split(b"\n")[0] == whole.split(b"\n")[0]
    assert fresh_parser(tmp_path, monkeypatch).parse(DYCK.read_text(), "dyck1.cr") == tree
    assert cached.read_bytes() == repaired  # loaded, not built and written again


def test_no_cache_where_the_folder_cannot_be_made(monkeypatch, tmp_path):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    frontend = fresh_parser(blocker, monkeypatch)
    assert frontend.parse(DYCK.read_text(), "dyck1.cr") == CRASP_SYNTAX.parse(
        DYCK.read_text(), "dyck1.cr"
    )
    assert blocker.read_text() == ""


# ---------------------------------------------------------------- CPU time


def cpu_seconds(command: list[str]) -> float:
    """User + system CPU time of ``command`` run to completion."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, cwd=ROOT, capture_output=True, check=True, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def test_a_command_costs_a_few_numpy_imports(tmp_path):
    """`crasp compile dyck1.cr` in at most 4× the CPU time of `python -c "import numpy"`
    (about 2× with the package's bytecode cached, 2.9× without; 3.4–4.2× before the imports
    were lazy: a generous bound for busy machines, where CPU time too varies; the imports
    themselves are pinned by the tests above)."""
    numpy = [sys.executable, "-c", "import numpy"]
    command = [sys.executable, "-c", PROBE, "compile", str(DYCK), "-o", str(tmp_path / "m.npz")]
    cpu_seconds(command)  # the parse tables cached
    runs = [(cpu_seconds(numpy), cpu_seconds(command)) for _ in range(5)]
    baseline = [numpy_time for numpy_time, _ in runs]
    if max(baseline) > 1.5 * min(baseline):
        pytest.skip(f"CPU times too noisy to compare: import numpy took {baseline} s")
    ratio = statistics.median(t for _, t in runs) / statistics.median(baseline)
    assert ratio <= 4, f"{ratio:.2f} × import numpy"
