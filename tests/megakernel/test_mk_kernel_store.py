"""CPU: the disk cache of compiled kernels (megakernel/kernel_store.py). A second process loads
what the first compiled; a corrupt file is compiled again; the cache can be turned off; the key
holds no environment (every setting that changes a binary is in the kernel's variant). (Bit equality of loaded kernels is checked on the GPU:
tests/megakernel/test_mk_gpu.py.)"""
import json
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)
import os
import subprocess
import sys

import pytest

pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KERNELS = [("final_sum", {}), ("route", {"forced": True}), ("gemv_x", {"TT": 1, "U": 4})]

PROBE = """
import json, os, sys
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
from megakernel import cache, kernel_store
from megakernel.dims import SMALL
for name, v in json.loads(sys.argv[1]):
    cache.compiled(name, SMALL, **v)
print(json.dumps({"compiled": len(cache.COMPILE_SECONDS), "loaded": len(cache.LOADED),
                  "prefix": kernel_store.prefix(("final_sum", SMALL, ()))}))
"""


def _run(tmp_path, env=None):
    path = os.environ.get("PYTHONPATH")          # keep a carried CuTe DSL's path (the GPU machine)
    e = dict(os.environ, MEGAKERNEL_CACHE=str(tmp_path / "mk"), PYTHONPATH=ROOT + (os.pathsep + path if path else ""))
    e.update(env or {})
    r = subprocess.run([sys.executable, "-c", PROBE, json.dumps(KERNELS)], cwd=ROOT, env=e,
                       capture_output=True, text=True, timeout=limit(300))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def test_second_process_loads_what_the_first_compiled(tmp_path):
    first, _ = _run(tmp_path)
    assert first["compiled"] == len(KERNELS) and first["loaded"] == 0
    assert len(list((tmp_path / "mk").glob("mk_*.o"))) == len(KERNELS)
    second, _ = _run(tmp_path)
    assert second == dict(first, compiled=0, loaded=len(KERNELS))


def test_corrupt_file_is_compiled_again(tmp_path):
    first, _ = _run(tmp_path)
    (tmp_path / "mk" / f"{first['prefix']}.o").write_bytes(b"not an object file")
    again, err = _run(tmp_path)
    assert again["compiled"] == 1 and again["loaded"] == len(KERNELS) - 1
    assert "does not load" in err and "compiling it again" in err
    third, _ = _run(tmp_path)
    assert third["loaded"] == len(KERNELS)            # the bad file was replaced


def test_off_and_no_environment_in_the_key(tmp_path):
    off, _ = _run(tmp_path, {"MEGAKERNEL_CACHE": "off"})
    assert off["compiled"] == len(KERNELS) and not (tmp_path / "mk").exists()
    base, _ = _run(tmp_path)
    other, _ = _run(tmp_path, {"MK_GEMV_MMA": "0", "MK_PERSIST_UNROLL": "4"})
    assert other["prefix"] == base["prefix"] and other["loaded"] == len(KERNELS)
    sm103, _ = _run(tmp_path, {"CUTE_DSL_ARCH": "sm_103a"})
    assert sm103["prefix"] != base["prefix"]
