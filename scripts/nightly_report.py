"""The nightly's report job (.github/workflows/nightly.yml), as a script a CPU test can dry-run.

    python scripts/nightly_report.py SHARDS_DIR --expected NAMES [--previous DIR] [--out DIR] [--summary FILE]

NAMES: the shards the plan started, comma-separated (small-moe,full-moe,...), or a count N for
shards 1..N. Reads every shard's results under SHARDS_DIR (results-NAME.jsonl, in any subfolder: one
downloaded artifact each; the xdist workers' parts beside them are read with them), writes OUT/nightly-report.html, appends the run's table to SUMMARY (the
job summary) and, with --previous (the last successful night's results), OUT/compare.html and the
new failures and largest budget-share movements to SUMMARY. OUT/notify.txt: one line for the
notification hook.

Exit status, worst first: 3 a shard is missing or was cut short (no end record), 1 a case failed
or a case newly fails against the previous night, 0 all shards complete and passing; 2 bad input.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # a checkout without the install


def _names(expected: str) -> list[str]:
    return [str(i) for i in range(1, int(expected) + 1)] if expected.isdigit() else \
        [n for n in expected.split(",") if n]


def _shard_files(root: Path, names: list) -> tuple[list, list]:
    found = {p.name: p for p in sorted(root.rglob("results-*.jsonl")) if ".gw" not in p.name}
    files = [found[f"results-{n}.jsonl"] for n in names if f"results-{n}.jsonl" in found]
    missing = [n for n in names if f"results-{n}.jsonl" not in found]
    return files, missing


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="nightly_report.py")
    p.add_argument("shards", type=Path)
    p.add_argument("--expected", required=True, help="the shards the plan started: NAME,NAME or a count")
    p.add_argument("--previous", type=Path, default=None, help="the previous successful night's results")
    p.add_argument("--out", type=Path, default=Path("."))
    p.add_argument("--summary", type=Path, default=None, help="markdown appended here ($GITHUB_STEP_SUMMARY)")
    args = p.parse_args(argv)

    from k3diff.report import tables
    from k3diff.report.compare import compare, compare_report, markdown
    from k3diff.report.failures import distinct
    from k3diff.report.html import run_report
    from k3diff.report.load import ReportInputError, load

    problems, lines = [], []
    if not args.shards.is_dir():
        print(f"nightly_report: {args.shards}: no such folder (no shard artifact was downloaded)", file=sys.stderr)
        files, missing = [], _names(args.expected)
    else:
        files, missing = _shard_files(args.shards, _names(args.expected))
    if missing:
        problems.append(f"shard(s) {', '.join(missing)} of {len(_names(args.expected))} missing (no results file)")
    args.out.mkdir(parents=True, exist_ok=True)
    status = 0
    run = None
    if files:
        try:
            run = load(files)
        except ReportInputError as exc:
            print(f"nightly_report: {exc}", file=sys.stderr)
            return 2
        (args.out / "nightly-report.html").write_text(run_report(run, title="k3diff nightly"))
        lines.append(tables.markdown(run))
        if run.truncated:
            problems.append(f"{len(run.truncated)} results file(s) cut short (no end record): "
                            + ", ".join(Path(f).name for f in run.truncated))
        fails = len(distinct(run))
        if fails:
            status = 1
            problems.append(f"{fails} distinct failing case(s)")
        if args.previous is not None:
            try:
                base = load([args.previous])
            except ReportInputError as exc:
                lines.append(f"no comparison with the previous night: {exc}\n")
            else:
                cmp = compare(base, run)
                (args.out / "compare.html").write_text(compare_report(cmp, base, run))
                lines.append(markdown(cmp))
                if cmp.new_failures:
                    status = 1
                    problems.append(f"{len(cmp.new_failures)} case(s) newly failing since the previous night")
    if missing or (run is not None and run.truncated) or run is None:
        status = 3
    verdict = "FAIL" if status else "pass"
    head = f"k3diff nightly: {verdict}" + (": " + "; ".join(problems) if problems else "")
    lines.insert(0, f"### {head}\n")
    (args.out / "notify.txt").write_text(head + "\n")
    if args.summary:
        with open(args.summary, "a") as fh:
            fh.write("\n".join(lines) + "\n")
    print(head)
    return status


if __name__ == "__main__":
    sys.exit(main())
