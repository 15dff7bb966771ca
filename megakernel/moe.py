"""The LatentMoE decode step on the GPU: weight packing (once) and a fork-join of 11 launches.

  main stream (high priority)                        side stream (shared experts)
                               -- fork (start) -->   7 gemv_shared S2 = x W_shared_gate_up^T (f32)
  0 gemv_x      S1 = x [W_router | W_down]^T (f32)   8 shared_act  act_s = bf16(SiTU(bf16 S2))
  1 route       top-k ids/weights (or forced),
                hl = bf16(latent)
  2 schedule    active experts + their pairs
  3 expert_up   ACT[p] = bf16(SiTU(hl_t W13_e^T)), each active expert's rows streamed once
  4 expert_down Y[p]   = bf16(ACT[p] W2_e^T)
                               -- gate (down) -->    9 out_shared  so = bf16(act_s W_sd^T)
  5 combine     yc = bf16(sum_j w_j y_j) (slot order), yn = RMSNorm(yc)
  6 out_routed  ro = bf16(yn W_up^T)
                               <-- join --
 10 final_sum   out = bf16(f32(ro) + f32(so))

Why two streams: the routed chain has latency-bound launches (route, schedule, combine) and
launch gaps, while the shared experts' bf16 weights (264 MB at full dims) do not depend on the
routing: streamed beside the chain they fill some of its bubbles (MXFP4, batch 1: 252 -> 205 us,
NOTES.md). The main stream has the higher priority, a hint to the CTA scheduler that graph
capture copies into the kernel nodes. Knobs, all measured by `python -m megakernel.tools.tune_streams`
(none beat the defaults by more than noise at batch 1): `fork`, where the side starts ("start":
beside gemv_x, or after gemv_x / route / schedule); `gate`, out_shared held back until the main
stream has finished expert_up ("up") or expert_down ("down"), or not ("none");
`side_ctas_per_sm`, a cap on the side GEMVs' grids (0 = none; their CTAs then loop over row
tiles). `streams="serial"` puts all 11 launches on the caller's stream. Every mode gives the
same bits (same kernels; tested).

`fuse_route=True` (batch 1 only): gemv_x runs route and schedule in its last CTA
(k_gemv_route.py; the same bits; measured slower, so off). `streams="persistent"`: the same 11
stages in ONE launch (k_persistent.py), a persistent grid of `ctas_per_sm` CTAs per SM drawing
tasks from the queues of plan.py (`order`); the same bits again.
"""
import torch

from megakernel import cache, plan
from megakernel.cache import BF, F32, I32, Int64, U8, ptr
from megakernel.dims import MAX_T

STAGES = ("gemv_x", "route", "schedule", "expert_up", "expert_down", "combine", "out_routed",
          "gemv_shared", "shared_act", "out_shared", "final_sum")
# fork point -> the main-stream launch after which the side starts (None: beside gemv_x)
FORKS = {"start": None, "after_x": 0, "after_route": 1, "after_schedule": 2}
GATES = ("none", "up", "down")
MODES = ("fork", "serial", "persistent")


def _stream():
    from cuda.bindings import driver
    return driver.CUstream(torch.cuda.current_stream().cuda_stream)


