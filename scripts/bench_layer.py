"""PYTHONPATH=$PWD python scripts/bench_layer.py: one K3 decoder layer (megakernel/layer.py: AttnRes,
the attention, AttnRes, the LatentMoE) against the copy roofline and torch.

Here, not in megakernel/tools/: it builds the layer from reference's config and times k3diff's
torch-blocked layer beside it, and megakernel/ imports neither k3diff nor reference.

A KDA layer and an MLA layer, each with its LatentMoE (bf16 or MXFP4 experts), full dims by
default; every MLA sequence has a cache of --len rows. One LayerStep holds both attentions and
one MoE (the full bf16 experts are 59 GB). Method as bench_kda.py's: R layer steps captured in
one CUDA graph, the replay timed with events, median of 5; KDA in fresh state slots each step,
MLA writing a new cache row each step. Roofline = the bytes the layer must move (the attention
step's, as bench_kda / bench_mla count them; the MoE's, as bench.py counts them with the distinct
experts the kernel's schedule streamed; AttnRes's sources read and rows written) over the copy
bandwidth measured in the same run. "attn", "moe" and "2 AttnRes": the attention step, the MoE
and the two AttnRes launches alone (their own graphs, same inputs), and their sum, so what the
layer's own launches cost shows; "other attn": the layer with the attention step in its other
stream mode ("fused" or "fork", side_stream.py). Torch: k3diff's torch-blocked
AttnRes and attention with bench.py's eager MoE (TorchMoE), eager and under torch.compile
(dynamic shapes), timed with events without a graph (host syncs): "x eager" / "x compile",
their time over the layer's.
"""
import argparse
import sys

import torch

from megakernel.tools.bench import copy_bw, eager_and_compiled_us

DEV = torch.device("cuda")


def layer_weights(dm, kd, md, fmt, seed=1):
    """AttnRes, both attentions' and one MoE's weights, as LayerStep takes them."""
    from megakernel.tools import bench, bench_kda, bench_mla, roofline
    g = torch.Generator(DEV).manual_seed(seed)
    d = dm.d
    norm = lambda: (1 + 0.1 * torch.randn(d, generator=g, device=DEV)).to(torch.bfloat16)  # noqa: E731
    w = {"attn_res.norm": norm(), "mlp_res.norm": norm(), "input_norm": norm(),
         "post_attn_norm": norm(),
         "attn_res.proj": (torch.randn(d, generator=g, device=DEV) / d ** 0.5).to(torch.bfloat16),
         "mlp_res.proj": (torch.randn(d, generator=g, device=DEV) / d ** 0.5).to(torch.bfloat16)}
    w.update({"attn." + k: v for k, v in bench_kda.draw_weights(kd, seed).items()})
    w.update({"attn." + k: v for k, v in bench_mla.draw_weights(md, seed).items()})
    w.update({"mlp." + k: v for k, v in bench.draw_weights(dm, fmt, seed).items()})
    return w


def pick_layers(cfg):
    """The first KDA and the first MLA layer with a MoE that writes no block (the common case)."""
    Bk = cfg.attn_res_block_size
    mid = [i for i in range(1, cfg.n_layers) if cfg.is_moe_layer(i) and i % Bk]
    return (next(i for i in mid if cfg.is_kda_layer(i)),
            next(i for i in mid if not cfg.is_kda_layer(i)))


def res_bytes(T, d, nb):
    """The two AttnRes launches: prefix and delta read, prefix written, nb block rows read, the
    output written (pre); prefix and delta read, nb blocks read, the output written (post)."""
    return T * d * 2 * ((3 + nb + 1) + (2 + nb + 1))


def graph_us(fn, R):
    from megakernel.tools.bench_kda import graph_us as g
    return g(fn, R)


