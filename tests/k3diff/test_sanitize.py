"""`k3diff sanitize`: the compute-sanitizer report parser on recorded outputs (sanitizer_output/),
and the command end to end with a stand-in for compute-sanitizer (no GPU here)."""
from __future__ import annotations
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)

import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from k3diff import exit_codes
from k3diff.sanitize import parse

HERE = Path(__file__).resolve().parent
SAMPLES = HERE / "sanitizer_output"
ROOT = HERE.parents[1]
SEED = ROOT / "corpora" / "regressions" / "kda-562c33e401e3.json"       # tiny, one token


def _found(name):
    return [(f.what, f.kernel, f.where, f.count) for f in parse((SAMPLES / name).read_text())]


def test_memcheck_out_of_bounds_repeats_merged_and_the_host_error():
    assert _found("memcheck_oob.txt") == [
        ("Invalid __global__ read of size 4 bytes", "k_mla_attn_kernel", "by thread (31,0,0) in block (191,0,0)", 2),
        ('Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call '
         "to cudaStreamSynchronize", "", "", 1)]


def test_memcheck_before_2022_names_the_kernel_after_file_and_line():
    assert _found("memcheck_old_format.txt") == [
        ("Invalid __shared__ write of size 16 bytes", "combine_kernel", "by thread (128,0,0) in block (0,0,0)", 1),
        ("Misaligned Shared or Local Address", "gemv_mma_kernel", "by thread (0,0,0) in block (7,0,0)", 1)]


def test_racecheck_both_report_modes():
    assert _found("racecheck_analysis.txt") == [
        ("Race reported between Write access and Read access [256 hazards]", "k_kda_core_kernel", "", 1)]
    assert _found("racecheck_hazard.txt") == [
        ("Potential WAW hazard detected at __shared__ 0x0", "persistent_moe_kernel", "in block (3,0,0)", 1)]


def test_synccheck_and_initcheck():
    assert _found("synccheck.txt") == [("Barrier error detected. Divergent thread(s) in warp", "k_route_kernel",
                                        "by thread (37,0,0) in block (0,0,0)", 1)]
    found = _found("initcheck.txt")
    assert [f[1] for f in found] == ["k_mla_merge_kernel",
                                     "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>"]


def test_a_clean_report_and_the_programs_own_lines_give_nothing():
    assert _found("clean.txt") == []
    assert parse("== replay: x.json\n==== not the sanitizer\nFAIL moe tiny\n") == []


def _fake_sanitizer(tmp_path, sample: str, run_replay: bool) -> str:
    """A compute-sanitizer stand-in: prints a recorded report, running the replay it was given or not."""
    path = tmp_path / "compute-sanitizer"
    path.write_text(f"""#!{sys.executable}
import subprocess, sys
args = sys.argv[1:]
print("========= COMPUTE-SANITIZER", flush=True)
rc = subprocess.call(args[args.index({sys.executable!r}):]) if {run_replay!r} else 0
print(open({str(SAMPLES / sample)!r}).read().split("\\n", 1)[1], flush=True)
sys.exit(rc)
""")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def _sanitize(*args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "k3diff.cli", "sanitize", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=limit(600))


def test_a_finding_fails_the_command_with_one_line_naming_kernel_and_case(tmp_path):
    done = _sanitize(str(SEED), "--tool", "racecheck", "--device", "cpu",
                     "--sanitizer", _fake_sanitizer(tmp_path, "racecheck_hazard.txt", run_replay=False))
    assert done.returncode == 1, done.stdout + done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("sanitize racecheck: Potential WAW hazard detected at __shared__ 0x0 "
                            "[kernel persistent_moe_kernel; in block (3,0,0)] in case kda tiny B=1")
    assert first.endswith(f"({SEED})")
    assert done.stdout.splitlines()[-1] == "sanitize racecheck: 1 finding(s) over 1 seed(s)"