class LatentMoE:
    def __init__(self, dims, weights: dict, device, streams: str = "fork", fork: str = "start",
                 gate: str = "none", side_ctas_per_sm: int = 0, order: plan.Order = plan.Order(),
                 ctas_per_sm: int = 0, fuse_route: bool = False):
        """Pack the weights once (never modifies `weights`): the routed x-side rows are
        concatenated so gemv_x reads x once; expert tensors are made contiguous."""
        for name, v, ok in (("streams", streams, MODES), ("fork", fork, tuple(FORKS)),
                            ("gate", gate, GATES)):
            if v not in ok:
                raise ValueError(f"{name} must be one of {ok}, got {v!r}")
        self.dm = dims
        self.streams, self.fork, self.gate = streams, fork, gate
        self.side_ctas_per_sm = side_ctas_per_sm
        # batch 1: launches 0-2 as one (k_gemv_route.py); measured slower, so off by default
        self.fuse_route = fuse_route
        # 0: as many as the persistent kernel is built to fit (cache.PERSIST_CTAS)
        self.order, self.ctas_per_sm = order, ctas_per_sm or cache.PERSIST_CTAS
        self.trace = None        # int64 [tickets, 4]: the persistent launch traces into it
        self._nsm = torch.cuda.get_device_properties(device).multi_processor_count
        g = lambda n: weights[n].to(device)  # noqa: E731
        self.w1 = torch.cat([g("router.weight"), g("down.weight")], 0)
        self.w1 = self.w1.to(torch.bfloat16).contiguous()
        self.w_gu = g("shared.gate_up").to(torch.bfloat16).contiguous()
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
        self._plans = {}
        # the persistent launch's counters: zero before its first launch, reset by its last CTA
        self._sync = torch.zeros(plan.SYNC_WORDS, dtype=torch.int32, device=device)
        self._route_ctr = torch.zeros(4, dtype=torch.int32, device=device)   # k_gemv_route
        # lower number = higher priority (module docstring)
        self._main = torch.cuda.Stream(device, priority=-1)
        self._side = torch.cuda.Stream(device, priority=0)

    def scratch(self, T):
        s = self._scratch.get(T)
        if s is None:
            dm, dev = self.dm, self.device
            e = lambda *sh, dt=torch.bfloat16: torch.empty(*sh, dtype=dt, device=dev)  # noqa: E731
            P = T * dm.k
            s = dict(s1=e(T, dm.E + dm.r, dt=torch.float32), s2=e(T, 2 * dm.Is, dt=torch.float32),
                     ids=e(MAX_T * dm.k, dt=torch.int32), wts=e(T, dm.k, dt=torch.float32),
                     hl=e(T, dm.r), acts=e(T, dm.Is), nact=e(4, dt=torch.int32),
                     act_e=e(dm.E, dt=torch.int32), act_off=e(dm.E, dt=torch.int32),
                     act_cnt=e(dm.E, dt=torch.int32), pairs=e(P, dt=torch.int32),
                     act=e(P, dm.I), y=e(P, dm.r), yc=e(T, dm.r), yn=e(T, dm.r),
                     out=e(T, dm.d), ro=e(T, dm.d), so=e(T, dm.d),
                     fids=torch.full((T, dm.k), -1, dtype=torch.int32, device=dev))
            self._scratch[T] = s
        return s

    def compile_all(self, T, forced=False):
        return self._fns(T, forced)

    def _fns(self, T, forced):
        """The 11 compiled launches, in STAGES order."""
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
        gv = lambda n: c(n, dm, TT=tg, U=cache.GEMV_UNROLL[n])  # noqa: E731
        return (gv("gemv_x"), c("route", dm, forced=forced), c("schedule", dm),
                f_up, f_down, c("combine", dm), gv("out_routed"),
                gv("gemv_shared"), c("shared_act", dm), gv("out_shared"), c("final_sum", dm))

    def uses_mma(self):
        """MXFP4 experts on the tensor cores (k_expert_mma.py; ACT then holds each 8-chunk in the
        pair order [0 4 1 5 2 6 3 7], written by its up and read by its down kernel)."""
        return self.fmt == "mxfp4" and cache.MX_MMA and cache.mma_ok(self.dm)

    def launch(self, x, forced_ids=None, out=None, stages=None):
        """Enqueue the step (module docstring); returns the scratch dict, whose buffers hold every
        intermediate (debug_outputs) and s['out'] unless `out` is given. All work is joined back
        into the caller's stream before this returns. `stages` (a set of indices into STAGES)
        enqueues only those launches: the bench times each one alone over the scratch a full
        call left behind."""
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
        p = lambda dt, t: ptr(dt, t.data_ptr())  # noqa: E731
        wdt = BF if self.fmt == "bf16" else U8
        maxU = min(dm.E, T * dm.k)
        o = out if out is not None else s["out"]
        if self.streams == "persistent":
            if stages is not None:
                raise ValueError("the persistent launch runs every stage; `stages` needs "
                                 "streams='fork' or 'serial'")
            tr = self.trace is not None
            fn = cache.compile_kernel("persistent", dm, fmt=self.fmt, forced=forced, T1=T == 1,
                                      **({"trace": True} if tr else {}))
            pl = self._plan(T, maxU)
            fn(p(BF, self.w1), p(BF, x), p(F32, s["s1"]), p(F32, self.bias), p(I32, s["fids"]),
               p(I32, s["ids"]), p(F32, s["wts"]), p(BF, s["hl"]),
               *[p(I32, s[n]) for n in ("nact", "act_e", "act_off", "act_cnt", "pairs")],
               p(wdt, self.w13), p(U8, self.w13s), p(BF, s["act"]), p(wdt, self.w2),
               p(U8, self.w2s), p(BF, s["y"]), p(BF, self.norm_w), p(BF, s["yc"]),
               p(BF, s["yn"]), p(BF, self.w_up), p(BF, s["ro"]), p(BF, self.w_gu),
               p(F32, s["s2"]), p(BF, s["acts"]), p(BF, self.w_sd), p(BF, s["so"]), p(BF, o),
               p(I32, pl), p(I32, self._sync), ptr(Int64, (self.trace if tr else pl).data_ptr()),
               T, self._nsm * self.ctas_per_sm, _stream())
            return s
        fns = self._fns(T, forced)
        sched = [p(I32, s[n]) for n in ("nact", "act_e", "act_off", "act_cnt", "pairs")]
        fused = self.fuse_route and T == 1
        if fused:                               # gemv_x + route + schedule in one launch
            fns = (cache.compile_kernel("gemv_route", dm, forced=forced,
                                        U=cache.GEMV_UNROLL["gemv_x"]),) + fns[1:]
        full = 1 << 30                          # a grid cap no GEMV reaches
        side_cap = self._nsm * self.side_ctas_per_sm if self.side_ctas_per_sm else full
        args = (                                # every launch's arguments, in STAGES order
            (p(BF, self.w1), p(BF, x), p(F32, s["s1"]), T, full),
            (p(F32, s["s1"]), p(F32, self.bias), p(I32, s["fids"]), p(I32, s["ids"]),
             p(F32, s["wts"]), p(BF, s["hl"]), T),
            (p(I32, s["ids"]), *sched, T),
            (p(wdt, self.w13), p(U8, self.w13s), p(BF, s["hl"]), *sched, p(BF, s["act"]), T, maxU),
            (p(wdt, self.w2), p(U8, self.w2s), p(BF, s["act"]), *sched, p(BF, s["y"]), T, maxU),
            (p(I32, s["ids"]), p(F32, s["wts"]), p(BF, s["y"]), p(BF, self.norm_w),
             p(BF, s["yc"]), p(BF, s["yn"]), T),
            (p(BF, self.w_up), p(BF, s["yn"]), p(BF, s["ro"]), T, full),
            (p(BF, self.w_gu), p(BF, x), p(F32, s["s2"]), T, side_cap),
            (p(F32, s["s2"]), p(BF, s["acts"]), T),
            (p(BF, self.w_sd), p(BF, s["acts"]), p(BF, s["so"]), T, side_cap),
            (p(BF, s["ro"]), p(BF, s["so"]), p(BF, o), T))

        if fused:
            args = ((p(BF, self.w1), p(BF, x), p(F32, s["s1"]), p(F32, self.bias),
                     p(I32, s["fids"]), p(I32, s["ids"]), p(F32, s["wts"]), p(BF, s["hl"]),
                     *sched, p(I32, self._route_ctr), T),) + args[1:]

        def go(*idx):
            for i in idx:
                if on(i) and not (fused and i in (1, 2)):   # fused: part of launch 0
                    fns[i](*args[i], _stream())

        if self.streams == "serial":
            go(0, 7, 8, 1, 2, 3, 4, 9, 5, 6, 10)
            return s
        cur = torch.cuda.current_stream()
        main, side = self._main, self._side
        main.wait_stream(cur)
        after = FORKS[self.fork]
        if after is None:
            side.wait_stream(cur)
        with torch.cuda.stream(main):
            for i in (0, 1, 2):
                go(i)
                if i == after:
                    side.wait_stream(main)
        with torch.cuda.stream(side):
            go(7, 8)
        with torch.cuda.stream(main):
            go(3)
            if self.gate == "up":
                side.wait_stream(main)
            go(4)
            if self.gate == "down":
                side.wait_stream(main)
        with torch.cuda.stream(side):
            go(9)
        with torch.cuda.stream(main):
            go(5, 6)
            main.wait_stream(side)            # join: the final sum needs both halves
            go(10)
        cur.wait_stream(main)
        return s

    def _plan(self, T, maxU):
        """The persistent launch's task table for this batch and order (plan.py), on the GPU."""
        key = (T, self.order)
        t = self._plans.get(key)
        if t is None:
            shape = cache.persistent_step(self.dm, self.fmt, False, T == 1).shape()
            words, _, _ = plan.build(shape, T, maxU, self.order, self._nsm)
            t = self._plans[key] = torch.tensor(words, dtype=torch.int32, device=self.device)
        return t

    def check_persistent(self):
        """One-line error if a persistent launch so far gave up waiting on a dependency (its
        results are then wrong); reads one word from the GPU, so call it outside timed loops."""
        if int(self._sync[plan.ERROR]) != 0:
            raise RuntimeError("megakernel persistent launch: a task waited past its spin limit "
                               "(a dependency never signalled); that launch's results are wrong")

    def debug_outputs(self, s, T):
        """The intermediates k3diff compares, as views of the kernels' own buffers."""
        dm = self.dm
        return {"router_logits": s["s1"][:, :dm.E], "topk_ids": s["ids"][:T * dm.k].view(T, dm.k),
                "topk_weights": s["wts"], "latent": s["hl"], "combined": s["yc"],
                "latent_normed": s["yn"], "routed_out": s["ro"], "shared_out": s["so"]}
