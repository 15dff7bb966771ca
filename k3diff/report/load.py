"""Read results files (k3diff/results.py) and merge shards into one run.

A merged run keeps every case line of every file: its case count is the sum over the files. A
file written under xdist names the parts its workers streamed (`parts`); they are read with it
(matched by run id), so `k3diff report r.jsonl` and `k3diff report FOLDER` read the same cases.
A file (shard or worker part) without its end record was cut short: the run says so in `warnings`.
Bad input (a missing file, a file that is not JSON lines, one with no case) raises ReportInputError
with one line naming the file. A results file is untrusted data: only a regular file is read (a
FIFO or a device is refused, never waited on), a line at a time up to MAX_LINE, each line's
fields checked against k3diff/report/schema.py, and worker parts only from the file's own folder.
"""
from __future__ import annotations

import errno
import gzip
import json
import os
import stat
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from k3diff.observations import is_observations, results_beside
from k3diff.report import schema


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


# a results line longer than this is refused, not read whole: a case record with its 64x64 error
# map is tens of KiB; a line of gigabytes (a corrupted or hostile file) would take the memory first
MAX_LINE = 64 << 20
_WHY = {errno.ELOOP: "a symlink loop", errno.ENOENT: "no such file", errno.EACCES: "permission denied",
        errno.EISDIR: "a folder"}


def _why(exc: BaseException) -> str:
    return _WHY.get(getattr(exc, "errno", None)) or getattr(exc, "strerror", None) or type(exc).__name__


def expand(paths) -> list[Path]:
    """Files as given, folders as every *.jsonl (or *.jsonl.gz) under them (sorted; symlinked
    folders are not followed, so a link to a parent cannot loop)."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            try:
                found = sorted([*p.rglob("*.jsonl"), *p.rglob("*.jsonl.gz")])
            except (OSError, RuntimeError) as exc:
                raise ReportInputError(f"{p}: cannot list the folder ({_why(exc)})") from None
            found = [f for f in found if not is_observations(f)]
            if not found:
                raise ReportInputError(f"{p}: folder holds no *.jsonl results file")
            out += found
        elif p.exists() or p.is_symlink():          # a dangling or looping link: refused when opened
            out.append(p)
        else:
            raise ReportInputError(f"{p}: no such results file")
    # a run's observations file (k3diff/observations.py) beside its results: `k3diff report res/*.jsonl`
    # names both; it is dropped where its results file is given too, else named for what it is
    given = {str(f) for f in out}
    for f in out:
        if is_observations(f) and str(results_beside(f)) not in given:
            raise ReportInputError(f"{f}: the Hypothesis observations k3diff writes beside a results file, "
                                   f"not results; give {results_beside(f)}")
    return [f for f in out if not is_observations(f)]


def _open(path: Path):
    """The file opened for reading as bytes, refused unless it is a regular file: a FIFO would block
    the read until a writer comes (never, for a planted one), a device (/dev/zero) never ends.
    O_NONBLOCK makes opening a FIFO return at once, so fstat can refuse it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ReportInputError(f"{path}: cannot read ({_why(exc)})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ReportInputError(f"{path}: not a regular file (a FIFO, device or socket): refused")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _lines(path: Path):
    """(number, text) of each line, read a line at a time and at most MAX_LINE bytes each; a
    compressed file (*.gz) decompressed as it is read."""
    raw = _open(path)
    with raw:
        f = gzip.GzipFile(fileobj=raw, mode="rb") if str(path).endswith(".gz") else raw
        n = 0
        while True:
            n += 1
            line = f.readline(MAX_LINE + 1)
            if not line:
                return
            if len(line) > MAX_LINE:
                raise ReportInputError(f"{path}:{n}: a line longer than {MAX_LINE} bytes: not a k3diff results line")
            yield n, line.decode("utf-8")


def _parse(path, n, line):
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):        # not JSON, or nested past the parser's depth
        raise ReportInputError(f"{path}:{n}: not a k3diff results file (a line that is not JSON)") from None
    kind = obj.get("kind") if isinstance(obj, dict) else None
    if kind not in schema.FIELDS:
        raise ReportInputError(f"{path}:{n}: not a k3diff results line (no 'kind' run/case/failure/budgets/end)")
    bad = schema.problem(obj)
    if bad:
        raise ReportInputError(f"{path}:{n}: a {kind} line with a field of the wrong type ({bad})")
    return kind, obj


def read_file(path: Path, need_cases: bool = True) -> Run:
    run = Run(files=[str(path)])
    try:
        for n, line in _lines(path):
            if not line.strip():
                continue
            kind, obj = _parse(path, n, line)
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
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:     # a corrupt gzip, a bad disk, not UTF-8
        raise ReportInputError(f"{path}: cannot read ({_why(exc)})") from None
    if run.headers and run.headers[0].get("format", 1) >= 2 and not run.ends:
        run.truncated.append(str(path))
    if not run.cases and need_cases:
        raise ReportInputError(f"{path}: no case in this results file (empty, or the run judged nothing)")
    if not run.headers:
        run.headers.append({"kind": "run", "file": str(path)})
    return run


def _part_stem(path: Path, pattern: str) -> str:
    """The file name stem a `parts` pattern names (`r.jsonl:gw*` -> `r`), refused unless it is a
    plain name beside the results file: a run line is data, and `../elsewhere/x.jsonl:gw*` or an
    absolute path would read another run's files into this page."""
    name = pattern.split(":")[0]
    stem = name[:-len(".jsonl")] if name.endswith(".jsonl") else name
    if not stem or Path(name).name != name or name in (".", "..") or any(ch in stem for ch in "*?[]\\"):
        raise ReportInputError(f"{path}: its run line names worker parts {pattern!r} outside its own folder "
                               "(a plain file name beside it is expected): refused")
    return stem


def _first_run_id(part: Path):
    """The run id of a worker part's first line, None where it cannot be read as one."""
    try:
        for _, line in _lines(part):
            first = json.loads(line or "{}")
            return first.get("run_id") if isinstance(first, dict) else None
    except (ReportInputError, OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return None


def parts_of(path: Path, run: Run) -> list[Path]:
    """The worker parts a controller's file names (`NAME:gw*` -> NAME-stem.gw*.jsonl beside it)
    whose run id is this run's (a stale part of an earlier run in the same folder is not)."""
    out = []
    for h in run.headers:
        for pattern in h.get("parts") or ():
            stem = _part_stem(path, pattern)
            for part in sorted(Path(path).parent.glob(f"{stem}.gw*.jsonl")):
                if _first_run_id(part) == h.get("run_id"):
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


def _key(path: Path):
    """One file read once however it is named (a symlink loop is refused when opened, not here)."""
    try:
        return path.resolve(strict=True)
    except (OSError, RuntimeError):
        return path.absolute()


def load(paths) -> Run:
    files = expand(paths)
    if not files:
        raise ReportInputError("no results file given")
    runs, seen = [], set()
    for p in files:
        key = _key(p)
        if key in seen:
            continue
        seen.add(key)
        run = read_file(p, need_cases=False)
        runs.append(run)
        for part in parts_of(p, run):
            if _key(part) not in seen:
                seen.add(_key(part))
                runs.append(read_file(part, need_cases=False))
    merged = merge(runs)
    if not merged.cases:
        raise ReportInputError(f"{files[0]}: no case in this results file (empty, or the run judged nothing)")
    return merged
