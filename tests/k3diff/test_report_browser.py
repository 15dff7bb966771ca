"""The report as a reviewer sees it: rendered in a real headless Chromium, a screenshot taken and
checked for the verdict banner at the top and the failure block under it (their colours, where
the page puts them). Chromium is installed by .ci/run; without it the test skips, except under CI."""
import os
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)
import shutil
import subprocess
from pathlib import Path

import pytest

from test_report import _shrinking_run, _write_run   # tests/k3diff is on sys.path (rootdir conftest, no packages)

BROWSER = os.environ.get("CHROMIUM") or next(
    (shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)

FAIL_BANNER = (0xFC, 0xE8, 0xE6)      # #banner.fail background (k3diff/report/html.py)
GROUP_BORDER = (0xE0, 0xA0, 0xA0)     # details.group: a stage/tensor block of failures
MINIMAL = (0xCC, 0x00, 0x00)          # the "minimal" badge of the saved seed


def _rows_with(img, colour, tol=6):
    px, (w, h) = img.load(), img.size
    return [y for y in range(h) if sum(all(abs(a - b) <= tol for a, b in zip(px[x, y][:3], colour))
                                       for x in range(0, w, 2)) >= 5]


@pytest.mark.skipif(BROWSER is None and not os.environ.get("CI"), reason="no chromium here (CI installs it)")
def test_the_broken_report_shows_the_banner_then_the_failure_block(tmp_path):
    assert BROWSER, "CI must have chromium (.ci/run installs it)"
    from PIL import Image

    from k3diff.report.html import run_report
    from k3diff.report.load import load

    cases, saved, _ = _shrinking_run()
    page = tmp_path / "report.html"
    page.write_text(run_report(load([_write_run(tmp_path / "r.jsonl", 5, cases, extra=[saved])])))
    shot = tmp_path / "shot.png"
    subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,900",
                    f"--screenshot={shot}", page.resolve().as_uri()],
                   capture_output=True, timeout=limit(120), check=False)
    assert shot.exists() and shot.stat().st_size > 10_000, "chromium took no screenshot"
    img = Image.open(shot).convert("RGB")
    banner, group, badge = (_rows_with(img, c) for c in (FAIL_BANNER, GROUP_BORDER, MINIMAL))
    assert banner and banner[0] < 150, "the verdict banner is not at the top"
    assert group and group[0] > banner[-1], "no failure block under the banner"
    assert any(y > group[0] for y in badge), "the minimal seed is not marked inside the failure block"
