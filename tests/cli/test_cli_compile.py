"""The ``crasp compile``, ``crasp run`` and ``crasp info`` commands.

Exit status: 0 on success, 1 on a user error (a message on stderr, never a traceback),
2 on misuse (click usage errors).
"""

from __future__ import annotations

import functools
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import Result

from crasp_compiler import load_program
from crasp_compiler.model import read_model
from tests.support.cli import invoke
from tests.support.recognizers import REGISTRY

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "crasp"


def ok(*args: str, input: str | None = None) -> Result:
    result = invoke(*args, input=input)
    assert result.exit_code == 0, result.output
    assert result.exception is None
    return result


def user_error(*args: str, input: str | None = None) -> Result:
    """Exit status 1 with a message on stderr, and no exception escaping."""
    result = invoke(*args, input=input)
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "error:" in result.stderr
    assert "Traceback" not in result.output
    return result


_MODEL_DIR: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def _model_dir(tmp_path_factory):
    _MODEL_DIR[:] = [tmp_path_factory.mktemp("models")]
    model_file.cache_clear()
    yield
    model_file.cache_clear()


@functools.cache
def model_file(name: str, mode: str = "heaviside", max_len: int = 16) -> Path:
    """Compile an example once per module (through the CLI) and return the file."""
    path = _MODEL_DIR[0] / f"{name}.{mode}{max_len}.npz"
    args = ["compile", EXAMPLES / name, "-o", path, "--mode", mode]
    if mode == "relu":
        args += ["--max-len", str(max_len)]
    ok(*args)
    return path


def words_for(name: str, count: int, seed: int = 0) -> list[str]:
    """Random strings and generated members (non-empty), as input lines."""
    rng = random.Random(f"{name}-{seed}")
    alphabet = load_program(EXAMPLES / name).alphabet
    words = [[rng.choice(alphabet) for _ in range(rng.randint(0, 14))] for _ in range(count)]
    words += [REGISTRY[name].generate(rng, rng.randint(0, 14)) for _ in range(count)]
    return [" ".join(w) for w in words if w]  # a blank stdin line is skipped


# ---------------------------------------------------------------- compile


def test_compile_prints_summary_and_writes_loadable_file(tmp_path):
    out = tmp_path / "dyck.npz"
    result = ok("compile", EXAMPLES / "dyck1.cr", "-o", out)
    model = read_model(out)
    line = result.output.strip()
    match = re.fullmatch(
        r"(.+): (\d+) layers \(dependency bound (\d+)\), width ([\d,]+), ([\d,]+) parameters; (.+)",
        line,
    )
    assert match, line
    assert match[1] == str(out)
    assert int(match[2]) == len(model.layers)
    assert int(match[3]) == model.info["dependency_bound"]
    assert int(match[4].replace(",", "")) == model.width
    assert match[5] == f"{model.parameter_count():,}"
    assert match[6] == model.guarantee.text
    assert model.guarantee.text.startswith("exact at every length in real arithmetic (in float64")
    assert model.options == {"mode": "heaviside", "max_len": None}


def test_compile_relu(tmp_path):
    out = tmp_path / "m.npz"
    result = ok("compile", EXAMPLES / "majority.crasp", "-o", out, "--mode", "relu", "--max-len", 9)
    assert "exact for inputs of length <= 9" in result.output
    model = read_model(out)
    assert model.guarantee.max_len == 9
    assert model.options == {"mode": "relu", "max_len": 9}


def test_compile_relu_needs_max_len(tmp_path):
    out = tmp_path / "m.npz"
    result = invoke("compile", EXAMPLES / "majority.crasp", "-o", out, "--mode", "relu")
    assert result.exit_code == 2
    assert "--max-len" in result.stderr
    assert not out.exists()
    result = invoke("compile", EXAMPLES / "majority.crasp", "-o", out, "--max-len", "-1")
    assert result.exit_code == 2


def test_compile_alphabet_override(tmp_path):
    out = tmp_path / "m.npz"
    ok("compile", EXAMPLES / "majority.crasp", "-o", out, "--alphabet", "0 1 2")
    assert read_model(out).vocab == ["<bos>", "0", "1", "2"]
    assert ok("run", out, "1 2 2 0").output == "True\n"


def test_compile_errors(tmp_path):
    bad = tmp_path / "bad.crasp"
    bad.write_text("A = # \n")
    result = user_error("compile", bad, "-o", tmp_path / "m.npz")
    assert str(bad) in result.stderr
    result = user_error("compile", EXAMPLES / "dyck1.cr", "-o", tmp_path / "no" / "dir" / "m.npz")
    assert "cannot write model file" in result.stderr
    result = invoke("compile", tmp_path / "missing.crasp", "-o", tmp_path / "m.npz")
    assert result.exit_code == 2
    result = invoke("compile", EXAMPLES / "dyck1.cr")
    assert result.exit_code == 2  # -o is required


