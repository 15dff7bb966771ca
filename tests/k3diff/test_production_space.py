"""Issue 28: the GPU default run reaches production. The spaces a GPU run draws (checked on the CPU
with the megakernel's declared boundaries: drawing needs no GPU), the boundary sweep, the
`high_ids` routing mode and its coverage, the experts shared by moe and layer, and the sizes a
full-dims case of each stage may take."""
import random
from collections import Counter

import pytest
import torch
from hypothesis import strategies as st

from k3diff import materialize, sizing
from k3diff.case import ROUTING_MODES, Case
from k3diff.coverage import coverage_fields, coverage_lines, missed_boundaries, routed_ranges
from k3diff.search import find_failure
from k3diff.session import PROFILES, choose_space
from k3diff.stages import STAGES
from k3diff.strategies import (CPU_SPACE, FULL_PROD, SMALL_PROD, _plan_slots, boundary_plan, cases,
                               production_points)
from k3diff.tools.plan import dims_set, drawn_cases
from megakernel.backend import MegakernelBackend

MK = MegakernelBackend()


def _run_plan(preset, seed, profile="ci"):
    space = choose_space("cuda", preset, MK)
    return space, [(tag, case) for stage in STAGES for tag, case in drawn_cases(stage, space, seed, PROFILES[profile])]


@pytest.mark.parametrize("preset,seed", [(None, 2026), ("full", 31337)], ids=["default", "full"])
def test_a_gpu_ci_run_crosses_every_boundary_with_real_dims_in_every_stage(preset, seed):
    space, drawn = _run_plan(preset, seed)
    records, full = [], Counter()
    for tag, case in drawn:
        # a case the megakernel refuses is skipped, and a skipped case covers nothing
        assert MK.supports(case.config(), case.stage) is None, case.label()
        records.append({"stage": tag, **coverage_fields(case)})
        full[case.stage] += case.preset == "full"
        if case.cache_lens:       # the host draws an MLA cache: batch x capacity stays capped
            cap = (FULL_PROD if case.preset == "full" else SMALL_PROD).max_cache_rows
            assert case.batch * (max(case.cache_lens) + case.steps) <= cap, case.label()
        if case.preset == "full" and case.attention_kind == "kda":     # and KDA states at 96 heads
            assert case.batch <= 64, case.label()
    assert missed_boundaries(records, space.boundaries) == []
    assert "never crossed: none" in "\n".join(coverage_lines(records, space.boundaries))
    assert min(full[s] for s in STAGES) >= (8 if preset == "full" else 5), full
    real = [c for _, c in drawn if c.preset == "full"]
    moe = [c for c in real if c.stage == "moe"]
    assert {c.config().n_experts for c in moe} >= {896, 256, 257, 512, 513}
    assert {c.config().top_k for c in moe} >= {1, 16} and {c.expert_format for c in moe} == {"bf16", "mxfp4"}
    assert {c.config().routed_scaling_factor for c in moe} == {1.0, 2.5}
    assert max(c.batch for c in moe) == 256
    assert max(max(c.cache_lens) for c in real if c.stage == "mla") >= 32000
    assert {c.config().kda_heads for c in real if c.stage == "kda"} == {96}
    assert {c.attention_kind for c in real if c.stage == "layer"} == {"mla", "kda"}
    # a cold kernel cache compiles one set per MoE dims and format: the menu keeps them few
    assert len({(k[1], k[2], k[3]) for k in map(dims_set, (c for _, c in drawn)) if k[3]}) <= 16


def test_without_the_sweep_a_run_can_miss_a_boundary_and_says_so():
    """The sweep is what makes the crossing certain: a quick run (no sweep) names what it missed."""
    space, drawn = _run_plan(None, 5, "quick")
    records = [{"stage": tag, **coverage_fields(c)} for tag, c in drawn]
    missed = missed_boundaries(records, space.boundaries)
    assert missed and all(m.split()[0] in STAGES for m in missed)


