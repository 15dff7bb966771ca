"""Results files and `k3diff report`: the record format, load/merge/compare, bad input, and a
simulated nightly (2 shards x 2 xdist workers on the CPU) merged into one self-contained HTML page."""
import importlib.metadata
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)
import json
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

from k3diff import exit_codes
from k3diff.budgets import DEFAULT
from k3diff.case import Case
from k3diff.divergence import TensorReport, compare
from k3diff.report import compare as report_compare
from k3diff.report import tables
from k3diff.report.load import ReportInputError, load
from k3diff.results import RESULTS_FORMAT, environment, record
from k3diff.runner import Verdict

ROOT = Path(__file__).resolve().parents[2]
SUITE = "from k3diff.suite import test_batch_invariance, test_fuzz, test_seed  # noqa\n"


# ---------------------------------------------------------------- the record format

def _verdict(case, ratio, ok=True, seconds=0.1):
    reports = [TensorReport(case.stage, "out", ok, max_err=ratio * 0.01, bound=0.01, similarity=1e-5, worst_ulps=3.0),
               TensorReport(case.stage, "kv_cache.untouched", True, note="bitwise equal")]
    if not ok:
        reports[0].error_map = [[0.0, ratio * 0.01], [0.001, 0.0]]
    return Verdict(case, "torch-blocked", reports=reports, seconds=seconds)


def test_error_map_only_on_failing_tensors_and_never_in_the_verdict_dict():
    ref = torch.linspace(-1, 1, 300 * 80, dtype=torch.float64).reshape(300, 80)
    budget = DEFAULT
    passing = compare("moe", "out", ref.to(torch.bfloat16), ref, ref.to(torch.bfloat16), budget, torch.bfloat16)
    assert passing.ok and passing.error_map is None
    bad = ref.clone()
    bad[7, 3] += 0.5
    failing = compare("moe", "out", bad, ref, ref.to(torch.bfloat16), budget, torch.bfloat16)
    assert not failing.ok
    assert len(failing.error_map) == 64 and len(failing.error_map[0]) == 64
    assert max(map(max, failing.error_map)) == pytest.approx(0.5, rel=1e-3)
    assert "error_map" not in failing.to_dict() and "error_map" not in passing.to_dict()


def test_record_has_the_case_every_tensor_and_the_worst_error_map():
    case = Case("mla", batch=2, cache_lens=(5, 9))
    good = record(case, _verdict(case, 0.4))
    assert good["kind"] == "case" and good["case"] == case.to_dict() and good["batch"] == 2
    assert good["max_cache_len"] == 9 and good["ok"] and good["error_map"] is None
    assert [t["tensor"] for t in good["tensors"]] == ["out", "kv_cache.untouched"]
    assert good["tensors"][0]["ratio"] == pytest.approx(0.4) and good["tensors"][1]["ratio"] == 0.0
    bad = record(case, _verdict(case, 3.0, ok=False))
    assert not bad["ok"] and bad["error_map"]["tensor"] == "out" and bad["failure"].startswith("FAIL mla/out")
    json.dumps(bad, allow_nan=False)          # strict JSON: no inf or NaN in a record


def test_environment_names_the_software():
    env = environment()
    assert env["torch"] == torch.__version__ and env["python"] and env["hostname"]
    assert env["k3diff"]


def _write_run(path, seed, cases, shard=None, backend="torch-blocked", end=True, extra=()):
    header = {"kind": "run", "format": RESULTS_FORMAT, "seed": seed, "profile": "quick", "backend": backend,
              "shard": shard, "started_unix": 1.8e9, "environment": {"torch": "x", "git_commit": "abc"}}
    tail = [{"kind": "end", "seconds": 12.5, "exitstatus": 0, "cases": len(cases), "failing": 0}] if end else []
    path.write_text("".join(json.dumps(line) + "\n" for line in [header] + cases + list(extra) + tail))
    return path


