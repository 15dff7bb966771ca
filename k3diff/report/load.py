"""Read results files (k3diff/results.py) and merge shards into one run.

A merged run keeps every case line of every file: its case count is the sum over the files. A
file written under xdist names the parts its workers streamed (`parts`); they are read with it
(matched by run id), so `k3diff report r.jsonl` and `k3diff report FOLDER` read the same cases.
A file (shard or worker part) without its end record was cut short: the run says so in `warnings`.
Bad input (a missing file, a file that is not JSON lines, one with no case) raises ReportInputError
with one line naming the file.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


class ReportInputError(ValueError):
    """A results file that cannot be read; the message is one line naming it."""


@dataclass
class Run:
    headers: list = field(default_factory=list)     # one "run" line per file (shard)
    cases: list = field(default_factory=list)       # every "case" line of every file
    failures: list = field(default_factory=list)    # saved seeds: stage, path, replay, headline
    files: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    ends: list = field(default_factory=list)        # one "end" line per file that finished
    truncated: list = field(default_factory=list)   # files without their end record

    @property
    def shards(self) -> list:
        """The start records of shards (controller or single-process files), not worker parts."""
        return [h for h in self.headers if not h.get("worker")] or self.headers

    @property
    def seeds(self) -> list:
        return sorted({h.get("seed") for h in self.headers}, key=str)

    def stages(self) -> list:
        return sorted({c["stage"] for c in self.cases})


def expand(paths) -> list[Path]:
    """Files as given, folders as every *.jsonl (or *.jsonl.gz) under them (sorted)."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted([*p.rglob("*.jsonl"), *p.rglob("*.jsonl.gz")])
            found = [f for f in found if not f.name.endswith(".observations.jsonl")]   # k3diff/observations.py
            if not found:
                raise ReportInputError(f"{p}: folder holds no *.jsonl results file")
            out += found
        elif p.exists():
            out.append(p)
        else:
            raise ReportInputError(f"{p}: no such results file")
    return out


def read_file(path: Path, need_cases: bool = True) -> Run:
    try:
        if str(path).endswith(".gz"):       # an artifact kept compressed (the H200 runs in docs/screenshots)
            import gzip

            with gzip.open(path, "rt") as f:
                text = f.read()
        else:
            text = Path(path).read_text()
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise ReportInputError(f"{path}: cannot read ({type(exc).__name__})") from None
    run = Run(files=[str(path)])
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            raise ReportInputError(f"{path}:{n}: not a k3diff results file (a line that is not JSON)") from None
        kind = obj.get("kind") if isinstance(obj, dict) else None
        if kind == "run":
            run.headers.append(dict(obj, file=str(path)))
        elif kind == "case":
            run.cases.append(obj)
        elif kind == "failure":
            run.failures.append(obj)
        elif kind == "budgets":
            pass                                        # the progress line's denominators
        elif kind == "loaded":                          # the backend as loaded, after the start record
            if run.headers:
                run.headers[-1].update({k: obj[k] for k in ("backend", "device", "boundaries") if k in obj})
        elif kind == "end":
            run.ends.append(dict(obj, file=str(path)))
        else:
            raise ReportInputError(f"{path}:{n}: not a k3diff results line (no 'kind' run/case/failure/budgets/end)")
    if run.headers and run.headers[0].get("format", 1) >= 2 and not run.ends:
        run.truncated.append(str(path))
    if not run.cases and need_cases:
        raise ReportInputError(f"{path}: no case in this results file (empty, or the run judged nothing)")
    if not run.headers:
        run.headers.append({"kind": "run", "file": str(path)})
    return run


def parts_of(path: Path, run: Run) -> list[Path]:
    """The worker parts a controller's file names (`NAME:gw*` -> NAME-stem.gw*.jsonl beside it)
    whose run id is this run's (a stale part of an earlier run in the same folder is not)."""
    out = []
    for h in run.headers:
        for pattern in h.get("parts") or ():
            name = pattern.split(":")[0]
            stem = name[:-len(".jsonl")] if name.endswith(".jsonl") else name
            for part in sorted(Path(path).parent.glob(f"{stem}.gw*.jsonl")):
                try:
                    first = json.loads(part.read_text().split("\n", 1)[0] or "{}")
                except (OSError, json.JSONDecodeError):
                    continue
                if first.get("run_id") == h.get("run_id"):
                    out.append(part)
    return out


def merge(runs) -> Run:
    merged = Run()
    for r in runs:
        merged.headers += r.headers
        merged.cases += r.cases
        merged.failures += r.failures
        merged.files += r.files
        merged.ends += r.ends
        merged.truncated += r.truncated
    for f in merged.truncated:
        merged.warnings.append(f"warning: {f} ended without its end record (killed, or still running): "
                               "its cases up to then are here, the rest of that shard never ran")
    seeds = merged.seeds
    if len(seeds) > 1:
        merged.warnings.append(f"warning: the results files disagree on the seed ({', '.join(map(str, seeds))}): "
                               "not shards of one run")
    return merged


def load_shard(path) -> Run:
    """One shard's results file with its workers' parts, cases or none (the nightly merge judges a
    shard that judged nothing itself; its `ends[0]`, where present, is this file's own end record)."""
    path = Path(path)
    if not path.exists():
        raise ReportInputError(f"{path}: no such results file")
    run = read_file(path, need_cases=False)
    return merge([run] + [read_file(p, need_cases=False) for p in parts_of(path, run)])


def load(paths) -> Run:
    files = expand(paths)
    if not files:
        raise ReportInputError("no results file given")
    runs, seen = [], set()
    for p in files:
        if p.resolve() in seen:
            continue
        seen.add(p.resolve())
        run = read_file(p, need_cases=False)
        runs.append(run)
        for part in parts_of(p, run):
            if part.resolve() not in seen:
                seen.add(part.resolve())
                runs.append(read_file(part, need_cases=False))
    merged = merge(runs)
    if not merged.cases:
        raise ReportInputError(f"{files[0]}: no case in this results file (empty, or the run judged nothing)")
    return merged
