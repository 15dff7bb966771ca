"""`scripts/screenshots.sh --header RESULTS OUT.png` on any results file: the top of its page in
headless Chromium, where a CPU torch-blocked run shows the stand-in note (its amber box) under the
verdict and a GPU megakernel run does not. Chromium is installed by .ci/run; without it the test
skips, except under CI."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from test_report_header import GPU, _case, _run   # tests/k3diff is on sys.path (rootdir conftest)

ROOT = Path(__file__).resolve().parents[2]
BROWSER = os.environ.get("CHROMIUM") or next(
    (shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
PASS_BANNER = (0xE6, 0xF4, 0xEA)      # #banner.pass background (k3diff/report/html.py)
STAND_IN = (0xFF, 0xF3, 0xCD)         # .standin background: the CPU stand-in note


def _rows_with(img, colour, tol=6):
    px, (w, h) = img.load(), img.size
    return [y for y in range(h) if sum(all(abs(a - b) <= tol for a, b in zip(px[x, y][:3], colour))
                                       for x in range(0, w, 2)) >= 5]


def _shot(results, png):
    env = dict(os.environ, PYTHON=os.environ.get("PYTHON", "python"),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    if BROWSER:
        env["CHROMIUM"] = BROWSER
    done = subprocess.run(["bash", str(ROOT / "scripts" / "screenshots.sh"), "--header", str(results), str(png)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert png.with_suffix(".html").exists()
    from PIL import Image

    return Image.open(png).convert("RGB")


@pytest.mark.skipif(BROWSER is None and not os.environ.get("CI"), reason="no chromium here (CI installs it)")
def test_the_header_screenshot_says_stand_in_for_torch_blocked_and_not_for_a_gpu_kernel(tmp_path):
    assert BROWSER, "CI must have chromium (.ci/run installs it)"
    cpu = _shot(_run(tmp_path / "cpu.jsonl", [_case(0), _case(1)]), tmp_path / "cpu.png")
    banner, note = _rows_with(cpu, PASS_BANNER), _rows_with(cpu, STAND_IN)
    assert banner and note and max(banner) < min(note) < cpu.size[1] // 2, (banner[:3], note[:3])
    gpu = _shot(_run(tmp_path / "gpu.jsonl", [_case(0), _case(1)], backend="megakernel", device="cuda", gpu=GPU),
                tmp_path / "gpu.png")
    assert _rows_with(gpu, PASS_BANNER) and not _rows_with(gpu, STAND_IN)


def test_a_file_it_cannot_read_is_the_reports_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("hello\n")
    env = dict(os.environ, PYTHON=os.environ.get("PYTHON", "python"), CHROMIUM=BROWSER or "/bin/true",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(["bash", str(ROOT / "scripts" / "screenshots.sh"), "--header", str(bad),
                           str(tmp_path / "x.png")], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 2 and "not a k3diff results file" in done.stderr and not (tmp_path / "x.png").exists()
