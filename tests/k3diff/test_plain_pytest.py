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


def test_the_console_scripts_pytest_k3diff_in_the_checkout_finds_the_real_packages():
    """`pytest --k3diff` as typed: the console script puts no checkout folder on sys.path, so the
    packages come from the install; tests/reference/ (a folder pytest may put on sys.path) must not
    pass for the oracle package `reference`."""
    import os

    probe = [sys.executable, "-c", "import sys; del sys.path[0]; import reference, k3diff; print(reference.__file__)"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if subprocess.run(probe, cwd="/", env=env, capture_output=True).returncode:
        import pytest
        pytest.skip("k3diff is not installed (only on PYTHONPATH): the console script cannot find it")
    run = [sys.executable, "-c", "import sys; del sys.path[0]; import pytest; sys.exit(pytest.main())",
           "--k3diff", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-k", "test_batch_invariance and moe"]
    done = subprocess.run(run, cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
