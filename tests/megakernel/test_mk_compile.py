"""CPU: every shipped kernel compiles for the H200 (sm_90a) and GB300 (sm_103a), no GPU needed: here
at the small dims; scripts/test compiles them at the full dims, with the experiments, beside its
test steps (each set once in CI)."""
import os
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)
import subprocess
import sys

import pytest

pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.long
@pytest.mark.parametrize("arch", ["sm_90a", "sm_103a"])
def test_compile_all_kernels(arch):
    r = subprocess.run([sys.executable, "-m", "megakernel", "compile", "--arch", arch,
                        "--dims", "small"], cwd=ROOT, capture_output=True, text=True, timeout=limit(600))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith(arch)]
    assert lines and all(ln.endswith(" ok") for ln in lines), r.stdout


def test_backend_imports_without_cutlass_side_effects():
    from megakernel.backend import MegakernelBackend
    b = MegakernelBackend()
    assert b.name == "megakernel" and b.stages == ("moe", "kda", "mla", "layer")
    assert "out" in b.provides("moe") and len(b.provides("moe")) == 9
    from k3diff.stages import OUTPUTS
    assert b.provides("kda") == {spec.name for spec in OUTPUTS["kda"]}
    assert b.provides("mla") == {spec.name for spec in OUTPUTS["mla"]}
    assert b.provides("layer") == {spec.name for spec in OUTPUTS["layer"]}
    with pytest.raises(KeyError, match="moe, kda, mla and layer"):
        b.provides("nope")
    from reference.config import preset
    assert b.supports(preset("small"), "kda") is None and b.supports(preset("full"), "kda") is None
    assert "kda_head_dim % 32" in b.supports(preset("tiny"), "kda")        # D 16: skipped, not run
    reason = b.available()
    assert reason is None or isinstance(reason, str) and "\n" not in reason


def test_declared_boundaries_follow_the_kernels_constants():
    """dims.BOUNDARIES copies the kernels' path-changing sizes (dims.py imports no cutlass):
    this ties each copy to the constant it copies, so a retuned tile or thread count cannot leave
    the fuzzer drawing around stale sizes."""
    from dataclasses import replace

    from megakernel import gemv, k_route, k_schedule
    from megakernel.dims import BOUNDARIES, FULL, MAX_T, SMALL
    from megakernel.k_expert import TT_EXPERT
    from megakernel.k_expert_mma import WIDE_T, fits
    from megakernel.k_route import Route

    assert set(BOUNDARIES["batch"]) == {1, TT_EXPERT, gemv.TT_GEMV, gemv.GEMV_PASS, MAX_T}
    assert WIDE_T in BOUNDARIES["batch"]
    assert all(v[1]["NTT"] * 8 == gemv.GEMV_PASS for v in gemv.MMA_GEMV.values())
    threads = k_route.THREADS
    assert k_schedule.NT == threads
    assert BOUNDARIES["n_experts"] == (threads, 2 * threads)
    for E, ept in ((threads, 1), (threads + 1, 2), (2 * threads + 1, 3)):   # the paths the sizes split
        assert Route(replace(SMALL, E=E), False).EPT == ept
    assert 128 in BOUNDARIES["latent_dim"] and 128 in BOUNDARIES["moe_intermediate"]
    assert not fits(replace(SMALL, r=128 + 32)) and fits(replace(SMALL, r=128))
    assert {SMALL.r, FULL.r} <= set(BOUNDARIES["latent_dim"]) and {SMALL.I, FULL.I} <= set(BOUNDARIES["moe_intermediate"])
    assert BOUNDARIES["top_k"] == (1, FULL.k)
    from megakernel import k_mla_attn as at
    assert BOUNDARIES["cache_len"] == (at.CH_SHORT - 1, at.SHORT - 1)


