"""The judged cases as Hypothesis observability lines beside the results file (k3diff/observations.py):
the installed Hypothesis's own test_case format, one line per judged case, read back by the report's
folder reading without being taken for a results file."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from k3diff import observations
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)

HERE = Path(__file__).parent
ROOT = HERE.parent.parent


def _hypothesis_observation() -> dict:
    """A test_case observation as the installed Hypothesis writes it (its own callback and JSON)."""
    from hypothesis import given, settings, strategies as st
    from hypothesis.internal import observability

    if not hasattr(observability, "add_observability_callback"):     # before Hypothesis 6.13x: no such hook
        pytest.skip("the installed Hypothesis has no add_observability_callback to compare with")
    add_observability_callback = observability.add_observability_callback
    remove_observability_callback = observability.remove_observability_callback
    from hypothesis.strategies._internal.utils import to_jsonable

    seen = []
    add_observability_callback(seen.append)
    try:
        @settings(max_examples=1, database=None)
        @given(st.integers())
        def prop(x):
            pass

        prop()
    finally:
        remove_observability_callback(seen.append)
    case = next(o for o in seen if o.type == "test_case")
    return json.loads(json.dumps(to_jsonable(case, avoid_realization=False)))


def _record(ok=True, **extra):
    from k3diff.case import Case
    from k3diff.coverage import coverage_fields
    from k3diff.corpus import SHIPPED_REGRESSIONS, load
    from k3diff.results import record
    from k3diff.verdict import Verdict

    case, _ = load(sorted(SHIPPED_REGRESSIONS.glob("mla-*.json"))[0])
    assert isinstance(case, Case)
    verdict = Verdict(case, "torch-blocked")        # judged nothing: the record's verdict fields set below
    out = dict(record(case, verdict), **coverage_fields(case, verdict), item="t.py::test_fuzz[mla-0]", **extra)
    out.update(ok=ok, failure=None if ok else "candidate raised ValueError: planted", worst=["out", 0.25, 1.0, 2])
    return out


def test_a_line_has_the_installed_hypothesis_test_case_keys_and_types():
    theirs = _hypothesis_observation()
    ours = json.loads(json.dumps(observations.observation(_record(phase="generate"), run_start=1.0)))
    assert set(ours) == set(theirs)
    assert set(ours["metadata"]) == set(theirs["metadata"])
    for key in ("type", "property", "status", "status_reason", "representation", "how_generated"):
        assert isinstance(ours[key], str) and type(ours[key]) is type(theirs[key]), key
    for key in ("arguments", "features", "timing"):
        assert isinstance(ours[key], dict) and isinstance(theirs[key], dict), key
    assert theirs["status"] == ours["status"] == "passed"
    assert theirs["metadata"]["data_status"] == ours["metadata"]["data_status"]
    assert theirs["how_generated"] == ours["how_generated"] == "during generate phase"
    assert all(isinstance(v, (str, int, float, bool)) for v in ours["features"].values())
    f = ours["features"]
    assert f["stage"] == "mla" and f["batch"] >= 1 and f["cache_format"] in ("bf16", "fp8") and "hidden" in f
    assert "execute:test" in ours["timing"]


def test_a_failed_and_a_skipped_case_say_so():
    failed = observations.observation(_record(ok=False, phase="shrink"), run_start=1.0)
    assert failed["status"] == "failed" and "planted" in failed["status_reason"]
    assert failed["metadata"]["data_status"] == 3 and failed["how_generated"] == "during shrink phase"
    skipped = observations.observation(dict(_record(), skipped="needs about 56 GiB, 35 GiB free"), run_start=1.0)
    assert skipped["status"] == "gave_up" and "GiB" in skipped["status_reason"]


def test_the_file_sits_beside_the_results_file_and_a_worker_part_beside_its_part():
    assert observations.path_beside("out/r.jsonl") == Path("out/r.observations.jsonl")
    assert observations.path_beside("out/r.gw0.jsonl") == Path("out/r.gw0.observations.jsonl")
    assert observations.path_beside("r.txt") == Path("r.txt.observations.jsonl")


def test_an_unwritable_place_loses_the_observations_not_the_run(tmp_path):
    import os

    fifo = tmp_path / "r.observations.jsonl"
    os.mkfifo(fifo)                          # nobody reads it: an open that blocked would hang the run
    writer = observations.Writer(tmp_path / "r.jsonl")
    writer.add(_record())
    assert writer.lost and "write failed" in writer.lost
    writer.add(_record())                    # and stays quiet after


@pytest.fixture
def project(pytester):
    pytester.makepyfile(test_suite="from k3diff.suite import test_batch_invariance, test_fuzz, test_seed  # noqa\n")
    pytester.makepyfile(broken_candidate=(HERE / "broken_candidate.py").read_text())
    return pytester


def test_a_run_with_a_report_writes_one_observation_per_judged_case(project):
    out = project.path / "out"
    out.mkdir()
    stale = out / "r.observations.jsonl"
    stale.write_text('{"stale": true}\n')        # an earlier run's file is not kept
    result = project.runpytest_subprocess("--k3diff", "--k3diff-backend", "broken_candidate:BiasInWeights",
                                          "--k3diff-profile", "quick", "-k", "fuzz and moe", "--k3diff-seed", "7",
                                          "--k3diff-save=seeds", "--k3diff-isolate", "off",
                                          "--k3diff-report", str(out / "r.jsonl"), "-p", "no:cacheprovider")
    assert result.ret == 1, result.stdout.str()
    cases = [json.loads(x) for x in (out / "r.jsonl").read_text().splitlines()]
    cases = [c for c in cases if c["kind"] == "case"]
    lines = [json.loads(x) for x in stale.read_text().splitlines()]
    assert len(lines) == len(cases) > 0
    assert all(o["type"] == "test_case" for o in lines)
    assert [o["metadata"]["backend"]["case_id"] for o in lines] == [c["id"] for c in cases]
    assert [o["status"] for o in lines] == ["passed" if c["ok"] else "failed" for c in cases]
    assert {o["status"] for o in lines} >= {"failed"}
    assert {o["how_generated"] for o in lines} >= {"during generate phase", "during shrink phase"}
    assert {o["features"]["stage"] for o in lines} == {"moe"}
    assert all(o["property"].endswith("]") and "test_fuzz" in o["property"] for o in lines)
    # `k3diff report FOLDER` reads the results beside it, not the observations
    done = subprocess.run([sys.executable, "-m", "k3diff.cli", "report", str(out), "-o", str(project.path / "r.html")],
                          capture_output=True, text=True, timeout=limit(600), cwd=project.path)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert "not a k3diff results" not in done.stdout + done.stderr
