"""A verify step (docs/k3-decode.md §14: W_b tokens of sequence b, rows sequence by sequence,
T = Σ W_b) and the FP8 latent cache, served by the decode kernels; the attention call of every
step, decode or verify, bf16 or FP8 cache (`mla`, `kda`: what backend.py and layer.py call).

Everything per token is the decode step on T rows; only the attention couples a sequence's
tokens. So a step's launches run in three parts (mla.py / kda.py name them):
  1. the per-token launches on the T rows (the projections, the norms; MLA's also write each
     token's [kv_c | k_pe] into a scratch row, then put into the cache: every token's row before
     any attention, as the contract asks);
  2. the launches over the cache or the state, J times over the B sequences: launch j runs token
     j of each, its token rows gathered into a batch of B and its results put back.
     MLA: token j attends rows 0 .. L_b + j (all of them written by then, none past it).
     KDA: token j advances the slot from token j - 1's state; the state after it is copied to the
     token's row of conv_states / recurrent_states; at the end each slot gets the state after its
     last accepted token (accepted 0: the state before the step, kept aside).
     A sequence with fewer tokens (W_b <= j) takes no result from launch j (KDA: a null row,
     state_idx 0, its state untouched);
  3. the per-token launches on the T rows again (MLA's value projection and output GEMV, KDA's
     gated norm and output GEMV).
So every weight is read once per step, as in a decode step of T tokens, and the cache (MLA) or
the state (KDA) J times: the kernels that take a sequence's W query rows in one launch are not
written. While a CUDA graph is captured nothing is read back: J is the width the caller knows
(`widest`: a fixed-width verify step's) or the widest the shapes allow, min(T - B + 1, 8); the
launches past the widest sequence take no result. An eager call reads the widths once, checks them
and launches as many as the widest needs.
"""
import torch

from megakernel import fp8_cache

MAX_WIDTH = 8           # the contract's widest verify step (docs/k3-decode.md §14: W_b in [1, 8])


def _capturing() -> bool:
    return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


def launches(query_lens: torch.Tensor, T: int, widest: int | None = None) -> int:
    """J, the part-2 launches of a verify step of T tokens over these sequences (module doc)."""
    B = query_lens.shape[0]
    J = min(T - B + 1, MAX_WIDTH) if widest is None else widest
    if _capturing():
        return J
    w = query_lens.tolist()
    if not w or min(w) < 1 or max(w) > min(J, MAX_WIDTH) or sum(w) != T:
        raise ValueError(f"megakernel verify: widths {w} for {T} tokens (each 1..{MAX_WIDTH}, "
                         "summing to the token count)")
    return max(w)


def layout(query_lens: torch.Tensor, T: int):
    """(first row [B], width [B], sequence of each token [T], its index in the sequence [T])."""
    w = query_lens.to(torch.int64)
    first = torch.cumsum(w, 0) - w
    seq = torch.repeat_interleave(torch.arange(w.shape[0], device=w.device), w, output_size=T)
    return first, w, seq, torch.arange(T, device=w.device) - first[seq]


def _token_rows(j: int, first, w):
    """Launch j's token rows: token j of each sequence, its last one where it has fewer."""
    jj = torch.clamp(w - 1, max=j)
    return first + jj, jj


def _accepted_row(first, accepted):
    """The row of each sequence's last accepted token (its first row where none was: not read)."""
    return first + torch.clamp(accepted - 1, min=0)


def _keep(mask, new, old):
    return torch.where(mask.view((-1,) + (1,) * (new.dim() - 1)), new, old)


def _gather(into: dict, frm: dict, names, rows) -> None:
    """into[n] = frm[n]'s `rows`, copied into the buffer there (a step's scratch is its own)."""
    for n in names:
        into[n].copy_(frm[n].index_select(0, rows))


def _put_back(into: dict, frm: dict, names, rows, on) -> None:
    """into[n]'s `rows` = frm[n] where `on` (the sequences launch j ran a token of)."""
    for n in names:
        into[n].index_copy_(0, rows, _keep(on, frm[n], into[n].index_select(0, rows)))


