"""Launches 0-2 in one, for batch 1: gemv_x, then route and schedule in its last CTA.

State: measured slower (below) and off; its switch (LatentMoE(fuse_route=)) left the shipped
path, last shipped at main fd6de34. Next: none planned (`compile --experimental` keeps it
building).

At batch 1 the route and schedule launches are latency-bound (one top-k CTA, one schedule CTA),
and as separate launches they wait for SM slots held by the side stream's GEMV: traced at MXFP4
batch 1, route started 11 us after gemv_x ended and ran 16.9 us instead of 7.5 alone
(lab/persistent/). Here every CTA of gemv_x signals when its rows are written (barrier, release fence,
atomic count); the CTA that counts last already holds an SM, so it runs the route body for each
token and then the schedule body at once. The bodies are k_route.Route's and
k_schedule.Schedule's, so the bits are those of the three launches (tested on the GPU).
The last CTA also resets the counter for the next launch.

Measured (H200, full dims, batch 1, `python -m megakernel.tools.tune_streams`): slower, so it is
off (moe.LatentMoE fuse_route=False, at fd6de34): MXFP4 209.3 vs 199.7 us per step, bf16 356.4
vs 341.4.
Traced, the fused launch ran 63.8 us beside the side stream's GEMV (gemv_x alone: 21 us): its
CTAs (route and schedule shared memory, 24 KB each) no longer get ahead of the side's, so the
last one comes late.
"""
from megakernel.device import THREADS, cute, cutlass, BFloat16, Float32, Int32
from megakernel.kernel_args import INT, Args, declare
from megakernel.k_route import Route, NPW
from megakernel.k_schedule import Schedule


@declare
class GemvRoute:
    ARGS = (("w1", BFloat16), ("x", BFloat16), ("s1", Float32), ("bias", Float32), ("fids", Int32),
            ("ids", Int32), ("wts", Float32), ("hl", BFloat16), ("nact", Int32), ("act_e", Int32),
            ("act_off", Int32), ("act_cnt", Int32), ("pairs", Int32), ("route_ctr", Int32),
            ("T", INT))

    def __init__(self, dims, forced: bool, gemv):
        """gemv: gemv_x's object at batch 1 (gemv.obj), a CTA of 8 warps."""
        dm = self.dm = dims
        assert getattr(gemv, "WPC", 8) * 32 == THREADS
        self.gx = gemv
        self.route = Route(dm, forced)
        self.sched = Schedule(dm)

    @cute.jit
    def __call__(self, *a):           # ARGS, stream (signatures: kernel_args.declare)
        A = Args(self, a, host=True)
        self.kernel(*A.kernel()).launch(grid=(self.gx.tiles, 1, 1), block=(THREADS, 1, 1),
                                        stream=A.stream)

    @cute.kernel
    def kernel(self, *a):             # ARGS
        A = Args(self, a, host=False)
        tid, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        grid = self.gx.tiles
        C = cute.make_tensor(A.route_ctr, cute.make_layout((1,), stride=(1,)))
        smem = cutlass.memory.SmemAllocator()
        last = smem.allocate_tensor(Int32, cute.make_layout((1,), stride=(1,)), 16)
        self.gx.body(A.w1, A.x, A.s1, A.T, bid, grid, grid)
        cute.arch.sync_threads()
        if tid == 0:
            cute.arch.fence_acq_rel_gpu()
            last[0] = cute.arch.atomic_add(C.iterator, Int32(1), scope="gpu")
        cute.arch.sync_threads()
        if last[0] == grid - 1:
            if tid == 0:
                cute.arch.fence_acq_rel_gpu()
            cute.arch.sync_threads()
            for t in cutlass.range(A.T):
                for by in cutlass.range(1 + NPW):
                    self.route.body(A.s1, A.bias, A.fids, A.ids, A.wts, A.hl, A.T, t, by)
                    cute.arch.sync_threads()
            if tid == 0:
                cute.arch.fence_acq_rel_gpu()
            cute.arch.sync_threads()
            self.sched.body(A.ids, A.nact, A.act_e, A.act_off, A.act_cnt, A.pairs, A.T)
            if tid == 0:
                C[0] = Int32(0)
