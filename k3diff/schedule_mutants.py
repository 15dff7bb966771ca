"""Planted schedule bugs: candidates that are right when run once, eagerly, on an idle GPU, and
wrong under a CUDA-graph replay or beside a co-runner (k3diff/schedule.py). GPU only.

Each declares the schedules it may be drawn under (`schedules`), so a hunt draws them
(`hunt_space`); `python -m k3diff.tools.schedule_hunt --device cuda` hunts each one twice, with the
schedule dimension and without it (the eager run and its run-twice control only), and runs the
correct-variant controls under the dimension, which must pass. The bugs are registered with
`k3diff mutants` in k3diff/mutants.py.

  graph_input_cached_by_identity  re-packs its input only when handed another tensor object or one
                                  written since (tensor identity and version): the capture sees
                                  the warm-up's tensor unchanged, so every replay reads the warm-up's
                                  copy, a stale input
  graph_output_skipped_when_unchanged
                                  skips the step when handed the output buffers it last wrote,
                                  unchanged: the capture records no work, every replay leaves the
                                  outputs unwritten (a decision frozen at capture time)
  graph_host_read                 reads the number of live rows to the host inside run (sizing its
                                  work): eagerly right, a capture fails
  split_k_atomics                 the router logits' K split in 16 and the f32 partials summed by
                                  atomics (index_add_): every order is a correct sum, but the bits
                                  depend on which CTA adds first
Controls: the graph-safe candidate itself under graph replay (`graph_safe_control`), and the same
split-K summed in order with another split count (`split_k_ordered`) under pressure.
"""
from __future__ import annotations

import weakref

import torch

from k3diff.backends.blocked import TorchBlockedBackend
from k3diff.backends.blocked_graph import TorchBlockedGraphBackend
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


class SplitKRouter(TorchBlockedBackend):
    """torch-blocked's MoE with the router logits recomputed as a K split in `splits`, the f32
    partials summed by atomics or in order."""
    stages = ("moe",)
    schedules = PRESSURES
    splits, atomic = 16, True
    name = "mutant:split_k_atomics"

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
    ("split_k_atomics", "schedule", ("moe",),
     "router logits split-K with f32 partials summed by atomics (order depends on the CTAs)",
     SplitKRouter),
)
CONTROLS = (("graph_safe_control", ("kda",), GraphSafeControl),
            ("split_k_ordered", ("moe",), SplitKOrdered))


def hunt_space(backend, space, device):
    """The hunt's space with the schedules a schedule mutant declares; other mutants' as it was."""
    if getattr(backend, "schedules", None) is None:
        return space
    return with_schedules(space, device, backend)
