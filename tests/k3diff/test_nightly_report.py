"""A dry run of the nightly's report job (scripts/nightly_report.py) on the CPU: shards as the
artifacts download them, one missing, one cut short, one failing, and the previous night compared."""
import subprocess
import sys
from pathlib import Path

import pytest

from test_report import _cases, _write_run     # tests/k3diff is on sys.path (rootdir conftest)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "nightly_report.py"


def _shard(root, name, cases, end=True):
    folder = root / f"nightly-shard-{name}"                      # one folder per downloaded artifact
    folder.mkdir(parents=True, exist_ok=True)
    return _write_run(folder / f"results-{name}.jsonl", 5, cases, shard=name, end=end)


def _job(tmp_path, *args):
    summary = tmp_path / "summary.md"
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "shards"), "--out", str(tmp_path / "out"),
                           "--summary", str(summary), *args], capture_output=True, text=True, timeout=300)
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
                                                ("cut", 3, "cut short (no end record)")])
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
