"""GPU: the kernel judged by k3diff (check_case with the megakernel backend, small preset), and
bit-equality between its launch modes (fork-join / serial / persistent / fused route / graph
replay)."""
import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")

from k3diff.case import Case  # noqa: E402
from k3diff.runner import check_case  # noqa: E402
from megakernel.backend import MegakernelBackend  # noqa: E402
from megakernel.dims import SMALL  # noqa: E402
from megakernel.moe import LatentMoE  # noqa: E402
from megakernel.tools.bench import draw_weights  # noqa: E402

DEV = torch.device("cuda")
_W = {}


def weights(fmt):
    if fmt not in _W:
        _W[fmt] = draw_weights(SMALL, fmt, seed=1)
    return _W[fmt]


def judge(T, fmt, routing="natural", seed=0):
    """k3diff's verdict on the megakernel backend for one moe case of the small preset (every
    intermediate against the reference, with k3diff's controls)."""
    case = Case(stage="moe", preset="small", batch=T, routing=routing, expert_format=fmt,
                seed=seed)
    v = check_case(case, MegakernelBackend(), device="cuda")
    assert not v.skipped, v.skipped
    assert v.ok, v.failures()
    return v


def snapshot(m, s, T):
    """Every intermediate k3diff compares, and the output, copied out of m's scratch `s`."""
    return {n: v.clone() for n, v in dict(m.debug_outputs(s, T), out=s["out"]).items()}


def assert_graph_replay_equals(m, x, want, poison=("out", "so", "yn", "hl"), replays=1):
    """m's step captured in a CUDA graph over scratch poisoned with NaN (the replay must rewrite
    it all): after `replays` replays every intermediate equals `want` bit for bit."""
    T = x.shape[0]
    s = m.scratch(T)
    for n in poison:
        s[n].fill_(float("nan"))
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        m.launch(x)
    for _ in range(replays):
        g.replay()
    torch.cuda.synchronize()
    got = snapshot(m, s, T)
    for n in want:
        assert torch.equal(got[n], want[n]), f"graph replay {n}"


@pytest.mark.parametrize("fmt", ["bf16", "mxfp4"])
@pytest.mark.parametrize("T", [1, 8, 64, 73])
def test_natural_routing(fmt, T):
    judge(T, fmt)


@pytest.mark.parametrize("fmt", ["bf16", "mxfp4"])
@pytest.mark.parametrize("routing", ["forced", "dropped"])
def test_forced_ids(fmt, routing):
    judge(8, fmt, routing)


def test_exact_ties_lower_id_wins():
    judge(4, "bf16", "ties")


def test_deterministic_and_batch_invariant():
    dm = SMALL
    w = weights("mxfp4")
    moe = LatentMoE(dm, w, DEV)
    x = torch.randn(64, dm.d, device=DEV).to(torch.bfloat16)
    a = moe.launch(x)["out"].clone()
    b = moe.launch(x)["out"].clone()
    assert torch.equal(a, b)
    one = moe.launch(x[5:6].contiguous())["out"].clone()
    assert torch.equal(one[0], a[5])


def test_backend_run_writes_every_output():
    """Every output buffer written (NaN / -7 poison gone); the values are judged by k3diff in the
    tests above."""

    class Cfg:
        hidden, n_experts, top_k, n_group, topk_group = 1024, 112, 16, 1, 1
        moe_intermediate, latent_dim, n_shared, routed_scaling_factor = 256, 512, 2, 2.5
        renormalize, rms_eps, situ_beta, situ_linear_beta = True, 1e-5, 4.0, 25.0

    be = MegakernelBackend()
    assert be.available() is None
    w = weights("bf16")
    prep = be.prepare(Cfg, "moe", w)
    x = torch.randn(5, 1024, device=DEV).to(torch.bfloat16)
    shapes = {"out": (5, 1024), "router_logits": (5, 112), "topk_ids": (5, 16),
              "topk_weights": (5, 16), "latent": (5, 512), "combined": (5, 512),
              "latent_normed": (5, 512), "routed_out": (5, 1024), "shared_out": (5, 1024)}
    dt = {"router_logits": torch.float32, "topk_weights": torch.float32, "topk_ids": torch.int32}
    out = {n: torch.full(s, float("nan"), device=DEV).to(dt.get(n, torch.bfloat16))
           if n != "topk_ids" else torch.full(s, -7, dtype=torch.int32, device=DEV)
           for n, s in shapes.items()}
    be.run("moe", Cfg, prep, {"x": x}, out)
    torch.cuda.synchronize()
    for n, t in out.items():
        assert torch.isfinite(t.float()).all(), n
    assert (out["topk_ids"] >= 0).all()


