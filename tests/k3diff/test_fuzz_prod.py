"""Issue 12: the full preset, kernel-declared boundaries, the coverage table, the weight cache and
guard, and the reference touching only the experts a case routes to."""
from collections import Counter

import pytest
import torch

from k3diff import materialize, sizing, weight_guard
from k3diff.case import Case
from k3diff.coverage import coverage_fields, coverage_lines
from k3diff.search import find_failure
from k3diff.session import choose_space
from k3diff.strategies import CPU_SPACE, FULL_SPACE, cases, near_values, with_boundaries


class _Declares:
    name = "declares"
    boundaries = {"batch": (8,), "n_experts": (16,), "top_k": (3,), "latent_dim": (64,)}


def _draw(stage, space, n, seed=5):
    got = []

    class _Pass:
        ok, skipped = True, None

    def judge(case):
        got.append(case)
        return _Pass()

    find_failure(cases(stage, space), judge, examples=n, seed=seed, shrink=False)
    return got


def test_strategies_draw_on_and_around_declared_boundaries():
    space = with_boundaries(CPU_SPACE, _Declares())
    assert dict(space.boundaries)["batch"] == (8,)
    drawn = _draw("moe", space, 200)
    assert len(drawn) >= 150
    batches = Counter(c.batch for c in drawn)
    experts = Counter(c.config().n_experts for c in drawn)
    topk = Counter(c.config().top_k for c in drawn)
    latent = Counter(c.config().latent_dim for c in drawn)
    for v in (7, 8, 9):
        assert batches[v] >= 3, batches
    for v in (15, 16, 17):
        assert experts[v] >= 2, experts
    for v in (2, 3, 4):
        assert topk[v] >= 3, topk
    for v in (32, 64, 96):
        assert latent[v] >= 2, latent
    # about 2/3 of the batches sit on or next to the boundary
    assert sum(batches[v] for v in (7, 8, 9)) > len(drawn) / 3


def test_near_values_keep_granularity_and_range():
    space = with_boundaries(CPU_SPACE, _Declares())
    assert near_values(space, "batch", 1, 256) == [7, 8, 9]
    assert near_values(space, "latent_dim", 32, 256) == [32, 64, 96]
    assert near_values(space, "batch", 1, 8) == [7, 8]
    assert near_values(CPU_SPACE, "batch", 1, 256) == []


def test_a_bad_boundaries_attribute_is_refused():
    class Bad:
        boundaries = {"warp_size": (32,)}

    with pytest.raises(ValueError, match="unknown boundary dimension"):
        with_boundaries(CPU_SPACE, Bad())


def test_megakernel_declares_its_paths_and_the_full_space_reaches_them():
    from megakernel.backend import MegakernelBackend

    b = MegakernelBackend.boundaries
    assert 256 in b["n_experts"] and 512 in b["n_experts"] and 256 in b["batch"] and 8 in b["batch"]
    space = choose_space("cuda", "full", MegakernelBackend())
    assert space.preset == "full" and space.boundaries
    drawn = _draw("moe", space, 200, seed=3)
    presets = Counter(c.preset for c in drawn)
    assert presets["full"] >= 20 and presets["small"] >= 20, presets
    experts = {c.config().n_experts for c in drawn}
    assert {256, 257} <= experts and any(e > 512 for e in experts), experts
    assert max(c.config().top_k for c in drawn) == 16
    assert {c.expert_format for c in drawn} == {"bf16", "mxfp4"}
    assert {c.config().routed_scaling_factor for c in drawn} == {1.0, 2.5}
    batches = {c.batch for c in drawn}
    # the largest batch reached (256 or its neighbour: which one a seed draws moves with every new
    # dimension of the space, as the megakernel's graph schedule did)
    assert 255 <= max(batches) <= 256, sorted(batches)
    for edge in b["batch"]:               # every declared batch boundary reached, or a neighbour
        assert {edge - 1, edge, edge + 1} & batches, (edge, sorted(batches))
    full = [c for c in drawn if c.preset == "full"]
    assert all(c.config().hidden == 7168 and c.config().latent_dim == 3584 for c in full)
    assert {c.weight_seed for c in drawn} == {0}


