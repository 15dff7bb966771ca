"""Each stage's state rule: what a candidate must do to the state it updates in place.

The stage table (`k3diff.stages.STATE`) names the inputs each stage may change; these rules say
how each must change. Numbers are judged by the error rule (`k3diff.budgets`); copies and untouched
memory are judged bit for bit:

  mla    the new token's cache row (kv_c | k_pe) under the error rule; every other row bitwise as
         it was (docs/k3-decode.md §3.3); free rows hold NaNs with random payloads
         (`reference.materialize.nan_sentinels_from`), so writing a canonical NaN there shows too.
  kda    the conv state shifts raw bf16 inputs: history bitwise, the new column under the error
         rule; the recurrent state of live slots under the error rule; slots no row owns (the null
         slot 0 included) hold finite sentinels (`k3diff.materialize.poison_unused_slots`) and stay
         bitwise untouched, so any write shows, a canonical NaN included; rows whose state index is <= 0 output exactly 0
         (docs/k3-decode.md §4.1, §10.1); the recurrent state is carried in f32, not bf16
         (`carried_in_f32`: the error rule alone cannot tell at one step).
  layer  the block slot a block-write layer stores equals bf16(prefix + delta) bitwise, every
         other slot untouched; prefix under the error rule (it carries the attention output), plus
         the attention kind's rule above.

Verify steps (docs/k3-decode.md §14) and the FP8 cache (§15):
  mla    every token's entry, W_b rows per sequence at L_b .. L_b+W_b-1, under the error rule (an
         FP8 entry dequantised exactly, beside the reference's own quantisation, dequantised), and
         its bytes bit for bit the quantisation of the candidate's own kv_c | k_pe (the contract
         fixes that rounding); every other row bitwise as it was.
  kda    the per-token states conv_states / recurrent_states of live sequences under the conv and
         recurrent rules; rows of null sequences bitwise untouched; the slot holds the state after
         the last accepted token (compared with the reference's: a rejected token's state shows),
         its history bitwise that token's window, or bitwise unchanged when none was accepted.
  The accumulation floor (c·u·Σ|a||b|, k3diff/budgets.py) grows with the longer contractions:
  an MLA token's over its L_b + j + 1 rows, a KDA token's state over the tokens before it (the
  reference carries the bound token to token, reference/kda.py kda_verify).

`state_reports(case, tag, cand_inputs, ref, base, cand)` returns the TensorReports for a case;
each rule lists its comparisons and they are measured together (`k3diff.divergence.compare_many`).
`cand["_before"]` holds the candidate's state inputs as they were before its call.
"""
from __future__ import annotations

import torch

from k3diff.budgets import budget_for
from k3diff.comparisons import compare_many
from k3diff.divergence import TensorReport
from reference import fp8_cache
from reference.mla import token_rows


def mla_cache(case, stage, tag, cand_inputs, ref, base, cand):
    seq, pos = token_rows(cand_inputs["cache_lens"].cpu(), _cpu(cand_inputs.get("query_lens")), "cpu")
    new_c, new_r, new_b = cand["kv_cache"][seq, pos], ref["kv_cache"][seq, pos], base["kv_cache"][seq, pos]
    before, after = cand["_before"]["kv_cache"], cand["kv_cache"].clone()
    after[seq, pos] = before[seq, pos]
    out = [(stage, tag("kv_cache.untouched"), after, before, None, budget_for(stage, "kv_cache.untouched"))]
    if new_c.dtype == torch.uint8:          # FP8 entries (§15): bytes fixed by the candidate's kv_c | k_pe
        cfg = case.config()
        names = ("kv_c", "k_pe") if stage == "mla" else ("attn.kv_c", "attn.k_pe")
        if all(n in cand for n in names):
            # the e4m3 bytes bit for bit given the candidate's own stored scales (a scale is judged
            # by fp8_scale_report: amax * (1/448), as PyTorch's CUDA division by a scalar computes
            # it, is an ulp from amax / 448 and is as good a scale)
            kv_c = cand[names[0]]
            mine = fp8_cache.fields(new_c, cfg)[1].to(kv_c.device)
            own = fp8_cache.quantise(kv_c, cand[names[1]], cfg, exact=False, s=mine)
            out.append((stage, tag("kv_cache.fp8_rounding"), new_c, own.to(new_c.device), None,
                        budget_for(stage, "kv_cache.untouched")))
        new_c, new_r, new_b = (fp8_cache.dequantise(t, cfg, exact=True) for t in (new_c, new_r, new_b))
    out.append((stage, tag("kv_cache.new"), new_c, new_r, new_b, budget_for(stage, "kv_cache.new"), torch.bfloat16,
                ref.get("abs.kv_cache.new")))
    return out


