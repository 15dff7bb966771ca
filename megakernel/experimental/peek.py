"""The ready-ticket scheduler of the MoE's one launch (k_persistent.py), as a subclass.

State: written in a session with no GPU lent, never run on a GPU; removed from the shipped path
(plan.Order(peek=) and its launch went with it; their last shipped version is main at fd6de34).
Next: a GPU run of the subclass beside the default scheduler (bits and time), then a decision.

PEEK = True: a ticket of either queue is taken only when its task is ready (read the ticket,
check the task's inputs, compare-and-swap it forward), so no CTA holds a task it cannot run and
none spins on one: the protocol experimental/task_graph.py plans a whole layer for.
"""
from megakernel import plan as P
from megakernel.device import cute, cutlass, Int32
from megakernel.k_persistent import SPIN_LIMIT, PersistentStep, _missing, _seek


class PeekPersistentStep(PersistentStep):
    PEEK = True

    @cute.jit
    def next_ready_task(self, pl, SY, sir, sis, s_first):
        """Thread 0: the head ticket of a queue is taken only when its
        task is ready (read the ticket, check the task's inputs, compare-and-swap the ticket
        forward; a lost race reads again), trying this CTA's first queue (shared for
        shared-first CTAs, else routed) then the other; when neither head is ready it polls.
        No CTA ever holds a task it cannot run, so the plan's order alone rules out a hang
        (experimental/task_graph.py). -> (queue, or 2 when both are drained; stage, local index, expert
        group, ticket, segment cursors). After SPIN_LIMIT polls it flags ERROR and takes the
        heads unready (wrong results, no hang), as next_task does."""
        tot_r = pl[P.HDR_TOTAL_R]
        tot_s = pl[P.HDR_TOTAL_S]
        q = Int32(-1)
        st = Int32(0)
        loc = Int32(0)
        grp = Int32(0)
        tick = Int32(0)
        spins = Int32(0)
        force = Int32(0)
        while q < 0:
            live = Int32(0)
            for k in cutlass.range_constexpr(2):
                if q < 0:
                    qq = Int32(k) ^ s_first             # 0 routed, 1 shared
                    word = Int32(P.ROUTED_TICKET)
                    tot = tot_r
                    if qq == 1:
                        word = Int32(P.SHARED_TICKET)
                        tot = tot_s
                    t = cute.arch.load(SY.iterator + word, Int32, sem="relaxed", scope="gpu")
                    if t < tot:
                        live = live + 1
                        cst = Int32(0)
                        cloc = Int32(0)
                        if qq == 0:
                            sir, cst, cloc = _seek(pl, P.SEGS_R, sir, t)
                        else:
                            sis, cst, cloc = _seek(pl, P.SEGS_S, sis, t)
                        cgrp = self.group(cst, cloc)
                        if (force == 1) | (_missing(pl, SY, cst, cgrp) <= 0):
                            old = cute.arch.atomic_cas(SY.iterator + word, cmp=t, val=t + 1,
                                                       sem="relaxed", scope="gpu")
                            if old == t:
                                q, st, loc, grp, tick = qq, cst, cloc, cgrp, t
            if q < 0:
                if live == 0:
                    q = Int32(2)
                else:
                    spins = spins + 1
                    if spins > SPIN_LIMIT:
                        SY[P.ERROR] = Int32(1)
                        force = Int32(1)
        return q, st, loc, grp, tick, sir, sis

