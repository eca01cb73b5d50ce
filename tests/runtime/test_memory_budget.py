"""The memory budget of runs and interpreters (:mod:`crasp_compiler.runtime.memory`,
:mod:`crasp_compiler.budget`): ``crasp run`` / ``check`` / ``interpret``, the Python API,
the numpy executor and the torch module estimate the memory they will hold from the model
and the input before allocating, and refuse an estimate above ``$CRASP_MAX_MEMORY`` in
one line. The estimates are checked against the growth of the peak resident size
(``VmHWM``) of a fresh process at moderate sizes: never below it, and for the large
(wide) models within 2× of it."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from click.testing import Result

from crasp_compiler import api
from crasp_compiler.errors import CraspError
from crasp_compiler.model import Model, save_model
from crasp_compiler.runtime import numpy_exec
from crasp_compiler.runtime.memory import forward_bytes, model_layers
from tests.support.cli import invoke

ROOT = Path(__file__).resolve().parents[2]
CUMSUM = ROOT / "examples" / "pcoc" / "cumsum.pcoc"
DYCK = ROOT / "examples" / "crasp" / "dyck1.cr"


@cache
def cumsum(n: int) -> Model:
    return api.compile(api.load(CUMSUM), n=n)


def refused(result: Result) -> str:
    """Exit 1 with the budget's one-line message (no traceback); the line."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.stderr.splitlines() if "needs about" in line]
    assert len(lines) == 1, result.stderr
    assert "the limit is 1 MiB (set CRASP_MAX_MEMORY" in lines[0]
    assert "Traceback" not in result.output
    return lines[0]


@pytest.fixture
def one_mib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRASP_MAX_MEMORY", "1M")


# ------------------------------------------------------------------ refusals


def test_crasp_run_refuses_a_pcoc_run_beyond_the_budget(tmp_path, one_mib):
    save_model(cumsum(300), tmp_path / "m.npz")
    line = refused(invoke("run", tmp_path / "m.npz", input=" ".join(["1"] * 300) + "\n"))
    assert "running the model (width" in line and "on 1 input of length 300" in line


def test_crasp_run_refuses_a_long_crasp_input_and_a_trace_costs_more(tmp_path, monkeypatch):
    model = api.compile(api.load(DYCK))
    save_model(model, tmp_path / "m.npz")
    word = "( ) " * 2000
    plain = forward_bytes(model.width, 0, model_layers(model), 1, 4001, 8)
    traced = forward_bytes(model.width, 0, model_layers(model), 1, 4001, 8, residuals=True)
    assert traced >= plain + (2 * len(model.layers) + 1) * 4001 * model.width * 8
    monkeypatch.setenv("CRASP_MAX_MEMORY", str(plain + 1))  # enough without the trace
    assert invoke("run", tmp_path / "m.npz", word).exit_code == 0
    result = invoke("run", tmp_path / "m.npz", word, "--trace")
    assert result.exit_code == 1 and "needs about" in result.stderr
    assert "CRASP_MAX_MEMORY" in result.stderr and "Traceback" not in result.output


def test_the_api_and_the_numpy_executor_refuse_before_running(one_mib, monkeypatch):
    model = cumsum(300)
    monkeypatch.setattr(numpy_exec.fw, "forward", None)  # never reached
    with pytest.raises(CraspError, match=r"needs about .*CRASP_MAX_MEMORY"):
        api.run(model, [[np.ones(300)]])
    with pytest.raises(CraspError, match=r"needs about .*CRASP_MAX_MEMORY"):
        numpy_exec.run_tokens(model, [["m"] * 300], values=[np.ones(300)])


def test_the_torch_module_refuses_before_running(one_mib):
    pytest.importorskip("torch")
    from crasp_compiler.runtime.torch_module import TorchTransformer

    module = TorchTransformer(cumsum(300))
    with pytest.raises(CraspError, match=r"running the model .* needs about"):
        module.run([["m"] * 300], values=[np.ones(300)])


def test_crasp_check_refuses_a_model_check_beyond_the_budget(tmp_path, one_mib):
    pytest.importorskip("torch")
    save_model(cumsum(300), tmp_path / "m.npz")
    line = refused(invoke("check", tmp_path / "m.npz", "--samples", 20))
    assert "checking the model" in line and "on 20 inputs of length 300" in line
    assert line.startswith(f"{tmp_path / 'm.npz'}: error:")  # the model the check is of