def test_full_preset_validates_and_its_sizing_is_sane(monkeypatch):
    for fmt, lo, hi in (("bf16", 55e9, 70e9), ("mxfp4", 14e9, 22e9)):
        case = Case(stage="moe", preset="full", batch=256, expert_format=fmt).validate()
        need = sizing.estimate_bytes(case, "cuda")
        assert lo < need < hi, (fmt, need)
        assert need < 139 * 2**30
    small = Case(stage="moe", preset="tiny", batch=3).validate()
    assert sizing.estimate_bytes(small) < 50e6
    monkeypatch.setattr(sizing, "available_bytes", lambda device: 32 << 30)
    with pytest.raises(sizing.CaseTooLarge) as exc:
        sizing.check_fits(Case(stage="moe", preset="full", expert_format="bf16"), "cpu")
    assert "\n" not in str(exc.value) and "GiB" in str(exc.value)


def test_a_batch_invariance_check_is_sized_like_a_case(monkeypatch):
    """The invariance check draws its weights only after check_fits (call 80: an H100 ran out of
    memory drawing a bf16 full-dims W2 there, reported as the candidate's crash): a case the
    machine cannot hold is its one line (CaseTooLarge, exit 11), raised through judge() before a
    tensor is drawn, never a verdict against the candidate."""
    from k3diff import backends
    from k3diff.judge import judge

    monkeypatch.setattr(sizing, "available_bytes", lambda device: 32 << 30)
    drawn = []
    monkeypatch.setattr("k3diff.invariance.materialize", lambda *a, **k: drawn.append(a))
    case = Case(stage="moe", preset="full", batch=2, expert_format="bf16").validate()
    with pytest.raises(sizing.CaseTooLarge) as exc:
        judge("invariance", case, 1, backends.load("torch-blocked"), "cpu")
    assert "\n" not in str(exc.value) and "GiB" in str(exc.value) and not drawn


def test_weights_are_drawn_where_the_case_version_says():
    assert materialize.draw_on(Case(stage="moe", preset="full", version=2), "cuda") == "device"
    assert materialize.draw_on(Case(stage="moe", preset="full", version=2), "cpu") == "cpu"
    assert materialize.draw_on(Case(stage="moe", preset="small", version=2), "cuda") == "cpu"
    assert materialize.draw_on(Case(stage="moe", preset="small"), "cuda") == "counter"


def test_coverage_names_a_boundary_never_crossed():
    recs = []
    for b, e in ((1, 12), (2, 16), (3, 17)):
        case = Case(stage="moe", batch=b, overrides=(("n_experts", e),), routing="hot").validate()
        recs.append({"stage": "moe", "tie_flips": 1, **coverage_fields(case)})
    lines = coverage_lines(recs, (("batch", (2, 8)), ("n_experts", (16,)), ("cache_len", (64,))))
    text = "\n".join(lines)
    assert "coverage moe (3 cases): batch 1..3" in text and "tie flips 3" in text
    assert "batch 2 [<=>]" in text and "n_experts 16 [<=>]" in text
    never = [line for line in lines if line.startswith("never crossed")][0]
    assert "moe batch 8 (seen: <)" in never and "n_experts" not in never and "cache_len" not in never
    assert "routing  hot 3" in text
    assert coverage_lines([], ()) == []


def test_weight_cache_shares_storage_across_topk_but_not_tensor_identity():
    a = Case(stage="moe", overrides=(("top_k", 2),)).validate()
    b = Case(stage="moe", overrides=(("top_k", 3),)).validate()
    wa, wb = materialize.weights_for(a, "cpu"), materialize.weights_for(b, "cpu")
    assert wa["experts.w13"].data_ptr() == wb["experts.w13"].data_ptr()
    assert wa["experts.w13"] is not wb["experts.w13"]
    assert materialize.weights_for(a, "cpu") is wa