def torch_layer(cfg, p, tm, i):
    """k3diff's torch-blocked AttnRes + attention with TorchMoE, as one function of the inputs."""
    from k3diff.backends.blocked import attn_res
    from k3diff.backends.blocked_attn import run_kda, run_mla
    Bk, eps = cfg.attn_res_block_size, cfg.rms_eps
    nb = -(-i // Bk)

    def f(inp):
        xa = attn_res(inp["prefix"], inp["delta"], inp["blocks"], p["attn_res.norm"],
                      p["attn_res.proj"], p["input_norm"], n=nb, write_idx=-1, eps=eps, eps_out=eps)
        if cfg.is_kda_layer(i):
            a = run_kda(cfg, p["kda"], xa, inp["conv_state"], inp["recurrent_state"],
                        inp["state_idx"])["out"]
        else:
            a = run_mla(cfg, p["mla"], xa, inp["kv_cache"], inp["cache_lens"])["out"]
        xm = attn_res(inp["prefix"], a, inp["blocks"], p["mlp_res.norm"], p["mlp_res.proj"],
                      p["post_attn_norm"], n=nb, write_idx=-1, eps=eps, eps_out=eps)
        return tm(xm)
    return f


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="scripts/bench_layer.py",
                                description=__doc__.splitlines()[0])
    p.add_argument("--dims", default="full", choices=("full", "small"))
    p.add_argument("--format", default="bf16", choices=("bf16", "mxfp4"))
    p.add_argument("--batches", default="1,8,64")
    p.add_argument("--len", type=int, default=1024, help="MLA cache rows per sequence")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    a = p.parse_args(argv)
    try:
        batches = [int(b) for b in a.batches.split(",")]
        if min(batches) < 1 or a.len < 0:
            raise ValueError
    except ValueError:
        print("bench_layer: --batches takes positive integers, --len a length >= 0", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("bench_layer: needs a CUDA GPU", file=sys.stderr)
        return 2
    from k3diff.backends.blocked_attn import prepare_kda, prepare_mla
    from megakernel.dims import FULL, KDA_FULL, KDA_SMALL, MLA_FULL, MLA_SMALL, SMALL
    from megakernel.layer import OUTPUTS, LayerStep
    from megakernel.side_stream import other_mode
    from megakernel.tools import bench, bench_kda, bench_mla, roofline
    from megakernel.tools.torch_moe import TorchMoE
    from reference.config import preset
    dm, kd, md = {"full": (FULL, KDA_FULL, MLA_FULL), "small": (SMALL, KDA_SMALL, MLA_SMALL)}[a.dims]
    cfg = preset(a.dims)
    bw = copy_bw()
    machine = roofline.measure(DEV)
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s; {machine.line()}; {a.dims} dims, {a.format} experts, "
          f"MLA cache {a.len} rows")
    w = layer_weights(dm, kd, md, a.format)
    step = LayerStep(cfg, w, DEV)
    attn = {k[5:]: v for k, v in w.items() if k.startswith("attn.")}
    tp = {k: w[k] for k in ("attn_res.norm", "attn_res.proj", "input_norm", "mlp_res.norm",
                            "mlp_res.proj", "post_attn_norm")}
    tp.update(kda=prepare_kda(cfg, attn), mla=prepare_mla(cfg, attn))
    for k in [k for k in w if k.startswith("mlp.")]:
        del w[k]                               # the MoE holds its own (the same tensors)
    tm = TorchMoE(dm, step.moe)
    print(f"{'layer':9} {'T':>4} {'us':>9} {'MB':>8} {'roofline':>9} {'roof2':>8} {'x eager':>8} "
          f"{'x compile':>9}  {'attn us':>8} {'moe us':>8} {'2 AttnRes':>9} {'sum':>8} "
          f"{'other attn':>10}  distinct experts")
    for i in pick_layers(cfg):
        kind = "kda" if cfg.is_kda_layer(i) else "mla"
        nb = -(-i // cfg.attn_res_block_size)
        for T in batches:
            R = 8
            bf = lambda *s: torch.randn(*s, device=DEV).to(torch.bfloat16)  # noqa: E731
            base = dict(layer_idx=i, prefix=bf(T, dm.d), delta=bf(T, dm.d),
                        blocks=bf(T, cfg.n_blocks, dm.d))
            if kind == "kda":
                S = R * T + 1                  # fresh slots for each captured step
                base.update(conv_state=bf(S, 3 * kd.P, kd.W - 1),
                            recurrent_state=torch.randn(S, kd.H, kd.D, kd.D, device=DEV) * 0.1)
                ins = [dict(base, state_idx=torch.arange(1 + r * T, 1 + (r + 1) * T, device=DEV))
                       for r in range(R)]
                attn_b, attn_f = bench_kda.step_bytes(kd, T), bench_kda.step_flops(kd, T)
            else:
                base.update(kv_cache=bf(T, a.len + R + 1, md.C), max_len=a.len + R)
                ins = [dict(base, cache_lens=torch.full((T,), a.len + r, dtype=torch.int64, device=DEV))
                       for r in range(R)]
                attn_b, attn_f = bench_mla.step_bytes(md, T, a.len), bench_mla.step_flops(md, T, a.len)
            out = {n: torch.empty(T, dm.d, dtype=torch.bfloat16, device=DEV) for n in OUTPUTS}
            step.launch(ins[0], out)
            xa, xm = out["x_attn"].clone(), out["x_mlp"].clone()
            nexp = int(step.moe.launch(xm)["nact"][0])
            torch.cuda.synchronize()
            us = graph_us(lambda r: step.launch(ins[r], out), R)
            with other_mode(step.kda if kind == "kda" else step.mla):
                one = graph_us(lambda r: step.launch(ins[r], out), R)   # the other attn mode
            if kind == "kda":
                a_us = graph_us(lambda r: step.kda.launch(xa, ins[r]["conv_state"],
                                                          ins[r]["recurrent_state"],
                                                          ins[r]["state_idx"]), R)
            else:
                a_us = graph_us(lambda r: step.mla.launch(xa, ins[r]["kv_cache"], ins[r]["cache_lens"],
                                                          max_len=a.len + R), R)
            m_us = graph_us(lambda r: step.moe.launch(xm), R)
            res = ins[0]

            def attn_res_pair(r):                # the layer's two AttnRes launches alone
                step._attn_res(step._pre, res["prefix"], res["delta"], res["blocks"],
                               out["x_attn"], nb, -1)
                step._attn_res(step._post, res["prefix"], out["attn_out"], res["blocks"],
                               out["x_mlp"], nb, -1)
            r_us = graph_us(attn_res_pair, R)
            mb = attn_b + bench.step_bytes(dm, a.format, nexp) + res_bytes(T, dm.d, nb)
            te, tc = eager_and_compiled_us(torch_layer(cfg, tp, tm, i), (dict(ins[0]),),
                                           not a.no_compile)
            two = roofline.share(machine, us, mb, attn_f + bench.step_flops(dm, T))   # AttnRes: ~0
            print(f"{kind} {i:<5} {T:>4} {us:9.1f} {mb / 1e6:8.1f} {mb / (us * 1e-6) / bw:8.1%} {two} "
                  f"{te / us:8.2f} {tc / us:9.2f}  {a_us:8.1f} {m_us:8.1f} {r_us:9.1f} "
                  f"{a_us + m_us + r_us:8.1f} {one:10.1f}  {nexp}",
                  flush=True)
            ins = base = out = None        # free before the next batch's buffers
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
