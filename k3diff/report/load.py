"""Read results files (k3diff/results.py) and merge shards into one run.

A merged run keeps every case line of every file: its case count is the sum over the files.
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

    @property
    def seeds(self) -> list:
        return sorted({h.get("seed") for h in self.headers}, key=str)

    def stages(self) -> list:
        return sorted({c["stage"] for c in self.cases})


def expand(paths) -> list[Path]:
    """Files as given, folders as every *.jsonl under them (sorted)."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.rglob("*.jsonl"))
            if not found:
                raise ReportInputError(f"{p}: folder holds no *.jsonl results file")
            out += found
        elif p.exists():
            out.append(p)
        else:
            raise ReportInputError(f"{p}: no such results file")
    return out


def read_file(path: Path) -> Run:
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
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
        else:
            raise ReportInputError(f"{path}:{n}: not a k3diff results line (no 'kind' run/case/failure)")
    if not run.cases:
        raise ReportInputError(f"{path}: no case in this results file (empty, or the run judged nothing)")
    if not run.headers:
        run.headers.append({"kind": "run", "file": str(path)})
    return run


def merge(runs) -> Run:
    merged = Run()
    for r in runs:
        merged.headers += r.headers
        merged.cases += r.cases
        merged.failures += r.failures
        merged.files += r.files
    seeds = merged.seeds
    if len(seeds) > 1:
        merged.warnings.append(f"warning: the results files disagree on the seed ({', '.join(map(str, seeds))}): "
                               "not shards of one run")
    return merged


def load(paths) -> Run:
    files = expand(paths)
    if not files:
        raise ReportInputError("no results file given")
    return merge(read_file(p) for p in files)
