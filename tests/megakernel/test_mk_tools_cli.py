"""CPU: the GEMV tools, bench_mla, bench_layer, tune_attn, tune_fork and timeline refuse a machine without a
GPU with one line and exit 2, whatever the arguments; bench_layer, tune_fork and timeline refuse bad
arguments (timeline: bad --modes) with one line and exit 2 on any machine."""
import subprocess
import sys

import pytest

pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")
torch = pytest.importorskip("torch")


@pytest.mark.parametrize("tool,args", [("tune_gemv", []), ("tune_gemv", ["--shapes", "nope"]),
                                       ("gemv_choice", []), ("gemv_choice", ["--steps", "mla"]),
                                       ("bench_mla", []), ("bench_layer", []),
                                       ("tune_attn", []), ("tune_fork", []),
                                       ("timeline", []), ("timeline", ["--step", "kda"])])
def test_gemv_tools_exit_2_with_one_line(tool, args):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the tools would run")
    r = subprocess.run([sys.executable, "-m", f"megakernel.tools.{tool}", *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and "Warning" not in ln]
    assert len(lines) == 1 and "needs a CUDA GPU" in lines[0], r.stderr


@pytest.mark.parametrize("args", [["--batches", "0"], ["--batches", "1,x"], ["--len", "-1"]])
def test_bench_layer_bad_arguments_exit_2_with_one_line(args):
    r = subprocess.run([sys.executable, "-m", "megakernel.tools.bench_layer", *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and "Warning" not in ln]
    assert len(lines) == 1 and lines[0].startswith("bench_layer: --batches"), r.stderr


@pytest.mark.parametrize("args", [["--steps", "moe"], ["--forks", "later"], ["--caps", "-1"],
                                  ["--batches", "0"], ["--R", "x"]])
def test_tune_fork_bad_arguments_exit_2_with_one_line(args):
    r = subprocess.run([sys.executable, "-m", "megakernel.tools.tune_fork", *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and "Warning" not in ln]
    assert len(lines) == 1 and "tune_fork" in lines[0], r.stderr


@pytest.mark.parametrize("args", [["--step", "mla", "--modes", "start"],
                                  ["--step", "kda", "--modes", "after_a/2"],
                                  ["--modes", "fused"], ["--step", "mla", "--modes", "start/x"]])
def test_timeline_bad_modes_exit_2_with_one_line(args):
    r = subprocess.run([sys.executable, "-m", "megakernel.tools.timeline", *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and "Warning" not in ln]
    assert len(lines) == 1 and lines[0].startswith("timeline: --modes"), r.stderr


def test_bench_layer_picks_a_kda_and_an_mla_layer_with_a_moe():
    from megakernel.tools.bench_layer import pick_layers
    from reference.config import preset
    for name in ("full", "small"):
        cfg = preset(name)
        k, m = pick_layers(cfg)
        assert cfg.is_kda_layer(k) and not cfg.is_kda_layer(m)
        assert cfg.is_moe_layer(k) and cfg.is_moe_layer(m)
        assert k % cfg.attn_res_block_size and m % cfg.attn_res_block_size


def test_tune_gemv_variants_build_and_pipe_keeps_the_split():
    """The tuner's variant grid builds through cache.KERNELS["gemv"]; PIPE (double-buffered
    loads) never changes the K split, the knob that decides the bits."""
    from megakernel import cache
    from megakernel.tools.tune_gemv import mma_variants, shapes

    grid = ((2, 4), ((4, 1), (2, 4), (1, 8)), (1, 2), (0,), (0, 1))
    for preset in ("full", "small"):
        for name, shape in shapes(preset).items():
            for T in (1, 64):
                vs = mma_variants(shape, T, grid)
                assert vs, (name, T)
                for v in vs:
                    o = cache.KERNELS["gemv"](shape, **v)
                    assert (o.KS, o.PIPE) == (v["KS"], v["PIPE"])
                    assert o.KS == cache.KERNELS["gemv"](shape, **dict(v, PIPE=0)).KS
