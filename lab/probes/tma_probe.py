"""TMA probe (thirteenth session): does a tile of the MLA cache land in shared memory where
k_mla_attn_tma.py's descriptors and cp.async addresses expect it? One CTA per token loads row
tile `rt` of its cache by the DSL's TMA atom (as k_mla_attn_tma.py builds it), waits on its
mbarrier and copies the shared image out raw; the image is checked against the 128-byte swizzle
formula. Then mla_attn_tma alone at small rows, each in a child process with a deadline.
"""
import subprocess
import sys

import torch

from megakernel.device import cute, cutlass, BFloat16, Int32, Int64
from cutlass.cute.runtime import make_ptr, make_fake_stream
from megakernel.k_mla_attn_tma import tile_layout
from megakernel.ptx import ld_shared_v4_f32, st_global_v2_f32

TR, C = 64, 576
TB = TR * C * 2


class Probe:
    def __init__(self, swz=True, cols=C):
        self.swz, self.cols = swz, cols

    def layout(self):
        return tile_layout(TR, self.cols) if self.swz else cute.make_ordered_layout((TR, self.cols), order=(1, 0))

    @cute.jit
    def __call__(self, kv: cute.Pointer, out: cute.Pointer, T: Int32, Lcap: Int32, rt: Int32, stream):
        from cutlass.cute.nvgpu import cpasync
        g = cute.make_tensor(kv, cute.make_layout((Lcap, C, T), stride=(C, 1, cute.assume(Lcap * C, divby=64))))
        atom, tkv = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), g, self.layout(), (TR, self.cols))
        self.kernel(out, rt, atom, tkv).launch(grid=(T, 1, 1), block=(128, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, out: cute.Pointer, rt: Int32, atom, tkv):
        from cutlass.cute.nvgpu import cpasync
        tok, _, _ = cute.arch.block_idx()
        i, _, _ = cute.arch.thread_idx()
        smem = cutlass.memory.SmemAllocator()
        sb = smem.allocate(TB, 1024).toint()
        mbar = smem.allocate_array(cutlass.Int64, 1)
        s0 = cute.make_tensor(cute.make_ptr(BFloat16, sb, cute.AddressSpace.smem, assumed_align=1024),
                              self.layout())
        gkv = cute.flat_divide(tkv, (TR, self.cols))
        d0, gs = cpasync.tma_partition(atom, 0, cute.make_layout(1), cute.group_modes(s0, 0, 2),
                                       cute.group_modes(gkv, 0, 2))
        if i == 0:
            cute.arch.mbarrier_init(mbar, 1)
        cute.arch.mbarrier_init_fence()
        cute.arch.sync_threads()
        if i < 32:              # the whole warp: the copy's elect.sync needs it
            if i == 0:
                cute.arch.mbarrier_arrive_and_expect_tx(mbar, TR * self.cols * 2)
            cute.copy(atom, gs[(None, rt, 0, tok)], d0, tma_bar_ptr=mbar)
        cute.arch.mbarrier_wait(mbar, 0)
        cute.arch.sync_threads()
        ob = out.toint() + Int64(tok) * Int64(TB)
        for u in cutlass.range(i, TR * self.cols // 8, 128):
            v = ld_shared_v4_f32(sb + 16 * u)
            st_global_v2_f32(ob + Int64(16 * u), v[0], v[1])
            st_global_v2_f32(ob + Int64(16 * u + 8), v[2], v[3])


def expected(kv, rt):
    """The SW128 image of row tile rt of each token: [T, TB bytes] as int16 words."""
    T = kv.shape[0]
    img = torch.zeros(T, TB // 2, dtype=torch.int16)
    src = kv.view(torch.int16).cpu()
    for r in range(TR):
        row = rt * TR + r
        for cc in range(C // 8):
            off = (cc // 8) * 8192 + r * 128 + ((cc % 8) ^ (r % 8)) * 16
            if row < kv.shape[1]:
                img[:, off // 2: off // 2 + 8] = src[:, row, 8 * cc: 8 * cc + 8]
    return img


def image_check(swz, cols):
    T, Lcap = 3, 200
    kv = torch.randn(T, Lcap, C, device="cuda").to(torch.bfloat16)
    out = torch.zeros(T, TB // 2, dtype=torch.int16, device="cuda")
    p = lambda t: make_ptr(BFloat16, t.data_ptr(), cute.AddressSpace.gmem, assumed_align=16)  # noqa: E731
    fn = cute.compile(Probe(swz, cols), p(kv), p(out), Int32(T), Int32(Lcap), Int32(0), make_fake_stream())
    for rt in (0, 1, 3):          # tile 3: rows 192..255, past Lcap from 200 (TMA fills zeros)
        out.zero_()
        fn(p(kv), p(out), Int32(T), Int32(Lcap), Int32(rt), torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        got = out.cpu()
        if not (swz and cols == C):       # the plain image: rows of `cols` columns, the first ones
            want = torch.zeros_like(got)
            rows = kv[:, rt * TR: rt * TR + TR, :cols].contiguous().view(torch.int16).cpu().reshape(T, -1)
            want[:, :rows.shape[1]] = rows
            print(f"  (plain image, {cols} columns: words equal {(got == want).float().mean().item():.3f})")
            continue
        want = expected(kv, rt)
        bad = (got != want).sum().item()
        print(f"image rt={rt}: {'ok' if bad == 0 else f'{bad} of {got.numel()} words differ'}", flush=True)
        if bad:
            g, w = got[0].view(-1, 8), want[0].view(-1, 8)
            idx = (g != w).any(1).nonzero().flatten()[:4].tolist()
            for k in idx:
                print(f"  unit {k} (byte {16 * k}): got {g[k].tolist()} want {w[k].tolist()}")
                hit = (w == g[k]).all(1).nonzero().flatten()[:2].tolist()
                print(f"    that unit is expected at units {hit}")


def attention_child(rows):
    from megakernel.tools import mla_ksplit
    return mla_ksplit.main(["--rows", rows, "--variants", "unsplit,wgmma,tma"])


CASES = {"plain64": (False, 64), "swz576": (True, C)}

if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        sys.exit(attention_child(sys.argv[2]))
    if len(sys.argv) > 2 and sys.argv[1] == "--case":
        image_check(*CASES[sys.argv[2]])
        sys.exit(0)
    for case in CASES:
        try:
            r = subprocess.run([sys.executable, __file__, "--case", case], timeout=20, capture_output=True, text=True)
            print(f"case {case}: rc={r.returncode}", r.stdout[-700:], r.stderr[-400:], flush=True)
        except subprocess.TimeoutExpired:
            print(f"case {case}: HUNG (20 s)", flush=True)
    for rows in sys.argv[1:2]:
        try:
            r = subprocess.run([sys.executable, __file__, "--child", rows], timeout=60,
                               capture_output=True, text=True)
            print(f"attention {rows}: rc={r.returncode}", r.stdout[-600:], r.stderr[-600:], flush=True)
        except subprocess.TimeoutExpired:
            print(f"attention {rows}: HUNG (60 s)", flush=True)
