"""``crasp train --program``: any C-RASP program as a task (tasks/program.py).

A tiny run (a few steps, short lengths) through the CLI prints and writes the trained and
compiled accuracies, balanced and per-position accuracy and the agreement per bin; the
labels are the interpreter's; the sampler gives both labels at every length; user errors
are one ``error:`` line, misuse a usage error.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import Result

from crasp_compiler.errors import CraspError
from crasp_compiler.experiments.tasks.program import ProgramTask
from crasp_compiler.experiments.train.data import make_test_sets
from crasp_compiler.experiments.train.evaluate import label_balance, position_scores
from crasp_compiler.languages.crasp import interpret
from tests.support.cli import invoke

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DYCK1 = """// Dyck-1 over {(, )}
C_open = # "("
C_close = # ")"
V = C_open < C_close
CV = # V
M = (CV == 0)
B = (C_open == C_close)
D = M && B
"""
TWO_OUTPUTS = """alphabet "a", "b"
A := #[j <= i] Q_a(j)
B := #[j <= i] Q_b(j)
MORE_A := A > B
EVEN := A == B
output MORE_A, EVEN
"""
TINY = ["--steps", "4", "--eval-every", "4", "--test-size", "12", "--device", "cpu", "--quiet"]


@pytest.fixture
def dyck(tmp_path: Path) -> Path:
    path = tmp_path / "dyck1.cr"
    path.write_text(DYCK1)
    return path


def test_train_on_a_program_prints_and_writes_every_metric(dyck, tmp_path):
    out = tmp_path / "run"
    bins = "--test-bins", "1-8,9-16"
    result = invoke("train", "--program", dyck, "--lengths", "1-8", *bins, *TINY, "--out", out)
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    assert results["task"] == "dyck1" and results["family"] == "program"
    assert results["config"]["train_max"] == 8
    keys = ("accuracy", "balanced_accuracy", "position_accuracy", "compiled_accuracy", "agreement")
    for key in keys:
        assert set(results[key]) == {"1-8", "9-16"}, key
    assert results["compiled_accuracy"] == {"1-8": 1.0, "9-16": 1.0}  # exact on its labels
    assert set(results["label_balance"]["1-8"]["positions"]) == {"0", "1"}
    lines = {line.split()[0]: line.split()[1:] for line in result.output.splitlines() if line}
    assert lines["bin"][:5] == ["trained", "balanced", "positions", "compiled", "agreement"]
    for name in ("1-8", "9-16"):
        expected = [results[key][name] for key in keys]
        shown = [lines[name][k] for k in (0, 1, 2, 3, 4)]
        assert shown == [f"{value:.3f}" for value in expected]


def test_labels_are_the_interpreters_and_multi_output_labels_join_the_outputs(tmp_path):
    path = tmp_path / "two.cr"
    path.write_text(TWO_OUTPUTS)
    task = ProgramTask.from_file(path, lengths=(1, 6))
    assert task.labels == ("00", "01", "10", "11") and task.vocab == ("$", "a", "b")
    rng = np.random.default_rng(0)
    for example in task.sample_batch(rng, [1, 3, 6, 6]):
        trace = interpret(task.crasp, example.tokens[1:])
        expected = [
            f"{int(trace.values['MORE_A'][t])}{int(trace.values['EVEN'][t])}"
            for t in range(len(example.tokens))
        ]
        assert list(example.targets) == expected
        assert example.targets[0] == "01"  # empty prefix: 0 a's, 0 b's


def test_compiled_labels_equal_the_interpreters(dyck):
    task = ProgramTask.from_file(dyck, lengths=(1, 12))
    examples = make_test_sets(task, [(1, 12)], 30, seed=1)["1-12"]
    compiled = task.compiled_labels(examples)
    assert compiled == task.compiled_labels(examples, "interpreter")
    assert compiled == [list(example.targets) for example in examples]


def test_the_sampler_gives_both_labels_at_every_length(dyck):
    task = ProgramTask.from_file(dyck, lengths=(1, 30))
    rng = np.random.default_rng(0)
    for length in range(2, 31):
        batch = task.sample_batch(rng, [length] * 40)
        balance = label_balance(task, batch)
        assert set(balance["positions"]) == {"0", "1"}, length
        if length % 2 == 0:  # an odd-length string is never balanced
            assert 0.1 <= balance["last"].get("1", 0) <= 0.9, (length, balance)


def test_balanced_and_position_accuracy():
    targets = [np.array([0, 0, 0, 1]), np.array([-100, 0])]
    predicted = [np.array([0, 0, 0, 0]), np.array([1, 0])]
    balanced, positions = position_scores(targets, predicted)
    assert balanced == pytest.approx((1.0 + 0.0) / 2) and positions == pytest.approx(4 / 5)


def test_program_errors(dyck, tmp_path):
    bad = tmp_path / "bad.cr"
    bad.write_text("A := #[j <= i] Q_a(j)\nB := A >\n")
    result = invoke("train", "--program", bad, *TINY)
    assert result.exit_code == 1 and "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and f"{bad}:2:" in errors[0], result.stderr

    result = invoke("train", "--program", tmp_path / "missing.cr", *TINY)
    assert result.exit_code == 1 and "missing.cr" in result.stderr
    assert "cannot read program" in result.stderr and "Traceback" not in result.output

    for args in (
        ["tomita2", "--program", dyck],
        [],
        ["tomita2", "--lengths", "1-8"],
        ["--program", dyck, "--train-max", "8"],
        ["--program", dyck, "--lengths", "8"],
    ):
        result = invoke("train", *args, *TINY)
        assert result.exit_code == 2, (args, result.output)
        assert "Error: " in result.stderr and "Traceback" not in result.output


def test_an_edited_program_is_another_run(dyck, tmp_path):
    """The run key records the program's digest: an edited file (or other lengths) never
    resumes from the old program's checkpoint."""
    from crasp_compiler.experiments.train.loop import TrainConfig, train_key

    first = ProgramTask.from_file(dyck)
    assert first.identity == ProgramTask.from_file(dyck).identity
    assert first.identity.startswith("dyck1@")
    assert ProgramTask.from_file(dyck, lengths=(1, 20)).identity != first.identity
    dyck.write_text(DYCK1.replace("D = M && B", "D = M"))
    edited = ProgramTask.from_file(dyck)
    assert edited.identity != first.identity
    keys = [train_key(TrainConfig(task=task)) for task in (first, edited)]
    assert keys[0]["task"] != keys[1]["task"]


