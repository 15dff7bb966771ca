"""The results file: what `pytest --k3diff --k3diff-report FILE` writes, one JSON object a line.

Line 1 is the run (`"kind": "run"`): format, seed, profile, backend, device, shard, start time, the
declared boundaries, every version that can change a verdict (`environment()`, the GPU's name
among them) and the fingerprint of the budget table in force (`budget_table`, optional: older
files lack it). Then one line per
judged case (`"kind": "case"`, `record()`, written and flushed as it is judged, with `phase`
"generate" or "shrink": Hypothesis's shrink steps re-judge variants of one failure), one per saved
failure (`"kind": "failure"`: its seed file, replay command and the test item), and last an end
record (`"kind": "end"`: end time, duration, the run's exit status, counts). The start record is
written before the backend loads, and a `"kind": "loaded"` line once it has (its resolved name and
boundaries); a run that stops before judging (its backend did not load: exit 8) still writes its end
record with its status and its one line (`error`), so a shard that never judged is never a 0-byte
file. A file without its end record was killed (or is still running): `k3diff report` says so.

Under xdist every worker streams its own file beside FILE (`worker_path`: FILE's name with
`.gw0` before `.jsonl`), so a killed shard keeps every case a worker judged; FILE's run line names
those parts and `k3diff report FILE` reads them with it.
"""
from __future__ import annotations

import json
import math
import platform
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import k3diff

RESULTS_FORMAT = 2       # 2: phase, item, start/end records, worker parts


def now() -> str:
    """UTC, to the second, ISO 8601 (what a reviewer compares with a CI log)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def worker_path(path, worker: str) -> Path:
    """The part one xdist worker streams: r.jsonl -> r.gw0.jsonl (still *.jsonl for a folder glob)."""
    path = Path(path)
    stem = path.name[:-len(".jsonl")] if path.name.endswith(".jsonl") else path.name
    return path.with_name(f"{stem}.{worker}.jsonl")


def _num(x, digits=6):
    """A float for JSON: rounded, and None where it is not finite (JSON has no inf)."""
    if x is None:
        return None
    x = float(x)
    return float(f"{x:.{digits}g}") if math.isfinite(x) else None


def _tensor(rep) -> dict:
    # accuracy: the accumulation's error in units of u·Σ|a||b| (None: not an f32 accumulation);
    # l2: ||cand - ref|| / ||base - ref|| (k3diff.divergence.TensorReport.l2_ratio; k3diff.budgets.L2_RTOL)
    return {"tensor": rep.tensor, "ok": rep.ok, "ratio": _num(rep.ratio), "max_err": _num(rep.max_err),
            "bound": _num(rep.bound), "similarity": _num(rep.similarity), "ulps": _num(rep.worst_ulps),
            "accuracy": _num(getattr(rep, "accuracy", None), 4), "l2": _num(getattr(rep, "l2_ratio", None), 4)}


def _error_map(verdict) -> dict | None:
    """The error map of the worst failing tensor (the compare step made one for failures only)."""
    failing = [r for r in verdict.reports if not r.ok and r.error_map is not None]
    if not failing:
        return None
    rep = max(failing, key=lambda r: r.ratio)
    what = f"elements flagged (1): {rep.note}" if rep.note else "|cand - ref|, max-pooled"
    return {"tensor": rep.tensor, "what": what, "values": rep.error_map}


def record(case, verdict) -> dict:
    """One case and its verdict, everything a report plots or lists."""
    from k3diff.corpus import case_id

    worst = verdict.worst()
    failures = [] if verdict.ok or verdict.skipped else verdict.failures()
    return {
        "kind": "case", "stage": case.stage, "id": case_id(case), "label": case.label(),
        "case": case.to_dict(), "batch": case.batch,
        "max_cache_len": max(case.cache_lens) if case.cache_lens else None,
        "ok": verdict.ok, "skipped": verdict.skipped, "error": verdict.error,
        "seconds": round(verdict.seconds, 4), "tie_flips": verdict.tie_flips,
        "phases": {k: round(v, 4) for k, v in verdict.phases.items()},
        "forced": verdict.forced_replay, "backend": verdict.backend,
        "tensors": [_tensor(r) for r in verdict.reports],
        "routing_ok": None if verdict.routing is None else verdict.routing.ok,
        "failure": failures[0] if failures else None,
        "worst": None if worst is None else [worst.tensor, worst.ratio, worst.similarity, worst.worst_ulps],
        "error_map": None if verdict.ok else _error_map(verdict),
    }


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:  # not installed: absent from the report rather than an error
        return None


def _git_commit(here: Path | None = None) -> str | None:
    """HEAD of the checkout k3diff runs from, "+modified" when tracked files differ from it (a
    working tree sent to a GPU machine on a stale clone ran code its HEAD does not name)."""
    here = here or Path(__file__).resolve().parent
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=here)
        if done.returncode != 0 or not done.stdout.strip():
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=10, cwd=here)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() + ("+modified" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def _driver() -> str | None:
    """The NVIDIA driver version (nvidia-smi), where there is one."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stdout.strip().splitlines() or [None])[0] if done.returncode == 0 else None