@pytest.mark.parametrize("fmt", ["bf16", "mxfp4"])
def test_expert_sets_of_every_e_are_views_of_one_draw(fmt):
    """Experts are drawn once for the largest E asked for; smaller E are its first experts, bit
    for bit what a fresh draw of that config gives."""
    from reference import materialize as ref_mat

    materialize.evict_weights(0)
    got = {}
    for e in (16, 8, 12, 16):
        case = Case(stage="moe", overrides=(("n_experts", e),), expert_format=fmt, weight_seed=2).validate()
        got[e] = materialize.weights_for(case, "cpu")
        fresh = ref_mat.make_weights(case.config(), "moe", 2, expert_format=fmt,
                                     draw_on=materialize.draw_on(case, "cpu"))
        assert list(got[e]) == list(fresh)
        for name in fresh:
            assert torch.equal(got[e][name], fresh[name]), (e, name)
    names = ref_mat.expert_names(Case(stage="moe").config(), "moe", fmt)
    assert names and all(got[8][n].data_ptr() == got[16][n].data_ptr() for n in names)
    assert len(materialize._EXPERT_CACHE) == 1


@pytest.mark.parametrize("big", [False, True], ids=["plain", "wrapping sums"])
@pytest.mark.parametrize("where", ["one word", "swap in a row", "swap in a column"])
def test_weight_fingerprint_moves_with_every_kind_of_change(where, big):
    t = torch.randn(5, 4096, 3, generator=torch.Generator().manual_seed(1))
    words = t.view(-1).view(torch.int32)
    if big:         # words near +-2^31: every int32 row and column sum wraps
        words.copy_(torch.where(words >= 0, 2 ** 31 - 1 - words % 1000, -2 ** 31 + (-words) % 1000))
    before = weight_guard.fingerprint(t)
    i, j = {"one word": (777, None), "swap in a row": (777, 780),
            "swap in a column": (777, 777 + weight_guard._WIDTH)}[where]
    if j is None:
        words[i] ^= 1
    else:
        words[i], words[j] = words[j].clone(), words[i].clone()
    assert weight_guard.fingerprint(t) != before


def test_weight_guard_sees_a_modified_weight_small_or_large(monkeypatch):
    w = {"a": torch.randn(10).to(torch.bfloat16), "b": torch.randn(300, 7)}
    token = weight_guard.remember(w)
    assert weight_guard.changed(token, w) == []
    w["a"][3] = -w["a"][3]
    assert weight_guard.changed(token, w) == ["a"]
    monkeypatch.setattr(weight_guard, "LARGE", 16)
    token = weight_guard.remember({"b": w["b"]})
    w["b"][100, 2] = torch.nextafter(w["b"][100, 2], torch.tensor(9.0))
    assert weight_guard.changed(token, {"b": w["b"]}) == ["b"]


@pytest.mark.parametrize("fmt", ["bf16", "mxfp4"])
@pytest.mark.parametrize("mode", ["exact", "faithful"])
def test_reference_touches_only_the_routed_experts(fmt, mode):
    """Unrouted experts replaced by NaN: the reference's results are bitwise the same."""
    import reference

    case = Case(stage="moe", batch=5, expert_format=fmt, routing="forced", seed=4).validate()
    cfg, weights, inputs = materialize.materialize(case, "cpu")
    full = reference.run_stage("moe", cfg, weights, inputs, mode=mode)
    used = set(inputs["forced_ids"].flatten().tolist()) - {-1}
    poisoned = dict(weights)
    for name in [n for n in weights if n.startswith("experts.")]:
        t = weights[name].clone()
        for e in range(cfg.n_experts):
            if e not in used:
                t[e] = float("nan") if t.is_floating_point() else 0xFF
        poisoned[name] = t
    part = reference.run_stage("moe", cfg, poisoned, inputs, mode=mode)
    for k, v in full.items():
        if torch.is_tensor(v):
            assert torch.equal(v, part[k]) or (v.is_floating_point() and torch.equal(v.isnan(), part[k].isnan())
                                               and torch.equal(v.nan_to_num(), part[k].nan_to_num())), k


