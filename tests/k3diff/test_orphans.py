"""The parent of candidate processes leaves nothing running and reads a broken process as a crash
(k3diff/orphans.py, k3diff/closed_output.py): a candidate that daemonises a child in a session of
its own, or closes its own stdout/stderr."""
import os
import signal
import sys
from pathlib import Path

import pytest

from k3diff.case import Case
from k3diff.isolation import IsolatedChecker

HERE = Path(__file__).parent
BAD, GOOD = Case("moe", batch=3), Case("moe", batch=1)
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="subreaper and /proc: Linux")


def _checker(name, tmp_path):
    if str(HERE) not in sys.path:        # the child gets this process's sys.path
        sys.path.insert(0, str(HERE))
    return IsolatedChecker(f"orphan_candidates:{name}", name, device="cpu", inflight_dir=tmp_path)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state != b"Z"


@pytest.fixture
def daemon_pid(tmp_path, monkeypatch):
    """The pid the candidate's daemon writes; killed here if a test left it running."""
    path = tmp_path / "daemon.pid"
    monkeypatch.setenv("K3DIFF_TEST_DAEMON_PIDFILE", str(path))
    read = lambda: int(path.read_text())          # noqa: E731
    yield read
    if path.exists() and _running(read()):
        os.kill(read(), signal.SIGKILL)


@linux_only
def test_a_daemonised_child_dies_with_the_candidate_process(tmp_path, daemon_pid):
    checker = _checker("Daemonises", tmp_path)
    try:
        assert checker.check(BAD).ok
        pid = daemon_pid()
        assert _running(pid)                        # a daemon indeed: it outlived the middle process
        assert os.getsid(pid) == pid != os.getsid(0)
    finally:
        checker.close()
    # before the parent was a subreaper, init adopted the `sleep` and it ran on for 300 s
    assert not _running(pid), f"the candidate's daemon {pid} survived the run"


@linux_only
def test_a_daemonised_child_dies_when_the_candidate_process_dies(tmp_path, daemon_pid):
    checker = _checker("DaemonisesThenDies", tmp_path)
    try:
        verdict = checker.check(BAD)
        assert verdict.error.startswith("crash: the candidate process died (exit status 3)"), verdict.error
        assert not _running(daemon_pid()), "the dead candidate's daemon survived its case"
        assert checker.check(GOOD).ok
    finally:
        checker.close()


def test_a_candidate_that_closes_its_own_output_is_a_crash(tmp_path):
    checker = _checker("ClosesOutput", tmp_path)
    try:
        verdict = checker.check(BAD)
        # before: "OSError: [Errno 9] Bad file descriptor", an error of the kernel's own code, and
        # the next case ran in the same process with no stdout/stderr
        assert verdict.error == ("crash: the candidate process broke its own output: stdout (fd 1) closed, "
                                 "stderr (fd 2) closed"), verdict.error
        assert checker.check(GOOD).ok
        assert checker.started == 2                 # a fresh process for the next case
    finally:
        checker.close()


def test_the_orphan_sweep_spares_the_processes_own_children(tmp_path):
    # an unmarked child in another session (a helper this process started itself) is not an orphan
    import subprocess

    from k3diff import orphans

    own = subprocess.Popen(["sleep", "60"], start_new_session=True)
    marked = subprocess.Popen(["sleep", "60"], start_new_session=True, env=orphans.marked_env())
    try:
        orphans.started(marked.pid)                 # a candidate process in use: spared too
        assert orphans.ended(None) == []
        assert own.poll() is None and marked.poll() is None
        orphans.ended(marked.pid)                   # no longer in use: swept
        assert marked.poll() is not None or marked.wait(5) is not None
        assert own.poll() is None
    finally:
        for p in (own, marked):
            if p.poll() is None:
                p.kill()
                p.wait()


@linux_only
def test_a_daemonised_child_of_an_ep_rank_dies_with_the_run(tmp_path, daemon_pid):
    from k3diff.case import moe_case

    checker = _checker("DaemonisingRanks", tmp_path)     # spawned after setenv: its ranks see the pid file
    try:
        verdict = checker.check(moe_case(2, batch=1))
        assert verdict.ok, verdict.error
        pid = daemon_pid()
        assert _running(pid) and os.getsid(pid) == pid
    finally:
        checker.close()
    assert not _running(pid), f"the EP rank's daemon {pid} survived the run"
