"""Where a case's caches and states are drawn (k3diff.materialize.inputs_draw_on): from case
version 3 by counter draws on the device it runs on (the same bits everywhere); version 2 on a GPU
with the GPU's generator, everywhere else on the CPU; a version-1 seed keeps its CPU draws.
The device path is exercised here on the CPU (draw_on="device" with device="cpu"): the same code a
GPU runs, sequence by sequence, with its sentinels where the CPU draw puts them."""
import json

import pytest
import torch

from k3diff import materialize
from k3diff.case import CASE_VERSION, Case, CaseError
from reference.config import preset
from reference.materialize import make_inputs

CFG = preset("small")


def test_rule_reads_the_version_and_the_device_type():
    assert CASE_VERSION == 3
    for dev in ("cuda", "cuda:1", "cpu"):
        assert materialize.inputs_draw_on(Case(stage="mla", preset="small"), dev) == "counter"
        assert materialize.draw_on(Case(stage="moe", preset="small"), dev) == "counter"
    assert materialize.inputs_draw_on(Case(stage="mla", preset="small", version=2), "cuda") == "device"
    assert materialize.inputs_draw_on(Case(stage="mla", preset="full", version=2), "cuda:1") == "device"
    assert materialize.inputs_draw_on(Case(stage="mla", preset="small", version=2), "cpu") == "cpu"
    assert materialize.inputs_draw_on(Case(stage="kda", preset="small", version=1), "cuda") == "cpu"


def test_version_1_seeds_still_load_and_unknown_versions_do_not():
    case = Case(stage="moe", preset="tiny", seed=3)
    d = json.loads(json.dumps(case.to_dict()))
    d["version"] = 1
    assert Case.from_dict(d).version == 1
    for bad in (0, 4, "2", 2.0, None):
        d["version"] = bad
        with pytest.raises(CaseError, match="case version"):
            Case.from_dict(d)


def test_device_draw_of_the_mla_cache_keeps_the_layout_of_the_cpu_draw():
    lens = [0, 5, 70, 300]
    kw = dict(batch=4, cache_lens=lens, value_dist="large")
    cpu = make_inputs(CFG, "mla", 7, **kw)
    dev = make_inputs(CFG, "mla", 7, draw_on="device", **kw)
    again = make_inputs(CFG, "mla", 7, draw_on="device", **kw)
    a, b = cpu["kv_cache"], dev["kv_cache"]
    assert b.shape == a.shape and b.dtype == torch.bfloat16
    assert torch.equal(b.view(torch.int16), again["kv_cache"].view(torch.int16))   # deterministic
    for i, L in enumerate(lens):
        assert torch.isfinite(b[i, :L]).all() and torch.isnan(b[i, L:]).all()     # sentinels past L_b
    live = torch.cat([b[i, :L].float().flatten() for i, L in enumerate(lens)])
    assert 25 < live.std().item() < 35                                             # large: x30
    # the CPU's generator is sequential and a row is 36 x 16 numbers, so on the CPU drawing sequence
    # by sequence gives the whole draw's bits (on a GPU it does not: other bits, the same law)
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))
    # every other input is the CPU draw, bit for bit
    assert torch.equal(cpu["x"].view(torch.int16), dev["x"].view(torch.int16))
    assert torch.equal(cpu["cache_lens"], dev["cache_lens"])


def test_device_draw_of_the_kda_states():
    kw = dict(batch=3, value_dist="plain")
    cpu = make_inputs(CFG, "kda", 9, **kw)
    dev = make_inputs(CFG, "kda", 9, draw_on="device", **kw)
    for name in ("conv_state", "recurrent_state"):
        assert dev[name].shape == cpu[name].shape and dev[name].dtype == cpu[name].dtype
    assert 0.45 < dev["recurrent_state"].std().item() < 0.55                      # 0.5 randn
    assert torch.equal(cpu["state_idx"], dev["state_idx"])


def test_unused_slots_poisoned_from_a_device_generator_stay_finite_and_huge():
    inputs = make_inputs(CFG, "kda", 9, batch=2, n_slots=6, draw_on="device")
    materialize.poison_unused_slots(inputs, 9, draw="device")
    live = set(inputs["state_idx"].tolist())
    for s in range(6):
        block = inputs["recurrent_state"][s]
        if s in live:
            assert block.abs().max() < 100
        else:
            assert torch.isfinite(block).all() and (block.abs() >= 2.0 ** 100).all()


def test_bad_draw_on_is_one_clear_error():
    with pytest.raises(ValueError, match="draw_on must be"):
        make_inputs(CFG, "moe", 1, batch=1, draw_on="gpu")


@pytest.mark.parametrize("stage", ["moe", "mla", "kda", "layer"])
def test_a_version_3_case_draws_the_same_bits_on_a_gpu_as_on_the_cpu(stage):
    """A seed recorded on a GPU replays on the CPU: every weight and input of a version-3 case is
    the same bits on both (reference/counter_draw.py; the small inputs are CPU draws anyway)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from k3diff.materialize import materialize
    extra = dict(cache_lens=(3, 40), cache_format="fp8", widths=(2, 1)) if stage == "mla" else {}
    if stage == "kda":
        extra = dict(n_slots=5, state_idx=(2, 4), widths=(3, 1), accepted=(2, 0))
    if stage == "layer":
        extra = dict(layer_idx=1, n_slots=4, state_idx=(1, 3))
    case = Case(stage=stage, preset="small", batch=2, seed=77, **extra).validate()
    _, w_gpu, in_gpu = materialize(case, "cuda")
    _, w_cpu, in_cpu = materialize(case, "cpu")
    for got, want in ((w_gpu, w_cpu), (in_gpu, in_cpu)):
        assert got.keys() == want.keys()
        for name, t in want.items():
            if torch.is_tensor(t):
                a, b = got[name].cpu(), t
                assert a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8)), name
