"""scripts/gpu_memory_check.sh (the GPU memory of the two processes, this tree against the base tree)
and its probe, scripts/memory_probe/sitecustomize.py, on the CPU. The whole dry run
(`GPU_MEMORY_DRY=1 BASE=<a tree of 850aeff> bash scripts/gpu_memory_check.sh OUT`) takes minutes on
the project's 2-core box; these check the parts that must not silently go wrong."""
import json
import os
import subprocess
import sys
from pathlib import Path
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_memory_check.sh"


def test_the_probe_writes_each_process_peak_and_role(tmp_path):
    """Loaded by every interpreter of the run (PYTHONPATH), the candidate's process included (started
    as `python -c`); a process killed outright still leaves its last sample."""
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'scripts' / 'memory_probe'}:{ROOT}", K3DIFF_MEMORY_PROBE=str(tmp_path))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        for _ in range(300):
            if (tmp_path / f"{child.pid}.json").exists():
                break
            subprocess.run(["sleep", "0.1"])
    finally:
        child.kill()
        child.wait()
    rec = json.loads((tmp_path / f"{child.pid}.json").read_text())
    assert rec["role"] == "child" and rec["peak_rss"] > 0 and "peak_reserved" not in rec   # no CUDA here
    prog = tmp_path / "prog"
    prog.mkdir()
    (prog / "run.py").write_text("pass\n")         # a short run: its exit still writes its sample
    subprocess.run([sys.executable, str(prog / "run.py")], env=env, check=True)
    roles = sorted(json.loads(p.read_text())["role"] for p in tmp_path.glob("*.json"))
    assert roles == ["child", "parent"]


def test_without_the_variable_the_probe_does_nothing(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "scripts" / "memory_probe"))
    env.pop("K3DIFF_MEMORY_PROBE", None)
    got = subprocess.run([sys.executable, "-c", "import sys, threading; print(len(threading.enumerate()), "
                          "'sitecustomize' in sys.modules)"], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert got.stdout.split() == ["1", "True"]
    assert not list(tmp_path.iterdir())


def test_bad_commands_are_one_line_and_exit_2(tmp_path):
    run = lambda *a, **env: subprocess.run(["bash", str(SCRIPT), *a], capture_output=True, text=True,  # noqa: E731
                                           env=dict(os.environ, **env), timeout=limit(60))
    got = run(str(tmp_path / "out"), BASE=str(tmp_path / "nowhere"))
    assert got.returncode == 2 and got.stderr.strip() == f"gpu_memory_check: no base tree at {tmp_path / 'nowhere'}"
    got = run(str(tmp_path / "out"), "speed", BASE=str(ROOT))
    assert got.returncode == 2 and "unknown lane 'speed'" in got.stderr
    got = run()
    assert got.returncode != 0 and "usage: bash scripts/gpu_memory_check.sh OUTDIR" in got.stderr
