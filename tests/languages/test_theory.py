"""What the theory predicts from a C-RASP program (crasp_compiler.languages.crasp.theory).

The class printed is the program's (an upper bound on the task's) with the paper's
prediction per encoding; a program testing one by one the symbols of an `alphabet range`
(standing in for an alphabet that grows with the input: copy with distinct tokens) gets
none, and is not reported C-RASP[∅]; an undeclared family of per-symbol definitions is
pointed out; `alphabet range` parses, prints back, and refuses bad ranges; registered
tasks and `--program` tasks record their reading in a run's results.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crasp_compiler.errors import CraspError
from crasp_compiler.experiments.tasks.program import ProgramTask, task_theory
from crasp_compiler.experiments.tasks.registry import all_tasks
from crasp_compiler.languages.crasp.printer import format_program
from crasp_compiler.languages.crasp.program import load_program, parse_program
from crasp_compiler.languages.crasp.theory import FAMILY_NOTE, families, reading

ROOT = Path(__file__).resolve().parents[2]
COPY_UNIQUE = ROOT / "crasp_compiler" / "experiments" / "tasks" / "programs" / "algo_copy_unique.cr"


def per_symbol(count: int, ranged: bool) -> str:
    """A program testing ``count`` digit symbols one by one (Had_k = # "k" >= 1)."""
    alphabet = f"range 0..{count - 1}" if ranged else ", ".join(f'"{k}"' for k in range(count))
    lines = [f'alphabet {alphabet}, "SEP"']
    lines += [f'Had_{k} = # "{k}" >= 1' for k in range(count)]
    lines.append('A = # "SEP" >= 1 && Had_0')
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "klass", "nope"),
    [
        ('A = # "a" > # "b"', "C-RASP[∅]", "yes"),
        ('A = "a" && i % 3 == 1', "C-RASP[periodic]", None),
        ("A(i) := #[j <= i, j = i - 1] Q_a(j) > 0", "C-RASP[local]", None),
    ],
)
def test_prediction_follows_the_class(text, klass, nope):
    found = reading(parse_program(text, "p.cr"))
    assert found.relation_class == klass and found.ape == "yes" and found.nope == nope
    assert found.lines[0].startswith(f"{klass} (an upper bound on the task's")
    assert found.lines[1].startswith(f"APE yes, NoPE {nope or 'unknown'}")


def test_copy_unique_is_not_reported_crasp_empty():
    program = load_program(COPY_UNIQUE)
    assert program.relation_class == "C-RASP[∅]"  # as a program over its 152 symbols
    assert len(program.stand_in) == 150
    found = reading(program)
    assert found.ape is None and found.nope is None
    assert found.lines[0].startswith("none for the task (C-RASP[∅] for this 152-symbol alphabet")
    assert found.lines[1].startswith("none: the range stands in")
    # the registry says what the paper proves: APE yes, NoPE no program
    registered = task_theory(all_tasks()["copy_unique"])
    assert registered is not None and registered["nope"] is None


def test_an_undeclared_family_of_per_symbol_definitions_is_pointed_out():
    found = reading(parse_program(per_symbol(FAMILY_NOTE, ranged=False), "p.cr"))
    assert found.nope == "yes" and found.lines[-1].startswith(
        f"note: {FAMILY_NOTE} definitions differ only in the symbol they test"
    )
    fewer = reading(parse_program(per_symbol(FAMILY_NOTE - 1, ranged=False), "p.cr"))
    assert not any(line.startswith("note:") for line in fewer.lines)
    declared = reading(parse_program(per_symbol(FAMILY_NOTE, ranged=True), "p.cr"))
    assert declared.nope is None and declared.lines[0].startswith("none for the task")
    (size, names), *_ = families(parse_program(per_symbol(5, ranged=False), "p.cr"))
    assert size == 5 and "Had_4" in names


def test_a_range_that_is_declared_but_not_tested_one_by_one_keeps_the_prediction():
    text = 'alphabet range 0..9, "a"\nA = # "a" > 0'
    assert reading(parse_program(text, "p.cr")).nope == "yes"


def test_alphabet_range_parses_and_prints_back():
    text = 'alphabet "x", range 0..3, range 7..8, "SEP"\nA = # "0" >= 1 && # "SEP" > 0\n'
    program = parse_program(text, "p.cr")
    assert program.alphabet == ("x", "0", "1", "2", "3", "7", "8", "SEP")
    assert program.stand_in == ("0", "1", "2", "3", "7", "8")
    printed = format_program(program)
    assert printed.startswith('alphabet "x", range 0..3, range 7..8, "SEP"\n')
    assert parse_program(printed, "q.cr") == program
    assert parse_program('range = # "a" > 0', "r.cr").alphabet == ("a",)  # a name still


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('alphabet range 5..3\nA = # "5" > 0', "the range 5..3 is empty"),
        ('alphabet range 0..3, "2"\nA = # "0" > 0', "the alphabet lists '2' twice"),
        ('alphabet range 0..100000\nA = # "0" > 0', "100,001 symbols, more than 100,000"),
    ],
)
def test_bad_ranges_are_refused_without_a_cascade(text, message):
    with pytest.raises(CraspError, match=message) as caught:
        parse_program(text, "p.cr")
    assert len(caught.value.diagnostics) == 1


def test_program_and_registered_tasks_record_their_reading():
    task = ProgramTask.from_file(ROOT / "examples" / "crasp" / "tomita4.crasp")
    theory = task_theory(task)
    assert theory is not None and theory["source"] == "program"
    assert (theory["class"], theory["ape"], theory["nope"]) == ("C-RASP[local]", "yes", None)
    d2 = task_theory(all_tasks()["d2"])
    assert d2 == {
        "source": "registry",
        "class": "C-RASP[∅]",
        "ape": "yes",
        "nope": "yes",
        "text": [],
    }
    assert task_theory(all_tasks()["parity"]) is None  # no C-RASP program
    assert task_theory(all_tasks()["num_cumsum"]) is None  # PCOC