def test_workers_sharing_a_gpu_split_its_memory(monkeypatch):
    """xdist workers beyond the GPU count share a GPU: each is given 1/n of it (the allocator's cap,
    the fit check and the weight cache), so two full-dims workers cannot run each other out of it."""
    import types

    from k3diff import gpu_share, materialize, plugin, session

    G = 2**30
    capped = {}
    fake = types.SimpleNamespace(
        device_count=lambda: 1, set_device=lambda i: None, current_device=lambda: 0,
        set_per_process_memory_fraction=lambda f, i: capped.__setitem__(i, f),
        mem_get_info=lambda dev: (120 * G, 140 * G), memory_reserved=lambda dev: 10 * G,
        get_device_properties=lambda dev: types.SimpleNamespace(total_memory=140 * G))
    monkeypatch.setattr(torch, "cuda", fake)
    monkeypatch.setattr(gpu_share, "_GPU_SHARE", {})
    monkeypatch.setattr(session, "pick_device", lambda name: "cuda")

    def device_of(worker, count):
        config = types.SimpleNamespace(getoption=lambda name: "cuda",
                                       workerinput={"workerid": f"gw{worker}", "workercount": count})
        return plugin._worker_device(config)

    assert device_of(0, 1) == "cuda:0" and capped == {} and gpu_share.gpu_share("cuda:0") == 1.0
    assert sizing.available_bytes("cuda:0") == 120 * G          # alone: the GPU's free memory
    assert device_of(3, 4) == "cuda:0"
    fraction = 0.25 - gpu_share.OUTSIDE_ALLOCATOR / (140 * G)     # a quarter, less what lives outside
    assert capped == {0: pytest.approx(fraction)} and gpu_share.gpu_share("cuda:0") == pytest.approx(fraction)
    assert sizing.available_bytes("cuda:0") == int(fraction * 140 * G - 10 * G)   # less what it holds
    assert materialize._cache_budget("cuda:0") == int(0.6 * fraction * 140 * G)
    from k3diff import isolation

    assert isolation._share_of("cuda:0") == pytest.approx(fraction)   # what its isolated child is sent
    assert isolation._share_of("cpu") == 1.0
    monkeypatch.setattr(torch, "cuda", types.SimpleNamespace(**{**vars(fake), "empty_cache": lambda: None,
                                                                 "is_available": lambda: True, "ipc_collect": lambda: None}))
    monkeypatch.setattr(materialize, "cached_bytes_for", lambda case, device: 0)
    monkeypatch.setattr(materialize, "evict_weights", lambda n: None)
    with pytest.raises(sizing.CaseTooLarge):                    # a 61 GB bf16 case in a quarter
        sizing.check_fits(Case(stage="moe", preset="full", batch=256, expert_format="bf16").validate(), "cuda:0")


def test_too_many_workers_per_gpu_is_one_line_before_any_case():
    G = 2**30
    h200, gb300 = int(139.8 * G), int(279 * G)
    assert sizing.workers_too_many(1, 1, h200) is None
    assert sizing.workers_too_many(8, 8, h200) is None
    # two workers on one H200 ran out of their halves (65bbe65): refused before any case
    why = sizing.workers_too_many(2, 1, h200)
    assert why and "\n" not in why and "use at most -n 1 " in why
    assert "use at most -n 8 " in sizing.workers_too_many(16, 8, h200)
    assert sizing.workers_too_many(2, 1, gb300) is None and sizing.workers_too_many(3, 1, gb300) is None


def test_the_controller_refuses_two_workers_on_one_h200(monkeypatch):
    """The wiring: `pytest --k3diff -n 2` on a machine with one H200 stops before any case."""
    import types

    from k3diff import plugin, session

    props = types.SimpleNamespace(total_memory=int(139.8 * 2**30))
    monkeypatch.setattr(torch, "cuda", types.SimpleNamespace(device_count=lambda: 1,
                                                             get_device_properties=lambda i: props))
    monkeypatch.setattr(session, "pick_device", lambda name: "cuda")
    for n, refused in ((2, True), (1, False)):
        config = types.SimpleNamespace(
            getoption=lambda name: "cuda", option=types.SimpleNamespace(numprocesses=n, dist="load"),
            pluginmanager=types.SimpleNamespace(hasplugin=lambda name: name == "xdist"))
        if refused:
            with pytest.raises(pytest.exit.Exception, match="use at most -n 1 ") as stop:
                plugin._worker_device(config)
            assert stop.value.returncode == 11            # exit_codes.MACHINE: not the candidate's 1
        else:
            assert plugin._worker_device(config) == "cuda"
