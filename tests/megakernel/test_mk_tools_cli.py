"""CPU: the GEMV tools, bench_mla and tune_attn refuse a machine without a GPU with one line and exit 2, whatever the
arguments."""
import subprocess
import sys

import pytest

pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")
torch = pytest.importorskip("torch")


@pytest.mark.parametrize("tool,args", [("tune_gemv", []), ("tune_gemv", ["--shapes", "nope"]),
                                       ("gemv_choice", []), ("gemv_choice", ["--steps", "mla"]),
                                       ("bench_mla", []), ("tune_attn", [])])
def test_gemv_tools_exit_2_with_one_line(tool, args):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the tools would run")
    r = subprocess.run([sys.executable, "-m", f"megakernel.tools.{tool}", *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and "Warning" not in ln]
    assert len(lines) == 1 and "needs a CUDA GPU" in lines[0], r.stderr


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