def test_exclude_drops_a_library_kernel(tmp_path):
    done = _sanitize(str(SEED), "--tool", "initcheck", "--device", "cpu", "--exclude", "cutlass|cublas",
                     "--sanitizer", _fake_sanitizer(tmp_path, "initcheck.txt", run_replay=False))
    assert done.returncode == 1
    assert "k_mla_merge_kernel" in done.stdout and "cutlass::Kernel2" not in done.stdout


def test_a_clean_replay_passes(tmp_path):
    done = _sanitize(str(SEED), "--tool", "memcheck", "--device", "cpu", "--backend", "torch-blocked",
                     "--sanitizer", _fake_sanitizer(tmp_path, "clean.txt", run_replay=True))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "sanitize memcheck: 0 finding(s) over 1 seed(s)"
    assert done.stdout.splitlines()[-2].startswith("sanitize memcheck: clean in case "), done.stdout


def test_a_seed_the_candidate_does_not_run_is_one_line_and_not_a_failure(tmp_path):
    """A folder of seeds drawn for one candidate may hold cases another refuses (a verify step, a
    stage it lacks): each is one "not run" line; the run passes on the seeds that ran, and a run in
    which no seed ran is exit 6 (nothing judged), never a clean pass."""
    moe = ROOT / "corpora" / "regressions" / "moe-b9aeafe37163.json"
    fake = _fake_sanitizer(tmp_path, "clean.txt", run_replay=True)
    env_args = ("--tool", "memcheck", "--device", "cpu", "--sanitizer", fake)
    done = _sanitize(str(moe), str(SEED), *env_args, "--backend", "crashing_candidates:RefusesEverything")
    lines = done.stdout.splitlines()
    assert done.returncode == 6, done.stdout + done.stderr
    assert any(ln.startswith("sanitize memcheck: not run: this candidate runs no case at all in case moe")
               for ln in lines), done.stdout
    assert any("not run: does not implement stage 'kda'" in ln for ln in lines), done.stdout
    assert lines[-1] == "sanitize memcheck: 0 finding(s) over 0 seed(s); 2 not run (the candidate does not run them)"


