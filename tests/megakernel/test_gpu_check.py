"""CPU: scripts/gpu_check.sh, the GPU checks as named lanes. Its dry run (GPU_CHECK_DRY=1) prints
each lane's commands; its lane runner takes each lane once over the GPUs it is given, reports each
lane's GPU, time and exit status, folds the logs into one file, and fails when a lane fails or
hits its timeout; the full and time lanes are red without K3's real dims (a fake pytest)."""
import json
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
DEFAULT = ["tests", "ci", "full", "mutants", "sanitize", "side"]


def _run(out, *lanes, script=SCRIPT, **env):
    e = dict(os.environ, **env)
    r = subprocess.run(["bash", str(script), str(out), *lanes], cwd=ROOT, env=e, capture_output=True,
                       text=True, timeout=limit(300))
    tsv = Path(out) / "lanes.tsv"
    rows = [ln.split("\t") for ln in tsv.read_text().splitlines()[1:]] if tsv.exists() else []
    return r, rows


def test_dry_run_takes_every_default_lane_once(tmp_path):
    r, rows = _run(tmp_path / "out", GPU_CHECK_DRY="1", NGPU="3")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(row[0] for row in rows) == sorted(DEFAULT)
    assert {row[1] for row in rows} <= {"0", "1", "2"} and all(row[3] == "0" for row in rows)
    log = (tmp_path / "out" / "check.log").read_text()
    assert "dry: python3 -m pytest" in log
    ci = (tmp_path / "out" / "ci" / "commands.txt").read_text()
    assert all(f"--k3diff-profile ci -k {s} " in ci for s in ("moe", "mla", "kda", "layer"))
    assert "MEGAKERNEL_STREAMS=persistent " in ci and "MK_MLA_MMA=0 " in ci and "MK_MLA_MMA=sync " in ci


def test_the_full_lane_runs_every_stage_at_the_full_preset_in_the_ci_profile(tmp_path):
    r, _ = _run(tmp_path, "full", GPU_CHECK_DRY="1")
    assert r.returncode == 0, r.stdout + r.stderr
    cmds = [c for c in (tmp_path / "full" / "commands.txt").read_text().splitlines() if "pytest" in c]
    assert [c.split(" -k ")[1].split()[0] for c in cmds] == ["moe", "mla", "kda", "layer"]
    assert all("--k3diff-preset full" in c and "--k3diff-profile ci" in c and "--k3diff-report" in c
               for c in cmds)


def test_every_planted_bug_applies_and_a_stale_one_is_red(tmp_path):
    r, _ = _run(tmp_path / "ok", "mutants", GPU_CHECK_DRY="1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "ok" / "mutants" / "commands.txt").read_text().count("plant ") == 12
    # the route kernel changed under the expression: the dry run says so and fails
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, tree / "scripts")
    shutil.copytree(ROOT / "megakernel", tree / "megakernel", ignore=shutil.ignore_patterns("__pycache__"))
    route = tree / "megakernel" / "k_route.py"
    route.write_text(route.read_text().replace("(oi < i)", "(i > oi)").replace("if vals[j] > bv:", "if bv < vals[j]:"))
    r, rows = _run(tmp_path / "stale", "mutants", script=tree / "scripts" / "gpu_check.sh", GPU_CHECK_DRY="1")
    assert r.returncode == 1 and rows[0][3] == "1"
    assert "NOT APPLIED" in (tmp_path / "stale" / "mutants" / "route.txt").read_text()


def test_a_failing_or_timed_out_lane_fails_the_run_and_keeps_the_others(tmp_path):
    lanes = "ok=echo fine\nbad=echo oops; exit 3\nslow=sleep 5"
    r, rows = _run(tmp_path / "out", NGPU="2", GPU_CHECK_LANES=lanes, LANE_TIMEOUT="1")
    assert r.returncode == 1 and "a lane exited non-zero" in r.stderr
    assert {row[0]: row[3] for row in rows} == {"ok": "0", "bad": "3", "slow": "124"}
    log = (tmp_path / "out" / "check.log").read_text()
    assert "fine" in log and "oops" in log


@pytest.mark.parametrize("args,env,msg", [
    ((), dict(GPU_CHECK_LANES="nonsense"), "a lane is name=command"),
    ((), dict(NGPU="0"), "no GPU found"),
    (("nonsense",), {}, "unknown lane 'nonsense'"),
    (None, {}, "usage: bash scripts/gpu_check.sh OUTDIR")])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, env, msg):
    cmd = ["bash", str(SCRIPT)] + ([] if args is None else [str(tmp_path / "out"), *args])
    r = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, **env), capture_output=True, text=True, timeout=limit(60))
    assert r.returncode == 2 and msg in r.stderr and len(r.stderr.strip().splitlines()) == 1


def _fake_pytest(tmp_path, stages, summary, preset):
    """A fake python3 on PATH: pytest prints `summary` and writes a results file of one case a
    stage; anything else runs the real python3."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    recs = [{"kind": "case", "stage": s, "seconds": 1.0, "label": "x", "coverage": {"preset": preset}}
            for s in stages.split(",")]
    (tmp_path / "case.json").write_text("".join(json.dumps(r) + "\n" for r in recs))
    real = shutil.which("python3")
    (bin_ / "python3").write_text(f"""#!/usr/bin/env bash
if [ "$2" = "pytest" ]; then
  for a in "$@"; do case "$prev" in --k3diff-report) cp {tmp_path}/case.json "$a" ;; esac; prev=$a; done
  printf '%s\\n' "===== k3diff summary =====" "{summary}"; exit 0
fi
exec {real} "$@"
""")
    (bin_ / "python3").chmod(0o755)
    return dict(PATH=f"{bin_}:{os.environ['PATH']}", PYTHONPATH=str(ROOT), NGPU="1")


@pytest.mark.parametrize("summary,preset,ok", [
    ("never crossed: none (every declared boundary crossed)", "full", True),
    ("never crossed: kda batch 256 (seen: <)", "full", False),
    ("never crossed: none (every declared boundary crossed)", "small", False)],
    ids=["crossed", "a boundary missed", "no real dims"])
def test_the_full_lane_is_red_when_a_boundary_or_the_real_dims_are_missing(tmp_path, summary, preset, ok):
    env = _fake_pytest(tmp_path, "moe,mla,kda,layer", summary, preset)
    r, rows = _run(tmp_path / "out", "full", **env)
    assert (r.returncode == 0) == ok, r.stdout + r.stderr + (tmp_path / "out" / "check.log").read_text()


@pytest.mark.parametrize("stages,ok", [("moe,mla,kda,layer", True), ("moe,mla,kda", False)],
                         ids=["every stage at real dims", "layer forgotten"])
def test_the_time_lane_fails_a_run_without_real_dims_in_every_stage(tmp_path, stages, ok):
    env = _fake_pytest(tmp_path, stages, "never crossed: none", "full")
    r, _ = _run(tmp_path / "out", "time", **env)
    out = (tmp_path / "out" / "time" / "stdout.txt").read_text()
    assert (r.returncode == 0) == ok, out
    assert "pytest after" in out and "cases/s" in out
