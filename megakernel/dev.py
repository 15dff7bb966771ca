"""Device helpers shared by every kernel (one place): loads, dots, MXFP4 decode, SiTU, reductions.

All dots follow one fixed order per (row, token): lane L accumulates K chunks L, L+32, ... in f32
(fma), then a butterfly warp sum. The order depends on neither the batch size nor the token tile,
which is what makes the kernels batch-invariant and deterministic without atomics.
"""
from megakernel.cute_env import import_cutlass

import_cutlass()
import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cutlass import BFloat16, Float32, Int32, Int64, Uint32, Uint8  # noqa: E402,F401 (re-exported)
from cutlass.cutlass_dsl import T, dsl_user_op  # noqa: E402
from cutlass._mlir.dialects import llvm  # noqa: E402

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


@dsl_user_op
def mxfp4_word_to_f32x8(v, scale2, *, loc=None, ip=None):
    """8 E2M1 nibbles (one u32; low nibble of byte 0 = element 0) -> 8 f32, times 2^(s-191).

    Bit trick (CUTEDSL_NOTES): a nibble placed at bits 15..12 of a bf16 half, then
    (h & 0x8000) | ((h & 0x7000) >> 6), is the E2M1 value times 2^-126 (code 0.5 becomes a bf16
    subnormal, kept exactly by Hopper's bf16 multiply). One exact bf16x2 multiply by
    2^(s-65) (`scale2`, both halves) brings it to value * 2^(s-191), a normal number for
    realistic scale codes (63..190); the caller multiplies the finished dot by 2^64.
    Pairs: (v<<12) -> elements (0,4), (v<<8) -> (1,5), (v<<4) -> (2,6), v -> (3,7).
    """
    body = []
    outs = [(0, 4), (1, 5), (2, 6), (3, 7)]
    for (lo, hi), sh in zip(outs, (12, 8, 4, 0)):
        src = "$8" if sh == 0 else "x"
        if sh:
            body.append(f"shl.b32 x, $8, {sh};")
        body += [f"shr.b32 y, {src}, 6;", f"and.b32 z, {src}, 0x80008000;",
                 "and.b32 y, y, 0x01C001C0;", "or.b32 z, z, y;",
                 "mul.rn.bf16x2 z, z, $9;",
                 f"shl.b32 ${lo}, z, 16;", f"and.b32 ${hi}, z, 0xFFFF0000;"]
    asm = "{\n.reg .b32 x, y, z;\n" + "\n".join(body) + "\n}"
    res = llvm.inline_asm(
        llvm.StructType.get_literal([T.f32()] * 8),
        [Uint32(v).ir_value(loc=loc, ip=ip), Uint32(scale2).ir_value(loc=loc, ip=ip)],
        asm, "=f,=f,=f,=f,=f,=f,=f,=f,r,r", has_side_effects=False,
        is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT)
    return [Float32(llvm.extractvalue(T.f32(), res, [i], loc=loc, ip=ip)) for i in range(8)]


@cute.jit
def mx_scale2(code):
    """E8M0 code s -> bf16 2^(s-65) in both halves of a u32 (bf16 exponent field s-65+127)."""
    b = (Uint32(code) + Uint32(62)) << Uint32(7)
    return b | (b << Uint32(16))


MX_POST = float(2.0 ** 64)   # the factor left over by mx_scale2, applied once per finished dot


def sigmoid(x):
    return Float32(1.0) / (Float32(1.0) + cute.math.exp(-x))


def situ(g, u, beta, beta_lin):
    """SiTU(g,u) = (b tanh(g/b) sigmoid(g)) (bl tanh(u/bl)), f32 (K3_SPEC 5.1)."""
    b = Float32(beta)
    bl = Float32(beta_lin)
    return (b * cute.math.tanh(g / b) * sigmoid(g)) * (bl * cute.math.tanh(u / bl))


def bf16_round(x):
    """f32 -> nearest-even bf16 -> f32 (a rounding point of K3_SPEC 7)."""
    return x.to(BFloat16).to(Float32)


def row_ptr(base, row, row_elems: int, divby: int):
    """Pointer to `row` of a row-major matrix, offset in 64 bits: the expert tensors hold more
    than 2^31 elements at full K3 size (896*6144*3584), so a 32-bit layout offset overflows.
    `divby` re-asserts the 16-byte alignment the 128-bit loads need."""
    from cutlass import Int64
    return base + cute.assume(Int64(row) * Int64(row_elems), divby=divby)


