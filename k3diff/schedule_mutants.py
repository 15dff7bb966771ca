"""Planted schedule bugs: candidates that are right when run eagerly on an idle GPU, twice over
(k3diff.controls' run-twice determinism check included), and wrong under a CUDA-graph replay or
beside a co-runner (k3diff/schedule.py). GPU only.

Each declares the schedules it may be drawn under (`schedules`), so a hunt draws them
(`hunt_space`); `python -m k3diff.tools.schedule_hunt --device cuda` hunts each one twice over the
same draws, with the schedule dimension and without it (the eager run and its run-twice control
only), and runs the correct-variant controls under the dimension, which must pass. The bugs are
registered with `k3diff mutants` in k3diff/mutants.py.

Graph replay (on the graph-safe KDA step, k3diff/backends/blocked_graph.py):
  graph_input_cached_by_identity  re-packs its input only when handed another tensor object or one
                                  written since (tensor identity and version): eagerly every call
                                  gets fresh tensors; the capture sees the warm-up's tensor
                                  unchanged, so every replay reads the warm-up's copy
  graph_output_skipped_when_unchanged
                                  skips the step when handed the output buffers it last wrote,
                                  unchanged: the capture records no work, every replay leaves the
                                  outputs unwritten (a decision frozen at capture time)
  graph_host_read                 reads the number of live rows to the host inside run (sizing its
                                  work): eagerly right, a capture fails
  graph_live_rows_by_buffer       works out which rows are live once per state_idx buffer (as an
                                  attention-metadata builder does once per batch) and reuses it
                                  while that buffer is unchanged: eagerly each call is a new
                                  buffer; a replay reads the rows live at capture (the decoy's
                                  state_idx is rolled by one row, k3diff/graph_replay.py)
SM pressure (torch-blocked's MoE, router logits recomputed by a persistent Triton grid of one CTA
per SM, k3diff/schedule_kernels.py):
  router_slot_by_sm               accumulates each row in a scratch slot indexed by %smid, which
                                  assumes one CTA per SM: true idle, two CTAs in one slot when a
                                  co-runner holds SMs
  router_grid_barrier             splits its two phases by a grid-wide spin barrier, which assumes
                                  every CTA is resident at once: true idle; beside a co-runner the
                                  resident CTAs wait for ones that cannot start, their watchdog
                                  gives up and they copy rows not yet written
Caught by the eager controls as well, and so not a schedule-only bug (the table says so):
  split_k_atomics                 the router logits' K split in 16 and the f32 partials summed by
                                  atomics (index_add_): every order is a correct sum, but the bits
                                  depend on which thread adds first, on an idle GPU too, so the
                                  run-twice check catches it without any schedule
Controls, under the dimension, must pass: the graph-safe candidate itself under graph replay
(`graph_safe_control`); the split-K summed in order with another split count (`split_k_ordered`);
the row kernel with a slot per program on another grid size (`router_slot_by_program`); the two
phases as two launches (`router_two_launches`).
"""
from __future__ import annotations

import weakref

import torch

from k3diff.backends.blocked import TorchBlockedBackend
from k3diff.backends.blocked_graph import TorchBlockedGraphBackend, run_kda_all_rows
from k3diff.backends.blocked_ops import F32, exact_f32_matmul
from k3diff.schedule import GRAPH, PRESSURES, with_schedules


class GraphSafeControl(TorchBlockedGraphBackend):
    name = "control:graph_safe"
    schedules = (GRAPH,)


class GraphInputCachedByIdentity(GraphSafeControl):
    name = "mutant:graph_input_cached_by_identity"

    def __init__(self):
        self._packed = None            # (weakref to the input, its version, the packed copy)

    def run(self, stage, cfg, prepared, inputs, out) -> None:
        x, seen = inputs["x"], self._packed
        if seen is None or seen[0]() is not x or seen[1] != x._version:
            self._packed = (weakref.ref(x), x._version, x.clone())     # "only a changed input is re-packed"
        super().run(stage, cfg, prepared, dict(inputs, x=self._packed[2]), out)


class GraphOutputSkippedWhenUnchanged(GraphSafeControl):
    name = "mutant:graph_output_skipped_when_unchanged"

    def __init__(self):
        self._written = {}             # output name -> (weakref to the buffer, its version after the write)

    def run(self, stage, cfg, prepared, inputs, out) -> None:
        last = self._written
        if out and all(n in last and last[n][0]() is b and last[n][1] == b._version for n, b in out.items()):
            return                      # "the result is already there"
        super().run(stage, cfg, prepared, inputs, out)
        self._written = {n: (weakref.ref(b), b._version) for n, b in out.items()}


class GraphHostRead(GraphSafeControl):
    name = "mutant:graph_host_read"

    def run(self, stage, cfg, prepared, inputs, out) -> None:
        live = int((inputs["state_idx"] > 0).sum())     # a host read: a CUDA graph cannot hold it
        if live == 0:
            for buf in out.values():
                buf.zero_()
            return
        super().run(stage, cfg, prepared, inputs, out)


class GraphLiveRowsByBuffer(GraphSafeControl):
    name = "mutant:graph_live_rows_by_buffer"

    def __init__(self):
        self._live = None              # (weakref to state_idx, its version, the live-row mask)

    def run(self, stage, cfg, prepared, inputs, out) -> None:
        idx, seen = inputs["state_idx"], self._live
        if seen is None or seen[0]() is not idx or seen[1] != idx._version:
            self._live = (weakref.ref(idx), idx._version, idx > 0)     # "once per batch buffer"
        with torch.no_grad(), exact_f32_matmul():
            res = run_kda_all_rows(cfg, prepared["kda"], inputs["x"], inputs["conv_state"],
                                   inputs["recurrent_state"], idx, live=self._live[2])
        for name, buf in out.items():
            buf.copy_(res[name])


