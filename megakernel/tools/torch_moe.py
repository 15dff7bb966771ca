"""The torch baseline the bench compares against: a straightforward bf16 torch implementation of
the same block (cuBLAS bf16 GEMMs with f32 accumulation, f32 router logits, a loop over the
experts the batch selected; MXFP4 experts dequantised to bf16 when selected). Not a reference."""
import torch
import torch.nn.functional as F

_E2M1 = [0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6]


def _situ(g, u, b, bl):
    return (b * torch.tanh(g / b) * torch.sigmoid(g)) * (bl * torch.tanh(u / bl))


class TorchMoE:
    def __init__(self, dm, moe):
        """Shares the packed weights of a megakernel.moe.LatentMoE (no copy of the experts)."""
        self.dm, self.m = dm, moe
        E, r = dm.E, dm.r
        self.wr = moe.w1[:E].float()                  # router in f32: "route with f32 logits"
        self.wd = moe.w1[E:E + r]
        self.wsgu = moe.w_gu
        self.lut = torch.tensor(_E2M1, device=moe.w1.device, dtype=torch.bfloat16)

    def _deq(self, packed, scale):
        w = torch.stack([self.lut[(packed & 15).long()], self.lut[(packed >> 4).long()]], -1)
        w = w.flatten(-2)
        s = torch.exp2(scale.float() - 127).to(torch.bfloat16).repeat_interleave(32, -1)
        return w * s

    def __call__(self, x):
        dm, m = self.dm, self.m
        logits = F.linear(x.float(), self.wr)
        sc = torch.sigmoid(logits)
        ids = torch.topk(sc + m.bias, dm.k, dim=-1).indices
        w = sc.gather(1, ids)
        w = w / w.sum(-1, keepdim=True) * dm.rsf
        hl = F.linear(x, self.wd)
        gus = F.linear(x, self.wsgu)
        acts = _situ(gus[:, :dm.Is].float(), gus[:, dm.Is:].float(), dm.beta,
                     dm.beta_lin).to(torch.bfloat16)
        ys = F.linear(acts, m.w_sd)
        yc = torch.zeros(x.shape[0], dm.r, device=x.device)
        for e in ids.unique().tolist():
            tok, slot = (ids == e).nonzero(as_tuple=True)
            if m.fmt == "bf16":
                w13, w2 = m.w13[e], m.w2[e]
            else:
                w13, w2 = self._deq(m.w13[e], m.w13s[e]), self._deq(m.w2[e], m.w2s[e])
            gu = F.linear(hl[tok], w13).float()
            act = _situ(gu[:, :dm.I], gu[:, dm.I:], dm.beta, dm.beta_lin).to(torch.bfloat16)
            y = F.linear(act, w2)
            yc.index_add_(0, tok, y.float() * w[tok, slot, None])
        yc = yc.to(torch.bfloat16).float()
        yn = (yc * torch.rsqrt(yc.pow(2).mean(-1, keepdim=True) + dm.eps)
              * m.norm_w.float()).to(torch.bfloat16)
        yu = F.linear(yn, m.w_up)
        return (yu.float() + ys.float()).to(torch.bfloat16)
