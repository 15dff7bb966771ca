"""Device helpers shared by every kernel (one place): loads, dots, MXFP4 decode, SiTU, reductions.

All dots follow one fixed order per (row, token): lane L accumulates K chunks L, L+32, ... in f32
(fma), then a butterfly warp sum. The order depends on neither the batch size nor the token tile,
which is what makes the kernels batch-invariant and deterministic without atomics.
"""
from megakernel.cute_env import import_cutlass

import_cutlass()
import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cutlass import BFloat16, Float32, Int32, Uint32, Uint8  # noqa: E402
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
