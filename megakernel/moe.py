"""The LatentMoE decode step on the GPU: weight packing (once), scratch, and a dispatcher to the
launchers: launch_streams.py (11 launches, a fork-join over two streams or all on one stream:
"fork" / "serial") and, off by default, experimental/launch_persistent.py (the same 11 stages in
ONE launch: "persistent"; measured slower than the fork-join at every batch, docs/megakernel.md).
Every mode gives the same bits (same stage bodies; tested on the GPU).

The kernels take their arguments by name (kernel_args.py): `buffers` names every tensor of the
step (the packed weights, the scratch, x, out) and the run-time ints, and each launcher passes a
kernel the ones its class declares.
"""
import torch

from megakernel import config, launch_streams, plan
from megakernel.dims import MAX_T
from megakernel.k_expert_mma import fits
from megakernel.launch_plan import TwoStreams
from megakernel.launch_streams import FORKS, GATES, STAGES  # noqa: F401 (re-exported)

MODES = config.MOE_MODES


class LatentMoE:
    def __init__(self, dims, weights: dict, device, streams: str | None = None, fork: str = "start",
                 gate: str = "none", side_ctas_per_sm: int = 0, order: plan.Order = plan.Order(),
                 ctas_per_sm: int = 0, settings: config.Settings | None = None):
        """Pack the weights once (never modifies `weights`): the routed x-side rows are
        concatenated so gemv_x reads x once; expert tensors are made contiguous. streams: None =
        settings.moe.streams; settings: a config.Settings (None: config.current()); a tuner may
        replace `self.settings` between launches."""
        self.settings = settings or config.current()
        streams = streams or self.settings.moe.streams
        for name, v, ok in (("streams", streams, MODES), ("fork", fork, tuple(FORKS)),
                            ("gate", gate, GATES)):
            if v not in ok:
                raise ValueError(f"{name} must be one of {ok}, got {v!r}")
        self.dm = dims
        self.streams, self.fork, self.gate = streams, fork, gate
        self.side_ctas_per_sm = side_ctas_per_sm
        # 0: as many as the persistent kernel is built to fit (Settings.moe.persist.ctas)
        self.order, self.ctas_per_sm = order, ctas_per_sm or self.settings.moe.persist.ctas
        self.trace = None        # int64 [tickets, 4]: the persistent launch traces into it
        props = torch.cuda.get_device_properties(device)
        self._nsm = props.multi_processor_count
        self.card = props.name           # the expert launches' variants differ by card (k_expert_mma)
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
        self._weights = dict(w1=self.w1, w_gu=self.w_gu, bias=self.bias, norm_w=self.norm_w,
                             w_up=self.w_up, w_sd=self.w_sd, w13=self.w13, w13s=self.w13s,
                             w2=self.w2, w2s=self.w2s)
        self.device = device
        self._scratch = {}
        self._plans = {}         # (T, order) -> the persistent launch's task table
        # the persistent launch's counters: zero before its first launch, reset by its last CTA
        self._sync = torch.zeros(plan.SYNC_WORDS, dtype=torch.int32, device=device)
        # made now, before any graph capture (launch_plan.py)
        self._streams = TwoStreams(device, now=True)
        self._plans_fj = {}      # (fork, gate) -> the fork-join plan (launch_streams.plan)

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

    def plan(self):
        """The fork-join plan of the current knobs (kept: the host's hot path asks every step,
        and a tuner may change fork and gate between steps)."""
        key = (self.fork, self.gate)
        if key not in self._plans_fj:
            self._plans_fj[key] = launch_streams.plan(*key)
        return self._plans_fj[key]

    def compile_all(self, T, forced=False):
        """Compile (once) the 11 launches of the stream modes for batch T."""
        return launch_streams.launches(self, T, forced)

    def uses_mma(self):
        """MXFP4 experts on the tensor cores (k_expert_mma.py; ACT then holds each 8-chunk in the
        pair order [0 4 1 5 2 6 3 7], written by its up and read by its down kernel)."""
        return self.fmt == "mxfp4" and self.settings.moe.mx_mma and fits(self.dm)

    def buffers(self, x, s, out=None):
        """Every buffer of the step by the name the kernels declare (kernel_args.py): the packed
        weights, the scratch `s`, x, out (s["out"] unless given), and the run-time ints T and maxU (the expert grid's active-slot bound)."""
        T = x.shape[0]
        return dict(s, **self._weights, x=x, out=out if out is not None else s["out"],
                    T=T, maxU=min(self.dm.E, T * self.dm.k))

    def launch(self, x, forced_ids=None, out=None, stages=None):
        """Enqueue the step (module docstring); returns the scratch dict, whose buffers hold every
        intermediate (debug_outputs) and s['out'] unless `out` is given. All work is joined back
        into the caller's stream before this returns. `stages` (a set of indices into STAGES)
        enqueues only those launches: the bench times each one alone over the scratch a full
        call left behind."""
        T = x.shape[0]
        if not 1 <= T <= MAX_T:
            raise ValueError(f"megakernel supports 1 <= T <= {MAX_T} tokens, got {T}")
        assert x.dtype == torch.bfloat16 and x.is_contiguous()
        s = self.scratch(T)
        forced = forced_ids is not None
        if forced:
            s["fids"].copy_(forced_ids)
        named = self.buffers(x, s, out)
        if self.streams == "persistent":
            if stages is not None:
                raise ValueError("the persistent launch runs every stage; `stages` needs "
                                 "streams='fork' or 'serial'")
            from megakernel.experimental import launch_persistent    # only when chosen
            launch_persistent.launch(self, named, T, forced)
        else:
            launch_streams.launch(self, named, T, forced, stages)
        return s

    def check_persistent(self):
        """One-line error if a persistent launch so far gave up waiting on a dependency (its
        results are then wrong), naming the task and the counter (plan.describe); reads the sync
        words back from the GPU, so call it outside timed loops."""
        words = self._sync.tolist()
        if words[plan.ERROR] != 0:
            raise RuntimeError(plan.describe(words))

    def debug_outputs(self, s, T):
        """The intermediates k3diff compares, as views of the kernels' own buffers."""
        dm = self.dm
        return {"router_logits": s["s1"][:, :dm.E], "topk_ids": s["ids"][:T * dm.k].view(T, dm.k),
                "topk_weights": s["wts"], "latent": s["hl"], "combined": s["yc"],
                "latent_normed": s["yn"], "routed_out": s["ro"], "shared_out": s["so"]}
