"""`k3diff report`: the reviewer's evidence from results files (`pytest --k3diff --k3diff-report FILE`).

    k3diff report RESULTS... [-o report.html] [--markdown FILE]   one run, or the merge of shard files
    k3diff report --compare BASE NEW [-o compare.html]             the same cases for two candidates/commits

Modules, one job each: load (read and merge, worker parts, cut-short files), tables (the numbers),
failures (distinct failures, shrink steps folded), plots (SVG figures, clipped axes), html (the page:
verdict banner first), compare (BASE vs NEW, matched by case). Exit status: 0 ok, 1 NEW has new failures (--compare: on a matched
case, or on a case BASE did not run), 6 nothing compared (--compare: no case matched), 2 bad input
(one line on stderr).
"""
from __future__ import annotations

import sys


def add_arguments(p) -> None:
    p.add_argument("results", nargs="*", metavar="RESULTS",
                   help="results files (JSON lines) or folders of *.jsonl: one run or its shards")
    p.add_argument("--compare", nargs=2, metavar=("BASE", "NEW"),
                   help="compare two runs of the same cases (each a file or a folder of shard files)")
    p.add_argument("-o", "--output", default=None, help="HTML file (default report.html / compare.html)")
    p.add_argument("--markdown", default=None, metavar="FILE",
                   help="also append the per-stage table (--compare: new failures and largest movements) as "
                        "markdown to FILE (e.g. $GITHUB_STEP_SUMMARY)")


def _write(path, text, mode="w") -> None:
    try:
        with open(path, mode) as fh:
            fh.write(text)
    except OSError as exc:
        from k3diff.report.load import ReportInputError

        raise ReportInputError(f"{path}: cannot write ({exc.strerror or exc})") from None


def run(args) -> int:
    from k3diff.report import load as loader
    from k3diff.report import tables

    try:
        if args.compare:
            if args.results:
                raise loader.ReportInputError("give either RESULTS... or --compare BASE NEW, not both")
            from k3diff.report.compare import compare, compare_report, headline, status, text

            base, new = (loader.load([p]) for p in args.compare)
            cmp = compare(base, new)
            out = args.output or "compare.html"
            _write(out, compare_report(cmp, base, new))
            if args.markdown:
                from k3diff.report.compare import markdown as compare_markdown

                _write(args.markdown, compare_markdown(cmp), "a")
            print(text(cmp))
            print(f"wrote {out}")
            for line in headline(cmp):          # on stderr too: a CI log shows it beside the exit status
                print(f"k3diff report: {line}", file=sys.stderr)
            return status(cmp)
        if not args.results:
            raise loader.ReportInputError("no results file given (k3diff report RESULTS... or --compare BASE NEW)")
        from k3diff.report.html import run_report

        merged = loader.load(args.results)
        for w in merged.warnings:
            print(w, file=sys.stderr)
        out = args.output or "report.html"
        _write(out, run_report(merged))
        if args.markdown:
            _write(args.markdown, tables.markdown(merged), "a")
        from k3diff.report.failures import distinct

        fails = len(distinct(merged))
        print(f"{'FAIL' if fails else 'pass'}: {len(tables.judged(merged.cases))} cases from {len(merged.files)} "
              f"file(s), {fails} distinct failing case(s); wrote {out}")
        return 0
    except loader.ReportInputError as exc:
        print(f"k3diff report: {exc}", file=sys.stderr)
        return 2
