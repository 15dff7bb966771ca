"""python -m megakernel.tools.bench_mla: the MLA step (mla.py) against the copy roofline and torch.

Method as bench_kda.py's: R steps captured in one CUDA graph, the replay timed with events,
median of 5; every token row is one sequence of the given cache length. Roofline = the bytes the
step must read (the weights once: the fused x-side projection, q_b, kv_b, o_proj; each sequence's
cache rows once, its new row written) / the device-copy bandwidth measured in the same run; "roof2"
is the two-limit floor (tools/roofline.py: bytes over read bandwidth or flops over the dense
bf16 rate, B or F the larger), measured in the same run. Then
each launch alone, the step with its GEMVs on the other GEMV kernel
(k_gemv.py / k_gemv_mma.py), the step on MLA's other path (config.Attn.mla_mma: the attention,
absorb and value projection on the CUDA cores, k_mla_attn.py, k_mla_absorb.py and k_mla_merge.py's
value part, or on the tensor cores, k_mla_attn_mma.py and k_mla_heads.py), the step with its
tensor-core attention on the other instruction (config.Attn.mla_wg: k_mla_attn_wg.py on wgmma or
k_mla_attn_mma.py on mma.sync; sm_90a), at batch > 8 the step
with its tensor-core GEMVs on mma.sync instead of wgmma (config.Gemv.wgmma, the same bits), the step in the other stream mode (mla.py: "fused" or "fork";
"x" is its time over the default's). Last, when flashinfer-python is installed (the
`flashinfer` extra), FlashInfer's MLA decode attention (BatchMLAPagedAttentionWrapper, FA2 plan,
page size 1, planned once per shape outside the timing) on the same query, cache and lengths:
"fi attn" is its run alone (events over 20 eager calls, median of 5) against ours, mla_attn + mla_merge
alone (on the tensor-core path the merge yields lat only, as FlashInfer's attention does; on the
CUDA-core path it also un-absorbs and gates), and "fi step" the step with FlashInfer's attention in
place of those two launches, composed from the times measured alone in this run. Against k3diff's torch-blocked MLA
(megakernel/ imports neither k3diff nor reference): `python -m k3diff.tools.step_time`.
"""
import argparse
import sys

import torch

from dataclasses import replace

from megakernel import k_mla_attn_wg
from megakernel.config import MLA_GEMVS
from megakernel.dims import MLA_FULL, MLA_SMALL
from megakernel.mla import MlaStep
from megakernel.side_stream import other_mode
from megakernel.tools import roofline
from megakernel.tools.bench import (no_gpu, copy_bw, other_gemv_kernel, other_large_gemv,
                                    time_events, with_settings)
from megakernel.tools.bench_kda import graph_us

DEV = torch.device("cuda")


def draw_weights(md, seed=1):
    g = torch.Generator(DEV).manual_seed(seed)
    rn = lambda *s, fan: (torch.randn(*s, generator=g, device=DEV) / fan ** 0.5).to(torch.bfloat16)  # noqa: E731
    H, Q = md.H, md.NP + md.RP
    return {"q_a.weight": rn(md.QL, md.d, fan=md.d), "kv_a.weight": rn(md.C, md.d, fan=md.d),
            "q_a_norm.weight": (1 + 0.1 * torch.randn(md.QL, generator=g, device=DEV)).to(torch.bfloat16),
            "kv_a_norm.weight": (1 + 0.1 * torch.randn(md.R, generator=g, device=DEV)).to(torch.bfloat16),
            "q_b.weight": rn(H * Q, md.QL, fan=md.QL), "kv_b.weight": rn(H * (md.NP + md.V), md.R, fan=md.R),
            "g.weight": rn(H * md.V, md.d, fan=md.d), "o.weight": rn(md.d, H * md.V, fan=H * md.V)}


def step_inputs(md, T, L, R):
    """x [T, d], a cache of L + R + 1 rows per sequence, and R steps' lengths L, L + 1, ..."""
    cache = torch.randn(T, L + R + 1, md.C, device=DEV).to(torch.bfloat16)
    x = torch.randn(T, md.d, device=DEV).to(torch.bfloat16)
    ln = [torch.full((T,), L + r, dtype=torch.int64, device=DEV) for r in range(R)]
    return x, cache, ln


