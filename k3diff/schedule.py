"""The schedule as a case dimension: how the candidate is run besides once, eagerly, on an idle GPU.

The bugs users reported against fused decode kernels are schedule bugs: a CUDA graph that captured
a pointer, a size or a host decision it should not have ("silently corrupts output at batch=1"), a
race whose outcome depends on which CTAs share an SM ("nondeterminism from B=192"), results leaking
between rows under load. A test that runs the kernel once, alone, with the same launch order every
time passes all of them. So a GPU case carries a `schedule` (Case.schedule; "" = eager on an idle
GPU, what every case did before), drawn by the strategies for candidates that allow it:

    graph                 captured once per shape into a CUDA graph with static buffers (after a
                          warm-up on a side stream, as serving engines do), then replayed with the
                          case's inputs copied in (k3diff/graph_replay.py); a candidate allows it by
                          declaring `graph_safe = True`
    pressure:one_sm       while it runs, a co-runner on another stream spins on 1 SM,
    pressure:half         on half of them,
    pressure:all_but_one  on all but one (k3diff/pressure.py),
    pressure:l2           or streams a buffer of 4x the L2 through a quarter of them

The scheduled run gives raw tensors (`run_scheduled`, inside k3diff.controls.run_candidate);
`reports` (the judging side, k3diff.runner) compares them with the eager run: bit for bit for a
deterministic candidate, by the error rule for one that declares itself nondeterministic. A capture
that fails and a replay that reads stale inputs are named failures, saved with the case's seed.

Grids past one wave: on a GPU the strategies also draw batches on and around WAVE_BATCHES (132 SMs
of an H100: one CTA per token fills one wave at 132; 192 is where the reported race showed; 256 is
K3's largest decode batch), as declared boundaries, so the coverage table names any never crossed.

`K3DIFF_SCHEDULE` (environment) restricts the values drawn: `off` (none: the run as before, for a
side-by-side cost), or a comma list such as `graph,pressure:half`.
"""
from __future__ import annotations

import os
from dataclasses import replace

from k3diff.budgets import Budget
from k3diff.usage import UsageProblem

EAGER = ""
GRAPH = "graph"
PRESSURES = ("pressure:one_sm", "pressure:half", "pressure:all_but_one", "pressure:l2")
SCHEDULES = (EAGER, GRAPH) + PRESSURES
# batches past one wave of CTAs (132 SMs on an H100; 192: the reported race; 256: K3's largest)
WAVE_BATCHES = (132, 192, 256)
ENV = "K3DIFF_SCHEDULE"
TAG = "@"              # "out@graph": the tensor of the scheduled run


def problem(value) -> str | None:
    """Why `value` is not a schedule (one line), or None."""
    if not isinstance(value, str) or value not in SCHEDULES:
        return f"unknown schedule {value!r} (schedules: eager '', {', '.join(SCHEDULES[1:])})"
    return None


def label(case) -> list:
    """The label's piece: nothing for the eager default."""
    return [f"schedule={case.schedule}"] if getattr(case, "schedule", EAGER) else []


def declared(backend) -> tuple:
    """The schedules `backend` allows besides eager: its own `schedules` when it names them
    (a BackendInfo carries them so), else every pressure, and the graph where it declares
    `graph_safe`. A distributed candidate runs on ranks: none."""
    if backend is None or getattr(backend, "distributed", False):
        return ()
    named = getattr(backend, "schedules", None)
    if named is not None:
        bad = [s for s in named if problem(s) or s == EAGER]
        if bad:
            raise ValueError(f"backend schedules: {problem(bad[0]) or 'eager is always allowed, do not name it'}")
        return tuple(named)
    return ((GRAPH,) if getattr(backend, "graph_safe", False) else ()) + PRESSURES


def chosen(allowed: tuple) -> tuple:
    """`allowed` as K3DIFF_SCHEDULE restricts it."""
    env = os.environ.get(ENV, "").strip()
    if not env:
        return allowed
    if env == "off":
        return ()
    want = [s.strip() for s in env.split(",") if s.strip()]
    bad = [s for s in want if problem(s)]
    if bad:
        raise UsageProblem(f"{ENV}: {problem(bad[0])}")
    return tuple(s for s in allowed if s in want)


