"""A suite of planted bugs: wrapper backends around the correct `torch-blocked` candidate.

A checker that has never been seen to fail proves nothing. Each mutant here changes one thing a
generated kernel could plausibly get wrong — by transforming the weights it is given, swapping one
helper of the candidate for a broken one while it runs, or tampering with what it writes — and
k3diff must catch every one. `hunt` fuzzes the mutant with the same strategies and budget as the
differential suite and reports how many examples and seconds it took; `pytest --k3diff-mutants`
and `k3diff mutants` print the table and the mutation score.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, replace
from typing import Callable

import torch

from k3diff import schedule_mutants
from k3diff.backends import blocked, blocked_attn, blocked_ep, blocked_fp8, blocked_moe, blocked_ops
from k3diff.features import refusal_of
from k3diff.search import first_failure_over
from k3diff.stages import STATE
from k3diff.verify_dims import accepted_at

_IMPL_MODULES = (blocked, blocked_attn, blocked_moe, blocked_ops)


@dataclass(frozen=True)
class Swap:
    """Replace helper `name` of the candidate, defined in module `home`, by make(original) while the
    mutant runs. The helper is patched in `home` and in every implementation module that imported
    the same object by name (or only in `within`, when given). A target that no longer exists (a
    renamed helper) raises at import, naming the mutant's target, so no mutant dies silently."""
    home: object
    name: str
    make: Callable
    within: tuple = ()

    def __post_init__(self):
        for m in (self.home,) + tuple(self.within):
            if not callable(getattr(m, self.name, None)):
                raise AttributeError(f"mutant patch target {m.__name__}.{self.name} does not exist "
                                     "(renamed or moved?): update k3diff/mutants.py")

    @contextlib.contextmanager
    def applied(self):
        original = getattr(self.home, self.name)
        targets = self.within or tuple(m for m in _IMPL_MODULES if getattr(m, self.name, None) is original)
        saved = [(m, getattr(m, self.name)) for m in targets]
        replacement = self.make(original)
        try:
            for m, _ in saved:
                setattr(m, self.name, replacement)
            yield
        finally:
            for m, orig in saved:
                setattr(m, self.name, orig)


@dataclass(frozen=True)
class Mutant:
    name: str
    area: str
    stages: tuple          # where to hunt for it
    description: str
    weights: Callable | None = None      # (cfg, weights) -> weights, before prepare
    swap: Swap | None = None             # a helper of the candidate replaced by a broken one
    tamper: Callable | None = None       # (mutant_backend, stage, inputs_before, inputs, out) after run
    case_filter: Callable | None = None  # hunt only on cases where the bug can show
    backend: Callable | None = None      # () -> a whole buggy candidate (a distributed one), not a wrapper
    ranks: int = 0                       # hunt on cases drawn for this many ranks (k3diff/ep_config.py)


class MutantBackend:
    """The correct candidate with one planted bug."""

    stages = ("moe", "mla", "kda", "layer")
    deterministic = True
    batch_invariant = False

    def __init__(self, mutant: Mutant, inner=None):
        self.mutant = mutant
        self.inner = inner or blocked.TorchBlockedBackend()
        self.name = f"mutant:{mutant.name}"
        self.memory = {}

    def available(self):
        return self.inner.available()

    def provides(self, stage):
        return self.inner.provides(stage)

    def supports(self, cfg, stage, features=frozenset()):
        """The inner candidate's (k3diff/features.py): torch-blocked serves verify steps and FP8."""
        return refusal_of(self.inner, cfg, stage, features)

    def prepare(self, cfg, stage, weights):
        if self.mutant.weights is not None:
            weights = self.mutant.weights(cfg, dict(weights))
        return self.inner.prepare(cfg, stage, weights)

    def run(self, stage, cfg, prepared, inputs, out):
        before = {k: inputs[k].clone() for k in STATE[stage] if k in inputs}
        ctx = self.mutant.swap.applied() if self.mutant.swap else contextlib.nullcontext()
        with ctx:
            self.inner.run(stage, cfg, prepared, inputs, out)
        if self.mutant.tamper is not None:
            self.mutant.tamper(self, stage, before, inputs, out)


# ------------------------------------------------------------------ weight transforms

def _on_keys(suffix: str, fn):
    def transform(cfg, w):
        for k in list(w):
            if k.endswith(suffix):
                w[k] = fn(cfg, w[k].clone())
        return w
    return transform


