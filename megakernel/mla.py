"""The gated MLA decode step (K3_SPEC 3) on the GPU: seven launches on the caller's stream
("fused"), or eight with the gate's GEMV on a side stream beside the chain ("fork", below).

  fused: 0 mla_x  z = [q_c | kv_c | k_pe | gz] = bf16(x [W_q_a | W_kv_a | W_g]^T), then 1-6
  fork: main stream                                                          side stream
  0 mla_a       [q_c | kv_c | k_pe] = bf16(x [W_q_a | W_kv_a]^T)    GEMV     mla_g  gz = bf16(x W_g^T)
  1 mla_norm    the latent norms; cache row L_t = [kv_c | k_pe]    k_mla_norm.py    (z's last H V
  2 mla_qb      q = bf16(q_c W_q_b^T), [T, H, NP + RP]              GEMV              columns)
  3 mla_absorb  ql = bf16(q_nope W_UK)                              k_mla_absorb.py
  4 mla_attn    per split of the cache: online-softmax partials    k_mla_attn_mma.py
                (on the tensor cores; MK_MLA_MMA=0: k_mla_attn.py)
                                                   <-- join --
  5 mla_merge   lat = merge; o = bf16(lat W_UV^T); gated = bf16(o sigmoid(gz))  k_mla_merge.py
  6 mla_out     out = bf16(gated W_o^T)                             GEMV

mla_a and mla_g are the rows of mla_x (one weight tensor, three views) written into the columns
of the same buffer z (ldy): each row's dot is the same in every launch, so the modes share their
bits. The gate (176 MB at full dims) is read only by the merge, so in "fork" it streams while
the chain norm -> q_b -> absorb -> attention waits on latencies; `fork`: the side starts beside
mla_a ("start") or after it ("after_a"); `side_ctas_per_sm`: a cap on its grid, 0 = none. The
default mode is the one measured faster (`python -m megakernel.tools.tune_fork`, below).

Each token row is one sequence with its own cache [Lcap, C] and length L_t (k3diff.stages: the
mla stage's kv_cache [T, Lcap, R + RP], cache_lens [T]); row L_t is written in place, no other
row is touched. Every sum has a fixed order: the step is batch-invariant and deterministic.
Judged on the H200 by scripts/gpu_check_mla.sh (tests, the ci suite, a planted bug, memcheck);
timed by `python -m megakernel.tools.bench_mla` (NOTES.md).
"""
import torch

from megakernel import cache, side_stream
from megakernel.k_mla_attn import max_splits
from megakernel.launch_streams import FULL_GRID

CHAIN = ("mla_a", "mla_norm", "mla_qb", "mla_absorb", "mla_attn", "mla_merge", "mla_out")
SIDE = ("mla_g",)
FUSED = "mla_x"                                # mla_a and mla_g in one launch
FORKS = {"start": None, "after_a": "mla_a"}    # where the side starts -> side_stream.plan
# prefetch stages (k_l2_prefetch.py) -> the weights they fetch into L2: [q_a | kv_a], q_b, o_proj
PREFETCH = {"mla_pf_a": "w_a", "mla_pf_qb": "w_qb", "mla_pf_o": "w_o"}
# none by default: written in a session with no GPU lent, not yet run; scripts/gpu_prefetch.sh
# times every spec side by side (tune_prefetch) and checks the bits, then a default can be chosen
PF_DEFAULT = {"fused": "off", "fork": "off"}
STAGES = (FUSED,) + CHAIN[:1] + SIDE + CHAIN[1:] + tuple(PREFETCH)   # every launch, any mode
# `python -m megakernel.tools.tune_fork` (H200, sixth session, full dims, 1k cache, one run; us
# at batch 1 / 8 / 64): fused 161.9 / 249.3 / 950.1; fork start, no cap 161.4 / 250.1 / 938.7;
# start, 2 CTAs per SM 157.2 / 238.0 / 942.4; after_a/0 162.9 / 250.1 / 944.2; after_a/2
# 172.6 / 235.1 / 947.9. bench_mla, another run, start/2 over fused: 1.03-1.05x at batch 1 and 8
# (1k-32k cache), 1.00-1.01x at 64. Uncapped, the gate's CTAs hold the SMs and mla_a ends with
# it (timeline); capped at 2 per SM the chain starts at ~27 us (NOTES.md)
STREAMS, FORK, SIDE_CTAS_PER_SM = "fork", "start", 2
OUTPUTS = dict(out="out", q_c="qc", kv_c="kvc", k_pe="kpe", ql="ql", attn_latent="lat",
               attn_out="o", gated="gated")        # the stage's output name -> scratch buffer
