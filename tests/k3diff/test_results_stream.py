"""Results that survive a kill: an `-n 2` run killed mid-item keeps, in its workers' streamed parts,
every case judged before the kill; the shard reads as cut short (no end record)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITE = "from k3diff.suite import test_batch_invariance, test_fuzz, test_seed  # noqa\n"

# the witness: after the plugin has handled a judged case, note (worker, case id) in a side file
WITNESS = '''
import os
from k3diff import plugin
from k3diff.corpus import case_id

_orig = plugin._ItemRun._on_case


def _on_case(self, case, verdict, *args, **kwargs):
    _orig(self, case, verdict, *args, **kwargs)
    with open(os.environ["K3DIFF_WITNESS"], "a") as fh:
        fh.write(os.environ.get("PYTEST_XDIST_WORKER", "-") + " " + case_id(case) + "\\n")


plugin._ItemRun._on_case = _on_case
'''


def test_a_killed_xdist_run_keeps_every_case_judged_before_the_kill(tmp_path):
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "kill_witness.py").write_text(WITNESS)
    witness, results, log = tmp_path / "witness.txt", tmp_path / "r.jsonl", tmp_path / "run.log"
    env = dict(os.environ, K3DIFF_WITNESS=str(witness), K3DIFF_PROGRESS="off",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    # ci profile: 10 cases an item, so a kill after 4 judged cases lands inside the first items,
    # where a controller that writes an item's cases when the item ends would have none of them
    out = log.open("w")
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "test_suite.py", "-p", "kill_witness", "-n", "2",
                             "--k3diff", "--k3diff-backend", "torch-blocked", "--k3diff-profile", "ci",
                             "--k3diff-seed", "3", "-k", "fuzz", "--k3diff-report", str(results),
                             "-p", "no:cacheprovider", "-p", "no:randomly"],
                            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None and not (
                witness.exists() and witness.read_text().count("\n") >= 4):
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        out.close()
    judged = [line.split() for line in witness.read_text().splitlines()]
    # a worker other than gw0/gw1 is xdist's replacement for one that died: a crash, shown with the log
    assert len(judged) >= 4 and {w for w, _ in judged} <= {"gw0", "gw1"}, (judged, log.read_text()[-3000:])
    for worker in {w for w, _ in judged}:
        part = tmp_path / f"r.{worker}.jsonl"
        lines = [json.loads(x) for x in part.read_text().splitlines()]
        ids = {x["id"] for x in lines if x["kind"] == "case"}
        assert lines[0]["kind"] == "run" and lines[0]["worker"] == worker
        missing = [i for w, i in judged if w == worker and i not in ids]
        assert not missing, f"judged before the kill but not in {part.name}: {missing}"
        assert all(x["kind"] != "end" for x in lines)            # killed: no end record
    head = json.loads(results.read_text().splitlines()[0])
    assert head["kind"] == "run" and head["parts"] and head["started"]
    from k3diff.report.load import load

    run = load([results])                                       # the parts are read with the shard's file
    assert {c["id"] for c in run.cases} >= {i for _, i in judged}
    assert str(results) in run.truncated and any("without its end record" in w for w in run.warnings)


def test_the_recorded_commit_says_when_the_tree_was_not_that_commit(tmp_path):
    """A working tree sent to a GPU machine over a stale clone ran code its HEAD does not name: the
    record says "+modified" (the H200 runs of 2026-12-02 recorded a0a39ed for 65bbe65's code)."""
    import subprocess

    from k3diff.results import _git_commit

    git = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    (tmp_path / "f.py").write_text("a = 1\n")
    git("add", "f.py")
    git("-c", "user.email=x@y", "-c", "user.name=x", "commit", "-qm", "one")
    clean = _git_commit(tmp_path)
    assert clean and len(clean) == 40 and not clean.endswith("+modified")
    (tmp_path / "new.py").write_text("")                # untracked files do not count
    assert _git_commit(tmp_path) == clean
    (tmp_path / "f.py").write_text("a = 2\n")
    assert _git_commit(tmp_path) == clean + "+modified"
