"""Holes a wrong kernel slipped through (issue 11, numerics side): a noise floor true to the data's
magnitude, sentinels in untouched state, value distributions that reach states and caches, and the
mutants that prove each."""
import pytest
import torch

from k3diff.budgets import DEFAULT
from k3diff.case import Case
from k3diff.divergence import compare, noise_floor
from k3diff.materialize import materialize
from k3diff.mutants import BY_NAME, MUTANTS, MutantBackend
from k3diff.runner import check_case
from reference import materialize as ref_mat
from reference.config import preset

MAGNITUDES = (1e-6, 1e-4, 1e-3, 1e-2, 1.0, 1e3)
DTYPES = (torch.bfloat16, torch.float32)


def _data(mag, dtype, n=512):
    g = torch.Generator().manual_seed(7)
    ref = torch.randn(n, generator=g, dtype=torch.float64) * mag
    # a realistic baseline: the value carried through a few roundings of the output dtype
    eps = torch.finfo(dtype).eps
    base = (ref * (1 + 2 * eps * torch.randn(n, generator=g, dtype=torch.float64))).to(dtype)
    return ref, base


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mag", MAGNITUDES)
def test_floor_follows_the_magnitude_wrong_outputs_fail_correct_ones_pass(mag, dtype):
    ref, base = _data(mag, dtype)
    atol = noise_floor(ref, dtype)
    top = float(ref.abs().max())
    assert atol <= 8 * torch.finfo(dtype).eps * top          # a few ulps of the data, not of 1
    correct = ref.to(dtype)                                   # within rounding of the exact value
    assert compare("s", "t", correct, ref, base, DEFAULT, dtype).ok
    for wrong in (torch.zeros_like(correct), correct * 0.5, -correct):
        rep = compare("s", "t", wrong, ref, base, DEFAULT, dtype)
        assert not rep.ok and rep.ratio > 3, (mag, dtype, rep.line())


def test_floor_on_exact_zeros_and_subnormals():
    zeros = torch.zeros(16, dtype=torch.float64)
    assert noise_floor(zeros, torch.bfloat16) == torch.finfo(torch.bfloat16).tiny
    assert compare("s", "t", zeros.to(torch.bfloat16), zeros, zeros, DEFAULT, torch.bfloat16).ok
    off = zeros.clone()
    off[3] = 1e-30
    assert not compare("s", "t", off, zeros, zeros, DEFAULT, torch.float32).ok
    # subnormal reference values: a kernel flushing them to zero (GPU default) is not wrong
    sub = torch.full((8,), 1e-39, dtype=torch.float64)
    assert compare("s", "t", torch.zeros(8, dtype=torch.float32), sub, sub, DEFAULT, torch.float32).ok


def test_nan_sentinels_are_non_canonical_and_seeded():
    a = ref_mat.nan_sentinels((64, 8), ref_mat._gen(1, "x"))
    b = ref_mat.nan_sentinels((64, 8), ref_mat._gen(1, "x"))
    bits = a.view(torch.int16).to(torch.int32) & 0xFFFF
    assert torch.isnan(a).all() and torch.equal(a.view(torch.int16), b.view(torch.int16))
    for canonical in (0x7FC0, 0xFFC0, 0x7FFF, 0xFFFF):
        assert not (bits == canonical).any()
    assert len(set(bits.flatten().tolist())) >= 24          # 16 payloads x 2 signs


def test_nan_sentinels_in_place_are_the_where_form_bit_for_bit():
    values = (torch.randn(6, 40, 5, generator=ref_mat._gen(4, "v")) * 3).to(torch.bfloat16)
    values[0, 0] = float("nan")
    values[0, 1] = -0.0
    mask = torch.rand(6, 40, 1, generator=ref_mat._gen(4, "m")) < 0.6
    want = torch.where(mask, ref_mat.nan_sentinels_from(values), values)
    got = ref_mat.nan_sentinels_where(values.clone(), mask)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_finite_sentinels_are_huge_and_varied(dtype):
    s = ref_mat.finite_sentinels((1000,), dtype, ref_mat._gen(3, "s"))
    assert s.dtype == dtype and torch.isfinite(s).all()
    assert float(s.abs().double().min()) >= 2.0 ** 100
    assert (s > 0).any() and (s < 0).any() and len(set(s.double().tolist())) > 500


