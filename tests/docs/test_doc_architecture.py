"""ARCHITECTURE.md's folder tree against `git ls-files`: every folder it names is tracked, every
tracked top-level folder and every folder one level inside k3diff/, megakernel/, tests/ and docs/
is named; every module of megakernel/ (and experimental/) is named in its file table. A planted
folder, or one left out, fails."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEEP = ("k3diff", "megakernel", "tests", "docs")     # their subfolders are named too
TOKEN = re.compile(r"[.\w-]+(?:/[.\w-]+)*/")


def tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return out.split()


def tree_folders(text: str) -> set[str]:
    """The folders the '## Folders' block names, as paths from the root ('k3diff/backends')."""
    block = text[text.index("## Folders"):]
    block = block[:block.index("\n## ", 1)]
    out, parent = set(), None
    for line in block.splitlines():
        if not line.startswith("    ") or not line.strip():
            continue
        body = line[4:]
        indent = len(body) - len(body.lstrip())
        heads = []
        for word in body.split():
            word = word.rstrip(",")
            if not TOKEN.fullmatch(word):
                break
            heads.append(word.rstrip("/"))
        if not heads:
            continue                       # a description's continuation line
        if indent == 0:
            parent = heads[0]
            out |= set(heads)
        else:
            out |= {f"{parent}/{h}" for h in heads}
    return out


def problems(named: set[str], files: list[str]) -> list[str]:
    dirs = {"/".join(f.split("/")[:n]) for f in files for n in range(1, f.count("/") + 1)}
    out = [f"ARCHITECTURE.md names {d}/, which git does not track" for d in sorted(named - dirs)]
    covered = lambda d: any(n == d or n.startswith(d + "/") for n in named)  # noqa: E731
    want = {d for d in dirs if "/" not in d} | {d for d in dirs if d.count("/") == 1 and d.split("/")[0] in DEEP}
    out += [f"{d}/ is tracked but not in ARCHITECTURE.md's tree" for d in sorted(want) if not covered(d)]
    return out


def test_the_tree_is_the_checkouts():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert problems(tree_folders(text), tracked()) == []


def test_every_megakernel_module_is_in_the_file_table():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    mods = [f for f in tracked() if re.fullmatch(r"megakernel/(experimental/)?\w+\.py", f)
            and not f.endswith("__init__.py")]
    missing = [m for m in mods if f"`{Path(m).name}`" not in text]
    assert missing == [], "modules ARCHITECTURE.md's megakernel table does not name"


def test_a_planted_difference_fails():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    files = tracked()
    assert problems(tree_folders(text) | {"k3diff/ghosts"}, files) == [
        "ARCHITECTURE.md names k3diff/ghosts/, which git does not track"]
    assert problems(tree_folders(text), files + ["megakernel/newdir/x.py"]) == [
        "megakernel/newdir/ is tracked but not in ARCHITECTURE.md's tree"]


def test_the_lab_is_not_shipped():
    """lab/ is a record, not code: the package does not include it and nothing shipped imports it."""
    import tomllib
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    assert not any(p.startswith("lab") for p in include)
    bad = [f for f in tracked() if f.endswith(".py") and f.split("/")[0] in ("k3diff", "reference", "megakernel", "scripts")
           and re.search(r"^\s*(?:from|import) lab\b", (ROOT / f).read_text(encoding="utf-8"), re.M)]
    assert bad == []
