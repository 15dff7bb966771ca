"""CPU: every default kernel at K3's full dims, for the H200 (sm_90a), assembled by ptxas and
disassembled (tools/spills.py): which ones spill inside a hot loop, and by how much, is held to
what was measured (fifteenth session), so that a kernel change that spills in a loop run once per
K block or cache tile shows here, before it is timed. A spill that goes away is good news: lower
the entry. Skipped without nvidia-cutlass-dsl, ptxas or cuobjdump."""
import os
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# kernel (the dump's file name up to its variant) -> the most (STL, LDL) a pass of any of its hot
# loops may hold: the MLA attentions (wg: descriptors held across the tile loop; tma recomputes
# them, k_mla_attn_wg.py `remat`, and still reloads some) and the MoE's one launch at its 80-register cap (tune_persistent `lean`)
KNOWN = {"full__mla_attn_tma": (1, 11), "full__mla_attn_wg": (7, 17),
         "full__persistent": (40, 80)}


def test_default_kernels_spill_in_hot_loops_only_where_known(tmp_path):
    pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")
    from megakernel import config
    from megakernel.tools.spills import cuobjdump, ptx_spills
    if shutil.which("ptxas") is None or cuobjdump() is None:
        pytest.skip("no ptxas or cuobjdump here")
    env = config.child_env(path_first=ROOT, CUTE_DSL_ARCH="sm_90a", MEGAKERNEL_CACHE="off")
    r = subprocess.run([sys.executable, "-m", "megakernel.tools.ptx_dump", "--out", str(tmp_path),
                        "--arch", "sm_90a", "--dims", "full"], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=limit(1200))
    assert r.returncode == 0, r.stderr[-2000:]
    files = sorted(tmp_path.glob("full__*.ptx"))
    assert len(files) > 50, len(files)
    seen, bad = set(), []
    for f in files:
        _, _, _, loops = ptx_spills(f)
        worst = (max((s for *_, s, _ in loops), default=0), max((lo for *_, lo in loops), default=0))
        if worst == (0, 0):
            continue
        key = "__".join(f.stem.split("__")[:2])
        seen.add(key)
        lim = KNOWN.get(key)
        if lim is None or worst[0] > lim[0] or worst[1] > lim[1]:
            bad.append((f.stem, worst, lim))
    assert not bad, bad
    assert seen == set(KNOWN), seen
