"""Seed files: one JSON file per case, with its verdict and the exact command that replays it.

`corpora/regressions/` holds seeds replayed on every `--k3diff` run; failures found by fuzzing are
written to `corpora/failures/` (or `--k3diff-save DIR`). A seed file is complete: the case rebuilds
every tensor, so replaying it on any machine reproduces the verdict bit for bit.

Beside the case a seed records: the id of the case it was judged on (`case_id`: a case edited after
recording no longer matches its verdict and is refused), the check (`check`: `{"kind": "case"}` or
`{"kind": "invariance", "position": p}` for a batch-invariance failure), and the environment it was
recorded in (`environment`: k3diff version and git commit, python, torch, CUDA, driver, GPU, CuTe
DSL, backend name and version). A replay judges the case afresh and compares only the outcome
(pass/fail and the failing tensor names) with the recorded one, never stale numbers.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import secrets
import stat
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

import k3diff
from k3diff import exit_codes
from k3diff.case import Case, CaseError

SEED_FORMAT = 1


class CorpusError(ValueError):
    """A seed file that cannot be read; the message is one line naming the file."""
    exit_code = exit_codes.SEED


def case_id(case: Case) -> str:
    return hashlib.sha1(case.to_json().encode()).hexdigest()[:12]


def replay_command(path: str | Path, backend: str | None = None) -> str:
    suffix = f" --backend {backend}" if backend else ""
    return f"k3diff replay {path}{suffix}"


def save(case: Case, verdict_dict: dict, directory: str | Path, backend: str, *, check: dict | None = None,
         environment: dict | None = None) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    check = check or {"kind": "case"}
    suffix = "" if check["kind"] == "case" else f"-inv{check.get('position', 0)}"
    path = directory / f"{case.stage}-{case_id(case)}{suffix}.json"
    record = {
        "k3diff_seed_format": SEED_FORMAT,
        "case": case.to_dict(),
        "case_id": case_id(case),
        "check": check,
        "label": case.label(),
        "backend": backend,
        "verdict": verdict_dict,
        "environment": environment if environment is not None else {},
        "replay": replay_command(path, backend),
    }
    write_new(path, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return path


def write_new(path: Path, text: str) -> None:
    """`text` as the file `path`, atomically, safe in a folder others can write: the temporary
    file is created anew (O_CREAT | O_EXCL | O_NOFOLLOW: a link planted at its name is refused,
    never followed) under a name of its own (pid and random: runs and xdist workers saving the
    same case's seed at once each land), then renamed over `path` (a rename replaces a link at
    `path` itself, never writes through it). Parallel writers never leave half a file."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for attempt in range(8):
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, flags, 0o644)
            break
        except FileExistsError:         # someone's file at this random name: draw another
            if attempt == 7:
                raise
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


MAX_SEED_BYTES = 1 << 20     # a seed is a few KB; a bigger file is not one (or /dev/zero)
MAX_DEPTH = 16               # a seed nests 5 deep; deeper JSON is not one (and recursion has limits)


