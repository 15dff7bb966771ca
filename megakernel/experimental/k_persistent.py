"""The whole LatentMoE step in ONE launch: a persistent grid running the 11 stages as tasks.

Each CTA (256 threads) loops: thread 0 picks the next task from two ticket queues (plan.py: the
routed chain, and the shared experts that fill its gaps), waits until the tasks it needs have
signalled (acquire loads of their counters), a barrier, then the CTA runs the stage's body and
signals (barrier, release fence, atomic add on the stage's counter). The bodies are the very
functions the 11-launch path launches (the GEMVs' body, k_route.Route.body, ...), given the
task's indices in place of the block index, so both paths compute the same bits (tested on the
GPU, every intermediate, natural and forced routing, graph replay, several plans).

Why: no launch gaps, and the kernel itself (not the hardware CTA scheduler) decides what streams
while the routed chain sits in its latency-bound stages. Deadlock-free whatever the grid size
(plan.py; checked on the CPU by tests/megakernel/test_mk_plan.py). Measured on the H200 it is
still slower than the 11 launches (lab/persistent/, v5: 3 CTAs of 8 warps per SM stream less than the
standalone GEMVs' up to 8 CTAs, and the MXFP4 expert tasks hold CTAs the bf16 rows could use).

Details that matter:
- a routed CTA draws its next routed ticket as soon as it takes one (the atomic's latency hides
  under the body);
- activations written in this launch are read with plain loads, never the read-only .nc path
  (ExpertMMA coherent=True); the weights keep .nc;
- a wait that exceeds SPIN_LIMIT polls gives up (the watchdog, `_give_up`): each stage's first
  writes which task waited on which counter, at what count of what target, into its ERR slot,
  and moe.LatentMoE.check_persistent raises plan.describe's one line naming the root (results
  are then wrong): a broken plan costs a one-line error that says where it is, not a hung GPU;
- the last CTA to leave resets the counters, so the next launch (or graph replay) starts clean;
- the stages' shared memory is unioned (smem_merge_branch_allocs): the largest, the expert_up
  cp.async ring, sets the CTA's footprint; registers are capped for `ctas_per_sm` CTAs per SM.

`trace=True` compiles a variant that also writes, per task, (CTA << 16 | SM << 8 | queue << 5 |
stage, picking started, started, finished) in global-timer ns to the `trace` buffer (routed
tickets first, then shared): `python -m megakernel.tools.tune_persistent --trace` reads it.
"""
from megakernel import plan as P
from megakernel.device import (THREADS, cute, cutlass, BFloat16 as BF, Float32 as F32, Int32,
                               Int32 as I32, Int64, Uint8 as U8)
from megakernel.kernel_args import INT, Args, declare
from megakernel.ptx import globaltimer, smid
from megakernel.k_combine import Combine
from megakernel.k_expert import ExpertUp, ExpertDown
from megakernel.k_expert_mma import ExpertMMA
from megakernel.k_route import Route, NPW as ROUTE_NPW
from megakernel.k_schedule import Schedule
from megakernel.k_shared_act import SharedAct, NPW as ACT_NPW
from megakernel.k_final_sum import FinalSum, NPT as SUM_NPT

SPIN_LIMIT = 1 << 22      # polls (~1 us each) before a wait is declared broken


