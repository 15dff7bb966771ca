"""Where a run's time went: the summary's `time per case` line and the throughput tool's per-side
line, one wording (k3diff.summary.time_per_case) from the records' seconds per phase."""
import json
import tempfile
from pathlib import Path

from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)

from k3diff.summary import summary_lines

ROOT = Path(__file__).resolve().parents[2]


def rec(i, seconds, phases, stage="moe", phase="generate", skipped=None):
    out = {"stage": stage, "id": i, "ok": True, "skipped": skipped, "seconds": seconds, "tie_flips": 0,
           "forced": False, "worst": None, "error": None, "phase": phase, "item": "t[0]"}
    if phases is not None:
        out["phases"] = phases
    return out


def test_the_median_then_each_phase_s_share_largest_first_draw_for_materialize():
    from k3diff.summary import time_lines, time_per_case

    records = [rec("a", 1.0, {"materialize": 0.6, "reference": 0.2, "candidate": 0.1, "judge": 0.05,
                              "prepare": 0.0}),
               rec("b", 3.0, {"materialize": 1.8, "reference": 0.6, "candidate": 0.3, "judge": 0.15,
                              "prepare": 0.0}),
               rec("c", 2.0, {"materialize": 1.2, "reference": 0.4, "candidate": 0.2, "judge": 0.1,
                              "prepare": 0.0})]
    # 6 s in all: 3.6 drawing, 1.2 reference, 0.6 candidate, 0.3 judge, 0.3 no phase's
    assert time_lines(records) == ["time per case: median 2 s; draw 60% · reference 20% · candidate 10% "
                                   "· judge 5% · other 5%"]
    # no time outside the phases: no "other"
    exact = [rec("a", 0.31, {"materialize": 0.3, "judge": 0.01})]
    assert time_per_case(exact) == "median 0.31 s; draw 97% · judge 3%"


def test_shrink_steps_skipped_cases_and_records_without_phases_are_left_out():
    from k3diff.summary import time_lines

    whole = {"materialize": 0.5, "candidate": 0.5}
    records = [rec("a", 1.0, whole),
               rec("a", 1.0, whole),                                     # a worker's record met twice
               rec("b", 50.0, {"reference": 50.0}, phase="shrink"),     # a shrink step: not counted
               rec("c", 0.0, {"candidate": 0.2}, skipped="backend refuses"),
               rec("d", 9.0, None),                                     # an older results file's record
               rec("e", 0.0, {}),                                       # a crashed candidate's verdict
               rec("f", 3.0, {"materialize": 1.0, "judge": 2.0}, stage="moe-inv")]  # invariance: counted
    # a and f: 4 s in all, the median of 1 s and 3 s
    assert time_lines(records) == ["time per case: median 2 s; judge 50% · draw 38% · candidate 12%"]
    assert summary_lines(records)[1].split()[:2] == ["moe", "3"]    # the table still counts d and e


def test_a_run_without_phases_has_no_line():
    from k3diff.summary import time_lines, time_per_case

    assert time_lines([rec("d", 9.0, None), rec("e", 0.0, {})]) == []
    assert time_lines([]) == []
    assert time_per_case([rec("x", 1.0, {"judge": "slow"})]) is None          # not a number: not a phase


def test_the_throughput_tool_says_a_side_s_time_or_a_dash():
    from k3diff.tools.throughput import time_line, timing_of

    got = {"timing": [{"seconds": 0.4, "phases": {"materialize": 0.3, "judge": 0.1}}]}
    assert time_line("moe", "now", got) == "  moe (now) time per case: median 0.4 s; draw 75% · judge 25%"
    # a baseline whose verdicts carry no phases (an older tree): its worker sent none
    assert time_line("moe", "baseline", {"timing": []}) == "  moe (baseline) time per case: -"
    assert time_line("moe", "baseline", {}) == "  moe (baseline) time per case: -"

    class Old:                  # an older tree's verdict: no phases (this worker runs on its k3diff)
        seconds = 0.5

    assert timing_of(Old()) is None


def test_the_throughput_worker_sends_each_check_s_phases_beside_its_verdict():
    from k3diff.tools.throughput import _run_side, draw_cases

    drawn = draw_cases("kda", 2, None, "cpu", 12)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(drawn, f)
    try:
        got = _run_side(ROOT, f.name, "torch-blocked", "cpu", None)
    finally:
        Path(f.name).unlink()
    assert len(got["timing"]) == len(got["verdicts"]) + len(got["invariance"]) == 2 + len(got["invariance"])
    for t in got["timing"]:
        assert {"materialize", "reference", "candidate", "judge"} <= set(t["phases"]) and t["seconds"] > 0
    assert all("phases" not in v for v in got["verdicts"])         # to_dict() as the seed files have it


def test_a_pytest_run_prints_the_line(pytester):
    pytester.makepyfile(test_suite="from k3diff.suite import test_fuzz  # noqa\n")
    result = pytester.runpytest_subprocess("--k3diff", "--k3diff-backend", "torch-blocked", "--k3diff-seed", "3",
                                           "-k", "test_fuzz and 0-kda", "--k3diff-isolate", "off",
                                           "--k3diff-replay-saved", "off", "-p", "no:cacheprovider",
                                           "-p", "no:randomly", timeout=limit(600))
    out = result.stdout.str()
    assert result.ret == 0, out
    summary = out[out.index("k3diff summary"):].splitlines()
    line = [ln for ln in summary if ln.startswith("time per case: median ")]
    assert line and "draw " in line[0] and "reference " in line[0], summary
    # under the table, before the coverage lines
    assert summary.index(line[0]) == next(i for i, ln in enumerate(summary) if ln.startswith("kda ")) + 1
