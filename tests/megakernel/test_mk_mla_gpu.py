"""GPU: the MLA step (megakernel/mla.py) judged by k3diff against the reference (every
intermediate, the cache written in place, the controls), and its batch invariance. The backend
serves mla by default since these passed on the H200 (2026-12-01)."""

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
    return MegakernelBackend()


@pytest.mark.parametrize("lens", [
    (0,),                                  # an empty cache: the new row alone
    (1,),
    (255, 256, 257, 0, 3, 511, 1, 100),    # ragged lengths
    (63, 64, 62, 2046, 2047, 2048, 2300, 7),   # split edges (64 rows), the switch to splits of 256
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


@pytest.mark.parametrize("mma", [True, False])
@pytest.mark.parametrize("lens", [(0, 70, 2100, 5, 64, 300, 1, 999, 31)])
def test_mla_merge_tiles_and_slices_keep_the_bits(monkeypatch, lens, mma):
    """k_mla_merge.py's token tiles and column slices change only which CTA sums what: every
    variant gives the same bits (the batch-9 grid has a padded tile at TT = 8), in both paths
    (the merge does the value projection, or only lat)."""
    from megakernel import k_mla_merge
    from megakernel.dims import MLA_SMALL
    from megakernel.mla import MlaStep
    from megakernel.tools.bench_mla import draw_weights
    dev = torch.device("cuda")
    md, T = MLA_SMALL, len(lens)
    from dataclasses import replace
    from megakernel import config
    base = config.current()
    step = MlaStep(md, draw_weights(md), dev,
                   settings=replace(base, attn=replace(base.attn, mla_mma=mma)))
    g = torch.Generator(dev).manual_seed(7)
    kv0 = torch.randn(T, max(lens) + 2, md.C, generator=g, device=dev).to(torch.bfloat16)
    x = torch.randn(T, md.d, generator=g, device=dev).to(torch.bfloat16)
    ln = torch.tensor(lens, dtype=torch.int64, device=dev)
    got = []
    for v in (dict(TT=1, VQ=1), dict(TT=1, VQ=4), dict(TT=8, VQ=4), dict(TT=8, VQ=1)):
        monkeypatch.setattr(k_mla_merge, "variant", lambda T, md=None, value=True, v=v: dict(
            v, **({} if value else dict(value=False))))
        s = step.launch(x, kv0.clone(), ln)
        got.append([s[n].clone() for n in ("lat", "o", "gated", "out")])
    for other in got[1:]:
        for a, b in zip(got[0], other):
            assert torch.equal(a, b)


def test_mla_attention_by_tma_keeps_the_bits():
    """k_mla_attn_tma.py (tiles by TMA, the scores split between the warpgroups: the default on
    sm_90a) and k_mla_attn_wg.py (tiles by cp.async, each warpgroup scoring the whole tile) run
    the same products in one order: m and acc bit for bit at full dims, l (each warpgroup's rows
    summed apart, then added) within 2^-20, over lengths whose walks end in a partial tile (its
    cp.async path), whole tiles only, short and long ones."""
    from megakernel import cache, k_mla_attn_tma
    from megakernel.dims import MLA_FULL
    from megakernel.launch_streams import stream
    from megakernel.mla import MlaStep
    from megakernel.tools.bench_mla import draw_weights
    md = MLA_FULL
    if not k_mla_attn_tma.fits(md):
        pytest.skip("k_mla_attn_tma.py runs on sm_90a only")
    dev = torch.device("cuda")
    lens = (0, 70, 2100, 5, 63, 300, 1, 999, 4095, 8191, 2047)
    T = len(lens)
    step = MlaStep(md, draw_weights(md), dev)
    g = torch.Generator(dev).manual_seed(11)
    kv = torch.randn(T, max(lens) + 3, md.C, generator=g, device=dev).to(torch.bfloat16)
    x = torch.randn(T, md.d, generator=g, device=dev).to(torch.bfloat16)
    s = step.launch(x, kv, torch.tensor(lens, dtype=torch.int64, device=dev))
    named = dict(s, **step._weights, x=x, kv_cache=kv, T=T, Lcap=kv.shape[1], NS=s["pm"].shape[2])
    got = []
    for name in ("mla_attn_tma", "mla_attn_wg"):
        for n in ("pm", "pl", "pa"):
            s[n].fill_(float("nan"))
        cache.compiled(name, md)(named, stream())
        torch.cuda.synchronize()
        got.append([s[n].clone() for n in ("pm", "pl", "pa")])
    (m, l, acc), (m0, l0, acc0) = got
    for a, b in ((m, m0), (acc, acc0)):
        assert not a.isnan().any()
        assert torch.equal(a, b)
    assert not l.isnan().any() and ((l - l0).abs() <= 2.0 ** -20 * l0.abs()).all()
