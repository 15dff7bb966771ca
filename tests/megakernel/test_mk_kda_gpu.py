"""GPU: the KDA step (megakernel/kda.py, k_kda_core.py) judged by k3diff against the reference
(every intermediate, the states, the controls), and its determinism and batch invariance."""
import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")

from k3diff.case import Case  # noqa: E402
from k3diff.invariance import check_batch_invariance  # noqa: E402
from k3diff.runner import check_case  # noqa: E402
from megakernel.backend import MegakernelBackend  # noqa: E402


@pytest.mark.parametrize("T,state_idx,steps", [
    (1, (1,), 1),
    (1, (0,), 1),                          # a null row alone: zeros, no state touched
    (8, (3, 0, 1, 7, -1, 2, 9, 4), 2),     # null rows among live ones, two decode steps
    (37, tuple((11 * i) % 37 + 1 for i in range(37)), 1),   # every slot but the null one
])
@pytest.mark.parametrize("value_dist", ["plain", "outliers"])
def test_kda_step_passes_k3diff(T, state_idx, steps, value_dist):
    n_slots = max(state_idx) + 2                        # one slot no row owns: must stay put
    case = Case(stage="kda", preset="small", batch=T, state_idx=state_idx, n_slots=n_slots,
                steps=steps, value_dist=value_dist, seed=T + steps)
    v = check_case(case, MegakernelBackend(), device="cuda")
    assert not v.skipped, v.skipped
    assert v.ok, v.failures()


def test_kda_step_is_batch_invariant():
    case = Case(stage="kda", preset="small", batch=12, state_idx=(5, 0, 2, 9, 11, 1, 3, -1, 4, 6, 7, 8),
                n_slots=13, seed=5)
    v = check_batch_invariance(case, MegakernelBackend(), 5, device="cuda")
    assert not v.skipped, v.skipped
    assert v.ok, v.failures()
