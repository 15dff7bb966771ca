"""The report page says what was judged: the candidate, device and GPU, presets, profile, seed, the
budget table's fingerprint and the rerun line, with a loud note for k3diff's own CPU stand-ins;
the terminal's near-the-edge and whole-tensor lines; axis counts that count cases. `--compare`
flags another budget table and a coverage drop (boundaries, expert-id ranges) as loudly as a new
failure, and `k3diff report` exits with the page's verdict."""
from __future__ import annotations

import json

import pytest

from k3diff import exit_codes
from k3diff.case import Case
from k3diff.coverage import coverage_fields
from k3diff.divergence import TensorReport
from k3diff.report import header as header_mod
from k3diff.report import tables
from k3diff.report.html import run_report
from k3diff.report.load import load
from k3diff.results import RESULTS_FORMAT, record
from k3diff.runner import Verdict

GPU = "NVIDIA H100 80GB HBM3"
RERUN = "pytest --k3diff --k3diff-backend megakernel --k3diff-profile ci --k3diff-seed 777 -k moe"


def _case(k, ratio=0.2, ok=True, l2=None, phase="generate", batch=None, routed=None, **over):
    case = Case("moe", batch=batch or k + 1, seed=k, **over)
    rep = TensorReport(case.stage, "out", ok, max_err=ratio * 0.01, bound=0.01, similarity=1e-5, worst_ulps=3.0)
    if l2 is not None:
        rep.l2_ratio = l2
    if not ok:
        rep.error_map = [[0.0, 0.1], [0.0, 0.0]]
    verdict = Verdict(case, "x", reports=[rep], seconds=0.1)
    if routed is not None:
        verdict.routed = routed
    rec = record(case, verdict)
    rec.update(coverage_fields(case, verdict), phase=phase)
    return rec


def _run(path, cases, backend="torch-blocked", device="cpu", gpu=None, budget="sha256:00000000000000aa",
         seed=777, end=True, boundaries=None, rerun=RERUN, exitstatus=0):
    head = {"kind": "run", "format": RESULTS_FORMAT, "seed": seed, "profile": "ci", "backend": backend,
            "device": device, "started_unix": 1.8e9, "run_id": "r1", "boundaries": boundaries or {},
            "argv": ["--k3diff", "-k", "moe"], "environment": {"torch": "x", "git_commit": "abc", "gpu": gpu},
            "budget_table": budget}
    if rerun:
        head["rerun"] = {"line": rerun}
    if budget is None:
        del head["budget_table"]
    tail = [{"kind": "end", "seconds": 3.0, "exitstatus": exitstatus, "cases": len(cases), "failing": 0}] if end else []
    path.write_text("".join(json.dumps(x) + "\n" for x in [head] + cases + tail))
    return path


def _main(capsys, *args):
    from k3diff.cli import main

    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------- the header

def test_the_header_of_a_gpu_run_names_what_was_judged(tmp_path):
    run = load([_run(tmp_path / "r.jsonl", [_case(0), _case(1)], backend="megakernel", device="cuda", gpu=GPU)])
    page = run_report(run)
    judged = page[page.index('<div id="judged">'):page.index("</table>", page.index('<div id="judged">'))]
    for fact in ('<code class="candidate">megakernel</code>', ">cuda<", GPU, ">ci<", ">777<", "sha256:00000000000000aa",
                 "pytest --k3diff --k3diff-backend megakernel --k3diff-profile ci --k3diff-seed 777 -k moe"):
        assert fact in judged, fact
    assert "CPU STAND-IN" not in page and "ran on the CPU" not in page
    assert page.index('id="banner"') < page.index('id="judged"') < page.index("<h2")   # first thing after the verdict


def test_a_cpu_stand_in_is_said_loudly_so_its_pass_is_not_taken_for_a_kernels(tmp_path):
    run = load([_run(tmp_path / "r.jsonl", [_case(0), _case(1)])])
    page = run_report(run)
    assert "PASS" in page
    assert '<p class="standin">CPU STAND-IN: torch-blocked is k3diff' in page
    assert "ran on the CPU: no GPU kernel was judged here" in page
    assert header_mod.facts(run)["gpu"] == "none recorded"
    md = header_mod.markdown(run)                     # the job summary says it too
    assert "candidate `torch-blocked` on cpu" in md and "\n**CPU STAND-IN: torch-blocked" in md


def test_the_stand_ins_are_the_registrys_own_torch_pipelines():
    """Every built-in backend that is k3diff's own code (the oracle, the torch-blocked family) is a
    stand-in; the public libraries' kernels and any third-party spec are not."""
    from k3diff.backends import BUILTIN

    own = {name for name, spec in BUILTIN.items()
           if spec.startswith(("k3diff.backends.oracle:", "k3diff.backends.blocked"))}
    assert own == {name for name in BUILTIN if header_mod.stand_in(name)}
    assert not header_mod.stand_in("megakernel") and not header_mod.stand_in("mypkg.kernels:Fast")


