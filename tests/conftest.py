"""Fixtures shared by the test modules."""

from __future__ import annotations

import importlib.util

import pytest
from hypothesis import HealthCheck, settings

# Test modules that need the torch extra (the torch module, exports, training). A core
# install (`pip install -e ".[dev]"`) has no torch: they are not collected, and the header
# of the test report says so.
TORCH_MODULES = [
    "cli/test_cli_check.py",
    "export/test_export.py",
    "experiments/test_finetune.py",
    "runtime/test_numeric_inputs.py",
    "runtime/test_torch.py",
    "experiments/test_train.py",
    "experiments/test_train_cli.py",
    "runtime/test_worked_examples.py",
]
HAS_TORCH = importlib.util.find_spec("torch") is not None
collect_ignore = [] if HAS_TORCH else TORCH_MODULES


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        help="rewrite the golden files of tests/golden with what the stages give now",
    )


def pytest_report_header(config) -> str | None:
    if HAS_TORCH:
        return None
    return f"torch is not installed: {len(TORCH_MODULES)} test modules that need it are skipped"


# Property tests draw the same examples on every run (``derandomize``), so a test run is
# reproducible and CI cannot fail by chance; ``pytest --hypothesis-profile=explore``
# draws fresh random examples to hunt for new counterexamples. No deadline and no
# too-slow health check: a test's pass or fail never depends on how loaded the machine
# is. A test sets only its own number of examples (``@settings(max_examples=N)``, which
# inherits the loaded profile) and any health check it means to suppress.
PROFILE = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("default", derandomize=True, **PROFILE)
settings.register_profile("explore", derandomize=False, **PROFILE)
settings.load_profile("default")


@pytest.fixture(scope="module")
def one_torch_thread():
    """Small tensors: torch's intra-op threads cost more than they gain on two cores.
    (Skips the test where torch is not installed.)"""
    torch = pytest.importorskip("torch")

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
