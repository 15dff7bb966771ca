"""Unit tests of the framework's pieces: the error rule, routing comparison, cases, controls."""
import json

import pytest
import torch
from hypothesis import given, settings

from k3diff import backends
from k3diff.budgets import DEFAULT, Budget, describe
from k3diff.case import Case, CaseError
from k3diff.controls import Controls
from k3diff.comparisons import compare_many
from k3diff.divergence import compare, noise_floor
from k3diff.routing import compare_routing
from k3diff.runner import check_case
from k3diff.strategies import CPU_SPACE, cases


def test_error_rule_is_relative_to_the_baseline():
    ref = torch.linspace(-1, 1, 101, dtype=torch.float64)
    base = ref + 0.01
    atol = noise_floor(ref, torch.bfloat16)
    # one element off by more than the baseline, the rest at its error (a uniform shift of every
    # element is the whole-tensor rule's: tests/k3diff/test_l2_ratio.py)
    inside, outside = base.clone(), base.clone()
    inside[50] = ref[50] + 0.02 + atol / 2   # within 2 x baseline + atol
    outside[0] = ref[0] + 0.02 + 2 * atol
    assert compare("s", "t", inside, ref, base, DEFAULT, torch.bfloat16).ok
    rep = compare("s", "t", outside, ref, base, DEFAULT, torch.bfloat16)
    assert not rep.ok and rep.ratio > 1 and rep.where == (0,)


def test_a_nan_or_unwritten_element_fails_at_once_and_is_located():
    ref = torch.zeros(3, 4, dtype=torch.float64)
    cand = ref.clone()
    cand[2, 1] = float("nan")
    rep = compare("s", "t", cand, ref, ref, Budget(1e9, 1e9, "huge"), torch.float32)
    assert not rep.ok and rep.where == (2, 1) and "non-finite" in rep.note


def test_bitwise_budget():
    a = torch.randn(8).to(torch.bfloat16)
    b = a.clone()
    assert compare("s", "t", a, b, None, Budget(0, 0, "", bitwise=True)).ok
    b[3] = b[3] + 1
    assert not compare("s", "t", a, b, None, Budget(0, 0, "", bitwise=True)).ok


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("together", [True, None], ids=["together", "by device"])
@pytest.mark.parametrize("device", DEVICES)
def test_compared_together_each_tensor_gets_the_report_it_gets_alone(device, together):
    """compare_many reads every number back at once: the split of that readback must hand each
    tensor its own numbers, whatever mix of passes, failures, NaNs and bitwise checks it holds."""
    g = torch.Generator().manual_seed(3)
    ref = torch.randn(6, 40, generator=g, dtype=torch.float64)
    base = ref.to(torch.bfloat16)
    nan = base.clone()
    nan[2, 7] = float("nan")
    wide = torch.randn(3, 500, generator=g, dtype=torch.float64) * 1e3
    bits = Budget(0.0, 0.0, "t", bitwise=True)
    items = [("s", "pass", base, ref, base, DEFAULT, torch.bfloat16),
             ("s", "fail", base * 1.5, ref, base, DEFAULT, torch.bfloat16),
             ("s", "nan", nan, ref, base, DEFAULT, torch.bfloat16),
             ("s", "same bits", base, base.clone(), None, bits),
             ("s", "other bits", base, nan, None, bits),
             ("s", "shape", base[:3], ref, base, DEFAULT),
             ("s", "empty", base[:0], ref[:0], base[:0], DEFAULT),
             ("s", "ints", torch.arange(9), torch.arange(9) + (torch.arange(9) == 4), None, DEFAULT),
             # other sizes (the padded rows), no baseline, a second dtype group
             ("s", "short", base[:2, :5] * 1.01, ref[:2, :5], None, DEFAULT, torch.bfloat16),
             ("s", "wide", wide.to(torch.bfloat16), wide, wide.to(torch.bfloat16), DEFAULT, torch.bfloat16),
             ("s", "f32", ref.float(), ref, ref.float(), DEFAULT, torch.float32),
             ("s", "f32 off", ref[1:3].float() + 1e-3, ref[1:3], ref[1:3].float(), DEFAULT, torch.float32)]
    items = [tuple(t.to(device) if torch.is_tensor(t) else t for t in it) for it in items]
    got = [r.to_dict() for r in compare_many(items, together)]
    alone = [compare(*it).to_dict() for it in items]
    # two sums taken in another order may move in the last bits (similarity, a difference of two
    # nearly equal sums, by ~1e-16 absolute); every judged number is the same
    for t, a in zip(got, alone):
        assert t.pop("similarity") == pytest.approx(a.pop("similarity"), rel=0, abs=1e-12), t["tensor"]
        assert t.pop("frac_outside") == pytest.approx(a.pop("frac_outside"), rel=1e-12), t["tensor"]
    assert json.dumps(got) == json.dumps(alone)               # as text: a NaN value equals itself
    assert [r["ok"] for r in got] == [True, False, False, True, False, False, True, False,
                                             False, True, True, False]
    # and the error maps of the failures, cut from the tensors measured together
    maps = [r.error_map for r in compare_many(items, together)]
    assert maps == [r.error_map for r in (compare(*it) for it in items)]


