"""The pytest plugin itself, driven through pytester in subprocesses (as a user would run it)."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SUITE = "from k3diff.suite import test_batch_invariance, test_fuzz, test_seed  # noqa\n"


ROOT = HERE.parent.parent


@pytest.fixture
def project(pytester):
    pytester.makepyfile(test_suite=SUITE)
    pytester.makepyfile(broken_candidate=(HERE / "broken_candidate.py").read_text())
    pytester.makepyfile(crashing_candidates=(HERE / "crashing_candidates.py").read_text())
    return pytester


def _cli(cwd, *args):
    return subprocess.run([sys.executable, "-m", "k3diff.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def _console(cwd, *args):
    """`k3diff ...` as printed in a run's summary, run the way the console script runs it: its
    sys.path, unlike `python -m`'s, does not start with the current folder."""
    cmd = [sys.executable, "-c", "import sys; del sys.path[0]; from k3diff.cli import main; "
           "sys.exit(main())"]
    return subprocess.run(cmd + list(args), cwd=cwd, capture_output=True, text=True, timeout=600)


def _one_line_usage_error(result, message):
    """pytest's usage error: exit 4, the reason in one stderr line, no INTERNALERROR."""
    err = result.stderr.str()
    assert result.ret == 4, (result.ret, err, result.stdout.str())
    assert "INTERNALERROR" not in err + result.stdout.str()
    assert [line for line in err.splitlines() if message in line], err


