"""The megakernel's MLA and KDA steps on the CPU with each CuTe DSL kernel replaced by torch code
that reads and writes the same named buffers in the same layouts (z's columns, the cache rows, the
slots), so that everything around the kernels runs as it does on a GPU: the backend's run paths,
megakernel/verify.py's three parts, fp8_cache.py, and the steps' own launch, scratch, split and
stage plumbing (mla.MlaStep, kda.KdaStep: the real classes). The kernels' numerics are not the
subject (they are judged on the GPU): the emulations use torch-blocked's math.

`emulate(monkeypatch)` swaps cache.compiled (the one way a step reaches a kernel) and runs every
plan's launches in order on the host (no streams); `EmulatedBackend` is the megakernel backend
whose steps live on the CPU in the fused stream mode.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from k3diff.backends.blocked_attn import delta_rule
from k3diff.backends.blocked_ops import exp, rms_scale, sigmoid
from megakernel.backend import MegakernelBackend

F32 = torch.float32


def _bf(t):
    return t.to(torch.bfloat16)


def _gemv(n, bind, dims, **v):
    w, x, y, T = n[bind["w"]], n[bind["x"]], n[bind["y"]], n["T"]
    y[:T, :w.shape[0]] = _bf(x[:T, :w.shape[1]].to(F32) @ w.to(F32).T)


def _mla_norm(n, bind, md, **v):
    T, Lcap, QL, R, C = n["T"], n["Lcap"], md.QL, md.R, md.C
    z = n["z"][:T].to(F32)
    iq = torch.rsqrt(z[:, :QL].pow(2).mean(-1, keepdim=True) + md.eps)
    ik = torch.rsqrt(z[:, QL:QL + R].pow(2).mean(-1, keepdim=True) + md.eps)
    n["qc"][:T] = _bf(z[:, :QL] * iq * n["q_norm"].to(F32))
    kvc = _bf(z[:, QL:QL + R] * ik * n["kv_norm"].to(F32))
    kpe = n["z"][:T, QL + R:QL + C]
    n["kvc"][:T], n["kpe"][:T] = kvc, kpe
    kv = n["kv_cache"].view(T, Lcap, C)
    kv[torch.arange(T), n["lens"][:T].long()] = torch.cat([kvc, kpe], -1)


def _mla_absorb(n, bind, md, **v):
    T = n["T"]
    q = n["q"][:T].view(T, md.H, md.NP + md.RP)[:, :, :md.NP].to(F32)
    n["ql"][:T] = _bf(torch.einsum("thn,hrn->thr", q, n["wuk_t"].to(F32)))


def _mla_attn(n, bind, md, **v):
    """The attention and its merge in one (the merge's launch then writes nothing): lat."""
    T, Lcap, H, R, C = n["T"], n["Lcap"], md.H, md.R, md.C
    q = n["q"][:T].view(T, H, md.NP + md.RP)
    Q = torch.cat([n["ql"][:T].to(F32), q[:, :, md.NP:].to(F32)], -1)          # [T, H, C]
    kv = n["kv_cache"].view(T, Lcap, C)
    for t in range(T):
        rows = kv[t, :int(n["lens"][t]) + 1].to(F32)
        p = torch.softmax(Q[t] @ rows.T * float(md.NP + md.RP) ** -0.5, dim=-1)
        n["lat"][t] = _bf(p @ rows[:, :R])


def _mla_value(n, md, T):
    H, V = md.H, md.V
    wuv = n["kv_b"].view(H, md.NP + V, md.R)[:, md.NP:].to(F32)                  # [H, V, R]
    o = _bf(torch.einsum("thr,hvr->thv", n["lat"][:T].to(F32), wuv))
    n["o"][:T] = o
    gz = n["z"][:T, md.QL + md.C:]
    n["gated"][:T] = _bf(o.reshape(T, H * V).to(F32) * sigmoid(gz.to(F32)))


def _mla_merge(n, bind, md, value=True, **v):
    if value:                      # the CUDA-core path's merge also projects and gates
        _mla_value(n, md, n["T"])


def _mla_uv(n, bind, md, **v):
    _mla_value(n, md, n["T"])


def _live(n):
    T = n["T"]
    live = torch.nonzero(n["sidx"][:T] > 0).squeeze(1)
    return live, n["sidx"][live].long()


def _kda_conv(n, bind, kd, **v):
    T, P, W = n["T"], kd.P, kd.W
    live, slots = _live(n)
    n["conv_out"][:T] = 0
    if not live.numel():
        return
    mixed = n["z"][live, :3 * P]
    hist = n["conv_state"][slots]
    w = n["conv_w"].to(F32)
    acc = sum(w[:, j] * hist[:, :, j].to(F32) for j in range(W - 1)) + w[:, W - 1] * mixed.to(F32)
    n["conv_state"][slots] = torch.cat([hist[:, :, 1:], mixed.unsqueeze(-1)], -1)
    n["conv_out"][live] = _bf(F.silu(acc))


def _kda_core(n, bind, kd, **v):
    T, H, D, P = n["T"], kd.H, kd.D, kd.P
    for name in ("decay", "beta", "core"):
        n[name][:T] = 0
    live, slots = _live(n)
    if not live.numel():
        return
    m = live.numel()
    y = n["conv_out"][live]
    q, k, vv = (y[:, i * P:(i + 1) * P].to(F32).view(m, H, D) for i in range(3))
    a = exp(n["a_log"].to(F32)).view(1, H, 1)
    gk = kd.lb * sigmoid(a * (n["graw"][live].to(F32).view(m, H, D) + n["dt_bias"].to(F32).view(1, H, D)))
    beta = sigmoid(n["z"][live, kd.B0:kd.B0 + H].to(F32))
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * (D ** -0.5)
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    S, o = delta_rule(n["rec"][slots], gk, q, k, vv, beta)
    n["rec"][slots] = S
    n["decay"][live], n["beta"][live], n["core"][live] = gk, beta, o


def _kda_norm(n, bind, kd, **v):
    T, H, D, P = n["T"], kd.H, kd.D, kd.P
    n["normed"][:T] = 0
    live, _ = _live(n)
    if not live.numel():
        return
    o = n["core"][live]
    gate = sigmoid(n["z"][live, kd.G0:kd.G0 + P].to(F32).view(-1, H, D))
    n["normed"][live] = _bf(o * rms_scale(o, kd.eps) * n["o_norm"].to(F32) * gate).view(-1, P)


def _attn_res(n, bind, dm, **v):
    T, ns, wi, d = n["T"], n["n"], n["wi"], dm.d
    P = n["prefix"]
    if n["has_delta"]:
        P[:T] = _bf(P[:T].to(F32) + n["delta"][:T].to(F32))
    if wi >= 0:
        n["blocks"][:T, wi] = P[:T]
    if ns == 0:
        m = P[:T].to(F32)
    else:
        src = torch.cat([n["blocks"][:T, :ns], P[:T].unsqueeze(1)], 1).to(F32)       # [T, n + 1, d]
        logit = (src @ n["u"]) * torch.rsqrt(src.pow(2).mean(-1) + dm.eps)
        m = (torch.softmax(logit, 1).unsqueeze(-1) * src).sum(1)
    n["out"][:T] = _bf(m * torch.rsqrt(m.pow(2).mean(-1, keepdim=True) + dm.eps) * n["w_out"].to(F32))


class TorchMoE:
    """moe.LatentMoE's launch over torch-blocked's MoE (the layer's MoE is not the subject);
    `cfg` is set by EmulatedBackend.prepare after the layer is built."""

    def __init__(self, dims, weights, device, settings=None):
        self.weights, self.cfg = weights, None

    def launch(self, x, forced_ids=None, out=None):
        from k3diff.backends.blocked_moe import prepare_moe, run_moe
        out.copy_(run_moe(self.cfg, prepare_moe(self.cfg, self.weights), x, forced_ids)["out"])


KERNELS = {"attn_res": _attn_res, "mla_norm": _mla_norm, "mla_absorb": _mla_absorb, "mla_absorb_mma": _mla_absorb,
           "mla_attn": _mla_attn, "mla_attn_mma": _mla_attn, "mla_attn_wg": _mla_attn,
           "mla_attn_tma": _mla_attn, "mla_merge": _mla_merge, "mla_uv": _mla_uv,
           "kda_conv": _kda_conv, "kda_core": _kda_core, "kda_norm": _kda_norm}


class _Launch:
    def __init__(self, name, dims, variant):
        self.fn = KERNELS.get(name, _gemv)
        self.dims, self.variant = dims, variant

    def __call__(self, named, stream, bind=None):
        self.fn(named, bind, self.dims, **self.variant)


def emulate(monkeypatch) -> None:
    from megakernel import cache, launch_plan

    from megakernel import layer, moe
    monkeypatch.setattr(cache, "compiled", lambda name, dims, fresh=False, **v: _Launch(name, dims, v))
    monkeypatch.setattr(moe, "LatentMoE", TorchMoE)
    monkeypatch.setattr(layer, "stream", lambda: None)
    monkeypatch.setattr(launch_plan.TwoStreams, "run",
                        lambda self, steps, go, one_stream=False: [go(s, None) for s in launch_plan.launches(steps)])


class EmulatedBackend(MegakernelBackend):
    """The megakernel backend (its supports(), its run paths) with its MLA and KDA steps on the
    CPU, fused stream mode, over the emulated kernels (`emulate` first)."""
    name = "megakernel-emulated"
    stages = ("kda", "mla", "layer")
    boundaries = None

    def available(self):
        return None

    def prepare(self, cfg, stage, weights):
        from megakernel.dims import kda_from_cfg, mla_from_cfg
        from megakernel.kda import KdaStep
        from megakernel.mla import MlaStep
        self.provides(stage)
        if stage == "layer":            # its attention steps in the fused mode too
            from megakernel.layer import LayerStep
            layer = LayerStep(cfg, weights, "cpu")
            for step in (layer.kda, layer.mla):
                if step is not None:
                    step.streams = "fused"
            if layer.moe is not None:
                layer.moe.cfg = cfg
            return layer
        if stage == "kda":
            return KdaStep(kda_from_cfg(cfg), weights, "cpu", streams="fused")
        return MlaStep(mla_from_cfg(cfg), weights, "cpu", streams="fused")
