"""The 11-launch step: a fork-join over two streams, or all on one stream ("serial").

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
lab/launches/). The main stream has the higher priority, a hint to the CTA scheduler that graph
capture copies into the kernel nodes. Knobs, all measured by
`python -m megakernel.tools.tune_streams` (none beat the defaults by more than noise at batch
1): `fork`, where the side starts ("start": beside gemv_x, or after gemv_x / route / schedule);
`gate`, out_shared held back until the main stream has finished expert_up ("up") or
expert_down ("down"), or not ("none"); `side_ctas_per_sm`, a cap on the side GEMVs' grids (0 =
none; their CTAs then loop over row tiles). `streams="serial"` puts all 11 launches on the caller's stream. Every mode gives the
same bits (same kernels; tested). `plan` writes the picture above as a plan (launch_plan.py),
run by the executor the attention steps use.
"""
import torch

from megakernel import cache, gemv, k_expert, k_expert_mma, plan as P

# the MoE's stages and its two queues, declared once in plan.py (the persistent launch reads
# its indices): the routed chain runs on the main stream, the shared experts on the side
STAGES = P.STAGES
MAIN = tuple(STAGES[i] for i in P.ROUTED_STAGES)
SIDE = tuple(STAGES[i] for i in P.SHARED_STAGES)
# fork point -> the main-stream launch after which the side starts (None: beside gemv_x)
FORKS = {"start": None, "after_x": 0, "after_route": 1, "after_schedule": 2}
GATES = ("none", "up", "down")
# stage -> {kernel argument: buffer} where the names differ (the generic kernels: Gemv, the
# experts); every other argument takes the buffer of its own name (LatentMoE.buffers)
BIND = {
    "gemv_x": dict(w="w1", y="s1", ctas="full_grid"),
    "expert_up": dict(w="w13", ws="w13s", xin="hl", yout="act"),
    "expert_down": dict(w="w2", ws="w2s", xin="act", yout="y"),
    "out_routed": dict(w="w_up", x="yn", y="ro", ctas="full_grid"),
    "gemv_shared": dict(w="w_gu", y="s2", ctas="side_grid"),
    "out_shared": dict(w="w_sd", x="acts", y="so", ctas="side_grid"),
}


def stream() -> int:
    """The caller's current stream, as the handle cache.Launch takes."""
    return torch.cuda.current_stream().cuda_stream


def expert_launches(moe, T):
    """The schedule and the two expert launches for batch T (compiled once)."""
    dm, s = moe.dm, moe.settings
    c = cache.compiled
    if moe.uses_mma():
        f_up = c("expert_up_mma", dm, **dict(s.moe.up or k_expert_mma.UP))
        f_down = c("expert_down_mma", dm, **dict(s.moe.down or k_expert_mma.down_variant(T, moe.card)))
    else:
        te = k_expert.tile(T)
        f_up = c("expert_up", dm, fmt=moe.fmt, TT=te)
        f_down = c("expert_down", dm, fmt=moe.fmt, TT=te)
    return c("schedule", dm), f_up, f_down


def launches(moe, T, forced):
    """The 11 compiled launches, in STAGES order."""
    dm, s, c = moe.dm, moe.settings, cache.compiled
    gv = lambda n: c(n, dm, **gemv.variant(n, T, s.gemv))  # noqa: E731
    return (gv("gemv_x"), c("route", dm, forced=forced), *expert_launches(moe, T),
            c("combine", dm), gv("out_routed"),
            gv("gemv_shared"), c("shared_act", dm), gv("out_shared"), c("final_sum", dm))


def launch_experts(moe, named, T):
    """Only the schedule and the expert launches, on the caller's stream, over ids and hl as
    `named` holds them: a rank's own experts over the rows it received (megakernel/ep.py), which
    compiles nothing else for its dims."""
    st = stream()
    for name, fn in zip(("schedule", "expert_up", "expert_down"), expert_launches(moe, T)):
        fn(named, st, BIND.get(name))


# the serial order: the shared experts' launches right after gemv_x, as on the side stream
SERIAL = [("main", STAGES[i]) for i in (0, 7, 8, 1, 2, 3, 4, 9, 5, 6, 10)]


def plan(fork, gate):
    """The fork-join plan (launch_plan.py) of the 11 launches: the side starts at `fork`
    (FORKS), out_shared is held back until the main stream has enqueued expert_up / expert_down
    (`gate` "up" / "down"; "none": not held), the final sum joins both."""
    after = FORKS[fork]
    held = {"none": None, "up": "expert_up", "down": "expert_down"}[gate]
    out = [("fork", None)] if after is None else []
    for i, s in enumerate(MAIN):
        if s == "expert_up":                  # the shared experts' first two, once forked
            out += [("side", x) for x in SIDE[:-1]]
        if s == "combine":                    # out_shared, after the gate
            out.append(("side", SIDE[-1]))
        if s == MAIN[-1]:                     # the final sum reads both halves
            out.append(("join", None))
        out.append(("main", s))
        if i == after or s == held:
            out.append(("fork", None))
    return out


def launch(moe, named, T, forced, stages=None):
    """Enqueue the 11 launches (module docstring) over the buffers `named`
    (LatentMoE.buffers); `stages`: only those (indices into STAGES)."""
    fns = dict(zip(STAGES, launches(moe, T, forced)))
    named = dict(named, full_grid=gemv.FULL_GRID, side_grid=moe._nsm * moe.side_ctas_per_sm
                 if moe.side_ctas_per_sm else gemv.FULL_GRID)

    def go(name, st):
        if stages is None or STAGES.index(name) in stages:
            fns[name](named, st, BIND.get(name))

    serial = moe.streams == "serial"
    moe._streams.run(SERIAL if serial else moe.plan(), go, one_stream=serial)
