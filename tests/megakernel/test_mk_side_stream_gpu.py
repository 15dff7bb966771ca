"""GPU: the attention steps' side stream (megakernel/side_stream.py) changes no bit. The MLA and KDA
steps at full dims, batch 1 and 9, give the same bits in every intermediate and in the caches /
states they update in place, whatever the stream mode (the fused x-side GEMV or its rows in two
launches), the fork point, the cap on the side's grid (a cap below the gate's row tiles makes
its CTAs loop), and under CUDA graph replay."""
import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")

DEV = torch.device("cuda")
# (streams, fork (None: the step's later fork point), cap on the side's grid)
MODES = [("fused", "start", 0), ("fork", "start", 0), ("fork", "start", 1), ("fork", None, 0),
         ("fork", "start", 2)]


def _modes(step, fork_after):
    for streams, fork, cap in MODES:
        step.streams, step.fork, step.side_ctas_per_sm = streams, fork or fork_after, cap
        yield (streams, step.fork, cap)


def _graphed(run):
    """run() captured in a CUDA graph and replayed once (after one eager call: compile)."""
    run()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = run()
    return g, out


def _same(ref, got, what):
    for i, (a, b) in enumerate(zip(ref, got)):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), (what, i)


@pytest.mark.parametrize("T", [1, 9])
def test_mla_modes_keep_the_bits(T):
    from megakernel.dims import MLA_FULL as md
    from megakernel.mla import OUTPUTS, MlaStep
    from megakernel.tools.bench_mla import draw_weights
    step = MlaStep(md, draw_weights(md), DEV)
    g = torch.Generator(DEV).manual_seed(T)
    lens = torch.tensor([(517 * i + 3) % 2300 for i in range(T)], device=DEV)
    kv0 = torch.randn(T, 2304, md.C, generator=g, device=DEV).to(torch.bfloat16)
    x = torch.randn(T, md.d, generator=g, device=DEV).to(torch.bfloat16)

    def run(kv):
        s = step.launch(x, kv, lens, max_len=2300)
        return [s[n].clone() for n in OUTPUTS.values()] + [kv]

    ref = None
    for mode in _modes(step, "after_a"):
        got = run(kv0.clone())
        torch.cuda.synchronize()
        ref = ref or got
        _same(ref, got, mode)
    step.streams, step.fork, step.side_ctas_per_sm = "fork", "start", 1
    kv = kv0.clone()
    graph, _ = _graphed(lambda: step.launch(x, kv, lens, max_len=2300))
    kv.copy_(kv0)
    graph.replay()
    torch.cuda.synchronize()
    s = step._scratch[next(iter(step._scratch))]
    _same(ref, [s[n] for n in OUTPUTS.values()] + [kv], "graph")


@pytest.mark.parametrize("T", [1, 9])
def test_kda_modes_keep_the_bits(T):
    from megakernel.dims import KDA_FULL as kd
    from megakernel.kda import OUTPUTS, KdaStep
    from megakernel.tools.bench_kda import draw_weights
    step = KdaStep(kd, draw_weights(kd), DEV)
    g = torch.Generator(DEV).manual_seed(T)
    S = T + 2
    conv0 = torch.randn(S, 3 * kd.P, kd.W - 1, generator=g, device=DEV).to(torch.bfloat16)
    rec0 = torch.randn(S, kd.H, kd.D, kd.D, generator=g, device=DEV) * 0.1
    x = torch.randn(T, kd.d, generator=g, device=DEV).to(torch.bfloat16)
    # distinct live slots, the middle row null at batch > 1, the last slot owned by no row
    idx = torch.tensor([0 if T > 1 and i == T // 2 else i + 1 for i in range(T)], device=DEV)

    def run(conv, rec):
        s = step.launch(x, conv, rec, idx)
        return [s[n].clone() for n in OUTPUTS] + [conv, rec]

    ref = None
    for mode in _modes(step, "after_in"):
        got = run(conv0.clone(), rec0.clone())
        torch.cuda.synchronize()
        ref = ref or got
        _same(ref, got, mode)
    step.streams, step.fork, step.side_ctas_per_sm = "fork", "start", 1
    conv, rec = conv0.clone(), rec0.clone()
    graph, _ = _graphed(lambda: step.launch(x, conv, rec, idx))
    conv.copy_(conv0)
    rec.copy_(rec0)
    graph.replay()
    torch.cuda.synchronize()
    s = step._scratch[T]
    _same(ref, [s[n] for n in OUTPUTS] + [conv, rec], "graph")
