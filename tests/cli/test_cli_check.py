"""``crasp check`` on compiled models, and ``crasp export`` / ``run`` / ``info`` on exports.

``crasp check MODEL`` (an ``.npz`` file or an export directory) compares the interpreter,
the numpy executor and the torch module on random inputs and prints a table of
disagreeing positions per output and length bucket; any disagreement exits 1. Exit
status: 0 on success, 1 on a user error (a message on stderr, never a traceback), 2 on
misuse (click usage errors).
"""

from __future__ import annotations

import importlib.util
import itertools
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import Result

from crasp_compiler import interpret_batch
from crasp_compiler.export.torch_files import export_model
from crasp_compiler.languages.registry import length_buckets as buckets
from crasp_compiler.model import read_model, save_model
from crasp_compiler.model.model import Model
from crasp_compiler.runtime.numpy_exec import run_tokens
from tests.languages.test_compiler import EXAMPLES, model, program
from tests.support.cli import invoke

DYCK = EXAMPLES / "dyck1.cr"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def ok(*args) -> Result:
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert result.exception is None
    return result


def user_error(*args) -> Result:
    """Exit status 1: a message on stderr, no exception escaping, no traceback."""
    result = invoke(*args)
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "error:" in result.stderr
    assert "Traceback" not in result.output
    return result


