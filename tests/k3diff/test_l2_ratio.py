"""The whole-tensor rule (k3diff.budgets.L2_RTOL): a bf16 or fp16 tensor's L2 error against the
bf16 baseline's. A uniform 1% error of MLA's bf16 output passes the max-element rule on some draws
(its worst element stays inside the budget) while its L2 error is several times the baseline's; a
correct candidate's is the baseline's own. At a multi-step case's later steps, where each role
carries its own state, it is judged by its own measured multiple (budgets.L2_RTOL_CHAINED)."""
import pytest
import torch

from k3diff import backends
from k3diff.backends.blocked import TorchBlockedBackend
from k3diff.case import Case
from k3diff.divergence import compare
from k3diff.budgets import L2_RTOL, L2_RTOL_CHAINED, Budget
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


def test_a_uniform_one_percent_error_fails_the_whole_tensor_rule_with_its_worst_element_inside():
    good_v = check_case(CASE, backends.load("torch-blocked"), device="cpu")
    bad_v = check_case(CASE, ScaledMla(), device="cpu")
    good, bad = _out(good_v), _out(bad_v)
    assert good_v.ok and good.l2_ratio is not None and good.l2_ratio < 1.1
    assert not bad_v.ok and not bad.ok and bad.max_err <= bad.bound      # the element rule alone passes it
    assert bad.l2_ratio > 2.0 and bad.ratio == pytest.approx(bad.l2_err / bad.l2_bound)
    assert bad.note.startswith("whole-tensor error") and "2x" in bad.note and bad.error_map is not None
    rec = record(CASE, bad_v)
    assert next(t for t in rec["tensors"] if t["tensor"] == "out")["l2"] == pytest.approx(bad.l2_ratio, rel=1e-3)
    for name in ("l2_ratio", "l2_err", "l2_bound"):
        assert name not in bad.to_dict()           # seed files and verdicts keep their fields


def test_a_multi_step_case_is_judged_whole_at_every_step():
    case = Case(stage="mla", batch=4, cache_lens=(0, 5, 64, 65), seed=3, steps=2).validate()
    v = check_case(case, ScaledMla(), device="cpu")
    failing = [r for r in v.reports if not r.ok]
    assert [r.tensor for r in failing] == ["out@step0"] and failing[0].note.startswith("whole-tensor error")
    ref = torch.linspace(-2, 2, 1000, dtype=torch.float64)
    base, cand = ref.to(torch.bfloat16), (ref * 1.01).to(torch.bfloat16)
    budget = Budget(rtol=8.0, atol_mult=1.0, reason="test")          # the element rule passes both
    at0, at1 = (compare("s", f"t@step{s}", cand, ref, base, budget) for s in (0, 1))
    assert not at0.ok and at0.l2_bound is not None
    assert not at1.ok and at1.l2_bound == pytest.approx(L2_RTOL_CHAINED / L2_RTOL * at0.l2_bound)
    assert at1.note.startswith("whole-tensor error") and f"({L2_RTOL_CHAINED:g}x)" in at1.note
    judged = compare("s", "t@step1", base, ref, base, budget)
    assert judged.ok and judged.line().endswith(f"L2 1.00x the baseline's (bound {L2_RTOL_CHAINED:g}x)")


