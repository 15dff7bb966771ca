"""GPU: the MLA step (megakernel/mla.py) judged by k3diff against the reference (every
intermediate, the cache written in place, the controls), and its batch invariance. The backend
serves mla with MEGAKERNEL_MLA=1 only (set here) until these have passed on a GPU."""
import os

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")

from k3diff.case import Case  # noqa: E402
from k3diff.invariance import check_batch_invariance  # noqa: E402
from k3diff.runner import check_case  # noqa: E402


@pytest.fixture()
def backend(monkeypatch):
    monkeypatch.setenv("MEGAKERNEL_MLA", "1")
    import importlib

    import megakernel.backend as mb
    importlib.reload(mb)                 # `stages` is read from the environment at import
    yield mb.MegakernelBackend()
    monkeypatch.delenv("MEGAKERNEL_MLA")
    importlib.reload(mb)


@pytest.mark.parametrize("lens", [
    (0,),                                  # an empty cache: the new row alone
    (1,),
    (255, 256, 257, 0, 3, 511, 1, 100),    # split boundaries (CH = 256), ragged lengths
    tuple((37 * i) % 700 for i in range(33)),
])
@pytest.mark.parametrize("value_dist", ["plain", "outliers"])
def test_mla_step_passes_k3diff(backend, lens, value_dist):
    case = Case(stage="mla", preset="small", batch=len(lens), cache_lens=lens,
                value_dist=value_dist, seed=len(lens))
    v = check_case(case, backend, device="cuda")
    assert not v.skipped, v.skipped
    assert v.ok, v.failures()


def test_mla_step_is_batch_invariant(backend):
    lens = (5, 0, 300, 17, 256, 1, 44, 90, 511, 2, 9, 128)
    case = Case(stage="mla", preset="small", batch=len(lens), cache_lens=lens, seed=5)
    v = check_batch_invariance(case, backend, 5, device="cuda")
    assert not v.skipped, v.skipped
    assert v.ok, v.failures()


def test_mla_is_off_without_the_switch():
    if os.environ.get("MEGAKERNEL_MLA") == "1":
        pytest.skip("MEGAKERNEL_MLA=1 is set for this run")
    from megakernel.backend import MegakernelBackend
    assert "mla" not in MegakernelBackend().stages
