"""The exit statuses are one table, `k3diff/exit_codes.py`; docs/guide.md shows it (one row per
status: its number, its name, its meaning) and README.md names only 0 and 1 and points there.
These tests hold both documents to the module, and show that a planted mismatch fails."""
from __future__ import annotations

import re
from pathlib import Path

from k3diff import exit_codes

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| (\d+) \| `([A-Z_]+)`: ([^|]*?) \|", re.M)
# "exit 11", "exits 1", "exit status 8", "(exit 9)": a status a document says a command ends with
SAID = re.compile(r"\bexit(?:s| status| with)? (\d+)\b")
SHELL = {130, 143}      # `k3diff` on Ctrl-C and SIGTERM, as a shell expects (exit_codes.py says so)


def statuses() -> dict[int, str]:
    return {v: k for k, v in vars(exit_codes).items() if k.isupper() and isinstance(v, int)}


def table_problems(text: str) -> list[str]:
    """How a document's status table differs from exit_codes.py (empty: it agrees)."""
    want, rows = statuses(), {int(n): (name, meaning.strip()) for n, name, meaning in ROW.findall(text)}
    out = [f"status {n} ({want[n]}) has no row" for n in sorted(set(want) - set(rows))]
    out += [f"row {n} names a status exit_codes.py does not have" for n in sorted(set(rows) - set(want))]
    for n in sorted(set(want) & set(rows)):
        name, meaning = rows[n]
        if name != want[n] or meaning != exit_codes.MEANING[n]:
            out.append(f"row {n}: `{name}`: {meaning}; exit_codes.py: `{want[n]}`: {exit_codes.MEANING[n]}")
    return out


def said_problems(text: str) -> list[str]:
    """Statuses a document says a command exits with that exit_codes.py does not have."""
    known = set(statuses()) | SHELL
    return [f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
            for m in SAID.finditer(text) if int(m.group(1)) not in known]


def paragraph_problems(text: str) -> list[str]:
    """In README's exit-status paragraph, every 'N meaning' must be exit_codes.py's meaning of N."""
    m = re.search(r"\*\*Exit status\*\*(.*?)\n\n", text, re.S)
    if not m:
        return ["no **Exit status** paragraph"]
    body = " ".join(m.group(1).split())
    out = []
    for n, words in re.findall(r"\b(\d{1,3}) ([a-z][a-z ]*)", body):
        meaning = exit_codes.MEANING.get(int(n))
        if meaning is None or not words.startswith(meaning):
            out.append(f"'{n} {words.strip()}': exit_codes.py says {n} is {meaning!r}")
    return out


def test_the_guide_shows_the_one_table():
    assert table_problems((ROOT / "docs" / "guide.md").read_text(encoding="utf-8")) == []


def test_the_readme_has_no_second_table_and_says_only_what_the_table_says():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert not ROW.search(readme), "README repeats the status table: it belongs in docs/guide.md alone"
    assert paragraph_problems(readme) == []


def test_every_status_a_document_names_exists():
    bad = []
    for doc in ("README.md", "docs/guide.md", "docs/design.md", "ARCHITECTURE.md"):
        bad += [f"{doc} {p}" for p in said_problems((ROOT / doc).read_text(encoding="utf-8"))]
    assert not bad, "statuses k3diff/exit_codes.py does not have:\n" + "\n".join(bad)


def test_a_planted_mismatch_fails():
    guide = (ROOT / "docs" / "guide.md").read_text(encoding="utf-8")
    assert table_problems(guide.replace("| 6 | `NOTHING_JUDGED`", "| 3 | `NOTHING_JUDGED`"))
    assert table_problems(guide.replace("`SEED`: bad seed", "`SEED`: a bad seed file"))
    # what README said before this test: 2 and 3 mean other things, 4 is not "output"
    old = ("**Exit status** `k3diff`: 0 pass, 1 fail, 2 the command or a seed file was wrong, "
           "3 nothing judged, 4 output could not be written, 130 interrupted.\n\n")
    assert len(paragraph_problems(old)) >= 3
    assert said_problems("a wrong seed exits 3") and not said_problems("a wrong seed exits 9")