def _cases(ratios, failing=()):
    out = []
    for k, ratio in enumerate(ratios):
        case = Case("moe", batch=k + 1, seed=k)
        out.append(record(case, _verdict(case, ratio, ok=k not in failing)))
    return out


# ---------------------------------------------------------------- load, merge, compare

def test_merge_keeps_every_case_and_warns_once_on_seed_disagreement(tmp_path):
    a = _write_run(tmp_path / "a.jsonl", 5, _cases([0.1, 0.2]), "1/2")
    b = _write_run(tmp_path / "b.jsonl", 5, _cases([0.3, 0.4, 0.5]), "2/2")
    run = load([a, b])
    assert len(run.cases) == 5 and len(run.headers) == 2 and run.warnings == []
    c = _write_run(tmp_path / "c.jsonl", 6, _cases([0.3]))
    odd = load([a, c])
    assert len(odd.warnings) == 1 and "disagree on the seed" in odd.warnings[0]
    assert len(load([tmp_path]).cases) == 6          # a folder: every *.jsonl under it


def test_compare_finds_new_failures_and_movements(tmp_path):
    base = load([_write_run(tmp_path / "base.jsonl", 5, _cases([0.1, 0.2, 0.3]))])
    new = load([_write_run(tmp_path / "new.jsonl", 5, _cases([0.1, 0.9, 3.0], failing={2}))])
    cmp = report_compare.compare(base, new)
    assert cmp.matched == 3 and len(cmp.new_failures) == 1 and not cmp.fixed
    assert cmp.movements[0][2] == "moe/out" and cmp.movements[0][1] == pytest.approx(2.7)
    assert sorted(cmp.pairs["moe/out"]) == [(0.1, 0.1), (0.2, 0.9), (0.3, 3.0)]
    assert "1 newly failing" in report_compare.text(cmp)


def _cli(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "k3diff.cli", *map(str, args)], cwd=cwd or ROOT, env=env,
                          capture_output=True, text=True, timeout=limit(300))


def _main(capsys, *args):
    """`k3diff ...` in this process (a subprocess pays for importing torch on every call)."""
    from k3diff.cli import main

    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_compare_exit_codes_and_summary(tmp_path, capsys):
    base = _write_run(tmp_path / "base.jsonl", 5, _cases([0.1, 0.2]))
    same = _write_run(tmp_path / "same.jsonl", 5, _cases([0.1, 0.25]))
    worse = _write_run(tmp_path / "worse.jsonl", 5, _cases([0.1, 2.0], failing={1}))
    code, out, err = _main(capsys, "report", "--compare", base, same, "-o", tmp_path / "c1.html")
    assert code == 0, err
    assert "2 cases matched" in out and "0 newly failing" in out
    code, out, err = _main(capsys, "report", "--compare", base, worse, "-o", tmp_path / "c2.html")
    assert code == 1 and "NEW FAIL moe" in out
    page = (tmp_path / "c2.html").read_text()
    assert 'name="k3diff-new-failures" content="1"' in page and "data:image/svg+xml;base64," in page


def test_compare_of_disjoint_runs_fails_and_says_nothing_matched(tmp_path, capsys):
    base = _write_run(tmp_path / "base.jsonl", 5, _cases([0.1, 0.2]))
    other = []
    for k, ratio in enumerate([0.1, 3.0]):                   # other cases: seeds BASE never drew
        case = Case("moe", batch=k + 1, seed=100 + k)
        other.append(record(case, _verdict(case, ratio, ok=k != 1)))
    passing = _write_run(tmp_path / "passing.jsonl", 5, other[:1])
    code, out, err = _main(capsys, "report", "--compare", base, passing, "-o", tmp_path / "d1.html")
    assert code == 6, out + err
    assert "0 cases matched (2 only in BASE, 1 only in NEW)" in out
    assert "k3diff report: NOTHING COMPARED: 0 cases matched" in err and "COVERAGE DROP" in err
    assert 'class="verdict">FAIL' in (tmp_path / "d1.html").read_text()
    failing = _write_run(tmp_path / "failing.jsonl", 5, other)
    code, out, err = _main(capsys, "report", "--compare", base, failing, "-o", tmp_path / "d2.html")
    assert code == 1, out + err
    assert "1 failing where BASE did not run" in out and "NEW FAIL (not in BASE) moe" in out


