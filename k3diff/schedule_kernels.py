"""The Triton kernels of the planted pressure bugs (k3diff/schedule_mutants.py): the MoE router's
logits, x @ W_r^T in f32, computed by a persistent grid of one CTA per SM, in two ways that are
right on an idle GPU and wrong when a co-runner holds SMs (k3diff/pressure.py), and their correct
variants. GPU only; Triton is imported on first use.

`router_rows`  each CTA takes rows pid, pid + G, ... and accumulates a row's logits, block of
               experts by block, K chunk by K chunk, in a scratch slot. BY_SM: the slot is the
               CTA's SM (`%smid`), which assumes one CTA per SM: true for a grid of the SM count
               on an idle GPU (the first CTAs of a grid go one per SM), false when a co-runner
               holds SMs and the grid's CTAs share the free ones: two CTAs then accumulate into
               one slot. Without BY_SM the slot is the program id: right on any schedule.
`router_two_phase`
               phase 1, each CTA's rows into `tmp`; phase 2, each CTA copies the rows of the next
               CTA (pid + 1) from `tmp` into the output. Its CTAs are 1024 threads that hold
               HOLD floats from start to end: 64 registers a thread (ptxas -v for sm_90a, Triton
               3.6), the SM's whole register file, so one CTA an SM, as a persistent kernel is
               laid out. BARRIER: one launch, the phases split by
               a grid-wide spin barrier on a counter, which assumes every CTA is resident at once:
               true for a grid of the SM count on an idle GPU, false when a co-runner holds SMs
               (the CTAs that got in wait for ones that cannot start). Its wait gives up after
               `max_polls` polls (a watchdog, as persistent kernels have, so a broken wait ends
               rather than hangs) and copies what is there: rows `tmp` still holds as NaN. Without
               BARRIER the phases are two launches (the kernel boundary is the barrier).
The sums are the same on every schedule where the kernel is right: each row's logits are
accumulated in the same K order by whichever CTA takes it.
"""
# no `from __future__ import annotations`: Triton 3.0's interpreter (torch 2.4 brings Triton 3.0)
# takes a kernel's parameter as constexpr only where its annotation is tl.constexpr itself, not the
# string; the kernels in Triton's interpreter are what the CPU tests run

import functools

BLOCK_E, BLOCK_K = 64, 64
WARPS = 4                    # router_rows: light CTAs, several fit an SM (so a co-runner packs them)
WARPS_TWO, HOLD = 32, 1 << 15   # router_two_phase: 1024 threads, 32 floats a thread held: one CTA an SM
MAX_POLLS = 1 << 14          # the barrier's watchdog: a few ms, far beyond an idle grid's skew
# slots of the by-SM scratch: %smid is below %nsmid, which PTX allows to exceed the SM count (ids
# need not be contiguous); 1024 is far above any NVIDIA GPU's
SM_SLOTS = 1024


