"""`k3diff report`: the reviewer's evidence from results files (`pytest --k3diff --k3diff-report FILE`).

    k3diff report RESULTS... [-o report.html] [--markdown FILE]   one run, or the merge of shard files
    k3diff report --compare BASE NEW [-o compare.html]             the same cases for two candidates/commits

Modules, one job each: load (read and merge, worker parts, cut-short files), tables (the numbers),
failures (distinct failures, shrink steps folded), plots (SVG figures, clipped axes), html (the page:
verdict banner first), header (what was judged), verdict (the run's verdict and its exit status),
schema (the fields a results line may hold, and their types), compare (BASE vs NEW, matched by case).

Exit status (k3diff/exit_codes.py): `k3diff report` exits with the page's verdict: 0 PASS, 1 FAIL,
12 INCOMPLETE (a file cut short). `--compare`: 1 NEW fails where BASE did not (on a matched case,
or on a case BASE did not run), 6 nothing compared (no case matched), 12 a coverage drop (cases,
boundaries crossed or expert-id ranges routed in BASE and not in NEW) or another budget table,
else 0. 2 a results file or output path it cannot use (one line on stderr: results files are
data, k3diff/report/load.py).
"""
from __future__ import annotations

import errno
import os
import stat
import sys

# a results file or output path k3diff report cannot use (one line on stderr); older than the one
# table's numbers and documented in docs/guide.md, where 2 is otherwise pytest's Ctrl-C
BAD_INPUT = 2


def add_arguments(p) -> None:
    p.add_argument("results", nargs="*", metavar="RESULTS",
                   help="results files (JSON lines) or folders of *.jsonl: one run or its shards")
    p.add_argument("--compare", nargs=2, metavar=("BASE", "NEW"),
                   help="compare two runs of the same cases (each a file or a folder of shard files)")
    p.add_argument("-o", "--output", default=None, help="HTML file (default report.html / compare.html)")
    p.add_argument("--markdown", default=None, metavar="FILE",
                   help="also append the per-stage table (--compare: new failures and largest movements) as "
                        "markdown to FILE (e.g. $GITHUB_STEP_SUMMARY; - for standard output)")


def _write(path, text, mode="w") -> None:
    """Write the page (or append the markdown), refusing anything but a regular file: opening a FIFO
    would wait for a reader forever, and a device (/dev/zero) would swallow the page while the
    command says it wrote it. O_NONBLOCK makes opening a FIFO fail or return at once."""
    from k3diff.report.load import ReportInputError

    if path == "-":                                 # standard output, as the command's own output
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | (os.O_APPEND if mode == "a" else 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ENXIO:                # a FIFO with no reader
            raise ReportInputError(f"{path}: not a regular file (a FIFO, device or socket): refused") from None
        raise ReportInputError(f"{path}: cannot write ({exc.strerror or exc})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ReportInputError(f"{path}: not a regular file (a FIFO, device or socket): refused")
        os.set_blocking(fd, True)
        if mode != "a":
            os.ftruncate(fd, 0)
        with os.fdopen(fd, "w", encoding="utf-8", closefd=False) as fh:
            fh.write(text)
    except OSError as exc:
        raise ReportInputError(f"{path}: cannot write ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def run(args) -> int:
    from k3diff.report import load as loader
    from k3diff.report import header, tables

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
        from k3diff.report.verdict import STATUS, WORDS, verdict

        merged = loader.load(args.results)
        from k3diff.report.verdict import not_whole

        for w in merged.warnings + [f"warning: {why}: its evidence is not whole" for why in not_whole(merged)]:
            print(w, file=sys.stderr)
        out = args.output or "report.html"
        _write(out, run_report(merged))
        if args.markdown:
            _write(args.markdown, header.markdown(merged), "a")
        from k3diff.report.failures import distinct

        fails = distinct(merged)
        state = verdict(merged, fails)              # the page's verdict, word for word
        print(f"{WORDS[state]}: {len(tables.judged(merged.cases))} cases from {len(merged.files)} file(s), "
              f"{len(fails)} distinct failing case(s)"
              + (f", {len(merged.truncated)} file(s) cut short" if merged.truncated else "") + f"; wrote {out}")
        return STATUS[state]
    except loader.ReportInputError as exc:
        print(f"k3diff report: {exc}", file=sys.stderr)
        return BAD_INPUT
    except (TypeError, KeyError, ValueError, AttributeError, IndexError, RecursionError) as exc:
        # a results line whose shape k3diff/report/schema.py does not pin down tripped a table: the
        # files are data, so it is a bad input's one line, never a traceback
        print(f"k3diff report: {', '.join(map(str, args.compare or args.results))}: a results line of a shape "
              f"the report cannot use ({type(exc).__name__}: {str(exc)[:200]})", file=sys.stderr)
        return BAD_INPUT