def test_new_failures_on_cases_base_did_not_run_fail_the_compare(tmp_path, capsys):
    base = _write_run(tmp_path / "base.jsonl", 5, _cases([0.1, 0.2]))
    new = _write_run(tmp_path / "new.jsonl", 5, _cases([0.1, 0.2, 3.0], failing={2}))
    code, out, err = _main(capsys, "report", "--compare", base, new, "-o", tmp_path / "c.html")
    assert code == 1, out + err
    assert "2 cases matched (0 only in BASE, 1 only in NEW); 0 newly failing, 1 failing where BASE did not run" in out
    assert 'name="k3diff-new-failures" content="1"' in (tmp_path / "c.html").read_text()


def test_a_coverage_drop_is_said_loudly_and_the_matched_count_always(tmp_path, capsys):
    base = _write_run(tmp_path / "base.jsonl", 5, _cases([0.1, 0.2, 0.3, 0.4]))
    new = _write_run(tmp_path / "new.jsonl", 5, _cases([0.1]))
    code, out, err = _main(capsys, "report", "--compare", base, new, "-o", tmp_path / "c.html",
                           "--markdown", tmp_path / "m.md")
    assert code == exit_codes.INCOMPLETE, out + err        # as loud as a new failure: not a pass
    assert out.startswith("COVERAGE DROP: NEW did not run 3 of BASE's 4 case(s) (75%)") and "1 cases matched" in out
    assert "k3diff report: COVERAGE DROP" in err
    assert "**COVERAGE DROP" in (tmp_path / "m.md").read_text()
    assert "COVERAGE DROP" in (tmp_path / "c.html").read_text()


