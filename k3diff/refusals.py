"""The summary's line of the cases a candidate refused, and why (its `supports()` reasons, the
stages it does not implement; k3diff/features.py): a refused case is neither passed nor failed,
and a run that met a candidate's missing verify steps or FP8 cache must say how many it skipped.

    refusal_lines(records) -> ["refused N case(s): M <reason>; ..."] or []
"""
from __future__ import annotations

from collections import Counter

_PREFIX = "does not run this case: "


def _reason(skipped: str) -> str:
    return skipped.split(_PREFIX, 1)[1] if _PREFIX in skipped else skipped


def refusal_lines(records) -> list:
    seen, why = set(), Counter()
    for r in records:
        if not isinstance(r, dict) or not r.get("skipped") or r.get("phase") == "shrink":
            continue
        key = (r.get("stage"), r.get("id"), r.get("label"))
        if key in seen:
            continue
        seen.add(key)
        why[(r.get("stage"), _reason(r["skipped"]))] += 1
    if not why:
        return []
    parts = [f"{n} {stage}: {reason}" for (stage, reason), n in sorted(why.items(), key=lambda kv: (-kv[1], kv[0]))]
    return [f"refused {sum(why.values())} case(s) (skipped, not passed): " + "; ".join(parts)]
