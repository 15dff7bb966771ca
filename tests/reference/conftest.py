"""Shared setup of the reference tests."""
import pathlib
import sys

import pytest
import torch

# make `import reference` work however pytest is started (the package may not be installed)
ROOT = str(pathlib.Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@pytest.fixture(autouse=True)
def _one_cpu_thread():
    """These tensors are tiny: OpenMP threads only add overhead, and on a busy 2-core machine their
    spin-waiting made single calls 100x slower. Scoped to each reference test, then restored."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
