"""Correct alternatives to helpers of the `torch-blocked` candidate that differ only in legitimate
numerics: another f32 summation order, split-K merged by a tree, TF32 on bf16-valued operands,
FMA or separately rounded products, exp/rsqrt/sigmoid at their documented ulp error, subnormals
flushed to zero, a two-pass softmax. k3diff/false_alarms.py swaps them in (as k3diff/mutants.py
swaps in broken ones): a correct kernel may do any of these, so k3diff must pass every one.

Each has the signature of the helper it replaces; none changes what is rounded to bf16 or where.
"""
from __future__ import annotations

import contextlib

import torch

from .blocked_ops import F32, bf16, rms_scale

CHUNK = 16           # the K width of one MMA step / one warp's slice: the orders below sum such chunks


# ---------------------------------------------------------------- GEMM summation orders (all f32)
def _chunks(x, w, width):
    x = x.to(F32)
    for k0 in range(0, x.shape[-1], width):
        yield x[..., k0:k0 + width] @ w[:, k0:k0 + width].to(F32).t()


def _empty(x, w):
    return x.new_zeros(*x.shape[:-1], w.shape[0], dtype=F32)


def pairwise(parts):
    """Pairwise (tree) sum of an iterable of partials, keeping O(log n) of them alive: a binary
    counter of partial sums by level, merged upward as in a tree reduction."""
    stack = []                       # (level, partial)
    for p in parts:
        level = 0
        while stack and stack[-1][0] == level:
            p = stack.pop()[1] + p
            level += 1
        stack.append((level, p))
    acc = None
    for _, p in reversed(stack):     # the unpaired tail, smallest levels first
        acc = p if acc is None else p + acc
    return acc


def gemm_sequential(x, w, splits=None):
    """Sequential f32 sum of 16-wide chunks of K, first to last (a loop over K in one thread)."""
    acc = None
    for p in _chunks(x, w, CHUNK):
        acc = p if acc is None else acc + p
    return _empty(x, w) if acc is None else acc


def gemm_reversed(x, w, splits=None):
    """The same chunks summed last to first."""
    parts = list(_chunks(x, w, CHUNK)) if x.shape[-1] <= 64 * CHUNK else None
    if parts is None:                # long K: walk the chunks backwards without keeping them all
        x32 = x.to(F32)
        acc = None
        for k0 in reversed(range(0, x.shape[-1], CHUNK)):
            p = x32[..., k0:k0 + CHUNK] @ w[:, k0:k0 + CHUNK].to(F32).t()
            acc = p if acc is None else acc + p
        return _empty(x, w) if acc is None else acc
    acc = None
    for p in reversed(parts):
        acc = p if acc is None else acc + p
    return _empty(x, w) if acc is None else acc


def gemm_pairwise(x, w, splits=None):
    """16-wide chunk partials summed pairwise (a tree over K, as a warp shuffle reduction)."""
    acc = pairwise(_chunks(x, w, CHUNK))
    return _empty(x, w) if acc is None else acc


