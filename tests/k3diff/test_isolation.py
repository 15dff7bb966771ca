"""Crash and hang isolation (k3diff.isolation): a candidate that aborts, segfaults, exits, reports a
sticky CUDA error or never returns fails the case; the next case runs in a fresh child."""
import json
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)
import os
import subprocess
import sys
from pathlib import Path

import pytest

from k3diff.case import Case
from k3diff.isolation import IsolatedChecker

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
BAD, GOOD = Case("moe", batch=3), Case("moe", batch=1)


def _checker(name, tmp_path, timeout=None):
    if str(HERE) not in sys.path:        # the child gets this process's sys.path
        sys.path.insert(0, str(HERE))
    return IsolatedChecker(f"crashing_candidates:{name}", name, device="cpu", timeout=timeout, inflight_dir=tmp_path)


@pytest.mark.parametrize("name, expect", [
    ("Abort", "crash: the candidate process died (signal SIGABRT)"),
    ("Segfault", "crash: the candidate process died (signal SIGSEGV)"),
    ("Exit", "crash: the candidate process died (exit status 3)"),
    ("StickyError", "crash: sticky device error: RuntimeError: CUDA error: an illegal memory access"),
])
def test_crash_fails_the_case_and_the_next_case_runs_in_a_fresh_child(tmp_path, name, expect):
    checker = _checker(name, tmp_path)
    try:
        verdict = checker.check(BAD)
        assert not verdict.ok and verdict.error.startswith(expect), verdict.error
        inflight = json.loads(checker.inflight_path.read_text())       # the case that was running
        assert Case.from_dict(inflight["case"]) == BAD
        again = checker.check(GOOD)
        assert again.ok, again.failures()
        assert checker.started == 2
    finally:
        checker.close()
    assert not checker.inflight_path.exists()


def test_hang_is_killed_after_the_timeout(tmp_path):
    checker = _checker("Hang", tmp_path, timeout=4)
    try:
        verdict = checker.check(BAD)
        assert verdict.error.startswith("hang: no verdict within 4 s"), verdict.error
        assert checker.check(GOOD).ok
    finally:
        checker.close()


def _cli(cwd, *args):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{HERE}"}
    return subprocess.run([sys.executable, "-m", "k3diff.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=limit(600), env=env)


def _seed(tmp_path, case=None, **extra):
    case = case or {"stage": "moe", "version": 1, "batch": 3}
    path = tmp_path / "seed.json"
    path.write_text(json.dumps({"k3diff_seed_format": 1, "case": case, **extra}))
    return path


def test_replay_of_a_hang_reports_it_and_exits_1(tmp_path):
    done = _cli(tmp_path, "replay", str(_seed(tmp_path)), "--backend", "crashing_candidates:Hang", "--timeout", "4")
    assert done.returncode == 1, done.stderr
    assert "hang: no verdict within 4 s" in done.stdout.splitlines()[0]


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("crasher", ["CudaIllegalAddress", "CudaDeviceAssert"])
def test_cuda_illegal_address_is_a_crash_not_a_dead_run(tmp_path, crasher):
    done = _cli(tmp_path, "replay", str(_seed(tmp_path)), "--backend", f"crashing_candidates:{crasher}",
                "--device", "cuda")
    assert done.returncode == 1, done.stderr
    assert "crash:" in done.stdout.splitlines()[0]
    ok = _cli(tmp_path, "replay", str(_seed(tmp_path, {"stage": "moe", "version": 1, "batch": 1})),
              "--backend", f"crashing_candidates:{crasher}", "--device", "cuda")
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_fuzzing_a_crashing_candidate_saves_the_crash_unshrunk_and_replay_reproduces_it(pytester):
    pytester.makepyfile(test_suite="from k3diff.suite import test_fuzz  # noqa\n")
    pytester.makepyfile(crashing_candidates=(HERE / "crashing_candidates.py").read_text())
    report = pytester.path / "r.jsonl"      # seed 2: its moe draws reach batch 3 (the space moves as dimensions are added)
    result = pytester.runpytest_subprocess("--k3diff", "--k3diff-backend", "crashing_candidates:Abort",
                                           "--k3diff-seed", "2", "--k3diff-save", "seeds", "-k", "moe and not test_seed",
                                           "--k3diff-report", str(report), "-p", "no:cacheprovider")
    out = result.stdout.str()
    assert result.ret == 1, out
    assert "crash: the candidate process died (signal SIGABRT)" in out
    seeds = sorted((pytester.path / "seeds").glob("*.json"))
    assert len(seeds) == 1, out
    record = json.loads(seeds[0].read_text())
    assert record["case"]["batch"] == 3 and record["verdict"]["error"].startswith("crash:")
    records = [json.loads(line) for line in report.read_text().splitlines()]
    crashed = [r for r in records if r.get("kind") == "case" and (r["error"] or "").startswith("crash:")]
    assert len(crashed) == 1            # judged once: never shrunk
    assert not list((pytester.path / "seeds").glob(".inflight-*"))
    replay = _cli(pytester.path, "replay", str(seeds[0]), "--backend", "crashing_candidates:Abort")
    assert replay.returncode == 1, replay.stderr
    assert "crash:" in replay.stdout.splitlines()[0]
    assert "reproduced the recorded outcome (FAIL: crash)" in replay.stdout


def test_hunt_is_isolated_too(tmp_path):
    done = _cli(tmp_path, "hunt", "--backend", "crashing_candidates:Abort", "--stage", "moe", "--examples", "40",
                "--seed", "3")   # a seed whose draws reach batch 3 (the space moved: E 513 drawn too)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "crash: the candidate process died (signal SIGABRT)" in done.stdout


def test_an_isolated_candidates_scheduled_run_is_judged(tmp_path):
    """The scheduled run (graph replay, pressure) comes back from the candidate's process still
    marked as such, so it is judged against the eager run: under isolation the schedule hunt's
    pressure bugs ran their co-runner and were never compared (tests/k3diff/schedule_stand_in.py:
    the scheduled run on the CPU)."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    checker = IsolatedChecker("schedule_stand_in:OtherBitsUnderPressure", "stand-in", device="cpu",
                              inflight_dir=tmp_path)
    try:
        eager = checker.check(Case("moe", batch=3, seed=1).validate())
        assert eager.ok, eager.failures()
        v = checker.check(Case("moe", batch=3, seed=1, schedule="pressure:all_but_one").validate())
        bad = [r.tensor for r in v.reports if not r.ok]
        assert bad == ["router_logits@pressure:all_but_one"], v.failures()
    finally:
        checker.close()
