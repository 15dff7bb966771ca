"""The MXFP4 weight layouts the tensor-core experts (k_expert_mma.py) can read, and the decode of
each: the PTX text that turns one u32 of weights (8 E2M1 nibbles) into the four bf16x2 A-fragment
words, word i = (element i, element i + 4) as (low, high) half, each the E2M1 value times 2^-126
before the scale multiply (mxfp4.py). No cutlass here: the CPU tests run this very text.

- "ocp": the weights as stored (OCP MX: nibble j of a little-endian u32 = element j). Per word:
  isolate two nibbles, one IMAD lays sign and magnitude side by side, one AND keeps them:
  4 instructions + the bf16x2 multiply, 17 per 8 weights with the shared shift.
- "rot": each u32 repacked once, on the host (`pack_rot`), into the bits u = A w such that word
  i is (rotl(u, a) ^ rotl(u, b)) & MASK, or rotl(u, a) & MASK, for the rotations of `FORMS`: 4
  funnel shifts for the whole u32, then one LOP3 and the multiply per word, 12 per 8 weights.
  A is the inverse of that map over GF(2) composed with ocp's bit placement, so both layouts
  decode to the same bits (tests/megakernel/test_mk_mma_layout.py runs both texts).

Why those forms: the 8 bits of a word (sign 15 / 31, magnitude 6..8 / 22..24) are not a tile of
the u32 under rotations alone, and a form that XORs two rotations kills the all-ones word, so at
least one plain rotation is needed; over one to three shared rotations no choice of four forms
inverts (the exhaustive search is a test: test_fewer_than_four_rotations_cannot_decode_rot), and
these are among the first found with four.
"""
from functools import lru_cache

MASK = 0x81C081C0          # bf16x2: sign 15 / 31, E2M1 magnitude in 6..8 / 22..24
FORMS = ((0,), (12,), (2, 6), (2, 8))     # rotations XORed into word i (0: u itself)
LAYOUTS = ("ocp", "rot")
LUT_XOR_AND = 0x28         # lop3 truth table of (a ^ b) & c


def decode_asm(layout: str) -> str:
    """The inline-asm body: $4 = the u32 of weights, $5 = the bf16x2 scale, $0..$3 = words 0..3
    (mxfp4.mxfp4_word_to_bf16x2x4)."""
    if layout == "ocp":
        # pair (i, i+4): isolate the two nibbles (v, or v >> 8 for i = 2, 3), then ONE integer
        # multiply by 2^a + 2^(a-6) lays two copies of each nibble side by side without overlap
        # (so without carries): the sign lands on bit 15 / 31 and the magnitude on 6..8 / 22..24
        body = ["shr.b32 w, $4, 8;"]
        for i in range(4):
            src = "$4" if i < 2 else "w"
            iso, mul = ((0x000F000F, 4096 + 64), (0x00F000F0, 256 + 4))[i % 2]
            body += [f"and.b32 z, {src}, {iso:#010x};", f"mul.lo.u32 z, z, {mul};",
                     "and.b32 z, z, 0x81C081C0;", f"mul.rn.bf16x2 ${i}, z, $5;"]
        return "{\n.reg .b32 w, z;\n" + "\n".join(body) + "\n}"
    if layout != "rot":
        raise ValueError(f"MXFP4 layout must be one of {LAYOUTS}, got {layout!r}")
    rots = sorted({s for f in FORMS for s in f if s})
    body = [f"shf.l.wrap.b32 r{s}, $4, $4, {s};" for s in rots]
    reg = lambda s: f"r{s}" if s else "$4"  # noqa: E731
    for i, f in enumerate(FORMS):
        if len(f) == 1:
            body.append(f"and.b32 z, {reg(f[0])}, {MASK:#010x};")
        else:
            body.append(f"lop3.b32 z, {reg(f[0])}, {reg(f[1])}, {MASK:#010x}, {LUT_XOR_AND:#04x};")
        body.append(f"mul.rn.bf16x2 ${i}, z, $5;")
    regs = ", ".join(f"r{s}" for s in rots)
    return "{\n.reg .b32 " + regs + ", z;\n" + "\n".join(body) + "\n}"


