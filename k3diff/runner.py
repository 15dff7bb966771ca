"""Run one case through the oracle, the baseline and the candidate, and judge the candidate.

Order of work for a case (DESIGN.md):
  1. materialise weights and inputs from the case;
  2. the float64 reference and the faithful-bf16 baseline produce their outputs and states;
  3. the candidate runs under the controls (`k3diff.controls`): poisoned outputs, inputs checked
     unmodified, run twice for determinism with stale buffers the second time;
  4. routing is compared as id sets with near-tie awareness; on a tie flip the reference and the
     baseline are re-run with the candidate's ids so downstream stages are still compared;
  5. every output and state tensor is compared under the error rule; the verdict locates the worst.
Multi-step cases carry each implementation's own caches and states from step to step.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from k3diff import budgets
from k3diff.backends.oracle import run_reference
from k3diff.case import Case
from k3diff.controls import Controls, run_candidate
from k3diff.divergence import RoutingReport, TensorReport, align_by_id, compare, compare_routing
from k3diff.materialize import inputs_for, materialize
from k3diff.sizing import check_fits
from k3diff.stages import output_specs

PERSISTENT = ("kv_cache", "conv_state", "recurrent_state")   # carried across decode steps


@dataclass
class Verdict:
    case: Case
    backend: str
    reports: list = field(default_factory=list)       # TensorReport
    routing: RoutingReport | None = None
    tie_flips: int = 0
    forced_replay: bool = False
    notes: list = field(default_factory=list)          # control findings that are not failures
    error: str | None = None                           # the candidate raised
    skipped: str | None = None                         # the case does not apply to this backend
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        if self.error:
            return False
        if self.routing is not None and not self.routing.ok:
            return False
        return all(r.ok for r in self.reports)

    def failures(self) -> list[str]:
        out = [f"ERROR {self.error}"] if self.error else []
        if self.routing is not None and not self.routing.ok:
            out.append(self.routing.line())
        out += [r.line() for r in self.reports if not r.ok]
        return out

    def worst(self) -> TensorReport | None:
        graded = [r for r in self.reports if r.bound > 0]
        return max(graded, key=lambda r: r.ratio) if graded else None

    def headline(self) -> str:
        if self.skipped:
            return f"SKIP {self.case.label()}: {self.skipped}"
        if self.ok:
            w = self.worst()
            worst = f"; worst {w.stage}/{w.tensor} at {100 * w.ratio:.0f}% of budget" if w else ""
            return f"PASS {self.case.label()}{worst}"
        return f"FAIL {self.case.label()}: {self.failures()[0]}"

    def to_dict(self) -> dict:
        """Everything a seed file records: plain JSON, identical for identical runs."""
        return {
            "ok": self.ok, "backend": self.backend, "error": self.error, "skipped": self.skipped,
            "tie_flips": self.tie_flips, "forced_replay": self.forced_replay, "notes": list(self.notes),
            "routing": None if self.routing is None else {
                "ok": self.routing.ok, "tie_flips": self.routing.tie_flips,
                "mismatched_tokens": list(self.routing.mismatched_tokens), "note": self.routing.note},
            "reports": [r.to_dict() for r in self.reports],
        }


def pick_device(requested: str | None = None) -> str:
    if requested:
        return requested
    return "cuda" if torch.cuda.is_available() else "cpu"


_PREPARED: dict = {}


def _prepared(backend, cfg, stage, weights):
    """prepare() once per (backend, weight set); routing-mode copies are new weight sets. Entries
    hold the backend and the tensors themselves, so the ids in the key cannot be reused by other
    objects while the entry lives."""
    key = (id(backend), stage, tuple((k, id(v)) for k, v in sorted(weights.items())))
    if key not in _PREPARED:
        if len(_PREPARED) > 8:
            _PREPARED.clear()
        _PREPARED[key] = (backend, dict(weights), backend.prepare(cfg, stage, weights))
    return _PREPARED[key][2]


def check_case(case: Case, candidate, *, device: str | None = None, controls: Controls | None = None) -> Verdict:
    """Judge `candidate` on `case`. Never raises for a candidate's failure: it is in the verdict."""
    device = pick_device(device)
    controls = controls or Controls()
    name = getattr(candidate, "name", type(candidate).__name__)
    verdict = Verdict(case, name)
    stage = case.stage
    if stage not in getattr(candidate, "stages", (stage,)):
        verdict.skipped = f"backend {name!r} does not implement stage {stage!r}"
        return verdict
    start = time.perf_counter()
    check_fits(case, device)
    cfg, weights, inputs = materialize(case, device)
    prepared = _prepared(candidate, cfg, stage, weights)
    provides = set(candidate.provides(stage))
    state = {"ref": {}, "base": {}, "cand": {}}
    for step in range(case.steps):
        step_inputs = inputs if step == 0 else _next_step_inputs(case, device, step)
        per = {role: _with_state(step_inputs, state[role]) for role in state}
        # the layer's routing probe is the exact reference run itself unless it forced new ids
        ref = _force_layer_routing_near_ties(case, cfg, weights, per, verdict) if stage == "layer" else None
        if ref is None:
            ref = run_reference(stage, cfg, weights, per["ref"], "exact")
        base = run_reference(stage, cfg, weights, per["base"], "faithful")
        try:
            cand = run_candidate(candidate, stage, cfg, prepared, weights, per["cand"], provides, controls, verdict)
        except Exception as exc:  # the candidate crashed: a failure with its message, not a lost run
            verdict.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            break
        if stage == "moe" and "topk_ids" in provides:
            ref, base = _judge_routing(case, cfg, weights, per, ref, base, cand, verdict)
        _compare_all(case, step, per["cand"], ref, base, cand, provides, verdict)
        for role, result in (("ref", ref), ("base", base), ("cand", cand)):
            state[role] = {k: result[k] for k in PERSISTENT if k in result}
        if not verdict.ok:
            break
    verdict.seconds = time.perf_counter() - start
    return verdict


