"""The nightly's report job (.github/workflows/nightly.yml), as a script a CPU test can dry-run.

    python scripts/nightly_report.py SHARDS_DIR --expected NAMES [--seed N] [--previous DIR] [--out DIR] [--summary FILE]

NAMES: the shards the plan started, comma-separated (small-moe,full-moe,...), or a count N for
shards 1..N; N: the seed the plan gave every shard. Reads every shard's results under SHARDS_DIR
(results-NAME.jsonl, in any subfolder: one downloaded artifact each; the xdist workers' parts beside
them are read with them) and its pytest exit status: status-NAME.txt beside it (the workflow writes
it after pytest returns), else the results file's end record (k3diff.results.end_record). Writes
OUT/nightly-report.html, appends the run's table to SUMMARY (the job summary) and, with --previous
(the last successful night's results), OUT/compare.html and the new failures and largest
budget-share movements to SUMMARY. OUT/notify.txt: one line for the notification hook.

A shard passes only when it arrived once, ran the plan's seed, finished (its end record) and exited
0 or 1 having judged cases; every other shard fails the merge with one line naming it (stderr), and
the merge exits with the first status of EXIT that applies (the order below: the run's integrity
first, a candidate's failure last, so 1 still means only "a candidate failed").
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # a checkout without the install

from k3diff import exit_codes  # noqa: E402  (no torch: the report job installs k3diff without it)

# the merge's exit status, worst first: one number per way a nightly is not a pass. A shard's own
# k3diff status keeps its number (8 a backend that did not load, 9 an unreadable seed, 6 nothing
# judged, 11 not on that machine...: k3diff/exit_codes.py)
DUPLICATED = 12          # two artifacts hold the same shard: which one ran is unknown
OTHER_SEED = 13          # a shard ran another seed than the plan's (or than the other shards)
MISSING = 3              # a shard never arrived, or was cut short (no end record, no status)
BAD_INPUT = 2            # this script's own input (a results file it cannot read)
ORDER = (DUPLICATED, OTHER_SEED, BAD_INPUT, exit_codes.BACKEND, exit_codes.SEED, exit_codes.NOTHING_JUDGED,
         exit_codes.MACHINE, exit_codes.PATH, exit_codes.OUTPUT_LOST, exit_codes.USAGE, exit_codes.NO_TESTS,
         MISSING, exit_codes.FAIL)
# a shard's own status the merge passes on; any other (2 interrupted, a signal's 128+N) is MISSING
PASSED_ON = (exit_codes.BACKEND, exit_codes.SEED, exit_codes.NOTHING_JUDGED, exit_codes.MACHINE, exit_codes.PATH,
             exit_codes.OUTPUT_LOST, exit_codes.USAGE, exit_codes.NO_TESTS)
STATUS_FILE = "status-{}.txt"


def _names(expected: str) -> list[str]:
    return [str(i) for i in range(1, int(expected) + 1)] if expected.isdigit() else \
        [n for n in expected.split(",") if n]


def _shard_files(root: Path, names: list) -> dict:
    """name -> every results-NAME.jsonl under root (worker parts left to the loader)."""
    found = {n: [] for n in names}
    for p in sorted(root.rglob("results-*.jsonl")):
        name = p.name[len("results-"):-len(".jsonl")]
        if ".gw" not in p.name and name in found:
            found[name].append(p)
    return found


def _status_file(path: Path):
    """The shard's pytest exit status as the workflow saved it beside the results (None: absent)."""
    f = path.with_name(STATUS_FILE.format(path.name[len("results-"):-len(".jsonl")]))
    try:
        return int(f.read_text().strip())
    except (OSError, ValueError):
        return None


def _meaning(status) -> str:
    return exit_codes.MEANING.get(status, "killed or crashed" if status and status > 128 else "unknown")


class Problem:
    """One line naming a shard (or the run) and the merge's exit status for it."""

    def __init__(self, status: int, line: str):
        self.status, self.line = status, line


def check_shard(name: str, path: Path, loader) -> tuple[list, object]:
    """The problems of one shard's results file and its run (None where it cannot be read)."""
    try:
        run = loader.load_shard(path)
    except loader.ReportInputError as exc:
        return [Problem(BAD_INPUT, f"shard {name}: {exc}")], None
    saved = _status_file(path)
    end = next((e for e in run.ends if e.get("file") == str(path)), None)     # the shard's own, not a worker's
    status = saved if saved is not None else (end or {}).get("exitstatus")
    why = f" ({end['error']})" if end and end.get("error") else ""
    if not run.headers or run.headers[0].get("kind") != "run" or "seed" not in run.headers[0]:
        size = path.stat().st_size
        what = "is empty (0 bytes)" if size == 0 else "has no start record"
        line = f"shard {name}: its results file {what}: the run stopped before it started"
        return [Problem(status if status in PASSED_ON else MISSING,
                        line + (f"; pytest exit {status} ({_meaning(status)})" if status is not None else ""))], None
    if status is None:
        return [Problem(MISSING, f"shard {name}: cut short (no end record, no saved exit status): killed or still "
                                 f"running; {len(run.cases)} case(s) before that")], run
    out = []
    if status == exit_codes.BACKEND:
        out.append(Problem(status, f"shard {name}: its backend did not load (pytest exit 8){why}"))
    elif status == exit_codes.NOTHING_JUDGED:
        out.append(Problem(status, f"shard {name}: judged nothing (pytest exit 6){why}"))
    elif status == exit_codes.SEED:
        out.append(Problem(status, f"shard {name}: read a seed it cannot use (pytest exit 9){why}"))
    elif status not in (exit_codes.PASS, exit_codes.FAIL):
        out.append(Problem(status if status in PASSED_ON else MISSING,
                           f"shard {name}: pytest exit {status} ({_meaning(status)}){why}"))
    elif not run.cases:
        out.append(Problem(exit_codes.NOTHING_JUDGED, f"shard {name}: judged nothing (no case in its results, "
                                                      f"pytest exit {status})"))
    elif end is None:
        out.append(Problem(MISSING, f"shard {name}: cut short (no end record; pytest exit {status}): its results "
                                    "file lost the rest of the run"))
    if run.truncated and end is not None:
        out.append(Problem(MISSING, f"shard {name}: {len(run.truncated)} worker part(s) cut short (no end record): "
                                    + ", ".join(Path(f).name for f in run.truncated)))
    return out, run


