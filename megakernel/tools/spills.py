"""python -m megakernel.tools.spills DIR: registers and spills of every kernel in a PTX dump
(`python -m megakernel.tools.ptx_dump --out DIR`), no GPU needed: `ptxas -v` per file, then the
SASS (`cuobjdump -sass`) for the spill instructions inside each hot loop (`loop_spills`).

Spill bytes count every spill instruction once, wherever it is; what costs time is a spill inside
a loop run once per K block or cache tile. A hot loop here holds tensor-core work (HMMA, HGMMA, or
the LDGSTS of a cp.async ring) and no loop of tensor-core math inside; the table gives each one's
local stores / loads (STL / LDL) per pass. Needs ptxas on PATH and cuobjdump (CUDA's, or the copy
Triton ships). Exit 1 if a file does not assemble, 2 on bad input.
"""
import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


_REGS = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def parse_ptxas(text):
    """(registers, spill store bytes, spill load bytes) from `ptxas -v` output; ValueError if
    it has no register line."""
    r = _REGS.search(text)
    if r is None:
        raise ValueError("ptxas -v printed no register count")
    s = _SPILL.search(text)
    return int(r.group(1)), int(s.group(1)) if s else 0, int(s.group(2)) if s else 0


def cuobjdump():
    """CUDA's cuobjdump: on PATH, else the copy Triton ships (found without importing Triton);
    None if neither."""
    found = shutil.which("cuobjdump")
    if found is None:
        spec = importlib.util.find_spec("triton")
        for d in (spec.submodule_search_locations or []) if spec else []:
            cand = os.path.join(d, "backends", "nvidia", "bin", "cuobjdump")
            if os.access(cand, os.X_OK):
                return cand
    return found


_INS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BACK = re.compile(r"\bBRA\s+(?:`?\(?\S+,\s*)?0x([0-9a-f]+)")
_HOT = ("HMMA", "HGMMA", "LDGSTS")


def loop_spills(sass: str):
    """The hot loops of a SASS listing (`cuobjdump -sass`), a loop being a backward branch's
    range: those that hold tensor-core work (HMMA, HGMMA, or the LDGSTS of a cp.async ring) and
    no loop of tensor-core math (HMMA, HGMMA) inside (a spin on an mbarrier or a copy loop
    inside does not count):
    [(start, end, instructions, STL, LDL)]."""
    ins = [(int(a, 16), t) for a, t in _INS.findall(sass)]
    loops = set()
    for a, t in ins:
        m = _BACK.search(t)
        if m and int(m.group(1), 16) < a:
            loops.add((int(m.group(1), 16), a))
    ops = {}
    for lo, hi in loops:
        ops[lo, hi] = [re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0]
                       for a, t in ins if lo <= a <= hi]
    hot = {k for k, o in ops.items() if any(x in _HOT for x in o)}
    mma = {k for k in hot if any(x in _HOT[:2] for x in ops[k])}
    out = []
    for lo, hi in sorted(hot):
        if any(lo <= l2 and h2 <= hi and (l2, h2) != (lo, hi) for l2, h2 in mma):
            continue                                   # holds a loop of tensor-core math
        o = ops[lo, hi]
        out.append((lo, hi, len(o), o.count("STL"), o.count("LDL")))
    return out


def ptx_spills(ptx: Path, arch: str = "sm_90a"):
    """(registers, spill store bytes, spill load bytes, loop_spills) of one PTX file."""
    with tempfile.TemporaryDirectory() as d:
        cubin = os.path.join(d, "k.cubin")
        p = subprocess.run(["ptxas", f"-arch={arch}", "-v", str(ptx), "-o", cubin],
                           capture_output=True, text=True, timeout=900)
        if p.returncode:
            raise RuntimeError(f"ptxas failed on {ptx.name}: {p.stderr.strip().splitlines()[-1:]}")
        o = subprocess.run([cuobjdump(), "-sass", cubin], capture_output=True, text=True,
                           timeout=900)
        if o.returncode:
            raise RuntimeError(f"cuobjdump failed on {ptx.name}: {o.stderr.strip()[-200:]}")
        return parse_ptxas(p.stdout + p.stderr) + (loop_spills(o.stdout),)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m megakernel.tools.spills",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="a ptx_dump --out directory")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--all", action="store_true", help="every kernel, not only those that spill")
    a = ap.parse_args(argv)
    files = sorted(Path(a.dir).glob("*.ptx")) if Path(a.dir).is_dir() else []
    if not files:
        print(f"spills: {a.dir} holds no .ptx files (make it with ptx_dump --out)", file=sys.stderr)
        return 2
    if shutil.which("ptxas") is None or cuobjdump() is None:
        print("spills: needs ptxas on PATH and cuobjdump (CUDA's, or Triton's copy)",
              file=sys.stderr)
        return 2
    print(f"ptxas -arch={a.arch} -v: registers / spill store / spill load bytes; hot loops: "
          "STL / LDL per pass of each")
    n = spilling = 0
    for f in files:
        try:
            regs, st, ld, loops = ptx_spills(f, a.arch)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"spills: {e}", file=sys.stderr)
            return 1
        n += 1
        hot = sum(s + lo for *_, s, lo in loops)
        spilling += bool(st or ld)
        if a.all or st or ld:
            print(f"{f.stem[:110]:110s} {regs:4d} {st:6d} {ld:6d}  "
                  + " ".join(f"{s}/{lo}" for *_, s, lo in loops)
                  + ("  <- in a hot loop" if hot else ""))
    print(f"spills: {n} kernels, {spilling} spill")
    return 0


if __name__ == "__main__":
    sys.exit(main())