@pytest.mark.parametrize("stage, kw", [
    ("mla", dict(cache_lens=(0, 5, 64, 65))),
    ("kda", dict(n_slots=5, state_idx=(1, 2, 3, 4))),
    # the layer's delta carries the MoE's bf16 noise: a 1% scale is 1.5-2.1x the baseline's error at
    # its later steps, caught at some draws only (layer 0 seed 0: 2.08x)
    ("layer", dict(cache_lens=(0, 5, 64, 65), n_slots=5, state_idx=(1, 2, 3, 4), layer_idx=0)),
])
def test_an_output_scaled_by_1_01_from_step_1_on_fails_at_a_later_step(stage, kw):
    """Correct at step 0, its final output x 1.01 at every later step: only the whole-tensor rule at
    the later steps sees it (the element rule lets it by at these cases)."""
    from broken_candidate import ScaledFromStep1

    case = Case(stage=stage, batch=4, seed=0, steps=3, **kw).validate()
    v = check_case(case, ScaledFromStep1(), device="cpu")
    failing = [r for r in v.reports if not r.ok]
    assert failing and all("@step0" not in r.tensor for r in failing), v.failures()
    assert failing[0].note.startswith("whole-tensor error") and failing[0].max_err <= failing[0].bound
    assert check_case(case, backends.load("torch-blocked"), device="cpu").ok


def _rounding(ref):
    """bf16's own rounding level over a tensor: ||ulp / sqrt(12)||_2 (7 stored mantissa bits)."""
    unit = torch.exp2(torch.floor(torch.log2(ref.abs().clamp_min(1e-30))) - 7)
    return (unit.square().sum() / 12).sqrt().item()


def test_the_bound_is_twice_the_baseline_never_below_the_dtypes_own_rounding():
    ref = torch.linspace(-2, 2, 1000, dtype=torch.float64)
    base = ref.to(torch.bfloat16)
    cand = (ref * 1.01).to(torch.bfloat16)
    budget = Budget(rtol=2.0, atol_mult=1.0, reason="test")
    rep = compare("s", "t", cand, ref, base, budget)
    want = ((cand.double() - ref).norm() / (base.double() - ref).norm()).item()
    assert rep.l2_ratio == pytest.approx(want, rel=1e-9)
    assert rep.l2_bound == pytest.approx(2.0 * max((base.double() - ref).norm().item(), _rounding(ref)), rel=1e-9)
    exact = torch.linspace(-2, 2, 64, dtype=torch.float64).to(torch.bfloat16)
    assert compare("s", "t", exact, exact.double(), exact, budget).l2_ratio is None
    # a reference bf16 holds exactly but one element: the baseline's error is one rounding, the
    # floor (ulp / sqrt(12) an element) keeps a candidate that rounds a few more from failing
    ref = torch.arange(-32, 32, dtype=torch.float64) / 8
    ref[5] += 1e-3
    off = ref.clone()
    off[[33, 34, 35]] += 2.0 ** -7          # 0.125, 0.25, 0.375: a few roundings more
    rep = compare("s", "t", off.to(torch.bfloat16), ref, ref.to(torch.bfloat16), budget)
    assert rep.l2_bound == pytest.approx(2.0 * _rounding(ref), rel=1e-9)
    assert rep.ok and rep.l2_ratio > 2.0


def test_a_uniform_error_inside_every_elements_bound_fails_and_one_element_there_passes():
    from k3diff.budgets import DEFAULT
    from k3diff.divergence import noise_floor

    ref = torch.linspace(-1, 1, 101, dtype=torch.float64)
    base = ref + 0.01
    atol = noise_floor(ref, torch.bfloat16)
    everywhere = ref + 0.02 + atol / 2
    one = base.clone()
    one[50] = ref[50] + 0.02 + atol / 2
    assert not compare("s", "t", everywhere, ref, base, DEFAULT, torch.bfloat16).ok
    assert compare("s", "t", one, ref, base, DEFAULT, torch.bfloat16).ok
    assert compare("s", "t", everywhere, ref, base, DEFAULT, torch.float32).l2_bound is None   # f32: elements only


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
    assert lines[0].startswith("whole-tensor error: 2 passing case(s) with a bf16 tensor's L2 error >= 1.5x")
    assert "judged at every step" in lines[0]
    assert lines[1:] == ["  mla t1 3.50x: case b", "  mla t0 2.00x: case d"]
    assert l2_lines([rec("a", True, [1.03])]) == [] and l2_lines([rec("a", True, [1.447])]) == []
