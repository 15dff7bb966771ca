"""Hypothesis as k3diff uses it: search a strategy for a case whose verdict fails.

Settings are chosen explicitly rather than from a Hypothesis profile: Hypothesis turns its own `ci`
profile on when CI is set, and its example database is keyed by test and Hypothesis version, so
neither may decide what a k3diff run does. The run's seed fixes the examples, so shards and xdist
workers agree on them.
"""
from __future__ import annotations


class Stop(BaseException):
    """Raised by a judge to end the search at once with `verdict`, without shrinking (a crash or a
    hang: re-running it dozens of times to shrink it would only crash again). A BaseException, so
    Hypothesis does not treat it as a failure to shrink."""

    def __init__(self, verdict):
        super().__init__(verdict.headline())
        self.verdict = verdict


def find_failure(strategy, judge, *, examples: int, seed: int, shrink: bool = True, explicit=()):
    """Draw up to `examples` values of `strategy`, calling judge(value) -> verdict on each.
    Returns (failing verdict or None, number of values judged). With shrink, the verdict returned
    is Hypothesis's minimal failing example (its final replay); without, the first failure.
    `explicit` values are judged first, as Hypothesis's @example (not counted in `examples`, never
    shrunk): a production space's boundary sweep (k3diff.strategies.boundary_plan)."""
    from hypothesis import HealthCheck, Phase, example, given, settings
    from hypothesis import seed as hyp_seed

    state = {"count": 0, "failure": None}
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])

    def one(value):
        state["count"] += 1
        verdict = judge(value)
        if not verdict.ok and not verdict.skipped:
            state["failure"] = verdict
            raise AssertionError(verdict.headline())

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
