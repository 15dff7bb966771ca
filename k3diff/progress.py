"""The progress line of a long run: per stage, cases judged of the budget, cases/s, failures so far,
ETA. On a terminal one live line (rewritten at most twice a second); on a CI log (not a terminal)
one line per stage a minute; off with -q. Fed with case records (k3diff/results.py) as they are
judged: in this process, or under xdist by tailing the parts the workers stream (`Tail`), so a
250-example invariance item is not silent for 14 minutes.

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
        key = name if not self.tty else "*"
        last = self._drawn.get(key)
        if last is not None and now - last < self.interval:
            return
        self._drawn[key] = now
        self.write(self.stages[name].line(name, now), not self.tty)

    def lines(self, now: float | None = None) -> list[str]:
        return [s.line(n, now) for n, s in self.stages.items() if s.judged or s.shrink]


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
