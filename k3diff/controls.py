"""Anti-cheat controls around every candidate call (on by default).

Generated kernels have fooled evaluators by returning memory that still held an earlier result, by
leaving outputs unwritten, by scribbling on their inputs, or by reading uninitialised memory that
happened to hold the right values. So each candidate call:
  - writes into buffers poisoned with NaN (integers: a sentinel), so an unwritten element shows;
  - must leave every input and weight bitwise unchanged except the state its stage declares;
  - runs a second time on fresh copies of the same inputs, into buffers that still hold the
    previous case's results; both runs must agree bit for bit (or, for a backend that declares
    itself nondeterministic, the spread is measured and reported).
Candidate and reference never share buffers: every run gets its own clones.

The work is split by who may be trusted with it. k3diff makes the buffers and judges them
(`make_calls`, `judge_calls`, in the judging process); the candidate's process only runs the
candidate into them (`run_candidate`) and reports facts, never a finding: so a candidate that
patches this module in its own process changes nothing k3diff concludes.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from k3diff import schedule
from k3diff.budgets import Budget
from k3diff.comparisons import compare_many
from k3diff.divergence import TensorReport
from k3diff.stages import STATE, dims, output_specs, resolve_shape

INT_POISON = -7
_BITWISE = Budget(0.0, 0.0, "control", bitwise=True)
# the previous case's outputs, by (name, shape, dtype, device): the stale memory of the second run
_STALE: OrderedDict = OrderedDict()
_STALE_SIZE = 64            # a few cases' outputs (they live on the device now: bounded)


@dataclass
class Controls:
    poison: bool = True
    check_inputs: bool = True
    run_twice: bool = True


def _alloc(stage, cfg, inputs, provides, device, fill: str) -> dict:
    sizes = dims(cfg, stage, inputs)
    out = {}
    for spec in output_specs(stage, provides):
        shape = resolve_shape(spec, sizes)
        key = (spec.name, shape, spec.dtype, torch.device(device))
        stale = _STALE.get(key) if fill == "stale" else None
        if stale is not None:
            buf = stale.clone()
        elif spec.dtype.is_floating_point:
            buf = torch.full(shape, float("nan") if fill == "nan" else 7.0, dtype=spec.dtype, device=device)
        else:
            buf = torch.full(shape, INT_POISON, dtype=spec.dtype, device=device)
        out[spec.name] = buf
    return out


def _snapshot(tensors: dict) -> dict:
    return {k: v.clone() for k, v in tensors.items() if torch.is_tensor(v)}


def _changed(before: dict, after: dict, allowed) -> list[str]:
    bad, kept = [], []
    for k, v in before.items():
        if k in allowed:
            continue
        a = after.get(k)
        if a is None or a.shape != v.shape or a.dtype != v.dtype:
            bad.append(k)
        else:
            kept.append((k, a, v))
    reports = compare_many([("control", k, a, v, None, _BITWISE) for k, a, v in kept])
    changed = {k for (k, _, _), r in zip(kept, reports) if not r.ok}
    return [k for k in before if k in changed or k in bad]


def make_calls(stage, cfg, inputs: dict, provides, device, controls: Controls,
               sched: str = "") -> tuple[dict, list[dict]]:
    """k3diff's side, before a candidate call: (pristine, calls). `pristine` is k3diff's own copy of
    the inputs (never shown to the candidate); each call is {"inputs": fresh clones, "out": buffers
    NaN-poisoned (the first) or holding the previous case's results (the second)}, all made here:
    the candidate's process only writes into them."""
    pristine = _snapshot(inputs)

    def one(fill):
        run_inputs = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in pristine.items()}
        for k, v in inputs.items():
            run_inputs.setdefault(k, v)
        return {"inputs": run_inputs, "out": _alloc(stage, cfg, run_inputs, provides, device, fill)}

    calls = [one("nan" if controls.poison else "stale")]
    if controls.run_twice:
        calls.append(one("stale"))
    if sched:                       # the case's schedule (graph replay, pressure): one more call, run so
        calls.append(dict(one("nan"), schedule=sched))      # (k3diff/schedule.py), judged against the first
    return pristine, calls


def run_candidate(backend, stage, cfg, prepared, calls: list[dict], provides=None) -> dict:
    """The candidate's side of a candidate call (in its own process when isolated): `backend.run`
    once per call of `make_calls`, each into the buffers k3diff made. Returns facts, never a
    judgement: {"replaced": [[call, name, why], ...]} for an output the candidate rebound instead
    of writing into its buffer. The buffers and inputs in `calls` are left as the candidate left
    them; k3diff reads and judges them (`judge_calls`)."""
    replaced, facts = [], {}
    for i, call in enumerate(calls):
        if call.get("schedule"):            # filled by the schedule's run; what went wrong is a fact
            facts["schedule"] = schedule.fill(backend, stage, cfg, prepared, call)
            continue
        out = dict(call["out"])             # the candidate's own dict: a rebinding shows, the buffer stays
        backend.run(stage, cfg, prepared, call["inputs"], out)
        device = next((v.device for v in call["inputs"].values() if torch.is_tensor(v)), None)
        if device is not None and device.type == "cuda":
            torch.cuda.synchronize()
        replaced += [[i, name, why] for name, why in _rebound(call["out"], out)]
    return dict(facts, replaced=replaced)