BIND = {   # the generic GEMV's arguments w, x, y, ctas -> buffers
    "mla_x": dict(w="w_x", x="x", y="z", ctas="full_grid"),
    "mla_a": dict(w="w_x", x="x", y="z", ctas="full_grid"),
    "mla_g": dict(w="w_g", x="x", y="gz", ctas="side_grid"),
    "mla_qb": dict(w="w_qb", x="qc", y="q", ctas="full_grid"),
    "mla_out": dict(w="w_o", x="gated", y="out", ctas="full_grid"),
}


class MlaStep(side_stream.Modes):
    CHAIN, SIDE, FUSED, JOIN, FORKS = CHAIN, SIDE, FUSED, "mla_merge", FORKS
    STREAMS, FORK, SIDE_CTAS_PER_SM = STREAMS, FORK, SIDE_CTAS_PER_SM
    PREFETCH, PF_DEFAULT = PREFETCH, PF_DEFAULT

    def __init__(self, md, weights: dict, device, streams=None, fork=None, side_ctas_per_sm=None,
                 prefetch=None):
        """streams: "fused" or "fork" (None: side_stream.mode_from_env(STREAMS)); fork,
        side_ctas_per_sm: the knobs of the module docstring (None: FORK, SIDE_CTAS_PER_SM);
        prefetch: a prefetch spec (side_stream.py; None: PF_DEFAULT of the mode)."""
        self.md, self.device = md, device
        self._modes(device, streams, fork, side_ctas_per_sm, prefetch)
        w = {n.removesuffix(".weight"): t.to(device) for n, t in weights.items()}
        bf = lambda t: t.to(torch.bfloat16).contiguous()          # noqa: E731
        w_x = bf(torch.cat([w["q_a"], w["kv_a"], w["g"]]))      # mla_a: its first rows (a view)
        self._weights = dict(w_x=w_x, w_a=w_x[:md.G0], w_g=w_x[md.G0:], w_qb=bf(w["q_b"]),
                             kv_b=bf(w["kv_b"]), w_o=bf(w["o"]), q_norm=bf(w["q_a_norm"]),
                             kv_norm=bf(w["kv_a_norm"]))
        self._scratch = {}

    def scratch(self, T, NS):
        s = self._scratch.get((T, NS))
        if s is None:
            md, dev = self.md, self.device
            e = lambda *sh, dt=torch.bfloat16: torch.empty(*sh, dtype=dt, device=dev)  # noqa: E731
            f = torch.float32
            s = dict(z=e(T, md.NA), qc=e(T, md.QL), kvc=e(T, md.R), kpe=e(T, md.RP),
                     q=e(T, md.H * (md.NP + md.RP)), ql=e(T, md.H, md.R), lat=e(T, md.H, md.R),
                     o=e(T, md.H, md.V), gated=e(T, md.H * md.V), out=e(T, md.d),
                     lens=e(T, dt=torch.int32), pm=e(T, md.H, NS, dt=f), pl=e(T, md.H, NS, dt=f),
                     pa=e(T, md.H, NS, md.R, dt=f))
            self._scratch = {(T, NS): s}          # one shape kept: the partials can be large
        return s

    def launch(self, x, kv_cache, cache_lens, stages=None, max_len=None):
        """Enqueue the step on the caller's stream; `kv_cache` [T, Lcap, C] bf16 (contiguous)
        gets row cache_lens[t] of each token written in place. `max_len`: a bound on
        cache_lens known on the host (a CUDA graph cannot hold the host read that finds it
        otherwise). Returns the scratch dict (the buffers OUTPUTS names hold the results)."""
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
        NS = max_splits(n_max)
        s = self.scratch(T, NS)
        s["lens"].copy_(cache_lens.to(torch.int32))
        named = dict(s, **self._weights, x=x, kv_cache=kv_cache, T=T, Lcap=Lcap, NS=NS,
                     gz=s["z"][:, md.G0:], full_grid=FULL_GRID,
                     side_grid=self.side_grid(FULL_GRID))

        def go(name, st):
            if stages is not None and name not in stages:
                return
            if name in PREFETCH:
                self.prefetch_launch(name, named, st, md)
            else:
                v = cache.gemv_variant(name, T) if name in BIND else (
                    dict(TT=1 if T == 1 else cache.TT_GEMV) if name == "mla_absorb" else
                    cache.mla_merge_variant(T) if name == "mla_merge" else {})
                kname = cache.mla_attn_kernel(md) if name == "mla_attn" else name
                cache.compiled(kname, md, **v)(named, st, BIND.get(name))

        self._streams.run(self.plan(), go, self.streams)
        return s