@pytest.mark.parametrize("T", [1, 8, 73])
def test_mxfp4_cuda_core_path_still_works(T, monkeypatch):
    """The v2 CUDA-core MXFP4 experts (Settings.moe.mx_mma off) stay selectable and correct."""
    from dataclasses import replace

    from megakernel import config
    base = config.current()
    off = replace(base, moe=replace(base.moe, mx_mma=False))
    assert LatentMoE(SMALL, weights("mxfp4"), DEV).uses_mma() == base.moe.mx_mma
    assert not LatentMoE(SMALL, weights("mxfp4"), DEV, settings=off).uses_mma()
    monkeypatch.setattr(config, "current", lambda: off)     # the backend's steps take it
    judge(T, "mxfp4")


def test_mxfp4_batch_invariant_every_position():
    """Each token alone equals its row inside a batch of 13 (pairs land in every mma column)."""
    w = weights("mxfp4")
    moe = LatentMoE(SMALL, w, DEV)
    x = torch.randn(13, SMALL.d, device=DEV).to(torch.bfloat16)
    full = moe.launch(x)["out"].clone()
    for t in range(13):
        one = moe.launch(x[t:t + 1].contiguous())["out"].clone()
        assert torch.equal(one[0], full[t]), t


@pytest.mark.parametrize("T", [1, 8, 9, 64])
def test_mxfp4_down_variants_same_bits(T):
    """The down launch's variant changes with the batch and the card (k_expert_mma.down_variant):
    each variant it can pick, and one more (two row tiles a warp), forced at every batch class
    gives the same y and out bit for bit, so the switch at WIDE_T cannot break batch invariance
    and a seed replays bit for bit on either card."""
    from dataclasses import replace

    from megakernel import config, k_expert_mma
    w = weights("mxfp4")
    base = config.current()
    x = torch.randn(T, SMALL.d, device=DEV).to(torch.bfloat16)
    s = LatentMoE(SMALL, w, DEV).launch(x)
    want = {n: s[n].clone() for n in ("y", "out")}
    for v in k_expert_mma.down_variants() + [dict(U=1, WPC=4, MT=2, PF=128, S=4)]:
        st = replace(base, moe=replace(base.moe, down=tuple(sorted(v.items()))))
        moe = LatentMoE(SMALL, w, DEV, settings=st)
        for n in want:
            moe.scratch(T)[n].fill_(float("nan"))
        got = moe.launch(x)
        for n in want:
            assert torch.equal(got[n], want[n]), (v, n)


@pytest.mark.parametrize("fmt", ["bf16", "mxfp4"])
@pytest.mark.parametrize("T", [1, 8])
def test_fork_join_equals_one_stream_and_graph(fmt, T):
    """The two-stream step, its CUDA-graph replay and the one-stream order agree bit for bit on
    every intermediate (a missing fork or join would read a stale or half-written buffer)."""
    w = weights(fmt)
    fork = LatentMoE(SMALL, w, DEV)
    serial = LatentMoE(SMALL, w, DEV, streams="serial")
    x = torch.randn(T, SMALL.d, device=DEV).to(torch.bfloat16)
    want = snapshot(serial, serial.launch(x), T)
    for fk, gate, cap in (("start", "none", 2), ("after_x", "up", 0), ("start", "down", 1),
                          ("after_route", "down", 0), ("after_schedule", "none", 0)):
        fork.fork, fork.gate, fork.side_ctas_per_sm = fk, gate, cap
        got = snapshot(fork, fork.launch(x), T)
        for n in want:
            assert torch.equal(got[n], want[n]), (fk, gate, cap, n)
    assert_graph_replay_equals(fork, x, want)


def test_unknown_stream_mode_is_one_line_error():
    with pytest.raises(ValueError, match="streams must be one of"):
        LatentMoE(SMALL, weights("bf16"), DEV, streams="three")
    with pytest.raises(ValueError, match="gate must be one of"):
        LatentMoE(SMALL, weights("bf16"), DEV, gate="later")