SCALE_ULPS = 2 * 2.0 ** -23     # a stored scale within 2 f32 ulps of max(amax / 448, FLT_MIN)


def fp8_scale_report(case, stage, tag, cand_inputs, cand):
    """The FP8 cache's scales (§15): each new row's per-tile scale against the contract's from the
    candidate's own kv_c, to 2 ulps (a per-tensor scale, a wrong tile or amax is far outside)."""
    names = ("kv_c", "k_pe") if stage == "mla" else ("attn.kv_c", "attn.k_pe")
    if cand["kv_cache"].dtype != torch.uint8 or names[0] not in cand:
        return []
    seq, pos = token_rows(cand_inputs["cache_lens"].cpu(), _cpu(cand_inputs.get("query_lens")), "cpu")
    cfg = case.config()
    got = fp8_cache.fields(cand["kv_cache"][seq, pos], cfg)[1].to(torch.float64).cpu()
    want = fp8_cache.scales(cand[names[0]].cpu(), cfg).to(torch.float64)
    rel = float(((got - want).abs() / want).max()) if got.numel() else 0.0
    ok = rel <= SCALE_ULPS          # NaN fails too
    note = "" if ok else (f"a stored scale is {rel:.3g} (relative) from max(amax/448, FLT_MIN) of its "
                          "tile: not the tile's own scale")
    return [TensorReport(stage, tag("kv_cache.fp8_scale"), ok, max_err=rel, bound=SCALE_ULPS, note=note)]


def _cpu(t):
    return None if t is None else t.cpu()


def _live_slots(cand_inputs):
    """(every row's state index, the slots of the rows that own one: index > 0), on the CPU."""
    idx = cand_inputs["state_idx"].to(torch.int64).cpu()
    return idx, idx[idx > 0]


def kda_state(stage, tag, cand_inputs, ref, base, cand):
    if "query_lens" in cand_inputs:
        return kda_verify_state(stage, tag, cand_inputs, ref, base, cand)
    idx, live = _live_slots(cand_inputs)
    before_conv, after_conv = cand["_before"]["conv_state"], cand["conv_state"]
    hist = after_conv.clone()
    hist[live, :, :-1] = before_conv[live, :, 1:]          # the shift, bit for bit
    hist[live, :, -1] = after_conv[live, :, -1]
    untouched = torch.ones(after_conv.shape[0], dtype=torch.bool)
    untouched[live] = False
    out = [
        (stage, tag("conv_state.history"), after_conv, hist, None, budget_for(stage, "conv_state.history")),
        (stage, tag("conv_state.untouched"), after_conv[untouched], before_conv[untouched], None,
         budget_for(stage, "kv_cache.untouched")),
        (stage, tag("conv_state.new"), after_conv[live, :, -1], ref["conv_state"][live, :, -1],
         base["conv_state"][live, :, -1], budget_for(stage, "conv_state.new"), torch.bfloat16,
         _at(ref.get("abs.conv_state.new"), live)),
        (stage, tag("recurrent_state"), cand["recurrent_state"][live], ref["recurrent_state"][live],
         base["recurrent_state"][live], budget_for(stage, "recurrent_state"), torch.float32,
         _at(ref.get("abs.recurrent_state"), live)),
        (stage, tag("recurrent_state.untouched"), cand["recurrent_state"][untouched],
         cand["_before"]["recurrent_state"][untouched], None, budget_for(stage, "kv_cache.untouched")),
    ]
    null_rows = (idx <= 0).nonzero().flatten()
    attn = "out" if stage == "kda" else "attn_out"
    if attn in cand and len(null_rows):
        rows = cand[attn][null_rows]
        out.append((stage, tag(f"{attn}.null_rows"), rows, torch.zeros_like(rows), None,
                    budget_for(stage, "out.null_rows")))
    return out


