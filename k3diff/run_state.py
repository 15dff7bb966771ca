"""What the pytest plugin keeps for one run: one object under one key in `config.stash`.

pytest's stash is the place a plugin keeps per-run state (typed, no private attributes on the
config); `run_state(config)` is the one way to reach it, so every field below is named once.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import pytest


@dataclass
class RunState:
    session: Any = None                     # k3diff.session.Session; None while k3diff is off
    shard: Optional[tuple] = None           # (i, n) of --k3diff-shard
    run_id: Optional[str] = None            # shared with the workers (the results file's parts)
    seed: Optional[int] = None              # drawn once on the controller when no seed is given
    report: Any = None                      # the open results file; None without one or once lost
    report_lost: Optional[str] = None       # the one line of a results file that could not be written
    started: Optional[float] = None         # the start record's time; None once an end record is written
    results: list = field(default_factory=list)      # case records of every item (from every worker)
    # case records of the item this process is running, until its report carries them: a run
    # stopped mid-item (Ctrl-C, a CI time limit) has no report for it, yet judged those cases
    in_flight: list = field(default_factory=list)
    failures: list = field(default_factory=list)     # saved failing seeds
    mutants: list = field(default_factory=list)      # planted-bug hunts
    bad_inputs: list = field(default_factory=list)   # inputs the run could not judge (their status)
    failed_reports: int = 0                 # test reports that failed, for whatever reason
    asked: list = field(default_factory=list)        # stages an item was run for
    progress: Any = None                    # k3diff.progress.Progress, on the process that owns the terminal
    progress_restore: Optional[Callable[[], None]] = None   # the live line yields to pytest's output
    tail: Any = None                        # k3diff.progress.Tail over the workers' parts
    budgets_sent: bool = False              # the progress line's budgets, once (xdist asks per worker)


KEY = pytest.StashKey[RunState]()


def run_state(config) -> RunState:
    """This run's state, made on first use."""
    return config.stash.setdefault(KEY, RunState())