def test_unused_kda_slots_hold_finite_sentinels_and_mla_free_rows_payload_nans():
    case = Case("kda", batch=3, n_slots=6, state_idx=(4, 0, 2), seed=9)
    _, _, inp = materialize(case)
    for name in ("conv_state", "recurrent_state"):
        unused = inp[name][[0, 1, 3, 5]]
        assert torch.isfinite(unused).all() and float(unused.abs().double().min()) >= 2.0 ** 100
        assert torch.isfinite(inp[name][[2, 4]]).all() and float(inp[name][[2, 4]].abs().max()) < 100
    _, _, again = materialize(case)
    assert torch.equal(again["recurrent_state"], inp["recurrent_state"])
    mla = ref_mat.make_inputs(preset("tiny"), "mla", 5, batch=2, cache_lens=[0, 3])
    assert torch.isnan(mla["kv_cache"][0]).all() and torch.isnan(mla["kv_cache"][1, 3:]).all()
    bits = mla["kv_cache"].view(torch.int16).to(torch.int32) & 0xFFFF
    assert not (bits == 0x7FC0).any()


@pytest.mark.parametrize("stage,names", [("kda", ("conv_state", "recurrent_state")), ("mla", ("kv_cache",))])
def test_value_dists_reach_states_and_caches(stage, names):
    cfg = preset("tiny")
    kw = dict(batch=4, cache_lens=[5, 7, 9, 11]) if stage == "mla" else dict(batch=4, n_slots=5)
    plain = ref_mat.make_inputs(cfg, stage, 2, value_dist="plain", **kw)
    for dist, factor in (("tiny", 1e-3), ("large", 30.0)):
        other = ref_mat.make_inputs(cfg, stage, 2, value_dist=dist, **kw)
        for n in names:
            a, b = plain[n].double(), other[n].double()
            ok = torch.isfinite(a)
            ratio = float(b[ok].abs().mean() / a[ok].abs().mean())
            assert ratio == pytest.approx(factor, rel=0.02), (dist, n, ratio)


def test_new_mutants_join_the_suite():
    names = {m.name for m in MUTANTS}
    assert {"zeros_when_small", "half_scale_on_tiny", "sign_flip_on_tiny", "half_scale_output",
            "writes_nan_to_unused_slot", "writes_nan_to_free_cache_rows"} <= names


@pytest.mark.parametrize("mutant,case", [
    ("zeros_when_small", Case("moe", batch=3, value_dist="tiny", seed=4)),
    ("sign_flip_on_tiny", Case("moe", batch=3, value_dist="tiny", seed=4)),
    ("writes_nan_to_unused_slot", Case("kda", batch=2, n_slots=4, state_idx=(3, 0), seed=2)),
    ("writes_nan_to_free_cache_rows", Case("mla", batch=2, cache_lens=(1, 4), seed=2)),
    # an FP8 cache is bytes: the poison must be the e4m3 NaN byte, not a crash writing NaN to uint8
    ("writes_nan_to_free_cache_rows", Case("mla", batch=2, cache_lens=(1, 4), seed=2, cache_format="fp8")),
])
def test_new_mutants_are_caught_on_one_case(mutant, case):
    verdict = check_case(case, MutantBackend(BY_NAME[mutant]))
    assert not verdict.ok and verdict.error is None, verdict.error   # caught by the judge, not a crash


def test_a_crashing_mutant_is_not_a_catch():
    """A planted bug 'caught' by an exception (the framework's ImportError, say) proves nothing."""
    from k3diff.mutants import Mutant, hunt
    from k3diff.backends.blocked import TorchBlockedBackend
    from k3diff.session import choose_space

    class Raises(TorchBlockedBackend):
        def run(self, stage, cfg, prepared, inputs, out):
            raise ImportError("cannot import name 'x'")

    crash = Mutant("crashes", "test", ("moe",), "raises in run()", backend=Raises)
    result = hunt(crash, examples_per_stage=2, seed=1, space=choose_space("cpu"))
    assert not result.caught and result.headline.startswith("crashed, not caught: ERROR")