@functools.lru_cache(maxsize=1)
def kernels():
    """(router_rows, router_two_phase), compiled by Triton on first launch."""
    import triton
    # tl a module global, not a local: Triton 3.0 and 3.1 (torch 2.4's, 2.5's) look a kernel's names up
    # in its module's globals only (compiling for sm_90: NameError 'tl is not defined')
    global tl
    import triton.language as tl

    # while loops, not range() over run-time ints: Triton's interpreter (the CPU tests) takes those
    @triton.jit
    def router_rows(x_ptr, w_ptr, out_ptr, slot_ptr, T, E, K, G,
                    BLOCK_E: tl.constexpr, BLOCK_K: tl.constexpr, BY_SM: tl.constexpr):
        pid = tl.program_id(0)       # of G programs (the grid)
        if BY_SM:      # "one CTA per SM": the SM's own slot
            slot = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32,
                                             is_pure=False, pack=1)
        else:
            slot = pid
        kk = tl.arange(0, BLOCK_K)
        eb = tl.arange(0, BLOCK_E)
        base = slot_ptr + slot * BLOCK_E + eb
        row = pid
        while row < T:
            e0 = 0
            while e0 < E:
                e = e0 + eb
                em = e < E
                tl.store(base, tl.zeros([BLOCK_E], dtype=tl.float32))
                tl.debug_barrier()
                k0 = 0
                while k0 < K:       # each K chunk's partial added into the slot
                    km = (k0 + kk) < K
                    xk = tl.load(x_ptr + row * K + k0 + kk, mask=km, other=0.0).to(tl.float32)
                    wk = tl.load(w_ptr + e[:, None] * K + k0 + kk[None, :],
                                 mask=em[:, None] & km[None, :], other=0.0).to(tl.float32)
                    part = tl.sum(wk * xk[None, :], axis=1)
                    cur = tl.load(base, cache_modifier=".cg")
                    tl.debug_barrier()
                    tl.store(base, cur + part)
                    tl.debug_barrier()
                    k0 += BLOCK_K
                got = tl.load(base, cache_modifier=".cg")
                tl.store(out_ptr + row * E + e, got, mask=em)
                tl.debug_barrier()
                e0 += BLOCK_E
            row += G

    @triton.jit
    def router_two_phase(x_ptr, w_ptr, tmp_ptr, out_ptr, count_ptr, sink_ptr, T, E, K, G, max_polls,
                         BLOCK_E: tl.constexpr, BLOCK_K: tl.constexpr, BARRIER: tl.constexpr,
                         PHASE: tl.constexpr, HOLD: tl.constexpr):
        pid = tl.program_id(0)       # of G programs
        # HOLD floats live from start to end: with 1024 threads, more than half the SM's register
        # file a CTA, so one CTA an SM (a persistent kernel's layout; and what makes CTAs that
        # cannot start wait for SMs a co-runner holds)
        keep = tl.load(sink_ptr + pid * HOLD + tl.arange(0, HOLD)) + 1.0     # loaded: not recomputable
        kk = tl.arange(0, BLOCK_K)
        eb = tl.arange(0, BLOCK_E)
        if BARRIER or PHASE == 1:
            row = pid
            while row < T:
                e0 = 0
                while e0 < E:
                    e = e0 + eb
                    em = e < E
                    acc = tl.zeros([BLOCK_E], dtype=tl.float32)
                    k0 = 0
                    while k0 < K:
                        km = (k0 + kk) < K
                        xk = tl.load(x_ptr + row * K + k0 + kk, mask=km, other=0.0).to(tl.float32)
                        wk = tl.load(w_ptr + e[:, None] * K + k0 + kk[None, :],
                                     mask=em[:, None] & km[None, :], other=0.0).to(tl.float32)
                        acc += tl.sum(wk * xk[None, :], axis=1)
                        k0 += BLOCK_K
                    tl.store(tmp_ptr + row * E + e, acc, mask=em)
                    e0 += BLOCK_E
                row += G
        if BARRIER:    # "every CTA is resident": wait for all G of them
            tl.debug_barrier()
            tl.atomic_add(count_ptr, 1, sem="release")
            polls = 0          # polled by acquiring atomics: the other CTAs' rows are visible after
            seen = tl.atomic_add(count_ptr, 0, sem="acquire")
            while (seen < G) & (polls < max_polls):
                seen = tl.atomic_add(count_ptr, 0, sem="acquire")
                polls += 1
            tl.debug_barrier()
        if BARRIER or PHASE == 2:
            row = (pid + 1) % G      # the next CTA's rows
            while row < T:
                e0 = 0
                while e0 < E:
                    e = e0 + eb
                    em = e < E
                    v = tl.load(tmp_ptr + row * E + e, mask=em, other=0.0, cache_modifier=".cg")
                    tl.store(out_ptr + row * E + e, v, mask=em)
                    e0 += BLOCK_E
                row += G
        tl.store(sink_ptr + pid * HOLD + tl.arange(0, HOLD), keep)      # `keep` is not dead code

    return router_rows, router_two_phase


def sm_count(device) -> int:
    import torch

    return torch.cuda.get_device_properties(device).multi_processor_count


def router_logits(x, w, *, kind: str, grid: int, hold: int = HOLD):
    """x [T, K] @ w [E, K]^T in f32 by the kernel `kind`: "by_sm" or "by_program" (router_rows
    with BY_SM on or off), "barrier" (router_two_phase in one launch) or "two_launches"; `grid`
    CTAs; `hold`: router_two_phase's floats held a CTA (a power of two; the CPU test's small)."""
    import torch

    rows, two = kernels()
    T, K = x.shape
    E = w.shape[0]
    x, w = x.contiguous(), w.contiguous()
    out = torch.empty(T, E, dtype=torch.float32, device=x.device)
    if kind in ("by_sm", "by_program"):
        slots = max(grid, SM_SLOTS) if kind == "by_sm" else grid
        slot = torch.empty(slots * BLOCK_E, dtype=torch.float32, device=x.device)
        rows[(grid,)](x, w, out, slot, T, E, K, grid, BLOCK_E=BLOCK_E, BLOCK_K=BLOCK_K, BY_SM=kind == "by_sm",
                      num_warps=WARPS)
        return out
    tmp = torch.full((T, E), float("nan"), dtype=torch.float32, device=x.device)
    count = torch.zeros(1, dtype=torch.int32, device=x.device)
    sink = torch.zeros(grid * hold, dtype=torch.float32, device=x.device)
    if kind == "barrier":
        two[(grid,)](x, w, tmp, out, count, sink, T, E, K, grid, MAX_POLLS, BLOCK_E=BLOCK_E, BLOCK_K=BLOCK_K,
                     BARRIER=True, PHASE=0, HOLD=hold, num_warps=WARPS_TWO)
    elif kind == "two_launches":
        for phase in (1, 2):
            two[(grid,)](x, w, tmp, out, count, sink, T, E, K, grid, MAX_POLLS, BLOCK_E=BLOCK_E,
                         BLOCK_K=BLOCK_K, BARRIER=False, PHASE=phase, HOLD=hold, num_warps=WARPS_TWO)
    else:
        raise ValueError(f"unknown router kernel {kind!r}")
    return out
