"""Verify steps and the FP8 cache as case dimensions: seeds, validation, draws, coverage, and the
candidates judged on them (docs/k3-decode.md §14-15)."""
from __future__ import annotations

import glob
import json

import pytest
from hypothesis import HealthCheck, given, settings

from k3diff.backends import load
from k3diff.case import Case, CaseError
from k3diff.coverage import coverage_fields, coverage_lines
from k3diff.runner import check_case
from k3diff.strategies import FULL_SPACE, boundary_plan, cases
from k3diff.verify import next_step_inputs
from k3diff.verify_dims import advance


def test_old_seeds_keep_their_json_bit_for_bit():
    for path in sorted(glob.glob("corpora/regressions/*.json")):
        d = json.load(open(path))["case"]
        assert Case.from_dict(d).to_dict() == d, path
    assert "widths" not in Case(stage="mla", batch=1, cache_lens=(0,)).to_json()


def test_verify_fields_round_trip_and_label():
    c = Case(stage="mla", batch=2, cache_lens=(62, 3), widths=(3, 1), accepted=(2, 1, 0, 1), steps=2,
             cache_format="fp8", scores="dominant").validate()
    assert Case.from_dict(json.loads(c.to_json())) == c
    assert "W=3,1 T=4" in c.label() and "cache=fp8" in c.label() and "scores=dominant" in c.label()


@pytest.mark.parametrize("fields, why", [
    (dict(stage="mla", batch=2, cache_lens=(1, 1), widths=(9, 1)), "widths must lie"),
    (dict(stage="mla", batch=2, cache_lens=(1, 1), widths=(1,)), "widths has 1"),
    (dict(stage="kda", batch=1, n_slots=2, state_idx=(1,), widths=(2,), accepted=(3,)), "accepted counts"),
    (dict(stage="kda", batch=1, n_slots=2, state_idx=(1,), accepted=(1,)), "needs widths"),
    (dict(stage="kda", batch=1, n_slots=2, state_idx=(1,), cache_format="fp8"), "needs an MLA"),
    (dict(stage="mla", batch=1, cache_lens=(1,), cache_format="fp4"), "unknown cache format"),
    (dict(stage="moe", batch=1, scores="equal"), "needs the mla stage"),
])
def test_bad_verify_fields_are_one_line(fields, why):
    with pytest.raises(CaseError, match=why):
        Case(**fields).validate()


def test_the_next_step_writes_where_the_accepted_tokens_end():
    c = Case(stage="mla", batch=2, cache_lens=(5, 0), widths=(3, 2), accepted=(1, 2, 0, 1, 3, 0),
             steps=3).validate()
    assert advance(c, 1) == (1, 2) and advance(c, 2) == (1, 3)
    assert next_step_inputs(c, "cpu", 2)["cache_lens"].tolist() == [6, 3]
    d = Case(stage="mla", batch=2, cache_lens=(5, 0), steps=3).validate()     # decode: one a step
    assert next_step_inputs(d, "cpu", 2)["cache_lens"].tolist() == [7, 2]


@pytest.mark.parametrize("stage", ["moe", "mla", "kda", "layer"])
def test_the_fuzzer_draws_verify_cases_in_every_stage(stage):
    seen = []

    # derandomized: 40 draws from a fixed seed, not a new sample each run (the mla corners below
    # were missed by one in a few random samples)
    @settings(max_examples=40, database=None, suppress_health_check=list(HealthCheck), deadline=None,
              derandomize=True)
    @given(cases(stage))
    def draw(case):
        seen.append(case)

    draw()
    assert any(c.widths for c in seen) and any(not c.widths for c in seen)
    if stage != "moe":
        assert any(c.accepted for c in seen)
    if stage == "mla":
        assert any(c.cache_format == "fp8" for c in seen) and any(c.scores != "natural" for c in seen)
    lines = coverage_lines([{"stage": stage, **coverage_fields(c)} for c in seen])
    assert any(line.strip().startswith("verify") for line in lines)
    assert any(line.strip().startswith("tokens") for line in lines)


def test_the_sweep_has_verify_cases_at_real_dims_in_every_stage():
    for stage in ("moe", "mla", "kda", "layer"):
        plan = boundary_plan(stage, FULL_SPACE, 0)
        full = [c for c in plan if c.widths and c.preset == "full"]
        assert full, stage
        tokens = {sum(c.widths) for c in plan if c.widths}
        assert {8, 9, 16, 17, 32, 33, 64, 65} <= tokens or stage in ("kda", "layer"), (stage, tokens)
        if stage in ("mla", "layer"):
            assert any(c.cache_format == "fp8" for c in full)


