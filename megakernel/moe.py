"""The LatentMoE decode step on the GPU: weight packing (once) and the 7-launch sequence.

  1 gemv_x      S1 = x [W_router | W_down | W_shared_gate_up]^T            (f32)
  2 route       top-k ids/weights (or forced), hl = bf16(.), act_s = bf16(SiTU(bf16 gu_s))
  3 schedule    active experts + their (token, slot) pairs, in id / token order
  4 expert_up   ACT[p] = bf16(SiTU(hl_t W13_e^T)), each active expert's rows streamed once
  5 expert_down Y[p]   = bf16(ACT[p] W2_e^T)
  6 combine     yc = bf16(sum_j w_j y_j) (slot order), yn = RMSNorm(yc)
  7 out         out = bf16(bf16(yn W_up^T) + bf16(act_s W_sd^T))
Everything is launched on the current torch stream, so the sequence can be captured in a graph.
"""
import torch

from megakernel import cache
from megakernel.cache import BF, F32, I32, U8, ptr
from megakernel.dims import MAX_T


def _stream():
    from cuda.bindings import driver
    return driver.CUstream(torch.cuda.current_stream().cuda_stream)


class LatentMoE:
    def __init__(self, dims, weights: dict, device):
        """Pack the weights once (never modifies `weights`): the x-side rows are concatenated so
        launch 1 reads x once; expert tensors are made contiguous."""
        self.dm = dm = dims
        g = lambda n: weights[n].to(device)  # noqa: E731
        self.w1 = torch.cat([g("router.weight"), g("down.weight"), g("shared.gate_up")], 0)
        self.w1 = self.w1.to(torch.bfloat16).contiguous()
        self.bias = g("router.bias").float().contiguous()
        self.norm_w = g("latent_norm.weight").to(torch.bfloat16).contiguous()
        self.w_up = g("up.weight").to(torch.bfloat16).contiguous()
        self.w_sd = g("shared.down").to(torch.bfloat16).contiguous()
        if "experts.w13_packed" in weights:
            self.fmt = "mxfp4"
            self.w13 = g("experts.w13_packed").contiguous()
            self.w13s = g("experts.w13_scale").contiguous()
            self.w2 = g("experts.w2_packed").contiguous()
            self.w2s = g("experts.w2_scale").contiguous()
        else:
            self.fmt = "bf16"
            self.w13 = g("experts.w13").to(torch.bfloat16).contiguous()
            self.w2 = g("experts.w2").to(torch.bfloat16).contiguous()
            self.w13s = self.w2s = torch.zeros(16, dtype=torch.uint8, device=device)
        self.device = device
        self._scratch = {}

    def scratch(self, T):
        s = self._scratch.get(T)
        if s is None:
            dm, dev = self.dm, self.device
            e = lambda *sh, dt=torch.bfloat16: torch.empty(*sh, dtype=dt, device=dev)  # noqa: E731
            P = T * dm.k
            s = dict(s1=e(T, dm.E + dm.r + 2 * dm.Is, dt=torch.float32),
                     ids=e(MAX_T * dm.k, dt=torch.int32), wts=e(T, dm.k, dt=torch.float32),
                     hl=e(T, dm.r), acts=e(T, dm.Is), nact=e(4, dt=torch.int32),
                     act_e=e(dm.E, dt=torch.int32), act_off=e(dm.E, dt=torch.int32),
                     act_cnt=e(dm.E, dt=torch.int32), pairs=e(P, dt=torch.int32),
                     act=e(P, dm.I), y=e(P, dm.r), yc=e(T, dm.r), yn=e(T, dm.r),
                     out=e(T, dm.d), ro=e(T, dm.d), so=e(T, dm.d),
                     fids=torch.full((T, dm.k), -1, dtype=torch.int32, device=dev))
            self._scratch[T] = s
        return s

    def compile_all(self, T, debug=False, forced=False):
        return self._fns(T, debug, forced)

    def _fns(self, T, debug, forced):
        dm = self.dm
        tg = 1 if T == 1 else cache.TT_GEMV
        te = 1 if T == 1 else cache.TT_EXPERT
        c = cache.compile_kernel
        if self.uses_mma():
            f_up = c("expert_up_mma", dm, **cache.MMA_UP)
            f_down = c("expert_down_mma", dm, **cache.MMA_DOWN)
        else:
            f_up = c("expert_up", dm, fmt=self.fmt, TT=te)
            f_down = c("expert_down", dm, fmt=self.fmt, TT=te)
        return (c("gemv_x", dm, TT=tg), c("route", dm, forced=forced), c("schedule", dm),
                f_up, f_down, c("combine", dm), c("out", dm, TT=tg, debug=debug))

    def uses_mma(self):
        """MXFP4 experts on the tensor cores (k_expert_mma.py; ACT then holds each 8-chunk in the
        pair order [0 4 1 5 2 6 3 7], written by its up and read by its down kernel)."""
        return self.fmt == "mxfp4" and cache.MX_MMA and cache.mma_ok(self.dm)

    def launch(self, x, forced_ids=None, debug=False, out=None, stages=None):
        """Enqueue the 7 launches; returns the scratch dict (s['out'] unless `out` is given).
        `stages` (a set of indices 0..6) enqueues only those launches: the bench times each one
        alone over the scratch a full call left behind."""
        on = (lambda i: True) if stages is None else (lambda i: i in stages)  # noqa: E731
        dm = self.dm
        T = x.shape[0]
        if not 1 <= T <= MAX_T:
            raise ValueError(f"megakernel supports 1 <= T <= {MAX_T} tokens, got {T}")
        assert x.dtype == torch.bfloat16 and x.is_contiguous()
        s = self.scratch(T)
        forced = forced_ids is not None
        if forced:
            s["fids"].copy_(forced_ids.to(torch.int32))
        f_gemv, f_route, f_sched, f_up, f_down, f_comb, f_out = self._fns(T, debug, forced)
        p = lambda dt, t: ptr(dt, t.data_ptr())  # noqa: E731
        st = _stream()
        wdt = BF if self.fmt == "bf16" else U8
        maxU = min(dm.E, T * dm.k)
        o = out if out is not None else s["out"]
        if on(0):
            f_gemv(p(BF, self.w1), p(BF, x), p(F32, s["s1"]), T, st)
        if on(1):
            f_route(p(F32, s["s1"]), p(F32, self.bias), p(I32, s["fids"]), p(I32, s["ids"]),
                    p(F32, s["wts"]), p(BF, s["hl"]), p(BF, s["acts"]), T, st)
        if on(2):
            f_sched(p(I32, s["ids"]), p(I32, s["nact"]), p(I32, s["act_e"]), p(I32, s["act_off"]),
                    p(I32, s["act_cnt"]), p(I32, s["pairs"]), T, st)
        sched = [p(I32, s[n]) for n in ("nact", "act_e", "act_off", "act_cnt", "pairs")]
        if on(3):
            f_up(p(wdt, self.w13), p(U8, self.w13s), p(BF, s["hl"]), *sched, p(BF, s["act"]),
                 T, maxU, st)
        if on(4):
            f_down(p(wdt, self.w2), p(U8, self.w2s), p(BF, s["act"]), *sched, p(BF, s["y"]),
                   T, maxU, st)
        if on(5):
            f_comb(p(I32, s["ids"]), p(F32, s["wts"]), p(BF, s["y"]), p(BF, self.norm_w),
                   p(BF, s["yc"]), p(BF, s["yn"]), T, st)
        if on(6):
            f_out(p(BF, self.w_up), p(BF, self.w_sd), p(BF, s["yn"]), p(BF, s["acts"]), p(BF, o),
                  p(BF, s["ro"]), p(BF, s["so"]), T, st)
        return s

    def debug_outputs(self, s, T):
        """The intermediates k3diff compares, as views of the kernels' own buffers."""
        dm = self.dm
        return {"router_logits": s["s1"][:, :dm.E], "topk_ids": s["ids"][:T * dm.k].view(T, dm.k),
                "topk_weights": s["wts"], "latent": s["hl"], "combined": s["yc"],
                "latent_normed": s["yn"], "routed_out": s["ro"], "shared_out": s["so"]}
