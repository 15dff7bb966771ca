"""CPU: the GEMV tools, bench_mla, bench_verify, bench_layer, tune_attn, tune_fork, timeline and ep_time refuse
a machine without a GPU with one line and exit 2, whatever the arguments; bench_layer, tune_fork,
persistent_regs, timeline, ep_time and `megakernel compile` (an arch or dims it does not build)
refuse bad arguments (timeline: bad --modes) with one line and exit 2 on any machine."""
import os
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")
torch = pytest.importorskip("torch")


ROOT = Path(__file__).resolve().parents[2]


def _env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))


def _warning(line):
    return not line.strip() or "Warning" in line


_ZYGOTE = []


@pytest.fixture(scope="module", autouse=True)
def _close_zygote():
    yield
    while _ZYGOTE:
        _ZYGOTE.pop().close()


def _zygote():
    """One process that has imported torch and CuTe DSL, forking a child per tool run
    (forked_tools.py: ~3.5 s of CPU saved a run); started on first use, once per module."""
    if not _ZYGOTE:
        import tempfile
        from forked_tools import Zygote
        z = Zygote(_env(), tempfile.mkdtemp(prefix="k3diff-tools-"))
        _ZYGOTE.append(z)
        # what a fresh interpreter would print importing them, and the fork does not repeat
        assert all(_warning(ln) for ln in z.import_stderr.splitlines()), z.import_stderr
    return _ZYGOTE[0]


def refused(tool, args):
    """The tool's stderr lines (warnings aside) after it exits 2; fails on any other exit.
    bench_layer is scripts/bench_layer.py (it imports k3diff and reference)."""
    cmd = ([str(ROOT / "scripts" / "bench_layer.py")] if tool == "bench_layer" else
           ["-m", "megakernel", "bench"] if tool == "megakernel bench" else
           ["-m", "megakernel", "compile"] if tool == "megakernel compile" else
           ["-m", f"megakernel.tools.{tool}"])
    code, _, err = _zygote().run([*cmd, *args])
    assert code == 2, err[-2000:]
    return [ln for ln in err.splitlines() if not _warning(ln)]


@pytest.mark.parametrize("tool,args", [("tune_gemv", []), ("tune_gemv", ["--shapes", "nope"]),
                                       ("gemv_choice", []), ("gemv_choice", ["--steps", "mla"]),
                                       ("bench_mla", []), ("bench_kda", []), ("bench_layer", []),
                                       ("bench_verify", []), ("bench_verify", ["--widths", "9"]),
                                       ("megakernel bench", []),
                                       ("tune_attn", []), ("tune_fork", []),
                                       ("timeline", []), ("timeline", ["--step", "kda"]),
                                       ("ep_time", []), ("ep_time", ["--ranks", "2,3", "--dims", "full,small"])])
def test_gemv_tools_exit_2_with_one_line(tool, args):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the tools would run")
    lines = refused(tool, args)
    assert len(lines) == 1 and "needs a CUDA GPU" in lines[0], lines


@pytest.mark.parametrize("tool,args,start", [
    ("bench_layer", ["--batches", "0"], "bench_layer: --batches"),
    ("bench_layer", ["--batches", "1,x"], "bench_layer: --batches"),
    ("bench_layer", ["--len", "-1"], "bench_layer: --batches"),
    ("tune_fork", ["--steps", "moe"], "tune_fork: --steps"),
    ("tune_fork", ["--forks", "later"], "tune_fork: --steps"),
    ("tune_fork", ["--caps", "-1"], "tune_fork: --steps"),
    ("tune_fork", ["--batches", "0"], "tune_fork: --steps"),
    ("tune_fork", ["--R", "x"], "tune_fork: --steps"),
    ("persistent_regs", ["--mma-gemv", "KS=2"], "persistent_regs: --mma-gemv"),
    ("persistent_regs", ["--mma-gemv", "PIPE"], "persistent_regs: --mma-gemv"),
    ("persistent_regs", ["--ctas", "5"], "persistent_regs: --ctas"),
    ("spills", ["/nonexistent/dump"], "spills: /nonexistent/dump holds no .ptx"),
    ("timeline", ["--step", "mla", "--modes", "start"], "timeline: --modes"),
    ("timeline", ["--step", "kda", "--modes", "after_a/2"], "timeline: --modes"),
    ("timeline", ["--modes", "fused"], "timeline: --modes"),
    ("timeline", ["--step", "mla", "--modes", "start/x"], "timeline: --modes"),
    ("ep_time", ["--dims", "huge"], "ep_time: --dims"),
    ("ep_time", ["--ranks", "2,x"], "ep_time: --dims"),
    ("ep_time", ["--ranks", "2", "--batches", "600"], "ep_time: --dims"),
    ("megakernel compile", ["--arch", "sm_77"], "compile: --arch takes"),
    ("megakernel compile", ["--arch", "sm_90a,"], "compile: --arch takes"),
    ("megakernel compile", ["--dims", "huge"], "compile: --arch takes"),
])
def test_bad_arguments_exit_2_with_one_line(tool, args, start):
    lines = refused(tool, args)
    assert len(lines) == 1 and lines[0].startswith(start), lines


