"""A dry run of the nightly's report job (scripts/nightly_report.py) on the CPU: shards as the
artifacts download them, one missing, one cut short, one failing, and the previous night compared;
every way a shard can judge nothing (its backend did not load, nothing judged, a bad seed, a 0-byte
file, two artifacts of one shard, another seed) fails the merge with its own status and one line."""
import json
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_report import _cases, _write_run     # tests/k3diff is on sys.path (rootdir conftest)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "nightly_report.py"


def _shard(root, name, cases, end=True, seed=5, status=None, saved=None, folder=None):
    """A shard's artifact: its results file (`status`: the end record's exit status) and, with
    `saved`, the status file the workflow writes beside it."""
    folder = root / (folder or f"nightly-shard-{name}")          # one folder per downloaded artifact
    folder.mkdir(parents=True, exist_ok=True)
    path = _write_run(folder / f"results-{name}.jsonl", seed, cases, shard=name, end=end)
    if status is not None:
        lines = path.read_text().splitlines()
        tail = json.loads(lines[-1])
        tail.update(exitstatus=status, cases=len(cases))
        path.write_text("\n".join(lines[:-1] + [json.dumps(tail)]) + "\n")
    if saved is not None:
        (folder / f"status-{name}.txt").write_text(f"{saved}\n")
    return path


def _job(tmp_path, *args):
    summary = tmp_path / "summary.md"
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "shards"), "--out", str(tmp_path / "out"),
                           "--summary", str(summary), *args], capture_output=True, text=True, timeout=limit(300))
    return done.returncode, done.stdout + done.stderr, summary.read_text() if summary.exists() else ""


def test_two_shards_one_missing_fails(tmp_path):
    _shard(tmp_path / "shards", "small-moe", _cases([0.1, 0.2]))
    rc, out, summary = _job(tmp_path, "--expected", "small-moe,full-moe")
    assert rc == 3, out
    assert "shard(s) full-moe of 2 missing" in out and "missing" in summary
    assert (tmp_path / "out" / "nightly-report.html").exists()         # the shard that came is still reported
    assert "FAIL" in (tmp_path / "out" / "notify.txt").read_text()


def test_every_shard_complete_and_passing_passes(tmp_path):
    for name in ("small-moe", "full-moe"):
        _shard(tmp_path / "shards", name, _cases([0.1, 0.2]))
    rc, out, summary = _job(tmp_path, "--expected", "small-moe,full-moe")
    assert rc == 0, out
    assert "k3diff nightly: pass" in summary and "| moe |" in summary


@pytest.mark.parametrize("what, rc, message", [("failing", 1, "1 distinct failing case"),
                                                ("cut", 3, "cut short (no end record")])
def test_a_failing_or_cut_shard_fails(tmp_path, what, rc, message):
    _shard(tmp_path / "shards", "1", _cases([0.1, 0.2]))
    _shard(tmp_path / "shards", "2", _cases([0.1, 3.0], failing={1}) if what == "failing" else _cases([0.1]),
           end=what != "cut")
    code, out, _ = _job(tmp_path, "--expected", "2")
    assert code == rc and message in out, out


def test_the_previous_night_is_compared_in_the_summary(tmp_path):
    prev = tmp_path / "previous"
    prev.mkdir()
    _write_run(prev / "results-1.jsonl", 5, _cases([0.1, 0.2, 0.3]))
    _shard(tmp_path / "shards", "1", _cases([0.1, 0.2, 3.0], failing={2}))
    code, out, summary = _job(tmp_path, "--expected", "1", "--previous", str(prev))
    assert code == 1, out
    assert "1 newly failing" in summary and "| moe/out |" in summary
    assert (tmp_path / "out" / "compare.html").exists()


def _fails_with(tmp_path, rc, message, *args):
    code, out, summary = _job(tmp_path, "--expected", "small-moe,small-mla", *args)
    assert code == rc, out
    err_lines = [line for line in out.splitlines() if line.startswith("nightly_report:")]
    assert any(message in line for line in err_lines), out
    assert "FAIL" in summary and message in (tmp_path / "out" / "notify.txt").read_text()
    return out


@pytest.mark.parametrize("status, rc, message", [
    (8, 8, "shard small-mla: its backend did not load (pytest exit 8)"),
    (6, 6, "shard small-mla: judged nothing (pytest exit 6)"),
    (9, 9, "shard small-mla: read a seed it cannot use (pytest exit 9)"),
    (11, 11, "shard small-mla: pytest exit 11 (not on this machine)"),
])
def test_a_shard_that_judged_nothing_fails_the_merge_with_its_own_status(tmp_path, status, rc, message):
    _shard(tmp_path / "shards", "small-moe", _cases([0.1, 0.2]))
    _shard(tmp_path / "shards", "small-mla", [], status=status)
    _fails_with(tmp_path, rc, message)


