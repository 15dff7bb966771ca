"""A verdict the candidate cannot reach, and blame on the right party (k3diff.isolation,
k3diff.early_exit, k3diff.time_limits, k3diff.sizing.own_out_of_memory):

- isolated, the candidate's process only fills buffers: a forged verdict on the socket is a crash,
  a judge patched in its process judges nothing;
- with isolation off, a candidate that ends the process (os._exit(0), at import too) is exit 1
  with one line naming the case, which its in-flight note keeps;
- k3diff's own slowness is the machine's line (exit 11, no seed), not a hang;
- a timeout select() cannot take is refused in one line;
- the in-flight note never follows a link planted at its name;
- a candidate's out of memory on a tiny case is its failure, with a seed.
"""
import json
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)
import os
import subprocess
import sys
from pathlib import Path

import pytest

from k3diff import exit_codes as ex
from k3diff.case import Case
from k3diff.isolation import InProcessChecker, IsolatedChecker

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
BAD, GOOD = Case("moe", batch=3), Case("moe", batch=1)
SUITE = "from k3diff.suite import test_fuzz  # noqa\n"


def _checker(name, tmp_path, timeout=None):
    if str(HERE) not in sys.path:        # the child gets this process's sys.path
        sys.path.insert(0, str(HERE))
    return IsolatedChecker(f"crashing_candidates:{name}", name, device="cpu", timeout=timeout, inflight_dir=tmp_path)


