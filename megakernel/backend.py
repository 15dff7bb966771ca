"""k3diff backend "megakernel": the LatentMoE, KDA, MLA and layer stages on the GPU through CuTe DSL
kernels.

Duck-typed to k3diff/backends/base.py (no k3diff import). Registered by the lead as the entry point
`megakernel = "megakernel.backend:MegakernelBackend"` in group `k3diff.backends`. Importing this
module imports neither cutlass nor CUDA.

Every step is built with config.current(), the settings of the environment (config.py:
MEGAKERNEL_STREAMS picks how the MoE is launched: "fork", the fastest measured, 11 launches over
two streams; "serial", the same on one stream; "persistent", the whole step in one launch; all
three compute the same bits). The layer stage is layer.py: AttnRes, the attention, AttnRes, the
MoE or the dense MLP, as launches (judged on the H200 and H100;
MEGAKERNEL_LAYER=0 leaves it out).
"""
from __future__ import annotations

from megakernel import config

MOE_OUTPUTS = ("out", "router_logits", "topk_ids", "topk_weights", "latent", "combined",
               "latent_normed", "routed_out", "shared_out")
KDA_OUTPUTS = ("out", "conv_out", "decay", "beta", "core", "normed")      # = kda.OUTPUTS
MLA_OUTPUTS = ("out", "q_c", "kv_c", "k_pe", "ql", "attn_latent", "attn_out", "gated")  # mla.OUTPUTS
LAYER_OUTPUTS = ("delta", "x_attn", "attn_out", "x_mlp")                     # = layer.OUTPUTS
OUTPUTS = {"moe": MOE_OUTPUTS, "kda": KDA_OUTPUTS, "mla": MLA_OUTPUTS, "layer": LAYER_OUTPUTS}


def capacity_bound(kv_cache) -> int:
    """The longest cache length a step on `kv_cache` [B, Lcap, C] may have: Lcap - 1 (its row for
    this step must fit), known from the shape, so no host read of cache_lens is needed."""
    return int(kv_cache.shape[1]) - 1


def _capturing() -> bool:
    """Whether the current CUDA stream is capturing a graph (a host read would break it)."""
    import torch
    return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