def _zero(cfg, t):
    return torch.zeros_like(t)


def _last_expert_reads_previous(cfg, t):
    t[-1] = t[-2]
    return t


def _swap_nibbles(cfg, t):
    return ((t << 4) | (t >> 4)).to(torch.uint8)


def _compose(*fns):
    def transform(cfg, w):
        for fn in fns:
            w = fn(cfg, w)
        return w
    return transform


# ------------------------------------------------------------------ broken helpers

def _route_bias_in_weights(orig):
    def route(cfg, logits, bias, forced_ids=None):
        ids, _ = orig(cfg, logits, bias, forced_ids)
        sel = torch.sigmoid(logits) + bias.to(torch.float32)
        w = torch.where(ids >= 0, torch.gather(sel, 1, ids.clamp(min=0)), torch.zeros(()))
        return ids, w / w.sum(-1, keepdim=True).clamp_min(1e-30) * cfg.routed_scaling_factor
    return route


def _route_no_renormalise(orig):
    def route(cfg, logits, bias, forced_ids=None):
        ids, _ = orig(cfg, logits, bias, forced_ids)
        sc = torch.sigmoid(logits)
        w = torch.where(ids >= 0, torch.gather(sc, 1, ids.clamp(min=0)), torch.zeros(()))
        return ids, w * cfg.routed_scaling_factor
    return route


def _rank_ties_to_higher_id(orig):
    def rank(x):
        flipped = orig(torch.flip(x, dims=[-1]))
        return x.shape[-1] - 1 - flipped
    return rank


def _situ_betas_swapped(orig):
    return lambda g, u, beta, beta_lin: orig(g, u, beta_lin, beta)


def _situ_gate_up_swapped(orig):
    return lambda g, u, beta, beta_lin: orig(u, g, beta, beta_lin)


def _norm_skipped(orig):
    return lambda x, w, eps: x.to(torch.bfloat16)


def _shared_dropped(orig):
    return lambda cfg, x, w_gu, w_down: torch.zeros(x.shape[0], w_down.shape[0], dtype=torch.bfloat16,
                                                     device=x.device)


def _attend_row_short(orig):
    # one row fewer per sequence (at least one): the new token's row is left out
    return lambda Q, rows, n, R, scale: orig(Q, rows, (n - 1).clamp(min=1), R, scale)


def _attend_wrong_scale(orig):
    # 1/sqrt(qk_nope) instead of 1/sqrt(qk_nope + qk_rope): the rope part forgotten
    return lambda Q, rows, n, R, scale: orig(Q, rows, n, R, scale * math.sqrt(1.5))


def _mla_gate_from_attention(orig):
    def run_mla(cfg, p, x, kv_cache, cache_lens, **verify):
        res = orig(cfg, p, x, kv_cache, cache_lens, **verify)
        T, d = x.shape
        o = res["attn_out"].reshape(T, -1).to(torch.float32)
        wrong = torch.zeros(T, d, dtype=torch.float32, device=x.device)
        n = min(d, o.shape[1])
        wrong[:, :n] = o[:, :n]                     # the attention output where x belongs
        gz = blocked_ops.bf16(blocked_ops.gemm(blocked_ops.bf16(wrong), p["g"]))
        gated = blocked_ops.bf16(o * torch.sigmoid(gz.to(torch.float32)))
        res.update(gated=gated, out=blocked_ops.bf16(blocked_ops.gemm(gated, p["o"])))
        return res
    return run_mla


def _decay_on_value_axis(orig):
    def rule(S, gk, q, k, v, beta):
        S = S * torch.exp(gk).unsqueeze(3)         # along the value axis: the bug
        return orig(S, torch.zeros_like(gk), q, k, v, beta)
    return rule


def _beta_skipped(orig):
    return lambda S, gk, q, k, v, beta: orig(S, gk, q, k, v, torch.ones_like(beta))


def _attn_res_no_prefix_add(orig):
    def attn_res(prefix, delta, blocks, *args, **kw):
        return orig(prefix, None, blocks, *args, **kw)
    return attn_res


def _attn_res_no_block_write(orig):
    def attn_res(prefix, delta, blocks, w_norm, w_proj, w_out, n, write_idx, eps, eps_out):
        return orig(prefix, delta, blocks, w_norm, w_proj, w_out, n, -1, eps, eps_out)
    return attn_res