def _with_state(inputs: dict, carried: dict) -> dict:
    """Each implementation gets its own copy of the inputs (and its own evolving state)."""
    out = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in inputs.items()}
    for k, v in carried.items():
        out[k] = v.clone().to(out[k].dtype) if k in out else v.clone()
    return out


def _next_step_inputs(case: Case, device, step: int) -> dict:
    nxt = inputs_for(case, device, step)
    if "cache_lens" in nxt:
        nxt["cache_lens"] = torch.tensor([n + step for n in case.cache_lens], dtype=torch.int64, device=device)
    return nxt


def _judge_routing(case, cfg, weights, per, ref, base, cand, verdict):
    """Compare ids as sets; on near-tie flips replay ref and baseline with the candidate's ids."""
    forced = "forced_ids" in per["cand"]
    if forced:
        # forced ids: the ids are an input; compare them as given (a kernel must not reorder sets)
        verdict.routing = compare_routing(cand["topk_ids"], per["ref"]["forced_ids"], None, 0.0)
        return ref, base
    report = compare_routing(cand["topk_ids"], ref["topk_ids"], ref.get("sel_gap"), budgets.NEAR_TIE_DELTA)
    verdict.routing = report
    verdict.tie_flips += report.tie_flips
    if report.ok and report.tie_flips:
        verdict.forced_replay = True
        ids = cand["topk_ids"].to(torch.int32)
        ref = run_reference("moe", cfg, weights, dict(per["ref"], forced_ids=ids), "exact")
        base = run_reference("moe", cfg, weights, dict(per["base"], forced_ids=ids), "faithful")
    return ref, base


def _force_layer_routing_near_ties(case, cfg, weights, per, verdict):
    """In a whole layer, x_mlp carries bf16 noise, so routing near its boundary legitimately differs
    between implementations. If the reference sees a gap under the layer delta, every
    implementation is run with the reference's ids (routing itself is judged in the moe stage).
    Returns the exact reference's result when it stays valid (nothing forced), else None."""
    if not cfg.is_moe_layer(case.layer_idx) or "forced_ids" in per["ref"]:
        return None
    probe = run_reference("layer", cfg, weights, per["ref"], "exact")
    gap = probe["mlp.sel_gap"]
    if float(gap.min()) < budgets.LAYER_NEAR_TIE_DELTA:
        ids = probe["mlp.topk_ids"].to(torch.int32)
        for role in per:
            per[role]["forced_ids"] = ids.clone()
        verdict.forced_replay = True
        verdict.notes.append(f"layer routing forced to the reference's ids (gap "
                             f"{float(gap.min()):.2g} < {budgets.LAYER_NEAR_TIE_DELTA:g})")
        return None
    return probe


