"""Every environment variable k3diff, the reference or the megakernel reads is listed once in
docs/guide.md's "Environment variables" table, and every variable listed there is read: a new
read without a row fails, naming the file and line. Reads are found in the source with `ast`:
os.environ.get / os.getenv / env.get(NAME) / os.environ[NAME] / NAME in os.environ, and any string
constant spelled like one of ours (K3DIFF_*, MEGAKERNEL_*, MK_*: a helper such as config._choice
takes the name as an argument)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("k3diff", "reference", "megakernel")
OURS = re.compile(r"^(?:K3DIFF|MEGAKERNEL|MK)_[A-Z0-9_]+$")
ENVIRON = ("environ", "env")


def _is_environ(node) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id in ENVIRON)


def _name(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def reads(source: str) -> dict[str, int]:
    """Variable name -> the first line that reads it, in one module's source."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        name = None
        if isinstance(node, ast.Call) and node.args:
            f = node.func
            if isinstance(f, ast.Attribute) and (
                    (f.attr in ("get", "setdefault", "pop") and _is_environ(f.value)) or f.attr == "getenv"):
                name = _name(node.args[0])
        elif isinstance(node, ast.Subscript) and _is_environ(node.value) and isinstance(node.ctx, ast.Load):
            name = _name(node.slice)
        elif isinstance(node, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in node.ops) \
                and any(_is_environ(c) for c in node.comparators):
            name = _name(node.left)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and OURS.match(node.value):
            name = node.value
        if name and name not in found:
            found[name] = node.lineno
    return found


def read_in_packages() -> dict[str, str]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for name, line in reads(path.read_text(encoding="utf-8")).items():
                out.setdefault(name, f"{path.relative_to(ROOT)}:{line}")
    return out


def listed(text: str) -> list[str]:
    """The variables of the guide's table (its first column), in order, repeats kept."""
    part = text[text.index("## Environment variables"):]
    part = part[:part.index("\n## ", 1)] if "\n## " in part[1:] else part
    return re.findall(r"^\| `([A-Z][A-Z0-9_]*)` \|", part, re.M)


def problems(read: dict[str, str], names: list[str]) -> list[str]:
    out = [f"{read[n]} reads {n}: not in docs/guide.md's environment table" for n in sorted(set(read) - set(names))]
    out += [f"docs/guide.md lists {n}: nothing in {', '.join(PACKAGES)} reads it" for n in sorted(set(names) - set(read))]
    out += [f"docs/guide.md lists {n} more than once" for n in sorted({n for n in names if names.count(n) > 1})]
    return out


def test_every_variable_read_is_listed_once():
    names = listed((ROOT / "docs" / "guide.md").read_text(encoding="utf-8"))
    assert problems(read_in_packages(), names) == []


def test_reads_are_found_in_every_form():
    src = '''
import os
env = os.environ
a = os.environ.get("A_ONE", "1")
b = os.getenv("B_TWO")
c = os.environ["C_THREE"]
d = "D_FOUR" in os.environ
e = _choice(env, "MK_FIVE", ("0",), None)
os.environ["SET_ONLY"] = "0"
'''
    assert set(reads(src)) == {"A_ONE", "B_TWO", "C_THREE", "D_FOUR", "MK_FIVE"}


def test_a_planted_read_fails():
    read = dict(read_in_packages(), K3DIFF_NEW_KNOB="k3diff/planted.py:1")
    names = listed((ROOT / "docs" / "guide.md").read_text(encoding="utf-8"))
    assert problems(read, names) == ["k3diff/planted.py:1 reads K3DIFF_NEW_KNOB: not in docs/guide.md's environment table"]
    assert problems(read_in_packages(), names + ["MK_GONE"])
