"""A verify step (docs/k3-decode.md §14: W_b tokens of sequence b, rows sequence by sequence,
T = Σ W_b) served by the decode kernels, launch by launch; and the attention call of a step,
decode or verify, bf16 or FP8 cache (`mla`, `kda`: what backend.py and layer.py call).

Everything per token (projections, norms, the MoE, AttnRes) is the decode step on T rows. Only the
attention couples a sequence's tokens, and it is served as J = min(T - B + 1, MAX_WIDTH) decode
launches over the B sequences; launch j runs token j of every sequence:
- MLA: token j's row L_b + j is written, then it attends rows 0 .. L_b + j: exactly the verify
  contract, since rows 0 .. L_b + j - 1 hold the cache and tokens 0 .. j - 1 by then. A sequence
  with fewer tokens (W_b <= j) runs its last token again: the same row rewritten with the same
  bits (the step is deterministic and batch-invariant), its output not taken.
- KDA: token j advances the slot from token j - 1's state; the slot's state after it is copied to
  the token's row of conv_states / recurrent_states. A sequence with fewer tokens is a null row in
  that launch (state_idx 0: no state touched, zero outputs not taken). At the end each slot gets
  the state after its last accepted token (accepted 0: the state before the step).
Correct, not fast: each launch reads every weight again (J times a decode step's bytes), and MLA
reads its cache J times; the kernels that take W query rows at once are not written. While a CUDA
graph is captured nothing is read back: the launch count comes from the shapes (T - B + 1 is the
widest a sequence can be); an eager call reads the widths once, checks them and launches as many
as the widest needs.
"""
import torch

from megakernel import fp8_cache

MAX_WIDTH = 8           # the contract's widest verify step (docs/k3-decode.md §14: W_b in [1, 8])


def _capturing() -> bool:
    return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


def launches(query_lens: torch.Tensor, T: int, widest: int | None = None) -> int:
    """J, the decode launches a verify step of T tokens over these sequences takes: the widest
    sequence's width where it can be read, else (a graph being captured) `widest` where the
    caller knows it on the host (a fixed-width verify step: its width), else the widest the shapes
    allow; the launches past the widest change no bit (module docstring)."""
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
    """Launch j's rows of x: token j of each sequence, its last one where it has fewer."""
    jj = torch.clamp(w - 1, max=j)
    return first + jj, jj


def _accepted_row(first, accepted):
    """The row of each sequence's last accepted token (its first row where none was: not read)."""
    return first + torch.clamp(accepted - 1, min=0)


def _gather(stacked: dict, seq, pos) -> dict:
    """Each token's outputs from the launch that ran it: stacked [J, B, ...] -> [T, ...]."""
    return {n: t[pos, seq] for n, t in stacked.items()}


def _stack(stacked: dict, j: int, J: int, s: dict, names) -> None:
    for n in names:
        if n not in stacked:
            stacked[n] = s[n].new_empty((J,) + tuple(s[n].shape))
        stacked[n][j].copy_(s[n])


def mla(step, x, kv_cache, cache_lens, query_lens=None, max_len=None, widest=None) -> dict:
    """The MLA step (mla.MlaStep) of a decode (query_lens None) or verify step on a bf16 cache
    [B, Lcap, C] or an FP8 one (uint8, fp8_cache.py), rows written in place; `widest`: the widest
    width, where the caller knows it (`launches`). Returns {scratch name (mla.OUTPUTS' values): [T, ...]}."""
    from megakernel.mla import OUTPUTS

    def one(xr, lens):
        if kv_cache.dtype == torch.uint8:
            return fp8_cache.launch(step, xr, kv_cache, lens, max_len=max_len)
        return step.launch(xr, kv_cache, lens, max_len=max_len)

    if query_lens is None:
        return one(x, cache_lens)
    T = x.shape[0]
    J = launches(query_lens, T, widest)
    first, w, seq, pos = layout(query_lens, T)
    stacked = {}
    for j in range(J):
        rows, jj = _token_rows(j, first, w)
        s = one(x.index_select(0, rows), cache_lens.to(torch.int64) + jj)
        _stack(stacked, j, J, s, OUTPUTS.values())
    return _gather(stacked, seq, pos)


def kda(step, x, conv_state, rec, state_idx, query_lens=None, accepted=None, conv_states=None,
        recurrent_states=None, widest=None) -> dict:
    """The KDA step (kda.KdaStep) of a decode or verify step; the slots, and in a verify step the
    per-token states, updated in place; `widest` as mla's. Returns {kda.OUTPUTS name: [T, ...]}."""
    from megakernel.kda import OUTPUTS
    if query_lens is None:
        return step.launch(x, conv_state, rec, state_idx)
    T = x.shape[0]
    J = launches(query_lens, T, widest)
    first, w, seq, pos = layout(query_lens, T)
    idx = state_idx.to(torch.int64)
    live = idx > 0
    slot = torch.where(live, idx, 0)           # a row to gather from; null rows' never written
    before = (conv_state.index_select(0, slot), rec.index_select(0, slot))

    def keep(mask, new, old):
        return torch.where(mask.view((-1,) + (1,) * (new.dim() - 1)), new, old)

    stacked = {}
    for j in range(J):
        rows, _ = _token_rows(j, first, w)
        on = w > j
        s = step.launch(x.index_select(0, rows), conv_state, rec, torch.where(on, idx, 0))
        _stack(stacked, j, J, s, OUTPUTS)
        # the state after token j at its row; other rows (null sequences, past a sequence's
        # width: rows[b] is then its last token's, already written) get their own bits back
        for per_token, state in ((conv_states, conv_state), (recurrent_states, rec)):
            per_token.index_copy_(0, rows, keep(on & live, state.index_select(0, slot),
                                                per_token.index_select(0, rows)))
    # the slot continues from the state after its last accepted token
    a = accepted.to(torch.int64)
    pick = _accepted_row(first, a)
    for per_token, state, old in ((conv_states, conv_state, before[0]),
                                  (recurrent_states, rec, before[1])):
        committed = keep(a > 0, per_token.index_select(0, pick), old)
        state.index_copy_(0, slot, keep(live, committed, state.index_select(0, slot)))
    return _gather(stacked, seq, pos)
