"""The ``crasp interpret`` and ``crasp check`` commands.

Exit status: 0 on success, 1 on a user error (one message on stderr, never a
traceback), 2 on misuse (missing arguments, unknown options, files that do not exist).
Tested in-process with click's runner, and through the installed ``crasp`` command and
``python -m crasp_compiler.cli`` as a user would run them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import Result

from crasp_compiler import CraspError
from crasp_compiler.languages.crasp.language import input_lines
from tests.support.cli import invoke

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "crasp"

DYCK = """// Dyck-1: balanced parentheses
C_open = # "("
C_close = # ")"
V = C_open < C_close
D = # V == 0 && C_open == C_close
"""

OUTPUTS = """alphabet "a" "b"
C = # "a"
P = i % 2 == 0
B = C > 1 && P
output C, B
"""


@pytest.fixture
def dyck(tmp_path) -> Path:
    path = tmp_path / "dyck.cr"
    path.write_text(DYCK, encoding="utf-8")
    return path


@pytest.fixture
def outputs_program(tmp_path) -> Path:
    path = tmp_path / "outputs.crasp"
    path.write_text(OUTPUTS, encoding="utf-8")
    return path


def ok(*args, input: str | None = None) -> Result:
    result = invoke(*args, input=input)
    assert result.exit_code == 0, result.output
    assert result.exception is None
    assert result.stderr == ""
    return result


def user_error(*args, input: str | bytes | None = None) -> Result:
    """Exit status 1: a message on stderr, no exception escaping, no traceback."""
    result = invoke(*args, input=input)
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "error:" in result.stderr
    assert "Traceback" not in result.output
    return result


def misuse(*args, input: str | None = None) -> Result:
    result = invoke(*args, input=input)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Error: " in result.stderr
    assert "Traceback" not in result.output
    return result


# ------------------------------------------------------------------ interpret


@pytest.mark.parametrize(
    ("word", "verdict"),
    [("( )", "True"), ("( ( ) ( ) )", "True"), (") (", "False"), ("( ( )", "False")],
)
def test_interpret_argument(dyck, word, verdict):
    assert ok("interpret", dyck, word).stdout == verdict + "\n"


def test_interpret_empty_string(dyck):
    """The empty string is an input too: Dyck-1 accepts it."""
    assert ok("interpret", dyck, "").stdout == "True\n"
    assert ok("interpret", EXAMPLES / "dyck1.cr", "").stdout == "True\n"


def test_interpret_extra_whitespace_in_the_argument(dyck):
    assert ok("interpret", dyck, "  (\t)  ").stdout == "True\n"


def test_interpret_stdin_one_verdict_per_line(dyck):
    stdin = "( )\n\n// a comment line\n) (\n   \n  // indented comment\n( ( ) )\n(\n"
    result = ok("interpret", dyck, input=stdin)
    assert result.stdout == "True\nFalse\nTrue\nFalse\n"


def test_interpret_stdin_without_trailing_newline(dyck):
    assert ok("interpret", dyck, input="( )\n) )").stdout == "True\nFalse\n"


def test_interpret_empty_stdin_prints_nothing(dyck):
    assert ok("interpret", dyck, input="").stdout == ""
    assert ok("interpret", dyck, input="\n// only comments\n\n").stdout == ""


def test_interpret_bad_token_in_argument(dyck):
    result = user_error("interpret", dyck, "( x )")
    assert result.stdout == ""
    assert (
        result.stderr == "input: error: token 'x' at position 1 is not in the alphabet {'(', ')'}\n"
    )


def test_interpret_bad_token_on_a_stdin_line(dyck):
    """The bad line is reported on stderr, naming the line and token; the other lines are
    evaluated; the exit status is 1."""
    result = user_error("interpret", dyck, input="( )\n\n( ) ((\n( )\n")
    assert result.stdout == "True\nTrue\n"
    assert result.stderr.startswith("<stdin>:3: error: token '((' at position 2 is not in the")
    assert result.stderr.endswith(
        "<stdin>: error: 1 input line(s) could not be evaluated (see above)\n"
    )


def test_batch_invalid_lines_can_print_false(dyck):
    """``--invalid false`` prints False for a line that cannot be evaluated, as the
    community interpreter does, so the verdicts line up with the inputs."""
    result = user_error("interpret", dyck, "--invalid", "false", input="( )\n( x )\n) (\n")
    assert result.stdout == "True\nFalse\nFalse\n"
    assert "<stdin>:2: error: token 'x' at position 1" in result.stderr


def test_batch_echo_and_the_empty_string(dyck):
    """``--echo`` prints each input before its verdict; ``ε`` on a line is the empty
    string; invalid lines show as ``invalid``."""
    result = user_error("interpret", dyck, "--echo", input="( )\nε\n// c\n( x\n) (\n")
    assert result.stdout == "( )\tTrue\nε\tTrue\n( x\tinvalid\n) (\tFalse\n"
    assert ok("interpret", dyck, input="ε\n").stdout == "True\n"


def test_tokens_need_spaces_hint(dyck):
    result = user_error("interpret", dyck, "(())")
    assert "tokens are separated by whitespace: did you mean '( ( ) )'?" in result.stderr


def test_interpret_stdin_with_crlf_line_endings(dyck):
    assert ok("interpret", dyck, input="( )\r\n\r\n) (\r\n").stdout == "True\nFalse\n"


def test_interpret_stdin_that_is_not_utf8(dyck):
    result = user_error("interpret", dyck, input=b"( )\n\xff (\n) (\n")
    assert result.stdout == "True\nFalse\n"
    assert result.stderr == (
        "<stdin>:2: error: the input line is not valid UTF-8 (byte 0xff at offset 0)\n"
        "<stdin>: error: 1 input line(s) could not be evaluated (see above)\n"
    )


def test_interpret_with_stdin_closed(monkeypatch):
    monkeypatch.setattr(sys, "stdin", None)
    with pytest.raises(CraspError, match="no input: give INPUT, or one input per line on stdin"):
        list(input_lines(None))


def test_interpret_trace_table(outputs_program):
    result = ok("interpret", outputs_program, "a b a", "--trace")
    assert result.stdout == (
        "position  -1  0  1  2\n"
        "token      ε  a  b  a\n"
        "---------------------\n"
        "C          0  1  1  2\n"
        "P          F  T  F  T\n"
        "B          F  F  F  T\n"
    )


def test_interpret_trace_has_every_definition_and_the_verdict(dyck):
    lines = ok("interpret", dyck, "( )", "--trace").stdout.splitlines()
    assert lines[0].split() == ["position", "-1", "0", "1"]
    assert lines[1].split() == ["token", "ε", "(", ")"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[3:-1]}
    assert rows == {
        "C_open": ["0", "1", "1"],
        "C_close": ["0", "0", "1"],
        "V": ["F", "F", "F"],
        "D": ["T", "F", "T"],
    }
    assert lines[-1] == "True"


def test_interpret_outputs_table(outputs_program):
    result = ok("interpret", outputs_program, "a a", "--outputs")
    rows = [line.split() for line in result.stdout.splitlines()[3:]]
    assert rows == [["C", "0", "1", "2"], ["B", "F", "F", "F"]]


def test_interpret_tables_for_each_stdin_line(outputs_program):
    result = ok("interpret", outputs_program, "--outputs", input="a\n\na b\n")
    assert result.stdout.count("position") == 2
    assert "token      ε  a  b" in result.stdout


def test_interpret_needs_an_acceptance_output(outputs_program):
    result = user_error("interpret", outputs_program, "a b")
    assert "the program has no acceptance output; use --outputs or --trace" in result.stderr


def test_both_suffixes_are_accepted(tmp_path):
    for suffix in (".cr", ".crasp"):
        path = tmp_path / f"dyck{suffix}"
        path.write_text(DYCK, encoding="utf-8")
        assert ok("interpret", path, "( )").stdout == "True\n"
        assert ok("check", path).stdout.startswith(f"{path}: ok\n")


def test_paper_notation_program(tmp_path):
    path = tmp_path / "paper.crasp"
    path.write_text(
        "C(i) := #[j ≤ i] Q_a(j)\n"
        "D(i) := #[j ≤ i, j = i - 1] Q_b(j)\n"
        "R(i) := C(i) > D(i) ? C(i) : D(i)\n"
        "E(i) := R(i) ≥ 2 ∧ ¬Q_b(i)\n",
        encoding="utf-8",
    )
    assert ok("interpret", path, "a b a").stdout == "True\n"
    assert ok("interpret", path, "a b b").stdout == "False\n"


# ------------------------------------------------------------------ --alphabet


def test_alphabet_override_widens_the_inputs(dyck):
    user_error("interpret", dyck, "( a )")
    assert ok("interpret", dyck, "( a )", "--alphabet", "( ) a").stdout == "True\n"
    summary = ok("check", dyck, "--alphabet", "a ( )").stdout
    assert "  alphabet:    a ( )\n" in summary


def test_alphabet_override_must_keep_used_tokens(dyck):
    result = user_error("interpret", dyck, "(", "--alphabet", "( a")
    assert result.stderr == (f"{dyck}: error: the alphabet lacks token(s) the program tests: ')'\n")
    assert "the alphabet is empty" in user_error("check", dyck, "--alphabet", "  ").stderr


# ------------------------------------------------------------------ check


def test_check_summary(dyck):
    assert ok("check", dyck).stdout == (
        f"{dyck}: ok\n"
        "  class:       C-RASP[∅] (an upper bound on the task's: another program may need "
        "fewer relations)\n"
        "  prediction:  APE yes, NoPE yes (Huang et al. 2025: APE generalises on "
        "C-RASP[periodic, local], NoPE on C-RASP[∅])\n"
        "  alphabet:    ( )\n"
        "  definitions: 4 (2 Boolean, 2 count)\n"
        "  accept:      D\n"
        "  outputs:     D\n"
        "  compiles:    2 layers (dependency bound 2), width 13\n"
        '  C_open   count  # "("\n'
        '  C_close  count  # ")"\n'
        "  V        bool   C_open < C_close\n"
        "  D        bool   # V == 0 && C_open == C_close\n"
    )


def test_check_summary_with_outputs(outputs_program):
    summary = ok("check", outputs_program).stdout
    assert "  class:       C-RASP[periodic] (an upper bound" in summary
    assert "  definitions: 3 (2 Boolean, 1 count)\n" in summary
    assert "  accept:      -\n" in summary
    assert "  outputs:     C, B\n" in summary
    assert "  P  bool   i % 2 == 0\n" in summary


@pytest.mark.parametrize(
    ("text", "relation_class"),
    [
        ('A = "a"', "C-RASP[∅]"),
        ('A = "a" && i % 3 == 1', "C-RASP[periodic]"),
        ("A(i) := #[j <= i, j = i - 1] Q_a(j) > 0", "C-RASP[local]"),
        (
            '#import pred\n#import pos_even\nA = #[pred] "a" > 0 && pos_even',
            "C-RASP[periodic, local]",
        ),
    ],
)
def test_check_relation_class(tmp_path, text, relation_class):
    path = tmp_path / "p.crasp"
    path.write_text(text + "\n", encoding="utf-8")
    assert f"  class:       {relation_class} (an upper bound" in ok("check", path).stdout


def test_check_every_example():
    for path in sorted(EXAMPLES.glob("*.cr*")):
        summary = ok("check", path).stdout
        assert summary.startswith(f"{path}: ok\n  class:       C-RASP[")


# ------------------------------------------------------------------ user errors: exit 1


def test_syntax_errors_are_all_reported(tmp_path):
    path = tmp_path / "bad.cr"
    path.write_text('A = # "a" +\nB = 1 2\nC = "a"\n', encoding="utf-8")
    for args in (["check"], ["interpret", "a"]):
        result = user_error(args[0], path, *args[1:])
        assert result.stdout == ""
        assert result.stderr == (
            f"{path}:1:12: error: unexpected end of line\n"
            '    A = # "a" +\n'
            "               ^\n"
            '  expected an expression: a name, a token literal such as "a", an integer, `#`, `!` or `(`\n'
            f"{path}:2:7: error: unexpected '2'\n"
            "    B = 1 2\n"
            "          ^\n"
            "  expected an operator or the end of the statement\n"
            "2 errors\n"
        )


def test_checker_errors(tmp_path):
    path = tmp_path / "bad.crasp"
    path.write_text('C_open = # "("\nB = C_opn > 0\nA = B + 1 > 0\n', encoding="utf-8")
    result = user_error("check", path)
    assert f"{path}:2:5: error: undefined name 'C_opn'" in result.stderr
    assert "did you mean 'C_open'?" in result.stderr


def test_unreadable_program(tmp_path):
    path = tmp_path / "latin1.cr"
    path.write_bytes(b'A = "\xe9"\n')
    result = user_error("check", path)
    assert result.stderr.startswith(f"{path}: error: cannot read program:")


def test_empty_program(tmp_path):
    path = tmp_path / "empty.cr"
    path.write_text("", encoding="utf-8")
    assert "the program is empty" in user_error("interpret", path, "a").stderr


# ------------------------------------------------------------------ misuse: exit 2


def test_misuse(dyck, tmp_path):
    assert "Missing argument 'PROGRAM'" in misuse("interpret").stderr
    assert "Missing argument 'PROGRAM|MODEL'" in misuse("check").stderr
    assert "No such option '--bogus'" in misuse("interpret", dyck, "( )", "--bogus").stderr
    assert "does not exist" in misuse("interpret", tmp_path / "missing.cr", "( )").stderr
    assert "does not exist" in misuse("check", tmp_path / "missing.cr").stderr
    assert "unexpected extra argument" in misuse("interpret", dyck, "(", ")").stderr
    assert "No such command" in misuse("interpet", dyck).stderr
    assert "requires an argument" in misuse("interpret", dyck, "( )", "--alphabet").stderr


def test_help_and_version():
    assert "interpret" in ok("--help").stdout
    assert "--trace" in ok("interpret", "--help").stdout
    assert "crasp-compiler" in ok("--version").stdout or "version" in ok("--version").stdout


# ------------------------------------------------------------------ as a user runs it


def _runner(command: list[str]):
    def run(*args, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*command, *map(str, args)], input=input, capture_output=True, text=True, timeout=120
        )

    return run


def test_python_m(dyck):
    run = _runner([sys.executable, "-m", "crasp_compiler.cli"])
    proc = run("interpret", dyck, input="( )\n\n) (\n")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "True\nFalse\n", "")
    proc = run("interpret", dyck, "(", "--alphabet", "(")
    assert proc.returncode == 1
    assert proc.stderr == f"{dyck}: error: the alphabet lacks token(s) the program tests: ')'\n"
    proc = run("check")
    assert proc.returncode == 2 and "Missing argument" in proc.stderr


def test_installed_command(dyck, tmp_path):
    crasp = shutil.which("crasp")
    if crasp is None:
        pytest.skip("the crasp command is not installed")
    run = _runner([crasp])
    proc = run("interpret", dyck, "( )")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "True\n", "")
    proc = run("interpret", dyck, "")
    assert (proc.returncode, proc.stdout) == (0, "True\n")
    proc = run("interpret", dyck, input="( )\n// skip\n\n) (\n")
    assert (proc.returncode, proc.stdout) == (0, "True\nFalse\n")

    proc = run("interpret", dyck, "( x")
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert (
        proc.stderr == "input: error: token 'x' at position 1 is not in the alphabet {'(', ')'}\n"
    )

    bad = tmp_path / "bad.crasp"
    bad.write_text("A = (1\nB = 2 3\n", encoding="utf-8")
    proc = run("check", bad)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"{bad}:1:5: error: '(' is never closed\n    A = (1\n        ^\n")
    assert f"{bad}:2:7: error: unexpected '3'" in proc.stderr

    for args in (["interpret"], ["interpret", tmp_path / "nope.cr"], ["check", dyck, "--nope"]):
        proc = run(*args)
        assert proc.returncode == 2, args
        assert "Usage:" in proc.stderr and "Traceback" not in proc.stderr


def test_a_directory_is_taken_as_an_export(tmp_path):
    pytest.importorskip("torch")  # exports are read with torch
    # this one has no config
    assert "cannot read export config" in user_error("check", tmp_path).stderr


def test_the_core_runs_without_torch(tmp_path):
    """A core install (`pip install -e ".[dev]"`) has no torch: parsing, interpreting,
    compiling and the numpy executor work without it, and commands that need it say so."""
    script = (
        "import sys; sys.modules['torch'] = None\n"  # `import torch` now fails
        "from crasp_compiler.cli import main\n"
        "main()\n"
    )
    model = tmp_path / "dyck.npz"
    commands = [
        (["compile", str(EXAMPLES / "dyck1.cr"), "-o", str(model)], 0),
        (["run", str(model), "( ( ) )"], 0),
        (["interpret", str(EXAMPLES / "dyck1.cr"), "( ) )"], 0),
        (["check", str(model)], 1),
    ]
    outputs = []
    for args, status in commands:
        proc = subprocess.run(
            [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == status, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
        outputs.append(proc.stdout + proc.stderr)
    assert outputs[1] == "True\n" and outputs[2] == "False\n"
    assert "this needs torch" in outputs[3]
