"""The gated MLA decode step (docs/k3-decode.md §3) on the GPU: eight launches on the caller's stream
("fused"), or nine with the gate's GEMV on a side stream beside the chain ("fork", below).

  fused: 0 mla_x  z = [q_c | kv_c | k_pe | gz] = bf16(x [W_q_a | W_kv_a | W_g]^T), then 1-7
  fork: main stream                                                          side stream
  0 mla_a       [q_c | kv_c | k_pe] = bf16(x [W_q_a | W_kv_a]^T)    GEMV     mla_g  gz = bf16(x W_g^T)
  1 mla_norm    the latent norms; cache row L_t = [kv_c | k_pe]    k_mla_norm.py    (z's last H V
  2 mla_qb      q = bf16(q_c W_q_b^T), [T, H, NP + RP]              GEMV              columns)
  3 mla_absorb  ql = bf16(q_nope W_UK)                              k_mla_heads.py
  4 mla_attn    per split of the cache: online-softmax partials    k_mla_attn_tma.py (sm_90a)
                                                   <-- join --
  5 mla_merge   lat = merge of the splits                          k_mla_merge.py
  6 mla_uv      o = bf16(lat W_UV^T); gated = bf16(o sigmoid(gz))  k_mla_heads.py
  7 mla_out     out = bf16(gated W_o^T)                             GEMV
  3, 4 and 6 run on the tensor cores (4 on wgmma on sm_90a, on mma.sync, k_mla_attn_mma.py,
  elsewhere or with MK_MLA_MMA=sync); with Settings.attn.mla_mma off (MK_MLA_MMA=0), or dims
  their tiles do not take, on the CUDA cores: k_mla_absorb.py, k_mla_attn.py, and the merge
  does 6 itself (mla_uv is then no launch). The two paths round differently; one serves every
  batch.

mla_a and mla_g are the rows of mla_x (one weight tensor, three views) written into the columns
of the same buffer z (ldy): each row's dot is the same in every launch, so the modes share their
bits. The gate (176 MB at full dims) is read only by the merge, so in "fork" it streams while
the chain norm -> q_b -> absorb -> attention waits on latencies; `fork`: the side starts beside
mla_a ("start") or after it ("after_a"); `side_ctas_per_sm`: a cap on its grid, 0 = none. The
default mode is the one measured faster (`python -m megakernel.tools.tune_fork`, below).

Each token row is one sequence with its own cache [Lcap, C] and length L_t (k3diff.stages: the
mla stage's kv_cache [T, Lcap, R + RP], cache_lens [T]); row L_t is written in place, no other
row is touched. Every sum has a fixed order: the step is batch-invariant and deterministic.
Judged on the GPU by scripts/gpu_check.sh's lanes (its tests, the ci suite, planted bugs, memcheck);
timed by `python -m megakernel.tools.bench_mla` (lab/mla/).
"""
import torch

from megakernel import gemv, k_mla_heads, k_mla_merge, side_stream
from megakernel.k_mla_attn import max_splits
from megakernel.k_mla_attn_mma import attention_kernel, split_rows

STEPS = side_stream.Stages(
    chain=("mla_a", "mla_norm", "mla_qb", "mla_absorb", "mla_attn", "mla_merge", "mla_uv",
           "mla_out"),
    # join at the merge: the CUDA-core path's merge reads gz (on the tensor-core path mla_uv does,
    # one launch later, so that path could join later still: not measured)
    side=("mla_g",), fused="mla_x", join="mla_merge",     # mla_x: mla_a and mla_g in one launch
    forks={"start": None, "after_a": "mla_a"},
    bind={   # a GEMV stage -> {kernel argument: buffer} (the generic GEMV's w, x, y, ctas)
        "mla_x": dict(w="w_x", x="x", y="z", ctas="full_grid"),
        "mla_a": dict(w="w_x", x="x", y="z", ctas="full_grid"),
        "mla_g": dict(w="w_g", x="x", y="gz", ctas="side_grid"),
        "mla_qb": dict(w="w_qb", x="qc", y="q", ctas="full_grid"),
        "mla_out": dict(w="w_o", x="gated", y="out", ctas="full_grid"),
    },
    variant={},             # MlaStep.kernel: absorb, attention, merge and uv by the path
    # the default, measured faster (`python -m megakernel.tools.tune_fork`, bench_mla, H200:
    # 1.03-1.05x over fused at batch 1 and 8; lab/mla/): forked at the start,
    # the gate's GEMV capped at 2 CTAs per SM (uncapped, its CTAs hold the SMs and mla_a ends
    # with it)
    streams="fork", fork="start", side_ctas_per_sm=2)