def test_bench_layer_picks_a_kda_and_an_mla_layer_with_a_moe():
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_layer", ROOT / "scripts" / "bench_layer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    pick_layers = mod.pick_layers
    from reference.config import preset
    for name in ("full", "small"):
        cfg = preset(name)
        k, m = pick_layers(cfg)
        assert cfg.is_kda_layer(k) and not cfg.is_kda_layer(m)
        assert cfg.is_moe_layer(k) and cfg.is_moe_layer(m)
        assert k % cfg.attn_res_block_size and m % cfg.attn_res_block_size


def test_tune_gemv_variants_build_and_pipe_keeps_the_split():
    """The tuner's variant grid builds through registry.KERNELS["gemv"]; PIPE (double-buffered
    loads) and WG (wgmma) never change the K split, the knob that decides the order of the sum."""
    from megakernel import registry
    from megakernel.tools.tune_gemv import mma_variants, shapes

    grid = ((2, 4), ((4, 1), (2, 4), (1, 8)), (1, 2), (0,), (0, 1), (0, 1))
    for preset in ("full", "small"):
        for name, shape in shapes(preset).items():
            for T in (1, 64):
                vs = mma_variants(shape, T, grid)
                assert vs, (name, T)
                for v in vs:
                    o = registry.KERNELS["gemv"](shape, **v)
                    assert (o.KS, o.PIPE, o.WG) == (v["KS"], v["PIPE"], v["WG"])
                    assert o.KS == registry.KERNELS["gemv"](shape, **dict(v, PIPE=0, WG=0)).KS


def test_persistent_regs_reads_ptxas_and_refuses_bad_arguments():
    from megakernel.tools.spills import parse_ptxas
    out = ("ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
           "    224 bytes stack frame, 676 bytes spill stores, 652 bytes spill loads\n"
           "ptxas info    : Used 80 registers, used 1 barriers, 224 bytes cumulative stack size\n")
    assert parse_ptxas(out) == (80, 676, 652)
    assert parse_ptxas("ptxas info    : Used 32 registers, used 1 barriers") == (32, 0, 0)
    with pytest.raises(ValueError, match="no register count"):
        parse_ptxas("nothing")
    lines = refused("persistent_regs", ["--formats", "fp8"])
    assert len(lines) == 1 and lines[0].startswith("persistent_regs: --formats"), lines


def test_persistent_regs_measures_one_variant():
    """One real row, small dims: the scheduler with every body compiled out fits without a
    spill (a child compile, then ptxas -v)."""
    import shutil
    if shutil.which("ptxas") is None:
        pytest.skip("no ptxas on PATH")
    from megakernel.tools.persistent_regs import measure
    regs, st, ld = measure("small", "bf16", True, (-1,), "sm_90a")
    assert 0 < regs <= 80 and st == ld == 0


