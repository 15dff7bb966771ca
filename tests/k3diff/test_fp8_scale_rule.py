"""The FP8 cache's rule (k3diff/state_rules.py): e4m3 bytes bit for bit given the candidate's own
stored scales, each scale within 2 f32 ulps of max(amax / 448, FLT_MIN). On a GPU, torch-blocked's
`amax / 448.0` runs as PyTorch's CUDA division by a scalar, amax * (1 / 448), an ulp from the
correctly rounded quotient at some tiles: the bytes then differed from a re-quantisation with the
contract's scales and a correct candidate failed. Emulated here on the CPU."""
import dataclasses

import torch

from k3diff import mutants
from k3diff.backends import blocked_fp8, load
from k3diff.case import Case
from k3diff.runner import check_case

CASE = Case(stage="mla", batch=4, cache_lens=(62, 62, 3, 40), widths=(4, 4, 2, 1), cache_format="fp8",
            seed=5).validate()


def _reciprocal_scales(monkeypatch):
    real_clamp = torch.clamp

    def write_rows(kv_c, k_pe, cfg, per_tensor=False):
        n, R = kv_c.shape
        t = blocked_fp8.tile_of(cfg)
        v = kv_c.to(torch.float32).view(n, R // t, t)
        amax = v.abs().amax(-1)
        scale = real_clamp(amax * torch.tensor(1 / 448.0, dtype=torch.float32),
                           min=torch.finfo(torch.float32).tiny).contiguous()
        q = (v / scale.unsqueeze(-1)).to(torch.float8_e4m3fn).view(n, R)
        return torch.cat([q.view(torch.uint8), scale.view(torch.uint8).view(n, -1),
                          k_pe.to(torch.bfloat16).contiguous().view(torch.uint8).view(n, -1)], dim=-1)

    monkeypatch.setattr(blocked_fp8, "write_rows", write_rows)


def test_scales_by_a_reciprocal_differ_in_an_ulp_and_pass(monkeypatch):
    _reciprocal_scales(monkeypatch)
    seen = []
    for seed in range(4):
        case = dataclasses.replace(CASE, seed=seed)
        v = check_case(case, load("torch-blocked"), device="cpu")
        assert v.ok, v.failures()
        seen += [r for r in v.reports if r.tensor == "kv_cache.fp8_scale"]
    assert seen and max(r.max_err for r in seen) > 0      # an ulp away somewhere, and passed


def test_a_per_tensor_scale_fails_on_its_scale(monkeypatch):
    swap = mutants.BY_NAME["fp8_scale_per_tensor"].swap
    monkeypatch.setattr(blocked_fp8, "write_rows", swap.make(blocked_fp8.write_rows))
    v = check_case(CASE, load("torch-blocked"), device="cpu")
    assert not v.ok and any(r.tensor == "kv_cache.fp8_scale" and not r.ok for r in v.reports), v.failures()
