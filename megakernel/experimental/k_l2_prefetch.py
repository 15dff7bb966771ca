"""A later launch's weights fetched into L2 ahead of it (cp.async.bulk.prefetch.L2).

State: written in a session with no GPU lent, never run on a GPU. Its plumbing (the attention
steps' prefetch stages and specs, the MoE's prefetch_up, tools/tune_prefetch.py,
scripts/gpu_prefetch.sh) left the shipped path; last shipped at main fd6de34. Next: a GPU run.

Why: at batch 1 an attention step's big GEMVs wait behind chains of latency-bound launches
(MLA's norm -> q_b -> absorb -> attention -> merge; KDA's f_b -> conv -> core -> norm) while
HBM idles, and some GEMVs have too few CTAs to keep enough bytes in flight (MLA's [q_a | kv_a]:
132 CTAs of 4 warps, 1.6 TB/s). One bulk prefetch per chunk hands the fetch to the SM's copy
engine: the issuing thread does not wait, holds no register or shared memory for it, and the
CTA exits at once, so the chain keeps its SMs while HBM fills L2 (60 MB on the H200) with the
bytes the GEMV will read first.

What is fetched: the first `prefix` bytes of each of `rows` rows `row_bytes` apart (run-time
ints). A GEMV's warps walk each row's K blocks in order (k_gemv_mma.py: block j of every split
before block j + 1), so a row prefix is what every CTA reads first, and all CTAs start on L2
hits; a whole tensor is one row (`region`). A prefetch writes nothing and changes no value: the
bits of a step are the same with or without it (tested on the GPU), only its time moves.
"""
from megakernel.device import cute, cutlass, Int32, Int64, Uint8
from megakernel.kernel_args import INT, Args, declare
from cutlass.cutlass_dsl import dsl_user_op

from megakernel.ptx import asm_op


@dsl_user_op
def prefetch_l2_bulk(gaddr, size, last: bool = False, *, loc=None, ip=None):
    """cp.async.bulk.prefetch.L2 of `size` bytes (a multiple of 16, 16-byte aligned) at a 64-bit
    global address: the copy engine fetches them into L2, the thread does not wait. `last`: with
    an L2::evict_last policy (the lines outlive streaming traffic of normal priority)."""
    args = [Int64(gaddr).ir_value(loc=loc, ip=ip), Int32(size).ir_value(loc=loc, ip=ip)]
    if last:
        asm = ("{\n.reg .b64 p;\ncreatepolicy.fractional.L2::evict_last.b64 p, 1.0;\n"
               "cp.async.bulk.prefetch.L2.global.L2::cache_hint [$0], $1, p;\n}")
    else:
        asm = "cp.async.bulk.prefetch.L2.global [$0], $1;"
    asm_op(0, None, args, asm, "l,r,~{memory}", loc, ip)


CHUNK = 32 * 1024          # bytes per bulk prefetch (one instruction)
THREADS = 32


def region(w, mb):
    """(rows, row_bytes, prefix) of a prefetch of the first `mb` MiB of 2-D weight `w` (rows
    of a contiguous tensor, or row views of one): the same prefix of every row, or the whole
    tensor as one region when `mb` covers it (None: all of it)."""
    rows, row_bytes = w.shape[0], w.shape[1] * w.element_size()
    assert w.stride(1) == 1 and w.stride(0) * w.element_size() == row_bytes and row_bytes % 16 == 0
    total = rows * row_bytes
    want = total if mb is None else min(total, int(mb * 2 ** 20))
    if want >= total:
        assert total <= 2 ** 31 - CHUNK, "one prefetch region must stay below 2 GiB (int32)"
        return 1, total, total
    return rows, row_bytes, max(16, want // rows // 16 * 16)


@declare
class L2Prefetch:
    ARGS = (("w", Uint8), ("rows", INT), ("row_bytes", INT), ("prefix", INT))

    def __init__(self, dims, ctas: int = 132, last: bool = False):
        """ctas: CTAs of one warp (spread over the SMs, so is the copy engines' work); `last`:
        the lines get the L2 evict_last policy."""
        self.dm, self.ctas, self.last = dims, ctas, last

    @cute.jit
    def __call__(self, *a):           # ARGS, stream (signatures: kernel_args.declare)
        A = Args(self, a, host=True)
        self.kernel(*A.kernel()).launch(grid=(self.ctas, 1, 1), block=(THREADS, 1, 1),
                                        stream=A.stream)

    @cute.kernel
    def kernel(self, *a):             # ARGS
        A = Args(self, a, host=False)
        tid, _, _ = cute.arch.thread_idx()
        bx, _, _ = cute.arch.block_idx()
        nch = (A.prefix + (CHUNK - 1)) // CHUNK
        wb = A.w.toint()
        # item i = (row i // nch, chunk i % nch): the first rows' prefixes are issued first
        for i in cutlass.range(bx * THREADS + tid, A.rows * nch, self.ctas * THREADS):
            r = i // nch
            c = i - r * nch
            n = cutlass.min(Int32(CHUNK), A.prefix - c * CHUNK)
            prefetch_l2_bulk(wb + Int64(r) * Int64(A.row_bytes) + Int64(c * CHUNK), n, self.last)