def test_routing_near_tie_flip_is_allowed_but_exact_tie_and_real_gap_are_not():
    ref = torch.tensor([[0, 1], [2, 3], [4, 5]])
    cand = torch.tensor([[1, 0], [2, 9], [4, 7]])      # row 0 same set, rows 1 and 2 differ
    near = compare_routing(cand, ref, torch.tensor([0.5, 1e-7, 1e-7]), 1e-5)
    assert near.ok and near.tie_flips == 2
    exact = compare_routing(cand, ref, torch.tensor([0.5, 0.0, 1e-7]), 1e-5)
    assert not exact.ok and "exact tie" in exact.note
    far = compare_routing(cand, ref, torch.tensor([0.5, 1e-7, 1e-3]), 1e-5)
    assert not far.ok and far.mismatched_tokens == [2]


def test_every_budget_row_has_a_reason():
    assert all(reason for _, _, reason in describe())


def test_case_json_round_trip_and_refusals():
    case = Case("mla", batch=2, cache_lens=(0, 64), steps=2, seed=5)
    assert Case.from_dict(json.loads(case.to_json())) == case
    with pytest.raises(CaseError, match="cache_lens has 1 entries for batch 2"):
        Case("mla", batch=2, cache_lens=(3,)).validate()
    with pytest.raises(CaseError, match="two rows share one state slot"):
        Case("kda", batch=2, n_slots=3, state_idx=(1, 1)).validate()
    with pytest.raises(CaseError, match="top_k=20 is larger than n_experts"):
        Case("moe", overrides=(("top_k", 20),)).validate()


@settings(max_examples=60, deadline=None)
@given(cases("layer", CPU_SPACE))
def test_strategies_draw_valid_cases(case):
    assert Case.from_dict(case.to_dict()) == case


@pytest.mark.parametrize("name", ["reference", "torch", "torch-blocked"])
@pytest.mark.parametrize("case", [
    Case("moe", batch=5, routing="ties", expert_format="mxfp4", seed=3),
    Case("mla", batch=3, cache_lens=(0, 1, 65), steps=2, seed=4),
    Case("kda", batch=4, n_slots=6, state_idx=(5, 0, 2, -1), steps=3, seed=5),
    Case("layer", batch=3, layer_idx=4, cache_lens=(2, 0, 7), seed=6),
], ids=lambda c: c.label() if isinstance(c, Case) else c)
def test_controls_raise_no_false_alarm_on_correct_backends(name, case):
    verdict = check_case(case, backends.load(name))
    assert verdict.ok, verdict.failures()


class _Scribbler(backends.Backend):
    """Correct outputs, but it also writes into an input it does not own."""
    name = "scribbler"

    def __init__(self):
        self.inner = backends.load("torch-blocked")

    def run(self, stage, cfg, prepared, inputs, out):
        self.inner.run(stage, cfg, self.inner.prepare(cfg, stage, prepared), inputs, out)
        inputs["x"][0, 0] = 0.0


class _Jitter(backends.Backend):
    """Moves one logit by one ulp on every other call: accurate, but nondeterministic."""
    name = "jitter"
    deterministic = True

    def __init__(self):
        self.inner, self.calls = backends.load("torch-blocked"), 0

    def run(self, stage, cfg, prepared, inputs, out):
        self.inner.run(stage, cfg, self.inner.prepare(cfg, stage, prepared), inputs, out)
        self.calls += 1
        if self.calls % 2:
            out["router_logits"][0, 0] = torch.nextafter(out["router_logits"][0, 0], torch.tensor(float("inf")))


def test_controls_flag_input_scribbling():
    verdict = check_case(Case("moe", batch=2), _Scribbler())
    assert any("modified input(s)" in f and "x" in f for f in verdict.failures())


def test_controls_flag_nondeterminism_unless_declared():
    case = Case("moe", batch=2)
    assert any("two runs on identical inputs differ" in f for f in check_case(case, _Jitter()).failures())
    declared = _Jitter()
    declared.deterministic = False
    verdict = check_case(case, declared)
    assert verdict.ok and any("nondeterministic (declared)" in n for n in verdict.notes)
    assert not check_case(case, _Jitter(), controls=Controls(run_twice=False)).failures()


@pytest.mark.parametrize("layer_idx,fmt,overrides", [
    (1, "bf16", ()), (2, "mxfp4", ()), (4, "bf16", (("n_group", 4), ("topk_group", 2))),
    (3, "mxfp4", (("routed_scaling_factor", 2.5),))])
@pytest.mark.parametrize("mode", ["exact", "faithful"])
def test_a_layer_forced_onto_its_own_ids_is_the_same_run(layer_idx, fmt, overrides, mode):
    """Rule 6 keeps the routing probe as the reference's result when it forces the ids: the
    reference forced onto the ids it chose itself must repeat its run bit for bit."""
    import reference
    from k3diff.materialize import materialize

    case = Case("layer", batch=9, layer_idx=layer_idx, expert_format=fmt, overrides=overrides,
                cache_lens=(0, 1, 63, 64, 65, 3, 7, 100, 5), n_slots=12,
                state_idx=(3, 1, 0, 7, 9, -1, 2, 11, 5), seed=31).validate()
    case = case if case.attention_kind == "mla" else Case(**{**case.__dict__, "cache_lens": ()}).validate()
    cfg, weights, inputs = materialize(case)
    free = reference.run_stage("layer", cfg, weights, inputs, mode)
    forced = reference.run_stage("layer", cfg, weights, dict(inputs, forced_ids=free["mlp.topk_ids"]), mode)
    assert free.keys() == forced.keys()
    for k, v in free.items():
        if torch.is_tensor(v):
            ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[v.element_size()]
            assert torch.equal(v.view(ints), forced[k].view(ints)), k
