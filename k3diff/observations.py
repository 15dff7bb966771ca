"""The judged cases as Hypothesis observability lines, so tools that read Hypothesis's own
(Tyche, or any reader of `.hypothesis/observed/*_testcases.jsonl`) see what a k3diff run drew.

With `--k3diff-report r.jsonl` every case judged is also one `"type": "test_case"` JSON line in
r.observations.jsonl beside it (an xdist worker's part r.gw0.jsonl: r.gw0.observations.jsonl),
with the fields and metadata keys of the installed Hypothesis's TestCaseObservation (its test
holds the two to the same keys): `property` the test item, `status` passed / failed / gave_up
(a case this machine could not hold, or one the candidate refused), `how_generated` the search
phase, `features` what the case is (stage, dims, batch, draft widths, cache format, expert format,
the worst tensor's share of budget), `timing` the judge's seconds by phase.

Written from the results record, not from Hypothesis's callback: turning Hypothesis's
observability on makes it trace coverage of every case's Python (the candidate's and the
reference's), and replayed seed files never go through Hypothesis. The file is opened at the first
case, so a process that judges nothing (an xdist controller) leaves none; an earlier run's file
at that name is removed when the run starts, so a file beside a results file is that run's.
The plugin calls `start`, `add` and `finish` (k3diff/plugin.py); the writer lives in config.stash.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

SUFFIX = ".observations.jsonl"
# Hypothesis's ConjectureData Status values, as its observations' metadata.data_status holds them
_DATA_STATUS = {"gave_up": 1, "passed": 2, "failed": 3}
_HOW = {"generate": "during generate phase", "shrink": "during shrink phase",
        "replay": "replayed from a seed file"}
_IMPORTED_AT = time.time()


def path_beside(results) -> Path:
    """r.jsonl -> r.observations.jsonl; a name without .jsonl gets the suffix added."""
    results = Path(results)
    stem = results.name[:-len(".jsonl")] if results.name.endswith(".jsonl") else results.name
    return results.with_name(stem + SUFFIX)


def results_beside(path) -> Path:
    """r.observations.jsonl -> r.jsonl (the inverse of path_beside)."""
    path = Path(path)
    return path.with_name(path.name[:-len(SUFFIX)] + ".jsonl")


def is_observations(path) -> bool:
    """Whether `path` is such a file (a folder of results files holds them beside the results)."""
    return Path(path).name.endswith(SUFFIX)


def _status(record) -> str:
    if record.get("skipped"):
        return "gave_up"
    return "passed" if record.get("ok") else "failed"


def _scalar(values):
    """A dims entry as a feature: the one value, or the values joined ("8,64": a ragged batch's
    cache lengths), so a histogram of it reads at a glance."""
    if isinstance(values, (list, tuple)):
        return values[0] if len(values) == 1 else ",".join(map(str, values))
    return values


def features(record) -> dict:
    """What the case is and how it fared, flat: one value a key (strings and numbers)."""
    cov = dict(record.get("coverage") or {})
    out = {"stage": record.get("stage"), "batch": record.get("batch")}
    for name, values in (cov.pop("dims", None) or {}).items():
        out[name] = _scalar(values)
    cov.pop("expert_ids", None)             # the routed id ranges: a list per case, not a feature
    for name, value in cov.items():
        out[name] = _scalar(value) if isinstance(value, (list, tuple)) else value
    if record.get("max_cache_len") is not None:
        out["max_cache_len"] = record["max_cache_len"]
    worst = record.get("worst")
    if worst:
        out["worst_tensor"], out["worst_share_of_budget"] = worst[0], worst[1]
    if record.get("tie_flips"):
        out["tie_flips"] = record["tie_flips"]
    return {k: v for k, v in out.items() if v is not None and not isinstance(v, (dict, list))}


def observation(record, *, run_start: float, argv=None, pid=None) -> dict:
    """One results-file case record as a Hypothesis test_case observation."""
    status = _status(record)
    phase = record.get("phase") or "generate"
    reason = record.get("failure") if status == "failed" else (record.get("skipped") if status == "gave_up" else "")
    timing = {"execute:test": float(record.get("seconds") or 0.0)}
    timing.update({f"execute:{k}": float(v) for k, v in (record.get("phases") or {}).items()})
    return {
        "type": "test_case",
        "property": record.get("item") or f"k3diff::{record.get('stage')}",
        "run_start": run_start,
        "status": status,
        "status_reason": str(reason or ""),
        "representation": f"{record.get('stage')} {record.get('id')}: {record.get('label')}",
        "arguments": {"case": record.get("case")},
        "how_generated": _HOW.get(phase, f"during {phase} phase"),
        "features": features(record),
        "coverage": None,
        "timing": timing,
        "metadata": {
            "traceback": None,
            "reproduction_decorator": None,
            "predicates": {},
            "backend": {"k3diff_backend": record.get("backend"), "device": record.get("device"),
                        "case_id": record.get("id")},
            "sys.argv": list(sys.argv if argv is None else argv),
            "os.getpid()": os.getpid() if pid is None else pid,
            "imported_at": _IMPORTED_AT,
            "data_status": _DATA_STATUS[status],
            "phase": phase,
            "interesting_origin": record.get("failure") if status == "failed" else None,
            "choice_nodes": None,
            "choice_spans": None,
        },
    }


class Writer:
    """Appends one observation a judged case to the file beside a results file; opened at the
    first case. A write that fails (a full disk) stops the observations, never the run: the
    results file is the record, this a view of it."""

    def __init__(self, results_path):
        self.path = path_beside(results_path)
        self.run_start = time.time()
        self.sink = None
        self.lost: str | None = None
        try:
            if self.path.is_file() and not self.path.is_symlink():
                self.path.unlink()          # an earlier run's observations
        except OSError:
            pass

    def add(self, record) -> None:
        if self.lost is not None or record.get("kind", "case") != "case":
            return
        try:
            if self.sink is None:
                # non-blocking open: a FIFO nobody reads is a failed write, not a hung run
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
                os.set_blocking(fd, True)
                self.sink = os.fdopen(fd, "w", buffering=1)
            self.sink.write(json.dumps(observation(record, run_start=self.run_start)) + "\n")
        except (OSError, TypeError, ValueError) as exc:
            self.lost = f"k3diff: observations {self.path}: write failed ({getattr(exc, 'strerror', None) or exc})"
            self.close()

    def close(self) -> None:
        sink, self.sink = self.sink, None
        if sink is not None:
            try:
                sink.close()
            except OSError:
                pass


KEY = pytest.StashKey[Writer]()


def start(config, results_path) -> None:
    """With a results file (this process's own part of it), its observations beside it."""
    config.stash[KEY] = Writer(results_path)


def add(config, record) -> None:
    writer = config.stash.get(KEY, None)
    if writer is not None:
        writer.add(record)


def finish(config) -> None:
    """Closed at the end of the run; a write that failed is one line on stderr (the run's status is
    the results file's: the observations are a view of it)."""
    writer = config.stash.get(KEY, None)
    if writer is not None:
        writer.close()
        if writer.lost:
            print(writer.lost, file=sys.stderr)