def test_the_sweep_covers_every_menu_point_and_mode_and_runs_first():
    space = choose_space("cuda", None, MK)
    plan = boundary_plan("moe", space, 7)
    points = {ov for ov, _ in production_points("small", space)} | {ov for ov, _ in production_points("full", space)}
    assert {c.overrides for c in plan} == points
    assert set(ROUTING_MODES) <= {c.routing for c in plan}
    assert boundary_plan("moe", space, 7) == plan and boundary_plan("moe", space, 8) != plan
    assert boundary_plan("moe", CPU_SPACE, 7) == []
    seen = []

    class _V:
        def __init__(self, ok):
            self.ok, self.skipped = ok, None

        def headline(self):
            return "x"

    def judge(v):
        seen.append(v)
        return _V(v != "bad")

    failure, n = find_failure(st.integers(0, 9), judge, examples=5, seed=1, explicit=["a", "b"])
    assert seen[:2] == ["a", "b"] and failure is None and n == 7
    seen.clear()
    failure, _ = find_failure(st.integers(0, 9), judge, examples=5, seed=1, explicit=["a", "bad"])
    assert failure is not None and seen == ["a", "bad"]


def test_production_points_follow_the_declared_boundaries():
    class Other:
        boundaries = {"n_experts": (300,), "top_k": (4,)}

    space = choose_space("cuda", None, Other())
    es = {dict(ov).get("n_experts") for ov, _ in production_points("full", space)}
    assert es == {None, 300, 301}
    ks = {dict(ov).get("top_k") for ov, _ in production_points("full", space)}
    assert {4, 5} <= ks
    # without declarations: K3's own 256/512 edges
    none = {dict(ov).get("n_experts") for ov, _ in production_points("full", choose_space("cuda"))}
    assert none == {None, 256, 257, 512, 513}


def test_the_cpu_default_draws_expert_counts_past_512():
    got = []

    class _Pass:
        ok, skipped = True, None

    find_failure(cases("moe", CPU_SPACE), lambda c: got.append(c) or _Pass(), examples=150, seed=3, shrink=False)
    es = [c.config().n_experts for c in got]
    assert sum(e > 512 for e in es) >= 5, Counter(es)
    # cheap on the CPU: one expert draw per format, few active experts
    assert all(c.batch <= 16 and c.weight_seed == 0 for c in got if c.config().n_experts > 512)
    assert "high_ids" in {c.routing for c in got}


@pytest.mark.parametrize("E", [12, 300, 640])
def test_high_ids_routes_every_token_past_the_edges(E):
    import reference

    k = 4
    case = Case(stage="moe", routing="high_ids", batch=40, seed=9,
                overrides=(("n_experts", E), ("top_k", k))).validate()
    cfg, weights, inputs = materialize.materialize(case, "cpu")
    ids = reference.run_stage("moe", cfg, weights, inputs, mode="exact")["topk_ids"]
    got = routed_ranges(ids, E)
    assert got["E-1"] > 0
    if E > 256:
        assert got["<256"] == 0 and got["256..511"] > 0
    if E > 512:
        assert got[">=512"] > got["E-1"]          # more of the top range than the last expert alone
    assert len(set(ids.flatten().tolist())) > k    # the tokens do not all take one fixed set
    assert materialize.weights_for(case, "cpu")["router.bias"].equal(
        materialize.weights_for(Case(stage="moe", overrides=case.overrides).validate(), "cpu")["router.bias"])


def test_coverage_counts_id_ranges_and_names_a_range_never_routed():
    case = Case(stage="moe", batch=3, overrides=(("n_experts", 640),)).validate()

    class V:
        routed = {"<256": 10, "256..511": 2, ">=512": 0, "E-1": 0}

    recs = [{"stage": "moe", **coverage_fields(case, V())}, {"stage": "moe-inv", **coverage_fields(case, V())}]
    text = "\n".join(coverage_lines(recs, (("batch", (1,)),)))
    assert "ids      <256 10, 256..511 2, >=512 0, E-1 0" in text
    assert "never routed: moe >=512, moe E-1" in text
    # batch-invariance cases count for their stage: moe-inv alone never runs batch 1
    recs.append({"stage": "moe", **coverage_fields(Case(stage="moe", batch=1).validate())})
    assert missed_boundaries(recs, (("batch", (1,)),)) == []
    assert routed_ranges(torch.tensor([[0, 255, 256, 511], [512, 639, -1, 639]]), 640) == \
        {"<256": 2, "256..511": 2, ">=512": 3, "E-1": 2}