def with_schedules(space, device, backend):
    """The space of a GPU run with the candidate's schedules and the batches past one wave (as
    declared batch boundaries, whatever the candidate allows); unchanged on the CPU and under
    K3DIFF_SCHEDULE=off."""
    if not str(device).startswith("cuda") or os.environ.get(ENV, "").strip() == "off":
        return space
    from k3diff.pressure import available

    allowed = tuple(s for s in chosen(declared(backend)) if s == GRAPH or available())
    bounds = dict(space.boundaries)
    waves = {b for b in WAVE_BATCHES if b <= space.max_batch}
    bounds["batch"] = tuple(sorted(set(bounds.get("batch", ())) | waves))
    return replace(space, schedules=allowed, boundaries=tuple(sorted(bounds.items())))


def strategy(space):
    """The schedule of a drawn case: eager half the time, else one of the space's."""
    from hypothesis import strategies as st

    return st.one_of(st.just(EAGER), st.sampled_from(space.schedules))


# ------------------------------------------------------------------ the candidate side

def fill(backend, stage, cfg, prepared, call: dict) -> dict:
    """The candidate's run under `call["schedule"]`, into the call's buffers (k3diff.controls
    made them): its outputs into call["out"], its states left in call["inputs"]. Returns the
    facts, plain strings only: {"error": line} (a capture that failed), {"skip": line} (no GPU or
    no Triton here), else {}."""
    import torch

    sched, inputs = call["schedule"], call["inputs"]
    device = next(v.device for v in inputs.values() if hasattr(v, "device"))
    if device.type != "cuda":
        return {"skip": f"schedule {sched} needs a CUDA device; judged eagerly only"}
    alloc = lambda ins, fill_with: {k: torch.full_like(v, float("nan")) if v.is_floating_point()  # noqa: E731
                                    else torch.full_like(v, -7) for k, v in call["out"].items()}
    if sched == GRAPH:
        from k3diff.graph_replay import replay
        got = replay(backend, stage, cfg, prepared, {k: (v.clone() if hasattr(v, "clone") else v)
                                                      for k, v in inputs.items()}, alloc)
    else:
        from k3diff.pressure import run_under
        got = run_under(sched, backend, stage, cfg, prepared, inputs, alloc)
    if "error" in got or "skip" in got:
        return {k: str(got[k]) for k in ("error", "skip") if k in got}
    for name, t in got["outputs"].items():
        if name in call["out"]:
            call["out"][name].copy_(t)
    for name, t in got["states"].items():
        if name in inputs and hasattr(inputs[name], "copy_"):
            inputs[name].copy_(t)
    return {}


def outcome(stage, call: dict, facts) -> dict:
    """The judging side's view of the scheduled call (k3diff.controls.judge_calls): what
    `reports` compares with the eager run."""
    from k3diff.stages import STATE

    sched, facts = call["schedule"], facts or {}
    if facts.get("skip"):
        return {"schedule": sched, "skip": facts["skip"]}
    if facts.get("error"):
        return {"schedule": sched, "error": facts["error"]}
    return {"schedule": sched, "outputs": dict(call["out"]),
            "states": {k: call["inputs"][k] for k in STATE[stage] if k in call["inputs"]}}


# ------------------------------------------------------------------ the judging side

def reports(stage, tag, cand: dict, judge_outputs, deterministic: bool, verdict) -> list:
    """The scheduled run against the eager one (`cand`, k3diff.controls.run_candidate's result):
    bitwise for a deterministic candidate, else `judge_outputs(outputs)` (the error rule's
    reports of the scheduled outputs). A skip (no GPU) becomes a note."""
    from k3diff.comparisons import compare_many
    from k3diff.divergence import TensorReport
    from k3diff.stages import STATE

    got = cand.get("_schedule") or {}
    sched = got.get("schedule")
    if not sched:
        return []
    if "skip" in got:
        verdict.notes.append(got["skip"])
        return []
    if "error" in got:
        return [TensorReport(stage, tag(f"{stage}{TAG}{sched}"), False, note=got["error"])]
    if not deterministic:
        out = []
        for rep in judge_outputs(got["outputs"]):
            rep.tensor = f"{rep.tensor}{TAG}{sched}"
            out.append(rep)
        return out
    exact = Budget(0.0, 0.0, f"{sched} vs eager", bitwise=True)
    items = [(stage, tag(f"{name}{TAG}{sched}"), t, cand[name], None, exact)
             for name, t in got["outputs"].items() if name in cand]
    items += [(stage, tag(f"{name}{TAG}{sched}"), t, cand[name], None, exact)
              for name, t in got["states"].items() if name in cand and name in STATE[stage]]
    found = compare_many(items)
    why = {GRAPH: "the graph replay gave other bits than the eager run (stale inputs or outputs?)"}.get(
        sched, f"under {sched} the candidate gave other bits than on an idle GPU")
    for rep in found:
        if not rep.ok:
            rep.note = f"{why}: {rep.note}" if rep.note else why
    return found
