"""How a case can end without a verdict on its numbers: the crash and hang prefixes a verdict's
error carries, whether such a verdict is final, and how a dead process is named.

Its own module because the isolation (one candidate process), the rank pool (N of them) and the
search loop all need the same words, and none of them may import another for it.
"""
from __future__ import annotations

import signal

CRASH = "crash:"     # the candidate raised, died or left the device unusable before its verdict
HANG = "hang:"       # no verdict within the timeout


def is_fatal(verdict) -> bool:
    """A crash or hang verdict: final, never shrunk."""
    return bool(verdict.error) and verdict.error.startswith((CRASH, HANG))


def signal_name(code: int | None, running: str = "no exit status") -> str:
    """How a process ended, from its exit code (negative: the signal that killed it)."""
    if code is None:
        return running
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


def describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}({exc})" if str(exc) else type(exc).__name__
    return text.splitlines()[0][:300]


class CandidateFailed(Exception):
    """A candidate call that gave no outputs to judge: `error` is the verdict's error line (an
    ordinary exception in run(), or a `crash:` / `hang:`); `oom` when it ran out of memory (judged
    by the case's size, k3diff.judge); `crash` False for an ordinary exception in run(), which
    fails the case without ending its process."""

    def __init__(self, error: str, *, oom: bool = False, crash: bool = True):
        super().__init__(error)
        self.error, self.oom, self.crash = error, oom, crash
