"""The options a user reads are the options the code has: README's table of the pytest plugin's
options against `pytest --help`, docs/guide.md's table of the `k3diff` command against its parser
(what `k3diff SUBCOMMAND --help` prints). A planted mismatch fails."""
from __future__ import annotations
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OPTION = re.compile(r"`(-{1,2}[a-z][a-z0-9-]*)")


def table(text: str, heading: str) -> list[list[str]]:
    """The cells of the first Markdown table after the line that starts with `heading`."""
    rows, on = [], False
    for line in text[text.index(heading):].splitlines()[1:]:
        if line.startswith("|"):
            on = True
            if not set(line) <= set("|- "):
                rows.append([c.strip() for c in line.strip("|").split("|")])
        elif on:
            break
    return rows                           # the header row (the line found) left out


def readme_options(text: str) -> set[str]:
    """The --k3diff options README's options table names (its first column)."""
    return {o for row in table(text, "| option | meaning |") for o in OPTION.findall(row[0])
            if o.startswith("--k3diff")} if "| option | meaning |" in text else set()


def plugin_options() -> set[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "k3diff.plugin", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=limit(120)).stdout
    return set(re.findall(r"(?<![\w-])(--k3diff(?:-[a-z]+)*)", out))


def cli_table(text: str) -> dict[str, set[str]]:
    """docs/guide.md's `k3diff` table: subcommand -> its options and (upper-case) positionals."""
    rows = table(text, "| subcommand | arguments and options |")
    return {r[0].strip("`"): set(OPTION.findall(r[1])) | set(re.findall(r"`([A-Z]+)`", r[1])) for r in rows}


def cli_parser() -> dict[str, set[str]]:
    from k3diff.cli import _parser
    out = {}
    for action in _parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[name] = {o for a in sub._actions for o in a.option_strings if o not in ("-h", "--help")}
                out[name] |= {a.dest.upper() for a in sub._actions if not a.option_strings}
    return out


def diff(doc: set, code: set, where: str) -> list[str]:
    return ([f"{where}: {o} is documented, the code has no such option" for o in sorted(doc - code)]
            + [f"{where}: {o} is not documented" for o in sorted(code - doc)])


def test_readme_options_are_the_plugins():
    doc = readme_options((ROOT / "README.md").read_text(encoding="utf-8"))
    assert doc, "README has no options table ('| option | meaning |')"
    assert diff(doc, plugin_options(), "README options table") == []


def test_guide_command_table_is_the_parsers():
    doc = cli_table((ROOT / "docs" / "guide.md").read_text(encoding="utf-8"))
    code = cli_parser()
    bad = [f"subcommand {s} is not in the guide's table" for s in sorted(set(code) - set(doc))]
    bad += [f"the guide's table names a subcommand {s} the CLI does not have" for s in sorted(set(doc) - set(code))]
    for s in sorted(set(doc) & set(code)):
        bad += diff(doc[s], code[s], f"k3diff {s}")
    assert bad == []


def test_a_planted_mismatch_fails():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    planted = readme.replace("| `--k3diff-timeout SECONDS` |", "| `--k3diff-time-limit SECONDS` |")
    assert readme_options(planted) != readme_options(readme)
    assert diff(readme_options(planted), readme_options(readme), "x")
    guide = (ROOT / "docs" / "guide.md").read_text(encoding="utf-8")
    doc = cli_table(guide.replace("`--control-examples`, ", ""))
    assert diff(doc["mutants"], cli_parser()["mutants"], "k3diff mutants")