class SplitKRouter(TorchBlockedBackend):
    """torch-blocked's MoE with the router logits recomputed as a K split in `splits`, the f32
    partials summed by atomics or in order."""
    stages = ("moe",)
    schedules = PRESSURES
    splits, atomic = 16, True
    name = "mutant:split_k_atomics"
    eager_catches = True          # atomics reorder on an idle GPU too: the run-twice check sees it

    def prepare(self, cfg, stage, weights):
        return {"inner": super().prepare(cfg, stage, weights), "w_r": weights.get("router.weight")}

    def run(self, stage, cfg, prepared, inputs, out) -> None:
        super().run(stage, cfg, prepared["inner"], inputs, out)
        w = prepared["w_r"]
        if "router_logits" not in out or w is None:
            return
        x = inputs["x"].to(F32)
        T, K = x.shape
        E = w.shape[0]
        step = -(-K // self.splits)
        with torch.no_grad(), exact_f32_matmul():
            parts = torch.stack([x[:, k0:k0 + step] @ w[:, k0:k0 + step].to(F32).t() for k0 in range(0, K, step)])
        if self.atomic:                 # every partial added into its element by an atomic
            idx = torch.arange(T * E, device=x.device).repeat(parts.shape[0])
            acc = torch.zeros(T * E, dtype=F32, device=x.device).index_add_(0, idx, parts.reshape(-1))
        else:                           # in split order: the same bits on every schedule
            acc = parts[0].clone()
            for p in parts[1:]:
                acc += p
        out["router_logits"].copy_(acc.view(T, E))


class SplitKOrdered(SplitKRouter):
    splits, atomic = 12, False
    name = "control:split_k_ordered"
    eager_catches = False


class RouterKernel(TorchBlockedBackend):
    """torch-blocked's MoE with the router logits recomputed by the Triton kernel `kind` of
    k3diff/schedule_kernels.py on a grid of the SM count (`grid_share` of it). On the CPU the
    kernel cannot run and torch-blocked's logits stand (these are GPU mutants)."""
    stages = ("moe",)
    schedules = PRESSURES
    kind, grid_share = "by_sm", 1.0
    name = "mutant:router_slot_by_sm"
    may_hang = True               # its CTAs may wait on each other: the hunt isolates it with a time limit

    def prepare(self, cfg, stage, weights):
        return {"inner": super().prepare(cfg, stage, weights), "w_r": weights.get("router.weight")}

    def run(self, stage, cfg, prepared, inputs, out) -> None:
        super().run(stage, cfg, prepared["inner"], inputs, out)
        w, x = prepared["w_r"], inputs["x"]
        if "router_logits" not in out or w is None or x.device.type != "cuda":
            return
        from k3diff.schedule_kernels import router_logits, sm_count

        grid = max(1, int(sm_count(x.device) * self.grid_share))
        out["router_logits"].copy_(router_logits(x, w, kind=self.kind, grid=grid))


class RouterGridBarrier(RouterKernel):
    kind = "barrier"
    name = "mutant:router_grid_barrier"


class RouterSlotByProgram(RouterKernel):
    kind, grid_share = "by_program", 0.5
    name = "control:router_slot_by_program"


class RouterTwoLaunches(RouterKernel):
    kind = "two_launches"
    name = "control:router_two_launches"


# (name, area, stages, description, class) of each planted bug; k3diff/mutants.py registers them
BUGS = (
    ("graph_input_cached_by_identity", "schedule", ("kda",),
     "re-packs x only for another tensor object or version: a graph replay reads the warm-up's x",
     GraphInputCachedByIdentity),
    ("graph_output_skipped_when_unchanged", "schedule", ("kda",),
     "skips the step for the same unchanged output buffers: the capture records nothing",
     GraphOutputSkippedWhenUnchanged),
    ("graph_host_read", "schedule", ("kda",),
     "reads the live-row count to the host inside run: a CUDA graph capture fails",
     GraphHostRead),
    ("graph_live_rows_by_buffer", "schedule", ("kda",),
     "the live rows worked out once per state_idx buffer: a graph replay uses the capture's rows",
     GraphLiveRowsByBuffer),
    ("router_slot_by_sm", "schedule", ("moe",),
     "router logits accumulated in a scratch slot per SM (%smid): two CTAs share one under pressure",
     RouterKernel),
    ("router_grid_barrier", "schedule", ("moe",),
     "router logits' two phases split by a grid barrier sized to the SM count: not all resident under pressure",
     RouterGridBarrier),
    ("split_k_atomics", "schedule", ("moe",),
     "router logits split-K with f32 partials summed by atomics (order varies idle too: eager controls catch it)",
     SplitKRouter),
)
CONTROLS = (("graph_safe_control", ("kda",), GraphSafeControl),
            ("split_k_ordered", ("moe",), SplitKOrdered),
            ("router_slot_by_program", ("moe",), RouterSlotByProgram),
            ("router_two_launches", ("moe",), RouterTwoLaunches))


def schedule_only(cls) -> bool:
    """Whether the planted bug `cls` should be missed without the schedule dimension."""
    return not getattr(cls, "eager_catches", False)


def hunt_space(backend, space, device):
    """The hunt's space with the schedules a schedule mutant declares; other mutants' as it was."""
    if getattr(backend, "schedules", None) is None:
        return space
    return with_schedules(space, device, backend)