@pytest.mark.parametrize("args, status, text", [
    (["--sanitizer", "/nonexistent/compute-sanitizer"], 11, "compute-sanitizer not found"),
    (["--tool", "leakcheck"], 4, "invalid choice"),
])
def test_bad_input_is_one_line_and_its_status(args, status, text):
    base = [str(SEED), "--tool", "memcheck"]
    if "--tool" in args:
        base = [str(SEED)]
    done = _sanitize(*base, *args)
    assert done.returncode == status
    assert text in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_an_unreadable_seed_is_exit_9(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    done = _sanitize(str(bad), "--tool", "memcheck", "--sanitizer", _fake_sanitizer(tmp_path, "clean.txt", False))
    assert done.returncode == 9 and len(done.stderr.strip().splitlines()) == 1


def test_drawn_seeds_are_cases_the_candidate_runs_and_claim_no_outcome(tmp_path):
    """scripts/schedule_seeds.py (the sanitizer lane's 50 drawn seeds): a refused case is left out,
    and a drawn seed (an empty verdict) replays without "outcome DIFFERS": it records no outcome."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")]))
    draw = [sys.executable, str(ROOT / "scripts" / "schedule_seeds.py"), "--n", "2", "--seed", "5"]
    none = subprocess.run(draw + [str(tmp_path / "none"), "--backend", "crashing_candidates:RefusesEverything"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=limit(300))
    assert none.returncode == 0 and none.stdout.startswith("0 seeds in "), none.stdout + none.stderr
    assert "drawn cases the candidate refuses left out" in none.stdout
    from types import SimpleNamespace

    from k3diff.session import compare_with_record
    passed = SimpleNamespace(to_dict=lambda: {"ok": True, "reports": []})
    assert compare_with_record(passed, {"verdict": {}, "backend": "b"}, "b") == []
    assert "DIFFERS" in compare_with_record(passed, {"verdict": {"ok": False}, "backend": "b"}, "b")[0]


# -- --jobs N: seeds under the sanitizer at once; the same lines and status as one at a time

def _per_seed_sanitizer(tmp_path, plan: dict) -> str:
    """A compute-sanitizer stand-in that answers per seed (its file name): plan[name] = (recorded
    report in sanitizer_output/ or "", the program's own output, exit status, seconds to sleep).
    It writes "start end" times to name.times beside the seed, for the overlap of seeds in time."""
    path = tmp_path / "per-seed-sanitizer"
    path.write_text(f"""#!{sys.executable}
import os, sys, time
start = time.time()
seed = sys.argv[sys.argv.index("replay") + 1]
sample, own, rc, sleep = {plan!r}[os.path.basename(seed)]
time.sleep(sleep)
print("========= COMPUTE-SANITIZER")
print(own)
if sample:
    print(open(os.path.join({str(SAMPLES)!r}, sample)).read().split("\\n", 1)[1])
with open(seed + ".times", "w") as f:
    f.write(f"{{start}} {{time.time()}}")
sys.exit(rc)
""")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def _seeds(tmp_path, names):
    """Copies of the tiny seed under these names (one case each, told apart by the stand-in)."""
    folder = tmp_path / "seeds"
    folder.mkdir(exist_ok=True)
    for name in names:
        (folder / name).write_text(SEED.read_text())
    return folder


def _in_process(capsys, *args):
    """`k3diff sanitize ...` in this process (no second import of torch): (status, stdout, stderr)."""
    from k3diff import cli

    try:
        status = cli.main(["sanitize", *args])
    except SystemExit as exc:           # argparse's own exit (a bad option)
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


REFUSED = "backend x does not run this case: no FP8 cache"


@pytest.mark.parametrize("plan, status, summary", [
    ({"a.json": ("racecheck_hazard.txt", "", 0, 0.3), "b.json": ("clean.txt", "", 0, 0),
      "c.json": ("", "FAIL kda tiny", 1, 0.1), "d.json": ("", REFUSED, 6, 0),
      "e.json": ("", "k3diff: bad seed", 9, 0.2), "f.json": ("memcheck_oob.txt", "", 0, 0)},
     1, "3 finding(s) over 5 seed(s); 1 not run (the candidate does not run them)"),
    ({"a.json": ("clean.txt", "", 0, 0.3), "b.json": ("", "k3diff: bad seed", 9, 0),
      "c.json": ("", "k3diff: no backend", 8, 0.1), "d.json": ("", REFUSED, 6, 0)},
     8, "0 finding(s) over 3 seed(s); 1 not run (the candidate does not run them)"),
    ({"a.json": ("", REFUSED, 6, 0.2), "b.json": ("", REFUSED, 6, 0), "c.json": ("", REFUSED, 6, 0.1)},
     6, "0 finding(s) over 0 seed(s); 3 not run (the candidate does not run them)"),
], ids=["a finding", "exits 8 and 9", "none ran"])
def test_jobs_gives_the_lines_and_status_of_one_at_a_time(tmp_path, capsys, plan, status, summary):
    """Each seed's lines as one at a time, in the order the seeds finish; the summary last and the
    status (the worst; 6 when nothing ran) whatever that order."""
    folder = _seeds(tmp_path, plan)
    fake = _per_seed_sanitizer(tmp_path, plan)
    lines = {}
    for jobs in ("1", "3"):
        code, out, err = _in_process(capsys, str(folder), "--tool", "memcheck", "--device", "cpu",
                                     "--sanitizer", fake, "--jobs", jobs)
        assert code == status, out + err
        lines[jobs] = [re.sub(r"; \d+ s\)$", "; N s)", ln) for ln in out.splitlines()]   # a clean seed's seconds
        assert lines[jobs][-1] == f"sanitize memcheck: {summary}", out
        for name in plan:
            assert any(" in case kda tiny B=1 " in ln and f"({folder / name}" in ln for ln in lines[jobs][:-1]), out
    assert sorted(lines["1"]) == sorted(lines["3"]) and lines["1"][-1] == lines["3"][-1]
    if status == 1:
        assert any(ln.startswith("sanitize memcheck: the replay exited 1 in case ") for ln in lines["3"])
        assert any(ln.startswith("sanitize memcheck: Invalid __global__ read") for ln in lines["3"])


@pytest.mark.parametrize("jobs, text", [("0", "must be >= 1"), ("-2", "must be >= 1"), ("two", "expects a whole number"),
                                        ("1.5", "expects a whole number")])
def test_a_bad_jobs_is_one_line_and_the_usage_status(tmp_path, capsys, jobs, text):
    code, out, err = _in_process(capsys, str(SEED), "--tool", "memcheck", "--jobs", jobs,
                                 "--sanitizer", _fake_sanitizer(tmp_path, "clean.txt", False))
    assert code == exit_codes.USAGE and out == ""
    assert len(err.strip().splitlines()) == 1 and f"argument --jobs: {text}" in err, err


def test_jobs_runs_the_seeds_at_once(tmp_path, capsys):
    """Three seeds of a second each with --jobs 3: each began before any had ended (the stand-in's
    own times), and the command took well under the 3 s of one at a time."""
    plan = {name: ("clean.txt", "", 0, 1.0) for name in ("a.json", "b.json", "c.json")}
    folder = _seeds(tmp_path, plan)
    start = time.monotonic()
    code, out, err = _in_process(capsys, str(folder), "--tool", "memcheck", "--device", "cpu",
                                 "--sanitizer", _per_seed_sanitizer(tmp_path, plan), "--jobs", "3")
    took = time.monotonic() - start
    assert code == 0, out + err
    times = [tuple(map(float, (folder / f"{name}.times").read_text().split())) for name in plan]
    assert max(begun for begun, _ in times) < min(ended for _, ended in times), times
    assert took < 2.5, took


def test_a_hang_kills_the_replay_under_the_sanitizer_too(tmp_path, capsys):
    """A seed past --timeout: the sanitizer and what it started (the replay) are killed, so nothing
    of it keeps the GPU from the seeds still running; one hang line, exit 1."""
    folder = _seeds(tmp_path, {"a.json": None})
    pidfile = tmp_path / "child.pid"
    fake = tmp_path / "hanging-sanitizer"
    fake.write_text("#!/bin/sh\nsleep 60 &\necho $! > " + str(pidfile) + "\nwait\n")
    fake.chmod(0o755)
    start = time.monotonic()
    code, out, err = _in_process(capsys, str(folder), "--tool", "memcheck", "--device", "cpu",
                                 "--sanitizer", str(fake), "--timeout", "1")
    took = time.monotonic() - start
    assert code == 1 and "hang: no result in 1 s" in out, out + err
    assert took < 30, f"the command waited {took:.0f} s for the replay the hung sanitizer left"     # 60 s if left
    child = int(pidfile.read_text())
    for _ in range(50):                  # the kill is sent before the command returns; reaping is the init's
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        if "Z" in _state(child):
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the replay under the hung sanitizer (pid {child}) still runs")


def _state(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_out_of_memory_api_errors_are_the_machines_not_findings(tmp_path):
    """Several replays on one GPU (an H100 running the four tools side by side): PyTorch's
    allocator ran out, freed its cache and went on, and memcheck reported each cudaMalloc that
    failed; those were printed as findings. They are counted on the seed's line; the replay's own
    status decides (here it passed, so the seed is clean)."""
    assert [f[0] for f in _found("memcheck_oom.txt")] == [
        'Program hit cudaErrorMemoryAllocation (error 2) due to "out of memory" on CUDA API call to cudaMalloc',
        'Program hit cudaErrorMemoryAllocation (error 2) due to "out of memory" on CUDA API call to cudaGetLastError']
    done = _sanitize(str(SEED), "--tool", "memcheck", "--device", "cpu", "--backend", "torch-blocked",
                     "--sanitizer", _fake_sanitizer(tmp_path, "memcheck_oom.txt", run_replay=True))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-2].startswith("sanitize memcheck: clean in case "), done.stdout
    assert lines[-2].endswith("; 2 out-of-memory API error(s) set aside: the machine's)"), lines[-2]
    assert lines[-1] == "sanitize memcheck: 0 finding(s) over 1 seed(s)"
