"""Hypothesis as k3diff uses it: search a strategy for a case whose verdict fails.

Settings are chosen explicitly rather than from a Hypothesis profile: Hypothesis turns its own `ci`
profile on when CI is set, and its example database is keyed by test and Hypothesis version, so
neither may decide what a k3diff run does. The run's seed fixes the examples, so shards and xdist
workers agree on them.
"""
from __future__ import annotations

import math
import time

from k3diff.fatal import is_fatal

# the label of hypothesis.target() on a passing case's worst share of budget (`aim`, below)
TARGET_LABEL = "worst share of budget"


class Stop(BaseException):
    """Raised by a judge to end the search at once with `verdict`, without shrinking (a crash or a
    hang: re-running it dozens of times to shrink it would only crash again). A BaseException, so
    Hypothesis does not treat it as a failure to shrink."""

    def __init__(self, verdict):
        super().__init__(verdict.headline())
        self.verdict = verdict


def share_of_budget(verdict):
    """The verdict's worst share of budget, or None (skipped, no graded tensor, not a finite number)."""
    if verdict.skipped:
        return None
    worst = verdict.worst()
    ratio = getattr(worst, "ratio", None)
    try:
        ratio = float(ratio)
    except (TypeError, ValueError):
        return None
    return ratio if math.isfinite(ratio) else None


def find_failure(strategy, judge, *, examples: int, seed: int, shrink: bool = True, explicit=(), aim: bool = False):
    """Draw up to `examples` values of `strategy`, calling judge(value) -> verdict on each.
    Returns (failing verdict or None, number of values judged). With shrink, the verdict returned
    is Hypothesis's minimal failing example (its final replay); without, the first failure.
    `explicit` values are judged first, as Hypothesis's @example (not counted in `examples`, never
    shrunk): a production space's boundary sweep (k3diff.strategies.boundary_plan).
    With `aim`, each passing case's worst share of budget is told to hypothesis.target(), and
    Hypothesis's target phase climbs toward the cases closest to a bound once max(examples // 2, 10)
    are drawn (never sooner: the draws before are the same either way). A search of 10 examples or
    fewer (a ci chunk: 40 // 4; a quick one: 4) ends before that phase can start, so `aim` changes
    nothing there (tests/k3diff/test_target.py); a nightly chunk (62) and a hunt (40 a stage) give
    it the second half. Whether it catches the planted bugs sooner: scripts/target_effect.py."""
    from hypothesis import HealthCheck, Phase, example, given, settings, target
    from hypothesis import seed as hyp_seed

    state = {"count": 0, "failure": None}
    phases = [Phase.explicit, Phase.generate] + ([Phase.target] if aim else []) + ([Phase.shrink] if shrink else [])

    def one(value):
        state["count"] += 1
        verdict = judge(value)
        if not verdict.ok and not verdict.skipped:
            state["failure"] = verdict
            raise AssertionError(verdict.headline())
        share = share_of_budget(verdict) if aim else None
        if share is not None:
            target(share, label=TARGET_LABEL)

    for value in reversed(list(explicit)):      # @example runs them in the order written
        one = example(value)(one)
    one = settings(max_examples=examples, deadline=None, database=None, derandomize=False,
                   print_blob=False, phases=phases, suppress_health_check=list(HealthCheck))(
        hyp_seed(seed)(given(strategy)(one)))

    try:
        one()
    except Stop as stop:
        return stop.verdict, state["count"]
    except Exception:   # the failure above, or Hypothesis's Flaky for a stateful candidate
        if state["failure"] is None:
            raise
    return state["failure"], state["count"]


def skip_too_large(case, backend_name, check):
    """check(), or where the case does not fit this machine (k3diff.sizing.CaseTooLarge: the
    estimate before it, or out of memory twice) a verdict skipped with that line: the machine's
    limit, not the candidate's failure, and not the end of a fuzz run (raised inside Hypothesis it
    was a failure to shrink and replay, and a run ended in a traceback: an H100 meeting a
    full-dims bf16 layer case). Its test fails with the line when the search ends (k3diff.plugin)."""
    from k3diff.sizing import CaseTooLarge
    from k3diff.verdict import Verdict

    try:
        return check()
    except CaseTooLarge as exc:
        verdict = Verdict(case, backend_name)
        verdict.skipped, verdict.too_large = str(exc), True
        return verdict


def stop_on_fatal(check, on_case=None, counts=None):
    """The judge every k3diff search uses: `check(value)` -> verdict, told to `on_case(value,
    verdict)`, counted in `counts` ("judged": not skipped; "too_large": the first such line and how
    many), and the search ended at once (Stop) on a crash or hang verdict. A case too large for this
    machine is skipped and the search goes on, as in a fuzz run (`skip_too_large`): a hunt on a
    GPU another run fills ended in a traceback."""
    def judge(value):
        case = value[0] if isinstance(value, tuple) else value      # (case, position): invariance
        verdict = skip_too_large(case, "", lambda: check(value))
        if on_case is not None:
            on_case(value, verdict)
        if counts is not None:
            counts["judged"] = counts.get("judged", 0) + (not verdict.skipped)
            if getattr(verdict, "too_large", False):
                counts.setdefault("too_large_first", verdict.skipped)
                counts["too_large"] = counts.get("too_large", 0) + 1
        if is_fatal(verdict):
            raise Stop(verdict)
        return verdict

    return judge


def first_failure_over(stages, strategy_for, check, *, examples: int, seed: int, counts=None, aim: bool = False):
    """Stage after stage, the first failing verdict without shrinking (a hunt: only the time to the
    first catch matters). Returns (verdict or None, values judged, seconds, stage or "")."""
    count, start = 0, time.perf_counter()
    judge = stop_on_fatal(check, counts=counts)
    for stage in stages:
        verdict, n = find_failure(strategy_for(stage), judge, examples=examples, seed=seed, shrink=False,
                                  aim=aim)
        count += n
        if verdict is not None:
            return verdict, count, time.perf_counter() - start, stage
    return None, count, time.perf_counter() - start, ""