def weight_elements(md):
    """The step's weights, each once: the fused x-side projection, q_b, kv_b, o_proj."""
    return (md.NA * md.d + md.H * (md.NP + md.RP) * md.QL + md.H * (md.NP + md.V) * md.R
            + md.d * md.H * md.V)


def step_bytes(md, T, L):
    return 2 * weight_elements(md) + T * 2 * md.C * (L + 2)        # L + 1 rows read, one written


def step_flops(md, T, L):
    """Every GEMV for each token (2 flops per weight element), and attention over each sequence's
    L + 1 rows in the latent space: a C-wide score and an R-wide value per row and head."""
    return 2 * T * weight_elements(md) + 2 * T * (L + 1) * md.H * (md.C + md.R)


def csr_one_row_pages(lens, lcap):
    """FlashInfer's CSR plan over a contiguous [T, Lcap, C] cache with every row a page, sequence b
    attending over rows 0..lens[b]: (qo_indptr, kv_indptr, kv_indices, kv_len), int32."""
    dev, T = lens.device, lens.numel()
    n = lens.to(torch.int32) + 1
    kv_indptr = torch.zeros(T + 1, dtype=torch.int32, device=dev)
    kv_indptr[1:] = torch.cumsum(n, 0)
    seq = torch.repeat_interleave(torch.arange(T, device=dev), n.to(torch.int64))
    within = torch.arange(int(kv_indptr[-1]), device=dev) - kv_indptr[:-1][seq]
    return (torch.arange(T + 1, dtype=torch.int32, device=dev), kv_indptr,
            (seq * lcap + within).to(torch.int32), n)