def _compare_all(case, step, cand_inputs, ref, base, cand, provides, verdict):
    stage = case.stage
    tag = (lambda n: n) if case.steps == 1 else (lambda n: f"{n}@step{step}")
    for spec in output_specs(stage, provides):
        if spec.name == "topk_ids" or spec.name not in ref:
            continue
        c, r, b = cand[spec.name], ref[spec.name], base.get(spec.name)
        if spec.name == "topk_weights":
            c = align_by_id(cand["topk_ids"], c)
            r = align_by_id(ref["topk_ids"] if "forced_ids" not in cand_inputs else cand_inputs["forced_ids"], r)
            b = None if b is None else align_by_id(base["topk_ids"] if "forced_ids" not in cand_inputs
                                                   else cand_inputs["forced_ids"], b)
        verdict.reports.append(compare(stage, tag(spec.name), c, r, b, budgets.budget_for(stage, spec.name),
                                       spec.dtype))
    _compare_states(case, tag, cand_inputs, ref, base, cand, verdict)


def _compare_states(case, tag, cand_inputs, ref, base, cand, verdict):
    stage, kind = case.stage, case.attention_kind
    add = verdict.reports.append
    if kind == "mla" and "kv_cache" in cand:
        lens = cand_inputs["cache_lens"].to(torch.int64).cpu()
        rows = torch.arange(lens.numel())
        new_c, new_r = cand["kv_cache"][rows, lens], ref["kv_cache"][rows, lens]
        new_b = base["kv_cache"][rows, lens]
        add(compare(stage, tag("kv_cache.new"), new_c, new_r, new_b, budgets.budget_for(stage, "kv_cache.new"),
                    torch.bfloat16))
        before, after = cand["_before"]["kv_cache"], cand["kv_cache"].clone()
        after[rows, lens] = before[rows, lens]
        add(compare(stage, tag("kv_cache.untouched"), after, before, None,
                    budgets.budget_for(stage, "kv_cache.untouched")))
    if kind == "kda" and "conv_state" in cand:
        idx = cand_inputs["state_idx"].to(torch.int64).cpu()
        live = idx[idx > 0]
        before_conv, after_conv = cand["_before"]["conv_state"], cand["conv_state"]
        hist = after_conv.clone()
        hist[live, :, :-1] = before_conv[live, :, 1:]          # the shift, bit for bit
        hist[live, :, -1] = after_conv[live, :, -1]
        add(compare(stage, tag("conv_state.history"), after_conv, hist, None,
                    budgets.budget_for(stage, "conv_state.history")))
        untouched = torch.ones(after_conv.shape[0], dtype=torch.bool)
        untouched[live] = False
        add(compare(stage, tag("conv_state.untouched"), after_conv[untouched], before_conv[untouched], None,
                    budgets.budget_for(stage, "kv_cache.untouched")))
        add(compare(stage, tag("conv_state.new"), after_conv[live, :, -1], ref["conv_state"][live, :, -1],
                    base["conv_state"][live, :, -1], budgets.budget_for(stage, "conv_state.new"), torch.bfloat16))
        add(compare(stage, tag("recurrent_state"), cand["recurrent_state"][live], ref["recurrent_state"][live],
                    base["recurrent_state"][live], budgets.budget_for(stage, "recurrent_state"), torch.float32))
        add(compare(stage, tag("recurrent_state.untouched"), cand["recurrent_state"][untouched],
                    cand["_before"]["recurrent_state"][untouched], None,
                    budgets.budget_for(stage, "kv_cache.untouched")))
        null_rows = (idx <= 0).nonzero().flatten()
        attn = "out" if stage == "kda" else "attn_out"
        if attn in cand and len(null_rows):
            zeros = torch.zeros_like(cand[attn][null_rows])
            add(compare(stage, tag(f"{attn}.null_rows"), cand[attn][null_rows], zeros, None,
                        budgets.budget_for(stage, "out.null_rows")))
    if stage == "layer":
        bk = case.config().attn_res_block_size
        write_layer = case.layer_idx % bk == 0
        if "blocks" in cand:
            # the block copy is exact: the written slot equals the baseline's bf16(prefix + delta)
            # bit for bit, every other slot (NaN padding included) stays as it was
            expected = cand["_before"]["blocks"].clone()
            if write_layer:
                expected[:, case.layer_idx // bk] = base["blocks"][:, case.layer_idx // bk].to(expected.dtype)
            add(compare(stage, tag("blocks"), cand["blocks"], expected, None,
                        budgets.budget_for(stage, "blocks.untouched")))
        if "prefix" in cand:
            # prefix ends as bf16(bf16(prefix + delta) + a) (or a itself on a block-write layer):
            # it carries the attention output, a rounded GEMV result, so the error rule applies
            add(compare(stage, tag("prefix"), cand["prefix"], ref["prefix"], base["prefix"],
                        budgets.budget_for(stage, "prefix"), torch.bfloat16))