OUTPUTS = dict(out="out", q_c="qc", kv_c="kvc", k_pe="kpe", ql="ql", attn_latent="lat",
               attn_out="o", gated="gated")        # the stage's output name -> scratch buffer
# The launches by what they depend on (verify.py runs a verify step this way): per token, on
# the step's T rows, the x-side GEMV, the norms (which write a token's cache row), q_b and the
# absorb; per sequence, over its cache, the attention and the merge; per token again, the value
# projection and the output GEMV. The cache launches read and write these token rows (their
# kernels' ARGS: k_mla_attn*.py, k_mla_merge.py; tests/megakernel/test_mk_verify.py checks it).
TOKEN_STAGES = ("mla_x", "mla_a", "mla_g", "mla_norm", "mla_qb", "mla_absorb")
CACHE_STAGES = ("mla_attn", "mla_merge")
OUT_STAGES = ("mla_uv", "mla_out")
CACHE_READS = ("q", "ql", "z")
CACHE_WRITES = ("lat", "o", "gated")      # o and gated: the CUDA-core merge's (value path)


def _capturing(device) -> bool:
    """Whether a CUDA graph is being captured on the current stream of `device`."""
    return torch.device(device).type == "cuda" and torch.cuda.is_current_stream_capturing()


class MlaStep(side_stream.Modes):
    STEPS = STEPS

    def __init__(self, md, weights: dict, device, streams=None, fork=None, side_ctas_per_sm=None,
                 settings=None):
        """streams: "fused" or "fork" (None: settings.attn.streams, else STEPS.streams); fork,
        side_ctas_per_sm: the knobs of the module docstring (None: STEPS' defaults);
        settings: a config.Settings (None: config.current())."""
        self.md, self.device = md, device
        self._modes(device, settings, streams, fork, side_ctas_per_sm)
        w = {n.removesuffix(".weight"): t.to(device) for n, t in weights.items()}
        bf = lambda t: t.to(torch.bfloat16).contiguous()          # noqa: E731
        w_x = bf(torch.cat([w["q_a"], w["kv_a"], w["g"]]))      # mla_a: its first rows (a view)
        kv_b = bf(w["kv_b"])
        # W_UK[h]^T, [H, R, NP]: the absorb's rows on the tensor cores (k_mla_heads.py), made
        # once with the weights (12.6 MB at full dims)
        wuk_t = bf(kv_b.view(md.H, md.NP + md.V, md.R)[:, :md.NP].transpose(1, 2))
        self._weights = dict(w_x=w_x, w_a=w_x[:md.G0], w_g=w_x[md.G0:], w_qb=bf(w["q_b"]),
                             kv_b=kv_b, wuk_t=wuk_t, w_o=bf(w["o"]), q_norm=bf(w["q_a_norm"]),
                             kv_norm=bf(w["kv_a_norm"]))
        self._scratch = {}

    def scratch(self, T, NS, keep=True):
        """The step's buffers for batch T and NS splits. One shape is kept (the partials can be
        large) and replaced when another runs; so while a CUDA graph is being captured the step
        gets buffers of its own, allocated in the graph's private pool (which keeps them for the
        graph's replays and gives them to no eager allocation), never the eager ones. keep=False:
        new buffers, the kept ones left as they are (a verify step's two batches, verify.py)."""
        capturing = _capturing(self.device) or not keep
        s = None if capturing else self._scratch.get((T, NS))
        if s is None:
            md, dev = self.md, self.device
            e = lambda *sh, dt=torch.bfloat16: torch.empty(*sh, dtype=dt, device=dev)  # noqa: E731
            f = torch.float32
            s = dict(z=e(T, md.NA), qc=e(T, md.QL), kvc=e(T, md.R), kpe=e(T, md.RP),
                     q=e(T, md.H * (md.NP + md.RP)), ql=e(T, md.H, md.R), lat=e(T, md.H, md.R),
                     o=e(T, md.H, md.V), gated=e(T, md.H * md.V), out=e(T, md.d),
                     lens=e(T, dt=torch.int32), pm=e(T, md.H, NS, dt=f), pl=e(T, md.H, NS, dt=f),
                     pa=e(T, md.H, NS, md.R, dt=f))
            if not capturing:
                self._scratch = {(T, NS): s}      # one shape kept: the partials can be large
        return s

    def launch(self, x, kv_cache, cache_lens, stages=None, max_len=None, scratch=None):
        """Enqueue the step on the caller's stream; `kv_cache` [T, Lcap, C] bf16 (contiguous)
        gets row cache_lens[t] of each token written in place. `max_len`: a bound on
        cache_lens known on the host (a CUDA graph cannot hold the host read that finds it
        otherwise). `stages`: only those launches; `scratch`: the buffers to use (a dict from
        `scratch`, or one an earlier launch returned: a step run in parts keeps its buffers, where
        under a graph's capture each launch would get new ones). Returns the scratch dict (the
        buffers OUTPUTS names hold the results)."""
        md = self.md
        T, Lcap = x.shape[0], kv_cache.shape[1]
        for t, dt in ((x, torch.bfloat16), (kv_cache, torch.bfloat16)):
            assert t.dtype == dt and t.is_contiguous()
        # splits up to the longest sequence (one host read, unless the caller knows a bound):
        # splits past a row's length only add exact zeros, so the bits do not depend on NS,
        # and the partials stay small
        n_max = (int(cache_lens.max()) if max_len is None else int(max_len)) + 1
        if n_max > Lcap:
            raise ValueError(f"megakernel MLA: a cache length {n_max - 1} leaves no row for this "
                             f"step in a cache of {Lcap}")
        NS = self.splits(n_max)
        s = self.scratch(T, NS) if scratch is None else scratch
        # one conversion kernel into the scratch, no temporary (a temporary and a device copy
        # were a host-API copy a CUDA graph replays)
        s["lens"].copy_(cache_lens)
        named = dict(s, **self._weights, x=x, kv_cache=kv_cache, T=T, Lcap=Lcap, NS=NS,
                     gz=s["z"][:, md.G0:], full_grid=gemv.FULL_GRID,
                     side_grid=self.side_grid(gemv.FULL_GRID))

        self.run(named, T, md, stages)
        return s

    def splits(self, n_max):
        """The attention's splits over caches of up to n_max rows."""
        return max_splits(n_max, split_rows(attention_kernel(self.md, self.settings.attn)))

    def heads_mma(self):
        """Absorb and value projection on the tensor cores (k_mla_heads.py): with the attention's
        switch, where the dims fit its tiles."""
        return self.settings.attn.mla_mma and k_mla_heads.fits(self.md)

    def kernel(self, stage, T):
        """(kernel name or None: no launch in this path, variant) of `stage` at batch T."""
        mma = self.heads_mma()
        if stage == "mla_attn":
            return attention_kernel(self.md, self.settings.attn), {}
        if stage == "mla_absorb":
            return (("mla_absorb_mma", k_mla_heads.variant("mla_absorb_mma", T)) if mma else
                    ("mla_absorb", dict(TT=1 if T == 1 else gemv.TT_GEMV)))
        if stage == "mla_merge":
            return stage, k_mla_merge.variant(T, self.md, value=not mma)
        if stage == "mla_uv":
            return ("mla_uv", k_mla_heads.variant("mla_uv", T)) if mma else (None, {})
        return super().kernel(stage, T)
