"""The online softmax of one cache tile in the mma C layout, shared by the two tensor-core MLA
attentions (k_mla_attn_mma.py on mma.sync, k_mla_attn_wg.py on wgmma): a thread holds scores of
two heads, lo and hi (the C fragment's rows g and g + 8), element e of its n being head lo for
e % 4 < 2, else hi, at cache row rb + 8 (e // 4) + 2 tq + e % 2; the four lanes of a quad hold
all of a head's row of the tile. The split's state (m, l, the un-normalised output) is the
caller's; these are the two passes over the tile between which it rescales."""
from megakernel.device import cute, cutlass, Float32


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
def rescale(O, nb: cutlass.Constexpr, a_lo, a_hi):
    """The output fragments (nb blocks of 4: head lo's two, then hi's) times their head's
    correction exp(m_old - m_new)."""
    for b in cutlass.range_constexpr(nb):
        O[4 * b] = O[4 * b] * a_lo
        O[4 * b + 1] = O[4 * b + 1] * a_lo
        O[4 * b + 2] = O[4 * b + 2] * a_hi
        O[4 * b + 3] = O[4 * b + 3] * a_hi
