"""GPU: one decoder layer (megakernel/layer.py: AttnRes, the attention, AttnRes, the MoE or the
dense MLP) judged by k3diff against the reference, every intermediate and every in-place state;
and its batch invariance. Small preset: Bk = 4; layers 0-2 KDA, 3 MLA, ...; layer 0 dense."""
import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")

from k3diff.case import Case  # noqa: E402
from k3diff.invariance import check_batch_invariance  # noqa: E402
from k3diff.runner import check_case  # noqa: E402


@pytest.fixture()
def backend():
    from megakernel.backend import MegakernelBackend
    b = MegakernelBackend()
    assert "layer" in b.stages, "MEGAKERNEL_LAYER=0 leaves the layer stage out"
    return b


def layer_case(layer, T, seed, **kw):
    cfg = Case(stage="layer", preset="small", layer_idx=layer).config()
    if cfg.layer_kind(layer) == "mla":
        kw.setdefault("cache_lens", tuple((37 * i + seed) % 300 for i in range(T)))
    else:
        kw.setdefault("n_slots", T + 2)
        kw.setdefault("state_idx", tuple(range(1, T + 1)))
    return Case(stage="layer", preset="small", layer_idx=layer, batch=T, seed=seed, **kw)


@pytest.mark.parametrize("layer", [0, 1, 3, 4, 8])     # dense + block write; MoE; MLA; block writes
@pytest.mark.parametrize("T", [1, 9], ids=lambda T: f"T{T}")
def test_layer_passes_k3diff(backend, layer, T):
    v = check_case(layer_case(layer, T, seed=layer), backend, device="cuda")
    assert not v.skipped, v.skipped
    assert v.ok, v.failures()


def test_layer_is_batch_invariant(backend):
    v = check_batch_invariance(layer_case(5, 12, seed=3), backend, 5, device="cuda")
    assert not v.skipped, v.skipped
    assert v.ok, v.failures()
