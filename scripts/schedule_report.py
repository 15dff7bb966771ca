"""One line on a k3diff report (--k3diff-report JSONL) of a run under a schedule setting, for
scripts/gpu_schedule_check.sh: cases judged by schedule, failures, and cases/s both of judging
time and of the run's wall time (start-up and compiles included; a run cut by its time limit keeps
the cases it wrote).

    python scripts/schedule_report.py REPORT.jsonl T0 T1 NAME
"""
from __future__ import annotations

import collections
import json
import sys


def summary(rows: list, wall: float, name: str) -> list[str]:
    rows = [r for r in rows if r.get("kind") == "case"]
    judged = [r for r in rows if not r.get("skipped")]
    by = collections.Counter((r.get("case") or {}).get("schedule", "") or "eager" for r in judged)
    bad = [r for r in judged if r.get("ok") is False]
    busy = sum(r.get("seconds") or 0 for r in judged)
    lines = [f"{name}: {len(judged)} cases judged ({len(rows) - len(judged)} refused), by schedule "
             f"{dict(sorted(by.items()))}, {len(bad)} failing; {len(judged) / max(busy, 1e-9):.2f} cases/s "
             f"of judging time, {len(judged) / max(wall, 1e-9):.2f} cases/s of wall time ({wall:.0f} s)"]
    lines += [f"  FAIL {r.get('label')} | {str(r.get('failure'))[:160]}" for r in bad[:5]]
    return lines


def main(argv) -> int:
    path, t0, t1, name = argv
    try:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except OSError:
        rows = []
    print("\n".join(summary(rows, float(t1) - float(t0), name)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