def test_kda_core_split_builds_for_every_batch_class():
    """kda_core's split (CTAs per head) differs by batch class; every warp must still own whole
    state rows for any head width the dims allow (D % 32 == 0)."""
    from dataclasses import replace

    from megakernel import k_kda_core, registry
    from megakernel.dims import KDA_SMALL

    for D in (32, 64, 96, 128, 160, 256):
        for T in (1, 2, 300):
            o = registry.KERNELS["kda_core"](replace(KDA_SMALL, D=D), **k_kda_core.variant(T))
            assert (D // o.split) % (D // 32) == 0


def test_mla_attention_kernel_choice(monkeypatch):
    """The tensor-core attention unless Settings.attn.mla_mma is off, and only for dims it
    takes; on sm_90a the wgmma one unless Settings.attn.mla_wg is off (MK_MLA_MMA=sync), on
    sm_103a (no wgmma) always mma.sync; the step's split count follows the kernel's splits."""
    from dataclasses import replace

    from megakernel import config, registry
    from megakernel.config import Attn
    from megakernel.dims import MLA_FULL
    from megakernel.k_mla_attn import CH, max_splits
    from megakernel.k_mla_attn_mma import attention_kernel, split_rows
    from megakernel.k_mla_attn_wg import CH_LONG

    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    assert attention_kernel(MLA_FULL, Attn(mla_mma=False)) == "mla_attn"
    assert attention_kernel(MLA_FULL, Attn()) == "mla_attn_tma"
    # wgmma's tiles, but a warpgroup's 224 latent columns are no whole 128-byte blocks: cp.async
    assert attention_kernel(replace(MLA_FULL, R=448), Attn()) == "mla_attn_wg"
    assert attention_kernel(MLA_FULL, Attn(mla_wg=False)) == "mla_attn_mma"
    assert attention_kernel(replace(MLA_FULL, R=480), Attn()) == "mla_attn"     # R % 64 != 0
    assert attention_kernel(replace(MLA_FULL, R=1024), Attn()) == "mla_attn_mma"  # > 256 per group
    assert config.from_env({"MK_MLA_MMA": "sync"}).attn == Attn(mla_wg=False)
    assert config.from_env({"MK_MLA_MMA": "wg"}).attn == Attn(mla_wg=True)
    assert config.from_env({}).attn == Attn()
    assert split_rows("mla_attn_wg") == CH_LONG == split_rows("mla_attn_tma")
    assert split_rows("mla_attn_mma") == CH
    assert max_splits(32769, CH_LONG) == 65 and max_splits(32769) == 129
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_103a")
    assert attention_kernel(MLA_FULL, Attn()) == "mla_attn_mma"
    o = registry.KERNELS["mla_attn_mma"](MLA_FULL)
    assert o.groups * 16 * o.mtc >= MLA_FULL.H and o.hg == o.mtc * o.ncol


def test_mla_split_count_covers_every_shorter_sequence():
    """The MLA split size depends on the sequence's own length (batch invariance), so the grid's
    split count for a batch must cover every length up to its longest, across the switch."""
    from megakernel import k_mla_attn as at

    def own(n):
        ch = at.CH_SHORT if n <= at.SHORT else at.CH
        return -(-n // ch)
    need = 0
    for n in range(1, 3 * at.SHORT):
        need = max(need, own(n))
        assert at.max_splits(n) == need, n
    assert at.max_splits(at.SHORT) == at.SHORT // at.CH_SHORT and at.max_splits(at.SHORT + 1) == 32


def test_tensor_core_gemvs_keep_one_sum_order_per_gemv():
    """The K split count decides a tensor-core GEMV's bits (k_gemv_mma.py). Both batch classes
    and the persistent launch's 8-warp tasks must get the same effective split for every shape,
    or batch invariance / bit-identity across launch modes would break."""
    from dataclasses import replace

    from megakernel import gemv
    from megakernel.config import ALL_GEMVS, KDA_GEMVS, MOE_GEMVS, Gemv
    from megakernel.dims import FULL, KDA_FULL, KDA_SMALL, MLA_FULL, MLA_SMALL, SMALL

    moe_dims = [FULL, SMALL, replace(SMALL, d=96, r=160, Is=224), replace(SMALL, d=1056, Is=320)]
    for name in ALL_GEMVS:
        dims = (moe_dims if name in MOE_GEMVS else [KDA_FULL, KDA_SMALL]
                if name in KDA_GEMVS else [MLA_FULL, MLA_SMALL])
        for dm in dims:
            objs = [gemv.obj(name, dm, **gemv.variant(name, T, Gemv())) for T in (1, 9, 300)]
            objs += [gemv.obj(name, dm, **gemv.variant(name, T, Gemv(), threads=256))
                     for T in (1, 9)]
            assert len({(o.KS, o.BK) for o in objs}) == 1, (name, dm)
            assert all(o.WPC == 8 for o in objs[3:]), (name, dm)      # one CTA of 256 threads


def test_wgmma_is_laid_over_the_attention_gemvs_at_batch_above_8_on_hopper_only(monkeypatch):
    """gemv.variant lays gemv.WGMMA (wgmma, 4 row warps per split) over the batch > 8 variant of
    the GEMVs in WGMMA_GEMVS only, never at batch <= 8, never on a persistent task, never with
    config.Gemv.wgmma off, never where wgmma does not run (sm_103a), and never changes the split;
    the objects built from it are warpgroup-shaped."""
    from megakernel import gemv
    from megakernel.config import ALL_GEMVS, KDA_GEMVS, MLA_GEMVS, Gemv
    from megakernel.dims import KDA_FULL, MLA_FULL, FULL

    assert set(gemv.WGMMA_GEMVS) == set(KDA_GEMVS + MLA_GEMVS)
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    for name in ALL_GEMVS:
        dm = KDA_FULL if name in KDA_GEMVS else MLA_FULL if name in MLA_GEMVS else FULL
        mma = gemv.variant(name, 64, Gemv(wgmma=False))
        got = gemv.variant(name, 64, Gemv())
        assert got == (dict(mma, **gemv.WGMMA) if name in gemv.WGMMA_GEMVS else mma), name
        assert "WG" not in gemv.variant(name, 8, Gemv())
        assert "WG" not in gemv.variant(name, 64, Gemv(), threads=256)
        o = gemv.obj(name, dm, **got)
        assert o.KS == gemv.obj(name, dm, **mma).KS
        if name in gemv.WGMMA_GEMVS:
            assert o.WG == 1 and o.RT % 4 == 0 and o.threads == 32 * o.RT * o.KS
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_103a")
    assert all("WG" not in gemv.variant(n, 64, Gemv()) for n in ALL_GEMVS)
    assert gemv.obj("kda_out", KDA_FULL, **dict(gemv.variant("kda_out", 64, Gemv()), **gemv.WGMMA)).WG == 0


def test_gemv_kernel_choice_parses_and_defaults():
    from megakernel import config, gemv
    from megakernel.config import ALL_GEMVS, MOE_GEMVS, Gemv

    mma = lambda v: config.from_env({"MK_GEMV_MMA": v}).gemv.mma  # noqa: E731
    assert mma("0") == () and mma("1") == ALL_GEMVS
    assert mma("kda_out,gemv_x") == ("gemv_x", "kda_out")
    assert config.from_env({}).gemv.mma == Gemv().mma == ALL_GEMVS
    with pytest.raises(ValueError, match="MK_GEMV_MMA"):
        mma("kda_in,nope")
    assert "TT" in gemv.variant("gemv_x", 1, Gemv(mma=())) and "NTT" in gemv.variant(
        "gemv_x", 1, Gemv(mma=("gemv_x",)))
    assert gemv.variant("gemv_x", 2, Gemv(mma=(), unroll=(("gemv_x", 8),)))["U"] == 8
    assert gemv.moe_mma(ALL_GEMVS) == MOE_GEMVS


def test_layer_plan_follows_the_spec():
    """layer.plan against docs/k3-decode.md §2.3's counts: the pre-attention mix has ceil(i / Bk) + 1
    sources, the post-attention one ceil(i / Bk) + [i % Bk == 0] + 1; a block-write layer writes
    block i / Bk, which the pre-attention mix does not read (it is the prefix source)."""
    from megakernel.layer import plan

    for Bk in (1, 4, 12):
        for i in range(40):
            nb, W, wi = plan(i, Bk)
            assert nb + 1 == -(-i // Bk) + 1 and (nb + int(W)) + 1 == -(-i // Bk) + (i % Bk == 0) + 1
            assert W == (i % Bk == 0) and wi == (i // Bk if W else -1)
            assert wi < 0 or wi >= nb          # never among the sources 0 .. nb - 1


def test_bench_swaps_restore_the_settings():
    """The benches' side-by-side columns run a step on a second settings object for a block;
    the step's own comes back afterwards, also when the block raises, and the process's
    settings are never touched."""
    from types import SimpleNamespace

    from megakernel import config
    from megakernel.config import ALL_GEMVS, KDA_GEMVS, Settings
    from megakernel.tools.bench import other_gemv_kernel

    step = SimpleNamespace(settings=Settings())
    with other_gemv_kernel([step], KDA_GEMVS):
        assert step.settings.gemv.mma == ()
    assert step.settings == Settings()
    with pytest.raises(RuntimeError):
        with other_gemv_kernel([step], KDA_GEMVS):
            raise RuntimeError
    assert step.settings == Settings()
    assert config.Gemv(mma=()).other(KDA_GEMVS).mma == ALL_GEMVS
    assert config.current() == config.from_env()


def test_mla_wgmma_walks_write_every_split_once():
    """k_mla_attn_wg.py's walks, emulated with the kernel's index arithmetic (host: W and the grid;
    CTA z: rows [R0, R1), a split ending every ch / TR tiles, then the empty splits): for any batch
    size, every split of every length gets exactly one partial, its tiles are exactly its rows,
    and a split past the sequence is written empty."""
    from megakernel import k_mla_attn_wg as wg
    from megakernel.k_mla_attn import CH_SHORT, SHORT, max_splits

    for n_max in (1, 64, 65, 2048, 2049, 8193, 32769):
        NS = max_splits(n_max, wg.CH_LONG)
        for T in (1, 8, 64):
            Wh = max(1, (2 * T * NS) // (wg.WAVES * wg.SMS))
            gz = -(-NS // Wh)
            W = -(-NS // gz)
            for n in sorted({1, 63, 64, 65, n_max // 2 + 1, n_max}):
                if n > n_max:
                    continue
                ch = CH_SHORT if n <= SHORT else wg.CH_LONG
                TPS = ch // wg.TR
                written = {}
                for z in range(gz):
                    R0, R1 = z * W * ch, min(z * W * ch + W * ch, n)
                    ntiles = -(-(R1 - R0) // wg.TR) if R1 > R0 else 0
                    rows = []
                    for j in range(ntiles):
                        rows.append(R0 + wg.TR * j)
                        if j % TPS == TPS - 1 or j + 1 == ntiles:
                            s = z * W + j // TPS
                            assert s not in written
                            written[s] = rows
                            rows = []
                    for w in range(-(-ntiles // TPS), W):
                        if z * W + w < NS:
                            assert z * W + w not in written
                            written[z * W + w] = []
                assert sorted(written) == list(range(NS)), (n_max, T, n)
                for s, rows in written.items():
                    want = list(range(s * ch, min((s + 1) * ch, n), wg.TR))
                    assert rows == want, (n_max, T, n, s)


def test_the_down_launch_is_chosen_by_card_and_batch(monkeypatch):
    """k_expert_mma.down_variant: registers at every batch on a card the table does not name (the
    H200's measured choice), the H100's ring up to WIDE_T and 8 warps above; the fork-join's
    expert launches ask the cache for exactly that variant, and a tuner's Settings.moe.down wins."""
    from dataclasses import replace

    from megakernel import cache, config, k_expert_mma as km, launch_streams
    from megakernel.dims import MAX_T, SMALL

    h100, h200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
    for T in (1, 8, 9, 64, MAX_T):
        assert km.down_variant(T, h200) == km.DOWN == km.down_variant(T)
        assert km.down_variant(T, h100) == (km.DOWN_RING if T <= km.WIDE_T else km.DOWN_WIDE)
    assert km.down_variants() == [km.DOWN, km.DOWN_RING, km.DOWN_WIDE]
    asked = []
    monkeypatch.setattr(cache, "compiled", lambda name, dm, **kw: asked.append((name, kw)))

    class Moe:
        dm, settings, card = SMALL, config.current(), h100

        def uses_mma(self):
            return True

    moe = Moe()
    for T in (8, 9):
        launch_streams.expert_launches(moe, T)
    downs = [kw for name, kw in asked if name == "expert_down_mma"]
    assert downs == [km.DOWN_RING, km.DOWN_WIDE]
    moe.settings = replace(moe.settings, moe=replace(moe.settings.moe, down=tuple(sorted(km.DOWN.items()))))
    asked.clear()
    launch_streams.expert_launches(moe, 9)
    assert [kw for name, kw in asked if name == "expert_down_mma"] == [km.DOWN]