@declare
class PersistentStep:
    # every buffer of the step (moe.LatentMoE names them alike), then the plan (plan.py), the
    # counters, the trace buffer (the plan again when not tracing), T and the grid size
    ARGS = (("w1", BF), ("x", BF), ("s1", F32), ("bias", F32), ("fids", I32), ("ids", I32),
            ("wts", F32), ("hl", BF), ("nact", I32), ("act_e", I32), ("act_off", I32),
            ("act_cnt", I32), ("pairs", I32), ("w13", "wdt"), ("w13s", U8), ("act", BF),
            ("w2", "wdt"), ("w2s", U8), ("y", BF), ("norm_w", BF), ("yc", BF), ("yn", BF),
            ("w_up", BF), ("ro", BF), ("w_gu", BF), ("s2", F32), ("acts", BF), ("w_sd", BF),
            ("so", BF), ("out", BF), ("plan", I32), ("sync", I32), ("trace", Int64), ("T", INT),
            ("ctas", INT))

    def __init__(self, dims, fmt: str, forced: bool, gemvs: dict, TTe: int,
                 mma_up=None, mma_down=None, trace: bool = False, ctas_per_sm: int = 3,
                 only: tuple = ()):
        """`gemvs`: the four GEMV objects by stage name (registry.persistent_step: k_gemv.Gemv or
        k_gemv_mma.GemvMMA of 8 warps, the out_* ones reading coherently); `mma_up` /
        `mma_down`: ExpertMMA variants (WPC must be 8: one task = one CTA), or None for the
        CUDA-core expert kernels."""
        dm = self.dm = dims
        self.fmt, self.trace, self.ctas_per_sm = fmt, trace, ctas_per_sm
        # only these stages' bodies compiled in (plan stage indices; () = all): for
        # tools/persistent_regs.py, which finds the bodies that spill at the grid's register cap
        self.only = tuple(only)
        self.wdt = BF if fmt == "bf16" else U8
        for g in gemvs.values():
            assert getattr(g, "WPC", 8) * 32 == THREADS, "a GEMV task is one CTA of 8 warps"
        self.gx = gemvs["gemv_x"]
        self.route = Route(dm, forced)
        self.sched = Schedule(dm)
        if mma_up is not None:
            assert mma_up["WPC"] * 32 == THREADS and mma_down["WPC"] * 32 == THREADS
            self.up = ExpertMMA(dm, True, coherent=True, smem_cap=100 * 1024, **mma_up)
            self.down = ExpertMMA(dm, False, coherent=True, smem_cap=100 * 1024, **mma_down)
        else:
            self.up, self.down = ExpertUp(dm, fmt, TTe), ExpertDown(dm, fmt, TTe)
        self.comb = Combine(dm, threads=THREADS)
        self.gor = gemvs["out_routed"]
        self.gsh = gemvs["gemv_shared"]
        self.sact = SharedAct(dm)
        self.gos = gemvs["out_shared"]
        self.fsum = FinalSum(dm)

    def shape(self):
        return P.Shape(tiles_x=self.gx.tiles, tiles_routed=self.gor.tiles,
                       tiles_shared=self.gsh.tiles, tiles_sdown=self.gos.tiles,
                       up_tiles=self.up.tiles, down_tiles=self.down.tiles,
                       route_per_token=1 + ROUTE_NPW, act_per_token=ACT_NPW,
                       sum_per_token=SUM_NPT)

    @cute.jit
    def __call__(self, *a):           # ARGS, stream (signatures: kernel_args.declare)
        A = Args(self, a, host=True)
        self.kernel(*A.kernel()).launch(
            grid=(A.ctas, 1, 1), block=(THREADS, 1, 1), stream=A.stream,
            smem_merge_branch_allocs=True, min_blocks_per_mp=self.ctas_per_sm,
            # given explicitly: otherwise min_blocks_per_mp > 1 makes the DSL query the driver
            # while tracing (and a CPU-only compile fail); the largest carveout (percent)
            preferred_smem_carveout=100)

    @cute.kernel
    def kernel(self, *a):             # ARGS
        A = Args(self, a, host=False)
        tid, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        PL = cute.make_tensor(A.plan, cute.make_layout((P.PLAN_WORDS,), stride=(1,)))
        SY = cute.make_tensor(A.sync, cute.make_layout((P.SYNC_WORDS,), stride=(1,)))
        NA = cute.make_tensor(A.nact, cute.make_layout((1,), stride=(1,)))
        TR = cute.make_tensor(A.trace, cute.make_layout((1 << 20, 4), stride=(4, 1)))
        smem = cutlass.memory.SmemAllocator()
        pl = smem.allocate_tensor(Int32, cute.make_layout((P.PLAN_WORDS,), stride=(1,)), 16)
        tk = smem.allocate_tensor(Int32, cute.make_layout((8,), stride=(1,)), 16)
        for i in cutlass.range(tid, P.PLAN_WORDS, THREADS):
            pl[i] = PL[i]
        cute.arch.sync_threads()
        gt = pl[P.HDR_GT]
        ub = pl[P.HDR_UB]
        # the scheduler state lives in thread 0's registers
        pend = Int32(-1)           # the routed ticket this CTA holds (-1: none)
        sir = Int32(0)             # segment cursors (tickets only grow per CTA)
        sis = Int32(0)
        s_open = Int32(1)          # shared queue not yet seen empty
        s_first = Int32(0)         # this CTA takes shared tasks first
        if bid < pl[P.HDR_SHARED_FIRST]:
            s_first = Int32(1)
        if tid == 0:
            if s_first == 0:
                pend = cute.arch.atomic_add(SY.iterator + P.ROUTED_TICKET, Int32(1),
                                            scope="gpu")
        go = Int32(1)
        while go == 1:
            if tid == 0:
                t_draw = Int64(0)
                if cutlass.const_expr(self.trace):
                    t_draw = globaltimer()
                q, st, loc, grp, tick, pend, sir, sis, s_open = self.next_task(
                    pl, SY, pend, sir, sis, s_open, s_first)
                if q == 1:                          # a shared task: wait for its inputs
                    _wait_deps(pl, SY, st, loc, grp, tick)
                if q < 2:
                    if pl[P.DEPS + 8 * st] != -1:
                        cute.arch.fence_acq_rel_gpu()
                    if cutlass.const_expr(self.trace):
                        row = tick + q * pl[P.HDR_TOTAL_R]
                        TR[row, 0] = Int64(bid * 65536 + smid() * 256 + q * 32 + st)
                        TR[row, 1] = t_draw
                        TR[row, 2] = globaltimer()
                tk[0], tk[1], tk[2], tk[3], tk[4] = q, st, loc, grp, tick
            cute.arch.sync_threads()
            q = tk[0]
            st = tk[1]
            loc = tk[2]
            grp = tk[3]
            if q == 2:
                go = Int32(0)
            else:
                self.run(st, loc, grp, gt, ub, NA, A)
                cute.arch.sync_threads()
                if tid == 0:
                    if cutlass.const_expr(self.trace):
                        TR[tk[4] + q * pl[P.HDR_TOTAL_R], 3] = globaltimer()
                    cute.arch.fence_acq_rel_gpu()
                    cute.arch.atomic_add(SY.iterator + (P.DONE + st), Int32(1), scope="gpu")
                    if st == P.UP:
                        cute.arch.atomic_add(SY.iterator + (P.GROUP + grp), Int32(1),
                                             scope="gpu")
        # the last CTA out resets the counters for the next launch (all others are done
        # with them: leaving is each CTA's last use)
        if tid == 0:
            tk[5] = cute.arch.atomic_add(SY.iterator + P.EXITED, Int32(1), scope="gpu")
        cute.arch.sync_threads()
        if tk[5] == A.ctas - 1:
            cute.arch.fence_acq_rel_gpu()
            for i in cutlass.range(tid, P.SYNC_WORDS, THREADS):
                if (i != P.ERROR) & (i < P.ERR):
                    SY[i] = Int32(0)

    @cute.jit
    def next_task(self, pl, SY, pend, sir, sis, s_open, s_first):
        """Thread 0: the next task -> (queue 0 routed / 1 shared / 2 none left, stage, local
        index, expert group, ticket, and the updated scheduler state). A routed task is taken
        once its inputs are complete; while many are missing, shared tasks are taken instead
        (plan.py); near the end of the wait, and when the shared queue is empty, it spins.
        Shared-first CTAs draw no routed ticket until the shared queue is empty."""
        tot_r = pl[P.HDR_TOTAL_R]
        tot_s = pl[P.HDR_TOTAL_S]
        q = Int32(-1)
        st = Int32(0)
        loc = Int32(0)
        grp = Int32(0)
        tick = Int32(0)
        spins = Int32(0)
        while q < 0:
            take_shared = Int32(0)
            if (pend < 0) & ((s_first == 0) | (s_open == 0)):
                pend = cute.arch.atomic_add(SY.iterator + P.ROUTED_TICKET, Int32(1), scope="gpu")
            if pend < 0:
                take_shared = Int32(1)              # a shared-first CTA, shared queue open
            elif pend < tot_r:
                sir, rst, rloc = _seek(pl, P.SEGS_R, sir, pend)
                rgrp = self.group(rst, rloc)
                miss = _missing(pl, SY, rst, rgrp)
                if miss <= 0:
                    q, st, loc, grp, tick = Int32(0), rst, rloc, rgrp, pend
                    pend = cute.arch.atomic_add(SY.iterator + P.ROUTED_TICKET, Int32(1),
                                                scope="gpu")
                else:
                    if (s_open == 1) & (miss > pl[P.DEPS + 8 * rst + 4]):
                        take_shared = Int32(1)
                    else:
                        spins = spins + 1
                        if spins > SPIN_LIMIT:      # give up: name it and run (wrong results)
                            _give_up(pl, SY, Int32(0), rst, rloc, pend, rgrp)
                            q, st, loc, grp, tick = Int32(0), rst, rloc, rgrp, pend
                            pend = cute.arch.atomic_add(SY.iterator + P.ROUTED_TICKET,
                                                        Int32(1), scope="gpu")
            else:
                take_shared = s_open
                if s_open == 0:
                    q = Int32(2)
            if take_shared == 1:
                s = cute.arch.atomic_add(SY.iterator + P.SHARED_TICKET, Int32(1), scope="gpu")
                if s < tot_s:
                    sis, sst, sloc = _seek(pl, P.SEGS_S, sis, s)
                    q, st, loc, grp, tick = Int32(1), sst, sloc, Int32(0), s
                else:
                    s_open = Int32(0)
        return q, st, loc, grp, tick, pend, sir, sis, s_open

    @cute.jit
    def group(self, st, loc):
        """The expert group of an expert_up / expert_down task (0 for the others)."""
        g = Int32(0)
        if st == P.UP:
            g = loc // self.up.tiles
        if st == P.DOWN:
            g = loc // self.down.tiles
        return g

    def has(self, st):
        """Whether stage st's body is compiled in (all, unless `only` names some)."""
        return not self.only or st in self.only

    @cute.jit
    def run(self, st, loc, grp, gt, ub, NA, A):
        """One task of stage `st` (a CTA-uniform branch, so the bodies' barriers are safe); A:
        the kernel's arguments by name. Only the stages `has` names are compiled in."""
        if cutlass.const_expr(self.has(P.GEMV_X)):
            if st == P.GEMV_X:
                self.gx.body(A.w1, A.x, A.s1, A.T, loc * gt, loc * gt + gt, 1)
        if cutlass.const_expr(self.has(P.ROUTE)):
            if st == P.ROUTE:
                self.route.body(A.s1, A.bias, A.fids, A.ids, A.wts, A.hl, A.T,
                                loc // (1 + ROUTE_NPW), loc % (1 + ROUTE_NPW))
        if cutlass.const_expr(self.has(P.SCHEDULE)):
            if st == P.SCHEDULE:
                self.sched.body(A.ids, A.nact, A.act_e, A.act_off, A.act_cnt, A.pairs, A.T)
        if cutlass.const_expr(self.has(P.UP)):
            if st == P.UP:
                hi = cutlass.min(grp * ub + ub, NA[0])
                for u in cutlass.range(grp * ub, hi):
                    self.up.body(A.w13, A.w13s, A.hl, A.nact, A.act_e, A.act_off, A.act_cnt,
                                 A.pairs, A.act, A.T, loc - grp * self.up.tiles, u)
        if cutlass.const_expr(self.has(P.DOWN)):
            if st == P.DOWN:
                hi = cutlass.min(grp * ub + ub, NA[0])
                for u in cutlass.range(grp * ub, hi):
                    self.down.body(A.w2, A.w2s, A.act, A.nact, A.act_e, A.act_off, A.act_cnt,
                                   A.pairs, A.y, A.T, loc - grp * self.down.tiles, u)
        if cutlass.const_expr(self.has(P.COMBINE)):
            if st == P.COMBINE:
                self.comb.body(A.ids, A.wts, A.y, A.norm_w, A.yc, A.yn, A.T, loc)
        if cutlass.const_expr(self.has(P.OUT_ROUTED)):
            if st == P.OUT_ROUTED:
                self.gor.body(A.w_up, A.yn, A.ro, A.T, loc * gt, loc * gt + gt, 1)
        if cutlass.const_expr(self.has(P.GEMV_SHARED)):
            if st == P.GEMV_SHARED:
                self.gsh.body(A.w_gu, A.x, A.s2, A.T, loc * gt, loc * gt + gt, 1)
        if cutlass.const_expr(self.has(P.SHARED_ACT)):
            if st == P.SHARED_ACT:
                self.sact.body(A.s2, A.acts, A.T, loc // ACT_NPW, loc % ACT_NPW)
        if cutlass.const_expr(self.has(P.OUT_SHARED)):
            if st == P.OUT_SHARED:
                self.gos.body(A.w_sd, A.acts, A.so, A.T, loc * gt, loc * gt + gt, 1)
        if cutlass.const_expr(self.has(P.FINAL_SUM)):
            if st == P.FINAL_SUM:
                self.fsum.body(A.ro, A.so, A.out, A.T, loc // SUM_NPT, loc % SUM_NPT)


@cute.jit
def _seek(pl, base, si, tick):
    """Segment of `tick` in a queue's list, searching on from segment si -> (si, stage, local)."""
    while pl[base + 4 * (si + 1) + 1] <= tick:
        si = si + 1
    b = base + 4 * si
    return si, pl[b], pl[b + 2] + tick - pl[b + 1]


@cute.jit
def _missing(pl, SY, st, grp):
    """How many of the tasks stage `st` waits on have not signalled yet (acquire loads)."""
    miss = Int32(0)
    for j in cutlass.range_constexpr(2):
        ctr = pl[P.DEPS + 8 * st + 2 * j]
        tgt = pl[P.DEPS + 8 * st + 2 * j + 1]
        if ctr == P.PER_GROUP:
            ctr = P.GROUP + grp
        if ctr >= 0:
            v = cute.arch.load(SY.iterator + ctr, Int32, sem="acquire", scope="gpu")
            miss = cutlass.max(miss, tgt - v)
    return miss


@cute.jit
def _wait_deps(pl, SY, st, loc, grp, tick):
    """Spin until shared task (st, loc)'s inputs are complete, or give up after SPIN_LIMIT polls."""
    n = Int32(0)
    miss = _missing(pl, SY, st, grp)
    while (miss > 0) & (n < SPIN_LIMIT):
        miss = _missing(pl, SY, st, grp)
        n = n + 1
    if miss > 0:
        _give_up(pl, SY, Int32(1), st, loc, tick, grp)


@cute.jit
def _give_up(pl, SY, q, st, loc, tick, grp):
    """The watchdog: the first wait of each stage to pass SPIN_LIMIT names itself in the stage's
    ERR slot (its queue, local index, ticket and expert group, and the first counter still short
    of its target, with both values), so a schedule bug says where it is instead of hanging the
    GPU; plan.describe picks the root among the stages that gave up (the waits behind a broken
    one give up too). ERROR counts every give-up."""
    cute.arch.atomic_add(SY.iterator + P.ERROR, Int32(1), scope="gpu")
    b = P.ERR + P.ERR_SLOT * st
    if cute.arch.atomic_add(SY.iterator + b, Int32(1), scope="gpu") == 0:
        SY[b + 1] = q
        SY[b + 2] = loc
        SY[b + 3] = tick
        SY[b + 4] = grp
        SY[b + 5] = Int32(-1)
        for j in cutlass.range_constexpr(2):
            ctr = pl[P.DEPS + 8 * st + 2 * (1 - j)]     # the first short counter wins: j = 1 last
            tgt = pl[P.DEPS + 8 * st + 2 * (1 - j) + 1]
            if ctr == P.PER_GROUP:
                ctr = P.GROUP + grp
            if ctr >= 0:
                v = cute.arch.load(SY.iterator + ctr, Int32, sem="acquire", scope="gpu")
                if v < tgt:
                    SY[b + 5] = ctr
                    SY[b + 6] = v
                    SY[b + 7] = tgt
