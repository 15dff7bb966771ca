"""Count the case records of k3diff results files: per file and stage, cases judged, at full dims,
failed (tensor or routing), crashed, skipped; the run's end record if it has one."""
import json
import sys
from collections import defaultdict

for path in sys.argv[1:]:
    rows, end = defaultdict(lambda: [0, 0, 0, 0, 0]), None
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("kind") == "end":
                end = r
            if r.get("kind") != "case":
                continue
            row = rows[r["stage"] + ("-inv" if str(r.get("phase", "")).endswith("-inv") else "")]
            row[0] += 1
            row[1] += r["case"].get("preset") == "full"
            row[2] += not r["ok"] and not r.get("skipped") and not r.get("error")
            row[3] += bool(r.get("error"))
            row[4] += bool(r.get("skipped"))
    total = [sum(v[i] for v in rows.values()) for i in range(5)]
    print(f"{path}: cases {total[0]}, full dims {total[1]}, failed {total[2]}, crashed {total[3]}, "
          f"skipped {total[4]}; end: {end and {k: end[k] for k in ('exitstatus', 'seconds', 'cases')}}")
    for stage, v in sorted(rows.items()):
        print(f"  {stage:10s} cases {v[0]:5d}  full {v[1]:5d}  failed {v[2]}  crashed {v[3]}  skipped {v[4]}")
