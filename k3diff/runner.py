"""Run one case through the oracle, the baseline and the candidate: the order of work, nothing else.

For a case (docs/design.md):
  1. materialise weights and inputs from the case (`k3diff.materialize`);
  2. the float64 reference and the faithful-bf16 baseline produce their outputs and states;
  3. the candidate runs under the controls (`k3diff.controls`): poisoned outputs, inputs checked
     unmodified, run twice for determinism with stale buffers the second time. It runs behind a
     link (`k3diff.candidate_link`): in its own process when isolated, where it only fills the
     buffers made here; every step below happens in this process, out of its reach;
  4. routing is judged by the routing rule (`k3diff.routing`), which may replay the reference
     with the candidate's ids after a near-tie flip;
  5. every output is judged by the error rule (`k3diff.divergence`, budgets in `k3diff.budgets`)
     and every state by its stage's state rule (`k3diff.state_rules`).
Multi-step cases carry each implementation's own caches and states from step to step.
"""
from __future__ import annotations

import time

import torch

from k3diff import routing, schedule, verify, weight_guard
from k3diff.backends.oracle import run_reference
from k3diff.budgets import STEP_TAG, budget_for
from k3diff.candidate_link import link_for
from k3diff.case import Case
from k3diff.comparisons import compare_many
from k3diff.controls import Controls, judge_calls, make_calls
from k3diff.coverage import routed_ranges
from k3diff.fatal import CandidateFailed
from k3diff.host_memory import keep_freed_memory
from k3diff.materialize import materialize
from k3diff.sizing import check_fits
from k3diff.stages import output_specs
from k3diff.state_rules import state_reports
from k3diff.time_limits import OwnWork
from k3diff.verdict import Verdict

# carried across decode steps, each in its input dtype of the stage contract (k3diff.stages): the
# exact reference's float64 state is rounded there, as a real cache or state would be
PERSISTENT = {"kv_cache": torch.bfloat16, "conv_state": torch.bfloat16, "recurrent_state": torch.float32}


def check_case(case: Case, candidate, *, device: str = "cpu", controls: Controls | None = None) -> Verdict:
    """Judge `candidate` (a backend object, or a link to one in its own process: k3diff.isolation)
    on `case`. Never raises for a candidate's failure: it is in the verdict (a candidate's process
    that died, hung or ran out of memory raises CandidateFailed for k3diff.judge)."""
    link = link_for(candidate)
    controls = controls or Controls()
    verdict = Verdict(case, link.name)
    stage = case.stage
    cfg = case.config()
    start = time.perf_counter()
    clock = PhaseClock(device, verdict.phases, case)
    answer = asked(link, case, clock, verdict)
    if answer is None:
        return verdict
    keep_freed_memory()             # once per process: the next case reuses this one's host memory
    check_fits(case, device)
    cfg, weights, inputs = materialize(case, device)
    clock.lap("materialize")
    clock.move("materialize", "prepare", 0.0)      # every case names the phase, prepared before or not
    provides = set(answer["provides"])
    # the exact run also carries each accumulated output's Σ|a||b| (the error rule's floor)
    oracle = lambda inputs, mode: run_reference(stage, cfg, weights, inputs, mode, magnitudes=True)  # noqa: E731
    state = {"ref": {}, "base": {}, "cand": {}}
    for step in range(case.steps):
        step_inputs = inputs if step == 0 else verify.next_step_inputs(case, device, step)
        per = {role: _with_state(step_inputs, state[role]) for role in state}
        # the layer's routing probe is the exact reference run itself (forced onto its own ids or
        # not), and the baseline it sizes the layer's near-tie δ with
        ref = base = None
        if stage == "layer":
            both = routing.force_layer_near_ties(oracle, cfg.is_moe_layer(case.layer_idx), per, verdict,
                                                 weights.get("mlp.router.bias"), cfg.n_group)
            ref, base = both if both is not None else (None, None)
        if ref is None:
            ref = oracle(per["ref"], "exact")
        if step == 0:
            verdict.routed = _routed(cfg, ref)
        if base is None:
            base = oracle(per["base"], "faithful")
        clock.lap("reference")
        try:
            cand = _candidate_call(link, case, cfg, weights, per["cand"], provides, answer, controls, verdict, device,
                                   clock)
        except CandidateFailed as failed:
            if failed.crash:
                raise                   # k3diff.judge: a crash, a hang, or out of memory judged by size
            verdict.error = failed.error
            break
        if stage == "moe" and "topk_ids" in provides:
            ref, base = routing.judge_moe_routing(oracle, per, ref, base, cand, verdict,
                                                  weights.get("router.bias"), cfg.n_group)
        tag = (lambda n: n) if case.steps == 1 else (lambda n, s=step: f"{n}{STEP_TAG}{s}")
        verdict.reports += _output_reports(stage, tag, per["cand"], ref, base, cand, provides)
        verdict.reports += schedule.reports(stage, tag, cand, lambda outs: _output_reports(    # k3diff/schedule.py
            stage, tag, per["cand"], ref, base, {**cand, **outs}, provides), answer["deterministic"], verdict)
        verdict.reports += state_reports(case, tag, per["cand"], ref, base, cand)
        carry_states(state, ref, base, cand)
        clock.lap("judge")          # the routing rule's replays count here, beside the error rule
        if not verdict.ok:
            break
    verdict.seconds = time.perf_counter() - start
    return verdict


