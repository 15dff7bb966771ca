"""The planted verify / FP8 bugs are caught and their correct variants pass, case by case (the
fuzzed hunt is `k3diff mutants`; these pin one case each, cheaply)."""
from __future__ import annotations

import pytest

from k3diff.case import Case
from k3diff.false_alarms import BY_NAME as CONTROLS
from k3diff.false_alarms import ControlBackend
from k3diff.mutants import BY_NAME, VERIFY_MUTANTS, MutantBackend
from k3diff.runner import check_case

MLA_VERIFY = Case(stage="mla", batch=2, cache_lens=(62, 3), widths=(3, 2), cache_format="fp8")
KDA_SOME = Case(stage="kda", batch=3, n_slots=5, state_idx=(1, 0, 3), widths=(3, 2, 4), accepted=(2, 1, 1))
KDA_ALL = Case(stage="kda", batch=2, n_slots=3, state_idx=(1, 2), widths=(3, 2), accepted=(3, 2))
ON = {"verify_mask_sees_next_token": MLA_VERIFY, "verify_state_from_wrong_accepted": KDA_SOME,
      "verify_conv_window_shifted_by_one": KDA_ALL, "fp8_scale_per_tensor": MLA_VERIFY}


@pytest.mark.parametrize("name", [m.name for m in VERIFY_MUTANTS])
def test_verify_mutant_is_caught(name):
    mutant = BY_NAME[name]
    case = ON[name].validate()
    assert mutant.case_filter(case)
    v = check_case(case, MutantBackend(mutant))
    assert not v.ok and not v.skipped and not v.error, v.failures()


def test_fp8_per_tensor_scale_fails_on_its_scale():
    v = check_case(MLA_VERIFY.validate(), MutantBackend(BY_NAME["fp8_scale_per_tensor"]))
    assert any("kv_cache.fp8_scale" in line for line in v.failures()), v.failures()


@pytest.mark.parametrize("name", ["verify_token_by_token", "verify_commit_by_replay", "fp8_read_f32"])
@pytest.mark.parametrize("case", [MLA_VERIFY, KDA_SOME, KDA_ALL,
                                  Case(stage="mla", batch=2, cache_lens=(63, 1), widths=(2, 2), steps=2,
                                       accepted=(1, 2, 0, 2))], ids=lambda c: c.label())
def test_verify_controls_pass(name, case):
    control = CONTROLS[name]
    if case.stage not in control.stages:
        pytest.skip(f"{name} changes nothing in {case.stage}")
    v = check_case(case.validate(), ControlBackend(control))
    assert v.ok and not v.skipped, v.failures()
