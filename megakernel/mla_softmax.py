"""The online softmax of one cache tile in the mma C layout, shared by the two tensor-core MLA
attentions (k_mla_attn_mma.py on mma.sync, k_mla_attn_wg.py on wgmma): a thread holds scores of
two heads, lo and hi (the C fragment's rows g and g + 8), element e of its n being head lo for
e % 4 < 2, else hi, at cache row rb + 8 (e // 4) + 2 tq + e % 2; the four lanes of a quad hold
all of a head's row of the tile. The split's state (m, l, the un-normalised output) is the
caller's; these are the two passes over the tile between which it rescales."""
from megakernel.device import cute, cutlass, BFloat16, Float32
from megakernel.ptx import pack_bf16x2


@cute.jit
def masked_max(S, z, n: cutlass.Constexpr, rb, end, tq, scale):
    """z[e] = scale S[e], -inf for rows from `end` on (weight exactly 0); returns the quad's
    maxima (head lo, head hi) over the tile (z may be S)."""
    mx_lo = Float32(-float("inf"))
    mx_hi = Float32(-float("inf"))
    for e in cutlass.range_constexpr(n):
        zv = S[e] * scale
        if rb + 8 * (e // 4) + 2 * tq + e % 2 >= end:
            zv = Float32(-float("inf"))
        z[e] = zv
        if cutlass.const_expr(e % 4 < 2):
            mx_lo = cutlass.max(mx_lo, zv)
        else:
            mx_hi = cutlass.max(mx_hi, zv)
    for off in cutlass.range_constexpr(1, 3):
        mx_lo = cutlass.max(mx_lo, cute.arch.shuffle_sync_bfly(mx_lo, off))
        mx_hi = cutlass.max(mx_hi, cute.arch.shuffle_sync_bfly(mx_hi, off))
    return mx_lo, mx_hi


@cute.jit
def exp_sum(z, n: cutlass.Constexpr, mn_lo, mn_hi, l_lo, l_hi):
    """z[e] = exp(z[e] - m) with its head's new maximum m, added in element order to this lane's
    running sums (l_lo, l_hi), which it returns."""
    for e in cutlass.range_constexpr(n):
        if cutlass.const_expr(e % 4 < 2):
            z[e] = cute.math.exp(z[e] - mn_lo)
            l_lo = l_lo + z[e]
        else:
            z[e] = cute.math.exp(z[e] - mn_hi)
            l_hi = l_hi + z[e]
    return l_lo, l_hi


@cute.jit
def update(z, n: cutlass.Constexpr, O, nb: cutlass.Constexpr, m_lo, m_hi, l_lo, l_hi, mx_lo, mx_hi):
    """The step after a tile's maxima (mx_lo, mx_hi): the new maxima m, the correction
    a = exp(m_old - m), z[e] = exp(z[e] - m) summed into l (times a), O times a (its P V must be
    complete). Returns the new (m_lo, m_hi, l_lo, l_hi)."""
    mn_lo = cutlass.max(m_lo, mx_lo)
    mn_hi = cutlass.max(m_hi, mx_hi)
    a_lo = cute.math.exp(m_lo - mn_lo)
    a_hi = cute.math.exp(m_hi - mn_hi)
    l_lo, l_hi = exp_sum(z, n, mn_lo, mn_hi, l_lo * a_lo, l_hi * a_hi)
    rescale(O, nb, a_lo, a_hi)
    return mn_lo, mn_hi, l_lo, l_hi


@cute.jit
def hi_lo(x0, x1):
    """Two probabilities as a bf16x2 A-fragment register pair: (their bf16 roundings, what those
    leave): ~16 bits of each p through two bf16 products (the spec's f32 softmax)."""
    h0 = x0.to(BFloat16).to(Float32)
    h1 = x1.to(BFloat16).to(Float32)
    return pack_bf16x2(h0, h1), pack_bf16x2(x0 - h0, x1 - h1)


@cute.jit
def rescale(O, nb: cutlass.Constexpr, a_lo, a_hi):
    """The output fragments (nb blocks of 4: head lo's two, then hi's) times their head's
    correction exp(m_old - m_new)."""
    for b in cutlass.range_constexpr(nb):
        O[4 * b] = O[4 * b] * a_lo
        O[4 * b + 1] = O[4 * b + 1] * a_lo
        O[4 * b + 2] = O[4 * b + 2] * a_hi
        O[4 * b + 3] = O[4 * b + 3] * a_hi
