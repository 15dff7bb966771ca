"""Batch invariance: a token's outputs alone versus inside a batch of other tokens.

A kernel that picks a different reduction split, tile or expert schedule with the batch size can
change a token's result when its neighbours change. For a backend that declares batch invariance
the two results must be bitwise equal; otherwise both must satisfy the error rule (the batched
result is judged by `check_case`, the lone one here) and the spread is reported either way.
"""
from __future__ import annotations

import dataclasses
import time

import torch

from k3diff import budgets, neighbours, routing, weight_guard
from k3diff.backends.oracle import run_reference
from k3diff.candidate_link import link_for
from k3diff.case import Case
from k3diff.comparisons import compare_many
from k3diff.controls import Controls, judge_calls, make_calls
from k3diff.divergence import TensorReport
from k3diff.fatal import CandidateFailed
from k3diff.materialize import materialize
from k3diff.runner import PhaseClock, asked
from k3diff.sizing import check_fits
from k3diff.stages import output_specs
from k3diff.verdict import Verdict

_PER_TOKEN = ("x", "prefix", "delta", "blocks", "kv_cache", "cache_lens", "state_idx", "forced_ids")


def _row(inputs: dict, p: int) -> dict:
    """The inputs of token p alone (state pools indexed by slot are kept whole)."""
    out = {}
    for k, v in inputs.items():
        out[k] = v[p:p + 1].clone() if (k in _PER_TOKEN and torch.is_tensor(v)) else (
            v.clone() if torch.is_tensor(v) else v)
    return out


def check_batch_invariance(case: Case, candidate, position: int, *, device="cpu") -> Verdict:
    """`candidate` a backend object or a link to one (k3diff.candidate_link): the candidate's side
    only fills buffers, everything below is judged here."""
    link = link_for(candidate)
    start = time.perf_counter()
    verdict = Verdict(case, link.name)
    # a token alone vs inside a batch is a decode step's question: a drawn verify case is judged
    # here as the decode step of its sequences (check_case judges its verify step)
    case = dataclasses.replace(case, widths=(), accepted=(), scores="natural")
    if case.routing == "ties" or case.routing == "near_tie":
        case = dataclasses.replace(case, routing="natural")
    clock = PhaseClock(device, verdict.phases, case)
    # the same refusal check_case honours: a case the candidate says it cannot run is not judged
    answer = asked(link, case, clock, verdict)
    if answer is None:
        return verdict
    # sized like check_case: the caches give room back first (an H100 ran out drawing a bf16
    # full-dims W2 beside the MXFP4 draw still cached), a case that cannot fit is the
    # machine's one line (exit 11), never a crash blamed on the candidate
    check_fits(case, device)
    cfg, weights, inputs = materialize(case, device)
    clock.lap("materialize")
    clock.move("materialize", "prepare", 0.0)
    provides = set(answer["provides"])
    p = position % case.batch
    controls = Controls(run_twice=False)

    def call(call_inputs):
        pristine, calls = make_calls(case.stage, cfg, call_inputs, provides, device, controls)
        writable = link.writable(weights)
        guard = weight_guard.remember(writable)
        clock.lap("judge")
        calls, facts = link.run(case, cfg, weights, calls, provides)
        clock.lap_candidate(facts)
        return judge_calls(case.stage, pristine, calls, facts, deterministic=answer["deterministic"],
                           controls=controls, verdict=verdict,
                           weights_changed=weight_guard.changed(guard, writable) + list(facts.get("weights_changed", ())))

    try:
        batched = call({k: (v.clone() if torch.is_tensor(v) else v) for k, v in inputs.items()})
        alone = call(_row(inputs, p))
    except CandidateFailed as failed:
        if failed.crash:
            raise
        verdict.error = failed.error
        verdict.seconds = time.perf_counter() - start
        return verdict
    strict = link.batch_invariant
    # a backend that declares batch invariance is judged bitwise, alone against batched: the
    # reference would be computed for nothing (the batched result meets it in check_case)
    if not strict:
        ref = run_reference(case.stage, cfg, weights, _row(inputs, p), "exact", magnitudes=True)
        base = run_reference(case.stage, cfg, weights, _row(inputs, p), "faithful")
        clock.lap("reference")
    items = []
    for spec in output_specs(case.stage, provides):
        if spec.name in ("topk_ids",) or spec.name not in alone:
            continue
        lone, inside = alone[spec.name], batched[spec.name][p:p + 1]
        if strict:
            items.append((case.stage, f"{spec.name}.alone_vs_batched", lone, inside, None,
                          budgets.Budget(0, 0, "declared batch-invariant", bitwise=True)))
        else:
            if spec.name == "topk_weights":
                continue  # slot order may differ; routing is judged as sets in check_case
            items.append((case.stage, f"{spec.name}.alone", lone, ref[spec.name], base[spec.name],
                          budgets.budget_for(case.stage, spec.name), spec.dtype, ref.get("abs." + spec.name)))
            spread = (lone.double() - inside.double()).abs()
            spread = float(torch.nan_to_num(spread, nan=float("inf")).max()) if spread.numel() else 0.0
            if spread:
                verdict.notes.append(f"{spec.name}: alone vs batched differ by up to {spread:.3g} "
                                     "(backend does not declare batch invariance)")
    verdict.reports += compare_many(items)
    if strict:      # its own check: the other rows' content, at the same batch (k3diff/neighbours.py)
        verdict.reports += neighbours.reports(call, case.stage, inputs, provides, p, batched)
    if "topk_ids" in provides and "topk_ids" in alone:
        if strict:
            same = torch.equal(torch.sort(alone["topk_ids"], -1).values,
                               torch.sort(batched["topk_ids"][p:p + 1], -1).values)
            if not same:
                verdict.reports.append(TensorReport(case.stage, "topk_ids.alone_vs_batched", False,
                                                    note="the token chose other experts alone than in the batch"))
        elif "forced_ids" not in inputs:
            delta = routing.near_tie_delta(ref["router_logits"], base.get("router_logits"),
                                           ref.get("abs.router_logits"), weights.get("router.bias"), cfg.n_group)
            verdict.routing = routing.compare_routing(alone["topk_ids"], ref["topk_ids"], ref.get("sel_gap"), delta)
    clock.lap("judge")
    verdict.seconds = time.perf_counter() - start
    return verdict