def gemm_split_tree(n: int):
    """Split-K into n slices, each one f32 GEMM, the partials merged by a tree (as split-K over CTAs
    with a tree reduction)."""
    def gemm(x, w, splits=None):
        K = x.shape[-1]
        step = max(1, -(-K // n))
        acc = pairwise(_chunks(x, w, step))
        return _empty(x, w) if acc is None else acc
    gemm.__name__ = f"gemm_split{n}_tree"
    return gemm


def gemm_tf32(original):
    """TF32 tensor-core matmuls where both operands are bf16-valued (a bf16 value is exact in TF32,
    so only the tensor cores' f32 accumulation differs); anything else as before. CUDA only."""
    def gemm(x, w, splits=None):
        if x.is_cuda and x.dtype == torch.bfloat16 and w.dtype == torch.bfloat16:
            with _tf32():
                return x.to(F32) @ w.to(F32).t()
        return original(x, w) if splits is None else original(x, w, splits)
    return gemm


@contextlib.contextmanager
def _tf32():
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")       # TF32 allowed
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


# ---------------------------------------------------------------- FMA and separately rounded products
def fma(a, b, c):
    """fl(a·b + c) with one rounding to f32: the f64 product of two f32 values is exact, the sum is
    rounded to f64 and then to f32 (a double rounding, rarely one ulp off a true FMA: still a
    correctly rounded-or-neighbouring result, as hardware FMA variants differ by)."""
    return (a.double() * b.double() + c.double()).to(F32)


def combine_fma(wts, y_routes):
    """The weighted combine in slot order with one FMA per slot instead of a multiply and an add."""
    acc = torch.zeros(y_routes.shape[0], y_routes.shape[2], dtype=F32, device=y_routes.device)
    for j in range(y_routes.shape[1]):
        acc = fma(wts[:, j:j + 1].expand_as(acc), y_routes[:, j], acc)
    return acc


def combine_reversed(wts, y_routes):
    """The weighted combine summed in the reverse slot order (the slot order is unspecified)."""
    acc = torch.zeros(y_routes.shape[0], y_routes.shape[2], dtype=F32, device=y_routes.device)
    for j in reversed(range(y_routes.shape[1])):
        acc = acc + wts[:, j:j + 1] * y_routes[:, j]
    return acc


def _dot_fma(S, vec):
    """S [..., V, K] times vec [..., K] by a chain of FMAs over K (one thread per row)."""
    acc = torch.zeros(S.shape[:-1], dtype=F32, device=S.device)
    for k in range(S.shape[-1]):
        acc = fma(S[..., k], vec[..., k].unsqueeze(-1).expand_as(acc), acc)
    return acc


def delta_rule_fma(S, gk, q, k, v, beta):
    """The gated delta rule with FMA chains for the two contractions and the rank-1 update."""
    S = S * torch.exp(gk).unsqueeze(2)
    e = _dot_fma(S, k)
    u = beta.unsqueeze(-1) * (v - e)
    S = fma(u.unsqueeze(-1).expand_as(S), k.unsqueeze(2).expand_as(S), S)
    return S, _dot_fma(S, q)


def delta_rule_mul_add(S, gk, q, k, v, beta):
    """The gated delta rule with every product rounded to f32 before the sum (no FMA)."""
    S = S * torch.exp(gk).unsqueeze(2)
    e = (S * k.unsqueeze(2)).sum(-1)
    u = beta.unsqueeze(-1) * (v - e)
    S = S + u.unsqueeze(-1) * k.unsqueeze(2)
    return S, (S * q.unsqueeze(2)).sum(-1)


# ---------------------------------------------------------------- approximate special functions
def _ulps(x, n):
    """x moved by n ulps (n >= 0, elementwise) in a direction fixed by x's own bits: the worst a
    function with an n-ulp error bound may return, deterministic so both runs of a case agree."""
    x = x.to(F32)
    sign = torch.where((x.view(torch.int32) & 1) == 1, 1.0, -1.0)
    return x + sign * n * _ulp(x)


def _ulp(x):
    a = x.abs()
    return torch.nextafter(a, torch.full_like(a, float("inf"))) - a


def exp_approx(x):
    """exp at CUDA's documented __expf error: 2 + floor(|1.173 x|) ulps (CUDA C Programming Guide,
    intrinsic functions)."""
    x = x.to(F32)
    y = torch.exp(x)
    n = 2 + torch.floor((1.173 * x).abs().clamp_max(1e6))
    return torch.where(torch.isfinite(y) & (y > 0), _ulps(y, n), y)


def rsqrt_approx(x):
    """rsqrt at CUDA's documented rsqrtf error: 2 ulps."""
    y = torch.rsqrt(x.to(F32))
    return torch.where(torch.isfinite(y), _ulps(y, torch.full_like(y, 2.0)), y)


def sigmoid_approx(x):
    """sigmoid as 1/(1 + __expf(-x)) (the usual kernel form), with exp at its documented error."""
    return 1.0 / (1.0 + exp_approx(-x.to(F32)))


# ---------------------------------------------------------------- subnormals flushed to zero
def ftz(t):
    """A float tensor with its subnormal values flushed to (signed) zero, as FTZ hardware does."""
    if not t.is_floating_point():
        return t
    return torch.where(t.abs() < torch.finfo(t.dtype).tiny, t * 0, t)


def gemm_ftz(original):
    def gemm(x, w, splits=None):
        out = original(ftz(x), w) if splits is None else original(ftz(x), w, splits)
        return ftz(out)
    return gemm


# ---------------------------------------------------------------- two-pass softmax
def attend_two_pass(Q, rows, n, R, scale):
    """MLA attention over each sequence's n rows in one pass for the max, one for the sum (no
    split-KV partials, no merge): the same result as the online form up to f32 rounding."""
    G, C = Q.shape[0], rows.shape[-1]
    L = int(n.max())
    valid = torch.arange(L, device=rows.device).view(1, -1) < n.view(-1, 1)       # [G, L]
    kv = torch.where(valid[..., None], rows[:, :L].to(F32), 0.0)                 # NaN sentinels masked
    z = torch.einsum("ghc,gtc->ght", Q, kv) * scale
    z = z.masked_fill(~valid.view(G, 1, L), float("-inf"))
    p = torch.exp(z - z.amax(-1, keepdim=True))
    return torch.einsum("ght,gtr->ghr", p, kv[..., :R]) / p.sum(-1).unsqueeze(-1)


def attn_res_two_pass(prefix, delta, blocks, w_norm, w_proj, w_out, n, write_idx, eps, eps_out):
    """AttnRes (docs/k3-decode.md §2.2) with a two-pass depth softmax instead of the online one."""
    if delta is not None:
        prefix.copy_(bf16(prefix.to(F32) + delta.to(F32)))
    if write_idx >= 0:
        blocks[:, write_idx] = prefix
    if n == 0:
        mix = prefix.to(F32)
    else:
        u = w_norm.to(F32).reshape(-1) * w_proj.to(F32).reshape(-1)
        src = [(blocks[:, j] if j < n else prefix).to(F32) for j in range(n + 1)]
        logits = torch.cat([(v * u).sum(-1, keepdim=True) * rms_scale(v, eps) for v in src], dim=-1)
        p = torch.exp(logits - logits.amax(-1, keepdim=True))
        mix = sum(p[:, j:j + 1] * v for j, v in enumerate(src)) / p.sum(-1, keepdim=True)
    if w_out is None:
        return bf16(mix)
    return bf16(mix * rms_scale(mix, eps_out) * w_out.to(F32).reshape(-1))


# ---------------------------------------------------------------- f32 results across a bf16 midpoint
MIDPOINT_ULPS = 7    # f32 ulps; a reflection moves a value by <= 15 ulps <= 30 u·|x| (an ulp of x is
                     # <= 2 u·|x|), inside C_ACCUM's 32 u·Σ|a||b| since Σ|a||b| >= |x|


def gemm_across_midpoints(original):
    """The GEMM with each f32 result that lies within MIDPOINT_ULPS f32 ulps of a midpoint between
    two bf16 neighbours reflected across that midpoint: what another summation order may return
    there (<= 30 u·|x|, inside every accumulation's c·u·Σ|a||b|). Where the result is next rounded
    to bf16 it lands on the other neighbour, one bf16 ulp from the baseline's, and a correct
    candidate's error stops being the baseline's value for value (the H200's tensor-core GEMVs do
    this: KDA's f32 state met 1.94x the baseline's error that way, k3diff/budgets.py)."""
    def gemm(x, w, splits=None):
        out = original(x, w) if splits is None else original(x, w, splits)
        bits = out.view(torch.int32)
        off = (bits & 0xFFFF) - 0x8000                     # f32 ulps from the midpoint, same binade
        # exactly on it, RNE takes the even neighbour: step to the other side of it
        tie = torch.where(((bits >> 16) & 1) == 0, 1, -1).to(torch.int32)
        moved = torch.where(off == 0, bits + tie, bits - 2 * off - (off > 0).to(torch.int32))
        near = (off.abs() <= MIDPOINT_ULPS) & torch.isfinite(out)
        return torch.where(near, moved.view(torch.float32), out)
    return gemm


# ---------------------------------------------------------------- verify steps and the FP8 cache
# (docs/k3-decode.md §14-15): correct schedules and numerics beside k3diff.mutants' verify bugs

def mla_verify_token_by_token(original):
    """A verify step as its token positions one after another: position j's decode-shaped call
    (one token per sequence that has a token j) writes rows L_b + j and attends rows 0..L_b + j
    (the rows after them are not written yet, and not read). Another schedule of the same math:
    the projections and the attention run W times on fewer rows."""
    def run_mla(cfg, p, x, kv_cache, cache_lens, query_lens=None, **flags):
        if query_lens is None:
            return original(cfg, p, x, kv_cache, cache_lens, **flags)
        widths = query_lens.to(torch.int64).tolist()
        starts = [sum(widths[:b]) for b in range(len(widths))]
        res = {}
        for j in range(max(widths)):
            seqs = [b for b, w in enumerate(widths) if w > j]
            rows = [starts[b] + j for b in seqs]
            sub = kv_cache[seqs]                                  # a copy: written back below
            part = original(cfg, p, x[rows], sub, cache_lens[seqs] + j, **flags)
            kv_cache[seqs] = sub
            for k, v in part.items():
                if k not in res:
                    res[k] = torch.empty((x.shape[0],) + tuple(v.shape[1:]), dtype=v.dtype, device=v.device)
                res[k][rows] = v
        return res
    return run_mla


def kda_commit_by_replay(original):
    """The accepted state committed by running the accepted tokens again from the saved slot
    (as a kernel that keeps no per-token copy would), instead of copying the per-token state."""
    def run_kda_verify(cfg, p, x, conv_state, rec_state, state_idx, query_lens, accepted, conv_states,
                       rec_states, **flags):
        live = state_idx[state_idx > 0].to(torch.int64)
        saved = (conv_state[live].clone(), rec_state[live].clone())
        res = original(cfg, p, x, conv_state, rec_state, state_idx, query_lens, accepted, conv_states,
                       rec_states, **flags)
        conv_state[live], rec_state[live] = saved                # back to the step's start, then
        scratch_c, scratch_r = conv_states.clone(), rec_states.clone()
        original(cfg, p, x, conv_state, rec_state, state_idx, query_lens, accepted, scratch_c, scratch_r,
                 **flags)                                         # ... the same tokens once more
        return res
    return run_kda_verify


def fp8_read_f32(original):
    """FP8 cache rows dequantised into f32 operands (e4m3 * scale kept in f32, not rounded to bf16:
    a kernel that multiplies the scale into an f32 accumulation)."""
    def read_rows(rows, cfg):
        R = cfg.kv_lora_rank
        t = 128 if R >= 256 and R % 128 == 0 else R // 2
        lead = rows.shape[:-1]
        flat = rows.reshape(-1, rows.shape[-1])
        q = flat[:, :R].contiguous().view(torch.float8_e4m3fn).to(F32).view(-1, R // t, t)
        scale = flat[:, R:R + 4 * (R // t)].contiguous().view(F32)
        pe = flat[:, R + 4 * (R // t):].contiguous().view(torch.bfloat16).to(F32)
        lat = (q * scale.unsqueeze(-1)).view(-1, R)
        return torch.cat([lat, pe], dim=-1).view(*lead, -1)
    return read_rows
