"""The summary's line of the cases a candidate refused, and why (its `supports()` reasons, the
stages it does not implement; k3diff/features.py): a refused case is neither passed nor failed,
and a run that met a candidate's missing verify steps or FP8 cache must say how many it skipped.

    refusal_lines(records) -> ["refused N case(s): M <reason>; ...", "not judged on this machine ..."] (either, or none)
"""
from __future__ import annotations

from collections import Counter

# how a candidate's refusals read (k3diff/candidate_link.py writes them; the summary and
# `k3diff sanitize` read them): a case it does not run, and a stage it does not implement
PREFIX = "does not run this case: "
NO_STAGE = "does not implement stage "


def _reason(skipped: str) -> str:
    return skipped.split(PREFIX, 1)[1] if PREFIX in skipped else skipped


def refusal_lines(records) -> list:
    """The candidate's refusals (`backend ... does not run this case: why`), and apart from them
    the cases this machine could not judge (too large, too slow: the machine's line, exit 11),
    which read as the candidate refusing when they shared its line."""
    seen, why, machine = set(), Counter(), Counter()
    for r in records:
        if not isinstance(r, dict) or not r.get("skipped") or r.get("phase") == "shrink":
            continue
        key = (r.get("stage"), r.get("id"), r.get("label"))
        if key in seen:
            continue
        seen.add(key)
        if PREFIX in r["skipped"]:
            why[(r.get("stage"), _reason(r["skipped"]))] += 1
        else:       # each case's own figures follow the reason: counted by the reason alone
            machine[(r.get("stage"), r["skipped"].split(":", 1)[0])] += 1
    out = []
    for counts, head in ((why, "refused {} case(s) (skipped, not passed): "),
                         (machine, "not judged on this machine {} case(s) (skipped, not passed; exit 11): ")):
        if counts:
            parts = [f"{n} {stage}: {reason}" for (stage, reason), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
            out.append(head.format(sum(counts.values())) + "; ".join(parts))
    return out
