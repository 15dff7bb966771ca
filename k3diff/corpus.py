"""Seed files: one JSON file per case, with its verdict and the exact command that replays it.

`corpora/regressions/` holds seeds replayed on every `--k3diff` run; failures found by fuzzing are
written to `corpora/failures/` (or `--k3diff-save DIR`). A seed file is complete: the case rebuilds
every tensor, so replaying it on any machine reproduces the verdict bit for bit.
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


def save(case: Case, verdict_dict: dict, directory: str | Path, backend: str) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{case.stage}-{case_id(case)}.json"
    record = {
        "k3diff_seed_format": SEED_FORMAT,
        "case": case.to_dict(),
        "label": case.label(),
        "backend": backend,
        "verdict": verdict_dict,
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
    return case, record


def seed_files(path: str | Path) -> list[Path]:
    """A seed file, or every *.json under a folder (sorted, so runs and shards are stable)."""
    path = Path(path)
    if path.is_dir():
        return sorted(path.rglob("*.json"))
    if path.exists():
        return [path]
    raise CorpusError(f"{path}: no such seed file or folder")