def mla(step, x, kv_cache, cache_lens, query_lens=None, max_len=None, widest=None) -> dict:
    """The MLA step (mla.MlaStep) of a decode (query_lens None) or verify step on a bf16 cache
    [B, Lcap, C] or an FP8 one (uint8, fp8_cache.py), rows written in place; `widest`: the widest
    width, where the caller knows it (`launches`). Returns {scratch name: [T, ...]} (mla.OUTPUTS'
    values among them)."""
    from megakernel.mla import CACHE_READS, CACHE_STAGES, CACHE_WRITES, OUT_STAGES, TOKEN_STAGES
    fp8 = kv_cache.dtype == torch.uint8
    if query_lens is None:
        if not fp8:
            return step.launch(x, kv_cache, cache_lens, max_len=max_len)
        query_lens, widest = torch.ones_like(cache_lens), 1       # a decode step: W_b = 1
    md, T, B = step.md, x.shape[0], cache_lens.shape[0]
    J = launches(query_lens, T, widest)
    first, w, seq, pos = layout(query_lens, T)
    lens = cache_lens.to(torch.int64)
    bound = kv_cache.shape[1] - 1 if max_len is None else max_len
    # 1. per token: every token's [kv_c | k_pe] into a scratch row (its "cache" of one row)
    rows = torch.empty(T, 1, md.C, dtype=torch.bfloat16, device=x.device)
    at0 = torch.zeros(T, dtype=torch.int64, device=x.device)
    s = step.launch(x, rows, at0, stages=TOKEN_STAGES, max_len=0, scratch=step.scratch(T, 1, keep=False))
    if fp8:
        work = fp8_cache.write(kv_cache, seq, lens[seq] + pos, rows[:, 0], md)
    else:
        kv_cache[seq, lens[seq] + pos] = rows[:, 0]
        work = kv_cache
    # 2. over the cache, token j of every sequence per launch
    sb = step.scratch(B, step.splits(bound + 1), keep=False)
    for j in range(J):
        r, jj = _token_rows(j, first, w)
        _gather(sb, s, CACHE_READS, r)
        step.launch(x[:B], work, lens + jj, stages=CACHE_STAGES, max_len=bound, scratch=sb)
        _put_back(s, sb, CACHE_WRITES, r, w > j)
    # 3. per token again
    return step.launch(x, rows, at0, stages=OUT_STAGES, max_len=0, scratch=s)


def kda(step, x, conv_state, rec, state_idx, query_lens=None, accepted=None, conv_states=None,
        recurrent_states=None, widest=None) -> dict:
    """The KDA step (kda.KdaStep) of a decode or verify step; the slots, and in a verify step the
    per-token states, updated in place; `widest` as mla's. Returns {scratch name: [T, ...]}
    (kda.OUTPUTS among them)."""
    from megakernel.kda import OUT_STAGES, STATE_READS, STATE_STAGES, STATE_WRITES, TOKEN_STAGES
    if query_lens is None:
        return step.launch(x, conv_state, rec, state_idx)
    T, B = x.shape[0], state_idx.shape[0]
    J = launches(query_lens, T, widest)
    first, w, seq, pos = layout(query_lens, T)
    idx = state_idx.to(torch.int64)
    live = idx > 0
    slot = torch.where(live, idx, 0)           # a row to gather from; null rows' never written
    before = (conv_state.index_select(0, slot), rec.index_select(0, slot))
    # 1. per token (each token's state_idx its sequence's: a null sequence's tokens are null)
    s = step.launch(x, conv_state, rec, idx[seq], stages=TOKEN_STAGES)
    # 2. over the slots, token j of every sequence per launch
    sb = step.scratch(B)
    for j in range(J):
        r, _ = _token_rows(j, first, w)
        on = w > j
        _gather(sb, s, STATE_READS, r)
        step.launch(x[:B], conv_state, rec, torch.where(on, idx, 0), stages=STATE_STAGES)
        _put_back(s, sb, STATE_WRITES, r, on)
        # the state after token j at its row; other rows (null sequences, past a sequence's
        # width: r[b] is then its last token's, already written) get their own bits back
        for per_token, state in ((conv_states, conv_state), (recurrent_states, rec)):
            per_token.index_copy_(0, r, _keep(on & live, state.index_select(0, slot),
                                              per_token.index_select(0, r)))
    # 3. per token again
    s = step.launch(x, conv_state, rec, idx[seq], stages=OUT_STAGES)
    # the slot continues from the state after its last accepted token
    a = accepted.to(torch.int64)
    pick = _accepted_row(first, a)
    for per_token, state, old in ((conv_states, conv_state, before[0]),
                                  (recurrent_states, rec, before[1])):
        committed = _keep(a > 0, per_token.index_select(0, pick), old)
        state.index_copy_(0, slot, _keep(live, committed, state.index_select(0, slot)))
    return s
