"""Inline-PTX instructions the DSL does not expose as wanted (raw global / shared loads with cache
hints, cp.async, prmt, mma.sync m16n8k16, ldmatrix, bf16x2 packing, %globaltimer, %smid), each an `@dsl_user_op` around
`llvm.inline_asm` (CUTEDSL_NOTES)."""
from megakernel.device import Float32, Int32, Int64, Uint32
from cutlass.cutlass_dsl import T, dsl_user_op
from cutlass._mlir.dialects import llvm

def asm_op(ret_n, ret_t, args, asm, cons, loc=None, ip=None, side=False):
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
    r = asm_op(4, T.i32(), [Int64(addr).ir_value(loc=loc, ip=ip)],
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
    r = asm_op(4, T.i32(), [Int64(addr).ir_value(loc=loc, ip=ip)],
             f"ld.global{nc}.v4.u32 {{$0, $1, $2, $3}}, [$4];", "=r,=r,=r,=r,l" +
             (",~{memory}" if coherent else ""), loc, ip, side=coherent)
    return [Uint32(v) for v in r]


@dsl_user_op
def ld_u8_stream(addr, *, loc=None, ip=None):
    """One byte (an E8M0 scale code) -> u32, zero-extended, not kept in L1."""
    r = asm_op(1, T.i32(), [Int64(addr).ir_value(loc=loc, ip=ip)],
             "ld.global.nc.L1::no_allocate.u8 $0, [$1];", "=r,l", loc, ip)
    return Uint32(r)


@dsl_user_op
def prmt(a, b, sel: int, *, loc=None, ip=None):
    """Byte permute of {b, a} (PTX prmt.b32, default mode)."""
    r = asm_op(1, T.i32(),
               [Uint32(a).ir_value(loc=loc, ip=ip), Uint32(b).ir_value(loc=loc, ip=ip)],
               f"prmt.b32 $0, $1, $2, {sel:#x};", "=r,r,r", loc, ip)
    return Uint32(r)


@dsl_user_op
def mma_bf16_16816(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3, *, loc=None, ip=None):
    """D = A B + C, mma.sync m16n8k16, A row-major 16x16 bf16, B 16x8 bf16, C/D f32 (PTX
    fragment layouts: a0/a2 row g, a1/a3 row g+8, k 2t..2t+1 / 2t+8..2t+9; b0/b1 column g,
    the same k; c0,c1 row g columns 2t,2t+1; c2,c3 row g+8; g = lane/4, t = lane%4)."""
    args = [Uint32(a).ir_value(loc=loc, ip=ip) for a in (a0, a1, a2, a3, b0, b1)]
    args += [Float32(c).ir_value(loc=loc, ip=ip) for c in (c0, c1, c2, c3)]
    r = asm_op(4, T.f32(), args,
             "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {$0, $1, $2, $3}, "
             "{$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};",
             "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", loc, ip)
    return [Float32(x) for x in r]


@dsl_user_op
def cp_async_16(saddr, gaddr, pf: int = 0, *, loc=None, ip=None):
    """cp.async.cg 16 bytes global -> shared (L2 only; `pf` L2 prefetch bytes, 0 = none)."""
    hint = f".L2::{pf}B" if pf else ""
    asm_op(0, None, [Int32(saddr).ir_value(loc=loc, ip=ip), Int64(gaddr).ir_value(loc=loc, ip=ip)],
         f"cp.async.cg.shared.global{hint} [$0], [$1], 16;", "r,l,~{memory}", loc, ip)


@dsl_user_op
def cp_async_4(saddr, gaddr, *, loc=None, ip=None):
    """cp.async.ca 4 bytes global -> shared."""
    asm_op(0, None, [Int32(saddr).ir_value(loc=loc, ip=ip), Int64(gaddr).ir_value(loc=loc, ip=ip)],
         "cp.async.ca.shared.global [$0], [$1], 4;", "r,l,~{memory}", loc, ip)


@dsl_user_op
def ld_shared_v4(saddr, *, loc=None, ip=None):
    """16 bytes from shared memory -> 4 u32 (kept in order after cp.async.wait_group)."""
    r = asm_op(4, T.i32(), [Int32(saddr).ir_value(loc=loc, ip=ip)],
             "ld.shared.v4.u32 {$0, $1, $2, $3}, [$4];", "=r,=r,=r,=r,r,~{memory}", loc, ip,
             side=True)
    return [Uint32(v) for v in r]


@dsl_user_op
def st_shared_v4_f32(saddr, v0, v1, v2, v3, *, loc=None, ip=None):
    """16 bytes (4 f32) to shared memory, in program order with the other shared accesses."""
    asm_op(0, None, [Int32(saddr).ir_value(loc=loc, ip=ip)] +
           [Float32(v).ir_value(loc=loc, ip=ip) for v in (v0, v1, v2, v3)],
           "st.shared.v4.f32 [$0], {$1, $2, $3, $4};", "r,f,f,f,f,~{memory}", loc, ip)


@dsl_user_op
def st_global_v2_f32(addr, v0, v1, *, loc=None, ip=None):
    """8 bytes (2 f32) to a 64-bit global address."""
    asm_op(0, None, [Int64(addr).ir_value(loc=loc, ip=ip)] +
           [Float32(v).ir_value(loc=loc, ip=ip) for v in (v0, v1)],
           "st.global.v2.f32 [$0], {$1, $2};", "l,f,f,~{memory}", loc, ip)


@dsl_user_op
def ld_shared_v4_f32(saddr, *, loc=None, ip=None):
    """16 bytes from shared memory -> 4 f32 (in program order, like ld_shared_v4)."""
    r = asm_op(4, T.f32(), [Int32(saddr).ir_value(loc=loc, ip=ip)],
               "ld.shared.v4.f32 {$0, $1, $2, $3}, [$4];", "=f,=f,=f,=f,r,~{memory}", loc, ip,
               side=True)
    return [Float32(v) for v in r]


@dsl_user_op
def ldmatrix_x4_trans(saddr, *, loc=None, ip=None):
    """ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: four 8x8 b16 matrices, rows at the 16-byte
    aligned shared addresses of lanes 0-7, 8-15, 16-23, 24-31; register i of lane (g, t) holds
    elements (row 2t, column g) and (row 2t + 1, column g) of matrix i, the first in the low half
    (an mma.sync B fragment when the stored rows are k)."""
    r = asm_op(4, T.i32(), [Int32(saddr).ir_value(loc=loc, ip=ip)],
             "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {$0, $1, $2, $3}, [$4];",
             "=r,=r,=r,=r,r,~{memory}", loc, ip, side=True)
    return [Uint32(v) for v in r]


@dsl_user_op
def pack_bf16x2(lo, hi, *, loc=None, ip=None):
    """Two f32 rounded to bf16 (nearest even) in one u32: `lo` in the low half, `hi` in the high."""
    r = asm_op(1, T.i32(), [Float32(hi).ir_value(loc=loc, ip=ip), Float32(lo).ir_value(loc=loc, ip=ip)],
             "cvt.rn.bf16x2.f32 $0, $1, $2;", "=r,f,f", loc, ip)
    return Uint32(r)


@dsl_user_op
def globaltimer(*, loc=None, ip=None):
    """The GPU's global nanosecond clock (for the persistent launch's task trace)."""
    return Int64(asm_op(1, T.i64(), [], "mov.u64 $0, %globaltimer;", "=l", loc, ip, side=True))


@dsl_user_op
def smid(*, loc=None, ip=None):
    """The SM this thread runs on."""
    return Int32(asm_op(1, T.i32(), [], "mov.u32 $0, %smid;", "=r", loc, ip, side=True))


@dsl_user_op
def st_shared_v4_u32(saddr, v0, v1, v2, v3, *, loc=None, ip=None):
    """16 bytes (4 u32) to shared memory, in program order with the other shared accesses."""
    asm_op(0, None, [Int32(saddr).ir_value(loc=loc, ip=ip)] +
           [Uint32(v).ir_value(loc=loc, ip=ip) for v in (v0, v1, v2, v3)],
           "st.shared.v4.u32 [$0], {$1, $2, $3, $4};", "r,r,r,r,r,~{memory}", loc, ip)


@dsl_user_op
def st_shared_f32(saddr, v, *, loc=None, ip=None):
    """4 bytes (an f32) to shared memory (in program order with the other shared accesses)."""
    asm_op(0, None, [Int32(saddr).ir_value(loc=loc, ip=ip), Float32(v).ir_value(loc=loc, ip=ip)],
           "st.shared.f32 [$0], $1;", "r,f,~{memory}", loc, ip)


@dsl_user_op
def ld_shared_f32(saddr, *, loc=None, ip=None):
    """An f32 from shared memory (in program order with the other shared accesses)."""
    r = asm_op(1, T.f32(), [Int32(saddr).ir_value(loc=loc, ip=ip)],
               "ld.shared.f32 $0, [$1];", "=f,r,~{memory}", loc, ip, side=True)
    return Float32(r)


@dsl_user_op
def st_shared_u32(saddr, v, *, loc=None, ip=None):
    """4 bytes to shared memory (in program order with the other shared accesses)."""
    asm_op(0, None, [Int32(saddr).ir_value(loc=loc, ip=ip), Uint32(v).ir_value(loc=loc, ip=ip)],
           "st.shared.u32 [$0], $1;", "r,r,~{memory}", loc, ip)


@dsl_user_op
def proxy_fence_shared(*, loc=None, ip=None):
    """Generic-proxy writes to shared memory made visible to the async proxy (wgmma's operand
    reads): after the st.shared of a wgmma operand, before the barrier that publishes it."""
    asm_op(0, None, [], "fence.proxy.async.shared::cta;", "~{memory}", loc, ip)


@dsl_user_op
def wgmma_fence(*, loc=None, ip=None):
    """wgmma.fence: orders this thread's earlier register writes (A fragments, accumulators)
    before the wgmma that reads them."""
    asm_op(0, None, [], "wgmma.fence.sync.aligned;", "~{memory}", loc, ip)


@dsl_user_op
def wgmma_commit_wait(*, loc=None, ip=None):
    """Commit the warpgroup's wgmma in flight and wait for all of them (accumulators final, A
    registers and the B tile free again)."""
    asm_op(0, None, [], "wgmma.commit_group.sync.aligned;\n\twgmma.wait_group.sync.aligned 0;",
           "~{memory}", loc, ip)


@dsl_user_op
def wgmma_commit(*, loc=None, ip=None):
    """Commit the warpgroup's wgmma issued since the last commit as one group (no wait)."""
    asm_op(0, None, [], "wgmma.commit_group.sync.aligned;", "~{memory}", loc, ip)


@dsl_user_op
def wgmma_wait(n: int = 0, *, loc=None, ip=None):
    """Wait until at most n of the warpgroup's committed groups are in flight (they complete in
    order)."""
    asm_op(0, None, [], f"wgmma.wait_group.sync.aligned {n};", "~{memory}", loc, ip)


@dsl_user_op
def wgmma_bf16_rs(acc: list, a0, a1, a2, a3, desc_b, tnsp_b: int = 0, *, loc=None, ip=None):
    """D += A B, wgmma.mma_async m64nNk16 (N = 2 len(acc)), f32 accumulators, A bf16 from
    registers (per warp the mma.sync m16n8k16 A fragment of its 16 rows: warp w of the
    warpgroup rows 16w..16w+15), B bf16 N x 16 in shared memory (descriptor `desc_b`), K-major,
    or N-major with tnsp_b = 1. acc: this thread's 4 N / 8 accumulators, in the mma.sync C order
    per 8 columns; returns the new values (asynchronous: read them after wgmma_commit_wait)."""
    n = len(acc)
    N = 2 * n
    outs = ", ".join(f"${i}" for i in range(n))
    args = [Uint32(a).ir_value(loc=loc, ip=ip) for a in (a0, a1, a2, a3)]
    args += [Int64(desc_b).ir_value(loc=loc, ip=ip), Int32(1).ir_value(loc=loc, ip=ip)]
    args += [Float32(c).ir_value(loc=loc, ip=ip) for c in acc]
    # scale-d is a predicate (1: D += A B); imm-scale-a, imm-scale-b 1; then imm-tnsp-b
    asm = (f"{{\n\t.reg .pred p;\n\tsetp.ne.b32 p, ${n + 5}, 0;\n\t"
           f"wgmma.mma_async.sync.aligned.m64n{N}k16.f32.bf16.bf16 {{{outs}}}, "
           f"{{${n}, ${n + 1}, ${n + 2}, ${n + 3}}}, ${n + 4}, p, 1, 1, {tnsp_b};\n\t}}")
    cons = ",".join(["=f"] * n + ["r"] * 4 + ["l", "r"] + [str(i) for i in range(n)]) + ",~{memory}"
    r = asm_op(n, T.f32(), args, asm, cons, loc, ip, side=True)
    return [Float32(x) for x in r]


@dsl_user_op
def wgmma_bf16_ss(acc: list, desc_a, desc_b, *, loc=None, ip=None):
    """D += A B, wgmma.mma_async m64nNk16 (N = 2 len(acc)), f32 accumulators, A (64 x 16) and B
    (N x 16) bf16 K-major in shared memory (descriptors `desc_a`, `desc_b`); acc as
    wgmma_bf16_rs's."""
    n = len(acc)
    outs = ", ".join(f"${i}" for i in range(n))
    args = [Int64(d).ir_value(loc=loc, ip=ip) for d in (desc_a, desc_b)]
    args += [Int32(1).ir_value(loc=loc, ip=ip)]
    args += [Float32(c).ir_value(loc=loc, ip=ip) for c in acc]
    # scale-d a predicate (1: D += A B); imm-scale-a, imm-scale-b 1; neither transposed
    asm = (f"{{\n\t.reg .pred p;\n\tsetp.ne.b32 p, ${n + 2}, 0;\n\t"
           f"wgmma.mma_async.sync.aligned.m64n{2 * n}k16.f32.bf16.bf16 {{{outs}}}, "
           f"${n}, ${n + 1}, p, 1, 1, 0, 0;\n\t}}")
    cons = ",".join(["=f"] * n + ["l", "l", "r"] + [str(i) for i in range(n)]) + ",~{memory}"
    r = asm_op(n, T.f32(), args, asm, cons, loc, ip, side=True)
    return [Float32(x) for x in r]


@dsl_user_op
def opaque_u64(v, *, loc=None, ip=None):
    """v unchanged, through a side-effecting move the compiler cannot look through: what is
    computed from it after this point stays after it (not hoisted out of the loop it is in)."""
    r = asm_op(1, T.i64(), [Int64(v).ir_value(loc=loc, ip=ip)], "mov.b64 $0, $1;", "=l,l",
               loc, ip, side=True)
    return Int64(r)
