"""Where a run's time went, from its results file (`pytest --k3diff --k3diff-report FILE`):

    python -m k3diff.tools.run_times FILE [FILE ...]            # one row per stage and preset
    python -m k3diff.tools.run_times FILE --need-full moe,mla,kda,layer

Per stage (its batch-invariance cases apart) and preset: cases judged, their seconds (the child's
whole check: weights, reference, compile on first use, candidate, comparisons), cases/s, the
slowest case and the share of the run's case time. The first case of each kernel set pays its
compile on a cold kernel cache, so `first` (the slowest of a stage's first three cases) against
`median` says how much of a cold run is compiling. --need-full: exit 1 when one of those stages
judged no case at K3's real dims (a run that forgot them). Exit 2: a file that is not a results file
(one line).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict


def read_cases(paths) -> list:
    out = []
    for path in paths:
        try:
            with open(path) as f:
                lines = [json.loads(line) for line in f if line.strip()]
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: not a k3diff results file ({exc})") from None
        out += [r for r in lines if isinstance(r, dict) and r.get("kind") == "case"]
    return out


def table(cases) -> list[str]:
    groups = defaultdict(list)
    for r in cases:
        preset = (r.get("coverage") or {}).get("preset") or (r.get("case") or {}).get("preset", "?")
        groups[(r["stage"], preset)].append(r)
    total = sum(r["seconds"] for r in cases) or 1.0
    lines = [f"{'stage':10} {'preset':6} {'cases':>5} {'seconds':>8} {'cases/s':>7} {'median':>7} "
             f"{'first':>7} {'share':>6}  slowest"]
    for (stage, preset), rs in sorted(groups.items()):
        secs = [r["seconds"] for r in rs]
        slow = max(rs, key=lambda r: r["seconds"])
        lines.append(f"{stage:10} {preset:6} {len(rs):5d} {sum(secs):8.1f} {len(rs) / max(sum(secs), 1e-9):7.2f} "
                     f"{statistics.median(secs):7.2f} {max(secs[:3]):7.2f} {sum(secs) / total:6.1%}  "
                     f"{slow['seconds']:.1f} s {slow.get('label', '')[:90]}")
    lines.append(f"all: {len(cases)} cases, {sum(r['seconds'] for r in cases):.1f} s of case time")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m k3diff.tools.run_times", description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="+")
    p.add_argument("--need-full", default="", metavar="STAGES",
                   help="comma-separated stages that must have judged a case at K3's real dims")
    args = p.parse_args(argv)
    try:
        cases = read_cases(args.files)
    except ValueError as exc:
        print(f"run_times: {exc}", file=sys.stderr)
        return 2
    for line in table(cases):
        print(line)
    judged = [r for r in cases if not r.get("skipped")]
    missing = [s for s in args.need_full.split(",") if s and not any(
        r["stage"] == s and (r.get("coverage") or {}).get("preset") == "full" for r in judged)]
    if missing:
        print(f"run_times: no case at K3's real dims judged in stage(s) {', '.join(missing)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