def test_the_command_falls_back_to_the_recorded_argv_less_its_outputs(tmp_path):
    """A file written before the rerun line: its argv, without the results file it was writing."""
    path = _run(tmp_path / "r.jsonl", [_case(0)], rerun=None)
    lines = path.read_text().splitlines()
    head = json.loads(lines[0])
    head["argv"] = ["--k3diff", "--k3diff-report", "/tmp/res/x.jsonl", "-k", "moe", "--k3diff-report=/tmp/y.jsonl"]
    path.write_text("\n".join([json.dumps(head)] + lines[1:]) + "\n")
    assert header_mod.facts(load([path]))["command"].startswith("pytest --k3diff -k moe   (argv as recorded")


# ---------------------------------------------------------------- the terminal's warning lines

def test_the_near_edge_and_whole_tensor_lines_are_the_terminals_on_the_page(tmp_path):
    from html import escape

    from k3diff.summary import l2_lines, near_edge_lines

    cases = [_case(0, ratio=0.95), _case(1, ratio=0.2, l2=1.7), _case(2, ratio=0.1)]
    run = load([_run(tmp_path / "r.jsonl", cases)])
    lines = near_edge_lines(run.cases) + l2_lines(run.cases)
    assert lines[0].startswith("near the edge: 1 passing case(s)") and any(
        x.startswith("whole-tensor error: 1 passing case(s)") for x in lines)
    page = run_report(run)
    assert escape("\n".join(lines)) in page
    quiet = run_report(load([_run(tmp_path / "q.jsonl", [_case(0, ratio=0.1)])]))
    assert "no passing case near the edge" in quiet


# ---------------------------------------------------------------- counts that count cases

def test_the_axis_table_counts_cases_not_shrink_steps_or_repeated_records(tmp_path):
    cases = [_case(k) for k in range(3)] + [_case(0)]                   # a case's record written twice
    cases += [_case(10 + k, ok=False, ratio=3.0, phase="shrink") for k in range(4)]
    run = load([_run(tmp_path / "r.jsonl", cases)])
    assert len(tables.judged(run.cases)) == 3
    cov = tables.coverage(run)
    assert sum(cov["preset"].values()) == 3 and sum(cov["batch size"].values()) == 3, cov


# ---------------------------------------------------------------- the budget table's fingerprint

def test_the_fingerprint_changes_with_a_number_and_not_with_a_reason(monkeypatch):
    from dataclasses import replace

    from k3diff import budgets
    from k3diff.budget_fingerprint import fingerprint

    now = fingerprint()
    assert now.startswith("sha256:") and len(now) == len("sha256:") + 16 and fingerprint() == now
    key = ("moe", "router_logits")
    monkeypatch.setitem(budgets.TABLE, key, replace(budgets.TABLE[key], reason="reworded"))
    assert fingerprint() == now
    monkeypatch.setitem(budgets.TABLE, key, replace(budgets.TABLE[key], rtol=budgets.TABLE[key].rtol * 2))
    assert fingerprint() != now
    monkeypatch.undo()
    monkeypatch.setattr(budgets, "L2_RTOL", budgets.L2_RTOL + 1)
    assert fingerprint() != now


def test_the_run_record_carries_the_fingerprint_and_the_gpu_name():
    from types import SimpleNamespace

    from k3diff.budget_fingerprint import fingerprint
    from k3diff.results import run_header

    head = run_header(SimpleNamespace(seed=1, profile_name="ci", backend_name="torch-blocked", device="cpu"), None)
    assert head["budget_table"] == fingerprint() and "gpu" in head["environment"]


def test_compare_flags_another_budget_table_loudly(tmp_path, capsys):
    base = _run(tmp_path / "base.jsonl", [_case(0), _case(1)], budget="sha256:00000000000000aa")
    same = _run(tmp_path / "same.jsonl", [_case(0), _case(1)], budget="sha256:00000000000000aa")
    other = _run(tmp_path / "other.jsonl", [_case(0), _case(1)], budget="sha256:00000000000000bb")
    code, out, err = _main(capsys, "report", "--compare", base, same, "-o", tmp_path / "c.html")
    assert code == exit_codes.PASS and "BUDGETS CHANGED" not in out + err
    code, out, err = _main(capsys, "report", "--compare", base, other, "-o", tmp_path / "c.html")
    assert code == exit_codes.INCOMPLETE, out + err
    assert out.startswith("BUDGETS CHANGED: BASE was judged under budget table sha256:00000000000000aa, NEW under "
                          "sha256:00000000000000bb")
    assert "k3diff report: BUDGETS CHANGED" in err and "2 cases matched" in out
    assert "BUDGETS CHANGED" in (tmp_path / "c.html").read_text()


