"""Who a slow case is blamed on: the candidate's calls against `--k3diff-timeout`, k3diff's own
work (drawing the case, the float64 reference, the judgement) against a separate, generous limit.

The per-case timeout used to cover the reference too: on a loaded CPU a correct candidate was
judged a `hang:` on a full-dims case and saved as a failing seed, while the time had gone into the
reference. Now the timeout counts only the time the candidate's process spends answering
(k3diff.isolation), and k3diff's own work past JUDGE_TIMEOUT (K3DIFF_JUDGE_TIMEOUT) ends the case
with the machine's line (`MachineTooSlow`: exit 11, no seed), never a verdict against anyone.

Every wait is also capped to what `select` accepts (MAX_WAIT): a huge `--k3diff-timeout` used to
overflow it and end the run in an INTERNALERROR.
"""
from __future__ import annotations

import math
import os

from k3diff.usage import CaseTooLarge, UsageProblem

JUDGE_TIMEOUT = 3600.0      # k3diff's own seconds per case; a full-dims float64 layer case takes minutes on a CPU
MAX_WAIT = 10 * 365 * 86400.0   # select() overflows past ~9.2e9 s; ten years is "no limit"
ABSURD = 1e9                # a limit beyond this is a typo, not a wish: refused


class MachineTooSlow(CaseTooLarge):
    """k3diff's own work on a case ran past its limit: this machine, not the candidate (exit 11)."""


def judge_limit() -> float:
    raw = os.environ.get("K3DIFF_JUDGE_TIMEOUT")
    if not raw:
        return JUDGE_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        raise UsageProblem(f"K3DIFF_JUDGE_TIMEOUT={raw!r}: not a number of seconds") from None
    return checked_seconds(value, "K3DIFF_JUDGE_TIMEOUT")


def checked_seconds(value, what: str = "the per-case timeout (--k3diff-timeout, CLI --timeout)") -> float:
    """A time limit as a wait can use it: > 0 and finite, capped at MAX_WAIT; UsageProblem (one
    line, exit 4) for one that is not a limit or absurdly large."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise UsageProblem(f"{what} must be a number of seconds, got {value!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise UsageProblem(f"{what} must be > 0 seconds and finite, got {value:g}")
    if value > ABSURD:
        raise UsageProblem(f"{what} {value:g} s is more than {ABSURD:g} s ({ABSURD / 3.15e7:.0f} years); "
                           "give a real limit")
    return min(value, MAX_WAIT)


class OwnWork:
    """Seconds of k3diff's own work on one case, against `limit`."""

    def __init__(self, limit: float | None = None):
        self.limit = judge_limit() if limit is None else limit
        self.spent = 0.0

    def add(self, seconds: float, phase: str, case) -> None:
        self.spent += seconds
        if self.spent > self.limit:
            raise MachineTooSlow(f"machine too slow: k3diff's own work on this case (drawing it, the reference, "
                                 f"the judgement) took {self.spent:.0f} s, past its {self.limit:g} s limit "
                                 f"(K3DIFF_JUDGE_TIMEOUT), in {phase}; not the candidate's fault ({case.label()})")
