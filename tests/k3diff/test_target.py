"""hypothesis.target() on each passing case's worst share of budget (k3diff/search.py's `aim`,
--k3diff-target): the search climbs toward the cases closest to a bound, and only where the budget
leaves Hypothesis room for its target phase."""
from types import SimpleNamespace

from hypothesis import strategies as st

from k3diff.search import find_failure

PEAK = 123_457          # the value whose case sits closest to its budget; nothing draws it by chance


def _verdict(x):
    """A passing verdict whose worst tensor used 1 - |x - PEAK| / 1e6 of its budget."""
    worst = SimpleNamespace(ratio=1.0 - abs(x - PEAK) / 1e6)
    return SimpleNamespace(ok=True, skipped=None, worst=lambda: worst, headline=lambda: "")


def _closest(aim, examples):
    seen = []

    def judge(x):
        seen.append(x)
        return _verdict(x)

    verdict, count = find_failure(st.integers(0, 10**6), judge, examples=examples, seed=3, shrink=False, aim=aim)
    assert verdict is None and count == len(seen)
    return min(abs(x - PEAK) for x in seen), seen


def test_target_climbs_to_the_edge_with_room_for_its_phase():
    # 100 examples: the target phase has the last 50 (seen: 7292 from the peak without, 733 with
    # under pytest, 66 with in a plain process: the climb is not the same in both, the gain is large)
    without, _ = _closest(False, 100)
    with_, _ = _closest(True, 100)
    print(f"closest to the peak in 100 examples: {without} without target(), {with_} with")
    assert with_ < without / 4, (with_, without)


def test_the_draws_before_the_target_phase_are_the_same_and_a_ci_chunk_leaves_it_no_room():
    # Hypothesis starts its target phase at max(examples // 2, 10) valid examples and stops at
    # `examples`: a ci chunk (10 examples) or a quick one (4) never reaches it
    for examples in (4, 10):
        assert _closest(False, examples)[1] == _closest(True, examples)[1]
    assert _closest(False, 40)[1][:20] == _closest(True, 40)[1][:20]


def test_k3diff_target_is_read_once_and_reaches_every_fuzzed_chunk(monkeypatch, tmp_path):
    import pytest

    from k3diff import session as session_mod
    from k3diff.session import Session, UsageProblem, target_wanted

    assert target_wanted({}) is False and target_wanted({"K3DIFF_TARGET": "on"}) is True
    with pytest.raises(UsageProblem, match="K3DIFF_TARGET='maybe': on or off"):
        target_wanted({"K3DIFF_TARGET": "maybe"})
    asked = []
    monkeypatch.setattr(session_mod, "find_failure", lambda *a, **kw: (asked.append(kw["aim"]), (None, 0))[1])
    for value, want in (("on", True), ("off", False)):
        monkeypatch.setenv("K3DIFF_TARGET", value)
        session = Session(backend_name="torch-blocked", device="cpu", seed=1, profile="quick", save_dir=tmp_path,
                          isolate=False)
        monkeypatch.setenv("K3DIFF_TARGET", "off" if want else "on")      # read once: at the start
        try:
            session.fuzz("moe", 0, lambda *a: None)
        finally:
            session.close()
        assert asked.pop() is want


def test_the_measurement_table_sets_each_mutant_side_by_side():
    import importlib.util
    from pathlib import Path

    from k3diff.mutants import HuntResult

    path = Path(__file__).resolve().parents[2] / "scripts" / "target_effect.py"
    spec = importlib.util.spec_from_file_location("target_effect", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    def hunts(*counts):
        return [HuntResult("m", "a", c is not None, c or 40, 0.0) for c in counts]

    rows = [("early", 1, hunts(2, 2), hunts(2, 2)), ("late", 1, hunts(30, None), hunts(25, 33)),
            ("worse", 1, hunts(21, 22), hunts(None, 22))]
    lines = script.table(rows, [0, 1], 40)
    assert lines[2].split()[-1] == "same" and lines[3].split()[-1] == "sooner" and lines[4].split()[-1] == "later"
    assert " 30  -" in lines[3] and " 25 33" in lines[3] and lines[3].split()[-3:-1] == ["70", "58"]
    assert lines[-1] == "3 mutants x 2 seeds: caught 5 without, 5 with; target() sooner on 1, later on 1, the same on 1"
    assert script.main(["--only", "no_such_mutant"]) == 4
