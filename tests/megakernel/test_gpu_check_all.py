"""CPU: scripts/gpu_check_all.sh, every GPU check as lanes side by side (one GPU each), runs each
lane exactly once over the GPUs it is given, reports each lane's GPU, time and exit code, folds
their logs into one file, and fails when a lane fails or hits its timeout."""
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check_all.sh"


def _run(tmp_path, **env):
    e = dict(os.environ, OUT=str(tmp_path / "out"), GPU_CHECK_WORK=str(tmp_path / "work"), **env)
    r = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=e, capture_output=True, text=True,
                       timeout=120)
    rows = []
    tsv = tmp_path / "out" / "lanes.tsv"
    if tsv.exists():
        rows = [ln.split("\t") for ln in tsv.read_text().splitlines()[1:]]
    return r, rows


def test_dry_run_takes_every_default_lane_once(tmp_path):
    r, rows = _run(tmp_path, GPU_CHECK_DRY="1", NGPU="3")
    assert r.returncode == 0, r.stderr
    names = [row[0] for row in rows]
    assert sorted(names) == sorted(["moe_tests", "moe_suites", "moe_planted", "moe_memcheck",
                                    "kda", "mla", "layer", "side"])
    assert {row[1] for row in rows} <= {"0", "1", "2"} and all(row[3] == "0" for row in rows)
    log = (tmp_path / "out" / "check_all.log").read_text()
    assert "dry: GPU" in log and "bash scripts/gpu_check_kda.sh" in log


def test_a_failing_or_timed_out_lane_fails_the_run_and_keeps_the_others(tmp_path):
    lanes = "ok=echo fine\nbad=echo oops; exit 3\nslow=sleep 5"
    r, rows = _run(tmp_path, NGPU="2", GPU_CHECK_LANES=lanes, LANE_TIMEOUT="1")
    assert r.returncode == 1 and "a lane exited non-zero" in r.stderr
    got = {row[0]: row[3] for row in rows}
    assert got == {"ok": "0", "bad": "3", "slow": "124"}
    log = (tmp_path / "out" / "check_all.log").read_text()
    assert "fine" in log and "oops" in log


@pytest.mark.parametrize("env,msg", [(dict(GPU_CHECK_LANES="nonsense"), "a lane is name=command"),
                                     (dict(NGPU="0"), "no GPU found")])
def test_bad_input_is_one_line_and_exit_2(tmp_path, env, msg):
    r, _ = _run(tmp_path, **env)
    assert r.returncode == 2 and msg in r.stderr and len(r.stderr.strip().splitlines()) == 1
