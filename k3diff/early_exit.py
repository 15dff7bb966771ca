"""With isolation off, a run that ends before its end is never a pass.

With `--k3diff-isolate off` (CLI `--isolate off`) the candidate runs in k3diff's own process, so a
candidate that calls `os._exit(0)` (in run() or at import) or segfaults takes the run with it: it
used to end with exit 0 and nothing printed, and a segfault's case was recorded nowhere.

So such a run forks once, before the backend is loaded: the child is the run; this process only
waits for it. The run marks its end on a pipe from an atexit hook (a normal end, an exception and
sys.exit all run it; os._exit and a fatal signal do not). A child that ends without the mark is
turned into one line naming the case in flight (the in-flight note each case writes first,
k3diff.isolation.InProcessChecker, left in place so `k3diff replay NOTE` judges it again) and exit
status 1. What isolation off still gives up is written in the README: a hang is not stopped, the
candidate can reach k3diff's judging code in its process, and a crash ends the run.
"""
from __future__ import annotations

import atexit
import json
import os
import shlex
import signal
import sys
from pathlib import Path

from k3diff.fatal import CRASH, signal_name

END = b"k3diff: the run reached its end\n"
_GUARDED = False


def guard(inflight_dir) -> None:
    """Fork: return in the child (the run); in this process wait for it and exit with its status,
    or with 1 and one line if it ended without reaching its end. Once per process, a no-op where
    fork is missing."""
    global _GUARDED
    if _GUARDED or not hasattr(os, "fork"):
        return
    _GUARDED = True
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        atexit.register(_mark_end, w)
        return
    os.close(w)
    _wait(pid, r, Path(inflight_dir))


def guard_command_line(inflight_dir, args: tuple) -> None:
    """`guard` for a pytest run started from the command line; not for pytest.main() called inside
    another process (pytester's in-process runs, a script): forking that process would make its
    caller the waiter."""
    if tuple(args) == tuple(sys.argv[1:]):
        guard(inflight_dir)


def _mark_end(fd: int) -> None:
    try:
        os.write(fd, END)
    except OSError:
        pass


def _wait(pid: int, r: int, inflight_dir: Path) -> None:
    # Ctrl-C reaches the run (same process group) and it ends as it does; SIGTERM/SIGHUP sent to
    # this process are passed on to it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda s, f: os.kill(pid, s))
    data = b""
    while True:
        try:
            chunk = os.read(r, 4096)
        except InterruptedError:
            continue
        if not chunk:
            break
        data += chunk
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    if END in data:
        os._exit(code if code >= 0 else 128 - code)
    os.write(2, (early_line(code, inflight_dir / f".inflight-{pid}.json") + "\n").encode())
    os._exit(1)


def early_line(code: int, note: Path) -> str:
    """The one line of a run that ended before its end: how it ended and the case in flight."""
    how = f"k3diff: {CRASH} the run ended before its end ({signal_name(code)}) with isolation off"
    try:
        record = json.loads(note.read_text())
        from k3diff.case import Case

        label = Case.from_dict(record["case"]).label()
        backend = str(record.get("backend") or "")
    except (OSError, ValueError, KeyError, TypeError):
        return how + "; no case was in flight (the backend's import or load, or between cases)"

    again = f"k3diff replay {shlex.quote(str(note))}" + (f" --backend {shlex.quote(backend)}" if backend else "")
    return f"{how}, judging {label}; the case: `{again}`"
