"""No shipped file cites an issue, a device call or a session ("issue 28", "call 93", "the twentieth
session"): a reader of the code or the docs cannot follow them; say what was measured and why, and
point into lab/ for the record. Shipped: k3diff/, reference/, megakernel/, docs/, scripts/,
README.md, ARCHITECTURE.md. The failure lists every line. A planted reference fails."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("k3diff", "reference", "megakernel", "docs", "scripts", "README.md", "ARCHITECTURE.md")
ORDINAL = (r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
           r"thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|"
           r"twenty-\w+|this|last|next|previous|\d+(?:st|nd|rd|th))")
HISTORY = re.compile(
    r"\bissues? #?\d+(?![\d-]| per\b)"             # "issue 31" (not "threads issue 18 per tile")
    r"|\b(?:device )?calls? \d+(?:-\d+)?\b"         # "call 93", "calls 62-65"
    r"|\bcall\d+(?:\.sh)?\b"                        # "call93.sh"
    rf"|\b{ORDINAL}(?: GPU)? sessions?\b", re.I)     # "the twentieth session", "this session"
OTHER_PROJECT = re.compile(r"[\w.-]+/[\w.-]+ $")       # "inference-sim/inference-sim issues #1635": theirs


def shipped_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", *SHIPPED], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [f for f in out.split() if Path(f).suffix in (".py", ".md", ".sh", "") and (ROOT / f).is_file()]


def references(text: str) -> list[tuple[int, str]]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        for m in HISTORY.finditer(line):
            if not OTHER_PROJECT.search(line[:m.start()]):
                out.append((n, m.group(0)))
    return out


def _bad(files) -> list[str]:
    return [f"{f}:{n}: {what!r}" for f in files
            for n, what in references((ROOT / f).read_text(encoding="utf-8", errors="replace"))]


def _check(bad):
    assert not bad, ("references a reader cannot follow (say what and why instead; the record is "
                     "in lab/):\n" + "\n".join(bad))


def test_no_shipped_file_cites_an_issue_a_call_or_a_session():
    _check(_bad(list(shipped_files())))


def test_the_patterns():
    planted = ("# measured in call 93 (issue 28), the twentieth session; see call93.sh\n"
               "written this session; calls 62-65\n")
    assert [w for _, w in references(planted)] == ["call 93", "issue 28", "twentieth session",
                                                   "call93.sh", "this session", "calls 62-65"]
    fine = ("every thread issues 18 per tile; kernels issue 151-187 instructions; a pytest session;\n"
            "- inference-sim/inference-sim issues #1635 (their config)\n")
    assert references(fine) == []
