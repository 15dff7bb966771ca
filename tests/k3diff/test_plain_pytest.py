"""Plain `pytest` in the checkout: pyproject's testpaths is the differential suite (so that
`pytest --k3diff` judges the candidate alone), which is all skipped without --k3diff; a contributor
who expected the project's own tests is told in one line where they are
(tests/differential/conftest.py)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HINT = "the project's own tests: `pytest tests`"


def _collect(*args):
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "--co", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          capture_output=True, text=True)


def test_plain_pytest_says_where_the_projects_tests_are():
    done = _collect()
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line for line in done.stdout.splitlines() if HINT in line], done.stdout


def test_not_when_the_suite_runs_or_paths_are_given():
    for args in (["--k3diff"], ["tests/differential"]):
        done = _collect(*args)
        assert HINT not in done.stdout, (args, done.stdout)