# ------------------------------------------------------------------ --generator

GENERATORS = """
def nested(rng, length):
    '''(((...))) then as many closing as fit: balanced at every even length.'''
    half = length // 2
    return ["("] * (length - half) + [")"] * half

def stray(rng, length):
    return ["("] * (length - 1) + ["x"]

def boom(rng, length):
    raise ValueError("no\\nway")

def short(rng, length):
    return ["("] * max(length - 1, 0)

def quits(rng, length):
    raise SystemExit(0)

def exits(rng, length):
    import sys
    sys.exit("stopped")
"""


@pytest.fixture
def gens(tmp_path: Path) -> Path:
    path = tmp_path / "gens.py"
    path.write_text(GENERATORS)
    return path


def one_error_line(result: Result) -> str:
    """A user error: exit status 1, one ``error:`` line on stderr (and at most a hint), no
    traceback; that line."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) <= 2 and "error:" in lines[0], result.stderr
    assert all("error:" not in line for line in lines[1:]), result.stderr
    return lines[0]


def test_a_generator_draws_every_string_and_is_in_the_run_key(dyck, gens, tmp_path):
    from crasp_compiler.experiments.tasks.program import UserGenerator
    from crasp_compiler.experiments.train.loop import TrainConfig, train_key

    task = ProgramTask.from_file(dyck, lengths=(1, 8), generator=UserGenerator(f"{gens}:nested"))
    batch = task.sample_batch(np.random.default_rng(0), [2, 5, 8])
    assert [ex.tokens[1:] for ex in batch] == [
        ("(", ")"),
        ("(", "(", "(", ")", ")"),
        ("(", "(", "(", "(", ")", ")", ")", ")"),
    ]
    assert batch[2].targets[-1] == "1" and batch[1].targets[-1] == "0"  # the interpreter's
    plain = ProgramTask.from_file(dyck, lengths=(1, 8))
    assert task.identity.startswith("dyck1@")
    assert task.identity.endswith(f" generator=gens.py@{task.generator.identity[8:20]}:nested")
    assert train_key(TrainConfig(task=task))["task"] != train_key(TrainConfig(task=plain))["task"]
    gens.write_text(GENERATORS + "\n# edited\n")  # another file: another run
    edited = ProgramTask.from_file(dyck, lengths=(1, 8), generator=UserGenerator(f"{gens}:nested"))
    assert edited.identity != task.identity


def test_a_module_generator_and_a_pickled_file_generator(dyck, gens, tmp_path, monkeypatch):
    """``MODULE:FUNCTION`` imports the module; a file generator survives pickling (a
    sweep's worker process) by loading the file again."""
    import pickle

    from crasp_compiler.experiments.tasks.program import UserGenerator

    monkeypatch.syspath_prepend(str(tmp_path))
    by_module = UserGenerator("gens:nested")
    assert by_module.identity == "gens:nested"
    task = ProgramTask.from_file(dyck, lengths=(1, 8), generator=UserGenerator(f"{gens}:nested"))
    copy = pickle.loads(pickle.dumps(task))
    rng = np.random.default_rng(0)
    assert copy.sample(rng, 4).tokens == ("$", "(", "(", ")", ")")
    assert copy.identity == task.identity


def test_train_with_a_generator(dyck, gens, tmp_path):
    out = tmp_path / "run"
    args = "--lengths", "1-8", "--test-bins", "1-8", "--generator", f"{gens}:nested"
    result = invoke("train", "--program", dyck, *args, *TINY, "--out", out)
    assert result.exit_code == 0, result.output
    assert f"the sampler: generator {gens}:nested" in result.output
    config = json.loads((out / "results.json").read_text())["config"]
    assert " generator=gens.py@" in config["task"]


def test_generator_errors_are_one_line_naming_the_generator(dyck, gens, tmp_path):
    args = "train", "--program", dyck, "--lengths", "1-8", *TINY
    line = one_error_line(invoke(*args, "--generator", f"{gens}:stray"))
    assert f"generator {gens}:stray" in line and "'x'" in line and "position" in line
    line = one_error_line(invoke(*args, "--generator", f"{gens}:boom"))
    assert f"generator {gens}:boom" in line and "raised ValueError: no way" in line
    line = one_error_line(invoke(*args, "--generator", f"{gens}:short"))
    assert "symbols for length" in line
    line = one_error_line(invoke(*args, "--generator", "no_such_module_xyz:f"))
    assert "no_such_module_xyz" in line and "cannot import" in line
    line = one_error_line(invoke(*args, "--generator", f"{gens}:absent"))
    assert "has no 'absent'" in line
    line = one_error_line(invoke(*args, "--generator", "nocolon"))
    assert "MODULE:FUNCTION" in line
    result = invoke("train", "tomita2", "--generator", f"{gens}:nested", *TINY)
    assert result.exit_code == 2 and "only with --program" in result.stderr


@pytest.mark.parametrize(
    ("name", "shown"), [("quits", "raised SystemExit: 0"), ("exits", "raised SystemExit: stopped")]
)
def test_a_generator_that_exits_is_an_error_not_a_silent_exit_0(dyck, gens, name, shown):
    args = "train", "--program", dyck, "--lengths", "1-8", *TINY
    line = one_error_line(invoke(*args, "--generator", f"{gens}:{name}"))
    assert f"generator {gens}:{name}" in line and shown in line


def test_a_generator_file_that_exits_as_it_loads_is_an_error(tmp_path):
    from crasp_compiler.experiments.tasks.program import UserGenerator

    (tmp_path / "bye.py").write_text("import sys\nsys.exit(0)\n")
    with pytest.raises(CraspError, match=r"loading .*bye.py: SystemExit: 0"):
        UserGenerator("bye.py:f", tmp_path)


def test_a_count_output_is_refused(tmp_path):
    path = tmp_path / "count.cr"
    path.write_text('alphabet "a", "b"\nA := #[j <= i] Q_a(j)\noutput A\n')
    line = one_error_line(invoke("train", "--program", path, *TINY))
    assert str(path) in line and "are counts" in line


def test_a_program_that_tests_no_token_needs_an_alphabet(tmp_path):
    """No sampler draws from an empty alphabet: the program is refused at its output,
    before training; with --alphabet it trains."""
    path = tmp_path / "bare.cr"
    path.write_text("D0(i) := i % 2 > 1\n")
    result = invoke("train", "--program", path, "--out", tmp_path / "run", *TINY)
    assert result.exit_code == 1 and "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and f"{path}:1:1:" in errors[0], result.stderr
    assert "no alphabet" in errors[0] and not (tmp_path / "run").exists()
    result = invoke(
        "train", "--program", path, "--alphabet", "a,b", "--out", tmp_path / "r2", *TINY
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "r2" / "results.json").exists()
