"""The progress line never erases pytest's own output: drawn through pytest's public terminal API
(k3diff/progress.py), checked on the screen a terminal would show (the output rendered: carriage
returns, line erases and cursor moves applied), and by a grep for pytest's private writer."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# eight items, each replaying one small case through the k3diff fixture (its public API): the
# plugin's own path from a judged case to the progress line, without a fuzz run's minutes
SUITE = """
import pytest

@pytest.mark.k3diff
@pytest.mark.parametrize("n", range(8))
def test_case(k3diff, n):
    k3diff.replay("seed.json")
"""
SEED = '{"k3diff_seed_format": 1, "case": {"stage": "moe", "version": 1, "batch": 1}}'
_CSI = re.compile(r"\x1b\[(\d*)([A-Za-z])")


def screen(raw: str) -> list[str]:
    """What a terminal shows for `raw`: \\r, \\n, ESC[K (erase to the end), ESC[nA/B/C/D (cursor
    moves) applied; colours dropped."""
    lines, row, col, i = [""], 0, 0, 0
    while i < len(raw):
        ch = raw[i]
        m = _CSI.match(raw, i)
        if m:
            n, op = int(m.group(1) or 1), m.group(2)
            if op == "K":
                lines[row] = lines[row][:col]
            elif op == "A":
                row = max(0, row - n)
            elif op == "B":
                row += n
            elif op == "C":
                col += n
            elif op == "D":
                col = max(0, col - n)
            i = m.end()
            while len(lines) <= row:
                lines.append("")
            continue
        if ch == "\r":
            col = 0
        elif ch == "\n":
            row, col = row + 1, 0
            while len(lines) <= row:
                lines.append("")
        else:
            line = lines[row].ljust(col)
            lines[row] = line[:col] + ch + line[col + 1:]
            col += 1
        i += 1
    return lines


def test_the_screen_renderer_applies_erases():
    assert screen("ab.\n\rxyz\x1b[K\r\x1b[K\x1b[A\x1b[3C.") == ["ab..", ""]
    assert screen("12345\rab") == ["ab345"]


def _dots(lines) -> int:
    """pytest's result letters on the screen: the lines of dots (with its path or [ NN%])."""
    # pytest writes the file's path again after any line of ours (as after live logging)
    return sum(line.split("[")[0].replace("test_suite.py", "").count(".") for line in lines
               if re.fullmatch(r"(test_suite\.py)?[.sFE ]*(\[ *\d+%\])?", line.strip()))


@pytest.fixture
def project(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("K3DIFF_PROGRESS_INTERVAL", "0")      # a draw on every case
    pytester.makepyfile(test_suite=SUITE)
    (pytester.path / "seed.json").write_text(SEED)
    return pytester


def _run(project, *args):
    # the file named: `pytest --k3diff` with no path runs the whole installed suite (minutes)
    result = project.runpytest_subprocess("--k3diff", "-p", "no:cacheprovider", "-p", "no:randomly", "--color=no",
                                          "test_suite.py", *args)
    passed = result.parseoutcomes().get("passed", 0)
    return result, screen("\n".join(result.outlines)), passed


@pytest.mark.parametrize("mode", ["tty", "log"])
def test_every_dot_of_pytest_stays_on_screen_under_xdist(project, monkeypatch, mode):
    # K3DIFF_PROGRESS=tty under xdist drew a live line with raw ANSI into pytest's writer and moved
    # the cursor back over pytest's line: dots landed where the next redraw erased them
    monkeypatch.setenv("K3DIFF_PROGRESS", mode)
    result, shown, passed = _run(project, "-n", "2")
    assert result.ret == 0 and passed == 8, result.outlines
    assert _dots(shown) == passed, "\n".join(shown)
    assert [line for line in shown if line.startswith("k3diff: ") and "run ETA" in line], "\n".join(shown)


def test_the_live_line_leaves_every_dot_and_shows_the_run_eta(project, monkeypatch):
    monkeypatch.setenv("K3DIFF_PROGRESS", "tty")
    result, shown, passed = _run(project)
    assert result.ret == 0 and passed == 8, result.outlines
    assert _dots(shown) == passed, "\n".join(shown)
    progress = [line for line in shown if re.match(r"k3diff: \d+(/\d+)? cases", line)]
    assert progress and all("run ETA" in line for line in progress), "\n".join(shown)


def test_the_plugin_uses_no_private_terminal_api():
    # pytest's TerminalReporter._tw and TerminalWriter._current_line are private: a new pytest may
    # rename them, and writing through them erased pytest's own output
    for name in ("k3diff/plugin.py", "k3diff/progress.py"):
        text = (ROOT / name).read_text()
        assert not re.search(r"\._tw\b|\b_current_line\b|\\x1b\[", text), name


def test_the_run_line_counts_the_whole_budget():
    from k3diff.progress import Progress

    shown = []
    prog = Progress({"moe": 20, "mla-inv": 5}, lambda text, newline: shown.append(text), tty=True, interval=0)
    for k in range(10):
        prog.add({"stage": "moe", "ok": k != 3, "skipped": None, "phase": "generate"}, at=100.0 + 10 * k)
    assert prog.run_line(200.0, "moe") == "k3diff: 10/25 cases (40%), 0.10 cases/s, 1 failing, run ETA 2 min; now moe 10/20"
    assert shown[-1].startswith("k3diff: 10/25 cases (40%)")