@pytest.mark.parametrize("fmt", ["bf16", "mxfp4"])
@pytest.mark.parametrize("T", [1, 8, 73])
def test_persistent_launch_equals_eleven_launches(fmt, T):
    """The one-launch step (k_persistent.py) computes the 11-launch step's bits on every
    intermediate, natural and forced routing, with or without a CUDA graph, launch after launch
    (its last CTA must reset the counters), under every order knob tried."""
    from megakernel.plan import Order
    w = weights(fmt)
    ref = LatentMoE(SMALL, w, DEV, streams="serial")
    one = LatentMoE(SMALL, w, DEV, streams="persistent")
    x = torch.randn(T, SMALL.d, device=DEV).to(torch.bfloat16)
    forced = torch.randint(-1, SMALL.E, (T, SMALL.k), device=DEV)
    for f in (None, forced):
        want = snapshot(ref, ref.launch(x, forced_ids=f), T)
        for order, cps in ((Order(), 3), (Order(backfill=0.0, min_backfill=1, groups=3,
                                                 gemv_tiles=2, shared_first=0), 1),
                           (Order(backfill=1.0, groups=32, shared_first=3), 7)):
            one.order, one.ctas_per_sm = order, cps
            for _ in range(2):
                got = snapshot(one, one.launch(x, forced_ids=f), T)
                for n in want:
                    assert torch.equal(got[n], want[n]), (order, cps, n)
    one.order, one.ctas_per_sm = Order(), 3
    assert_graph_replay_equals(one, x, snapshot(ref, ref.launch(x), T), replays=3)
    one.check_persistent()
    assert int(one._sync.abs().sum()) == 0, "counters not reset by the last CTA"


@pytest.mark.parametrize("fmt", ["bf16", "mxfp4"])
@pytest.mark.parametrize("T", [1, 73])
def test_persistent_lean_build_equals_eleven_launches(fmt, T):
    """The one launch built with lean tensor-core GEMV tasks (config.Persist.mma_gemv: U = 1,
    the K loop rolled; tune_persistent's `lean`) computes the 11-launch step's bits, natural
    and forced routing, launch after launch."""
    from dataclasses import replace
    from megakernel import config
    s = config.current()
    lean = replace(s, moe=replace(s.moe, persist=replace(
        s.moe.persist, mma_gemv=(("U", 1), ("lean", 1)))))
    w = weights(fmt)
    ref = LatentMoE(SMALL, w, DEV, streams="serial")
    one = LatentMoE(SMALL, w, DEV, streams="persistent", settings=lean)
    x = torch.randn(T, SMALL.d, device=DEV).to(torch.bfloat16)
    forced = torch.randint(-1, SMALL.E, (T, SMALL.k), device=DEV)
    for f in (None, forced):
        want = snapshot(ref, ref.launch(x, forced_ids=f), T)
        for _ in range(2):
            got = snapshot(one, one.launch(x, forced_ids=f), T)
            for n in want:
                assert torch.equal(got[n], want[n]), n
    one.check_persistent()


@pytest.mark.parametrize("stage,queue,counter", [("COMBINE", "routed", "expert_down"),
                                                  ("OUT_SHARED", "shared", "shared_act")])
def test_persistent_watchdog_names_a_broken_wait(stage, queue, counter):
    """A dependency that can never be met (planted in the plan table: the stage waits for one
    task too many) ends in the one-line error naming the waiting task and the counter, with its
    count one short of the target, not a hung GPU."""
    import re
    from megakernel import plan as P
    from megakernel.experimental import launch_persistent
    w = weights("bf16")
    one = LatentMoE(SMALL, w, DEV, streams="persistent")
    x = torch.randn(1, SMALL.d, device=DEV).to(torch.bfloat16)
    one.launch(x)
    one.check_persistent()
    st = getattr(P, stage)
    pl = launch_persistent.task_table(one, 1, SMALL.k)
    assert pl[P.DEPS + 8 * st] == P.DONE + P.STAGES.index(counter)   # the plant's premise
    pl[P.DEPS + 8 * st + 1] += 1
    one.launch(x)
    torch.cuda.synchronize()
    with pytest.raises(RuntimeError) as e:
        one.check_persistent()
    m = re.search(rf"gave up on {queue} ticket \d+ \({P.STAGES[st]} task \d+\): it waited on "
                  rf"DONE\+{counter} .*stood at (\d+) of (\d+)", str(e.value))
    assert m, str(e.value)
    assert int(m.group(1)) + 1 == int(m.group(2)) == int(pl[P.DEPS + 8 * st + 1]), str(e.value)