@pytest.mark.parametrize("case", [
    Case(stage="mla", batch=3, cache_lens=(62, 0, 70), widths=(3, 1, 8), accepted=(1, 1, 8), cache_format="fp8"),
    Case(stage="mla", batch=2, cache_lens=(63, 1), widths=(2, 2), accepted=(1, 2, 0, 2), steps=2),
    Case(stage="mla", batch=2, cache_lens=(70, 5), widths=(2, 1), scores="underflow", cache_format="fp8"),
    Case(stage="kda", batch=3, n_slots=5, state_idx=(2, 0, 4), widths=(3, 2, 1), accepted=(2, 1, 0, 3, 0, 1),
         steps=2),
    Case(stage="layer", layer_idx=1, batch=2, n_slots=4, state_idx=(1, 3), widths=(2, 3), accepted=(1, 0)),
    Case(stage="layer", layer_idx=3, batch=2, cache_lens=(4, 9), widths=(2, 3), cache_format="fp8"),
    Case(stage="moe", batch=3, widths=(3, 2, 4)),
    Case(stage="moe", batch=2, widths=(3, 2), routing="forced"),     # forced ids for T = 5 tokens, not B
], ids=lambda c: c.label())
@pytest.mark.parametrize("backend", ["torch-blocked", "reference", "torch"])
def test_candidates_pass_verify_and_fp8_cases(case, backend):
    v = check_case(case.validate(), load(backend))
    assert v.ok, [(r.tensor, r.note) for r in v.reports if not r.ok] or v.error
    names = {r.tensor.split("@")[0] for r in v.reports}
    if case.stage == "kda":
        assert {"recurrent_states", "conv_states.history", "recurrent_state.continued"} <= names
    if case.cache_format == "fp8" and case.stage == "mla":
        assert "kv_cache.fp8_rounding" in names


def test_a_candidate_refusing_verify_and_fp8_is_counted_as_refused():
    from k3diff.features import case_features, refusal
    from k3diff.refusals import refusal_lines
    from megakernel.backend import MegakernelBackend

    class NotYet:                    # a kernel whose verify and FP8 paths are not written
        def supports(self, cfg, stage, features=frozenset()):
            return "; ".join(sorted(f"{f} is not implemented" for f in features)) or None

    verify = Case(stage="kda", batch=1, n_slots=2, state_idx=(1,), widths=(2,)).validate()
    fp8 = Case(stage="mla", batch=1, cache_lens=(3,), cache_format="fp8").validate()
    assert refusal(NotYet(), verify) == "verify is not implemented"
    assert refusal(NotYet(), fp8) == "fp8_cache is not implemented"
    assert case_features(Case(stage="moe", batch=1, widths=(4,)).validate()) == frozenset()   # T tokens only
    # the megakernel serves both (megakernel/verify.py, fp8_cache.py) and refuses what it does not know
    mk, cfg = MegakernelBackend(), Case(stage="kda", preset="small", batch=1, n_slots=2, state_idx=(1,)).validate().config()
    assert mk.supports(cfg, "kda", features=frozenset({"verify", "fp8_cache"})) is None
    assert "does not serve prefill" in mk.supports(cfg, "kda", features=frozenset({"verify", "prefill"}))

    class Old:                       # a supports() written before verify steps existed
        def supports(self, cfg, stage):
            return None
    assert "predates verify" in refusal(Old(), verify)
    records = [{"stage": c.stage, "id": i, "label": c.label(),
                "skipped": f"backend 'nv' does not run this case: {refusal(NotYet(), c)}"}
               for i, c in enumerate((verify, fp8, verify))]
    line, = refusal_lines(records)
    assert line.startswith("refused 3 case(s)") and "2 kda: verify is not implemented" in line
    # a case this machine could not hold is the machine's, on a line of its own, never a refusal
    big = {"stage": "moe", "id": 9, "label": "moe full B=2",
           "skipped": "case too large for cuda: needs about 56.7 GiB, 55.0 GiB free (moe full B=2)"}
    refused, machine = refusal_lines(records + [big, dict(big, id=10)])
    assert refused == line
    assert machine == "not judged on this machine 2 case(s) (skipped, not passed; exit 11): 2 moe: case too large for cuda"
