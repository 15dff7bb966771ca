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
from pathlib import Path

from k3diff.case import Case, CaseError

SEED_FORMAT = 1


class CorpusError(ValueError):
    """A seed file that cannot be read; the message is one line naming the file."""


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
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)            # atomic: parallel workers never leave half a file
    return path


def load(path: str | Path) -> tuple[Case, dict]:
    path = Path(path)
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise CorpusError(f"{path}: no such seed file") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorpusError(f"{path}: not a k3diff seed file (invalid JSON: {exc.msg if hasattr(exc, 'msg') else exc})") from None
    if not isinstance(record, dict) or "case" not in record:
        raise CorpusError(f"{path}: not a k3diff seed file (no 'case' object)")
    fmt = record.get("k3diff_seed_format")
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
        stages = {r.get("stage") for r in verdict.get("reports", ()) if isinstance(r, dict)} - {"control", None}
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


def _is_index(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 31


def outcome(verdict_dict: dict) -> tuple[bool, list[str]]:
    """What a replay compares with the recording: pass/fail and the names of the failing tensors."""
    names = sorted({r["tensor"] for r in verdict_dict.get("reports", ()) if not r.get("ok", True)})
    routing = verdict_dict.get("routing")
    if routing and not routing.get("ok", True):
        names.append("routing")
    if verdict_dict.get("error"):
        names.append(str(verdict_dict["error"]).split(":")[0] if str(verdict_dict["error"]).startswith(
            ("crash:", "hang:")) else "error")
    return bool(verdict_dict.get("ok")), names


_ENV_CACHE: dict = {}


def environment(backend=None) -> dict:
    """Where a verdict was reached: versions of everything that can change a kernel's result."""
    import platform
    import subprocess
    from importlib.metadata import PackageNotFoundError, version

    if "base" not in _ENV_CACHE:
        import torch

        import k3diff

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


def seed_files(path: str | Path) -> list[Path]:
    """A seed file, or every *.json under a folder (sorted, so runs and shards are stable)."""
    path = Path(path)
    if path.is_dir():
        return sorted(p for p in path.rglob("*.json") if not p.name.startswith("."))
    if path.exists():
        return [path]
    raise CorpusError(f"{path}: no such seed file or folder")
