"""Nothing a candidate starts outlives its case: the parent of candidate processes is a subreaper.

A candidate process (k3diff/isolation.py) leads its own session and is killed with its whole
process group; an EP rank (k3diff/rank_pool.py) is killed by its pool. But a child that the
candidate daemonises (forks, calls setsid, and its parent exits) is in neither: it was reparented
to init and ran on after the run (a `sleep 300` did). So:

  - `adopt()`: this process asks Linux to be a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so
    such an orphan from below is reparented to us, not to init;
  - `marked_env()`: the environment a candidate process starts with carries MARK; whatever it
    forks or execs inherits it (a forked child keeps its parent's initial environment; an exec'd
    one the current one), so an adopted orphan can be told from the process's own children
    (xdist workers, pytester runs, compilers), which never carry it;
  - `ended(pid)`: once a candidate process is gone, every child of ours that carries MARK, leads a
    session other than ours (a daemon's setsid; our own helpers, such as the ranks' forkserver
    started by a candidate process, stay in its session) and is not a candidate process still in
    use (`started`) is killed and reaped, again until none is left (an orphan's own children are
    adopted in turn when it dies).

Linux only (/proc and prctl); elsewhere these are no-ops, and a daemonised child may outlive the
run as before. The cost of being a subreaper: an unrelated orphan from below (not a candidate's)
is ours too; it is not touched, and, once it exits, stays a zombie until this process ends
(reaping it could steal the exit status of a subprocess some other code still waits for).
"""
from __future__ import annotations

import os
import signal
import threading

MARK = "K3DIFF_CANDIDATE_TREE"           # its value: the pid of the process that started the candidate
PR_SET_CHILD_SUBREAPER = 36

_lock = threading.Lock()
_live: set[int] = set()                 # candidate processes in use, ours: never swept
_adopting = None                        # None: not asked yet; then whether prctl took


def adopt() -> bool:
    """Make this process the subreaper of everything below it (once; True if it is one)."""
    global _adopting
    with _lock:
        if _adopting is None:
            try:
                import ctypes

                _adopting = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
            except (OSError, AttributeError):
                _adopting = False
        return _adopting


def marked_env(env: dict | None = None) -> dict:
    """The environment for a candidate process: this one's (or `env`) with MARK set."""
    return {**(os.environ if env is None else env), MARK: str(os.getpid())}


def mark_this_process() -> None:
    """MARK in this process's environment, for what it execs from now on (a rank forked from a
    server that started without it)."""
    os.environ[MARK] = os.environ.get(MARK) or str(os.getpid())


def started(pid: int) -> None:
    """A candidate process of ours, in use: not an orphan while it lives."""
    adopt()
    with _lock:
        _live.add(pid)


def ended(pid: int | None = None, rounds: int = 20) -> list[int]:
    """Candidate process `pid` is gone: kill and reap every marked child of ours that is not a
    candidate process still in use. Returns the pids killed."""
    with _lock:
        _live.discard(pid)
        keep = set(_live)
    killed: list[int] = []
    for _ in range(rounds):
        ours = os.getsid(0)
        strays = [c for c, sid in children(os.getpid()) if c not in keep and sid != ours and _marked(c)]
        if not strays:
            break
        for c in strays:
            try:
                os.kill(c, signal.SIGKILL)
                killed.append(c)
            except ProcessLookupError:
                pass
        for c in strays:
            try:
                os.waitpid(c, 0)        # ours: reaped here, so no zombie stays
            except ChildProcessError:
                pass
    return killed


def children(pid: int) -> list[tuple[int, int]]:
    """(pid, session id) of each live process whose parent is `pid` (Linux /proc; [] elsewhere)."""
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses, so split
        # after the last ')'
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 3 and fields[0] != b"Z" and int(fields[1]) == pid:
            found.append((int(name), int(fields[3])))
    return found


def _marked(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return any(kv.startswith(MARK.encode() + b"=") for kv in fh.read().split(b"\0"))
    except OSError:
        return False
