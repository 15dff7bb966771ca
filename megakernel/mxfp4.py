"""MXFP4 decode on device: E2M1 nibbles + E8M0 scale -> f32 (CUDA-core experts, k_expert.py) or
bf16x2 mma.sync A fragments (tensor-core experts, k_expert_mma.py); both give the same values."""
from megakernel.device import cute, Float32, Uint32
from megakernel.ptx import asm_op
from cutlass.cutlass_dsl import T, dsl_user_op
from cutlass._mlir.dialects import llvm

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
    r = asm_op(4, T.i32(), [Uint32(v).ir_value(loc=loc, ip=ip),
                          Uint32(scale2).ir_value(loc=loc, ip=ip)],
             asm, "=r,=r,=r,=r,r,r", loc, ip)
    return [Uint32(x) for x in r]
