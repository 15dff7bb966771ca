"""`torch-blocked-graph`: torch-blocked's KDA decode with no host read, so it can be captured into
a CUDA graph (`graph_safe = True`; k3diff/graph_replay.py).

torch-blocked itself is not graph-safe: its MoE groups tokens by expert with `.tolist()`, its MLA
sizes the split-KV from `int(cache_lens.max())` and its KDA picks the live rows with
`torch.nonzero`; each is a host read that a CUDA graph cannot hold (the capture fails). This KDA
step computes every row and selects the live ones with `torch.where`: padding rows read the null
slot and write it back unchanged, so the live rows get torch-blocked's arithmetic on the same
operands. A verify step (W tokens per sequence, docs/k3-decode.md §14) is refused (`supports`):
this step is the one-token decode, and run on a verify case's T = ΣW rows against its B slots it
would fail on the shapes, not on the schedule. It is the graph-safe correct candidate the
graph-replay dimension and its planted bugs (k3diff/schedule_mutants.py) run on; `pytest --k3diff --k3diff-backend
k3diff.backends.blocked_graph:TorchBlockedGraphBackend` judges it like any candidate.
"""
from __future__ import annotations

import torch

from .blocked import TorchBlockedBackend
from .blocked_attn import delta_rule
from .blocked_ops import F32, bf16, exact_f32_matmul, exp, gemm, rms_scale, sigmoid


def run_kda_all_rows(cfg, p: dict, x, conv_state, rec_state, state_idx, live=None) -> dict:
    """torch-blocked's KDA step (blocked_attn.run_kda) on every row; null rows (state_idx <= 0)
    give zeros and leave every slot as it was, chosen on the device. `live`: the live-row mask
    (state_idx > 0 unless given: a planted graph bug hands a stale one)."""
    T = x.shape[0]
    H, D, P = cfg.kda_heads, cfg.kda_head_dim, cfg.kda_proj
    live = state_idx > 0 if live is None else live
    slots = state_idx.clamp(min=0).to(torch.int64)

    z = bf16(gemm(x, p["w_in"]))
    mixed, g2 = z[:, :3 * P], z[:, 3 * P:4 * P]
    f_a, b_raw = z[:, 4 * P:4 * P + D], z[:, 4 * P + D:4 * P + D + H]
    graw = bf16(gemm(f_a, p["f_b"]))

    hist = conv_state[slots]
    w = p["conv"].to(F32)
    Wd = w.shape[1]
    acc = torch.zeros(T, 3 * P, dtype=F32, device=x.device)
    for j in range(Wd - 1):
        acc = acc + w[:, j] * hist[:, :, j].to(F32)
    acc = acc + w[:, Wd - 1] * mixed.to(F32)
    y = bf16(torch.nn.functional.silu(acc))
    shifted = torch.cat([hist[:, :, 1:], mixed.unsqueeze(-1).to(conv_state.dtype)], dim=-1)
    # every null row writes the null slot's own bits back: equal writes, whatever the order
    conv_state[slots] = torch.where(live.view(T, 1, 1), shifted, hist)

    q, k, v = (y[:, i * P:(i + 1) * P].to(F32).view(T, H, D) for i in range(3))
    a_h = exp(p["A_log"][:H].to(F32)).view(1, H, 1)
    gk = cfg.gate_lower_bound * sigmoid(a_h * (graw.to(F32).view(T, H, D) + p["dt_bias"].to(F32).view(1, H, D)))
    beta = sigmoid(b_raw.to(F32))
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * (D ** -0.5)
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)

    old = rec_state[slots]
    S, o = delta_rule(old.to(F32), gk, q, k, v, beta)
    rec_state[slots] = torch.where(live.view(T, 1, 1, 1), S.to(rec_state.dtype), old)

    gate = sigmoid(g2.to(F32).view(T, H, D))
    normed = bf16(o * rms_scale(o, 1e-5) * p["o_norm"].to(F32) * gate).view(T, P)
    out = bf16(gemm(normed, p["o_proj"]))
    res = {}
    for name, val in (("out", out), ("conv_out", y), ("decay", gk), ("beta", beta), ("core", o),
                      ("normed", normed)):
        mask = live.view((T,) + (1,) * (val.dim() - 1))
        res[name] = torch.where(mask, val, torch.zeros((), dtype=val.dtype, device=val.device))
    return res


class TorchBlockedGraphBackend(TorchBlockedBackend):
    name = "torch-blocked-graph"
    stages = ("kda",)
    graph_safe = True          # no host read, no allocation kept across calls (k3diff/graph_replay.py)

    def supports(self, cfg, stage, features=frozenset()) -> str | None:
        """The one-token KDA decode step only: a verify case is refused (skipped, never passed)."""
        if "verify" in features:
            return "torch-blocked-graph runs the one-token KDA decode step, not a verify step"
        return None

    def run(self, stage, cfg, prepared, inputs, out) -> None:
        with torch.no_grad(), exact_f32_matmul():
            res = run_kda_all_rows(cfg, prepared["kda"], inputs["x"], inputs["conv_state"],
                                   inputs["recurrent_state"], inputs["state_idx"])
        for name, buf in out.items():
            buf.copy_(res[name])
