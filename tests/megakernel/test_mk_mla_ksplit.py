"""CPU: MLA's mma.sync attention layouts (its default: ksplit with two head tiles per CTA; ksplit
with one; the unsplit layout it replaced) build for the H200 and the GB300 without spilling, the
wgmma attention (the H200's default) with its wgmma and no more than its measured spill, and
the yardstick of tools/mla_ksplit.py (the latent merged from a kernel's split partials) is the
softmax it stands for."""
import os
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)
import shutil
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = """
import sys
from megakernel import cache
from megakernel.dims import MLA_FULL
fn = cache.compile_kernel("mla_attn_mma", MLA_FULL, fresh=True, **eval(sys.argv[1]))
open(sys.argv[2], "w").write(fn.__ptx__)
"""


@pytest.mark.parametrize("arch", ["sm_90a", "sm_103a"])
@pytest.mark.parametrize("variant", ["dict()", "dict(ksplit=True, mtc=1)", "dict(ksplit=False, mtc=1)"])
def test_ksplit_builds_without_spilling(variant, arch, tmp_path):
    pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")
    from megakernel import config
    env = config.child_env(path_first=ROOT, CUTE_DSL_ARCH=arch, CUTE_DSL_KEEP="ptx",
                           CUTE_DSL_DUMP_DIR=str(tmp_path), MEGAKERNEL_CACHE="off")
    ptx = tmp_path / "k.ptx"
    r = subprocess.run([sys.executable, "-c", CHILD, variant, str(ptx)], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=limit(600))
    assert r.returncode == 0, r.stderr[-2000:]
    text = ptx.read_text()
    assert "mma.sync.aligned.m16n8k16" in text
    assert ("st.shared.v4.f32" in text) == ("ksplit=False" not in variant)     # the partials' exchange
    if shutil.which("ptxas") is None:
        pytest.skip("no ptxas here to count spills")
    from megakernel.tools.spills import parse_ptxas
    p = subprocess.run(["ptxas", f"-arch={arch}", "-v", str(ptx), "-o", str(tmp_path / "k.cubin")],
                       capture_output=True, text=True, timeout=limit(600))
    regs, st, ld = parse_ptxas(p.stdout + p.stderr)
    assert (st, ld) == (0, 0) and regs <= 255


WG_CHILD = CHILD.replace('"mla_attn_mma"', '"mla_attn_wg"')


def test_wgmma_attention_builds_with_its_measured_spill(tmp_path):
    """k_mla_attn_wg.py for the H200: its 36 score and 8 value wgmma per tile, and no more than
    the 80 bytes ptxas spilled when it was measured (255 registers; lab/mla/): a change that spills more shows here before it is timed."""
    pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")
    from megakernel import config
    env = config.child_env(path_first=ROOT, CUTE_DSL_ARCH="sm_90a", CUTE_DSL_KEEP="ptx",
                           CUTE_DSL_DUMP_DIR=str(tmp_path), MEGAKERNEL_CACHE="off")
    ptx = tmp_path / "k.ptx"
    r = subprocess.run([sys.executable, "-c", WG_CHILD, "dict()", str(ptx)], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=limit(600))
    assert r.returncode == 0, r.stderr[-2000:]
    text = ptx.read_text()
    assert text.count("wgmma.mma_async.sync.aligned.m64n64k16") == 2 * 36   # tile 0, then j + 1
    assert text.count("wgmma.mma_async.sync.aligned.m64n256k16") == 8
    if shutil.which("ptxas") is None:
        pytest.skip("no ptxas here to count spills")
    from megakernel.tools.spills import parse_ptxas
    p = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(ptx), "-o", str(tmp_path / "k.cubin")],
                       capture_output=True, text=True, timeout=limit(600))
    regs, st, ld = parse_ptxas(p.stdout + p.stderr)
    assert regs <= 255 and st <= 80, (regs, st, ld)


def test_merged_partials_are_the_softmax():
    from megakernel.tools.mla_ksplit import merged
    g = torch.Generator().manual_seed(3)
    T, H, N, R, CH = 2, 3, 37, 8, 16
    z = torch.randn(T, H, N, generator=g, dtype=torch.float64) * 4
    v = torch.randn(T, N, R, generator=g, dtype=torch.float64)
    NS = 4                                         # the last split is past the end: (-inf, 0, 0)
    pm = torch.full((T, H, NS), float("-inf"), dtype=torch.float64)
    pl = torch.zeros(T, H, NS, dtype=torch.float64)
    pa = torch.zeros(T, H, NS, R, dtype=torch.float64)
    for s in range(NS):
        zs = z[:, :, s * CH:(s + 1) * CH]
        if zs.shape[2] == 0:
            continue
        m = zs.max(2).values
        p = torch.exp(zs - m.unsqueeze(2))
        pm[:, :, s], pl[:, :, s] = m, p.sum(2)
        pa[:, :, s] = torch.einsum("thn,tnr->thr", p, v[:, s * CH:(s + 1) * CH])
    want = torch.einsum("thn,tnr->thr", torch.softmax(z, 2), v)
    assert torch.allclose(merged(pm, pl, pa), want, rtol=1e-12, atol=1e-12)
    pa[0, 0, 1] += 1.0                             # a wrong partial shows
    assert not torch.allclose(merged(pm, pl, pa), want, rtol=1e-6, atol=1e-6)


TMA_CHILD = CHILD.replace('"mla_attn_mma"', '"mla_attn_tma"')


def _tile_loop(variant, tmp_path):
    """(STL, LDL) in the TMA attention's tile loop (the one loop of tensor-core math: its 44
    wgmma) for `variant`, or None when this machine cannot say (no ptxas or cuobjdump)."""
    from megakernel import config
    from megakernel.tools.spills import cuobjdump, loop_spills
    if shutil.which("ptxas") is None or cuobjdump() is None:
        return None
    d = tmp_path / variant.replace(" ", "")
    d.mkdir()
    env = config.child_env(path_first=ROOT, CUTE_DSL_ARCH="sm_90a", CUTE_DSL_KEEP="ptx",
                           CUTE_DSL_DUMP_DIR=str(d), MEGAKERNEL_CACHE="off")
    r = subprocess.run([sys.executable, "-c", TMA_CHILD, variant, str(d / "k.ptx")], env=env,
                       cwd=d, capture_output=True, text=True, timeout=limit(600))
    assert r.returncode == 0, r.stderr[-2000:]
    subprocess.run(["ptxas", "-arch=sm_90a", str(d / "k.ptx"), "-o", str(d / "k.cubin")],
                   check=True, timeout=limit(600))
    sass = subprocess.run([cuobjdump(), "-sass", str(d / "k.cubin")], capture_output=True,
                          text=True, check=True, timeout=limit(600)).stdout
    loops = [lp for lp in loop_spills(sass) if lp[2] > 1000]     # the tile loop: ~1.8k instructions
    assert len(loops) == 1, loops
    return loops[0][3], loops[0][4]


def test_tma_remat_reloads_less_in_its_tile_loop(tmp_path):
    """k_mla_attn_tma.py with `remat` (the query's descriptors recomputed per tile, tools/
    the default since call 70; mla_ksplit.py's `tma_held` is the other): fewer local loads in the tile loop than held, at most
    the 11 and 1 measured; a change that spills there again shows here."""
    pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")
    base = _tile_loop("dict(remat=False)", tmp_path)
    if base is None:
        pytest.skip("no ptxas or cuobjdump here")
    st, ld = _tile_loop("dict()", tmp_path)          # the default since call 70
    assert ld < base[1] and st <= 1 and ld <= 11, (base, (st, ld))
