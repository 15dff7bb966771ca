"""CPU: the one-warp KDA core experiment (megakernel/experimental/k_kda_core_warp.py) compiles for
sm_90a and sm_103a, as a CTA of one warp with no CTA barrier; `compile --experimental` builds it
at the KDA step's dims; it takes the shipped core's arguments, so tune_attn binds it to the same
buffers. Its bits against the shipped core's are a GPU check (tune_attn --splits 8,w16,w32)."""
import os
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)
import subprocess
import sys

import pytest

pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

PROBE = """
from megakernel import cache, registry
from megakernel import experimental as X
from megakernel.dims import KDA_SMALL
registry.KERNELS.update(X.kernels())
for sp in X.WARP_SPLITS:
    ptx = cache.compile_kernel("kda_core_warp", KDA_SMALL, fresh=True, split=sp).__ptx__
    print(sp, "bar.sync" in ptx or "barrier.sync" in ptx, ".reqntid 32, 1, 1" in ptx)
ptx = cache.compile_kernel("kda_core", KDA_SMALL, fresh=True, split=8).__ptx__
print("shipped", "bar.sync" in ptx or "barrier.sync" in ptx)
"""


@pytest.mark.parametrize("arch", ["sm_90a", "sm_103a"])
def test_the_one_warp_core_compiles_without_a_cta_barrier(arch, tmp_path):
    env = dict(os.environ, CUTE_DSL_ARCH=arch, CUTE_DSL_KEEP="ptx", CUTE_DSL_DUMP_DIR=str(tmp_path),
               MEGAKERNEL_CACHE=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=limit(300))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    rows = [ln.split() for ln in r.stdout.splitlines()]
    from megakernel.experimental import WARP_SPLITS
    assert [row[0] for row in rows[:-1]] == [str(sp) for sp in WARP_SPLITS]
    assert all(row[1:] == ["False", "True"] for row in rows[:-1]), r.stdout   # one warp, no barrier
    assert rows[-1] == ["shipped", "True"], r.stdout                     # the shipped one has two


def test_compile_experimental_builds_it_at_the_kda_dims_with_the_shipped_arguments():
    from megakernel import compile_list, config
    from megakernel import experimental as X
    from megakernel.dims import KDA_FULL, KDA_SMALL
    from megakernel.experimental.k_kda_core_warp import KdaCoreWarp
    from megakernel.k_kda_core import KdaCore

    got = [(dn, v["split"], dims) for dn, n, v, dims in
           compile_list.entries(["full", "small"], config.current(), X.variants) if n == "kda_core_warp"]
    assert got == [(dn, sp, dims) for dn, dims in (("full", KDA_FULL), ("small", KDA_SMALL))
                   for sp in X.WARP_SPLITS]
    assert KdaCoreWarp.ARGS == KdaCore.ARGS
    with pytest.raises(AssertionError):
        KdaCoreWarp(KDA_FULL, split=3)
