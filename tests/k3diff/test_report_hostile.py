"""Results files are untrusted data: `k3diff report` and `k3diff report --compare` given a hostile
file (a FIFO or a device as input or output, a symlink loop in a folder, a deeply nested JSON line,
fields of the wrong type, a corrupt gzip, a huge line, worker parts named outside the file's own
folder) end with one line on stderr and the report's bad-input status (2), never a traceback, a
read that blocks forever or memory that grows without bound.

The cases that could block or eat memory run `k3diff` in a child process with a time and memory
limit, so a regression fails the test instead of hanging the suite."""
from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BAD_INPUT = 2          # `k3diff report`'s status for a results file it cannot use (k3diff/report/__init__.py)
LIMIT_S = 120          # generous for a loaded 2-core box; a blocking read never ends at all
MEMORY = 2 << 30       # address space of the child: /dev/zero read whole would pass it


def _case(seed=0, **over):
    rec = {"kind": "case", "stage": "moe", "id": f"id{seed}", "label": f"moe B={seed + 1}", "phase": "generate",
           "case": {"stage": "moe", "batch": seed + 1, "seed": seed}, "batch": seed + 1, "ok": True,
           "skipped": None, "error": None, "seconds": 0.1, "tie_flips": 0, "forced": False,
           "backend": "torch-blocked", "tensors": [{"tensor": "out", "ok": True, "ratio": 0.2, "bound": 0.01}],
           "worst": ["out", 0.2, 1e-5, 3.0], "failure": None}
    rec.update(over)
    return rec


def _run_file(path, cases=None, header=None):
    head = {"kind": "run", "format": 2, "seed": 5, "profile": "quick", "backend": "torch-blocked", "run_id": "r1",
            "started_unix": 1.8e9}
    head.update(header or {})
    lines = [head] + (cases if cases is not None else [_case(0), _case(1)]) + [{"kind": "end", "seconds": 1.0}]
    Path(path).write_text("".join(json.dumps(x) + "\n" for x in lines))
    return Path(path)


