"""The throughput bench's verdict comparison (k3diff/tools/throughput.py): a speed-up may move a
float64 number in its last bits, never a verdict."""
from k3diff.tools.throughput import agreement
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)

V = {"ok": True, "error": None, "reports": [{"name": "out", "ratio": 0.25, "max_abs": 1e-3, "ok": True}]}


def test_identical_is_bitwise():
    assert agreement(V, dict(V)) == "bitwise"


def test_last_bits_of_a_number_are_the_same_verdict():
    moved = dict(V, reports=[dict(V["reports"][0], ratio=0.25 * (1 + 1e-15))])
    assert agreement(V, moved) == "same"


def test_similarity_is_the_same_within_an_absolute_1e_12():
    """1 - 2xy/(x^2+y^2) near 0 moves by ~1e-16 when a sum is taken in another order."""
    near = dict(V, reports=[dict(V["reports"][0], similarity=1.0536927252946526e-07)])
    moved = dict(V, reports=[dict(V["reports"][0], similarity=1.0536927230742066e-07)])
    assert agreement(near, moved) == "same"
    assert agreement(near, dict(V, reports=[dict(V["reports"][0], similarity=2e-07)])) == "DIFFERENT"


def test_reports_in_another_order_are_the_same_verdict():
    """Two trees may judge a stage's tensors in another order: matched by tensor, not position."""
    a = dict(V, reports=[{"tensor": "kv_cache.new", "max_err": 0.5, "ok": True}, {"tensor": "kv_cache.untouched", "max_err": 0.0, "ok": True}])
    b = dict(a, reports=a["reports"][::-1])
    assert agreement(a, b) == "same"
    swapped = dict(a, reports=[dict(a["reports"][0], max_err=0.0), dict(a["reports"][1], max_err=0.5)])
    assert agreement(a, swapped) == "DIFFERENT"


def test_the_outcome_of_a_verdict_leaves_out_its_numbers():
    """Across two trees whose judges differ (a tree judging more tensors of a multi-step case), the
    table says whether the outcomes still agree."""
    from k3diff.tools.throughput import outcome

    more = dict(V, reports=V["reports"] + [{"tensor": "out@1", "ok": True, "ratio": 0.5}])
    assert agreement(V, more) == "DIFFERENT" and outcome(V) == outcome(more)
    failed = dict(more, ok=False, reports=[dict(V["reports"][0], ok=False)])
    assert outcome(failed) != outcome(V)


def test_a_changed_verdict_or_a_real_change_differs():
    assert agreement(V, dict(V, ok=False)) == "DIFFERENT"
    assert agreement(V, dict(V, reports=[dict(V["reports"][0], ratio=0.26)])) == "DIFFERENT"
    assert agreement(V, dict(V, reports=[])) == "DIFFERENT"


def test_gist_names_the_first_failing_report_or_the_error():
    from k3diff.tools.throughput import _gist

    bad = dict(V, ok=False, reports=[V["reports"][0], {"ok": False, "stage": "moe", "tensor": "out",
                                                       "max_err": 0.5, "bound": 0.1, "note": None}])
    assert _gist(bad) == "FAIL moe/out: max|err| 0.5 vs bound 0.1 (1 failing report(s))"
    assert _gist(dict(V, ok=False, error="RuntimeError: boom")) == "ERROR RuntimeError: boom"
    assert _gist(V) == "ok"


