"""Where a case's time goes: every judged case records its seconds per phase (runner.PhaseClock),
and the phases account for the case's time, on its results record too."""
from k3diff import backends
from k3diff.case import Case
from k3diff.results import record
from k3diff.runner import PhaseClock, check_case

PHASES = {"materialize", "prepare", "reference", "candidate", "judge"}


def test_a_case_records_where_its_seconds_went():
    cand = backends.load("torch-blocked")
    for case in (Case(stage="moe", batch=3), Case(stage="kda", batch=2, steps=2, n_slots=3, state_idx=(1, 2))):
        v = check_case(case, cand, device="cpu")
        assert v.ok and set(v.phases) == PHASES
        assert all(t >= 0 for t in v.phases.values())
        # the clock starts with the case's own timer, so only the last lap's end separates them
        assert 0.95 * v.seconds <= sum(v.phases.values()) <= v.seconds
        rec = record(case, v)
        assert set(rec["phases"]) == PHASES


def test_laps_add_up_per_phase_over_steps():
    into = {}
    clock = PhaseClock("cpu", into)
    clock.lap("a")
    clock.lap("b")
    clock.lap("a")
    assert set(into) == {"a", "b"} and into["a"] >= 0 and into["b"] >= 0


def test_a_batch_invariance_check_records_its_phases_and_skips_the_reference_when_strict():
    from k3diff.invariance import check_batch_invariance

    cand = backends.load("torch-blocked")
    case = Case(stage="moe", batch=4)
    v = check_batch_invariance(case, cand, 2, device="cpu")
    assert v.ok and set(v.phases) == PHASES
    assert 0.9 * v.seconds <= sum(v.phases.values()) <= v.seconds

    exact = backends.load("reference")          # float64 token by token: batch-invariant bitwise

    class Strict:                                # declaring it (torch-blocked's CPU GEMMs are not:
        batch_invariant = True                   # their blocking moves with the batch)

        def __getattr__(self, name):
            return getattr(exact, name)

    v = check_batch_invariance(case, Strict(), 2, device="cpu")
    assert v.ok and set(v.phases) == PHASES - {"reference"}
    assert any(r.tensor.endswith(".alone_vs_batched") for r in v.reports)


def test_an_isolated_case_names_the_seconds_its_bytes_took_to_cross_apart_from_the_candidates(tmp_path):
    """Isolated, the round trip to the candidate's process is split: the child's own seconds stay
    the candidate's, the rest (pickling, the socket, the copies) is `transfer`."""
    from k3diff.isolation import IsolatedChecker

    checker = IsolatedChecker(None, device="cpu", inflight_dir=tmp_path)
    try:
        v = checker.check(Case(stage="kda", batch=2, steps=2, n_slots=3, state_idx=(1, 2)))
    finally:
        checker.close()
    assert v.ok and set(v.phases) == PHASES | {"transfer"}
    assert v.phases["transfer"] > 0 and v.phases["candidate"] >= 0
    assert 0.95 * v.seconds <= sum(v.phases.values()) <= v.seconds
