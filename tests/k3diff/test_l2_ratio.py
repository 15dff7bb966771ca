"""The candidate's whole L2 error against the bf16 baseline's (TensorReport.l2_ratio), reported
beside the max-element rule and not judged: a uniform 1% error of MLA's bf16 output passes that
rule on some draws (its worst element stays inside the budget) while its L2 error is several times
the baseline's; a correct candidate's is the baseline's own."""
import pytest
import torch

from k3diff import backends
from k3diff.backends.blocked import TorchBlockedBackend
from k3diff.case import Case
from k3diff.divergence import compare
from k3diff.budgets import Budget
from k3diff.results import record
from k3diff.runner import check_case


class ScaledMla(TorchBlockedBackend):
    stages = ("mla",)

    def run(self, stage, cfg, prepared, inputs, out):
        super().run(stage, cfg, prepared, inputs, out)
        out["out"].mul_(1.01)


CASE = Case(stage="mla", batch=4, cache_lens=(0, 5, 64, 65), seed=3)


def _out(verdict):
    return next(r for r in verdict.reports if r.tensor == "out")


def test_a_uniform_one_percent_error_shows_in_the_l2_ratio_not_the_verdict_alone():
    good = _out(check_case(CASE, backends.load("torch-blocked"), device="cpu"))
    bad_v = check_case(CASE, ScaledMla(), device="cpu")
    bad = _out(bad_v)
    assert good.l2_ratio is not None and good.l2_ratio < 1.1
    assert bad.l2_ratio > 1.5 * good.l2_ratio
    rec = record(CASE, bad_v)
    assert next(t for t in rec["tensors"] if t["tensor"] == "out")["l2"] == pytest.approx(bad.l2_ratio, rel=1e-3)
    assert "l2_ratio" not in bad.to_dict()          # seed files and verdicts keep their fields


def test_the_ratio_is_the_l2_errors_quotient_and_none_without_a_baseline_error():
    ref = torch.linspace(-2, 2, 1000, dtype=torch.float64)
    base = ref.to(torch.bfloat16)
    cand = (ref * 1.01).to(torch.bfloat16)
    rep = compare("s", "t", cand, ref, base, Budget(rtol=2.0, atol_mult=1.0, reason="test"))
    want = ((cand.double() - ref).norm() / (base.double() - ref).norm()).item()
    assert rep.l2_ratio == pytest.approx(want, rel=1e-9)
    exact = torch.linspace(-2, 2, 64, dtype=torch.float64).to(torch.bfloat16)
    assert compare("s", "t", exact, exact.double(), exact, Budget(rtol=2.0, atol_mult=1.0, reason="test")).l2_ratio is None


def test_only_bf16_tensors_carry_the_ratio():
    ref = torch.linspace(-2, 2, 1000, dtype=torch.float64)
    cand = (ref * 1.001).to(torch.float32)
    rep = compare("s", "t", cand, ref, ref.to(torch.float32), Budget(rtol=2.0, atol_mult=1.0, reason="test"))
    assert rep.l2_ratio is None


def test_the_summary_names_passing_cases_with_a_large_l2_ratio():
    from k3diff.summary import l2_lines

    rec = lambda i, ok, l2s: {"stage": "mla", "id": i, "ok": ok, "skipped": None, "phase": "generate",  # noqa: E731
                              "label": f"case {i}", "tensors": [{"tensor": f"t{k}", "l2": v} for k, v in enumerate(l2s)]}
    records = [rec("a", True, [1.0, None]), rec("b", True, [1.2, 3.5]), rec("c", False, [9.0]),
               rec("d", True, [2.0]), rec("e", True, [])]
    lines = l2_lines(records)
    assert lines[0].startswith("whole-tensor error: 2 passing case(s) with a bf16 tensor's L2 error >= 2x")
    assert lines[1:] == ["  mla t1 3.50x: case b", "  mla t0 2.00x: case d"]
    assert l2_lines([rec("a", True, [1.03])]) == []
