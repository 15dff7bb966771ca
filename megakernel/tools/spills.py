"""python -m megakernel.tools.spills DIR: registers and spills of every kernel in a PTX dump
(`python -m megakernel.tools.ptx_dump --out DIR`), no GPU needed: `ptxas -v` per file, then the
SASS (`cuobjdump -sass`) for the spill instructions inside each hot loop (`loop_spills`).

Spill bytes count every spill instruction once, wherever it is; what costs time is a spill inside
a loop run once per K block or cache tile. A hot loop here holds tensor-core work (HMMA, HGMMA, or
the LDGSTS of a cp.async ring) and no loop of tensor-core math inside; the table gives each one's
local stores / loads (STL / LDL) per pass. `--issue` instead gives each hot loop's warp
instructions per KB of weights it streams and the share of an SM's issue slots that takes at
full read bandwidth (`loop_issue`): a kernel near 100% is bound by its instruction stream, not by
HBM (the MXFP4 experts: lab/spills/). Needs ptxas on PATH and
cuobjdump (CUDA's, or the copy Triton ships). Exit 1 if a file does not assemble, 2 on bad input.
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


_WIDTH = {"128": 16, "64": 8, "U16": 2, "S16": 2, "U8": 1, "S8": 1}
# the H200 as measured (read bandwidth) and as specified (SMs, boost clock), for the
# issue estimate: bytes a clock each SM must take for the chip to read at full bandwidth
READ_TBS, SMS, GHZ = 4.3, 132, 1.98
BYTES_PER_CLK = READ_TBS * 1e12 / SMS / (GHZ * 1e9)


def streamed_bytes(ops):
    """Bytes a warp streams from memory in these SASS instructions: the loads that skip L1, this
    project's mark of weights (`ld.global.nc.L1::no_allocate` -> LDG .NA, `cp.async.cg` -> LDGSTS
    .BYPASS; activations are read through L1 and left out), their width, 32 lanes each;
    predicated ones counted as taken."""
    n = 0
    for o in ops:
        parts = o.split(".")
        if parts[0] in ("LDG", "LDGSTS") and ("NA" in parts or "BYPASS" in parts):
            n += 32 * next((_WIDTH[p] for p in parts[1:] if p in _WIDTH), 4)
    return n


def loop_issue(sass: str):
    """For each hot loop (`loop_spills`'s): (start, end, warp instructions a pass, bytes a warp
    streams a pass (`streamed_bytes`), the share of the SM's issue slots (4 warp instructions a
    clock) its instructions take when the chip streams at full read bandwidth (BYTES_PER_CLK
    per SM); above 1 the loop cannot stream that fast). An estimate from the static code: every
    path of the loop counted once."""
    ins = [(int(a, 16), t) for a, t in _INS.findall(sass)]
    out = []
    for lo, hi, n, _, _ in loop_spills(sass):
        ops = [re.sub(r"^@!?U?P\w+\s+", "", t).split()[0] for a, t in ins if lo <= a <= hi]
        b = streamed_bytes(ops)
        out.append((lo, hi, n, b, n * BYTES_PER_CLK / (4 * b) if b else 0.0))
    return out


def ptx_spills(ptx: Path, arch: str = "sm_90a", issue: bool = False):
    """(registers, spill store bytes, spill load bytes, loop_spills) of one PTX file, and
    loop_issue's list fifth with issue=True."""
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
        res = parse_ptxas(p.stdout + p.stderr) + (loop_spills(o.stdout),)
        return res + (loop_issue(o.stdout),) if issue else res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m megakernel.tools.spills",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="a ptx_dump --out directory")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--all", action="store_true", help="every kernel, not only those that spill")
    ap.add_argument("--issue", action="store_true",
                    help="instead: each hot loop's warp instructions per KB of weights it streams, "
                         "and the share of the SM's issue they take at full read bandwidth")
    a = ap.parse_args(argv)
    files = sorted(Path(a.dir).glob("*.ptx")) if Path(a.dir).is_dir() else []
    if not files:
        print(f"spills: {a.dir} holds no .ptx files (make it with ptx_dump --out)", file=sys.stderr)
        return 2
    if shutil.which("ptxas") is None or cuobjdump() is None:
        print("spills: needs ptxas on PATH and cuobjdump (CUDA's, or Triton's copy)",
              file=sys.stderr)
        return 2
    if a.issue:
        return issue_table(files, a.arch)
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


def issue_table(files, arch):
    print(f"hot loops: warp instructions per KB of weights streamed (loads that skip L1) / the share "
          f"of an SM's 4 issue slots a clock they take at full read bandwidth ({READ_TBS} TB/s over "
          f"{SMS} SMs at {GHZ} GHz: {BYTES_PER_CLK:.1f} B a clock each; over 100%: issue-bound "
          "below it); loops streaming nothing so (TMA, activations only) are left out")
    for f in files:
        try:
            loops = ptx_spills(f, arch, issue=True)[4]
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"spills: {e}", file=sys.stderr)
            return 1
        cells = [f"{1024 * n / b:6.1f}/{share:5.0%}" for _, _, n, b, share in loops if b]
        if cells:
            print(f"{f.stem[:100]:100s} " + " ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
