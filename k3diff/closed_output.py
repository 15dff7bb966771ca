"""A candidate process that closes (or replaces) its own stdout or stderr has broken the process
it was given: a `crash:`, and the next case gets a fresh one.

Without this rule the case ended as whatever the candidate's next write raised (`OSError: [Errno 9]
Bad file descriptor`, an error verdict judged like a Python exception in the kernel's own code),
and the same process went on to the next case with no stdout/stderr, so that whatever failed there
left no message; or a file it opened later took descriptor 1, and its prints went into that.

Checked in the candidate process (k3diff/isolation.py) after each request: descriptors 1 and 2 as
they were when this module was first imported there (the child imports k3diff.isolation first
thing), compared by device and inode.
"""
from __future__ import annotations

import os

from k3diff.fatal import CRASH

_NAMES = {1: "stdout", 2: "stderr"}


def _identity(fd: int):
    try:
        st = os.fstat(fd)
    except OSError:
        return None                 # closed
    return st.st_dev, st.st_ino


_AT_START = {fd: _identity(fd) for fd in _NAMES}


def broken() -> str | None:
    """What happened to stdout/stderr since the start ("stdout closed"), or None."""
    gone = []
    for fd, name in _NAMES.items():
        now = _identity(fd)
        if _AT_START[fd] is not None and now != _AT_START[fd]:
            gone.append(f"{name} (fd {fd}) {'closed' if now is None else 'replaced'}")
    return ", ".join(gone) or None


def checked(answer: list) -> list:
    """The candidate process's reply to a request, or a crash if it broke its own output meanwhile
    (a ["raised", ...] reply with crash set: the parent kills this process)."""
    what = broken()
    if what is None:
        return answer
    return ["raised", {"error": f"{CRASH} the candidate process broke its own output: {what}", "oom": False,
                       "crash": True}]
