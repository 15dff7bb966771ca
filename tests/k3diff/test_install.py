"""k3diff from any folder (as an installed wheel runs it; scripts/wheel_check.sh does it with the wheel)."""
import os
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)
import subprocess
import sys
from pathlib import Path

from k3diff import exit_codes as ex
from k3diff.corpus import SHIPPED_REGRESSIONS

ROOT = Path(__file__).resolve().parents[2]


def _env():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYTEST_ADDOPTS", None)
    return env


def test_k3diff_from_an_empty_folder_collects_the_suite_and_the_shipped_seeds(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pytest", "--k3diff", "--co", "-q", "-p", "no:cacheprovider"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=limit(600), env=_env())
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    shipped = sorted(p.name for p in SHIPPED_REGRESSIONS.glob("*.json"))
    assert shipped and sorted(i.split("[")[1].rstrip("]") for i in ids if "test_seed[" in i) == shipped
    assert any("test_fuzz[" in i for i in ids) and any("test_batch_invariance[" in i for i in ids)
    assert not [p for p in tmp_path.iterdir() if p.name not in (".benchmarks", ".hypothesis")]


def test_report_without_matplotlib_is_one_line_and_exit_11(tmp_path):
    (tmp_path / "r.jsonl").write_text('{"kind": "run"}\n')
    code = "import sys; sys.modules['matplotlib'] = None; from k3diff.cli import main; sys.exit(main(['report', 'r.jsonl']))"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=limit(600),
                          env=_env())
    assert done.returncode == ex.MACHINE, done.stdout + done.stderr
    assert done.stderr.strip().count("\n") == 0 and "pip install 'k3diff[report]'" in done.stderr, done.stderr
    assert not (tmp_path / "report.html").exists()