def _rotl(x, s):
    return ((x << s) | (x >> (32 - s))) & 0xFFFFFFFF if s else x


def words_rot(u):
    """The four pre-multiply words the rot text computes from u (Python ints)."""
    out = []
    for f in FORMS:
        z = 0
        for s in f:
            z ^= _rotl(u, s)
        out.append(z & MASK)
    return out


def words_ocp(v):
    """The four pre-multiply words of the ocp layout: nibble i's sign at 15 and magnitude at 6..8,
    nibble i + 4's at 31 and 22..24 (the CUDA-core path's recipe, mxfp4_word_to_f32x8)."""
    out = []
    for i in range(4):
        lo, hi = (v >> 4 * i) & 0xF, (v >> 4 * (i + 4)) & 0xF
        out.append(((lo & 8) << 12) | ((lo & 7) << 6) | ((hi & 8) << 28) | ((hi & 7) << 22))
    return out


def _bits(words):
    """The 32 information bits of four decoded words, as one int (word i's MASK bits in order)."""
    pos = [b for b in range(32) if MASK >> b & 1]
    return sum(((words[i] >> p) & 1) << (8 * i + j) for i in range(4) for j, p in enumerate(pos))


@lru_cache(maxsize=1)
def pack_matrix():
    """A as 32 u32 columns: pack(w) = XOR of column b over the set bits b of w. Solved over GF(2):
    the rot decode is linear in u, so invert it on the 32 unit vectors."""
    basis = {}                                   # leading output bit -> (output bits, u bits)
    for b in range(32):
        c, comb = _bits(words_rot(1 << b)), 1 << b
        while c:
            h = c.bit_length() - 1
            if h not in basis:
                basis[h] = (c, comb)
                break
            c, comb = c ^ basis[h][0], comb ^ basis[h][1]
    assert len(basis) == 32, "FORMS do not give an invertible decode"
    cols = []
    for b in range(32):
        y, comb = _bits(words_ocp(1 << b)), 0
        while y:
            h = y.bit_length() - 1
            y, comb = y ^ basis[h][0], comb ^ basis[h][1]
        cols.append(comb)
    return tuple(cols)


def pack_word(w: int) -> int:
    """One u32 of OCP weights in the rot layout."""
    u = 0
    for b, col in enumerate(pack_matrix()):
        if w >> b & 1:
            u ^= col
    return u


def pack_rot(packed, rows: int = 1 << 24):
    """The rot layout of MXFP4 weights stored as OCP (a uint8 tensor, last dim a multiple of 4,
    each little-endian u32 = 8 elements): the same shape and dtype, on the same device. Done
    `rows` u32 at a time, so the int64 intermediates stay ~0.1 KB per row (~2 GB at the default)
    whatever the tensor: the full-dims experts are ~10 GB of uint8, 8x that widened at once did
    not fit an 80 GB GPU (call 76). Once per weight tensor (moe.LatentMoE)."""
    import torch
    assert packed.dtype == torch.uint8 and packed.shape[-1] % 4 == 0 and packed.is_contiguous()
    lut = torch.tensor([[pack_word(x << 8 * byte) for x in range(256)] for byte in range(4)],
                       dtype=torch.int64, device=packed.device)
    flat = packed.view(-1, 4)
    out = torch.empty_like(flat)
    for s in range(0, flat.shape[0], rows):
        b = flat[s:s + rows].to(torch.int64)
        u = lut[0][b[:, 0]] ^ lut[1][b[:, 1]] ^ lut[2][b[:, 2]] ^ lut[3][b[:, 3]]
        out[s:s + rows] = torch.stack([(u >> 8 * k) & 0xFF for k in range(4)], 1).to(torch.uint8)
    return out.view(packed.shape)
