"""Device basics every kernel uses: the one cutlass import (arch fixed first), the row kernels' CTA
shape, 128-bit row loads, the fixed-order row dot and warp sum, 64-bit row pointers.

All dots follow one fixed order per (row, token): lane L accumulates K chunks L, L+32, ... in f32
(fma), then a butterfly warp sum. The order depends on neither the batch size nor the token tile,
which is what makes the kernels batch-invariant and deterministic without atomics.
"""
from megakernel.cute_env import import_cutlass

import_cutlass()
import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cutlass import BFloat16, Float32, Int32, Int64, Uint32, Uint8  # noqa: E402,F401 (re-exported)

GMEM = cute.AddressSpace.gmem
WARPS = 8            # warps per CTA in the row kernels: one output row per warp
THREADS = 32 * WARPS


def copy_atom_128(dtype):
    """128-bit global loads (notes: 14.4 vs 17.4 us against 32-bit)."""
    return cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), dtype,
                               num_bits_per_copy=128)


@cute.jit
def load8_bf16_f32(atom, src):
    """16 bytes (8 bf16) from global -> f32 TensorSSA of 8."""
    frag = cute.make_rmem_tensor((8,), BFloat16)
    cute.copy(atom, src, frag)
    return frag.load().to(Float32)


@cute.jit
def dot_rows(atom, W, row, X, tix, acc, KC: cutlass.Constexpr, TT: cutlass.Constexpr, lane,
             unroll: cutlass.Constexpr = 0):
    """acc[j] += W[row, :] . X[tix[j], :] over this lane's 8-element chunks c = lane, lane+32, ...
    (a fixed per-lane order whatever the batch: what keeps the GEMVs batch-invariant). `unroll`
    puts that many chunks' loads in flight together; the sums keep the same order."""
    for c in cutlass.range(lane, KC, 32, unroll=unroll):
        wv = load8_bf16_f32(atom, W[row, c, None])
        for j in cutlass.range_constexpr(TT):
            xv = load8_bf16_f32(atom, X[tix[j], c, None])
            a = acc[j]
            for i in cutlass.range_constexpr(8):
                a = a + wv[i] * xv[i]
            acc[j] = a


@cute.jit
def warp_sum(v):
    return cute.arch.warp_reduction(v, lambda a, b: a + b)


@cute.jit
def block_sum(v, red, warp, lane, NW: cutlass.Constexpr):
    """The CTA's sum of v: a warp butterfly, then the warp partials in warp order (every thread
    gets the same value; `red`: NW floats of shared memory). Two barriers, so the next call may
    reuse `red`. (k_kda_norm.py, k_mla_norm.py and k_kda_core.py inline the same order.)"""
    s = warp_sum(v)
    if lane == 0:
        red[warp] = s
    cute.arch.sync_threads()
    tot = red[0]
    for w in cutlass.range_constexpr(1, NW):
        tot = tot + red[w]
    cute.arch.sync_threads()
    return tot



def row_ptr(base, row, row_elems: int, divby: int):
    """Pointer to `row` of a row-major matrix, offset in 64 bits: the expert tensors hold more
    than 2^31 elements at full K3 size (896*6144*3584), so a 32-bit layout offset overflows.
    `divby` re-asserts the 16-byte alignment the 128-bit loads need."""
    from cutlass import Int64
    return base + cute.assume(Int64(row) * Int64(row_elems), divby=divby)
