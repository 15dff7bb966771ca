"""The rerun line (k3diff/rerun.py): the command a run prints to repeat itself repeats it."""
import json
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from k3diff import rerun

ROOT = Path(__file__).resolve().parents[2]


def _config(args, cwd="/somewhere"):
    return SimpleNamespace(invocation_params=SimpleNamespace(args=tuple(args), dir=Path(cwd)))


def test_the_line_is_the_command_as_typed_with_the_seed_pinned_and_outputs_left_out():
    args = ["--k3diff", "--k3diff-backend", "my pkg.k:B", "-k", "fuzz and moe", "--pyargs", "k3diff.suite",
            "-n", "2", "--k3diff-report", "out.jsonl", "--junitxml=j.xml", "--k3diff-preset", "tiny",
            "--k3diff-save", "/tmp/s"]
    line = rerun.pytest_line(_config(args), 777, argv0="/usr/bin/pytest", environ={})
    words = shlex.split(line)
    assert words[0] == "pytest"
    assert words[1:] == ["--k3diff", "--k3diff-backend", "my pkg.k:B", "-k", "fuzz and moe", "--pyargs",
                         "k3diff.suite", "-n", "2", "--k3diff-preset", "tiny", "--k3diff-save=/tmp/s",
                         "--k3diff-seed", "777"]
    # a seed the user gave stays as given (either form), never twice
    given = rerun.pytest_line(_config(["--k3diff", "--k3diff-seed=5"]), 5, argv0="pytest", environ={})
    assert shlex.split(given) == ["pytest", "--k3diff", "--k3diff-seed=5"]
    # `python -m pytest`, and PYTEST_ADDOPTS (options typed through the environment) written out
    moved = rerun.pytest_record(_config(["--k3diff"], "/p"), 3, argv0="/x/pytest/__main__.py",
                                environ={"PYTEST_ADDOPTS": "-p no:randomly --k3diff-profile ci"})
    assert shlex.split(moved["line"]) == ["PYTEST_ADDOPTS=-p no:randomly --k3diff-profile ci", "python", "-m",
                                          "pytest", "--k3diff", "--k3diff-seed", "3"]
    assert moved["cwd"] == "/p" and moved["env"] == {"PYTEST_ADDOPTS": "-p no:randomly --k3diff-profile ci"}


def test_the_cli_line_pins_the_seed():
    assert rerun.cli_line(["hunt", "--backend", "a:b c", "--examples", "5"], "--seed", 0, environ={}) == \
        "k3diff hunt --backend 'a:b c' --examples 5 --seed 0"


def test_the_variables_that_change_the_draw_are_written_before_the_command():
    """A GPU run under K3DIFF_SCHEDULE=graph (or with K3DIFF_TARGET=on) draws other cases: the line
    that reruns it says so, for pytest and the CLI alike; unrelated variables stay out."""
    environ = {"K3DIFF_SCHEDULE": "graph,pressure:l2", "K3DIFF_TARGET": "on", "K3DIFF_PROGRESS": "off"}
    line = rerun.pytest_line(_config(["--k3diff"]), 4, argv0="pytest", environ=environ)
    assert shlex.split(line) == ["K3DIFF_SCHEDULE=graph,pressure:l2", "K3DIFF_TARGET=on", "pytest", "--k3diff",
                                 "--k3diff-seed", "4"]
    assert shlex.split(rerun.cli_line(["hunt"], "--seed", 4, environ=environ)) == \
        ["K3DIFF_SCHEDULE=graph,pressure:l2", "K3DIFF_TARGET=on", "k3diff", "hunt", "--seed", "4"]


def _cases(path):
    lines = [json.loads(line) for line in Path(path).read_text().splitlines()]
    return [(r["stage"], r["id"], r["ok"], r.get("phase")) for r in lines if r.get("kind") == "case"]


def test_the_printed_line_of_a_failing_run_reruns_it(tmp_path):
    """A failing candidate, several options and a drawn seed: the `next:` line, run as printed, judges
    the same candidate on the same cases with the same verdicts."""
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               PYTHONPATH=str(ROOT))
    env.pop("PYTEST_ADDOPTS", None)
    first = subprocess.run(
        [sys.executable, "-m", "pytest", "--k3diff", "--k3diff-backend", "tests.k3diff.broken_candidate:BiasInWeights",
         "--k3diff-profile", "quick", "--k3diff-preset", "tiny", "--k3diff-device", "cpu", "-k", "fuzz and moe",
         "--k3diff-save", str(tmp_path / "seeds a"), "--k3diff-report", str(tmp_path / "a.jsonl"),
         "--k3diff-timeout", "300", "--junitxml", str(tmp_path / "j.xml"), "-p", "no:cacheprovider",
         "-p", "no:randomly", "tests/differential"],
        cwd=ROOT, capture_output=True, text=True, timeout=limit(900), env=env)
    assert first.returncode == 1, first.stdout[-3000:] + first.stderr
    found = re.search(r"^next: .*rerun with `([^`]+)`", first.stdout, re.M)
    assert found, first.stdout[-3000:]
    line = found.group(1)
    assert "BiasInWeights" in line and "--k3diff-seed" in line and "a.jsonl" not in line, line
    start = json.loads((tmp_path / "a.jsonl").read_text().splitlines()[0])
    assert start["rerun"]["line"] == line and start["rerun"]["cwd"] == str(ROOT)
    junit = (tmp_path / "j.xml").read_text()
    assert 'name="k3diff_rerun"' in junit and "j.xml" not in line, junit[:2000]
    second = subprocess.run(["bash", "-c", line + " --k3diff-report " + shlex.quote(str(tmp_path / "b.jsonl"))],
                            cwd=ROOT, capture_output=True, text=True, timeout=limit(900), env=env)
    assert second.returncode == 1, second.stdout[-3000:] + second.stderr
    # the cases drawn and their verdicts, and the minimal failure; the shrink steps between are left
    # out (two runs of one seed were seen to take different steps to the same minimal case)
    a, b = _cases(tmp_path / "a.jsonl"), _cases(tmp_path / "b.jsonl")
    drawn = lambda cases: [c for c in cases if c[3] != "shrink"]  # noqa: E731
    assert drawn(a) and drawn(a) == drawn(b)
    assert any(not ok for _, _, ok, _ in a)
    failed = lambda out: sorted(x for x in out.splitlines() if x.startswith("FAILED "))  # noqa: E731
    assert failed(first.stdout) == failed(second.stdout) != []


def test_a_hunt_prints_the_line_that_repeats_it(tmp_path):
    done = subprocess.run([sys.executable, "-m", "k3diff.cli", "hunt", "--backend", "torch-blocked", "--stage", "moe",
                           "--examples", "1", "--isolate", "off"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=limit(600), env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rerun: k3diff hunt --backend torch-blocked --stage moe --examples 1 --isolate off --seed 0" in done.stdout
