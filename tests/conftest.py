"""Fixtures shared by the test modules."""

from __future__ import annotations

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run (``derandomize``), so a test run is
# reproducible and CI cannot fail by chance; ``pytest --hypothesis-profile=explore``
# draws fresh random examples to hunt for new counterexamples.
settings.register_profile("default", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("default")


@pytest.fixture(scope="module")
def one_torch_thread():
    """Small tensors: torch's intra-op threads cost more than they gain on two cores."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
