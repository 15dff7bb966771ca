"""scripts/schedule_report.py (the GPU schedule check's line per run) on recorded report rows, and
scripts/gpu_schedule_check.sh's dry run: the script parses and names every step's command."""
from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)

ROOT = Path(__file__).resolve().parents[2]


def _report_module():
    spec = importlib.util.spec_from_file_location("schedule_report", ROOT / "scripts" / "schedule_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_report_line_counts_cases_by_schedule_and_names_failures():
    rows = [
        {"kind": "case", "ok": True, "skipped": None, "seconds": 0.5, "case": {"schedule": "graph"}},
        {"kind": "case", "ok": True, "skipped": None, "seconds": 0.5, "case": {}},
        {"kind": "case", "ok": False, "skipped": None, "seconds": 1.0, "case": {"schedule": "pressure:half"},
         "label": "moe b=3", "failure": "FAIL moe/router_logits@pressure:half"},
        {"kind": "case", "ok": True, "skipped": "refused: verify", "seconds": 0.0, "case": {}},
        {"kind": "invariance", "ok": True},
    ]
    lines = _report_module().summary(rows, 6.0, "graph")
    assert lines[0].startswith("graph: 3 cases judged (1 refused), by schedule "
                               "{'eager': 1, 'graph': 1, 'pressure:half': 1}, 1 failing; 1.50 cases/s")
    assert "0.50 cases/s of wall time" in lines[0]
    assert lines[1] == "  FAIL moe b=3 | FAIL moe/router_logits@pressure:half"


def test_the_gpu_schedule_check_parses_and_its_dry_run_names_each_step():
    script = ROOT / "scripts" / "gpu_schedule_check.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    done = subprocess.run(["bash", str(script), "/tmp/k3diff-schedule-dry"], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, DRY="1"), timeout=limit(60))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "tests/k3diff/test_schedule_gpu.py" in out and "k3diff.tools.schedule_hunt --device cuda" in out
    for dim in ("K3DIFF_SCHEDULE=graph", "K3DIFF_SCHEDULE=pressure:", "K3DIFF_SCHEDULE=off"):
        assert dim in out and "megakernel.backend:MegakernelBackend" in out