def read_json(path: str | Path, what: str, *, max_bytes: int = MAX_SEED_BYTES, max_depth: int = MAX_DEPTH,
              error=None):
    """The JSON value of a regular file of at most `max_bytes`, nested at most `max_depth` deep:
    files from another machine are data, so a FIFO (which would block), a device (/dev/zero: no
    end), a folder named x.json, a symlink loop or a deeply nested document is one line of
    `error` (CorpusError by default), never a hang, a traceback or memory exhausted."""
    error = error or CorpusError
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)   # a FIFO opens without a writer
    except FileNotFoundError:
        raise error(f"{path}: no such {what}") from None
    except OSError as exc:
        raise error(f"{path}: cannot read this {what} ({exc.strerror or exc})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise error(f"{path}: {kind}; a {what} is a regular file")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(max_bytes + 1)
        except OSError as exc:
            raise error(f"{path}: cannot read this {what} ({exc.strerror or exc})") from None
    if len(data) > max_bytes:
        raise error(f"{path}: larger than {max_bytes} bytes; not a {what}")
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise error(f"{path}: not a {what} (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not a {what} (invalid JSON: {exc.msg})") from None
    except RecursionError:
        raise error(f"{path}: not a {what} (JSON nested deeper than {max_depth})") from None
    if _depth(value, max_depth) > max_depth:
        raise error(f"{path}: not a {what} (JSON nested deeper than {max_depth})")
    return value


def _depth(value, limit: int, at: int = 0) -> int:
    if at > limit or not isinstance(value, (dict, list)):
        return at
    items = value.values() if isinstance(value, dict) else value
    return max((_depth(v, limit, at + 1) for v in items), default=at + 1)


# the fields a replay reads beyond the case, and the type each must have when present
_FIELD_TYPES = {"verdict": dict, "environment": dict, "check": dict, "backend": str, "case_id": str,
                "label": str, "replay": str}


def load(path: str | Path) -> tuple[Case, dict]:
    path = Path(path)
    record = read_json(path, "k3diff seed file")
    if not isinstance(record, dict) or "case" not in record:
        raise CorpusError(f"{path}: not a k3diff seed file (no 'case' object)")
    for field, kind in _FIELD_TYPES.items():
        if record.get(field) is not None and not isinstance(record[field], kind):
            raise CorpusError(f"{path}: '{field}' must be a JSON {'object' if kind is dict else 'string'}, "
                              f"got {type(record[field]).__name__}")
    fmt = record.get("k3diff_seed_format")
    if fmt is None and record.get("kind") in ("case", "invariance") and "started" in record:
        record = _from_inflight(record)       # what a killed run was judging: a seed without a verdict
        fmt = SEED_FORMAT
    if fmt != SEED_FORMAT:
        raise CorpusError(f"{path}: seed format {fmt!r} is not supported (this k3diff reads {SEED_FORMAT})")
    try:
        case = Case.from_dict(record["case"])
    except CaseError as exc:
        raise CorpusError(f"{path}: {exc}") from None
    recorded_id = record.get("case_id")
    if recorded_id is not None and recorded_id != case_id(case):
        raise CorpusError(f"{path}: the case was edited after its verdict was recorded (case id {case_id(case)}, "
                          f"recorded {recorded_id}); drop 'case_id' and 'verdict' to use it as a new case")
    verdict = record.get("verdict")
    if isinstance(verdict, dict):
        if not isinstance(verdict.get("reports", []), list):
            raise CorpusError(f"{path}: the recorded verdict's 'reports' must be a list")
        stages = {r.get("stage") for r in verdict.get("reports", ()) if isinstance(r, dict)} - {"control", None}
        if not all(isinstance(st, str) for st in stages):
            raise CorpusError(f"{path}: the recorded verdict names a stage that is not a string")
        if stages - {case.stage}:
            raise CorpusError(f"{path}: the recorded verdict is of stage {', '.join(sorted(stages))} but the case is "
                              f"stage {case.stage!r} (edited?); drop 'verdict' to use it as a new case")
    check = record.get("check", {"kind": "case"})
    if not (isinstance(check, dict) and check.get("kind") in ("case", "invariance")
            and (check["kind"] == "case" or _is_index(check.get("position")))):
        raise CorpusError(f"{path}: 'check' must be {{\"kind\": \"case\"}} or "
                          f"{{\"kind\": \"invariance\", \"position\": N >= 0}}, got {check!r}")
    record["check"] = check
    return case, record


def _from_inflight(record: dict) -> dict:
    """The `.inflight-<pid>.json` note of k3diff.isolation as a seed record (no verdict to compare)."""
    check = {"kind": record["kind"]}
    if record["kind"] == "invariance":
        check["position"] = record.get("position")
    return {"k3diff_seed_format": SEED_FORMAT, "case": record.get("case"), "check": check,
            "backend": record.get("backend")}


def _is_index(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 31


def outcome(verdict_dict: dict) -> tuple[bool, list[str]]:
    """What a replay compares with the recording: pass/fail and the names of the failing tensors."""
    names = sorted({str(r.get("tensor")) for r in verdict_dict.get("reports", ())
                    if isinstance(r, dict) and not r.get("ok", True)})
    routing = verdict_dict.get("routing")
    if isinstance(routing, dict) and not routing.get("ok", True):
        names.append("routing")
    if verdict_dict.get("error"):
        names.append(str(verdict_dict["error"]).split(":")[0] if str(verdict_dict["error"]).startswith(
            ("crash:", "hang:")) else "error")
    return bool(verdict_dict.get("ok")), names


_ENV_CACHE: dict = {}


def environment(backend=None) -> dict:
    """Where a verdict was reached: versions of everything that can change a kernel's result."""
    if "base" not in _ENV_CACHE:
        env = {"k3diff": k3diff.__version__, "python": platform.python_version(), "torch": torch.__version__,
               "cuda": torch.version.cuda, "git": None, "gpu": None, "driver": None, "cute_dsl": None}
        try:
            env["git"] = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                                        timeout=5, cwd=Path(k3diff.__file__).parent).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            pass
        try:
            env["cute_dsl"] = version("nvidia-cutlass-dsl")
        except PackageNotFoundError:
            pass
        if torch.cuda.is_available():
            try:
                env["gpu"] = torch.cuda.get_device_name()
                env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                               capture_output=True, text=True, timeout=10).stdout.split("\n")[0] or None
            except (OSError, subprocess.SubprocessError, RuntimeError):
                pass
        _ENV_CACHE["base"] = env
    env = dict(_ENV_CACHE["base"])
    if backend is not None:
        env["backend"] = getattr(backend, "name", type(backend).__name__)
        env["backend_version"] = str(getattr(backend, "version", "")) or None
    return env


