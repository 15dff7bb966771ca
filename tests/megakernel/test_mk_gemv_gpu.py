"""GPU: the attention steps' batch > 8 GEMVs run on wgmma (gemv.WGMMA over each GEMV's mma.sync
variant; the MoE's stay on mma.sync, gemv.WGMMA_GEMVS). That default rests on a fact about the
hardware: a wgmma k16 step rounds exactly as the mma.sync step that takes the same products. So every GEMV shape of both presets is held to it here, at batches
that take each wgmma width (16, 32, 64 and a second pass of 8), and to batch invariance: each
token alone, on the batch <= 8 kernel, gives its row's bits."""
import zlib

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")

from megakernel import cache, gemv  # noqa: E402
from megakernel.config import Gemv  # noqa: E402
from megakernel.k_gemv_mma import wgmma_arch  # noqa: E402
from megakernel.tools.tune_gemv import shapes  # noqa: E402

DEV = torch.device("cuda")
NAMES = ("gemv_x", "gemv_shared", "out_shared", "out_routed", "kda_x", "kda_fb", "kda_out",
         "mla_x", "mla_qb", "mla_out")


def run(shape, v, w, x):
    N, K, out_bf16, _ = shape
    y = torch.full((x.shape[0], N), float("nan"), dtype=torch.bfloat16 if out_bf16 else torch.float32,
                   device=DEV)
    cache.compiled("gemv", shape, **v)(dict(w=w, x=x, y=y, T=x.shape[0], ctas=gemv.FULL_GRID),
                                       torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    return y.view(torch.int16 if out_bf16 else torch.int32)


@pytest.mark.skipif(not wgmma_arch(), reason="wgmma is sm_90a's")
@pytest.mark.parametrize("preset", ["small", "full"])
@pytest.mark.parametrize("name", NAMES)
def test_wgmma_gemv_gives_mma_sync_bits(preset, name):
    shape = shapes(preset)[name]
    N, K = shape[:2]
    g = torch.Generator(DEV).manual_seed(zlib.crc32(f"{preset}/{name}".encode()))
    w = (torch.randn(N, K, generator=g, device=DEV) / K ** 0.5).bfloat16()
    x = torch.randn(72, K, generator=g, device=DEV).bfloat16()
    mma = gemv.variant(name, 64, Gemv(wgmma=False))
    wg = dict(mma, **gemv.WGMMA)       # what gemv.variant lays over it where wgmma is the default
    assert "WG" not in mma and (gemv.variant(name, 64, Gemv()) == wg) == (name in gemv.WGMMA_GEMVS)
    one = gemv.variant(name, 1, Gemv())
    for T in (9, 20, 64, 72):          # wgmma N = 16, 32, 64, then 64 + a pass of 8
        a, b = run(shape, wg, w, x[:T]), run(shape, mma, w, x[:T])
        assert torch.equal(a, b), f"{name} T={T}: wgmma and mma.sync bits differ"
    for t in (0, 37, 71):              # each token alone on the batch <= 8 kernel
        assert torch.equal(run(shape, one, w, x[t:t + 1])[0], a[t]), f"{name}: token {t}"
