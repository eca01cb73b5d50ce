"""``crasp compile`` / ``run`` / ``interpret`` / ``info`` on PCOC programs and models.

``crasp run`` on a compiled PCOC model and ``crasp interpret`` on the program read the same
input vectors (a file or stdin, one per line) and print the same lines, so the two are
compared line by line on every example. User errors exit 1 with a message (never a
traceback); misuse exits 2.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from click.testing import Result

from crasp_compiler.languages.pcoc import format_vector, load_program
from crasp_compiler.model import read_model
from tests.support.cli import invoke

pytestmark = pytest.mark.usefixtures("one_torch_thread")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "pcoc"
NAMES = sorted(p.stem for p in EXAMPLES.glob("*.pcoc"))
N = 8


def ok(*args, input: str | None = None) -> Result:
    result = invoke(*args, input=input)
    assert result.exit_code == 0, (result.output, result.stderr)
    assert result.stderr == ""
    return result


def user_error(*args, input: str | bytes | None = None) -> Result:
    result = invoke(*args, input=input)
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "error:" in result.stderr and "Traceback" not in result.output
    return result


def misuse(*args, input: str | None = None) -> Result:
    result = invoke(*args, input=input)
    assert result.exit_code == 2, result.output
    assert "Error: " in result.stderr and "Traceback" not in result.output
    return result


_MODELS: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def _model_dir(tmp_path_factory):
    _MODELS[:] = [tmp_path_factory.mktemp("pcoc-models")]
    model_file.cache_clear()
    yield
    model_file.cache_clear()


@cache
def model_file(name: str, n: int = N, mode: str = "hard") -> Path:
    path = _MODELS[0] / f"{name}.{n}.{mode}.npz"
    ok("compile", EXAMPLES / f"{name}.pcoc", "--n", n, "--mode", mode, "-o", path)
    return path


def vectors_text(name: str, n: int = N, lines: int = 4, seed: int = 0) -> str:
    """Integer input vectors within the example's bounds, with a comment and a blank line."""
    prog = load_program(EXAMPLES / f"{name}.pcoc")
    bound = min(prog.slot(slot).bound for slot in prog.inputs)
    scale = int(min(1e6, bound // n))
    rng = np.random.default_rng(seed)
    rows = [
        format_vector(rng.integers(-scale, scale, size=len(prog.inputs) * n, endpoint=True))
        for _ in range(lines)
    ]
    return "// input vectors\n" + rows[0] + "\n\n" + "\n".join(rows[1:]) + "\n"


# ---------------------------------------------------------------------------- compile


def test_compile_reports_layers_and_heads_next_to_the_theorem(tmp_path):
    out = tmp_path / "cumsum.npz"
    result = ok("compile", EXAMPLES / "cumsum.pcoc", "--n", 16, "-o", out)
    match = re.fullmatch(
        r"(.+): (\d+) layers for (\d+) round\(s\) \(theorem: (\d+) layers, (\d+) heads per "
        r"layer, with MLPs of any depth: one layer per round; these MLPs have one hidden "
        r"layer, so a round's local computation may take more\), heads per layer \[(.*)\], "
        r"width ([\d,]+), ([\d,]+) parameters; (.+)\n",
        result.stdout,
    )
    assert match, result.stdout
    model = read_model(out)
    assert match[1] == str(out)
    assert int(match[2]) == len(model.layers) == 4
    assert int(match[3]) == int(match[4]) == model.info["rounds"] == 4
    assert int(match[5]) == model.info["theorem"]["heads_per_layer"] == 2  # x and left
    assert match[6] == "1, 1, 1, 1"
    assert int(match[7]) == model.width and match[8] == f"{model.parameter_count():,}"
    assert match[9] == model.guarantee.text and model.guarantee.max_len == 16
    assert model.options["mode"] == "hard" and model.options["n"] == 16
    assert model.inputs == ["x"] and model.source == (EXAMPLES / "cumsum.pcoc").read_text()


def test_compile_softmax_records_the_temperature(tmp_path):
    out = tmp_path / "soft.npz"
    result = ok(
        "compile", EXAMPLES / "cummin.pcoc", "--n", 8, "--mode", "softmax", "--tolerance", "1e-4",
        "-o", out,
    )  # fmt: skip
    model = read_model(out)
    temperature = model.options["temperature"]
    assert model.options["tolerance"] == 1e-4 and model.options["dtype"] == "float64"
    assert f"softmax attention, T = {temperature:.6g}" in result.stdout
    assert "within 0.0001 of the interpreter's (float64) output" in result.stdout
    info = ok("info", out).stdout
    assert f"temperature {temperature:.6g}, tolerance 0.0001 (float64)" in info
    assert "PCOC, n = 8 machines" in info and "3 layers for 3 round(s)" in info
    assert "inputs:      x (numeric)" in info and "heads:       [1, 1, 1] per layer" in info


def test_info_on_a_hard_model():
    info = ok("info", model_file("running_argmax")).stdout
    assert "source:      PCOC, n = 8 machines" in info
    assert "6 layers for 4 round(s) (theorem: 4 layers, 4 heads per layer, with MLPs" in info
    assert "outputs:     x (value), at (value)" in info
    assert "softmax" not in info and "exact for n = 8 machines" in info


# ---------------------------------------------------------------------------- run and interpret


@pytest.mark.parametrize("name", NAMES)
def test_run_and_interpret_agree_on_every_example(name, tmp_path):
    text = vectors_text(name)
    path = tmp_path / "vectors.txt"
    path.write_text(text, encoding="utf-8")
    prog = load_program(EXAMPLES / f"{name}.pcoc")
    interpreted = ok("interpret", EXAMPLES / f"{name}.pcoc", "--n", N, input=text).stdout
    ran = ok("run", model_file(name), input=text).stdout
    assert ran == interpreted
    assert ok("run", model_file(name), path).stdout == ran  # a file argument
    assert ok("run", model_file(name), "-", input=text).stdout == ran  # `-`: stdin
    lines = ran.splitlines()
    outputs = list(prog.outputs)
    assert len(lines) == 4 * len(outputs)
    for number, line in enumerate(lines):
        if len(outputs) > 1:
            slot, _, numbers = line.partition(": ")
            assert slot == outputs[number % len(outputs)]
        else:
            numbers = line
        assert len(numbers.split()) == N


def test_run_prints_what_the_model_computes():
    assert ok("run", model_file("cumsum"), input="1 2 3 4 5 6 7 8\n").stdout == (
        "1 3 6 10 15 21 28 36\n"
    )
    text = "3 1 4 1 5 9 2 6  2 7 1 8 2 8 1 8\n"
    assert ok("run", model_file("compare_vectors"), input=text).stdout == (
        "m: 3 7 4 8 5 9 2 8\nwins: 1 1 2 2 3 4 5 5\n"
    )
    assert ok("run", model_file("cumsum"), input="").stdout == ""
    sorted_line = ok("run", model_file("sort"), input="1e6 -2.5 0 3 3 -1e6 7 0.5\n").stdout
    assert sorted_line == "-1000000 -2.5 0 0.5 3 3 7 1000000\n"


def test_a_vector_written_on_the_command_line(tmp_path, monkeypatch):
    """INPUT may be one vector written out, as a C-RASP token string is: run, interpret
    and show read it; a bad number in it is reported where it stands; a file of that
    name is read as a file; a single word that is no number and no file is a missing
    file."""
    assert ok("run", model_file("cumsum"), "1 2 3 4 5 6 7 8").stdout == "1 3 6 10 15 21 28 36\n"
    program = EXAMPLES / "cumsum.pcoc"
    assert ok("interpret", program, "--n", 8, "1 1 1 1 1 1 1 1").stdout == "1 2 3 4 5 6 7 8\n"
    bad = user_error("run", model_file("cumsum"), "1 2 3 x 5 6 7 8")
    assert "<input>:1:7: error: 'x' is not a number" in bad.stderr
    short = user_error("run", model_file("cumsum"), "1 2 3")
    assert "expected 8 numbers (n = 8), found only 3" in short.stderr
    monkeypatch.chdir(tmp_path)
    (tmp_path / "5").write_text("1 1 1 1 1 1 1 1\n")  # a file named like a number wins
    assert ok("run", model_file("cumsum"), "5").stdout == "1 2 3 4 5 6 7 8\n"
    missing = user_error("run", model_file("cumsum"), "vectors.txt")
    assert "cannot read the input vectors" in missing.stderr
    ok("show", model_file("cumsum"), "8 7 6 5 4 3 2 1", "-o", tmp_path / "c.png", "--dpi", 20)
    assert (tmp_path / "c.outputs.png").exists()


def test_softmax_run_is_within_the_tolerance(tmp_path):
    out = tmp_path / "soft.npz"
    ok("compile", EXAMPLES / "running_argmax.pcoc", "--n", N, "--mode", "softmax", "-o", out)
    text = vectors_text("running_argmax", seed=3)
    interpreted = ok("interpret", EXAMPLES / "running_argmax.pcoc", "--n", N, input=text)
    ran = ok("run", out, input=text)
    model = read_model(out)
    slack = model.guarantee.errors["float64"]
    for a, b in zip(ran.stdout.splitlines(), interpreted.stdout.splitlines(), strict=True):
        slot_a, _, xs = a.partition(": ")
        slot_b, _, ys = b.partition(": ")
        assert slot_a == slot_b
        assert np.max(np.abs(np.array(xs.split(), float) - np.array(ys.split(), float))) <= slack
    # float32 decides a comparison of values up to 1e9 with margin 0.5 only by chance
    assert model.guarantee.dtypes["float32"] == -1
    refused = user_error("run", out, "--float32", input=text)
    assert "proven exact for in float32" in refused.stderr


def test_interpret_trace():
    lines = ok("interpret", EXAMPLES / "cumsum.pcoc", "--n", 4, "--trace", input="1 2 3 4\n")
    assert lines.stdout.splitlines() == [
        "== initial",
        "x: 1 2 3 4",
        "== after round 1",
        "x: 1 3 5 7",
        "== after round 2",
        "x: 1 3 6 10",
        "== outputs",
        "1 3 6 10",
    ]


def test_a_program_without_inputs_runs_once(tmp_path):
    program = tmp_path / "ids.pcoc"
    program.write_text("slot s bound 100 = 2.5\noutput s\nround { s = s + i }\n")
    out = tmp_path / "ids.npz"
    ok("compile", program, "--n", 3, "-o", out)
    assert ok("run", out).stdout == ok("interpret", program, "--n", 3).stdout == "2.5 3.5 4.5\n"


# ---------------------------------------------------------------------------- errors


def test_bad_vectors_are_user_errors(tmp_path):
    model = model_file("cumsum")
    result = user_error("run", model, input="1 2 3 4 5 6 7 8\n1 2 3\n")
    assert "<stdin>:2:6: error: expected 8 numbers (n = 8), found only 3" in result.stderr
    result = user_error("run", model, input="1 2 3 4 5 6 7 8 9\n")
    assert "expected 8 numbers (n = 8), found 9" in result.stderr
    result = user_error("run", model, input="1 2 x 4 5 6 7 8\n")
    assert "'x' is not a number" in result.stderr
    result = user_error("interpret", EXAMPLES / "cumsum.pcoc", "--n", 8, input="1 2 3\n")
    assert "expected 8 numbers (n = 8), found only 3" in result.stderr
    result = user_error("run", model_file("compare_vectors"), input="1 2 3 4 5 6 7 8\n")
    assert "expected 16 numbers (2 input slots × n = 8), found only 8" in result.stderr
    result = user_error("run", model, tmp_path / "missing.txt")
    assert "cannot read the input vectors" in result.stderr
    result = user_error("run", model, input=b"1 2 \xff\n")
    assert "not valid UTF-8" in result.stderr


def test_programs_the_compiler_refuses_are_user_errors(tmp_path):
    program = tmp_path / "gate.pcoc"
    program.write_text(
        "input x\ninput w\noutput x\nround {\n  x = x if x > 0 margin 0.5 else w\n}\n"
    )
    result = user_error("compile", program, "--n", 4, "-o", tmp_path / "g.npz")
    assert "needs a bound" in result.stderr and "'w', 'x'" in result.stderr
    assert f"{program}:5:" in result.stderr  # at the statement
    program = tmp_path / "free.pcoc"
    program.write_text(
        "input x\noutput x\nround {\n  l = recv x from i - 1 default 0\n  x = x + l\n}\n"
    )
    ok("compile", program, "--n", 4, "-o", tmp_path / "f.npz")
    result = user_error("compile", program, "--n", 4, "--mode", "softmax", "-o", tmp_path / "s.npz")
    assert "routing with softmax attention" in result.stderr and "'x'" in result.stderr
    program = tmp_path / "syntax.pcoc"
    program.write_text("input x\noutput x\nround { x = }\n")
    result = user_error("compile", program, "--n", 4, "-o", tmp_path / "x.npz")
    assert f"{program}:3:" in result.stderr
    result = user_error("compile", EXAMPLES / "reverse.pcoc", "--n", 4, "-o", tmp_path / "no" / "x")
    assert "cannot write model file" in result.stderr


def test_misuse_of_options():
    pcoc, crasp = EXAMPLES / "cumsum.pcoc", EXAMPLES.parent / "crasp" / "dyck1.cr"
    out = "/tmp/unused.npz"
    assert "needs --n" in misuse("compile", pcoc, "-o", out).stderr
    assert (
        "PCOC modes are hard, softmax"
        in misuse("compile", pcoc, "--n", 4, "--mode", "relu", "-o", out).stderr
    )
    assert (
        "--max-len: only for C-RASP programs (.crasp, .cr)"
        in misuse("compile", pcoc, "--n", 4, "--max-len", 4, "-o", out).stderr
    )
    assert (
        "--tolerance and --dtype are for --mode softmax"
        in misuse("compile", pcoc, "--n", 4, "--tolerance", "1e-3", "-o", out).stderr
    )
    assert (
        "C-RASP modes are heaviside"
        in misuse("compile", crasp, "--mode", "softmax", "-o", out).stderr
    )
    assert "--n: only for PCOC programs" in misuse("compile", crasp, "--n", 4, "-o", out).stderr
    assert "needs --n" in misuse("interpret", pcoc, input="1\n").stderr
    assert "--n: only for PCOC programs (.pcoc)" in (
        misuse("interpret", crasp, "( )", "--n", 3).stderr
    )
    assert (
        "--alphabet: only for C-RASP programs (.crasp, .cr)"
        in misuse("interpret", pcoc, "--n", 2, "--alphabet", "a", input="1 2\n").stderr
    )
    misuse("compile", pcoc, "--n", 0, "-o", out)
    misuse("compile", pcoc, "--n", 4, "--mode", "softmax", "--tolerance", "0", "-o", out)


def test_check_program_and_model():
    """``crasp check`` on a PCOC program summarises it (rounds with --n); on a PCOC model
    it compares interpreter, numpy and torch on sampled input vectors."""
    summary = ok("check", EXAMPLES / "cumsum.pcoc", "--n", 4).stdout
    assert summary.startswith(f"{EXAMPLES / 'cumsum.pcoc'}: ok\n")
    assert "inputs:      x" in summary and "rounds:      2 for n = 4" in summary
    assert "class:" not in summary  # not parsed as C-RASP
    assert "compiles:    for n = 4: 2 layers, width" in summary
    unsized = ok("check", EXAMPLES / "cumsum.pcoc").stdout
    assert "rounds:      2 for n = 4" in unsized
    assert "compiles:    for n = 4 (--n checks another): 2 layers" in unsized
    pytest.importorskip("torch")
    checked = ok("check", model_file("cumsum"), "--samples", 30).stdout
    assert "runtimes: interpreter, numpy, torch" in checked and "all runtimes agree" in checked


def test_check_program_refuses_what_compile_refuses(tmp_path):
    """A program `crasp compile` refuses (here: a conditional on an input without a bound)
    fails `crasp check` with the same error, and no `ok` is printed."""
    program = tmp_path / "nobound.pcoc"
    program.write_text(
        "input x\noutput x\nround {\n  left = recv x from i - 1 default 0\n"
        "  if left >= x margin 0.5 {\n    x = left\n  }\n}\n"
    )
    checked = invoke("check", program)
    compiled = invoke("compile", program, "--n", 4, "-o", tmp_path / "m.npz")
    assert checked.exit_code == compiled.exit_code == 1
    assert "needs a bound on the values involved" in checked.stderr
    assert checked.stderr == compiled.stderr and "ok" not in checked.stdout


def test_trace_outputs_and_echo_on_pcoc_models_and_programs():
    model = model_file("cumsum")
    traced = ok("run", model, "--trace", input="1 2 3 4 5 6 7 8\n").stdout
    sections = [line for line in traced.splitlines() if line.startswith("== ")]
    assert len(sections) >= 1 + len(read_model(model).layers)  # the embedding, then sublayers
    residual = read_model(model).residual
    assert all(f"\n{label} " in traced for label in residual[:3])  # rows labelled
    assert traced.splitlines()[-1] == "1 3 6 10 15 21 28 36"
    table = ok("run", model, "--outputs", input="1 2 3 4 5 6 7 8\n").stdout.splitlines()
    assert table[0].split() == ["machine", *map(str, range(8))]
    assert table[2].split() == ["x", "1", "3", "6", "10", "15", "21", "28", "36"]
    echoed = ok("run", model, "--echo", input="1 1 1 1 1 1 1 1\n").stdout
    assert echoed == "1 1 1 1 1 1 1 1\t1 2 3 4 5 6 7 8\n"
    interpreted = ok("interpret", EXAMPLES / "cumsum.pcoc", "--n", 2, "--outputs", input="1 2\n")
    assert interpreted.stdout.splitlines()[2].split() == ["x", "1", "3"]


def test_inputs_outside_their_bounds_need_beyond_guarantee_warn(tmp_path):
    program = EXAMPLES / "running_argmax.pcoc"
    result = user_error("interpret", program, "--n", 4, input="3e9 1 2e9 -5e9\n")
    assert "input 'x' holds 3000000000.0 at machine 0, outside its declared bound" in result.stderr
    warned = invoke(
        "interpret", program, "--n", 4, "--beyond-guarantee", "warn", input="3e9 1 2 5\n"
    )
    assert warned.exit_code == 0 and warned.stdout.startswith("x: 3000000000 3000000000")
    assert "warning: input 'x' holds" in warned.stderr
    model = tmp_path / "argmax.npz"
    ok("compile", program, "--n", 4, "-o", model)
    result = user_error("run", model, input="3e9 1 2e9 -5e9\n")
    assert "outside its declared bound |x| <= 1e+09" in result.stderr
    warned = invoke("run", model, "--beyond-guarantee", "warn", input="3e9 1 2 5\n")
    assert warned.exit_code == 0 and "warning:" in warned.stderr


def test_send_destinations_outside_the_guarantee_need_beyond_guarantee_warn(tmp_path):
    """permute.pcoc at n = 8: a collision and a fractional destination are refused by
    `crasp run` as by `crasp interpret` (one line naming the input and the machines);
    warn runs them; a permutation runs exactly."""
    program = EXAMPLES.parent / "pcoc_sends" / "permute.pcoc"
    model = tmp_path / "permute.npz"
    ok("compile", program, "--n", 8, "-o", model)
    values = "1 2 3 4 5 6 7 8  "
    for destinations, fragment in (
        ("0 0 2 3 4 5 6 7", "input 'd' sends machines 0 and 1 both to machine 0"),
        ("7.5 1 2 3 4 5 6 0", "input 'd' holds 7.5 at machine 0, not an integer"),
    ):
        line = values + destinations + "\n"
        user_error("interpret", program, "--n", 8, input=line)
        result = user_error("run", model, input=line)
        (message,) = [text for text in result.stderr.splitlines() if fragment in text]
        assert "--beyond-guarantee warn" in message and result.stdout == ""
        warned = invoke("run", model, "--beyond-guarantee", "warn", input=line)
        assert warned.exit_code == 0 and f"warning: numeric {fragment}" in warned.stderr
        assert len(warned.stdout.split()) == 8
    line = values + "7 6 5 4 3 2 1 0\n"
    assert ok("run", model, input=line).stdout == "8 7 6 5 4 3 2 1\n"
    assert ok("interpret", program, "--n", 8, input=line).stdout == "8 7 6 5 4 3 2 1\n"