# ---- tensor-core MXFP4 path (k_expert_mma.py): raw loads, nibble -> mma.sync A fragments ----

def _asm(ret_n, ret_t, args, asm, cons, loc=None, ip=None, side=False):
    """Inline PTX returning `ret_n` values of llvm type `ret_t` (a struct when more than one;
    nothing when 0). `side`: keep it in program order with the other side-effecting asm."""
    if ret_n == 0:
        llvm.inline_asm(None, args, asm, cons, has_side_effects=True, is_align_stack=False,
                        asm_dialect=llvm.AsmDialect.AD_ATT)
        return None
    if ret_n == 1:
        return llvm.inline_asm(ret_t, args, asm, cons, has_side_effects=side,
                               is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT)
    res = llvm.inline_asm(llvm.StructType.get_literal([ret_t] * ret_n), args, asm, cons,
                          has_side_effects=side, is_align_stack=False,
                          asm_dialect=llvm.AsmDialect.AD_ATT)
    return [llvm.extractvalue(ret_t, res, [i], loc=loc, ip=ip) for i in range(ret_n)]


@dsl_user_op
def ld_v4_stream(addr, pf: int = 0, *, loc=None, ip=None):
    """16 bytes of read-only weights at a 64-bit global address -> 4 u32; not kept in L1 (the
    activations stay there: CUTEDSL_NOTES, L1 no-allocate gave up to 5% for MXFP4). `pf`: L2
    prefetch size in bytes (0, 64, 128, 256)."""
    hint = f".L2::{pf}B" if pf else ""
    r = _asm(4, T.i32(), [Int64(addr).ir_value(loc=loc, ip=ip)],
             f"ld.global.nc.L1::no_allocate{hint}.v4.u32 {{$0, $1, $2, $3}}, [$4];",
             "=r,=r,=r,=r,l", loc, ip)
    return [Uint32(v) for v in r]


@dsl_user_op
def ld_v4_cached(addr, coherent: bool = False, *, loc=None, ip=None):
    """16 bytes of activations -> 4 u32, through L1. Written by an earlier launch: the read-only
    path (.nc); written by this launch (`coherent`, k_persistent.py): a plain load, ordered after
    the producer's release by the task's acquire + barrier (side-effecting, so it is not hoisted
    above them)."""
    nc = "" if coherent else ".nc"
    r = _asm(4, T.i32(), [Int64(addr).ir_value(loc=loc, ip=ip)],
             f"ld.global{nc}.v4.u32 {{$0, $1, $2, $3}}, [$4];", "=r,=r,=r,=r,l" +
             (",~{memory}" if coherent else ""), loc, ip, side=coherent)
    return [Uint32(v) for v in r]


@dsl_user_op
def ld_u8_stream(addr, *, loc=None, ip=None):
    """One byte (an E8M0 scale code) -> u32, zero-extended, not kept in L1."""
    r = _asm(1, T.i32(), [Int64(addr).ir_value(loc=loc, ip=ip)],
             "ld.global.nc.L1::no_allocate.u8 $0, [$1];", "=r,l", loc, ip)
    return Uint32(r)


@dsl_user_op
def prmt(a, b, sel: int, *, loc=None, ip=None):
    """Byte permute of {b, a} (PTX prmt.b32, default mode)."""
    r = _asm(1, T.i32(), [Uint32(a).ir_value(loc=loc, ip=ip), Uint32(b).ir_value(loc=loc, ip=ip)],
             f"prmt.b32 $0, $1, $2, {sel:#x};", "=r,r,r", loc, ip)
    return Uint32(r)