def test_tune_gemv_compiles_its_kernels_without_a_gpu(tmp_path):
    """--compile-only: the kernels a run would time (the CUDA-core GEMV, each tensor-core variant
    and its batch-invariance form) compiled into the cache on a CPU, so a GPU call only times;
    a bad argument still exits 2 with one line."""
    env = dict(os.environ, MEGAKERNEL_CACHE=str(tmp_path), PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    args = ["--compile-only", "--preset", "small", "--shapes", "kda_fb", "--batches", "1",
            "--own-ks", "--U", "1", "--RTKS", "2x2,4x2", "--PIPE", "0,1"]
    r = subprocess.run([sys.executable, "-m", "megakernel.tools.tune_gemv", *args],
                       capture_output=True, text=True, timeout=limit(600), env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "tune_gemv: 5 kernels compiled"   # 1 + 4 variants
    assert len(list(tmp_path.rglob("*.o"))) == 5
    lines = refused("tune_gemv", ["--compile-only", "--shapes", "nope"])
    assert len(lines) == 1 and "unknown shape 'nope'" in lines[0], lines


SASS = """
        /*0100*/                   LDG.E.NA.128.CONSTANT R4, desc[UR6][R2.64] ;
        /*0110*/                   STL.64 [R1+0x10], R4 ;
        /*0120*/                   HMMA.16816.F32.BF16 R8, R12, R16, R8 ;
        /*0130*/                   LDL R5, [R1+0x10] ;
        /*0140*/              @!P0 BRA 0x100 ;
        /*0150*/                   FFMA R1, R2, R3, R4 ;
        /*0160*/                   LDL R6, [R1+0x14] ;
        /*0170*/               @P1 BRA `(.L_x_3), 0x150 ;
        /*0180*/                   HMMA.16816.F32.BF16 R8, R12, R16, R8 ;
        /*0190*/                   BRA 0x80 ;
"""


def test_loop_spills_counts_spills_inside_hot_innermost_loops():
    """0x100-0x140 (HMMA: hot, innermost) holds one STL and one LDL; 0x150-0x170 has no tensor
    work; 0x80-0x190 holds the others, so is not innermost."""
    from megakernel.tools.spills import loop_spills
    assert loop_spills(SASS) == [(0x100, 0x140, 5, 1, 1)]


@pytest.mark.parametrize("ctas,U,t1", [(3, 1, True), (1, 4, True), (1, 4, False)])
def test_lean_gemv_tasks_do_not_spill_in_their_k_loops(ctas, U, t1):
    """The persistent launch's tensor-core GEMV tasks built lean (the K loop rolled:
    config.Persist.mma_gemv, tune_persistent's `lean` and `lean1/SM`), full dims, MXFP4 (the
    format whose default GEMV loops spill): no spill instruction in any hot loop of the whole
    kernel, at 3 CTAs a SM with U = 1 (batch 1) and at 1 CTA a SM with U = 4 (both batch
    classes) (ptxas, then cuobjdump; lab/spills/)."""
    import shutil
    from megakernel.tools.spills import cuobjdump
    from megakernel.tools.persistent_regs import measure
    pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")
    if shutil.which("ptxas") is None or cuobjdump() is None:
        pytest.skip("no ptxas or cuobjdump here")
    regs, _, _, loops = measure("full", "mxfp4", t1, (), "sm_90a", (("U", U), ("lean", 1)),
                                loops=True, ctas=ctas)
    assert regs <= 65536 // (256 * ctas) and len(loops) >= 5, (regs, loops)
    assert all(st == ld == 0 for *_, st, ld in loops), loops


def test_loop_issue_counts_the_weights_a_loop_streams():
    """The hot loop of SASS above streams one 128-bit no-allocate load a pass (32 lanes: 512
    bytes) over 5 instructions; a load through L1 (an activation) would not count."""
    from megakernel.tools.spills import BYTES_PER_CLK, loop_issue, streamed_bytes
    assert loop_issue(SASS) == [(0x100, 0x140, 5, 512, 5 * BYTES_PER_CLK / (4 * 512))]
    assert streamed_bytes(["LDG.E.128.CONSTANT", "LDGSTS.E.BYPASS.LTC128B.128", "LDG.E.NA.U8"]) \
        == 32 * (16 + 1)
