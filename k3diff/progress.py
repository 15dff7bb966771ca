"""The progress line of a long run: the whole run's cases judged of its budget, cases/s, failures
so far and ETA, with the stage under way; per stage the same. On a terminal one live line (redrawn
at most twice a second); on a CI log (not a terminal) or under xdist one line a minute; off with -q.
Fed with case records (k3diff/results.py) as they are judged: in this process, or under xdist by
tailing the parts the workers stream (`Tail`), so a 250-example invariance item is not silent for
14 minutes.

Drawn through pytest's public terminal API only (`TerminalLine`): the live line is a line of its
own, redrawn in place (`TerminalReporter.rewrite`) only while nothing else has been written after
it, and ended before pytest writes an item's result, so pytest's dots, its [ NN%] and any other
plugin's output are never overwritten.

    python -m k3diff.progress RESULTS.jsonl [--at SECONDS]   the line(s) a run showed at a moment
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

from k3diff.report.load import ReportInputError, load
from k3diff.results import worker_path

LOG_INTERVAL = 60.0          # seconds between lines on a CI log
TTY_INTERVAL = 0.5
# a live line left behind by pytest's output (an item's result) is opened again below it at most
# this often: a run of quick items gets a line now and then, not one line under every dot
REOPEN_INTERVAL = 10.0


def _eta(seconds) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    return f"{seconds} s" if seconds < 90 else f"{seconds // 60} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


class Stage:
    def __init__(self, budget: int):
        self.budget, self.judged, self.shrink, self.failing, self.first, self.last = budget, 0, 0, 0, None, None

    def add(self, record, at: float) -> None:
        self.first = at if self.first is None else self.first
        self.last = at
        if record.get("phase") == "shrink":
            self.shrink += 1
        else:
            self.judged += 1
        if not record.get("ok") and not record.get("skipped") and record.get("phase") != "shrink":
            self.failing += 1

    def line(self, name: str, now: float) -> str:
        spent = max(1e-9, (now if now else self.last) - self.first) if self.first is not None else None
        rate = self.judged / spent if spent and self.judged > 1 else None
        left = max(0, self.budget - self.judged)
        budget = f"/{self.budget}" if self.budget else ""
        pct = f" ({100 * self.judged // self.budget}%)" if self.budget else ""
        shrink = f", shrinking ({self.shrink} steps)" if self.shrink else ""
        return (f"k3diff {name}: {self.judged}{budget} cases{pct}, "
                f"{'%.2f' % rate if rate else '-'} cases/s, {self.failing} failing{shrink}, "
                f"ETA {_eta(left / rate) if rate and self.budget else '?'}")


class Progress:
    """write(text, newline: bool) draws; tty picks the live line or one line a minute."""

    def __init__(self, budgets: dict, write, tty: bool, interval: float | None = None, clock=time.time):
        self.stages = {name: Stage(n) for name, n in budgets.items()}
        self.write, self.tty, self.clock = write, tty, clock
        self.interval = interval if interval is not None else (TTY_INTERVAL if tty else LOG_INTERVAL)
        self.lock = threading.Lock()
        self._drawn = {}
        self._current = None

    def add(self, record, at: float | None = None) -> None:
        with self.lock:
            now = self.clock() if at is None else at
            name = record.get("stage", "?") if record.get("phase") != "replay" else "replay"
            stage = self.stages.setdefault(name, Stage(0))
            stage.add(record, now)
            self._maybe_draw(name, now)

    def _maybe_draw(self, name, now) -> None:
        last = self._drawn.get("*")
        if last is not None and now - last < self.interval:
            return
        self._drawn["*"] = now
        self.write(self.run_line(now, name), not self.tty)

    def run_line(self, now: float | None = None, current: str | None = None) -> str:
        """The whole run: cases judged of the whole budget, its rate since the first case, failures,
        the run's ETA; then the stage under way (`current`) in short."""
        budget = sum(s.budget for s in self.stages.values())
        judged = sum(s.judged for s in self.stages.values())
        counted = sum(min(s.judged, s.budget) for s in self.stages.values() if s.budget)
        failing = sum(s.failing for s in self.stages.values())
        firsts = [s.first for s in self.stages.values() if s.first is not None]
        lasts = [s.last for s in self.stages.values() if s.last is not None]
        spent = max(1e-9, (now if now else max(lasts)) - min(firsts)) if firsts else None
        rate = judged / spent if spent and judged > 1 else None
        of = f"/{budget}" if budget else ""
        pct = f" ({100 * counted // budget}%)" if budget else ""
        eta = _eta(max(0, budget - counted) / rate) if rate and budget else "?"
        stage = self.stages.get(current)
        now_at = (f"; now {current} {stage.judged}{f'/{stage.budget}' if stage.budget else ''}"
                  f"{f', shrinking ({stage.shrink} steps)' if stage.shrink else ''}") if stage else ""
        return (f"k3diff: {judged}{of} cases{pct}, {'%.2f' % rate if rate else '-'} cases/s, "
                f"{failing} failing, run ETA {eta}{now_at}")

    def lines(self, now: float | None = None) -> list[str]:
        return [s.line(n, now) for n, s in self.stages.items() if s.judged or s.shrink]


