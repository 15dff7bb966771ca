"""What was judged, first on the page: the candidate (backend spec), the device and its GPU, the
presets and profile, the seed, the budget table's fingerprint and the command that reruns the run,
with a loud note when the candidate is one of k3diff's own CPU stand-ins, so a PASS of a laptop run
of torch-blocked cannot be taken for a PASS of a GPU kernel.

Plain data from the run records (k3diff/results.py); html.py draws it.
"""
from __future__ import annotations

import shlex
from collections import Counter

from k3diff.report import tables, verdict

# k3diff's own candidates (k3diff/backends/__init__.py BUILTIN: the oracle's two modes and the
# torch-blocked family): a pipeline in torch, not a kernel under test. tests/k3diff/test_report_header.py
# holds this list to the registry.
STAND_INS = ("reference", "torch", "torch-blocked")


def stand_in(backend) -> bool:
    """Is this backend spec one of k3diff's own torch pipelines (torch-blocked-ep, -graph too)?"""
    b = str(backend or "")
    return b in STAND_INS or b.startswith("torch-blocked-")


def _values(headers, key) -> list:
    return sorted({str(h.get(key)) for h in headers if h.get(key) not in (None, "")})


def command(headers) -> str | None:
    """The line that reruns the run: the recorded rerun line (k3diff/rerun.py), else the argv as
    recorded less its output-only options (rerun.without_outputs: files written before the rerun
    line), else None."""
    from k3diff.rerun import without_outputs

    for h in headers:
        rerun = h.get("rerun")
        if isinstance(rerun, dict) and isinstance(rerun.get("line"), str):
            return rerun["line"]
    for h in headers:
        if h.get("argv"):
            return ("pytest " + shlex.join(without_outputs(h["argv"]))
                    + "   (argv as recorded; the run wrote no rerun line)")
    return None


def facts(run) -> dict:
    """The header's facts: candidate, device, gpu, presets, profile, seed, budget table, command,
    and `notes` (the loud lines: a CPU stand-in, a CPU run, shards that disagree)."""
    shards = run.shards
    envs = [h.get("environment") or {} for h in run.headers]
    backends, devices = _values(shards, "backend"), _values(shards, "device")
    gpus = sorted({str(e["gpu"]) for e in envs if e.get("gpu")})
    presets = Counter(str((c.get("case") or {}).get("preset")) for c in tables.judged(run.cases)
                      if (c.get("case") or {}).get("preset") is not None)
    budgets = _values(run.headers, "budget_table")
    notes = []
    standing = [b for b in backends if stand_in(b)]
    if standing:
        notes.append(f"CPU STAND-IN: {', '.join(standing)} is k3diff's own torch pipeline, not a GPU kernel: "
                     "this verdict says nothing about the megakernel or any other candidate")
    if devices and all(d == "cpu" or d.startswith("cpu:") for d in devices) and not gpus:
        notes.append("ran on the CPU: no GPU kernel was judged here")
    for what, values in (("backends", backends), ("budget tables", budgets)):
        if len(values) > 1:
            notes.append(f"the shards disagree on the {what} ({', '.join(values)}): not one run")
    return {
        "candidate": ", ".join(backends) or "not recorded",
        "device": ", ".join(devices) or "not recorded",
        "gpu": ", ".join(gpus) or "none recorded",
        "presets": ", ".join(f"{p} {n}" for p, n in sorted(presets.items())) or "-",
        "profile": ", ".join(_values(shards, "profile")) or "-",
        "seed": ", ".join(map(str, run.seeds)),
        "budget_table": ", ".join(budgets) or "not recorded (a results file older than the fingerprint)",
        "command": command(shards),
        "notes": notes,
    }


def markdown(run) -> str:
    """The verdict, what was judged and the per-stage table as GitHub markdown (for
    $GITHUB_STEP_SUMMARY), in the page's order."""
    lines = ["| " + " | ".join(tables.STAGE_COLUMNS) + " |", "|" + "---|" * len(tables.STAGE_COLUMNS)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in tables.stage_rows(run)]
    total, fails = len(tables.judged(run.cases)), tables.distinct_failures(run.cases)
    known = facts(run)
    head = (f"**k3diff**: {verdict.WORDS[verdict.of(run)]}: {total} cases from {len(run.shards)} shard(s), "
            f"{fails} distinct failure(s); candidate `{known['candidate']}` on {known['device']}"
            + (f" ({known['gpu']})" if known["gpu"] != "none recorded" else "")
            + f"; seed {', '.join(map(str, run.seeds))}; budget table `{known['budget_table']}`")
    notes = [x for n in known["notes"] for x in (f"**{n}**", "")]        # a paragraph each
    return "\n".join([head, ""] + notes + lines + [""] + run.warnings) + "\n"