def _tokens(cand_inputs):
    """(slot of every token, accepted count of its sequence, its index j in the sequence, whether
    it is its sequence's last accepted token), on the CPU (docs/k3-decode.md §14.1)."""
    w = cand_inputs["query_lens"].to(torch.int64).cpu()
    idx = cand_inputs["state_idx"].to(torch.int64).cpu()
    acc = cand_inputs["accepted"].to(torch.int64).cpu()
    seq = torch.repeat_interleave(torch.arange(w.numel()), w)
    j = torch.arange(seq.numel()) - (torch.cumsum(w, 0) - w)[seq]
    return idx[seq], acc[seq], j, j == acc[seq] - 1


def kda_verify_state(stage, tag, cand_inputs, ref, base, cand):
    """A verify step's KDA states (module doc): per-token rows, then the continued slot."""
    idx, _ = _live_slots(cand_inputs)
    tok_slot, _, j, last = _tokens(cand_inputs)
    live_tok = (tok_slot > 0).nonzero().flatten()
    null_tok = (tok_slot <= 0).nonzero().flatten()
    before = cand["_before"]
    bit = budget_for(stage, "kv_cache.untouched")
    cs, rs = cand["conv_states"], cand["recurrent_states"]
    # token j's window is token j-1's (the slot's for j = 0) shifted by one, then its own raw input
    hist = cs.clone()
    for t in live_tok.tolist():
        prev = before["conv_state"][tok_slot[t]] if j[t] == 0 else cs[t - 1]
        hist[t, :, :-1] = prev[:, 1:]
    out = [
        (stage, tag("conv_states.history"), cs[live_tok], hist[live_tok], None, budget_for(stage, "conv_state.history")),
        (stage, tag("conv_states.new"), cs[live_tok, :, -1], ref["conv_states"][live_tok, :, -1],
         base["conv_states"][live_tok, :, -1], budget_for(stage, "conv_state.new"), torch.bfloat16,
         _at(ref.get("abs.conv_states.new"), live_tok)),
        (stage, tag("recurrent_states"), rs[live_tok], ref["recurrent_states"][live_tok],
         base["recurrent_states"][live_tok], budget_for(stage, "recurrent_state"), torch.float32,
         _at(ref.get("abs.recurrent_states"), live_tok)),
        (stage, tag("conv_states.untouched"), cs[null_tok], before["conv_states"][null_tok], None, bit),
        (stage, tag("recurrent_states.untouched"), rs[null_tok], before["recurrent_states"][null_tok], None, bit),
    ]
    # the continued slot holds the candidate's own state of the sequence's last accepted token, bit
    # for bit (a rejected token's state must not leak in); with none accepted, and in slots no
    # row owns, it stays bitwise as it was
    acc = cand_inputs["accepted"].to(torch.int64).cpu()
    kept = idx[(idx > 0) & (acc > 0)]
    untouched = torch.ones(cand["conv_state"].shape[0], dtype=torch.bool)
    untouched[kept] = False
    conv, rec = cand["conv_state"], cand["recurrent_state"]
    pick = (last & (tok_slot > 0)).nonzero().flatten()
    slots = tok_slot[pick]
    out += [
        (stage, tag("conv_state.untouched"), conv[untouched], before["conv_state"][untouched], None, bit),
        (stage, tag("recurrent_state.untouched"), rec[untouched], before["recurrent_state"][untouched], None, bit),
        (stage, tag("conv_state.continued"), conv[slots], cs[pick], None, bit),
        (stage, tag("recurrent_state.continued"), rec[slots], rs[pick], None, bit),
        (stage, tag("recurrent_state"), rec[kept], ref["recurrent_state"][kept], base["recurrent_state"][kept],
         budget_for(stage, "recurrent_state"), torch.float32, _at(ref.get("abs.recurrent_state"), kept)),
    ]
    attn = "out" if stage == "kda" else "attn_out"
    if attn in cand and len(null_tok):
        rows = cand[attn][null_tok]
        out.append((stage, tag(f"{attn}.null_rows"), rows, torch.zeros_like(rows), None, budget_for(stage, "out.null_rows")))
    return out