class TerminalLine:
    """`Progress.write` on pytest's terminal, through its public API only (TerminalReporter.write,
    write_line, rewrite, ensure_newline; the writer's width_of_current_line). Live: the text on a
    line of its own, redrawn in place while that line is still the last thing on the terminal (the
    writer's current line is exactly as wide as we left it), else opened anew below whatever came
    since (at most every REOPEN_INTERVAL s); `end()` before pytest writes an item's result. Not
    live: a whole line each time. Cases are judged inside a test's call, while pytest captures the
    output: drawn with capturing suspended, as pytest's live logging does."""

    def __init__(self, reporter, live: bool, capture=None, clock=time.monotonic, reopen=REOPEN_INTERVAL):
        self.tr, self.live, self.capture, self.clock, self.reopen = reporter, live, capture, clock, reopen
        self.tw = reporter.config.get_terminal_writer()
        self.lock = threading.RLock()
        self._width = None          # the width of our line while it is the terminal's last, else None
        self._opened = None

    def __call__(self, text: str, newline: bool) -> None:
        with self.lock, self._uncaptured():
            if not self.live or newline:
                self._own_line()
                self.tr.write_line(text)
                return
            text = text[:max(20, self.tw.fullwidth - 1)]        # a wrapped line cannot be redrawn
            if self._width is not None and self.tw.width_of_current_line == self._width:
                self.tr.rewrite(text, erase=True)
            elif self._opened is None or self.clock() - self._opened >= self.reopen:
                self._own_line()
                self.tr.write(text)
                self._opened = self.clock()
            else:
                return
            self.tr.flush()
            self._width = self.tw.width_of_current_line

    def end(self) -> None:
        """Our live line ends here: whatever pytest writes next starts below it."""
        with self.lock:
            if self._width is not None and self.tw.width_of_current_line == self._width:
                with self._uncaptured():
                    self.tr.write("\n", flush=True)
            self._width = None

    def _own_line(self) -> None:
        """Start at the beginning of a fresh line: pytest's own line (its path and dots) ended, not
        overwritten."""
        self.tr.ensure_newline()
        if self.tw.width_of_current_line:
            self.tr.write("\n")

    def _uncaptured(self):
        from contextlib import nullcontext

        return nullcontext() if self.capture is None else self.capture.global_and_fixture_disabled()


class Tail(threading.Thread):
    """Feeds Progress from the parts xdist workers stream beside FILE (new lines every `every` s)."""

    def __init__(self, path, progress: Progress, every: float = 2.0):
        super().__init__(daemon=True, name="k3diff-progress")

        self.pattern = worker_path(path, "gw*").name
        self.folder, self.progress, self.every = Path(path).parent, progress, every
        self.offsets, self.stop = {}, threading.Event()

    def poll(self) -> None:
        for part in sorted(self.folder.glob(self.pattern)):
            try:
                with open(part) as fh:
                    fh.seek(self.offsets.get(part, 0))
                    chunk = fh.read()
            except OSError:
                continue
            done = chunk[:chunk.rfind("\n") + 1]         # a line still being written waits
            self.offsets[part] = self.offsets.get(part, 0) + len(done.encode())
            for line in done.splitlines():
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if obj.get("kind") == "case":
                    self.progress.add(obj)

    def run(self) -> None:
        while not self.stop.wait(self.every):
            self.poll()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m k3diff.progress",
                                description="the progress lines a run showed, replayed from its results file")
    p.add_argument("results")
    p.add_argument("--at", default=None, help="seconds after the first case, or a share of the run such as 50%% "
                                               "(default: the end)")
    args = p.parse_args(argv)

    try:
        run = load([args.results])                       # with the xdist parts it names
        raw = [json.loads(x) for x in Path(args.results).read_text().splitlines() if x.strip()]
    except (ReportInputError, OSError, json.JSONDecodeError) as exc:
        print(f"k3diff progress: {args.results}: not a results file ({exc})", file=sys.stderr)
        return 2
    cases = sorted((r for r in run.cases if r.get("judged_at")), key=lambda r: r["judged_at"])
    budgets = next((r.get("budgets") or {} for r in raw if r.get("kind") == "budgets"), {})
    if not cases:
        print(f"k3diff progress: {args.results}: no timed case", file=sys.stderr)
        return 2
    t0, t1 = cases[0]["judged_at"], cases[-1]["judged_at"]
    try:
        at = None if args.at is None else (
            float(args.at[:-1]) / 100 * (t1 - t0) if args.at.endswith("%") else float(args.at))
    except ValueError:
        print(f"k3diff progress: --at {args.at}: not seconds nor a share such as 50%", file=sys.stderr)
        return 2
    end = t1 if at is None else t0 + at
    prog = Progress(budgets, lambda *_: None, tty=True)
    for r in cases:
        if r["judged_at"] <= end:
            prog.add(r, at=r["judged_at"])
    print("\n".join(prog.lines(end)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