class MegakernelBackend:
    name = "megakernel"
    stages = ("moe", "kda", "mla") + (("layer",) if config.layer_stage() else ())
    deterministic = True      # fixed reduction orders, integer-only schedule, no float atomics
    # every token's dots use the same per-lane K order and warp tree whatever the batch or token
    # tile, and the combine is per token in slot order: a token's outputs do not depend on the
    # other tokens (checked on the GPU in tests/megakernel/test_mk_gpu.py)
    batch_invariant = True
    # capturable into a CUDA graph (k3diff's `graph` schedule replays each step as a serving engine
    # does): nothing on the step's path reads the device back or keeps a per-call decision while
    # a graph is captured (a verify step reads its widths back only when it is not: verify.py). The MLA
    # split count is sized from the cache's capacity (the shape) rather than max(cache_lens) read
    # to the host (splits past a row's length add exact zeros, so the bits are the same; the
    # capacity k3diff gives is max(cache_lens) plus the step's rows, so the splits are about as
    # many); the persistent MoE's sync-word check, a host read, runs on eager calls only; and the
    # scratch a capture records is its own, allocated in the graph's private memory pool
    # (mla.MlaStep.scratch: its eager scratch, one shape at a time, is replaced when another batch
    # runs, which would leave a graph writing freed memory). The KDA and MoE steps keep their
    # scratch per batch for the object's life, so a capture may record it.
    graph_safe = True
    # sizes where the kernels change path (megakernel/dims.py says where each comes from); k3diff
    # draws cases on and around them and names the ones a run never crossed
    from megakernel.dims import BOUNDARIES as boundaries

    def available(self) -> str | None:
        bad = config.check()              # a bad setting: one line, before any case
        if bad:
            return bad
        try:
            import torch
        except Exception as e:  # pragma: no cover
            return f"torch does not import: {e}"
        if not torch.cuda.is_available():
            return "no CUDA device (megakernel runs CuTe DSL kernels on an NVIDIA GPU)"
        from megakernel.cute_env import unavailable_reason
        return unavailable_reason()

    # the parts of the stage contract beyond a bf16 decode step that the backend serves: a verify
    # step (W tokens per sequence) and the FP8 latent cache (docs/k3-decode.md §14-15), both by
    # the decode kernels (verify.py, fp8_cache.py: correct, not at speed); a case needing anything
    # else is refused, and k3diff's summary counts it as refused, not passed
    SERVES = ("verify", "fp8_cache")

    def supports(self, cfg, stage, features=frozenset()) -> str | None:
        """None when the kernels take these dims, else the one-line reason (the case is skipped)."""
        unknown = sorted(f for f in features if f not in self.SERVES)
        if unknown:
            return f"the megakernel does not serve {', '.join(unknown)}"
        from megakernel.dims import from_cfg, kda_from_cfg, mla_from_cfg
        try:
            if stage == "layer":          # any layer: the MoE's dims and both attentions'
                for f in (from_cfg, kda_from_cfg, mla_from_cfg):
                    f(cfg)
            else:
                dict(kda=kda_from_cfg, mla=mla_from_cfg).get(stage, from_cfg)(cfg)
        except ValueError as e:
            return str(e)
        return None

    def provides(self, stage: str) -> set[str]:
        if stage not in self.stages:
            raise KeyError(f"megakernel implements the {', '.join(self.stages[:-1])} and "
                           f"{self.stages[-1]} stages, "
                           f"not {stage!r}")
        return set(OUTPUTS[stage])

    def prepare(self, cfg, stage, weights):
        self.provides(stage)
        dev = next(iter(weights.values())).device
        if stage == "kda":
            from megakernel.dims import kda_from_cfg
            from megakernel.kda import KdaStep
            return KdaStep(kda_from_cfg(cfg), weights, dev)
        if stage == "mla":
            from megakernel.dims import mla_from_cfg
            from megakernel.mla import MlaStep
            return MlaStep(mla_from_cfg(cfg), weights, dev)
        if stage == "layer":
            from megakernel.layer import LayerStep
            return LayerStep(cfg, weights, dev)
        from megakernel.dims import from_cfg
        from megakernel.moe import LatentMoE
        return LatentMoE(from_cfg(cfg), weights, dev)

    def run(self, stage, cfg, prepared, inputs, out) -> None:
        if stage == "kda":
            self._run_kda(prepared, inputs, out)
            return
        if stage == "mla":
            self._run_mla(prepared, inputs, out)
            return
        if stage == "layer":
            self._run_layer(prepared, inputs, out)
            return
        x = inputs["x"].contiguous()
        forced = inputs.get("forced_ids")
        # production mode: the kernel writes the output straight into the framework's buffer;
        # debug mode (intermediates requested) also copies them out of the kernel's scratch
        debug = any(n != "out" for n in out)
        o = out["out"]
        direct = (o.is_contiguous() and o.data_ptr() % 16 == 0 and o.dtype == x.dtype
                  and tuple(o.shape) == (x.shape[0], prepared.dm.d))
        s = prepared.launch(x, forced_ids=forced, out=o if direct else None)
        T = x.shape[0]
        if prepared.streams == "persistent" and not _capturing():
            prepared.check_persistent()     # one word read back: a broken wait fails loudly
        if not direct:
            o.copy_(s["out"])
        if debug:
            inter = prepared.debug_outputs(s, T)
            for n, buf in out.items():
                if n != "out":
                    buf.copy_(inter[n])

    @staticmethod
    def _run_mla(step, inputs, out) -> None:
        """The cache rows of this step are written in place (a cache the kernel cannot address
        directly, not contiguous, through a contiguous copy); bf16 or FP8, decode or verify
        (verify.mla)."""
        from megakernel import verify
        from megakernel.mla import OUTPUTS as NAMES
        kv = inputs["kv_cache"]
        work = kv if kv.is_contiguous() else kv.contiguous()
        # the splits sized from the capacity, not from max(cache_lens) read back (graph_safe)
        s = verify.mla(step, inputs["x"].contiguous(), work, inputs["cache_lens"],
                       inputs.get("query_lens"), max_len=capacity_bound(work))
        if work is not kv:
            kv.copy_(work)
        for n, buf in out.items():
            buf.copy_(s[NAMES[n]].view(buf.shape))

    @staticmethod
    def _run_layer(step, inputs, out) -> None:
        """prefix, blocks and the attention's caches / states are updated in place (through
        contiguous copies where the kernels cannot address them directly); the outputs are
        written into contiguous buffers, then into the framework's."""
        import torch
        STATE = ("prefix", "blocks", "kv_cache", "conv_state", "recurrent_state", "conv_states",
                 "recurrent_states")
        work = dict(inputs)
        for n in STATE:
            if n in inputs and not inputs[n].is_contiguous():
                work[n] = inputs[n].contiguous()
        if "delta" in inputs:
            work["delta"] = inputs["delta"].contiguous()
        if "kv_cache" in inputs:          # an MLA layer: its splits from the capacity (graph_safe)
            work["max_len"] = capacity_bound(work["kv_cache"])
        T, d = inputs["prefix"].shape
        res = {n: torch.empty(T, d, dtype=torch.bfloat16, device=inputs["prefix"].device)
               for n in LAYER_OUTPUTS}
        step.launch(work, res)
        for n in STATE:
            if n in inputs and work[n] is not inputs[n]:
                inputs[n].copy_(work[n])
        for n, buf in out.items():
            buf.copy_(res[n])

    @staticmethod
    def _run_kda(step, inputs, out) -> None:
        """The states (and a verify step's per-token states) are updated in place
        (k3diff.stages.STATE); a state the kernel cannot address directly (not contiguous) is
        updated through a contiguous copy. Decode or verify: verify.kda."""
        from megakernel import verify
        names = [n for n in ("conv_state", "recurrent_state", "conv_states", "recurrent_states")
                 if n in inputs]
        states = [inputs[n] for n in names]
        work = [t if t.is_contiguous() else t.contiguous() for t in states]
        w = dict(zip(names, work))
        s = verify.kda(step, inputs["x"].contiguous(), w["conv_state"], w["recurrent_state"],
                       inputs["state_idx"], inputs.get("query_lens"), inputs.get("accepted"),
                       w.get("conv_states"), w.get("recurrent_states"))
        for t, w in zip(states, work):
            if w is not t:
                t.copy_(w)
        for n, buf in out.items():
            buf.copy_(s[n])


class MegakernelEPBackend:
    """k3diff backend "megakernel-ep": the moe stage with expert parallelism (megakernel/ep.py),
    `--k3diff-ranks N`. A declaration, not a Backend: k3diff runs `rank_impl` on N rank
    processes (k3diff/distributed.py `Declared`), each on a GPU (`ranks_on_gpu`: ranks share the
    GPUs there are under a gloo group when there are fewer GPUs than ranks, exchanging through
    CUDA IPC (ep_ipc.py; MEGAKERNEL_EP_EXCHANGE); NCCL otherwise)."""

    name = "megakernel-ep"
    distributed = True
    rank_impl = "megakernel.ep:MegakernelEPRank"
    ranks_on_gpu = True
    stages = ("moe",)
    from megakernel.dims import BOUNDARIES as boundaries

    def available(self) -> str | None:
        return MegakernelBackend().available()

    def supports(self, cfg, stage, features=frozenset()) -> str | None:
        return MegakernelBackend().supports(cfg, stage, features)

    def provides(self, stage: str) -> set[str]:
        return set(OUTPUTS[stage])