def _limit():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    try:
        return subprocess.run([sys.executable, "-m", "k3diff.cli", *map(str, args)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=LIMIT_S, preexec_fn=_limit)
    except subprocess.TimeoutExpired:
        pytest.fail(f"k3diff {' '.join(map(str, args))} still running after {LIMIT_S} s (a blocking read or write)")


def _one_line(done, *words):
    assert done.returncode == BAD_INPUT, (done.returncode, done.stdout, done.stderr)
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in done.stderr, done.stderr
    assert err[0].startswith("k3diff report: "), err
    for w in words:
        assert w in err[0], err


def _both(path, tmp_path, good=None):
    """`k3diff report PATH` and `k3diff report --compare GOOD PATH`, each one line and exit 2."""
    good = good or _run_file(tmp_path / "good.jsonl")
    yield _cli("report", path, "-o", tmp_path / "a.html")
    yield _cli("report", "--compare", good, path, "-o", tmp_path / "b.html")


# ---------------------------------------------------------------- what the file is

def test_a_fifo_as_input_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "r.jsonl"
    os.mkfifo(fifo)
    for done in _both(fifo, tmp_path):
        _one_line(done, "not a regular file")


def test_a_device_as_input_is_refused_not_read_forever(tmp_path):
    for done in _both("/dev/zero", tmp_path):
        _one_line(done, "/dev/zero", "not a regular file")


@pytest.mark.parametrize("compare", [False, True])
@pytest.mark.parametrize("target", ["fifo", "/dev/zero"])
def test_a_fifo_or_device_as_output_is_refused_not_waited_on(tmp_path, target, compare):
    good = _run_file(tmp_path / "good.jsonl")
    out = tmp_path / "out.html"
    if target == "fifo":
        os.mkfifo(out)
    else:
        out = Path(target)
    args = ["--compare", good, good] if compare else [good]
    _one_line(_cli("report", *args, "-o", out), str(out), "not a regular file")
    md = tmp_path / "summary.md"
    if target == "fifo":
        os.mkfifo(md)
    else:
        md = Path(target)
    _one_line(_cli("report", *args, "-o", tmp_path / "fine.html", "--markdown", md), str(md), "not a regular file")


def test_a_symlink_loop_in_a_folder_is_one_line(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    _run_file(folder / "good.jsonl")
    (folder / "loop.jsonl").symlink_to("loop.jsonl")           # ELOOP when opened or resolved
    (folder / "sub").mkdir()
    (folder / "sub" / "up").symlink_to("..")                   # a folder that contains itself
    for done in _both(folder, tmp_path, good=_run_file(tmp_path / "other.jsonl")):
        _one_line(done, "loop.jsonl")


# ---------------------------------------------------------------- what the file holds

def test_a_deeply_nested_json_line_is_one_line(tmp_path):
    path = tmp_path / "r.jsonl"
    _run_file(path)
    with open(path, "a") as fh:
        fh.write("[" * 200_000 + "]" * 200_000 + "\n")
    for done in _both(path, tmp_path):
        _one_line(done, "r.jsonl:5")


@pytest.mark.parametrize("field, value", [
    ("stage", 5), ("id", ["x"]), ("ok", "yes"), ("skipped", {"a": 1}), ("tensors", "out"),
    ("tensors", [["out", 1]]), ("worst", "out"), ("worst", ["out", "big"]), ("case", [1, 2]), ("seconds", "fast"),
    ("tie_flips", "many"), ("batch", "two"), ("phase", 3), ("label", None), ("error_map", "x"),
])
def test_a_case_field_of_the_wrong_type_is_one_line(tmp_path, field, value):
    path = _run_file(tmp_path / "r.jsonl", [_case(0), _case(1, **{field: value})])
    for done in _both(path, tmp_path):
        _one_line(done, "r.jsonl:3", field)


@pytest.mark.parametrize("field, value", [("seed", {"a": 1}), ("parts", "x.jsonl"), ("environment", "cpu"),
                                          ("boundaries", ["batch"]), ("started_unix", "now"), ("backend", 3)])
def test_a_run_field_of_the_wrong_type_is_one_line(tmp_path, field, value):
    path = _run_file(tmp_path / "r.jsonl", header={field: value})
    for done in _both(path, tmp_path):
        _one_line(done, "r.jsonl:1", field)


def test_a_corrupt_gzip_is_one_line(tmp_path):
    raw = "".join(json.dumps(x) + "\n" for x in [{"kind": "run", "seed": 5}] + [_case(k) for k in range(200)])
    blob = bytearray(gzip.compress(raw.encode()))
    for k in range(40, len(blob) - 20, 7):              # the deflate stream damaged, the header intact
        blob[k] ^= 0x5A
    path = tmp_path / "r.jsonl.gz"
    path.write_bytes(bytes(blob))
    for done in _both(path, tmp_path):
        _one_line(done, "r.jsonl.gz")


def test_a_huge_line_is_one_line_not_read_whole(tmp_path, monkeypatch):
    """A line past the reader's limit (k3diff.report.load.MAX_LINE) stops the read there."""
    from k3diff.report import load

    monkeypatch.setattr(load, "MAX_LINE", 4096)
    path = _run_file(tmp_path / "r.jsonl", [_case(0), _case(1, label="x" * 10_000)])
    with pytest.raises(load.ReportInputError, match=r"r\.jsonl:3: a line longer than 4096 bytes"):
        load.load([path])


def test_the_line_limit_holds_for_a_real_file(tmp_path):
    """The same through the command with the shipped limit: a line past it (one long run of spaces,
    cheap to write) is one line, and the child never holds it whole (its memory is capped)."""
    from k3diff.report.load import MAX_LINE

    path = _run_file(tmp_path / "r.jsonl")
    with open(path, "a") as fh:
        fh.write('{"kind": "case", "label": "' + " " * (MAX_LINE + 10) + '"}\n')
    for done in _both(path, tmp_path):
        _one_line(done, "r.jsonl:5", "longer than")


# ---------------------------------------------------------------- where the file points

def test_worker_parts_outside_the_files_own_folder_are_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _run_file(elsewhere / "x.gw0.jsonl", [_case(7, ok=False, failure="FAIL moe/out planted")],
              header={"worker": "gw0"})
    here = tmp_path / "here"
    here.mkdir()
    path = _run_file(here / "r.jsonl", header={"parts": ["../elsewhere/x.jsonl:gw*"]})
    for done in _both(path, tmp_path):
        _one_line(done, "r.jsonl", "../elsewhere/x.jsonl:gw*", "outside")
        assert "planted" not in done.stdout


@pytest.mark.parametrize("pattern", ["/abs/x.jsonl:gw*", "*.jsonl:gw*", "sub/x.jsonl:gw*", "..:gw*"])
def test_a_parts_pattern_that_is_not_a_plain_name_beside_the_file_is_refused(tmp_path, pattern):
    from k3diff.report import load

    path = _run_file(tmp_path / "r.jsonl", header={"parts": [pattern]})
    with pytest.raises(load.ReportInputError, match="outside"):
        load.load([path])


def test_plain_worker_parts_beside_the_file_are_still_read(tmp_path):
    from k3diff.report import load

    _run_file(tmp_path / "r.gw0.jsonl", [_case(9)], header={"worker": "gw0"})
    path = _run_file(tmp_path / "r.jsonl", header={"parts": ["r.jsonl:gw*"]})
    assert len(load.load([path]).cases) == 3


def test_markdown_to_standard_output_is_asked_for_by_name(tmp_path):
    # a pipe is refused as a path (it may have no reader), so standard output is `-`
    good = _run_file(tmp_path / "good.jsonl")
    done = _cli("report", good, "-o", tmp_path / "page.html", "--markdown", "-")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("**k3diff**: PASS") and "| moe |" in done.stdout, done.stdout