@pytest.mark.parametrize("content, message", [
    (None, "no such results file"),
    ("", "no case in this results file"),
    ("hello\n", "not a k3diff results file"),
    ('{"kind": "run", "seed": 1}\n', "no case in this results file"),
    ('{"something": 1}\n', "not a k3diff results line"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, content, message):
    path = tmp_path / "r.jsonl"
    if content is not None:
        path.write_text(content)
    for args in (["report", path], ["report", "--compare", path, path]):
        code, out, err = _main(capsys, *args, "-o", tmp_path / "x.html")
        assert code == 2, out + err
        assert len(err.strip().splitlines()) == 1 and message in err, err
    with pytest.raises(ReportInputError, match=message):
        load([path])


def test_bad_input_from_the_command_line_has_no_traceback(tmp_path):
    done = _cli("report", tmp_path / "missing.jsonl", "-o", tmp_path / "x.html")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == f"k3diff report: {tmp_path / 'missing.jsonl'}: no such results file"


# ---------------------------------------------------------------- a simulated nightly

class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.external, self.meta, self._in_total, self.total = [], [], {}, False, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.images.append(a.get("src", ""))
        for key in ("src", "href"):
            if a.get(key) and not a[key].startswith(("data:", "#")):
                self.external.append(a[key])
        if tag == "meta" and "name" in a:
            self.meta[a["name"]] = a.get("content")
        self._in_total = a.get("id") == "total-cases"

    def handle_data(self, data):
        if self._in_total:
            self.total, self._in_total = int(data), False


def _plugin_args():
    """-p k3diff.plugin only where the pytest11 entry point does not load it already (both: an error)."""
    eps = importlib.metadata.entry_points(group="pytest11")
    return [] if any(ep.value == "k3diff.plugin" for ep in eps) else ["-p", "k3diff.plugin"]


def simulate_nightly(where: Path, seed=123, shards=2, workers=2, select="fuzz and (moe or mla)", backend="torch-blocked"):
    """What .github/workflows/nightly.yml does, on the CPU: every shard with its results and JUnit.
    Two stages' fuzz items (one stage a shard, one item a worker), judged in the workers' own
    processes: sharding, the workers' streamed parts and the merge are what is simulated here, and
    each child process the isolation would start costs seconds of CI's 2 cores."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "test_suite.py").write_text(SUITE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(where), os.environ.get("PYTHONPATH", "")]))
    env.pop("CI", None)
    files = []
    for i in range(1, shards + 1):
        results, junit = where / f"results-{i}.jsonl", where / f"junit-{i}.xml"
        done = subprocess.run(
            [sys.executable, "-m", "pytest", *_plugin_args(), "test_suite.py", "--k3diff", "--k3diff-profile", "quick",
             "--k3diff-backend", backend, "--k3diff-shard", f"{i}/{shards}", "-n", str(workers),
             "--k3diff-seed", str(seed), "--k3diff-report", str(results), "--junitxml", str(junit),
             "--k3diff-save", "seeds", "--k3diff-isolate", "off", "-k", select, "-q", "-p", "no:cacheprovider"],
            cwd=where, env=env, capture_output=True, text=True, timeout=limit(600))
        assert results.exists() and junit.exists(), done.stdout[-3000:] + done.stderr[-3000:]
        files.append((results, done.returncode))
    return files


def test_simulated_nightly_merges_shards_into_one_self_contained_page(tmp_path, capsys):
    files = simulate_nightly(tmp_path / "run")
    assert all(rc == 0 for _, rc in files)
    # under xdist each worker streamed its own part; the shard's file names them and ends the run
    counts = [len(tables.judged(load([f]).cases)) for f, _ in files]
    assert all(counts), counts
    for f, _ in files:
        lines = [json.loads(x) for x in f.read_text().splitlines()]
        assert lines[-1]["kind"] == "end" and lines[-1]["exitstatus"] == 0
        assert sorted(f.parent.glob(f.name.replace(".jsonl", ".gw*.jsonl")))
    headers = [json.loads(f.read_text().splitlines()[0]) for f, _ in files]
    assert [h["shard"] for h in headers] == ["1/2", "2/2"] and {h["seed"] for h in headers} == {123}
    out, md = tmp_path / "report.html", tmp_path / "summary.md"
    code, _, err = _main(capsys, "report", *(f for f, _ in files), "-o", out, "--markdown", md)
    assert code == 0, err
    assert err == ""                               # the shards agree on the seed: no warning
    page = _Page()
    page.feed(out.read_text())
    assert page.total == sum(counts) and page.meta["k3diff-cases"] == str(sum(counts))
    svgs = [src for src in page.images if src.startswith("data:image/svg+xml;base64,")]
    assert len(svgs) >= 2 and len(svgs) == len(page.images)
    assert page.meta["k3diff-verdict"] == "pass"
    assert page.external == []
    assert "| moe |" in md.read_text() and "| mla |" in md.read_text()


# ---------------------------------------------------------------- the page a reviewer decides from

def _tagged(case, ratio, item, phase, ok=True):
    rec = record(case, _verdict(case, ratio, ok=ok))
    return dict(rec, item=item, phase=phase)


def _shrinking_run():
    """One item that fails and is shrunk: its first failure, 3 shrink steps (2 failing), the minimal."""
    item = "test_suite.py::test_fuzz[0-moe]"
    first, minimal = Case("moe", batch=40, seed=3), Case("moe", batch=1, seed=0)
    cases = _cases([0.1, 0.2]) + [_tagged(first, 9.0, item, "generate", ok=False),
                                  _tagged(Case("moe", batch=20, seed=3), 5.0, item, "shrink", ok=False),
                                  _tagged(Case("moe", batch=10, seed=3), 0.5, item, "shrink"),
                                  _tagged(minimal, 2.0, item, "shrink", ok=False)]
    from k3diff.corpus import case_id

    saved = {"kind": "failure", "stage": "moe", "path": f"seeds/moe-{case_id(minimal)}.json", "item": item,
             "id": case_id(minimal), "replay": f"k3diff replay 'seeds/moe-{case_id(minimal)}.json' --backend x",
             "headline": "FAIL moe minimal"}
    return cases, saved, case_id(minimal)


def test_shrink_steps_fold_under_the_marked_minimal_seed(tmp_path):
    from k3diff.report.failures import distinct
    from k3diff.report.html import run_report

    cases, saved, minimal_id = _shrinking_run()
    run = load([_write_run(tmp_path / "r.jsonl", 5, cases, extra=[saved])])
    fails = distinct(run)
    assert len(fails) == 1 and fails[0].minimal["id"] == minimal_id and len(fails[0].steps) == 2
    assert fails[0].replay(run.failures) == saved["replay"]
    assert tables.distinct_failures(run.cases) == 1 and len(tables.judged(run.cases)) == 3   # 2 + the first
    page = run_report(run)
    assert 'id="banner" class="fail"' in page and "1 distinct failing case(s)" in page
    assert page.count('class="minimal"') == 1 and "2 shrink step(s) (1 failing)" in page
    assert page.count("<details") >= 3 and "k3diff replay &#x27;seeds/moe-" in page
    assert 'name="k3diff-failures" content="1"' in page


def test_a_file_without_its_end_record_is_called_cut_short(tmp_path, capsys):
    path = _write_run(tmp_path / "r.jsonl", 5, _cases([0.1, 0.2]), end=False)
    run = load([path])
    assert run.truncated == [str(path)] and "ended without its end record" in run.warnings[0]
    code, out, err = _main(capsys, "report", path, "-o", tmp_path / "x.html")
    # the command says what the page says: INCOMPLETE, with its own status (not 0, not 1)
    assert code == exit_codes.INCOMPLETE and "ended without its end record" in err
    assert out.startswith("INCOMPLETE: 2 cases") and "1 file(s) cut short" in out
    assert 'class="incomplete"' in (tmp_path / "x.html").read_text()


def test_plots_clip_to_the_passing_range_and_mark_outliers():
    import base64

    from k3diff.report import plots

    svg = base64.b64decode(plots.ratio_boxplot({"moe/out": [0.1, 0.4, 0.8, 4e34]})).decode()
    assert "1 past, max 4.0e+34x" in svg                    # the outlier named at the edge
    assert plots.clip_edge([0.1, 0.4, 0.8, 4e34]) == pytest.approx(1.2)


def test_accuracy_is_shown_and_its_movement_compared(tmp_path):
    from k3diff.report.html import run_report

    def with_acc(cases, acc):
        for c, a in zip(cases, acc):
            c["tensors"][0]["accuracy"] = a
        return cases

    base = load([_write_run(tmp_path / "b.jsonl", 5, with_acc(_cases([0.1, 0.2]), [1.5, 2.0]))])
    new = load([_write_run(tmp_path / "n.jsonl", 5, with_acc(_cases([0.1, 0.2]), [1.5, 7.0]))])
    assert "accuracy median" in run_report(new) and "<td>7</td>" in run_report(new)
    cmp = report_compare.compare(base, new)
    assert cmp.accuracy[0][1] == pytest.approx(5.0) and "accuracy moe/out 2 -> 7" in report_compare.text(cmp)


def test_compare_matches_by_case_when_new_fails_and_shrinks(tmp_path):
    """NEW fails its first case, so Hypothesis shrinks and NEW's later draws never happen in the
    same order: cases still match by the case itself, shrink steps match nothing."""
    cases, saved, _ = _shrinking_run()
    base_cases = [dict(c, phase="generate", ok=True, worst=["out", 0.3, 0, 0]) for c in cases
                  if c.get("phase") != "shrink"]
    base = load([_write_run(tmp_path / "b.jsonl", 5, list(reversed(base_cases)))])      # another order
    new = load([_write_run(tmp_path / "n.jsonl", 5, cases, extra=[saved])])
    cmp = report_compare.compare(base, new)
    assert cmp.matched == 3 and cmp.only_new == 0 and len(cmp.new_failures) == 1
    assert cmp.new_failures[0][1]["phase"] == "generate"


def test_report_reads_json_without_importing_torch(tmp_path):
    path = _write_run(tmp_path / "r.jsonl", 5, _cases([0.1]))
    code = ("import sys; from k3diff.cli import main; rc = main(['report', sys.argv[1], '-o', sys.argv[2]]); "
            "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code, str(path), str(tmp_path / "x.html")], cwd=ROOT,
                          capture_output=True, text=True, timeout=limit(300))
    assert done.returncode == 0, done.stderr


def test_coverage_names_every_declared_boundary_and_the_never_crossed(tmp_path):
    from k3diff.coverage import coverage_fields
    from k3diff.report.html import run_report

    cases = []
    for k in range(3):
        case = Case("moe", batch=k + 1, seed=k)
        cases.append(dict(record(case, _verdict(case, 0.2)), **coverage_fields(case)))
    path = _write_run(tmp_path / "r.jsonl", 5, cases)
    lines = path.read_text().splitlines()
    head = json.loads(lines[0])
    head["boundaries"] = {"batch": [2], "n_experts": [256]}
    path.write_text("\n".join([json.dumps(head)] + lines[1:]) + "\n")
    page = run_report(load([path]))
    assert 'id="never-crossed" class="never"' in page and "moe n_experts 256" in page
    assert "batch 2 [&lt;=&gt;]" in page                    # crossed: shown in the table, not on the list
    assert "moe batch 2" not in page.split('id="never-crossed"')[1].split("</p>")[0]


def test_the_committed_h200_run_reads_compressed_and_a_broken_gz_is_one_line(tmp_path):
    """docs/screenshots/gpu-ci-75001.jsonl.gz (the H200's passing ci run behind report-pass-gpu.png)
    reads as it is; a truncated or non-gzip .gz is one ReportInputError, never a traceback."""
    import gzip

    from k3diff.report.load import ReportInputError, read_file

    run = read_file(Path(__file__).parents[2] / "docs" / "screenshots" / "gpu-ci-75001.jsonl.gz")
    assert len(run.cases) > 200 and {c["stage"].removesuffix("-inv") for c in run.cases} == {"moe", "mla", "kda", "layer"}
    assert all(c["ok"] or c.get("skipped") for c in run.cases)
    good = tmp_path / "r.jsonl.gz"
    with gzip.open(good, "wt") as f:
        f.write("")
    (tmp_path / "t.jsonl.gz").write_bytes(good.read_bytes()[:8])
    (tmp_path / "n.jsonl.gz").write_text("not gzip")
    for bad in ("t.jsonl.gz", "n.jsonl.gz"):
        with pytest.raises(ReportInputError) as exc:
            read_file(tmp_path / bad)
        assert "\n" not in str(exc.value)


def test_a_runs_observations_file_given_by_name(tmp_path, capsys):
    """`k3diff report res/*.jsonl` names each run's observations file beside its results (an H100
    lane's merge stopped on it with "not a k3diff results line"): dropped where its results file is
    given too, else one line naming the file to give instead."""
    from k3diff.observations import path_beside
    from k3diff.report.load import ReportInputError, expand

    res = tmp_path / "r.jsonl"
    res.write_text("")
    obs = path_beside(res)
    obs.write_text('{"type": "test_case"}\n')
    assert expand([str(res), str(obs)]) == [res]
    with pytest.raises(ReportInputError) as exc:
        expand([str(obs)])
    assert str(exc.value) == (f"{obs}: the Hypothesis observations k3diff writes beside a results file, not results; "
                              f"give {res}")