def test_workers_share_the_cases_and_judge_each_once():
    """--workers 2: two processes released together, every drawn case judged once; a bad count is a usage error."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    run = lambda *a: subprocess.run([sys.executable, "-m", "k3diff.tools.throughput", *a],  # noqa: E731
                                    cwd=root, capture_output=True, text=True, timeout=limit(300))
    got = run("--stages", "kda", "--cases", "6", "--compare-with", "none", "--workers", "2", "--weights-first")
    assert got.returncode == 0, got.stderr[-2000:]
    assert "2 worker processes per side" in got.stdout
    assert "(weights drawn first, in " in got.stdout          # before the clock, and said apart
    row = [ln.split() for ln in got.stdout.splitlines() if ln.startswith("kda ")]
    assert row and row[0][1] == "6" and row[0][2] == "0", got.stdout
    bad = run("--stages", "kda", "--cases", "2", "--workers", "0")
    assert bad.returncode == 2 and "--workers must be >= 1" in bad.stderr


def _tool(*args, cwd=None):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    return subprocess.run([sys.executable, "-m", "k3diff.tools.throughput", *args], cwd=cwd or root,
                          capture_output=True, text=True, timeout=limit(600))


def test_a_baseline_gets_only_the_cases_it_can_read(tmp_path):
    """A field the baseline's Case does not know (a verify step's widths, say) keeps that case out
    of a comparison: an older tree would refuse it, or judge another case."""
    from k3diff.tools.throughput import readable_by

    (tmp_path / "k3diff").mkdir()
    (tmp_path / "k3diff" / "__init__.py").write_text("")
    (tmp_path / "k3diff" / "case.py").write_text(
        "import dataclasses\n@dataclasses.dataclass\nclass Case:\n    stage: str = 'moe'\n    batch: int = 1\n")
    plain, newer = {"stage": "moe", "batch": 2}, {"stage": "moe", "batch": 2, "widths": [1, 2]}
    assert readable_by(tmp_path, [plain, newer, plain]) == [plain, plain]


def _old_tree(tmp_path, versions="(1,)"):
    (tmp_path / "k3diff").mkdir()
    (tmp_path / "k3diff" / "__init__.py").write_text("")
    (tmp_path / "k3diff" / "case.py").write_text(
        "import dataclasses\nCASE_VERSIONS = " + versions + "\n@dataclasses.dataclass\nclass Case:\n"
        "    stage: str = 'moe'\n    batch: int = 1\n    version: int = 1\n")
    return tmp_path


def test_a_baseline_gets_only_the_case_versions_it_reads(tmp_path):
    from k3diff.tools.throughput import readable_by

    v1, v2 = {"stage": "moe", "batch": 2, "version": 1}, {"stage": "moe", "batch": 2, "version": 2}
    assert readable_by(_old_tree(tmp_path), [v1, v2]) == [v1]


def test_a_baseline_that_reads_none_of_the_cases_is_one_line_and_exit_9(tmp_path):
    """Today's cases are drawn at the current case version: a tree that reads older versions only
    judges nothing, which is said, not measured as 0 cases a second."""
    got = _tool("--stages", "moe", "--cases", "2", "--compare-with", str(_old_tree(tmp_path)))
    assert got.returncode == 9, got.stderr[-2000:]
    line = got.stderr.strip().splitlines()[-1]
    assert "reads none of the" in line and "newer revision" in line and "Traceback" not in got.stderr


def test_isolate_and_repeat_are_checked():
    bad = _tool("--stages", "moe", "--cases", "2", "--repeat", "0")
    assert bad.returncode == 2 and "--repeat must be >= 1" in bad.stderr
    bad = _tool("--stages", "moe", "--cases", "2", "--isolate", "on", "--weights-first")
    assert bad.returncode == 2 and "--weights-first" in bad.stderr


def test_isolated_sides_judge_the_same_cases_alike():
    """--isolate on: each side judges through its own tree's isolated checker (a child process
    per side), the sides alternated; this tree as its own baseline must give bitwise verdicts."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    got = _tool("--stages", "kda", "--cases", "2", "--isolate", "on", "--repeat", "2", "--compare-with", str(root))
    assert got.returncode == 0, got.stderr[-2000:]
    assert "isolation on; 2 run(s) per side" in got.stdout
    order = [ln.split()[1] for ln in got.stdout.splitlines() if ln.startswith("  kda: ")]
    assert order == ["now", "baseline", "baseline", "now"], got.stdout      # alternated
    row = [ln.split() for ln in got.stdout.splitlines() if ln.startswith("kda ")]
    assert row and row[0][1] == "2" and row[0][-1] == "bitwise", got.stdout
    assert "ratio" in got.stdout.splitlines()[-2]
    for side in ("now", "baseline"):        # each side's time, once, in the pytest summary's words
        assert got.stdout.count(f"  kda ({side}) time per case: median ") == 1, got.stdout


def test_a_baseline_version_times_the_old_draws_on_the_same_cases():
    """--baseline-version 2: the baseline (here this very tree) judges each case drawn as version
    2 draws it, the current code at version 3; numbers differ by construction, outcomes must not."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    got = _tool("--stages", "kda", "--cases", "3", "--compare-with", str(root), "--baseline-version", "2")
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-2000:]
    row = next(line for line in got.stdout.splitlines() if line.startswith("kda "))
    assert "outcomes same (other draws)" in row
    bad = _tool("--stages", "kda", "--cases", "3", "--baseline-version", "2")
    assert bad.returncode == 2 and "needs a baseline" in bad.stderr