CHUNK = 16          # one MMA step / warp slice of K: the "one chunk short" bugs drop the first one


def _gemm_one_chunk_short(orig):
    # every GEMM starts its K loop one 16-wide chunk late
    return lambda x, w, splits=blocked_ops.SPLIT_K: orig(x[..., CHUNK:], w[:, CHUNK:], splits)


def _scores_one_chunk_short(orig):
    # the attention scores' contraction over R + rope skips its first 16 dims
    def attend(Q, rows, n, R, scale):
        Q = torch.cat([torch.zeros_like(Q[..., :CHUNK]), Q[..., CHUNK:]], dim=-1)
        return orig(Q, rows, n, R, scale)
    return attend


def _delta_rule_one_chunk_short(orig):
    # the delta rule's prediction e = S k skips the first 16 key dims (the update itself is whole)
    def rule(S, gk, q, k, v, beta):
        S = S * blocked_ops.exp(gk).unsqueeze(2)
        short = torch.cat([torch.zeros_like(k[..., :CHUNK]), k[..., CHUNK:]], dim=-1)
        e = (S @ short.unsqueeze(-1)).squeeze(-1)
        S = S + (beta.unsqueeze(-1) * (v - e)).unsqueeze(-1) * k.unsqueeze(2)
        return S, (S @ q.unsqueeze(-1)).squeeze(-1)
    return rule


# ------------------------------------------------------------------ tampering with what it writes

def _f32_rounded_to_bf16(backend, stage, before, inputs, out):
    """Every f32 output and f32 state stored through bf16 (2^-9 relative): an accumulator spilled
    in the wrong dtype."""
    for t in list(out.values()) + [inputs[k] for k in before]:
        if t.dtype == torch.float32:
            t.copy_(t.to(torch.bfloat16).to(torch.float32))


def _kda_state_in_bf16(backend, stage, before, inputs, out):
    """Only the live slots' recurrent state stored through bf16, the rest untouched: a kernel that
    carries the f32 state in bf16 (within the error rule's budget at one step; k3diff.state_rules)."""
    if "recurrent_state" in before:
        s = inputs["recurrent_state"]
        idx = inputs["state_idx"].to(device=s.device, dtype=torch.int64)
        live = idx[idx > 0]
        s[live] = s[live].to(torch.bfloat16).to(torch.float32)


def _conv_state_not_shifted(backend, stage, before, inputs, out):
    if "conv_state" in before:
        inputs["conv_state"].copy_(before["conv_state"])


def _one_token_unwritten(backend, stage, before, inputs, out):
    final = "delta" if stage == "layer" else "out"
    out[final][-1] = float("nan")       # as if the last token's row were never written


def _previous_output(backend, stage, before, inputs, out):
    for name, buf in out.items():
        key = (stage, name, tuple(buf.shape))
        fresh = buf.clone()
        if key in backend.memory:
            buf.copy_(backend.memory[key])  # hands back what the previous case produced
        backend.memory[key] = fresh


SMALL = 1e-2      # "small data": the final output's max|.| below this (value_dist tiny, ~1e-3)


def _final(stage):
    return "delta" if stage == "layer" else "out"


def _on_small(fn):
    """Tamper with the final output only when it is small: a kernel that wins only on tiny data."""
    def tamper(backend, stage, before, inputs, out):
        o = out[_final(stage)]
        if o.numel() and float(o.float().abs().max()) < SMALL:
            o.copy_(fn(o))
    return tamper


def _tiny_cases(case) -> bool:
    return case.value_dist == "tiny"


def _half_scale(backend, stage, before, inputs, out):
    o = out[_final(stage)]
    o.copy_(o * 0.5)


def _nan_into_unused_slots(backend, stage, before, inputs, out):
    """A canonical NaN written into every state slot no row owns (the null slot included)."""
    if "state_idx" not in inputs:
        return
    live = inputs["state_idx"][inputs["state_idx"] > 0].to(torch.int64)
    for name in ("conv_state", "recurrent_state"):
        unused = torch.ones(inputs[name].shape[0], dtype=torch.bool, device=inputs[name].device)
        unused[live] = False
        inputs[name][unused] = float("nan")