def check_seeds(runs: dict, seed) -> list:
    """A shard that ran another seed than the plan's (given), or than most shards (not given)."""
    seeds = {name: run.headers[0].get("seed") for name, run in runs.items()}
    if seed is None:
        common = Counter(seeds.values()).most_common()
        if len(common) < 2:
            return []
        seed = common[0][0]
    return [Problem(OTHER_SEED, f"shard {name}: ran seed {s}, not the run's seed {seed}")
            for name, s in seeds.items() if str(s) != str(seed)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="nightly_report.py")
    p.add_argument("shards", type=Path)
    p.add_argument("--expected", required=True, help="the shards the plan started: NAME,NAME or a count")
    p.add_argument("--seed", default=None, help="the seed the plan gave every shard")
    p.add_argument("--previous", type=Path, default=None, help="the previous successful night's results")
    p.add_argument("--out", type=Path, default=Path("."))
    p.add_argument("--summary", type=Path, default=None, help="markdown appended here ($GITHUB_STEP_SUMMARY)")
    args = p.parse_args(argv)

    from k3diff.report import load as loader
    from k3diff.report import header
    from k3diff.report.compare import compare, compare_report, markdown
    from k3diff.report.failures import distinct
    from k3diff.report.html import run_report

    names = _names(args.expected)
    problems, lines = [], []
    if not args.shards.is_dir():
        print(f"nightly_report: {args.shards}: no such folder (no shard artifact was downloaded)", file=sys.stderr)
        found = {n: [] for n in names}
    else:
        found = _shard_files(args.shards, names)
    missing = [n for n in names if not found[n]]
    if missing:
        problems.append(Problem(MISSING, f"shard(s) {', '.join(missing)} of {len(names)} missing (no results file)"))
    runs, files = {}, []
    for name in names:
        if len(found[name]) > 1:
            problems.append(Problem(DUPLICATED, f"shard {name}: {len(found[name])} artifacts hold it ("
                                                + ", ".join(str(f.relative_to(args.shards)) for f in found[name])
                                                + "): which one ran is unknown"))
            continue
        if found[name]:
            shard_problems, run = check_shard(name, found[name][0], loader)
            problems += shard_problems
            if run is not None:
                runs[name] = run
                files.append(found[name][0])
    problems += check_seeds(runs, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    run = None
    if any(r.cases for r in runs.values()):
        run = loader.merge(runs.values())
        (args.out / "nightly-report.html").write_text(run_report(run, title="k3diff nightly"))
        lines.append(header.markdown(run))
        fails = len(distinct(run))
        if fails:
            problems.append(Problem(exit_codes.FAIL, f"{fails} distinct failing case(s)"))
        if args.previous is not None:
            try:
                base = loader.load([args.previous])
            except loader.ReportInputError as exc:
                lines.append(f"no comparison with the previous night: {exc}\n")
            else:
                cmp = compare(base, run)
                (args.out / "compare.html").write_text(compare_report(cmp, base, run))
                lines.append(markdown(cmp))
                if cmp.new_failures:
                    problems.append(Problem(exit_codes.FAIL, f"{len(cmp.new_failures)} case(s) newly failing "
                                                             "since the previous night"))
    elif not problems:
        problems.append(Problem(exit_codes.NOTHING_JUDGED, "no shard judged any case"))
    for pr in problems:
        if pr.status != exit_codes.FAIL:
            print(f"nightly_report: {pr.line}", file=sys.stderr)
    status = min((pr.status for pr in problems), key=ORDER.index, default=0) if problems else 0
    verdict = "FAIL" if status else "pass"
    head = f"k3diff nightly: {verdict}" + (": " + "; ".join(pr.line for pr in problems) if problems else "")
    lines.insert(0, f"### {head}\n")
    (args.out / "notify.txt").write_text(head + "\n")
    if args.summary:
        with open(args.summary, "a") as fh:
            fh.write("\n".join(lines) + "\n")
    print(head)
    return status


if __name__ == "__main__":
    sys.exit(main())