def test_crasp_interpret_refuses_both_languages_beyond_the_budget(tmp_path, one_mib):
    line = refused(invoke("interpret", CUMSUM, "--n", 100_000, input="1\n"))
    assert "interpreting the program on 1 input of n = 100,000" in line
    assert line.startswith(str(CUMSUM))  # before the input is read: it is not n numbers
    line = refused(invoke("interpret", DYCK, "( ) " * 20_000))
    assert "interpreting the program on 1 input of length 40,000" in line
    with pytest.raises(CraspError, match="needs about"):
        api.interpret(api.load(CUMSUM), np.ones(100_000))


def test_an_unreadable_budget_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("CRASP_MAX_MEMORY", "lots")
    result = invoke("interpret", DYCK, "( )")
    assert result.exit_code == 1 and "CRASP_MAX_MEMORY='lots' is not a size" in result.stderr


# ------------------------------------------------------------------ honest estimates

MEASURE = """
import json, sys
import numpy as np
from crasp_compiler import api
from crasp_compiler.languages.pcoc.interpret import interpreter_bytes
from crasp_compiler.runtime.memory import forward_bytes, model_layers
what, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
values = np.arange(n, dtype=np.float64) % 7
if what == "run":
    model = api.load_model(path)
    estimate = forward_bytes(model.width, 1, model_layers(model), 1, n + 1, 8)
else:
    program = api.load(path)
    estimate = interpreter_bytes(program, n, 1)
def peak():  # VmHWM: ru_maxrss would keep the parent's peak across exec
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) << 10
before = peak()
if what == "run":
    api.run(model, [[values]])
else:
    api.interpret(program, values)
after = peak()
print(json.dumps({"estimate": estimate, "growth": after - before}))
"""


def measured(what: str, path: Path, n: int) -> tuple[int, int]:
    """The estimate and the growth of the peak resident size, in a fresh process (Linux:
    its ``VmHWM``, which an exec resets, unlike ``ru_maxrss``)."""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc/self/status")
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, what, str(path), str(n)],
        capture_output=True,
        text=True,
        check=True,
    )
    numbers = json.loads(done.stdout.splitlines()[-1])
    return numbers["estimate"], numbers["growth"]


def test_the_run_estimate_covers_the_measured_peak_of_a_wide_model(tmp_path):
    """cumsum at n = 1,500: the pass holds about 150 MiB (dense T × n query and key rows);
    the estimate is at least that and at most twice that."""
    save_model(cumsum(1500), tmp_path / "m.npz")
    estimate, growth = measured("run", tmp_path / "m.npz", 1500)
    assert growth > 50 << 20  # the measurement sees the pass
    assert growth <= estimate <= 2 * growth


def test_the_pcoc_interpreter_estimate_covers_the_measured_peak():
    estimate, growth = measured("interpret", CUMSUM, 400_000)
    assert growth > 50 << 20
    assert growth <= estimate <= 2 * growth


PLANNED = """
import json, sys
from crasp_compiler import api
from crasp_compiler.runtime.memory import forward_bytes, model_layers
model = api.compile(api.load(sys.argv[1]))
n = int(sys.argv[2])
word = ["(", ")"] * (n // 2)
estimate = forward_bytes(model.width, 0, model_layers(model), 1, n + 1, 8, planned=1)
def peak():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) << 10
api.run(model, [word[:100]])  # the plan prepared
before = peak()
api.run(model, [word])
print(json.dumps({"estimate": estimate, "growth": peak() - before}))
"""


def test_the_estimate_of_a_planned_run_covers_its_measured_peak():
    """Dyck-1 runs as a lowered plan, chunk by chunk: about 40 bytes a token at 5·10^5
    tokens, not the 490 the layer-by-layer estimate says; the estimate follows the plan
    (at least the growth, at most three times it, for allocators that differ), so the
    default budget admits ~10^8 tokens."""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc/self/status")
    done = subprocess.run(
        [sys.executable, "-c", PLANNED, str(DYCK), "500000"],
        capture_output=True,
        text=True,
        check=True,
    )
    numbers = json.loads(done.stdout.splitlines()[-1])
    estimate, growth = numbers["estimate"], numbers["growth"]
    assert growth > 10 << 20  # the measurement sees the pass
    assert growth <= estimate <= 3 * growth