def asked(link, case, clock, verdict) -> dict | None:
    """The candidate's answers for `case` (k3diff.candidate_link), or None with the verdict marked
    skipped when it refuses the case: the same refusal for check_case and the invariance check."""
    answer = link.ask(case)
    clock.lap("candidate")
    if answer["skip"]:
        verdict.skipped = answer["skip"]
        return None
    return answer


def carry_states(state: dict, ref: dict, base: dict, cand: dict) -> None:
    """After a step: each implementation's own caches and states become its next step's inputs."""
    for role, result in (("ref", ref), ("base", base), ("cand", cand)):
        state[role] = {k: result[k] for k in PERSISTENT if k in result}


def _candidate_call(link, case, cfg, weights, inputs, provides, answer, controls, verdict, device, clock) -> dict:
    """One candidate call under the controls: k3diff makes the buffers, the candidate's side fills
    them, k3diff judges the controls here (k3diff.controls). The weights are guarded here too."""
    pristine, calls = make_calls(case.stage, cfg, inputs, provides, device, controls, case.schedule)
    clock.lap("judge")
    writable = link.writable(weights)
    guard = weight_guard.remember(writable) if controls.check_inputs else {}
    calls, facts = link.run(case, cfg, weights, calls, provides)
    clock.lap_candidate(facts)
    changed = weight_guard.changed(guard, writable) if guard else []
    changed += [n for n in facts.get("weights_changed", ()) if n not in changed]
    return judge_calls(case.stage, pristine, calls, facts, deterministic=answer["deterministic"],
                       controls=controls, verdict=verdict, weights_changed=changed)


class PhaseClock:
    """Seconds per phase of a case, summed over its steps (materialize, prepare, reference,
    candidate, transfer, judge): where a case's time goes, so a slow nightly names its slow part. On a GPU
    each lap first waits for the device, or queued work would be billed to the next phase. Given
    the case, every phase but the candidate's counts against k3diff's own limit
    (k3diff.time_limits: past it, the machine's line, never a verdict)."""

    def __init__(self, device, into: dict, case=None):
        self._sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
        self._into = into
        self._own = OwnWork() if case is not None else None
        self._case = case
        self._t = time.perf_counter()

    def move(self, src: str, dst: str, seconds: float) -> None:
        """Seconds a lap counted under `src` that belong to `dst` (the candidate's prepare() runs
        inside its first call: the candidate's time all the same)."""
        seconds = max(0.0, min(seconds, self._into.get(src, 0.0)))
        self._into[src] = self._into.get(src, 0.0) - seconds
        self._into[dst] = self._into.get(dst, 0.0) + seconds

    def lap_candidate(self, facts: dict) -> None:
        """The lap of a candidate call, split by the call's facts: its prepare() (the candidate's
        own time all the same) and, isolated, the bytes moved to and from its process
        (k3diff.isolation: the round trip's wall less the child's own seconds), which is k3diff's
        cost, not the kernel's, though it counts against the candidate's time limit as before."""
        self.lap("candidate")
        self.move("candidate", "prepare", facts.get("prepare_s", 0.0))
        if "transfer_s" in facts:       # named only where there is a socket to cross
            self.move("candidate", "transfer", facts["transfer_s"])

    def lap(self, phase: str) -> None:
        self._sync()
        t = time.perf_counter()
        self._into[phase] = self._into.get(phase, 0.0) + (t - self._t)
        if self._own is not None and phase != "candidate":
            self._own.add(t - self._t, phase, self._case)
        self._t = t


def _routed(cfg, ref: dict) -> dict | None:
    """The expert-id ranges the reference routed this case's tokens to (k3diff.coverage)."""
    ids = ref.get("topk_ids", ref.get("mlp.topk_ids"))
    return None if ids is None else routed_ranges(ids, cfg.n_experts)


def _with_state(inputs: dict, carried: dict) -> dict:
    """Each implementation gets its own dict of the inputs and its own evolving state. The step's
    input tensors are shared, not cloned: the reference never writes an input (tested:
    tests/reference/test_materialize.py) and the candidate runs on the controls' clones
    (`k3diff.controls.run_candidate`), so no role can see another's writes."""
    out = dict(inputs)
    for k, v in carried.items():
        out[k] = verify.carried(k, v, PERSISTENT[k])
    return out


def _output_reports(stage, tag, cand_inputs, ref, base, cand, provides) -> list:
    """Every output the candidate provides, under the error rule (ids are the routing rule's)."""
    items = []
    for spec in output_specs(stage, provides):
        if spec.name == "topk_ids" or spec.name not in ref:
            continue
        c, r, b = cand[spec.name], ref[spec.name], base.get(spec.name)
        if spec.name == "topk_weights":
            c = routing.align_by_id(cand["topk_ids"], c)
            r = routing.align_by_id(routing.expected_ids(cand_inputs, ref), r)
            b = None if b is None else routing.align_by_id(routing.expected_ids(cand_inputs, base), b)
        mag = ref.get("abs." + spec.name)
        if spec.name == "topk_weights" and mag is not None:     # the same slots as `r`
            mag = routing.align_by_id(routing.expected_ids(cand_inputs, ref), mag)
        items.append((stage, tag(spec.name), c, r, b, budget_for(stage, spec.name), spec.dtype, mag))
    return compare_many(items)
