"""The pytest plugin itself, driven through pytester in subprocesses (as a user would run it)."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SUITE = "from k3diff.suite import test_batch_invariance, test_fuzz, test_seed  # noqa\n"


@pytest.fixture
def project(pytester):
    pytester.makepyfile(test_suite=SUITE)
    pytester.makepyfile(broken_candidate=(HERE / "broken_candidate.py").read_text())
    return pytester


def _cli(cwd, *args):
    return subprocess.run([sys.executable, "-m", "k3diff.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


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
    replay = _cli(project.path, "replay", str(seeds[0]))
    assert replay.returncode == 1, replay.stderr
    assert "reproduced the recorded verdict bit for bit" in replay.stdout
    assert "FAIL" in replay.stdout.splitlines()[0]


def test_xdist_merges_one_summary_and_loses_no_seed(project):
    result = project.runpytest_subprocess(*BROKEN, "-n", "2")
    assert result.ret == 1
    out = result.stdout.str()
    assert out.count("k3diff summary") == 1
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
])
def test_bad_options_give_one_line(project, args, message):
    result = project.runpytest_subprocess("--k3diff", *args)
    assert result.ret != 0
    lines = [l for l in result.stderr.str().splitlines() if message in l]
    assert lines, result.stderr.str()


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
