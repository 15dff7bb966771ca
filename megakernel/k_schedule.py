"""Launch 3: the expert -> token schedule, one CTA of 1024 threads (thread e owns expert e).

Outputs: nact[0] = number of experts chosen by any token; for u < nact (experts in id order):
act_e[u], act_off[u], act_cnt[u]; pairs[act_off[u] + i] = the i-th pair p = t*k + j (token order)
that chose act_e[u]. Integer-only and order-fixed, so the schedule is deterministic; each expert
then appears once in the expert launches, which stream its weights once for all its tokens.
Cost is O(T*k) per thread (a broadcast read of shared memory per pair): trivial at decode sizes.
"""
from megakernel.dev import cute, cutlass, Int32
from megakernel.dims import MAX_T

NT = 1024


@cute.jit
def _incl_scan_warp(v, lane):
    for o in cutlass.range_constexpr(5):
        n = cute.arch.shuffle_sync_up(v, offset=1 << o)
        if lane >= (1 << o):
            v = v + n
    return v


class Schedule:
    def __init__(self, dims):
        self.dm = dims

    @cute.jit
    def __call__(self, ids: cute.Pointer, nact: cute.Pointer, act_e: cute.Pointer,
                 act_off: cute.Pointer, act_cnt: cute.Pointer, pairs: cute.Pointer,
                 T: Int32, stream):
        self.kernel(ids, nact, act_e, act_off, act_cnt, pairs, T).launch(
            grid=(1, 1, 1), block=(NT, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, ids: cute.Pointer, nact: cute.Pointer, act_e: cute.Pointer,
               act_off: cute.Pointer, act_cnt: cute.Pointer, pairs: cute.Pointer, T: Int32):
        E, k = self.dm.E, self.dm.k
        tid, _, _ = cute.arch.thread_idx()
        lane = tid % 32
        warp = tid // 32
        P = T * k
        IDS = cute.make_tensor(ids, cute.make_layout((MAX_T * k,), stride=(1,)))
        NA = cute.make_tensor(nact, cute.make_layout((1,), stride=(1,)))
        AE = cute.make_tensor(act_e, cute.make_layout((E,), stride=(1,)))
        AO = cute.make_tensor(act_off, cute.make_layout((E,), stride=(1,)))
        AC = cute.make_tensor(act_cnt, cute.make_layout((E,), stride=(1,)))
        PR = cute.make_tensor(pairs, cute.make_layout((MAX_T * k,), stride=(1,)))

        smem = cutlass.memory.SmemAllocator()
        ids_s = smem.allocate_tensor(Int32, cute.make_layout((MAX_T * k,), stride=(1,)), 16)
        tot = smem.allocate_tensor(Int32, cute.make_layout((2, 32), stride=(32, 1)), 16)
        for p in cutlass.range(tid, P, NT):
            ids_s[p] = IDS[p]
        cute.arch.sync_threads()
        cnt = Int32(0)
        if tid < E:
            for p in cutlass.range(P):
                if ids_s[p] == tid:
                    cnt = cnt + 1
        flag = Int32(0)
        if cnt > 0:
            flag = Int32(1)
        # block exclusive scans of (flag, cnt) in expert order
        fi = _incl_scan_warp(flag, lane)
        ci = _incl_scan_warp(cnt, lane)
        if lane == 31:
            tot[0, warp] = fi
            tot[1, warp] = ci
        cute.arch.sync_threads()
        if warp == 0:
            a = tot[0, lane]
            b = tot[1, lane]
            ai = _incl_scan_warp(a, lane)
            bi = _incl_scan_warp(b, lane)
            tot[0, lane] = ai - a
            tot[1, lane] = bi - b
            if lane == 31:
                NA[0] = ai
        cute.arch.sync_threads()
        u = fi - flag + tot[0, warp]
        off = ci - cnt + tot[1, warp]
        if cnt > 0:
            AE[u] = tid
            AO[u] = off
            AC[u] = cnt
            pos = off
            for p in cutlass.range(P):
                if ids_s[p] == tid:
                    PR[pos] = p
                    pos = pos + 1
