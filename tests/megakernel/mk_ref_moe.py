"""A float32 torch reference of the LatentMoE step for the megakernel tests (independent of
reference/): f32 math everywhere, bf16 rounding exactly at the K3_SPEC 7 points the kernel uses
(hl, act, y_j, yc, yn, yu, gu_s, act_s, ys, out). The tests draw their random weights with
megakernel.tools.bench.draw_weights, the bench's own."""
import torch

E2M1 = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6])


def dequant(packed, scale):
    lut = E2M1.to(packed.device)
    lo = lut[(packed & 15).long()]
    hi = lut[(packed >> 4).long()]
    w = torch.stack([lo, hi], -1).flatten(-2)                       # [.., N, K]
    s = torch.exp2(scale.float() - 127).repeat_interleave(32, -1)   # [.., N, K]
    return w * s


def situ(g, u, b=4.0, bl=25.0):
    return (b * torch.tanh(g / b) * torch.sigmoid(g)) * (bl * torch.tanh(u / bl))


def bf(t):
    return t.to(torch.bfloat16).float()


def moe_ref(dm, w, x, forced_ids=None):
    f = lambda n: w[n].float()  # noqa: E731
    xf = x.float()
    logits = xf @ f("router.weight").T
    sc = torch.sigmoid(logits)
    if forced_ids is None:
        sel = sc + f("router.bias")
        # stable descending sort: equal scores keep ascending id order -> lower id wins ties
        ids = torch.sort(sel, dim=-1, descending=True, stable=True).indices[:, :dm.k].int()
    else:
        ids = forced_ids.int()
    valid = ids >= 0
    s = torch.where(valid, sc.gather(1, ids.clamp(min=0).long()), torch.zeros(()))
    wts = (s / s.sum(-1, keepdim=True) if dm.renorm else s) * dm.rsf
    hl = bf(xf @ f("down.weight").T)
    if "experts.w13" in w:
        W13, W2 = f("experts.w13"), f("experts.w2")
    else:
        W13 = dequant(w["experts.w13_packed"], w["experts.w13_scale"])
        W2 = dequant(w["experts.w2_packed"], w["experts.w2_scale"])
    T = x.shape[0]
    yc = torch.zeros(T, dm.r, device=x.device)
    for t in range(T):
        for j in range(dm.k):
            e = int(ids[t, j])
            if e < 0:
                continue
            gu = W13[e] @ hl[t]
            act = bf(situ(gu[:dm.I], gu[dm.I:], dm.beta, dm.beta_lin))
            yc[t] += wts[t, j] * bf(W2[e] @ act)
    yc = bf(yc)
    yn = bf(yc * torch.rsqrt(yc.pow(2).mean(-1, keepdim=True) + dm.eps) * f("latent_norm.weight"))
    yu = bf(yn @ f("up.weight").T)
    gus = bf(xf @ f("shared.gate_up").T)
    acts = bf(situ(gus[:, :dm.Is], gus[:, dm.Is:], dm.beta, dm.beta_lin))
    ys = bf(acts @ f("shared.down").T)
    return {"out": bf(yu + ys), "router_logits": logits, "topk_ids": ids, "topk_weights": wts,
            "latent": hl, "combined": yc, "latent_normed": yn, "routed_out": yu, "shared_out": ys}
