"""tests/wall_clock.py: a subprocess limit in the project's tests grows with the machine's load and
can be switched off, so a busy machine never fails a test that did not hang."""
import os
import re
from pathlib import Path

import wall_clock


def test_the_limit_is_generous_and_grows_with_the_load(monkeypatch):
    monkeypatch.delenv("K3DIFF_TEST_NO_LIMIT", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.5, 0, 0))
    assert wall_clock.limit(600) == 2400                 # idle: 4x the step's need
    monkeypatch.setattr(os, "getloadavg", lambda: (16.0, 0, 0))
    assert wall_clock.limit(600) == 600 * 4 * 8          # eight runs per core: past CI's job timeout
    monkeypatch.setenv("K3DIFF_TEST_NO_LIMIT", "1")
    assert wall_clock.limit(600) is None


def test_no_test_keeps_a_fixed_subprocess_limit():
    # a literal limit of a minute or more on a subprocess is what a loaded machine trips
    here = Path(__file__).parent
    fixed = [f"{p.relative_to(here)}:{n}" for p in here.rglob("test_*.py")
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if (m := re.search(r"\btimeout=(\d+)\b", line)) and int(m.group(1)) >= 60]
    assert not fixed, fixed