def test_an_older_file_without_the_fingerprint_is_a_warning_not_a_change(tmp_path, capsys):
    base = _run(tmp_path / "base.jsonl", [_case(0), _case(1)], budget=None)
    new = _run(tmp_path / "new.jsonl", [_case(0), _case(1)])
    code, out, err = _main(capsys, "report", "--compare", base, new, "-o", tmp_path / "c.html")
    assert code == exit_codes.PASS and "BASE did not record its budget table" in out + err


# ---------------------------------------------------------------- coverage drops in --compare

def test_compare_flags_a_boundary_base_crossed_and_new_did_not(tmp_path, capsys):
    bounds = {"batch": [4]}
    base = _run(tmp_path / "base.jsonl", [_case(0, batch=2), _case(1, batch=6)], boundaries=bounds)
    new = _run(tmp_path / "new.jsonl", [_case(0, batch=2), _case(1, batch=3)], boundaries=bounds)
    code, out, err = _main(capsys, "report", "--compare", base, new, "-o", tmp_path / "c.html")
    # the ids differ with the batch: 1 matched, 1 only in BASE, and the boundary named on its own line
    assert code == exit_codes.INCOMPLETE, out + err
    assert "COVERAGE DROP: NEW did not cross 1 boundary(ies) BASE crossed: moe batch 4" in out
    assert "cases matched" in out


def test_compare_flags_an_expert_id_range_base_routed_to_and_new_never(tmp_path, capsys):
    many = {"<256": 10, "256..511": 3, ">=512": 0, "E-1": 1}
    few = {"<256": 13, "256..511": 0, ">=512": 0, "E-1": 1}
    base = _run(tmp_path / "base.jsonl", [_case(0, routed=many), _case(1, routed=few)])
    new = _run(tmp_path / "new.jsonl", [_case(0, routed=few), _case(1, routed=few)])
    code, out, err = _main(capsys, "report", "--compare", base, new, "-o", tmp_path / "c.html")
    assert code == exit_codes.INCOMPLETE, out + err
    assert "COVERAGE DROP: NEW routed to no expert id in 1 range(s) BASE routed to: moe 256..511" in out
    assert "2 cases matched" in out


# ---------------------------------------------------------------- the CLI's verdict is the page's

@pytest.mark.parametrize("failing, end, word, status", [
    (False, True, "PASS", exit_codes.PASS), (True, True, "FAIL", exit_codes.FAIL),
    (False, False, "INCOMPLETE", exit_codes.INCOMPLETE), (True, False, "FAIL", exit_codes.FAIL)])
def test_the_commands_verdict_and_status_are_the_pages(tmp_path, capsys, failing, end, word, status):
    cases = [_case(0), _case(1, ok=not failing, ratio=3.0 if failing else 0.2)]
    path = _run(tmp_path / "r.jsonl", cases, end=end)
    code, out, err = _main(capsys, "report", path, "-o", tmp_path / "r.html", "--markdown", tmp_path / "r.md")
    assert code == status and out.startswith(f"{word}: 2 cases"), out + err
    assert f'<meta name="k3diff-verdict" content="{word.lower()}">' in (tmp_path / "r.html").read_text()
    assert (tmp_path / "r.md").read_text().startswith(f"**k3diff**: {word}: 2 cases")     # the job summary too


@pytest.mark.parametrize("status, why", [(exit_codes.INTERRUPTED, "the run exited 2 (interrupted)"),
                                         (exit_codes.MACHINE, "the run exited 11 (not on this machine)"),
                                         (exit_codes.NOTHING_JUDGED, "the run exited 6 (nothing judged)")])
def test_a_run_that_did_not_end_in_a_pass_or_a_failure_is_not_a_pass_page(tmp_path, capsys, status, why):
    """A run stopped by Ctrl-C or a time limit (its end record written on the way out), or one
    that could not hold a case on its GPU, judged less than it drew: its page and `k3diff report`
    say INCOMPLETE and why, never PASS; a run that ended 0 stays PASS."""
    path = _run(tmp_path / "r.jsonl", [_case(0), _case(1)], backend="megakernel", device="cuda", gpu=GPU,
                exitstatus=status)
    page = run_report(load([path]))
    banner = page[page.index('<div id="banner"'):page.index("</div>", page.index('<div id="banner"'))]
    assert 'class="incomplete"' in banner and "INCOMPLETE" in banner and why in banner, banner
    code, out, err = _main(capsys, "report", path, "-o", tmp_path / "r.html")
    assert code == exit_codes.INCOMPLETE and out.startswith("INCOMPLETE:"), out + err
    assert why in err, err
    whole = _run(tmp_path / "ok.jsonl", [_case(0), _case(1)], backend="megakernel", device="cuda", gpu=GPU)
    assert _main(capsys, "report", whole, "-o", tmp_path / "ok.html")[0] == exit_codes.PASS
