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