@pytest.mark.parametrize("fmt", ["bf16", "mxfp4"])
def test_kernels_loaded_from_disk_equal_compiled(fmt, tmp_path, monkeypatch):
    """The disk cache (kernel_store.py): a step on kernels loaded from their exported object files
    gives the same bits as on freshly compiled ones."""
    from megakernel import cache, config
    monkeypatch.setenv("MEGAKERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(config, "current", config.from_env)     # the environment as set here
    monkeypatch.setattr(cache, "_CACHE", {})
    monkeypatch.setattr(cache, "LOADED", {})
    x = torch.randn(8, SMALL.d, device=DEV).to(torch.bfloat16)
    m = LatentMoE(SMALL, weights(fmt), DEV)
    want = snapshot(m, m.launch(x), 8)            # compiled here, stored in tmp_path
    cache._CACHE.clear()
    got = snapshot(m, m.launch(x), 8)             # loaded from tmp_path
    assert cache.LOADED, "nothing was loaded from the disk cache"
    for n in want:
        assert torch.equal(got[n], want[n]), n


@pytest.mark.parametrize("fmt", ["bf16", "mxfp4"])
def test_fast_call_equals_cutedsl_call(fmt, monkeypatch):
    """fast_call.py: after its first call through CuTe DSL, every kernel of the step launches
    through its checked packed-argument call, with the same bits as CuTe DSL's own call path on
    every intermediate (batch 1 and 8, natural and forced routing, fork-join and one launch)."""
    from megakernel import cache, config, fast_call
    w = weights(fmt)
    forced = torch.randint(-1, SMALL.E, (8, SMALL.k), device=DEV)

    def steps():
        got = []
        for streams in ("fork", "persistent"):
            m = LatentMoE(SMALL, w, DEV, streams=streams)
            for T in (1, 8):
                x = torch.randn(T, SMALL.d, device=DEV, generator=torch.Generator(DEV).manual_seed(T)
                                ).to(torch.bfloat16)
                for f in (None, forced[:T]):
                    for _ in range(2):          # the first call of a kernel is CuTe DSL's
                        got.append(snapshot(m, m.launch(x, forced_ids=f), T))
        return got

    monkeypatch.setattr(cache, "_CACHE", {})
    monkeypatch.setattr(config, "current", config.from_env)     # the environment as set here
    monkeypatch.setenv(fast_call.ENV, "0")
    want = steps()
    assert all(launch.fast is None for launch in cache._CACHE.values())
    cache._CACHE.clear()
    monkeypatch.setenv(fast_call.ENV, "1")
    got = steps()
    assert all(launch.fast is not None for launch in cache._CACHE.values()), \
        [k[0] for k, launch in cache._CACHE.items() if launch.fast is None]
    for i, (a, b) in enumerate(zip(want, got)):
        for n in a:
            assert torch.equal(a[n], b[n]), (i, n)


def test_fast_call_refuses_what_it_cannot_check(capsys):
    """A FastCall whose values or argument kinds disagree with the argument array CuTe DSL builds
    for the same call is not built (one line on stderr; the caller keeps CuTe DSL's path): here a
    pointer 16 bytes off, then one argument left out."""
    from megakernel import cache, fast_call
    from megakernel.kernel_args import INT, call_values
    m = LatentMoE(SMALL, weights("bf16"), DEV, streams="serial")
    x = torch.zeros(2, SMALL.d, device=DEV, dtype=torch.bfloat16)
    named = m.buffers(x, m.launch(x))
    launch = next(v for k, v in cache._CACHE.items() if k[0] == "final_sum")
    values = call_values(launch.args, named)
    args = [v if t == INT else cache.ptr(t, v) for v, (_, t) in zip(values, launch.args)]
    kinds = ["int" if t == INT else "ptr" for _, t in launch.args]
    cs = fast_call.cu_stream(torch.cuda.current_stream().cuda_stream)
    assert fast_call.FastCall.attach(launch.fn, kinds, values, args, cs) is not None
    off = [values[0] + 16] + values[1:]
    assert fast_call.FastCall.attach(launch.fn, kinds, off, args, cs) is None
    assert "a ptr argument differs" in capsys.readouterr().err
    assert fast_call.FastCall.attach(launch.fn, kinds[:-1], values[:-1], args, cs) is None
    assert "C arguments for" in capsys.readouterr().err