def test_a_program_that_tests_no_token_needs_an_alphabet(tmp_path):
    """Compile refuses a program with an empty alphabet at its output (no model that no
    other command could read); a declared or given alphabet makes it a model every
    command takes."""
    bare = tmp_path / "bare.cr"
    bare.write_text("// positions only\nD0(i) := i % 2 > 1\n")
    out = tmp_path / "m.npz"
    result = user_error("compile", bare, "-o", out)
    assert f"{bare}:2:1: error: the program tests no token, so it has no alphabet" in result.stderr
    assert "D0(i) := i % 2 > 1\n    ^^\n" in result.stderr
    assert "--alphabet" in result.stderr and 'alphabet "a"' in result.stderr
    assert not out.exists()
    two = tmp_path / "two.cr"  # the acceptance output is the one shown, not the first
    two.write_text("E(i) := i % 2 == 0\nF = E && !E\noutput E\naccept F\n")
    assert f"{two}:2:1: error:" in user_error("compile", two, "-o", out).stderr
    ok("compile", bare, "-o", out, "--alphabet", "a b")
    assert read_model(out).vocab == ["<bos>", "a", "b"]
    assert ok("run", out, "a b b").output == "False\n"  # i % 2 is never above 1
    assert "all runtimes agree" in ok("check", out, "--samples", "20", "--max-len", "6").output
    declared = tmp_path / "declared.cr"
    declared.write_text('alphabet "x"\nD0(i) := i % 2 > 0\n')
    ok("compile", declared, "-o", out)
    for word in ("", "x", "x x"):
        assert ok("run", out, word).output == ok("interpret", declared, word).output
    assert {ok("run", out, word).output for word in ("x", "x x")} == {"True\n", "False\n"}


# ---------------------------------------------------------------- run


def test_run_single_input():
    path = model_file("dyck1.cr")
    assert ok("run", path, "( ( ) ( ) )").output == "True\n"
    assert ok("run", path, "( ( ) ( )").output == "False\n"
    assert ok("run", path, "").output == "True\n"  # the empty string: the empty prefix


@pytest.mark.parametrize(
    "name",
    [
        "dyck1.cr",
        "majority.crasp",
        "anbncn.crasp",
        "tomita7_local.cr",
        "abcde.crasp",
        "induction_head.crasp",
        "piecewise.crasp",
    ],
)
def test_run_matches_interpret_on_stdin(name):
    lines = words_for(name, 15)
    text = "// a comment line\n\n" + "\n".join(lines[:10]) + "\n   \n// more\n"
    text += "\n".join(lines[10:]) + "\n"
    interpreted = ok("interpret", EXAMPLES / name, input=text).output.splitlines()
    for mode in ("heaviside", "relu"):
        ran = ok("run", model_file(name, mode), input=text).output.splitlines()
        assert ran == interpreted
    assert len(interpreted) == len(lines)
    assert set(interpreted) <= {"True", "False"}
    assert "True" in interpreted


def test_run_float32():
    path = model_file("dyck1.cr")
    text = "\n".join(words_for("dyck1.cr", 10)) + "\n"
    plain = ok("run", path, input=text).output
    assert ok("run", path, "--float32", input=text).output == plain


def test_run_outputs_table():
    path = model_file("induction_head.crasp")
    output = ok("run", path, "a b a b", "--outputs").output
    lines = output.splitlines()
    assert lines[0].split() == ["position", "-1", "0", "1", "2", "3"]
    assert lines[1].split() == ["token", "ε", "a", "b", "a", "b"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[3:-1]}
    assert rows["NEXT_a"] == ["F", "F", "F", "F", "T"]
    assert rows["NEXT_b"] == ["F", "F", "F", "T", "F"]
    assert rows["SEEN_BEFORE"] == ["F", "F", "F", "T", "T"]
    assert lines[-1] == "True"
    # the same table as the interpreter's
    interpreted = ok("interpret", EXAMPLES / "induction_head.crasp", "a b a b", "--outputs")
    assert interpreted.output == output


def test_run_trace_table():
    path = model_file("dyck1.cr")
    model = read_model(path)
    output = ok("run", path, "( )", "--trace").output
    sections = re.findall(r"^== (.+)$", output, flags=re.MULTILINE)
    expected = ["embed"]
    for number, layer in enumerate(model.layers, start=1):
        if layer.heads:
            expected.append(f"layer {number} attention")
        if layer.mlp is not None:
            expected.append(f"layer {number} mlp")
    assert sections == expected
    for label in model.residual:
        assert re.search(rf"^{re.escape(label)}\s", output, flags=re.MULTILINE), label
    assert "C_open" in model.residual and "token:(" in model.residual
    assert output.splitlines()[-1] == "True"
    # embed of BOS: the BOS dimension is 1 at position -1 only
    bos_row = next(line for line in output.splitlines() if line.startswith("BOS "))
    assert bos_row.split() == ["BOS", "1", "0", "0"]