def judge_calls(stage, pristine: dict, calls: list[dict], facts: dict, *, deterministic: bool,
                controls: Controls, verdict, weights_changed=()) -> dict:
    """k3diff's side, after the call: the controls' findings into `verdict` (the output contract,
    inputs and weights unchanged, the two runs bitwise equal), from the buffers themselves. Returns
    the first run's outputs, its updated states, and under '_before' the states as they were (for
    the untouched-rows checks)."""
    for _, name, why in facts.get("replaced", ()):
        note = f"contract: out[{name!r}] {why}"
        if not any(r.note == note for r in verdict.reports):
            verdict.reports.append(TensorReport(stage, str(name), False, note=note))
    scheduled = [c for c in calls if c.get("schedule")]
    calls = [c for c in calls if not c.get("schedule")]
    run_inputs, out = calls[0]["inputs"], calls[0]["out"]
    if controls.check_inputs:
        bad = _changed(pristine, run_inputs, STATE[stage]) + [f"weight {k}" for k in weights_changed]
        if bad:
            verdict.reports.append(TensorReport(stage, "inputs", False,
                                                note=f"modified input(s) it does not own: {', '.join(bad)}"))
    if len(calls) > 1:
        again_inputs, again = calls[1]["inputs"], calls[1]["out"]
        pairs = [(name, again[name], out[name]) for name in out]
        pairs += [(name, again_inputs[name], run_inputs[name]) for name in STATE[stage] if name in run_inputs]
        reports = compare_many([(stage, name, a, b, None, _BITWISE) for name, a, b in pairs])
        diffs = [(name, _spread(a, b)) for (name, a, b), r in zip(pairs, reports) if not r.ok]
        if diffs:
            text = ", ".join(f"{n} (max spread {s:.3g})" for n, s in diffs)
            if deterministic:
                verdict.reports.append(TensorReport(stage, "determinism", False,
                                                    note=f"two runs on identical inputs differ: {text}"))
            else:
                verdict.notes.append(f"nondeterministic (declared): {text}")
    for name, buf in out.items():    # kept where it lives: no copy to the host and back per run
        key = (name, tuple(buf.shape), buf.dtype, buf.device)
        _STALE[key] = buf.detach().clone()
        _STALE.move_to_end(key)
        while len(_STALE) > _STALE_SIZE:
            _STALE.popitem(last=False)
    result = dict(out)
    # the case's schedule (graph replay, pressure): raw tensors of that run, judged by the caller
    result["_schedule"] = schedule.outcome(stage, scheduled[0], facts.get("schedule")) if scheduled else {}
    result["_before"] = {k: pristine[k] for k in STATE[stage] if k in pristine}
    for name in STATE[stage]:
        if name in run_inputs:
            result[name] = run_inputs[name]
    return result


def _rebound(allocated: dict, out: dict) -> list:
    """The output contract (backends/base.py): every output written into the buffer the framework
    allocated, with its dtype and shape. (name, why) for each entry the candidate rebound or
    removed instead (the buffer k3diff judges is the allocated one, still poisoned)."""
    found = []
    for name, buf in allocated.items():
        got = out.get(name)
        if got is buf:
            continue
        if not torch.is_tensor(got):
            why = "was removed from `out`" if got is None else f"was replaced by a {type(got).__name__}"
        elif got.dtype != buf.dtype or tuple(got.shape) != tuple(buf.shape):
            why = (f"was replaced by a new tensor {str(got.dtype).replace('torch.', '')}"
                   f"{list(got.shape)}; required {str(buf.dtype).replace('torch.', '')}{list(buf.shape)}")
        else:
            why = "was replaced by a new tensor (write into the allocated buffer)"
        found.append((name, why))
    return found


def _spread(a: torch.Tensor, b: torch.Tensor) -> float:
    if not a.dtype.is_floating_point:
        return float((a.to(torch.int64) != b.to(torch.int64)).sum())
    d = (a.double() - b.double()).abs()
    both_nan = torch.isnan(a) & torch.isnan(b)
    d = torch.where(both_nan, torch.zeros_like(d), torch.nan_to_num(d, nan=float("inf")))
    return float(d.max()) if d.numel() else 0.0
