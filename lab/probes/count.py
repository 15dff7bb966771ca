"""Count the cases of k3diff results files as the report does (k3diff.report.tables.judged: each case
once, shrink steps and skipped cases left out): per file and stage, cases, at full dims, failed (a
tensor or the routing), crashed; skipped apart; the run's end record if it has one; then, per stage
and preset, the mean seconds of a case in each phase (records with `phases`: runner.PhaseClock);
last, per stage and preset, the largest L2 ratio of a passing case's bf16 tensor (`l2`:
k3diff.divergence.TensorReport.l2_ratio, judged by the whole-tensor rule at one-step cases and step 0) with its tensor."""
import json
import sys
from collections import defaultdict

from k3diff.report.tables import judged

for path in sys.argv[1:]:
    records, end = [], None
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("kind") == "end":
                end = r
            elif r.get("kind") == "case":
                records.append(r)
    rows = defaultdict(lambda: [0, 0, 0, 0])
    phases = defaultdict(lambda: defaultdict(float))
    counted = defaultdict(int)
    l2 = {}
    for r in judged(records):
        for t in r.get("tensors", ()) if r["ok"] else ():
            key = (r["stage"], r["case"].get("preset"))
            if t.get("l2") is not None and t["l2"] > l2.get(key, (0.0, ""))[0]:
                l2[key] = (t["l2"], t["tensor"])
        if r.get("phases"):
            key = (r["stage"], r["case"].get("preset"))
            counted[key] += 1
            for k, v in r["phases"].items():
                phases[key][k] += v
        row = rows[r["stage"]]
        row[0] += 1
        row[1] += r["case"].get("preset") == "full"
        row[2] += not r["ok"] and not r.get("error")
        row[3] += bool(r.get("error"))
    total = [sum(v[i] for v in rows.values()) for i in range(4)]
    skipped = sum(bool(r.get("skipped")) for r in records)
    print(f"{path}: cases {total[0]}, full dims {total[1]}, failed {total[2]}, crashed {total[3]}, "
          f"skipped {skipped}; end: {end and {k: end[k] for k in ('exitstatus', 'seconds', 'cases')}}")
    for stage, v in sorted(rows.items()):
        print(f"  {stage:10s} cases {v[0]:5d}  full {v[1]:5d}  failed {v[2]}  crashed {v[3]}")
    for key in sorted(counted):
        n = counted[key]
        print(f"  {key[0]:10s} {key[1]:5s} {n:5d} cases, mean s: " +
              " ".join(f"{k} {v / n:.3f}" for k, v in phases[key].items()))
    for key in sorted(l2):
        print(f"  {key[0]:10s} {key[1]:5s} largest L2 ratio of a passing bf16 tensor {l2[key][0]:.2f} ({l2[key][1]})")
