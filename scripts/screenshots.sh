#!/usr/bin/env bash
# The report's screenshots, from results files, in headless Chromium:
#   scripts/screenshots.sh PASSING.jsonl BROKEN.jsonl OUTDIR [TERMINAL.txt]
# writes OUTDIR/report-pass.png, report-broken.png, compare.png (PASSING as BASE, BROKEN as NEW: run
# both with one --k3diff-seed so the cases match) and progress.png (the progress lines the broken
# run showed, replayed from its results file by `python -m k3diff.progress`), and the HTML pages;
# with TERMINAL.txt (a live run's `tmux capture-pane -p`), also progress-terminal.png of it.
#   scripts/screenshots.sh --header RESULTS OUT.png
# writes OUT.png, the top of RESULTS's report page (the verdict, what was judged: candidate, device,
# GPU, preset, profile, seed, budget table, the command; the near-edge lines), and OUT.html beside
# it. RESULTS is any results file or folder (a CPU torch-blocked run, a GPU megakernel run...).
# Chromium: $CHROMIUM, else chromium / chromium-browser / google-chrome on PATH.
set -euo pipefail
usage="usage: $0 PASSING.jsonl BROKEN.jsonl OUTDIR [TERMINAL.txt]  |  $0 --header RESULTS OUT.png"
if [ "${1:-}" = --header ]; then
  [ $# -eq 3 ] || { echo "$usage" >&2; exit 2; }
  [ -e "$2" ] || { echo "$0: $2: no such results file" >&2; exit 2; }
elif [ $# -lt 3 ] || [ $# -gt 4 ]; then echo "$usage" >&2; exit 2; fi
browser=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
[ -n "$browser" ] || { echo "$0: no chromium (apt-get install chromium, or set CHROMIUM)" >&2; exit 3; }
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
shot() {   # HTML PNG WIDTH HEIGHT
  "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" \
    --window-size="$3,$4" --screenshot="$2" "file://$(realpath "$1")" >/dev/null 2>&1
  [ -s "$2" ] || { echo "$0: chromium wrote no $2" >&2; exit 1; }
  echo "wrote $2"
}
py=${PYTHON:-python3}
if [ "$1" = --header ]; then
  png=$3 html=${3%.png}.html
  mkdir -p "$(dirname "$png")"
  # the page's verdict is k3diff report's status: 0 PASS, 1 FAIL, 12 INCOMPLETE all draw a page;
  # anything else (2: a file it cannot read) has said why on stderr
  rc=0; "$py" -m k3diff.cli report "$2" -o "$html" || rc=$?
  case $rc in 0|1|12) ;; *) exit "$rc" ;; esac
  shot "$html" "$png" 1200 900
  exit 0
fi
pass=$1 broken=$2 out=$3 term=${4:-}
for f in "$pass" "$broken"; do [ -e "$f" ] || { echo "$0: $f: no such results file" >&2; exit 2; }; done
mkdir -p "$out"
"$py" -m k3diff.cli report "$pass" -o "$out/report-pass.html" >/dev/null
"$py" -m k3diff.cli report "$broken" -o "$out/report-broken.html" >/dev/null
"$py" -m k3diff.cli report --compare "$pass" "$broken" -o "$out/compare.html" >/dev/null || true   # 1: new failures
shot "$out/report-pass.html" "$out/report-pass.png" 1200 1500
shot "$out/report-broken.html" "$out/report-broken.png" 1200 1500
shot "$out/compare.html" "$out/compare.png" 1200 1300
# the progress line: the lines a terminal showed half-way through the broken run, on a dark terminal
terminal() {   # TEXT HTML: a dark terminal page of TEXT
  "$py" - "$2" "$1" <<'PY'
import html, sys
open(sys.argv[1], "w").write(
    "<!DOCTYPE html><html><body style='margin:0;background:#1e1e1e'><pre style='color:#d4d4d4;"
    "font:14px DejaVu Sans Mono,monospace;padding:12px;margin:0'>" + html.escape(sys.argv[2]) + "</pre></body></html>\n")
PY
}
terminal "$ pytest --k3diff ...   (progress replayed half-way through, from $(basename "$broken"))
$("$py" -m k3diff.progress "$broken" --at 50%)" "$out/progress.html"
shot "$out/progress.html" "$out/progress.png" 1000 200
if [ -n "$term" ]; then
  terminal "$(cat "$term")" "$out/progress-terminal.html"
  shot "$out/progress-terminal.html" "$out/progress-terminal.png" 1000 260
fi