def _cli(cwd, *args, env=None):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{HERE}", **(env or {})}
    return subprocess.run([sys.executable, "-m", "k3diff.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=limit(600), env=env)


def _seed(tmp_path, batch=3):
    path = tmp_path / f"seed-{batch}.json"
    path.write_text(json.dumps({"k3diff_seed_format": 1, "case": {"stage": "moe", "version": 1, "batch": batch}}))
    return path


@pytest.fixture
def project(pytester):
    pytester.makepyfile(test_suite=SUITE)
    pytester.makepyfile(crashing_candidates=(HERE / "crashing_candidates.py").read_text())
    return pytester


def test_a_verdict_forged_onto_the_socket_is_a_crash(tmp_path):
    checker = _checker("ForgesVerdict", tmp_path)
    try:
        verdict = checker.check(BAD)
        assert not verdict.ok and verdict.error.startswith("crash:"), (verdict.error, verdict.reports)
        assert "cannot read" in verdict.error
    finally:
        checker.close()


def test_a_judge_patched_in_the_candidates_process_judges_nothing(tmp_path):
    checker = _checker("PatchesJudge", tmp_path)
    try:
        for case in (BAD, GOOD):        # the second case meets the patched modules too
            verdict = checker.check(case)
            assert not verdict.ok and not verdict.error, verdict.error
    finally:
        checker.close()


@pytest.mark.parametrize("how", ["replay", "pytest"])
def test_isolation_off_an_exit_0_mid_case_is_exit_1_with_the_case(tmp_path, pytester, how):
    if how == "replay":
        done = _cli(tmp_path, "replay", str(_seed(tmp_path)), "--backend", "crashing_candidates:ExitsCleanly",
                    "--isolate", "off", env={"TMPDIR": str(tmp_path)})
        notes = list((tmp_path / "corpora" / "failures").glob(".inflight-*.json"))    # the CLI's --save
        rc, out, err = done.returncode, done.stdout, done.stderr
    else:
        pytester.makepyfile(test_suite=SUITE)
        pytester.makepyfile(crashing_candidates=(HERE / "crashing_candidates.py").read_text())
        result = pytester.runpytest_subprocess("--k3diff", "--k3diff-backend", "crashing_candidates:ExitsCleanly",
                                               "--k3diff-isolate", "off", "--k3diff-seed", "0", "--k3diff-save",
                                               "seeds", "-k", "fuzz and moe", "-p", "no:cacheprovider")
        rc, out, err = result.ret, result.stdout.str(), result.stderr.str()
        notes = list((pytester.path / "seeds").glob(".inflight-*.json"))
    assert rc == ex.FAIL, out + err
    lines = [line for line in err.splitlines() if "crash:" in line]
    assert len(lines) == 1 and "ended before its end" in lines[0] and "B=3" in lines[0], err
    assert "Traceback" not in err
    assert len(notes) == 1 and Case.from_dict(json.loads(notes[0].read_text())["case"]).batch == 3


def test_isolation_off_an_exit_0_at_import_is_exit_1(tmp_path):
    done = _cli(tmp_path, "replay", str(_seed(tmp_path)), "--backend", "exits_at_import:Backend", "--isolate", "off",
                env={"TMPDIR": str(tmp_path)})
    assert done.returncode == ex.FAIL, done.stdout + done.stderr
    assert done.stderr.strip().count("\n") == 0 and "no case was in flight" in done.stderr, done.stderr


def test_isolation_off_a_normal_run_keeps_its_status(tmp_path):
    done = _cli(tmp_path, "replay", str(_seed(tmp_path, 1)), "--backend", "crashing_candidates:ExitsCleanly",
                "--isolate", "off", env={"TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert not list(tmp_path.rglob(".inflight-*.json"))


SLOW_REFERENCE = """
import time

import k3diff.runner

_real = k3diff.runner.run_reference


def _slow(*args, **kwargs):
    time.sleep(0.6)
    return _real(*args, **kwargs)


k3diff.runner.run_reference = _slow
"""


def test_a_slow_reference_is_the_machines_line_not_a_hang(project, monkeypatch):
    # each case's reference sleeps past k3diff's own limit, and every case of the item waits for it:
    # one item (chunk 0 of moe), a short limit and a sleep just past it are the whole wait
    monkeypatch.setenv("K3DIFF_JUDGE_TIMEOUT", "0.3")
    project.makeconftest(SLOW_REFERENCE)
    result = project.runpytest_subprocess("--k3diff", "--k3diff-seed", "0", "--k3diff-profile", "quick",
                                          "--k3diff-timeout", "30", "-k", "test_fuzz[0-moe]", "--k3diff-save", "seeds",
                                          "-p", "no:cacheprovider")
    out = result.stdout.str()
    assert result.ret == ex.MACHINE, out
    assert "machine too slow" in out and "hang:" not in out, out
    assert not list((project.path / "seeds").glob("*.json"))


@pytest.mark.parametrize("value", ["1e300", "1e10"])
def test_a_timeout_select_cannot_take_is_one_line(project, value):
    result = project.runpytest_subprocess("--k3diff", "--k3diff-timeout", value, "-k", "fuzz and moe",
                                          "-p", "no:cacheprovider")
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == ex.USAGE, text
    assert "Traceback" not in text and "INTERNALERROR" not in text, text
    assert f"--timeout) {float(value):g} s is more than" in text


def test_a_large_timeout_is_capped_not_an_overflow(tmp_path):
    from k3diff.time_limits import MAX_WAIT

    checker = _checker("Abort", tmp_path, timeout=9e8)
    try:
        assert checker.timeout == MAX_WAIT
        assert checker.check(GOOD).ok
    finally:
        checker.close()


@pytest.mark.parametrize("isolated", [True, False])
def test_a_link_planted_at_the_inflight_note_is_not_followed(tmp_path, isolated):
    from k3diff.backends.blocked import TorchBlockedBackend

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    if isolated:
        checker = _checker("Abort", tmp_path)
    else:
        checker = InProcessChecker(TorchBlockedBackend(), device="cpu", inflight_dir=tmp_path)
    note = checker.inflight_path
    for planted in (note, note.with_suffix(".tmp")):       # the note's name and its old temporary name
        planted.symlink_to(victim)
    try:
        assert checker.check(GOOD).ok
        assert victim.read_text() == "keep me"
        assert not note.is_symlink() and Case.from_dict(json.loads(note.read_text())["case"]) == GOOD
    finally:
        checker.close()


def test_a_candidates_out_of_memory_on_a_tiny_case_is_its_failure_with_a_seed(project):
    result = project.runpytest_subprocess("--k3diff", "--k3diff-backend", "crashing_candidates:OutOfMemoryAlways",
                                          "--k3diff-seed", "0", "--k3diff-profile", "quick", "-k", "fuzz and moe",
                                          "--k3diff-save", "seeds", "-p", "no:cacheprovider")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == ex.FAIL, out
    assert "out of memory on a case of about" in out and "case too large" not in out, out
    assert "refused every case" not in out, out
    seeds = list((project.path / "seeds").glob("*.json"))
    assert seeds and json.loads(seeds[0].read_text())["case"]["batch"] == 3


def test_a_weight_written_in_the_candidates_process_fails_the_case(tmp_path):
    checker = _checker("ScribblesOnWeights", tmp_path)
    try:
        verdict = checker.check(GOOD)
        assert not verdict.ok and any("weight router.bias" in f for f in verdict.failures()), verdict.failures()
    finally:
        checker.close()


def test_a_reply_longer_than_the_request_could_bring_back_is_a_crash_at_once(tmp_path):
    """The parent reads a reply into one buffer of the length announced: a length past what the
    request's tensors could bring back is refused as it is read, not allocated (512 GiB here) and
    not waited for."""
    import time

    checker = _checker("ClaimsAHugeReply", tmp_path, timeout=20)
    start = time.monotonic()
    try:
        verdict = checker.check(GOOD)
    finally:
        checker.close()
    assert not verdict.ok and verdict.error.startswith("crash:") and "cannot read" in verdict.error, verdict.error
    assert str(1 << 39) in verdict.error
    assert time.monotonic() - start < 15