def test_the_status_the_workflow_saved_is_read_over_the_end_record(tmp_path):
    _shard(tmp_path / "shards", "small-moe", _cases([0.1, 0.2]))
    _shard(tmp_path / "shards", "small-mla", _cases([0.1]), saved=6)   # its end record says 0
    _fails_with(tmp_path, 6, "shard small-mla: judged nothing (pytest exit 6)")


def test_a_shard_whose_cases_are_none_fails_even_with_exit_0(tmp_path):
    _shard(tmp_path / "shards", "small-moe", _cases([0.1, 0.2]))
    _shard(tmp_path / "shards", "small-mla", [])
    _fails_with(tmp_path, 6, "shard small-mla: judged nothing (no case in its results, pytest exit 0)")


@pytest.mark.parametrize("saved, rc", [(None, 3), (8, 8)])
def test_a_0_byte_results_file_fails_the_merge(tmp_path, saved, rc):
    _shard(tmp_path / "shards", "small-moe", _cases([0.1, 0.2]))
    folder = tmp_path / "shards" / "nightly-shard-small-mla"
    folder.mkdir()
    (folder / "results-small-mla.jsonl").write_text("")
    if saved is not None:
        (folder / "status-small-mla.txt").write_text(f"{saved}\n")
    out = _fails_with(tmp_path, rc, "shard small-mla: its results file is empty (0 bytes)")
    assert (saved is None) == ("pytest exit" not in out.split("empty (0 bytes)")[1].splitlines()[0])


def test_two_artifacts_of_one_shard_fail_the_merge(tmp_path):
    _shard(tmp_path / "shards", "small-moe", _cases([0.1, 0.2]))
    _shard(tmp_path / "shards", "small-mla", _cases([0.1]))
    _shard(tmp_path / "shards", "small-mla", _cases([0.1, 3.0], failing={1}), folder="nightly-shard-small-mla-rerun")
    _fails_with(tmp_path, 12, "shard small-mla: 2 artifacts hold it")


@pytest.mark.parametrize("given", [True, False])
def test_a_shard_of_another_seed_fails_the_merge(tmp_path, given):
    _shard(tmp_path / "shards", "small-moe", _cases([0.1, 0.2]))
    _shard(tmp_path / "shards", "small-mla", _cases([0.1]), seed=6)
    _shard(tmp_path / "shards", "small-kda", _cases([0.1]))
    code, out, _ = _job(tmp_path, "--expected", "small-moe,small-mla,small-kda", *(["--seed", "5"] if given else []))
    assert code == 13, out
    assert "nightly_report: shard small-mla: ran seed 6, not the run's seed 5" in out


def test_the_plans_seed_is_checked_even_when_every_shard_agrees(tmp_path):
    _shard(tmp_path / "shards", "small-moe", _cases([0.1, 0.2]), seed=6)
    _shard(tmp_path / "shards", "small-mla", _cases([0.1]), seed=6)
    _fails_with(tmp_path, 13, "shard small-moe: ran seed 6, not the run's seed 5", "--seed", "5")


def test_a_missing_shard_fails_the_merge_with_one_line(tmp_path):
    _shard(tmp_path / "shards", "small-moe", _cases([0.1, 0.2]))
    _fails_with(tmp_path, 3, "shard(s) small-mla of 2 missing")


def test_a_real_shard_whose_backend_does_not_load_fails_the_merge(tmp_path):
    """pytest --k3diff with a backend that cannot be imported: its results file holds the start
    record and an end record with exit 8 (not 0 bytes), and the merge fails with 8 naming it."""
    shards = tmp_path / "shards"
    _shard(shards, "small-moe", _cases([0.1, 0.2]))
    folder = shards / "nightly-shard-small-mla"
    folder.mkdir(parents=True)
    (tmp_path / "test_suite.py").write_text("from k3diff.suite import test_fuzz  # noqa\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "pytest", "test_suite.py", "--k3diff", "--k3diff-backend",
                           "no_such_module:Thing", "--k3diff-seed", "5", "--k3diff-report",
                           str(folder / "results-small-mla.jsonl"), "-p", "no:cacheprovider", "-p", "no:randomly"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=limit(300))
    assert done.returncode == 8, done.stdout + done.stderr
    lines = [json.loads(line) for line in (folder / "results-small-mla.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in lines] == ["run", "end"] and lines[0]["seed"] == 5
    assert lines[1]["exitstatus"] == 8 and "no_such_module" in lines[1]["error"]
    _fails_with(tmp_path, 8, "shard small-mla: its backend did not load (pytest exit 8) (cannot import")