def test_run_beyond_relu_max_len():
    path = model_file("dyck1.cr", "relu", max_len=4)
    assert ok("run", path, "( ( ) )").output == "True\n"
    result = user_error("run", path, "( ( ) ) ( )")
    assert "input length 6 exceeds the model's guarantee" in result.stderr
    assert "--beyond-guarantee warn" in result.stderr
    assert result.stdout == ""
    result = ok("run", path, "( ( ) ) ( )", "--beyond-guarantee", "warn")
    assert result.stdout in ("True\n", "False\n")  # beyond max_len: not guaranteed exact
    assert "warning: input length 6 exceeds" in result.stderr
    assert "Traceback" not in result.stderr and "cli.py" not in result.stderr
    # on stdin the failing line is named
    result = user_error("run", path, input="( )\n\n( ( ) ) ( )\n")
    assert result.stdout == "True\n"
    assert "<stdin>:3" in result.stderr
    result = invoke("run", path, "( )", "--beyond-guarantee", "ignore")
    assert result.exit_code == 2


def test_run_token_outside_vocabulary():
    path = model_file("dyck1.cr")
    result = user_error("run", path, "( x )")
    assert "token 'x' at position 1 is not in the vocabulary" in result.stderr
    result = user_error("run", path, input="( )\n// skip\n( <bos>\n")
    assert result.stdout == "True\n"
    assert "<stdin>:3" in result.stderr and "'<bos>'" in result.stderr


def test_run_bad_model_files(tmp_path):
    text = tmp_path / "model.npz"
    text.write_text("not a model\n")
    result = user_error("run", text, "a")
    assert "not an .npz archive" in result.stderr
    assert str(text) in result.stderr
    good = model_file("dyck1.cr").read_bytes()
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(good[: len(good) // 2])
    assert "model file" in user_error("run", truncated, "( )").stderr
    assert "model file" in user_error("info", truncated).stderr
    assert invoke("run", tmp_path / "missing.npz", "( )").exit_code == 2


def test_run_model_without_acceptance_output(tmp_path):
    program = tmp_path / "counts.crasp"
    program.write_text('alphabet "a", "b"\nC = # "a"\nB = C > 1\noutput C, B\n')
    out = tmp_path / "counts.npz"
    ok("compile", program, "-o", out)
    result = user_error("run", out, "a a b")
    assert "no acceptance output" in result.stderr
    table = ok("run", out, "a a b", "--outputs").output
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines()[3:]}
    assert rows == {"C": ["0", "1", "2", "2"], "B": ["F", "F", "T", "T"]}


def test_installed_command_has_no_traceback(tmp_path):
    """The real ``crasp`` entry point: a bad model file gives exit 1 and one message."""
    crasp = shutil.which("crasp")
    if crasp is None:
        pytest.skip("the crasp command is not installed")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"PK\x03\x04" + bytes(200))
    proc = subprocess.run([crasp, "run", str(bad), "a"], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"{bad}: error: cannot read model file")


# ---------------------------------------------------------------- info


def test_info(tmp_path):
    path = model_file("tomita7_local.cr", "relu", max_len=16)
    model = read_model(path)
    output = ok("info", path).output
    fields = dict(
        re.findall(r"^  (\w[\w ]*?):\s+(.*)$", output, flags=re.MULTILINE),
    )
    assert fields["layers"] == f"{len(model.layers)} (dependency bound 3)"
    assert fields["heads"] == f"{[len(layer.heads) for layer in model.layers]} per layer"
    assert fields["width"] == str(model.width)
    assert fields["mlp width"] == str(model.mlp_width)
    assert fields["parameters"] == f"{model.parameter_count():,}"
    assert fields["positional"] == "index, index^2"  # the softmax lookups' keys
    assert fields["guarantee"] == model.guarantee.text
    assert fields["guarantee"].startswith("exact for inputs of length <= 16 (in float64")
    assert fields["source"] == "C-RASP[local]"
    assert fields["accept"] == "L"
    assert fields["outputs"] == "L (bool)"
    assert "C-RASP[local]" in fields["source"]
    # a summary by kind of label; --layout lists every dimension
    assert f"residual layout: {model.width} dimensions by kind (--layout lists each)" in output
    for name in model.info["definitions"]:
        assert re.search(rf"^    {name} = .*  \[(embed|L\d+ (head \d+|mlp))\]$", output, re.M)
    full = ok("info", "--layout", path).output
    layout = full.split("residual layout:\n", 1)[1].splitlines()
    rows = [re.fullmatch(r"\s*(\d+)  (.*)  \[(embed|L\d+ (head \d+|mlp))\]", x) for x in layout]
    assert [(int(m[1]), m[2]) for m in rows] == list(enumerate(model.residual))
    # compiled dimensions are named by the source expression that writes them
    assert 'P(i-1) in #[j <= i, j == i - 1] "1"' in model.residual
    assert not any("#" in label and label.split("#")[-1].isdigit() for label in model.residual)


def test_info_positional_features(tmp_path):
    program = tmp_path / "even.crasp"
    program.write_text('alphabet "a", "b"\nE = i % 2 == 1\nB = # E == # true - # E\naccept B\n')
    out = tmp_path / "even.npz"
    ok("compile", program, "-o", out)
    output = ok("info", out).output
    assert re.search(r"^  positional:\s+periodic:2:1$", output, flags=re.MULTILINE), output
    assert ok("run", out, "a a b b").output == "True\n"
    assert ok("run", out, "a a b").output == "False\n"
