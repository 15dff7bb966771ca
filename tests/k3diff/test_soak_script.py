"""scripts/gpu_check.sh's soak lane, the false-alarm soak: seed after seed until a target of judged
runs, a report per seed written as it goes, one merged table; a planted bug shows as failing cases
in that table, and the lane is red."""
import os
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _soak(tmp_path, backend, select="kda"):
    """The lane on the CPU: its cases judged in the workers' own processes (what is checked here is
    the lane's loop, its reports and its table, not the isolation, whose child costs seconds a seed)."""
    env = dict(os.environ, SEEDS="7 8 9", WORKERS="1", TARGET="12", BACKEND=backend, NGPU="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests" / "k3diff"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(tmp_path), "soak",
                           "--", "-k", select, "--k3diff-profile", "quick", "--k3diff-isolate", "off"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=limit(600))
    return done, (tmp_path / "soak" / "stdout.txt").read_text()


def test_soak_stops_at_its_target_and_prints_the_merged_table(tmp_path):
    done, out = _soak(tmp_path, "torch-blocked")
    assert done.returncode == 0, out + done.stderr
    soak = tmp_path / "soak"
    reports = sorted(p for p in soak.glob("soak-*.jsonl") if ".gw" not in p.name)
    assert [p.name for p in reports] == ["soak-7.jsonl", "soak-8.jsonl"]      # 2 seeds reach 12 runs
    assert sorted(soak.glob("soak-*.gw*.jsonl"))                               # the workers' streamed parts
    assert "judged runs in" in out and "| kda |" in out
    assert "0 distinct failing" in out


def test_a_wrong_candidate_shows_in_the_soak_table(tmp_path):
    # one fuzz item: its failure and the shrink after it are past the target in the first seed
    done, out = _soak(tmp_path, "broken_candidate:BiasInWeights", "test_fuzz[0-moe]")
    rows = [line for line in out.splitlines() if line.startswith("| moe |")]
    assert rows and int(rows[0].split("|")[3]) > 0, out + done.stderr
    assert done.returncode == 1 and "a false alarm" in out
    # its seeds stay in the soak's folder: nothing left in the checkout
    assert list((tmp_path / "soak" / "seeds").glob("*.json"))
    assert not list((ROOT / "corpora" / "failures").glob("moe-*.json")), "a seed left in the checkout"