def environment_drift(recorded: dict, now: dict) -> str | None:
    """One line naming what differs between two environments (None: nothing that was recorded)."""
    diffs = [f"{k} {recorded[k]} -> {now.get(k)}" for k in sorted(recorded)
             if recorded.get(k) is not None and str(recorded[k]) != str(now.get(k))]
    return ("recorded in another environment: " + "; ".join(diffs)) if diffs else None


# the regression corpus that ships with k3diff: package data (pyproject.toml's package-data), so a
# wheel carries it and `pytest --k3diff` finds it from any folder; the checkout's
# corpora/regressions is a link to it, so seeds copied there ship too
SHIPPED_REGRESSIONS = Path(__file__).resolve().parent / "corpora" / "regressions"


def regression_dirs(rootdir=None) -> list[Path]:
    """The regression corpora replayed on every run: the one that ships with k3diff, and the
    rootdir's own `corpora/regressions` when that is another (a user's project with seeds of its own)."""
    found = []
    for candidate in (SHIPPED_REGRESSIONS,
                      None if rootdir is None else Path(str(rootdir)) / "corpora" / "regressions"):
        if candidate is not None and candidate.is_dir() and candidate.resolve() not in {f.resolve() for f in found}:
            found.append(candidate)
    return found


def seed_files(path: str | Path) -> list[Path]:
    """A seed file, or every *.json under a folder (sorted, so runs and shards are stable)."""
    path = Path(path)
    try:
        if path.is_dir():
            # os.walk does not follow links to folders (a loop would never end); each file is
            # checked when it is read (read_json), so a folder named x.json is one line there
            found = [Path(d) / f for d, dirs, files in os.walk(path) for f in files + [x for x in dirs if x.endswith(".json")]]
            return sorted(p for p in found if p.name.endswith(".json") and not p.name.startswith("."))
    except OSError as exc:
        raise CorpusError(f"{path}: cannot list this folder ({exc.strerror or exc})") from None
    if path.exists() or path.is_symlink():
        return [path]
    raise CorpusError(f"{path}: no such seed file or folder")