@dsl_user_op
def mxfp4_word_to_bf16x2x4(v, scale2, *, loc=None, ip=None):
    """8 E2M1 nibbles (one u32, nibble j = bits 4j..4j+3) -> 4 bf16x2 words, word i holding
    (nibble i, nibble i+4) in its (low, high) half, each value times 2^(s-191) (same trick and
    scale as mxfp4_word_to_f32x8, without the f32 unpack): the A fragments of mma.sync."""
    # pair (i, i+4): isolate the two nibbles (v, or v >> 8 for i = 2, 3), then ONE integer
    # multiply by 2^a + 2^(a-6) lays two copies of each nibble side by side without overlap
    # (so without carries): the sign lands on bit 15 / 31 and the magnitude on 6..8 / 22..24;
    # one mask keeps exactly those bits. 2 logic ops + 1 IMAD per word instead of 2 shifts +
    # 2 logic ops, same bits as mxfp4_word_to_f32x8's (checked in tests/megakernel).
    body = ["shr.b32 w, $4, 8;"]
    for i in range(4):
        src = "$4" if i < 2 else "w"
        iso, mul = ((0x000F000F, 4096 + 64), (0x00F000F0, 256 + 4))[i % 2]
        body += [f"and.b32 z, {src}, {iso:#010x};", f"mul.lo.u32 z, z, {mul};",
                 "and.b32 z, z, 0x81C081C0;", f"mul.rn.bf16x2 ${i}, z, $5;"]
    asm = "{\n.reg .b32 w, z;\n" + "\n".join(body) + "\n}"
    r = _asm(4, T.i32(), [Uint32(v).ir_value(loc=loc, ip=ip),
                          Uint32(scale2).ir_value(loc=loc, ip=ip)],
             asm, "=r,=r,=r,=r,r,r", loc, ip)
    return [Uint32(x) for x in r]


@dsl_user_op
def mma_bf16_16816(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3, *, loc=None, ip=None):
    """D = A B + C, mma.sync m16n8k16, A row-major 16x16 bf16, B 16x8 bf16, C/D f32 (PTX
    fragment layouts: a0/a2 row g, a1/a3 row g+8, k 2t..2t+1 / 2t+8..2t+9; b0/b1 column g,
    the same k; c0,c1 row g columns 2t,2t+1; c2,c3 row g+8; g = lane/4, t = lane%4)."""
    args = [Uint32(a).ir_value(loc=loc, ip=ip) for a in (a0, a1, a2, a3, b0, b1)]
    args += [Float32(c).ir_value(loc=loc, ip=ip) for c in (c0, c1, c2, c3)]
    r = _asm(4, T.f32(), args,
             "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {$0, $1, $2, $3}, "
             "{$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};",
             "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", loc, ip)
    return [Float32(x) for x in r]


@dsl_user_op
def cp_async_16(saddr, gaddr, pf: int = 0, *, loc=None, ip=None):
    """cp.async.cg 16 bytes global -> shared (L2 only; `pf` L2 prefetch bytes, 0 = none)."""
    hint = f".L2::{pf}B" if pf else ""
    _asm(0, None, [Int32(saddr).ir_value(loc=loc, ip=ip), Int64(gaddr).ir_value(loc=loc, ip=ip)],
         f"cp.async.cg.shared.global{hint} [$0], [$1], 16;", "r,l,~{memory}", loc, ip)


@dsl_user_op
def cp_async_4(saddr, gaddr, *, loc=None, ip=None):
    """cp.async.ca 4 bytes global -> shared."""
    _asm(0, None, [Int32(saddr).ir_value(loc=loc, ip=ip), Int64(gaddr).ir_value(loc=loc, ip=ip)],
         "cp.async.ca.shared.global [$0], [$1], 4;", "r,l,~{memory}", loc, ip)


@dsl_user_op
def ld_shared_v4(saddr, *, loc=None, ip=None):
    """16 bytes from shared memory -> 4 u32 (kept in order after cp.async.wait_group)."""
    r = _asm(4, T.i32(), [Int32(saddr).ir_value(loc=loc, ip=ip)],
             "ld.shared.v4.u32 {$0, $1, $2, $3}, [$4];", "=r,=r,=r,=r,r,~{memory}", loc, ip,
             side=True)
    return [Uint32(v) for v in r]


@dsl_user_op
def globaltimer(*, loc=None, ip=None):
    """The GPU's global nanosecond clock (for the persistent launch's task trace)."""
    return Int64(_asm(1, T.i64(), [], "mov.u64 $0, %globaltimer;", "=l", loc, ip, side=True))


@dsl_user_op
def smid(*, loc=None, ip=None):
    """The SM this thread runs on."""
    return Int32(_asm(1, T.i32(), [], "mov.u32 $0, %smid;", "=r", loc, ip, side=True))