def misuse(*args) -> Result:
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Error: " in result.stderr
    assert "Traceback" not in result.output
    return result


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Saved models and exports of dyck1 (heaviside; relu up to 16) and induction_head."""
    root = tmp_path_factory.mktemp("check")
    paths = {
        "dyck": root / "dyck.npz",
        "relu": root / "relu16.npz",
        "induction": root / "induction.npz",
        "export": root / "dyck-export",
        "export-pt": root / "induction-export-pt",
    }
    save_model(model("dyck1.cr", "heaviside"), paths["dyck"])
    from crasp_compiler.languages.crasp.compile import compile_program

    save_model(compile_program(program("dyck1.cr"), mode="relu", max_len=16), paths["relu"])
    save_model(model("induction_head.crasp", "layernorm"), paths["induction"])
    export_model(model("dyck1.cr", "heaviside"), paths["export"], "safetensors")
    export_model(model("induction_head.crasp", "layernorm"), paths["export-pt"], "torch")
    return paths


def table_rows(output: str, outputs: list[str]) -> dict[tuple[str, str], list[int]]:
    """``(output, span) -> [positions, differ...]`` from the printed table (sampled
    buckets only: a bucket without inputs shows ``-`` cells and ``not sampled``)."""
    rows = {}
    for line in output.splitlines():
        fields = line.split()
        span = len(fields) >= 3 and re.fullmatch(r"\d+(-\d+)?", fields[1])
        if span and fields[0] in outputs and fields[2] != "-":
            rows[(fields[0], fields[1])] = [int(f) for f in fields[2:]]
    return rows


def unsampled_rows(output: str, outputs: list[str]) -> list[tuple[str, str]]:
    """The ``(output, span)`` rows of the printed table that say ``not sampled``."""
    rows = []
    for line in output.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[0] in outputs and fields[2] == "-":
            assert line.rstrip().endswith("not sampled"), line
            assert set(fields[3:-2]) == {"-"}, line
            rows.append((fields[0], fields[1]))
    return rows


def spans(max_len: int) -> list[str]:
    return [f"{low}" if low == high else f"{low}-{high}" for low, high in buckets(max_len)]


# ---------------------------------------------------------------- agreement


def test_check_model_agrees(files):
    result = ok("check", files["dyck"], "--samples", 40, "--max-len", 80)
    out = result.output
    assert "40 inputs of length <= 80 on cpu (float64)" in out
    assert "runtimes: interpreter, numpy, torch" in out
    header = next(line for line in out.splitlines() if line.startswith("output"))
    assert header.split()[3:] == ["interpreter/numpy", "interpreter/torch", "numpy/torch"]
    rows = table_rows(out, ["D"])
    assert list(rows) == [("D", span) for span in spans(80)]
    assert spans(80) == ["0", "1-4", "5-16", "17-64", "65-80"]
    assert rows[("D", "0")][0] == 8  # 40 samples over 5 buckets, one position each
    for counts in rows.values():
        assert counts[0] > 0 and counts[1:] == [0, 0, 0]
    assert "largest |numpy - torch| raw output difference" in out
    assert out.rstrip().endswith("all runtimes agree")
    assert result.stderr == ""


def test_check_model_with_several_outputs(files):
    prog = program("induction_head.crasp")
    out = ok("check", files["induction"], "--samples", 30, "--max-len", 20, "--seed", 3).output
    rows = table_rows(out, list(prog.outputs))
    assert sorted(rows) == sorted(itertools.product(prog.outputs, spans(20)))
    assert all(counts[1:] == [0, 0, 0] for counts in rows.values())
    assert "all runtimes agree" in out


@pytest.mark.parametrize("key", ["export", "export-pt"])
def test_check_export_directory(files, key):
    out = ok("check", files[key], "--samples", 20, "--max-len", 30).output
    assert "runtimes: interpreter, numpy, torch" in out
    assert "all runtimes agree" in out
    ok("check", files[key] / "config.json", "--samples", 5, "--max-len", 5)


def test_check_float32(files):
    out = ok("check", files["dyck"], "--samples", 30, "--max-len", 64, "--float32").output
    assert "(float32)" in out
    assert "all runtimes agree" in out


def test_check_seed_changes_the_sample(files):
    outputs = [
        ok("check", files["dyck"], "--samples", 10, "--max-len", 30, "--seed", seed).output
        for seed in (5, 5, 6)
    ]
    assert outputs[0] == outputs[1]
    assert table_rows(outputs[0], ["D"]) != table_rows(outputs[2], ["D"])


def test_check_model_without_source(files, tmp_path):
    compiled = read_model(files["dyck"])
    compiled.source = ""
    save_model(compiled, tmp_path / "nosource.npz")
    out = ok("check", tmp_path / "nosource.npz", "--samples", 10, "--max-len", 10).output
    assert "runtimes: numpy, torch" in out
    assert "interpreter" not in out
    assert "all runtimes agree" in out


def test_buckets_without_inputs_are_not_reported_as_agreeing(files):
    """3 samples cannot reach the 5 length buckets up to 80: the last two are shown as
    not sampled, are not counted as agreement, and the check says so and fails."""
    result = user_error("check", files["dyck"], "--samples", 3, "--max-len", 80)
    out = result.stdout
    assert list(table_rows(out, ["D"])) == [("D", span) for span in spans(80)[:3]]
    assert unsampled_rows(out, ["D"]) == [("D", "17-64"), ("D", "65-80")]
    assert "all runtimes agree" not in out
    assert "not sampled: lengths 17-64, 65-80" in result.stderr
    assert "--samples 5" in result.stderr


def test_check_report_of_unsampled_buckets(files):
    from crasp_compiler.verify import check_model

    report = check_model(read_model(files["dyck"]), samples=2, max_len=20)
    assert report.unsampled == [(5, 16), (17, 20)]
    assert report.disagreements == 0 and not report.agree
    assert report.table().count("not sampled") == 2
    full = check_model(read_model(files["dyck"]), samples=4, max_len=20)
    assert full.unsampled == [] and full.agree and "not sampled" not in full.table()


# ---------------------------------------------------------------- disagreement


def disagrees(compiled: Model, words: list[list[str]]) -> int:
    """Positions where ``compiled`` differs from the interpreter on its source."""
    prog = program("dyck1.cr")
    wrong = 0
    for n in sorted({len(w) for w in words}):
        batch = [w for w in words if len(w) == n]
        got = run_tokens(compiled, batch).values
        want = interpret_batch(prog, batch)
        for name in prog.outputs:
            wrong += int((got[name] != np.asarray(want[name])).sum())
    return wrong


def tampered_output(files, tmp_path) -> Path:
    """dyck1 with its readout negated: D is wrong wherever it holds."""
    compiled = read_model(files["dyck"])
    compiled.outputs[0].weights *= -1
    assert disagrees(compiled, [[]]) == 1  # the empty input is balanced
    path = tmp_path / "tampered.npz"
    save_model(compiled, path)
    return path


def tampered_mlp(files, tmp_path) -> Path:
    """dyck1 with one MLP bias changed so that only some inputs are decided wrongly."""
    words = [list(w) for n in range(7) for w in itertools.product("()", repeat=n)]
    for number, layer in enumerate(read_model(files["dyck"]).layers):
        if layer.mlp is None:
            continue
        for unit in range(len(layer.mlp.b1)):
            compiled = read_model(files["dyck"])
            compiled.layers[number].mlp.b1[unit] += 1.5
            wrong = disagrees(compiled, words)
            if 0 < wrong < sum(len(w) + 1 for w in words) // 4:
                path = tmp_path / "tampered-mlp.npz"
                save_model(compiled, path)
                return path
    raise AssertionError("no single bias change gives a partial disagreement")


@pytest.mark.parametrize("tamper", [tampered_output, tampered_mlp])
def test_check_tampered_model_fails(files, tmp_path, tamper):
    path = tamper(files, tmp_path)
    result = user_error("check", path, "--samples", 60, "--max-len", 30)
    rows = table_rows(result.stdout, ["D"])
    assert list(rows) == [("D", span) for span in spans(30)]
    interpreter_numpy = sum(counts[1] for counts in rows.values())
    interpreter_torch = sum(counts[2] for counts in rows.values())
    numpy_torch = sum(counts[3] for counts in rows.values())
    assert interpreter_numpy > 0 and interpreter_numpy == interpreter_torch
    assert numpy_torch == 0
    match = re.search(
        r"first disagreement: D on '([() ]*)' at t=(\d+): (\w+) (\S+) != (\w+)", result.stderr
    )
    assert match, result.stderr
    assert f"error: {interpreter_numpy + interpreter_torch} disagreeing positions" in result.stderr
    assert "all runtimes agree" not in result.output


# ---------------------------------------------------------------- refusals


def test_check_beyond_relu_guarantee(files):
    result = user_error("check", files["relu"], "--max-len", 17, "--samples", 5)
    assert "--max-len 17: input length 17 exceeds the model's guarantee" in result.stderr
    assert "length <= 16" in result.stderr
    # the default --max-len (64) is beyond it too
    assert "--max-len 64: input length 64 exceeds" in user_error("check", files["relu"]).stderr
    out = ok("check", files["relu"], "--max-len", 16, "--samples", 20).output
    assert "all runtimes agree" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_check_cuda_without_a_gpu(files, device):
    result = user_error("check", files["dyck"], "--device", device, "--samples", 5)
    assert "CUDA is not available here" in result.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_check_on_cuda(files):
    out = ok("check", files["dyck"], "--device", "cuda", "--samples", 30, "--max-len", 64).output
    assert "on cuda" in out and "all runtimes agree" in out


@pytest.mark.parametrize("device", ["nonsense", "mps"])
def test_check_unknown_device(files, device):
    result = user_error("check", files["dyck"], "--device", device, "--samples", 5)
    assert device in result.stderr


@pytest.mark.parametrize("device", ["meta", "hpu", "xpu", "lazy", "privateuseone", ""])
def test_check_device_torch_knows_but_cannot_run(files, device):
    """Devices torch parses but cannot compute on here: a short, clear refusal."""
    if device in ("xpu",) and getattr(torch, "xpu", None) and torch.xpu.is_available():
        pytest.skip("an XPU is available here")
    result = user_error("check", files["dyck"], "--device", device, "--samples", 5)
    assert f"--device {device!r}" in result.stderr
    assert len(result.stderr) < 600, result.stderr


@pytest.mark.parametrize(
    "option",
    [
        ("--device", "cpu"),
        ("--samples", "5"),
        ("--max-len", "3"),
        ("--seed", "1"),
        ("--float32",),
    ],
    ids=lambda o: o[0],
)
def test_model_options_on_a_program(option):
    result = misuse("check", DYCK, *option)
    assert f"{option[0]}: only for models" in result.stderr


def test_alphabet_on_a_model(files):
    result = misuse("check", files["dyck"], "--alphabet", "( )")
    assert "--alphabet applies to programs" in result.stderr


@pytest.mark.parametrize("args", [("--samples", "0"), ("--max-len", "-1")])
def test_bad_option_values(files, args):
    misuse("check", files["dyck"], *args)


def test_check_program_prints_summary():
    out = ok("check", DYCK).output
    assert f"{DYCK}: ok" in out
    assert "class:" in out and "definitions:" in out and "accept:      D" in out
    assert "compiles:    2 layers (dependency bound 2), width 13" in out
    assert "runtimes" not in out


def test_check_corrupt_export(files, tmp_path):
    target = tmp_path / "broken"
    export_model(model("dyck1.cr", "heaviside"), target, "safetensors")
    (target / "model.safetensors").write_bytes(b"\x00" * 10)
    assert "cannot read export weights" in user_error("check", target).stderr
    (target / "config.json").write_text("{")
    assert "cannot read export config" in user_error("check", target).stderr


# ---------------------------------------------------------------- export, run, info


@pytest.mark.parametrize(
    ("fmt", "weights"), [("safetensors", "model.safetensors"), ("torch", "model.pt")]
)
def test_export_then_run_and_info(files, tmp_path, fmt, weights):
    target = tmp_path / "out"
    result = ok("export", files["dyck"], "--format", fmt, "-o", target)
    assert f"{fmt} export" in result.output
    assert sorted(p.name for p in target.iterdir()) == sorted(["config.json", weights])
    assert ok("run", target, "( ( ) )").output.strip() == "True"
    assert ok("run", target, "( ) )").output.strip() == "False"
    assert ok("run", target / "config.json", "").output.strip() == "True"
    outputs = ok("run", target, "( )", "--outputs").output
    assert outputs == ok("run", files["dyck"], "( )", "--outputs").output
    info = ok("info", target).output
    npz_info = ok("info", files["dyck"]).output
    assert "layers:" in info and "guarantee:" in info and "residual layout:" in info
    assert info.splitlines()[1:] == npz_info.splitlines()[1:]  # all but the path


def test_export_default_format_is_safetensors(files, tmp_path):
    ok("export", files["induction"], "-o", tmp_path / "out")
    assert (tmp_path / "out" / "model.safetensors").exists()


def test_export_of_an_export(files, tmp_path):
    ok("export", files["export"], "--format", "torch", "-o", tmp_path / "again")
    assert ok("run", tmp_path / "again", "( )").output.strip() == "True"


@pytest.mark.parametrize("n_ctx", ["1000000000000", "100000000", str(10**30)])
def test_lens_export_refuses_a_huge_context(files, tmp_path, n_ctx):
    target = tmp_path / "lens"
    result = user_error("export", files["relu"], "--format", "lens", "--n-ctx", n_ctx, "-o", target)
    assert "n_ctx" in result.stderr and "at most" in result.stderr
    assert not target.exists()


def test_lens_export_n_ctx_must_be_an_integer(files, tmp_path):
    result = misuse("export", files["relu"], "--format", "lens", "--n-ctx", "1e8", "-o", tmp_path)
    assert "1e8" in result.stderr


def test_export_unknown_format(files, tmp_path):
    misuse("export", files["dyck"], "--format", "onnx", "-o", tmp_path / "out")


def test_run_export_refuses_bad_tokens(files):
    result = user_error("run", files["export"], "( x")
    assert "not in the vocabulary" in result.stderr


@pytest.mark.skipif(
    importlib.util.find_spec("crasp_compiler.export.lens") is None,
    reason="crasp_compiler.export.lens is not written yet",
)
def test_lens_export_of_a_heaviside_model(files, tmp_path):
    target = tmp_path / "lens"
    result = user_error("export", files["dyck"], "--format", "lens", "-o", target)
    assert "heaviside" in result.stderr
    assert not target.exists() or not any(target.iterdir())
