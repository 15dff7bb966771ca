"""MXFP4 decode on device: E2M1 nibbles + E8M0 scale -> f32 (CUDA-core experts, k_expert.py) or
bf16x2 mma.sync A fragments (tensor-core experts, k_expert_mma.py); both give the same values."""
from megakernel.device import cute, Float32, Uint32
from megakernel.ptx import asm_op
from cutlass.cutlass_dsl import T, dsl_user_op
from cutlass._mlir.dialects import llvm
from megakernel.mx_layout import decode_asm

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
def mxfp4_word_to_bf16x2x4(v, scale2, layout="ocp", *, loc=None, ip=None):
    """8 E2M1 nibbles (one u32 of weights in `layout`, mx_layout.py) -> 4 bf16x2 words, word i
    holding (element i, element i+4) in its (low, high) half, each value times 2^(s-191) (same
    trick and scale as mxfp4_word_to_f32x8, without the f32 unpack): the A fragments of mma.sync.
    "ocp": 17 instructions per u32, "rot" (repacked once on the host): 12; the same bits."""
    r = asm_op(4, T.i32(), [Uint32(v).ir_value(loc=loc, ip=ip),
                          Uint32(scale2).ir_value(loc=loc, ip=ip)],
             decode_asm(layout), "=r,=r,=r,=r,r,r", loc, ip)
    return [Uint32(x) for x in r]


@cute.jit
def mx_scale2_mad(code):
    """mx_scale2 in one IMAD: (s + 62) * (2^7 + 2^23), the same word for every code 0..255 (the
    low half (s + 62) << 7 < 2^16 never carries into the high one); the rot layout's."""
    return Uint32(code) * Uint32(0x00800080) + Uint32(0x1F001F00)
