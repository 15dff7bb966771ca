"""Re-record the verdicts of the shipped regression seeds under the current rules.

    PYTHONPATH=$PWD python scripts/rerecord_regressions.py [--check]

Loads every seed in corpora/regressions/, runs `check_case` with the seed's backend (torch-blocked) on the
CPU, and rewrites the seed through `k3diff.corpus.save` (same file name: it is the case's id) with
the verdict now reached. Every regression seed must pass on its correct backend: the script exits 1,
naming the seed, if one does not (then fix the cause, do not record a failing verdict). --check
only reports which recorded verdicts differ from the current ones.
"""
import json
import sys
from pathlib import Path

from k3diff import backends
from k3diff.corpus import load, save, seed_files
from k3diff.runner import check_case
from k3diff.tools.throughput import agreement

HERE = Path(__file__).resolve().parents[1] / "corpora" / "regressions"


def main(argv) -> int:
    check_only = "--check" in argv
    bad = 0
    for path in seed_files(HERE):
        case, record = load(path)
        name = record.get("backend") or "torch-blocked"
        verdict = check_case(case, backends.load(name))
        now = verdict.to_dict()
        how = agreement(json.loads(json.dumps(record.get("verdict"))), json.loads(json.dumps(now)))
        same = how == "bitwise"
        print(f"{path.name}: {'pass' if verdict.ok else 'FAIL'} on {name}; recorded verdict "
              + {"bitwise": "unchanged", "same": "the same, numbers within 1e-9 (float64 last bits)",
                 "DIFFERENT": "differs"}[how])
        if not verdict.ok:
            bad += 1
            for line in verdict.failures():
                print("  " + line)
            continue
        if not check_only and not same:
            written = save(case, now, Path("corpora/regressions"), name)
            assert written.name == path.name, (written, path)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