def _nan_into_free_cache_rows(backend, stage, before, inputs, out):
    """A canonical NaN written into every free MLA cache row (rows > L_b)."""
    if "kv_cache" not in inputs:
        return
    cap = inputs["kv_cache"].shape[1]
    free = torch.arange(cap, device=inputs["kv_cache"].device).view(1, cap) > inputs["cache_lens"].view(-1, 1)
    cache = inputs["kv_cache"]
    # an FP8 cache is stored as bytes (docs/k3-decode.md §15): its NaN is the e4m3 byte 0x7F
    cache[free] = 0x7F if cache.dtype == torch.uint8 else float("nan")


# ------------------------------------------------------------------ verify steps and the FP8 cache
# (docs/k3-decode.md §14-15): each bug a flag of torch-blocked's own verify code, so the rest of
# the step stays correct; hunted only on cases where the corner exists

def _with(**flags):
    return lambda orig: (lambda *a, **kw: orig(*a, **{**kw, **flags}))


def _verify_drafts(case) -> bool:
    """A verify step with a draft after some token (the mask bug shows)."""
    return bool(case.widths) and max(case.widths) >= 2


def _live_acceptance(case, ok) -> bool:
    """A KDA verify case where some live sequence's first-step acceptance satisfies ok(a, W)."""
    if case.stage != "kda" or not case.widths:
        return False

    acc = accepted_at(case, 0)
    return any(s > 0 and ok(a, w) for s, a, w in zip(case.state_idx, acc, case.widths))


VERIFY_MUTANTS = [
    Mutant("verify_mask_sees_next_token", "verify", ("mla",),
           "token j of a verify step also attends token j + 1's cache row",
           swap=Swap(blocked_attn, "run_mla", _with(see_next=True)), case_filter=_verify_drafts),
    Mutant("verify_state_from_wrong_accepted", "verify", ("kda",),
           "the slot continues from the state after token a_b, not a_b - 1",
           swap=Swap(blocked_attn, "run_kda_verify", _with(accept_shift=1)),
           case_filter=lambda c: _live_acceptance(c, lambda a, w: a < w)),
    Mutant("verify_conv_window_shifted_by_one", "verify", ("kda",),
           "the continued conv window moves by one token over the step, not by the accepted count",
           swap=Swap(blocked_attn, "run_kda_verify", _with(conv_shift_one=True)),
           case_filter=lambda c: _live_acceptance(c, lambda a, w: a >= 2)),
    Mutant("fp8_scale_per_tensor", "fp8", ("mla",),
           "FP8 cache entries quantised with one scale per row instead of one per tile",
           swap=Swap(blocked_fp8, "write_rows", _with(per_tensor=True), within=(blocked_fp8,)),
           case_filter=lambda c: c.cache_format == "fp8"),
]