def _at(magnitude, rows):
    """The reference's Σ|a||b| of a state (by slot) at `rows`; None where the reference gave none."""
    return None if magnitude is None else magnitude[rows.to(magnitude.device)]


def layer_residual(case, stage, tag, ref, base, cand):
    bk = case.config().attn_res_block_size
    out = []
    if "blocks" in cand:
        # the block copy is exact: the written slot equals the baseline's bf16(prefix + delta)
        # bit for bit, every other slot (the payload-NaN sentinels of unread slots included) stays
        # as it was
        expected = cand["_before"]["blocks"].clone()
        if case.layer_idx % bk == 0:
            expected[:, case.layer_idx // bk] = base["blocks"][:, case.layer_idx // bk].to(expected.dtype)
        out.append((stage, tag("blocks"), cand["blocks"], expected, None, budget_for(stage, "blocks.untouched")))
    if "prefix" in cand:
        # prefix ends as bf16(bf16(prefix + delta) + a) (or a itself on a block-write layer):
        # it carries the attention output, a rounded GEMV result, so the error rule applies
        out.append((stage, tag("prefix"), cand["prefix"], ref["prefix"], base["prefix"],
                    budget_for(stage, "prefix"), torch.bfloat16))
    return out


# a true f32 value is a bf16 value (its low 16 bits zero) with probability ~2^-16; a state stored
# through bf16 is one everywhere. Half is far from both, and 32 elements make chance impossible.
_BF16_SHARE_LIMIT = 0.5
_MIN_ELEMENTS = 32


def carried_in_f32(stage, name, cand, ref):
    """The KDA recurrent state is f32 (docs/k3-decode.md §4.1, §4.5): a state kept in bf16 errs by 2^-9
    relative per step, as much as the bf16 inputs' rounding, so the error rule alone passes it at
    one or two steps (96% of its budget at tiny dims) while it compounds over a real context.
    Judged where it shows: among the elements whose exact value is not a bf16 value, the share the
    candidate delivers as bf16 values."""
    exact = ref.to(torch.float32)
    c = cand.to(exact.device, torch.float32)
    need = exact != exact.to(torch.bfloat16).to(torch.float32)
    n = int(need.sum())
    if n < _MIN_ELEMENTS:
        return TensorReport(stage, name, True, note=f"too few non-bf16 values to judge ({n})")
    share = float((c[need] == c[need].to(torch.bfloat16).to(torch.float32)).sum()) / n
    ok = share <= _BF16_SHARE_LIMIT
    return TensorReport(stage, name, ok, max_err=share, bound=_BF16_SHARE_LIMIT,
                        note=f"{100 * share:.3g}% of {n} values are exact bf16 values where the exact "
                             f"state is not (a state carried in f32: ~0.002%)"
                             + ("" if ok else ": the state is stored through bf16"))


def state_reports(case, tag, cand_inputs, ref, base, cand) -> list:
    stage, kind = case.stage, case.attention_kind
    out, extra = [], []
    if kind == "mla" and "kv_cache" in cand:
        out += mla_cache(case, stage, tag, cand_inputs, ref, base, cand)
        extra += fp8_scale_report(case, stage, tag, cand_inputs, cand)
    if kind == "kda" and "conv_state" in cand:
        out += kda_state(stage, tag, cand_inputs, ref, base, cand)
        if "recurrent_states" in cand:          # a verify step: every live token's state
            rows = (_tokens(cand_inputs)[0] > 0).nonzero().flatten()
            extra.append(carried_in_f32(stage, tag("recurrent_states.f32"), cand["recurrent_states"][rows],
                                        ref["recurrent_states"][rows]))
        else:
            _, live = _live_slots(cand_inputs)
            extra.append(carried_in_f32(stage, tag("recurrent_state.f32"), cand["recurrent_state"][live],
                                        ref["recurrent_state"][live]))
    if stage == "layer":
        out += layer_residual(case, stage, tag, ref, base, cand)
    return compare_many(out) + extra