def test_suite_is_skipped_without_the_flag(project):
    result = project.runpytest_subprocess("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=result.parseoutcomes().get("skipped", 0))
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*k3diff differential suite: run with --k3diff*"])


BROKEN = ["--k3diff", "--k3diff-backend", "broken_candidate:BiasInWeights", "--k3diff-profile", "quick",
          "-k", "fuzz and moe", "--k3diff-seed", "7", "--k3diff-save", "seeds", "-p", "no:cacheprovider"]


def _seeds(root):
    return sorted((Path(root) / "seeds").glob("*.json"))


def test_broken_candidate_fails_saves_a_seed_and_replays_bit_for_bit(project):
    result = project.runpytest_subprocess(*BROKEN)
    assert result.ret == 1
    out = result.stdout.str()
    seeds = _seeds(project.path)
    assert seeds, out
    assert "replay: k3diff replay seeds/" in out
    record = json.loads(seeds[0].read_text())
    assert record["verdict"]["ok"] is False
    # a seed names module:object: it runs only when the user names it too (seeds are data)
    refused = _cli(project.path, "replay", str(seeds[0]))
    assert refused.returncode == 2 and "not registered here" in refused.stderr, refused.stderr
    replay = _cli(project.path, "replay", str(seeds[0]), "--backend", "broken_candidate:BiasInWeights")
    assert replay.returncode == 1, replay.stderr
    assert "reproduced the recorded outcome (FAIL" in replay.stdout
    assert "FAIL" in replay.stdout.splitlines()[0]
    # the line exactly as printed, through the console script: the candidate module beside the
    # user still imports (it did not: "No module named 'broken_candidate'", exit 2)
    line = re.search(r"replay: (k3diff replay seeds/\S+\.json --backend \S+)", out).group(1).split()
    again = _console(project.path, *line[1:])
    assert again.returncode == 1, again.stderr
    assert "reproduced the recorded outcome (FAIL" in again.stdout


def test_xdist_merges_one_summary_and_loses_no_seed(project):
    report = project.path / "r.jsonl"
    result = project.runpytest_subprocess(*BROKEN, "-n", "2", "--k3diff-report", str(report))
    assert result.ret == 1
    out = result.stdout.str()
    assert out.count("k3diff summary") == 1
    lines = [json.loads(line) for line in report.read_text().splitlines()]       # the controller wrote them
    records = [r for r in lines if r["kind"] == "case"]
    assert lines[0]["kind"] == "run" and records and any(not r["ok"] for r in records)
    assert {r["path"] for r in lines if r["kind"] == "failure"}          # the saved seeds, listed too
    replays = set(re.findall(r"replay: k3diff replay (seeds/\S+\.json)", out))
    on_disk = {f"seeds/{p.name}" for p in _seeds(project.path)}
    assert replays and replays == on_disk


def _cases(project, *extra):
    report = project.path / f"report{len(list(project.path.glob('report*')))}.jsonl"
    result = project.runpytest_subprocess("--k3diff", "--k3diff-backend", "torch-blocked", "--k3diff-profile",
                                          "quick", "--k3diff-seed", "11", "-k", "fuzz", "--k3diff-report",
                                          str(report), "-p", "no:cacheprovider", *extra)
    assert result.ret == 0, result.stdout.str()
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    assert lines[0]["kind"] == "run" and lines[0]["seed"] == 11
    return [line["id"] for line in lines if line["kind"] == "case"]


def test_shards_are_disjoint_and_cover_the_run(project):
    whole = _cases(project)
    one = _cases(project, "--k3diff-shard", "1/2")
    two = _cases(project, "--k3diff-shard", "2/2")
    assert one and two
    assert not set(one) & set(two)
    assert sorted(one + two) == sorted(whole)


@pytest.mark.parametrize("args, message", [
    (["--k3diff-backend", "no_such_backend"], "unknown backend 'no_such_backend'"),
    (["--k3diff-shard", "3/2"], "--k3diff-shard expects 1 <= I <= N"),
    (["--k3diff-shard", "x"], "--k3diff-shard expects I/N"),
    (["--k3diff-shard", "1/2"], "--k3diff-shard needs --k3diff-seed N"),
    (["--k3diff-backend", "crashing_candidates:RaisesInInit"], "failed to construct: RuntimeError: cannot open"),
    (["--k3diff-backend", "crashing_candidates:RaisesInAvailable"], "available() raised OSError: driver query"),
    (["--k3diff-backend", "crashing_candidates:NoFinalOutput"], "provides('moe') lacks the final output 'out'"),
    (["--k3diff-save", "/proc/nope"], "--k3diff-save /proc/nope: not a writable folder"),
    (["--k3diff-report", "/proc/nope/r.jsonl"], "report /proc/nope/r.jsonl: cannot write"),
    (["--k3diff-timeout", "0"], "--k3diff-timeout must be > 0"),
    (["--k3diff-device", "tpu"], "device 'tpu' is not a device name"),
] + ([] if __import__("torch").cuda.is_available() else [
    (["--k3diff-device", "cuda"], "device 'cuda' requested but no CUDA device is usable here")]))
def test_bad_options_give_one_line(project, args, message):
    result = project.runpytest_subprocess("--k3diff", *args, "-p", "no:cacheprovider")
    _one_line_usage_error(result, message)


def _write(path, record):
    path.write_text(record if isinstance(record, str) else json.dumps(record))
    return path


@pytest.mark.parametrize("content, message", [
    ("{not json", "not a k3diff seed file (invalid JSON"),
    ({"k3diff_seed_format": 99, "case": {}}, "seed format 99 is not supported"),
    ({"k3diff_seed_format": 1, "case": {"stage": "moe", "version": 0}}, "case version 0 is not supported"),
    ({"k3diff_seed_format": 1, "case": {"stage": "warp", "version": 1}}, "unknown stage 'warp'"),
    ({"k3diff_seed_format": 1, "case": {"stage": "moe", "version": 1, "preset": "tiny",
                                        "overrides": [["top_k", 99]]}}, "top_k=99 is larger than n_experts"),
])
def test_bad_seed_files_give_one_line(tmp_path, content, message):
    seed = _write(tmp_path / "bad.json", content)
    done = _cli(tmp_path, "replay", str(seed))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr, done.stderr


def test_unknown_backend_on_replay(tmp_path):
    seed = _write(tmp_path / "ok.json", {"k3diff_seed_format": 1, "case": {"stage": "moe", "version": 1}})
    done = _cli(tmp_path, "replay", str(seed), "--backend", "nope")
    assert done.returncode == 2 and "unknown backend 'nope'" in done.stderr


def test_case_too_large_for_the_device(tmp_path, project):
    huge = {"stage": "mla", "version": 1, "preset": "small", "batch": 256, "cache_lens": [65000] * 256}
    seed = _write(tmp_path / "huge.json", {"k3diff_seed_format": 1, "case": huge})
    done = _cli(tmp_path, "replay", str(seed), "--device", "cpu")
    assert done.returncode == 2 and "case too large for cpu" in done.stderr, done.stderr
    result = project.runpytest_subprocess("--k3diff", "--k3diff-replay", str(seed), "-k", "seed",
                                          "--k3diff-device", "cpu", "-p", "no:cacheprovider")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*case too large for cpu*"])


@pytest.mark.parametrize("case, message", [
    ({"stage": "moe", "version": 1, "batch": 2.5}, "batch must be an integer, got 2.5"),
    ({"stage": "moe", "version": 1, "seed": 10 ** 30}, "seed must lie in [0, 2**63)"),
    ({"stage": "moe", "version": 1, "weight_seed": float("nan")}, "weight_seed must be an integer, got nan"),
    ({"stage": "moe", "version": 1, "seed": -1}, "seed must lie in [0, 2**63), got -1"),
    ({"stage": "mla", "version": 1, "batch": 1, "cache_lens": [-4]}, "cache_lens must be >= 0"),
    ({"stage": "moe", "version": 1, "overrides": [["rms_eps", float("inf")]]}, "rms_eps=inf is not a finite number"),
    ({"stage": "moe", "version": 1, "overrides": [["situ_beta", float("nan")]]}, "not a finite number"),
])
def test_bad_values_in_seed_files_give_one_line(tmp_path, case, message):
    seed = _write(tmp_path / "bad.json", {"k3diff_seed_format": 1, "case": case})
    done = _cli(tmp_path, "replay", str(seed))
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr, done.stderr


def test_rms_eps_and_situ_beta_must_be_finite():
    from reference.config import ConfigError, preset

    for field in ("rms_eps", "situ_beta"):
        for bad in (float("inf"), float("nan")):
            with pytest.raises(ConfigError, match=f"{field}: must be finite"):
                preset("tiny").replace(**{field: bad})


def _recorded_seed(tmp_path, project_path=None):
    """A real failing seed, recorded through the session (in process, no child)."""
    from k3diff.runner import check_case
    from k3diff.session import Session

    session = Session(backend_name="broken_candidate:BiasInWeights", device="cpu", seed=1, profile="quick",
                      save_dir=tmp_path, isolate=False)
    from k3diff.case import Case

    verdict = check_case(Case("moe", batch=4, seed=3), session.backend)
    assert not verdict.ok
    return session.save_failure(verdict)[0]


def test_a_seed_edited_to_another_case_is_refused(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    path = _recorded_seed(tmp_path)
    record = json.loads(path.read_text())
    record["case"]["stage"] = "kda"
    record["case"].update(n_slots=2, state_idx=[1, 0, -1, 0])
    path.write_text(json.dumps(record))
    done = _cli(HERE, "replay", str(path))
    assert done.returncode == 2 and "the case was edited after its verdict was recorded" in done.stderr, done.stderr
    del record["case_id"]
    path.write_text(json.dumps(record))
    done = _cli(HERE, "replay", str(path))
    assert done.returncode == 2 and "the recorded verdict is of stage moe but the case is stage 'kda'" in done.stderr


def test_replay_rederives_the_outcome_and_warns_once_on_another_environment(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    path = _recorded_seed(tmp_path)
    record = json.loads(path.read_text())
    env = record["environment"]
    assert {"k3diff", "git", "python", "torch", "cuda", "driver", "gpu", "cute_dsl", "backend"} <= set(env)
    record["environment"]["torch"] = "1.0.0"
    record["verdict"]["reports"][0]["max_err"] = 123.0          # stale numbers are not compared
    path.write_text(json.dumps(record))
    done = _cli(HERE, "replay", str(path), "--isolate", "off", "--backend", "broken_candidate:BiasInWeights")
    assert done.returncode == 1, done.stderr
    assert "reproduced the recorded outcome (FAIL" in done.stdout
    warnings = [line for line in done.stdout.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "torch 1.0.0 -> " in warnings[0], done.stdout
    record["verdict"]["ok"] = True
    record["verdict"]["reports"] = []
    path.write_text(json.dumps(record))
    done = _cli(HERE, "replay", str(path), "--isolate", "off", "--backend", "broken_candidate:BiasInWeights")
    assert "outcome DIFFERS from the recording: recorded pass, now FAIL" in done.stdout


def test_replay_of_a_folder_replays_every_seed(tmp_path):
    good = {"k3diff_seed_format": 1, "case": {"stage": "moe", "version": 1}}
    _write(tmp_path / "a.json", good)
    _write(tmp_path / "b.json", {**good, "case": {**good["case"], "batch": 2}})
    done = _cli(tmp_path, "replay", str(tmp_path), "--backend", "torch-blocked", "--isolate", "off")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("== ") == 2 and done.stdout.count("PASS moe") == 2
    _write(tmp_path / "c.json", "{not json")
    done = _cli(tmp_path, "replay", str(tmp_path), "--backend", "torch-blocked", "--isolate", "off")
    assert done.returncode == 2 and done.stdout.count("PASS moe") == 2 and "c.json: not a k3diff seed" in done.stderr


def test_the_output_contract_is_checked_after_each_run(tmp_path):
    seed = _write(tmp_path / "s.json", {"k3diff_seed_format": 1, "case": {"stage": "moe", "version": 1}})
    done = subprocess.run([sys.executable, "-m", "k3diff.cli", "replay", str(seed), "--backend",
                           "crashing_candidates:ReallocatesOutput", "--isolate", "off"], cwd=HERE,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stderr
    assert ("FAIL moe/out: contract: out['out'] was replaced by a new tensor float64[1, 64]; "
            "required bfloat16[1, 64]") in done.stdout


def test_batch_invariance_failures_get_a_seed_that_replays(project):
    result = project.runpytest_subprocess("--k3diff", "--k3diff-backend", "crashing_candidates:BatchDependent",
                                          "--k3diff-seed", "3", "--k3diff-save", "seeds", "-k",
                                          "batch_invariance and moe", "-p", "no:cacheprovider")
    assert result.ret == 1, result.stdout.str()
    seeds = _seeds(project.path)
    assert len(seeds) == 1, result.stdout.str()
    record = json.loads(seeds[0].read_text())
    assert record["check"]["kind"] == "invariance"
    position = record["check"]["position"]
    result.stdout.fnmatch_lines([f"*batch invariance (position {position}): FAIL*"])
    replay = _cli(project.path, "replay", str(seeds[0]), "--isolate", "off", "--backend",
                  "crashing_candidates:BatchDependent")
    assert replay.returncode == 1, replay.stderr
    assert replay.stdout.startswith(f"batch invariance (position {position}): FAIL")
    assert "reproduced the recorded outcome (FAIL" in replay.stdout


def test_fail_column_counts_distinct_cases():
    from k3diff.plugin import summary_lines

    rec = lambda i, ok: {"stage": "moe", "id": i, "ok": ok, "skipped": None, "seconds": 1.0,  # noqa: E731
                         "tie_flips": 0, "forced": False, "worst": None, "error": None}
    header, row = summary_lines([rec("a", True), rec("b", False), rec("b", False), rec("c", False)])
    cols = dict(zip(header.split()[:5], row.split()[:5]))
    assert cols == {"stage": "moe", "cases": "3", "runs": "4", "fail": "2", "crash": "0"}


def test_save_folder_that_breaks_mid_run_never_loses_the_seed(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    from k3diff import corpus

    real_save = corpus.save

    def flaky(case, verdict, directory, *a, **k):
        if Path(directory) == tmp_path:
            raise OSError(28, "No space left on device")
        return real_save(case, verdict, directory, *a, **k)

    monkeypatch.setattr(corpus, "save", flaky)
    path = _recorded_seed(tmp_path)
    assert path.exists() and Path(path).parent != tmp_path


def test_the_report_is_written_as_cases_are_judged(project):
    """A run killed mid-way keeps the cases it judged: one flushed JSON line per case."""
    import os
    import signal
    import time

    report = project.path / "r.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "test_suite.py", "--k3diff", "--k3diff-backend",
                             "crashing_candidates:Hang", "--k3diff-timeout", "600", "--k3diff-seed", "7", "-k",
                             "fuzz and moe", "--k3diff-report", str(report), "-p", "no:cacheprovider"],
                            cwd=project.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and not (report.exists() and report.read_text().count("\n") >= 3):
            time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    cases = [line for line in lines if line["kind"] == "case"]
    assert lines[0]["kind"] == "run" and len(cases) >= 2 and all(c["stage"] == "moe" for c in cases)


@pytest.mark.parametrize("form", ["space", "equals"])
@pytest.mark.parametrize("option", ["--k3diff-save", "--k3diff-replay"])
def test_path_options_never_move_the_rootdir(tmp_path, form, option):
    (tmp_path / "dummy.json").write_text(json.dumps({"k3diff_seed_format": 1, "case": {"stage": "moe", "version": 1}}))
    value = str(tmp_path) if option == "--k3diff-save" else str(tmp_path / "dummy.json")
    args = [option, value] if form == "space" else [f"{option}={value}"]
    done = subprocess.run([sys.executable, "-m", "pytest", "--k3diff", "--k3diff-backend", "torch-blocked", "--co",
                           "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    ids = [line for line in out.splitlines() if "::" in line]
    assert ids and all(i.startswith("tests/differential/") for i in ids), out[:2000]
    assert any("regressions" not in i and "test_seed[moe-" in i for i in ids)        # the corpus is there
    assert any("test_seed[" in i for i in ids) and len([i for i in ids if "test_seed[" in i]) >= 7