MUTANTS = [
    Mutant("selection_without_bias", "routing", ("moe",), "experts chosen by sigmoid(logit) alone",
           weights=_on_keys("router.bias", _zero)),
    Mutant("bias_in_weights", "routing", ("moe",), "the correction bias also enters the combine weights",
           swap=Swap(blocked_moe, "route", _route_bias_in_weights)),
    Mutant("no_renormalise", "routing", ("moe",), "top-k weights not renormalised",
           swap=Swap(blocked_moe, "route", _route_no_renormalise)),
    Mutant("ties_to_higher_id", "routing", ("moe",), "exact ties go to the higher expert id",
           swap=Swap(blocked_ops, "_rank_desc", _rank_ties_to_higher_id)),
    Mutant("last_expert_off_by_one", "routing", ("moe",), "expert E-1 runs with expert E-2's weights",
           weights=_compose(*[_on_keys(k, _last_expert_reads_previous) for k in
                              ("experts.w13", "experts.w2", "experts.w13_packed", "experts.w13_scale",
                               "experts.w2_packed", "experts.w2_scale")])),
    Mutant("situ_betas_swapped", "experts", ("moe",), "SiTU soft caps beta and beta_lin swapped",
           swap=Swap(blocked_ops, "situ", _situ_betas_swapped)),
    Mutant("gate_up_swapped", "experts", ("moe",), "gate and up halves of w13 swapped",
           swap=Swap(blocked_ops, "situ", _situ_gate_up_swapped)),
    Mutant("latent_norm_skipped", "experts", ("moe",), "latent RMSNorm not applied",
           swap=Swap(blocked_ops, "rmsnorm_bf16", _norm_skipped, within=(blocked_moe,))),
    Mutant("shared_expert_dropped", "experts", ("moe",), "the merged shared experts are left out",
           swap=Swap(blocked_moe, "glu_mlp", _shared_dropped)),
    Mutant("mla_length_off_by_one", "mla", ("mla",), "attends over L_b rows, missing the new token",
           swap=Swap(blocked_attn, "_attend", _attend_row_short)),
    Mutant("mla_wrong_softmax_scale", "mla", ("mla",), "softmax scale 1/sqrt(qk_nope) (rope dims forgotten)",
           swap=Swap(blocked_attn, "_attend", _attend_wrong_scale)),
    Mutant("mla_gate_from_wrong_input", "mla", ("mla",), "output gate computed from the attention output, not x",
           swap=Swap(blocked_attn, "run_mla", _mla_gate_from_attention)),
    Mutant("kda_decay_on_value_axis", "kda", ("kda",), "decay applied along the value axis of S",
           swap=Swap(blocked_attn, "delta_rule", _decay_on_value_axis)),
    Mutant("kda_beta_skipped", "kda", ("kda",), "delta-rule beta taken as 1",
           swap=Swap(blocked_attn, "delta_rule", _beta_skipped)),
    Mutant("kda_conv_state_not_shifted", "kda", ("kda",), "the short-conv state is not updated",
           tamper=_conv_state_not_shifted),
    Mutant("attn_res_prefix_add_skipped", "attn_res", ("layer",), "prefix += delta not performed",
           swap=Swap(blocked, "attn_res", _attn_res_no_prefix_add)),
    Mutant("attn_res_block_write_skipped", "attn_res", ("layer",), "the finished block is not stored",
           swap=Swap(blocked, "attn_res", _attn_res_no_block_write)),
    Mutant("mxfp4_nibbles_swapped", "mxfp4", ("moe",), "low and high E2M1 nibbles swapped",
           weights=_on_keys("_packed", _swap_nibbles)),
    Mutant("one_token_unwritten", "anti-cheat", ("moe", "kda"), "the last token's output row is never written",
           tamper=_one_token_unwritten),
    Mutant("previous_case_output", "anti-cheat", ("moe", "mla"), "returns the previous case's result",
           tamper=_previous_output),
    Mutant("zeros_when_small", "numerics", ("moe", "mla", "kda"),
           f"writes zeros for the final output when max|out| < {SMALL:g} (wins only on tiny data)",
           tamper=_on_small(torch.zeros_like), case_filter=_tiny_cases),
    Mutant("half_scale_on_tiny", "numerics", ("moe", "mla", "kda"),
           f"final output scaled by 0.5 when max|out| < {SMALL:g}",
           tamper=_on_small(lambda o: o * 0.5), case_filter=_tiny_cases),
    Mutant("sign_flip_on_tiny", "numerics", ("moe", "mla", "kda"),
           f"final output negated when max|out| < {SMALL:g}",
           tamper=_on_small(torch.neg), case_filter=_tiny_cases),
    Mutant("half_scale_output", "numerics", ("moe", "mla", "kda", "layer"), "final output scaled by 0.5",
           tamper=_half_scale),
    Mutant("gemm_one_chunk_short", "numerics", ("moe", "mla", "kda", "layer"),
           f"every GEMM skips its first {CHUNK}-wide chunk of K",
           swap=Swap(blocked_ops, "gemm", _gemm_one_chunk_short)),
    Mutant("f32_outputs_rounded_to_bf16", "numerics", ("moe", "kda"),
           "f32 outputs and states (router logits, KDA core and state) rounded to bf16",
           tamper=_f32_rounded_to_bf16),
    Mutant("kda_state_in_bf16", "numerics", ("kda",),
           "the live slots' KDA recurrent state stored through bf16, nothing else changed",
           tamper=_kda_state_in_bf16),
    Mutant("mla_scores_one_chunk_short", "mla", ("mla",),
           f"attention scores skip the first {CHUNK} dims of their contraction",
           swap=Swap(blocked_attn, "_attend", _scores_one_chunk_short)),
    Mutant("kda_delta_rule_one_chunk_short", "kda", ("kda",),
           f"the delta rule's prediction S k skips the first {CHUNK} key dims",
           swap=Swap(blocked_attn, "delta_rule", _delta_rule_one_chunk_short)),
    Mutant("writes_nan_to_unused_slot", "anti-cheat", ("kda",),
           "writes a canonical NaN into every KDA state slot no row owns",
           tamper=_nan_into_unused_slots),
    Mutant("writes_nan_to_free_cache_rows", "anti-cheat", ("mla",),
           "writes a canonical NaN into every free MLA cache row (> L_b)",
           tamper=_nan_into_free_cache_rows),
    Mutant("ep_dispatch_off_by_one", "ep", ("moe",),
           "3 ranks: when E % ranks != 0 a route goes to rank (id + 1) mod N, not its expert's owner",
           backend=lambda: blocked_ep.TorchBlockedEPDispatchBug(), ranks=3,
           case_filter=lambda case: case.config().n_experts % 3 != 0),
] + VERIFY_MUTANTS
# planted schedule bugs (graph replay, pressure): GPU only, hunted in their schedules (k3diff/schedule_mutants.py)
GPU_MUTANTS = [Mutant(name, area, stages, text, backend=cls) for name, area, stages, text, cls in schedule_mutants.BUGS]
BY_NAME = {m.name: m for m in MUTANTS + GPU_MUTANTS}