def test_moe_and_layer_share_one_expert_draw():
    from reference import materialize as ref_mat

    materialize.evict_weights(0)
    moe = Case(stage="moe", weight_seed=1, expert_format="mxfp4").validate()
    layer = Case(stage="layer", layer_idx=3, weight_seed=1, expert_format="mxfp4", cache_lens=(3,)).validate()
    wm, wl = materialize.weights_for(moe, "cpu"), materialize.weights_for(layer, "cpu")
    assert len(materialize._EXPERT_CACHE) == 1
    assert wl["mlp.experts.w13_packed"].data_ptr() == wm["experts.w13_packed"].data_ptr()
    fresh = ref_mat.make_weights(layer.config(), "layer", 1, expert_format="mxfp4", layer_idx=3,
                                 draw_on=materialize.draw_on(layer, "cpu"))
    assert list(fresh) == list(wl) and all(torch.equal(fresh[n], wl[n]) for n in fresh)


def _kda_full(batch):
    n_slots, idx = _plan_slots(random.Random(1), batch, 3)
    return dict(n_slots=n_slots, state_idx=idx)


# the largest case of each stage the production spaces draw at K3's dims
LARGEST = [Case(stage="moe", preset="full", batch=256, expert_format="bf16"),
           Case(stage="mla", preset="full", batch=2, cache_lens=(32767, 32767)),
           Case(stage="mla", preset="full", batch=256, cache_lens=(254,) * 256),
           Case(stage="kda", preset="full", batch=64, **_kda_full(64)),
           Case(stage="layer", preset="full", batch=256, layer_idx=3, cache_lens=(254,) * 256, expert_format="bf16"),
           Case(stage="layer", preset="full", batch=256, layer_idx=1, expert_format="bf16", **_kda_full(256))]


@pytest.mark.parametrize("case", LARGEST, ids=lambda c: f"{c.stage}-B{c.batch}")
def test_a_full_dims_case_of_every_stage_fits_one_h200(case, monkeypatch):
    case.validate()
    need = sizing.estimate_bytes(case, "cuda")
    assert need < 100 * 2**30, need / 2**30             # an H200 has 139 GiB; the weight cache 60%
    monkeypatch.setattr(sizing, "available_bytes", lambda device: 139 * 2**30)
    sizing.check_fits(case, "cpu")


def test_a_case_past_one_h200_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(sizing, "available_bytes", lambda device: 139 * 2**30)
    big = Case(stage="mla", preset="full", batch=256, cache_lens=(32767,) * 256).validate()
    with pytest.raises(sizing.CaseTooLarge) as exc:
        sizing.check_fits(big, "cpu")
    assert "\n" not in str(exc.value) and "GiB" in str(exc.value) and "mla full B=256" in str(exc.value)


def test_the_plan_tool_prints_the_coverage_and_exits_1_on_a_missed_boundary(capsys):
    from k3diff.tools import plan

    assert plan.main(["--profile", "ci", "--stages", "kda", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "never crossed: none" in out and "kda: " in out and "at full dims" in out
    assert plan.main(["--profile", "quick", "--stages", "moe,layer", "--seed", "5"]) == 1
    assert "never crossed: layer" in capsys.readouterr().out
    assert plan.main(["--stages", "nope"]) == 2


def test_declared_boundaries_normalise_once_and_again():
    """The child process hands the parent its backend's boundaries already normalised (isolation's
    BackendInfo); normalising them again must give the same space, not refuse them (it did: every
    GPU run of the megakernel, the one backend declaring boundaries, stopped with INTERNALERROR)."""
    from k3diff.strategies import normalize_boundaries

    declared = {"batch": (64, 1, 8), "n_experts": 256}
    once = normalize_boundaries(declared)
    assert once == (("batch", (1, 8, 64)), ("n_experts", (256,)))
    assert normalize_boundaries(once) == once
