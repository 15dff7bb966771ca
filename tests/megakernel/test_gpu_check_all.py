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
                                    "kda", "mla", "layer", "side",
                                    "prod_moe", "prod_mla", "prod_kda", "prod_layer"])
    assert {row[1] for row in rows} <= {"0", "1", "2"} and all(row[3] == "0" for row in rows)
    log = (tmp_path / "out" / "check_all.log").read_text()
    assert "dry: GPU" in log and "bash scripts/gpu_check_kda.sh" in log
    assert all(f"bash scripts/gpu_check_prod.sh {s}" in log for s in ("moe", "mla", "kda", "layer"))


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


PROD = ROOT / "scripts" / "gpu_check_prod.sh"


def test_the_production_lane_runs_every_stage_at_the_full_preset_in_the_ci_profile(tmp_path):
    """gpu_check.sh step 9 / the prod_* lanes: every stage, ci profile, --k3diff-preset full."""
    e = dict(os.environ, OUT=str(tmp_path), GPU_CHECK_DRY="1")
    r = subprocess.run(["bash", str(PROD)], cwd=ROOT, env=e, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    cmds = [ln for ln in r.stdout.splitlines() if ln.startswith("=== prod ")]
    assert [c.split()[2].rstrip(":") for c in cmds] == ["moe", "mla", "kda", "layer"]
    for c in cmds:
        assert "--k3diff-preset full" in c and "--k3diff-profile ci" in c and "--k3diff-report" in c
    assert "gpu_check_prod.sh" in (ROOT / "scripts" / "gpu_check.sh").read_text()
    r = subprocess.run(["bash", str(PROD), "nonsense"], cwd=ROOT, env=e, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def _fake_run(tmp_path, stages, summary, preset):
    """A fake python3 on PATH: pytest prints `summary`, writes a results file of one case a stage."""
    import json

    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    recs = [{"kind": "case", "stage": s, "seconds": 1.0, "label": "x", "coverage": {"preset": preset}}
            for s in stages.split(",")]
    (tmp_path / "case.json").write_text("".join(json.dumps(r) + "\n" for r in recs))
    real = subprocess.run(["bash", "-c", "command -v python3"], capture_output=True, text=True).stdout.strip()
    (bin_ / "python3").write_text(f"""#!/usr/bin/env bash
if [ "$2" = "pytest" ]; then
  for a in "$@"; do case "$prev" in --k3diff-report) cp {tmp_path}/case.json "$a" ;; esac; prev=$a; done
  printf '%s\n' "===== k3diff summary =====" "{summary}"; exit 0
fi
exec {real} "$@"
""")
    (bin_ / "python3").chmod(0o755)
    return dict(os.environ, OUT=str(tmp_path / "out"), PATH=f"{bin_}:{os.environ['PATH']}", PYTHONPATH=str(ROOT))


@pytest.mark.parametrize("summary,preset,ok", [
    ("never crossed: none (every declared boundary crossed)", "full", True),
    ("never crossed: kda batch 256 (seen: <)", "full", False),
    ("never crossed: none (every declared boundary crossed)", "small", False)],
    ids=["crossed", "a boundary missed", "no real dims"])
def test_the_production_lane_is_red_when_a_boundary_or_the_real_dims_are_missing(tmp_path, summary, preset, ok):
    e = _fake_run(tmp_path, "kda", summary, preset)
    r = subprocess.run(["bash", str(PROD), "kda"], cwd=ROOT, env=e, capture_output=True, text=True, timeout=120)
    assert (r.returncode == 0) == ok, r.stdout + r.stderr


@pytest.mark.parametrize("stages,ok", [("moe,mla,kda,layer", True), ("moe,mla,kda", False)],
                         ids=["every stage at real dims", "layer forgotten"])
def test_the_ci_timing_fails_a_run_without_real_dims_in_every_stage(tmp_path, stages, ok):
    e = _fake_run(tmp_path, stages, "never crossed: none", "full")
    r = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_ci_time.sh")], cwd=ROOT, env=e,
                       capture_output=True, text=True, timeout=120)
    assert (r.returncode == 0) == ok, r.stdout + r.stderr
    assert "pytest exit 0 after" in r.stdout and "cases/s" in r.stdout
