"""Golden files of every stage's output, for every example program of both languages.

Per program, ``data/LANGUAGE/NAME/``: ``ir.txt``, the typed IR the front end builds
(:func:`tests.support.golden.dump`); ``blocks.txt``, the blocks the lowering emits, each
with the slot the assembler gives it (for a PCOC program with data-dependent sends,
``routed.txt`` first: the program with its sends lowered to fixed-pattern rounds); ``model.txt``, the compiled model's every nonzero
weight by labels (:func:`tests.support.golden.dump_model`). A change to any stage shows
as a diff of these files: review it, then ``pytest tests/golden --update-goldens``
rewrites them. PCOC programs are compiled for 4 machines.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from crasp_compiler.assemble.builder import Builder
from crasp_compiler.languages.crasp.compile import compile_program
from crasp_compiler.languages.crasp.lower import lower_program
from crasp_compiler.languages.crasp.program import load_program
from crasp_compiler.languages.pcoc.benes import has_sends, lower_sends
from crasp_compiler.languages.pcoc.compile import compile_program as compile_pcoc
from crasp_compiler.languages.pcoc.lower import lower_pcoc
from crasp_compiler.languages.pcoc.program import load_program as load_pcoc
from crasp_compiler.model import Model
from tests.support.golden import check, dump, dump_model

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
MACHINES = 4


class Stages:
    """One language's front end, rewriting (None where the program needs none), lowering
    and compiler, as the golden files call them."""

    def __init__(
        self,
        parse: Callable[[Path], Any],
        rewrite: Callable[[Any], Any | None],
        lower: Callable[[Any], Builder],
        compile: Callable[[Any], Model],
        patterns: tuple[str, ...],
    ) -> None:
        self.parse, self.rewrite, self.lower = parse, rewrite, lower
        self.compile, self.patterns = compile, patterns


LANGUAGES = {
    "crasp": Stages(
        load_program,
        lambda program: None,
        lambda program: lower_program(program).builder,
        compile_program,
        ("examples/crasp/*.cr", "examples/crasp/*.crasp"),
    ),
    "pcoc": Stages(
        load_pcoc,
        lambda program: lower_sends(program, MACHINES) if has_sends(program) else None,
        lambda program: lower_pcoc(program, MACHINES).builder,
        lambda program: compile_pcoc(program, MACHINES),
        ("examples/pcoc/*.pcoc", "examples/pcoc_sends/*.pcoc"),
    ),
}
PROGRAMS = [
    (language, path)
    for language, stages in LANGUAGES.items()
    for pattern in stages.patterns
    for path in sorted(ROOT.glob(pattern))
]


def blocks_text(builder: Builder) -> str:
    lines = []
    for slot, block in zip(builder.slots(), builder.blocks, strict=True):
        part = "attention" if slot % 2 else "mlp"
        lines.append(f"# layer {(slot + 1) // 2} {part}\n{dump(block)}")
    return "\n".join(lines)


@pytest.fixture
def update(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))


@pytest.mark.parametrize(
    ("language", "path"), PROGRAMS, ids=[f"{lang}-{path.stem}" for lang, path in PROGRAMS]
)
def test_stages(language: str, path: Path, update: bool) -> None:
    stages = LANGUAGES[language]
    folder = DATA / language / path.stem
    program = stages.parse(path)
    check(folder / "ir.txt", dump(program), update)
    routed = stages.rewrite(program)
    if routed is not None:
        check(folder / "routed.txt", dump(routed), update)
    check(folder / "blocks.txt", blocks_text(stages.lower(routed or program)), update)
    check(folder / "model.txt", dump_model(stages.compile(program)), update)


def test_every_golden_folder_has_its_program() -> None:
    """No golden files left behind by a renamed or removed example."""
    names = {(language, path.stem) for language, path in PROGRAMS}
    folders = {(f.parent.name, f.name) for f in DATA.glob("*/*") if f.is_dir()}
    assert folders <= names, sorted(folders - names)


def test_a_changed_stage_fails_with_its_diff(tmp_path: Path) -> None:
    path = tmp_path / "stage.txt"
    check(path, "a\nb", update=True)
    check(path, "a\nb", update=False)
    with pytest.raises(AssertionError, match=r"(?s)-b.*\+c"):
        check(path, "a\nc", update=False)
    with pytest.raises(AssertionError, match="--update-goldens"):
        check(tmp_path / "missing.txt", "a", update=False)