def for_device(device) -> list:
    """The planted bugs a run on `device` hunts: the schedule bugs only on a GPU."""
    return MUTANTS + (GPU_MUTANTS if str(device).startswith("cuda") else [])


@dataclass
class HuntResult:
    mutant: str
    area: str
    caught: bool
    examples: int
    seconds: float
    stage: str = ""
    headline: str = ""


def first_failure(backend, stages, *, examples_per_stage: int, seed: int, space, device="cpu",
                  case_filter=None, aim=False):
    """Fuzz `backend` until k3diff flags it; no shrinking, since only the time to the first catch
    matters here. `case_filter` keeps only the cases where the bug can show (a mutant's).
    Returns (verdict or None, examples run, seconds, stage)."""
    from k3diff.runner import check_case
    from k3diff.strategies import cases

    def strategy(stage):
        return cases(stage, space) if case_filter is None else cases(stage, space).filter(case_filter)

    return first_failure_over(stages, strategy, lambda case: check_case(case, backend, device=device),
                              examples=examples_per_stage, seed=seed, aim=aim)


def hunt(mutant: Mutant, *, examples_per_stage: int, seed: int, space, device="cpu", aim=False) -> HuntResult:
    backend = mutant.backend() if mutant.backend else MutantBackend(mutant)
    space = replace(space, ranks=mutant.ranks) if mutant.ranks else space
    space = schedule_mutants.hunt_space(backend, space, device)     # a schedule bug's schedules
    try:
        verdict, count, seconds, stage = first_failure(backend, mutant.stages,
                                                       examples_per_stage=examples_per_stage, seed=seed,
                                                       space=space, device=device,
                                                       case_filter=mutant.case_filter, aim=aim)
    finally:
        getattr(backend, "close", lambda: None)()      # a distributed one's ranks
    if verdict is None:
        return HuntResult(mutant.name, mutant.area, False, count, seconds)
    judged = verdict.failures()[1:] if verdict.error else verdict.failures()   # failures() puts the error first
    if not judged:
        # A crash is not a catch: an ImportError in the framework or the candidate would otherwise
        # "catch" every planted bug (the H200 run of 77d7150 scored ep_dispatch_off_by_one that way).
        return HuntResult(mutant.name, mutant.area, False, count, seconds, stage,
                          "crashed, not caught: " + verdict.failures()[0])
    return HuntResult(mutant.name, mutant.area, True, count, seconds, stage, judged[0])


def table(results) -> list[str]:
    return score_table([(r.mutant, r.area, r.caught, r.examples, r.seconds, r.headline) for r in results],
                       ("mutant", "caught", "first failure"), "mutation score: {n}/{of} = {pct:.0f}%")


def score_table(rows, names, score: str) -> list[str]:
    """The mutants' and the false-alarm controls' table: (name, area, good, examples, seconds,
    headline) rows under the column names (name, good, headline), then the score line."""
    name, good, headline = names
    lines = [f"{name:30} {'area':11} {good:6} {'examples':>8} {'seconds':>8}  {headline}"]
    for n, area, ok, examples, seconds, head in rows:
        lines.append(f"{n:30} {area:11} {'yes' if ok else 'NO':6} {examples:8d} {seconds:8.2f}  {head[:90]}")
    passed = sum(r[2] for r in rows)
    lines.append(score.format(n=passed, of=len(rows), pct=100 * passed / max(1, len(rows))))
    return lines