class FlashInferAttn:
    """FlashInfer's MLA decode attention alone, timed, called as k3diff's flashinfer backend calls
    it (k3diff/backends/flashinfer_mla.py, checked there against the reference on the H200); `us`
    returns None without flashinfer (said once) or when a shape fails (said, the bench goes on)."""
    WORKSPACE = 128 << 20

    def __init__(self):
        try:
            from flashinfer.mla import BatchMLAPagedAttentionWrapper, MLAPlanMetadata
        except Exception as e:  # noqa: BLE001 - optional column
            print(f"fi column off: flashinfer does not import ({type(e).__name__}: {e})".splitlines()[0])
            self.wrapper = None
            return
        self.meta = MLAPlanMetadata
        self.wrapper = BatchMLAPagedAttentionWrapper(
            torch.empty(self.WORKSPACE, dtype=torch.uint8, device=DEV), backend="fa2")

    def us(self, md, cache, lens):
        """cache [T, Lcap, C] bf16, lens [T]: every sequence attends over rows 0..lens (the new row
        included, as the step's attention does), each cache row one page."""
        if self.wrapper is None:
            return None
        try:
            T, lcap, C = cache.shape
            qo, kv_indptr, kv_indices, n = csr_one_row_pages(lens, lcap)
            self.wrapper.plan(metadata=self.meta.csr(qo, kv_indptr, kv_indices, n), num_heads=md.H,
                              head_dim_ckv=md.R, head_dim_kpe=md.RP, page_size=1, causal=False,
                              sm_scale=float(md.NP + md.RP) ** -0.5, q_data_type=torch.bfloat16,
                              kv_data_type=torch.bfloat16)
            query = torch.randn(T, md.H, C, device=DEV).to(torch.bfloat16)     # [ql | q_pe], packed
            out = torch.empty(T, md.H, md.R, dtype=torch.bfloat16, device=DEV)
            pages = cache.view(T * lcap, 1, C)
            run = lambda: self.wrapper.run(query=query, kv_cache=pages, out=out)  # noqa: E731
            for _ in range(3):
                run()
            reps = 20
            return time_events(lambda: [run() for _ in range(reps)]) / reps
        except Exception as e:  # noqa: BLE001 - a column, not the run
            print(f"  fi column failed at T={cache.shape[0]}: {type(e).__name__}: {e}".splitlines()[0])
            return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m megakernel.tools.bench_mla", description=__doc__.splitlines()[0])
    p.add_argument("--dims", default="full", help="full, small or both")
    p.add_argument("--batches", default="1,8,64")
    p.add_argument("--lens", default="1024,8192,32768", help="cache lengths")
    a = p.parse_args(argv)
    if no_gpu("bench_mla"):
        return 2
    try:
        batches = [int(b) for b in a.batches.split(",")]
        lens = [int(n) for n in a.lens.split(",")]
        dims = [{"full": MLA_FULL, "small": MLA_SMALL}[d] for d in a.dims.split(",")]
    except (ValueError, KeyError):
        print("bench_mla: --batches / --lens take integers, --dims full and/or small", file=sys.stderr)
        return 2
    bw = copy_bw()
    machine = roofline.measure(DEV)
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s; {machine.line()}")
    fi = FlashInferAttn()
    print(f"{'dims':6} {'T':>4} {'L':>6} {'us':>9} {'MB':>8} {'roofline':>9} {'roof2':>8}  each launch alone (us)")
    for md, dn in zip(dims, a.dims.split(",")):
        w = draw_weights(md)
        step = MlaStep(md, w, DEV)
        for T in batches:
            for L in lens:
                R = 4
                x, cache, ln = step_inputs(md, T, L, R)
                us = {only: graph_us(lambda i, only=only: step.launch(x, cache, ln[i], stages=only,
                                                           max_len=L + R), R)
                      for only in (None,) + tuple((n,) for n in step.launches())}
                # the same step with MLA's GEMVs all on the other kernel, in the same run
                mma_now = any(g in step.settings.gemv.mma for g in MLA_GEMVS)
                with other_gemv_kernel([step], MLA_GEMVS):
                    alt = graph_us(lambda i: step.launch(x, cache, ln[i], max_len=L + R), R)
                # and with the other attention kernel (k_mla_attn.py / k_mla_attn_mma.py)
                mla_mma = step.settings.attn.mla_mma
                with with_settings([step], lambda s: replace(
                        s, attn=replace(s.attn, mla_mma=not s.attn.mla_mma))):
                    alt_at = graph_us(lambda i: step.launch(x, cache, ln[i], max_len=L + R), R)
                # and with the tensor-core attention on the other instruction (config.Attn.mla_wg:
                # k_mla_attn_wg.py on wgmma or k_mla_attn_mma.py on mma.sync), where wgmma runs
                at2 = None
                if mla_mma and k_mla_attn_wg.fits(md):
                    with with_settings([step], lambda s: replace(
                            s, attn=replace(s.attn, mla_wg=not s.attn.mla_wg))):
                        at2 = graph_us(lambda i: step.launch(x, cache, ln[i], max_len=L + R), R)
                # and with the GEMVs at batch > 8 on mma.sync (config.Gemv.wgmma; the same bits)
                wg = None
                if T > 8:
                    with other_large_gemv([step]):
                        wg = graph_us(lambda i: step.launch(x, cache, ln[i], max_len=L + R), R)
                # and in the other stream mode (fused x-side GEMV / the gate beside the chain)
                with other_mode(step) as other:
                    one = graph_us(lambda i: step.launch(x, cache, ln[i], max_len=L + R), R)
                mb = step_bytes(md, T, L)
                alone = " ".join(f"{n}={us[(n,)]:.1f}" for n in step.launches())
                alone += f"  step with the GEMVs all on the {'CUDA' if mma_now else 'tensor'} cores {alt:.1f}"
                alone += f"  step with MLA's products on the {'CUDA' if mla_mma else 'tensor'} cores {alt_at:.1f}"
                if at2 is not None:
                    other_at = "mma.sync" if step.settings.attn.mla_wg else "wgmma"
                    alone += f"  attention on {other_at} {at2:.1f} (x{at2 / us[None]:.2f})"
                if wg is not None:
                    alone += f"  GEMVs on mma.sync {wg:.1f} (x{wg / us[None]:.2f})"
                alone += f"  {other} {one:.1f} (x{one / us[None]:.2f})"
                fi_us = fi.us(md, cache, ln[0])
                if fi_us is not None:
                    ours = us[("mla_attn",)] + us[("mla_merge",)]
                    alone += (f"  fi attn {fi_us:.1f} vs ours {ours:.1f} (x{fi_us / ours:.2f})"
                              f"  fi step {us[None] - ours + fi_us:.1f} (x{(us[None] - ours + fi_us) / us[None]:.2f})")
                two = roofline.share(machine, us[None], mb, step_flops(md, T, L))
                print(f"{dn:6} {T:>4} {L:>6} {us[None]:9.1f} {mb / 1e6:8.1f} "
                      f"{mb / (us[None] * 1e-6) / bw:8.1%} {two}  {alone}",
                      flush=True)
                cache = None           # freed before the next length's cache (a name, not del: the lambdas)
        step = None
    return 0


if __name__ == "__main__":
    sys.exit(main())