def environment() -> dict:
    """The machine and every piece of software that can change a verdict."""
    import torch

    cuda = torch.cuda.is_available()
    return {
        "k3diff": k3diff.__version__, "git_commit": _git_commit(), "python": platform.python_version(),
        "torch": torch.__version__, "cuda": torch.version.cuda if cuda else None,
        "cuda_driver": _driver() if cuda else None,
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "gpu_count": torch.cuda.device_count() if cuda else 0,
        "hypothesis": _version("hypothesis"), "numpy": _version("numpy"), "pytest": _version("pytest"),
        "hostname": socket.gethostname(), "platform": platform.platform(),
        "cutlass_dsl": _version("nvidia-cutlass-dsl"),
    }


def run_header(session, shard: str | None, worker: str | None = None, parts=()) -> dict:
    """The start record, written before the backend loads (`session`: what the command line says,
    seed, profile_name, backend_name, device; a backend that then fails to load still leaves a file
    that says which run it was). `worker`: this file is one xdist worker's part; `parts`: the
    controller's file names the parts its workers stream."""
    space = getattr(session, "space", None)
    return {"kind": "run", "format": RESULTS_FORMAT, "seed": session.seed, "profile": session.profile_name,
            "backend": session.backend_name, "device": session.device, "shard": shard,
            "worker": worker, "parts": list(parts), "started": now(), "started_unix": round(time.time(), 3),
            "boundaries": {k: list(v) for k, v in dict(getattr(space, "boundaries", None) or {}).items()},
            "argv": sys.argv[1:], "environment": environment(), "budget_table": _budget_table()}


def _budget_table() -> str | None:
    """The fingerprint of the budget table this run judges by (k3diff/budget_fingerprint.py);
    optional in the record: files written before it load, and say "not recorded"."""
    from k3diff.budget_fingerprint import fingerprint

    return fingerprint()


def loaded_record(session) -> dict:
    """The line after the start record once the backend has loaded: its resolved name, the device
    and the boundaries it declares (k3diff.report.load folds it into the start record)."""
    space = getattr(session, "space", None)
    return {"kind": "loaded", "backend": session.backend_name, "device": session.device,
            "boundaries": {k: list(v) for k, v in dict(getattr(space, "boundaries", None) or {}).items()}}


def end_record(started_unix: float, exitstatus, cases: int, failing: int, error: str | None = None) -> dict:
    """The last line: a file that has it was not cut short. `exitstatus`: the run's pytest exit
    status (k3diff/exit_codes.py), which the nightly merge reads; `error`: the one line of a run
    that stopped before judging (a backend that did not load, a seed that cannot be read)."""
    out = {"kind": "end", "ended": now(), "seconds": round(time.time() - started_unix, 3),
           "exitstatus": None if exitstatus is None else int(exitstatus), "cases": cases, "failing": failing}
    if error:
        out["error"] = error
    return out


def write(path, header: dict, cases: list, failures: list = ()) -> None:
    """The results file of one pytest run (one shard): header, cases, saved failures."""
    lines = [header] + [dict(c, kind="case") for c in cases]
    lines += [dict(f, kind="failure") for f in {f["path"]: f for f in failures}.values()]
    Path(path).write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
