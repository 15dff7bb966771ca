"""GPU: programmatic dependent launch (megakernel/pdl.py) changes no bit. Every step with PDL gives
the bits of the same step without it, on every intermediate and on the caches / states it updates
in place: the MoE in its three launch modes (fork-join, one stream, one launch), MLA and KDA at
full dims in both stream modes, and layers (KDA with the dense MLP, KDA and MLA with the MoE); each also replayed from a
CUDA graph (where PDL turns into programmatic graph edges) several times over."""
from dataclasses import replace

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")

DEV = torch.device("cuda")


def _pdl(steps, on):
    for s in steps:
        s.settings = replace(s.settings, pdl=on)


def _same(ref, got, what):
    assert len(ref) == len(got)
    for i, (a, b) in enumerate(zip(ref, got)):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), (what, i)


def _replayed(run, reset, n=3):
    """run() captured in a CUDA graph (after one eager call), then `reset(); replay` n times: the
    result of the last replay (the tensors run returns, read after the replays)."""
    reset()
    run()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = run()
    for _ in range(n):
        reset()
        g.replay()
    torch.cuda.synchronize()
    return [t.clone() for t in out]


@pytest.mark.parametrize("fmt", ["bf16", "mxfp4"])
@pytest.mark.parametrize("T", [1, 8, 73])
def test_moe_pdl_keeps_the_bits(fmt, T):
    from megakernel.dims import SMALL
    from megakernel.moe import LatentMoE
    from megakernel.tools.bench import draw_weights
    w = draw_weights(SMALL, fmt, seed=1)
    m = LatentMoE(SMALL, w, DEV)
    x = torch.randn(T, SMALL.d, device=DEV).to(torch.bfloat16)
    forced = torch.randint(-1, SMALL.E, (T, SMALL.k), device=DEV)

    def run(f=None):
        s = m.launch(x, forced_ids=f)
        return [v for _, v in sorted(dict(m.debug_outputs(s, T), out=s["out"]).items())]

    for f in (None, forced):
        m.streams = "serial"
        _pdl([m], False)
        ref = [t.clone() for t in run(f)]
        for streams in ("serial", "fork", "persistent"):
            m.streams = streams
            for on in (True, False):
                _pdl([m], on)
                _same(ref, [t.clone() for t in run(f)], (streams, on, f is not None))
    m.streams = "serial"
    _pdl([m], False)
    ref = [t.clone() for t in run()]
    for streams in ("fork", "persistent"):
        m.streams = streams
        _pdl([m], True)
        _same(ref, _replayed(run, lambda: None), ("graph", streams))


@pytest.mark.parametrize("T", [1, 9])
def test_mla_pdl_keeps_the_bits(T):
    from megakernel.dims import MLA_FULL as md
    from megakernel.mla import OUTPUTS, MlaStep
    from megakernel.tools.bench_mla import draw_weights
    step = MlaStep(md, draw_weights(md), DEV)
    g = torch.Generator(DEV).manual_seed(T)
    lens = torch.tensor([(517 * i + 3) % 2300 for i in range(T)], device=DEV)
    kv0 = torch.randn(T, 2304, md.C, generator=g, device=DEV).to(torch.bfloat16)
    x = torch.randn(T, md.d, generator=g, device=DEV).to(torch.bfloat16)
    kv = kv0.clone()

    def run():
        s = step.launch(x, kv, lens, max_len=2300)
        return [s[n] for n in OUTPUTS.values()] + [kv]

    def reset():
        kv.copy_(kv0)

    _pdl([step], False)
    reset()
    ref = [t.clone() for t in run()]
    for streams in ("fused", "fork"):
        step.streams = streams
        _pdl([step], True)
        reset()
        _same(ref, [t.clone() for t in run()], (streams, "eager"))
        _same(ref, _replayed(run, reset), (streams, "graph"))


@pytest.mark.parametrize("T", [1, 9])
def test_kda_pdl_keeps_the_bits(T):
    from megakernel.dims import KDA_FULL as kd
    from megakernel.kda import OUTPUTS, KdaStep
    from megakernel.tools.bench_kda import draw_weights
    step = KdaStep(kd, draw_weights(kd), DEV)
    g = torch.Generator(DEV).manual_seed(T)
    S = T + 2
    conv0 = torch.randn(S, 3 * kd.P, kd.W - 1, generator=g, device=DEV).to(torch.bfloat16)
    rec0 = torch.randn(S, kd.H, kd.D, kd.D, generator=g, device=DEV) * 0.1
    x = torch.randn(T, kd.d, generator=g, device=DEV).to(torch.bfloat16)
    idx = torch.tensor([0 if T > 1 and i == T // 2 else i + 1 for i in range(T)], device=DEV)
    conv, rec = conv0.clone(), rec0.clone()

    def run():
        s = step.launch(x, conv, rec, idx)
        return [s[n] for n in OUTPUTS] + [conv, rec]

    def reset():
        conv.copy_(conv0)
        rec.copy_(rec0)

    _pdl([step], False)
    reset()
    ref = [t.clone() for t in run()]
    for streams in ("fused", "fork"):
        step.streams = streams
        _pdl([step], True)
        reset()
        _same(ref, [t.clone() for t in run()], (streams, "eager"))
        _same(ref, _replayed(run, reset), (streams, "graph"))


@pytest.mark.parametrize("layer", [0, 1, 3], ids=["kda-dense", "kda-moe", "mla-moe"])
def test_layer_pdl_keeps_the_bits(layer):
    from k3diff.case import Case
    from k3diff.materialize import materialize
    from megakernel.backend import MegakernelBackend
    from megakernel.layer import OUTPUTS
    T = 5
    kw = dict(n_slots=T + 2, state_idx=tuple(range(1, T + 1)))
    cfg = Case(stage="layer", preset="small", layer_idx=layer).config()
    if cfg.layer_kind(layer) == "mla":
        kw = dict(cache_lens=tuple(37 * i % 300 for i in range(T)))     # up to 148
    case = Case(stage="layer", preset="small", layer_idx=layer, batch=T, seed=layer, **kw)
    cfg, weights, inputs = materialize(case, "cuda")
    step = MegakernelBackend().prepare(cfg, "layer", weights)
    parts = [m for m in (step, step.kda, step.mla, step.moe, step.dense) if m is not None]
    first = {n: v.contiguous().clone() if torch.is_tensor(v) else v for n, v in inputs.items()}
    work = {n: v.clone() if torch.is_tensor(v) else v for n, v in first.items()}     # updated in place
    if "cache_lens" in work:
        work["max_len"] = int(work["cache_lens"].max())   # known on the host: no sync in a capture
    state = [n for n, v in work.items() if torch.is_tensor(v) and v.dtype != torch.int64]
    d = inputs["prefix"].shape[1]
    out = {n: torch.empty(T, d, dtype=torch.bfloat16, device=DEV) for n in OUTPUTS}

    def run():
        step.launch(work, out)
        return [out[n] for n in OUTPUTS] + [work[n] for n in state]

    def reset():
        for n in state:
            work[n].copy_(first[n])

    _pdl(parts, False)
    reset()
    ref = [t.clone() for t in run()]
    _pdl(parts, True)
    reset()
    _same(ref, [t.clone() for t in run()], "eager")
    _same(ref, _replayed(run, reset), "graph")
