"""python -m megakernel.tools.persistent_regs: which task bodies of the MoE's one launch
(k_persistent.py) spill at its register cap; no GPU needed.

The one launch runs every stage's body in one kernel of 256 threads with `.minnctapersm 3`, so
ptxas caps it at 80 registers, and the kernel needs what its hungriest body needs. For the whole
kernel, for the scheduler alone and for each stage's body alone (PersistentStep(only=...): the
other bodies compiled out), this compiles the PTX in a child process (CUTE_DSL_KEEP=ptx, the disk
cache off) and prints what `ptxas -arch=<arch> -v` reports: registers and spill bytes. Needs
`ptxas` on PATH (CUDA's, as on the CPU and GPU machines). The tasks should fit the
register budget without spilling; this table says which do not.

Spill bytes count every spill instruction once, wherever it is; what costs time is a spill inside
a hot loop, run once per K block. `--loops` (needs `cuobjdump`: CUDA's, or the copy Triton ships)
also disassembles the kernel and counts the local-memory stores and loads (STL / LDL) inside its
innermost loops that hold tensor-core instructions (HMMA, or the cp.async of the expert ring):
the GEMV and expert bodies' K loops (tools/spills.py's `loop_spills`, which tabulates every
kernel of a PTX dump the same way).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

from megakernel import config
from megakernel.tools.spills import cuobjdump, loop_spills, parse_ptxas

CHILD = """
from megakernel import cache, config, gemv
from megakernel.dims import FULL, SMALL
dm = {{"full": FULL, "small": SMALL}}[{dims!r}]
persist = config.Persist(mma_gemv={mma_gemv!r}, ctas={ctas!r})
cache.compile_kernel("persistent", dm, fmt={fmt!r}, forced=False, T1={t1}, persist=persist,
                     gemv_mma=gemv.moe_mma(config.current().gemv.mma), only={only!r})
"""


def measure(dims, fmt, t1, only, arch, mma_gemv=(), loops=False, ctas=3):
    """ptxas's (registers, spill stores, spill loads) for one variant; with loops=True also
    loop_spills of its SASS (a fourth item)."""
    with tempfile.TemporaryDirectory() as d:
        # the child imports this very tree (not whatever an editable install points at)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = config.child_env(path_first=root, CUTE_DSL_KEEP="ptx", CUTE_DSL_DUMP_DIR=d,
                               CUTE_DSL_ARCH=arch, MEGAKERNEL_CACHE="off")
        code = CHILD.format(dims=dims, fmt=fmt, t1=t1, only=tuple(only), mma_gemv=mma_gemv,
                            ctas=ctas)
        r = subprocess.run([sys.executable, "-c", code], env=env, cwd=d, capture_output=True,
                           text=True, timeout=900)
        if r.returncode:
            raise RuntimeError(f"compile failed: {r.stderr.strip().splitlines()[-1:]}")
        ptx = [f for f in os.listdir(d) if f.endswith(".ptx")]
        if len(ptx) != 1:
            raise RuntimeError(f"expected one PTX file, found {ptx}")
        p = subprocess.run(["ptxas", f"-arch={arch}", "-v", os.path.join(d, ptx[0]), "-o",
                            os.path.join(d, "k.cubin")], capture_output=True, text=True,
                           timeout=900)
        if p.returncode:
            raise RuntimeError(f"ptxas failed: {p.stderr.strip().splitlines()[-1:]}")
        res = parse_ptxas(p.stdout + p.stderr)
        if not loops:
            return res
        o = subprocess.run([cuobjdump(), "-sass", os.path.join(d, "k.cubin")],
                           capture_output=True, text=True, timeout=900)
        if o.returncode:
            raise RuntimeError(f"cuobjdump failed: {o.stderr.strip().splitlines()[-1:]}")
        return res + (loop_spills(o.stdout),)


def main(argv=None) -> int:
    from megakernel import plan as P
    ap = argparse.ArgumentParser(prog="python -m megakernel.tools.persistent_regs",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--dims", default="full", choices=("full", "small"))
    ap.add_argument("--formats", default="bf16,mxfp4")
    ap.add_argument("--classes", default="1", help="batch classes: 1 and/or many (T > 1)")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--ctas", default="3",
                    help="CTAs per SM the launch is built for, 1-4 (config.Persist.ctas: the "
                         "register cap)")
    ap.add_argument("--loops", action="store_true",
                    help="also the spill instructions inside the hot innermost loops (cuobjdump)")
    ap.add_argument("--mma-gemv", default="",
                    help="knobs over its tensor-core GEMVs, e.g. PIPE=0,U=1 (config.Persist; never KS)")
    a = ap.parse_args(argv)
    try:
        mma_gemv = tuple((k, int(v)) for k, v in (kv.split("=") for kv in a.mma_gemv.split(",") if kv))
    except ValueError:
        mma_gemv = None
    if mma_gemv is None or any(k == "KS" for k, _ in mma_gemv):
        print("persistent_regs: --mma-gemv KNOB=INT,... (not KS: it decides the bits)", file=sys.stderr)
        return 2
    if a.ctas not in ("1", "2", "3", "4"):
        print("persistent_regs: --ctas takes 1, 2, 3 or 4", file=sys.stderr)
        return 2
    a.ctas = int(a.ctas)
    fmts, classes = a.formats.split(","), a.classes.split(",")
    if not set(fmts) <= {"bf16", "mxfp4"} or not set(classes) <= {"1", "many"}:
        print("persistent_regs: --formats bf16,mxfp4; --classes 1,many", file=sys.stderr)
        return 2
    if shutil.which("ptxas") is None:
        print("persistent_regs: needs ptxas on PATH (CUDA's)", file=sys.stderr)
        return 2
    if a.loops and cuobjdump() is None:
        print("persistent_regs: --loops needs cuobjdump (CUDA's, or Triton's copy)",
              file=sys.stderr)
        return 2
    rows = [("whole kernel", ())] + [("scheduler alone", (-1,))] + [
        (f"{name} alone", (st,)) for st, name in enumerate(P.STAGES)]
    print(f"ptxas -arch={a.arch} -v, {a.dims} dims{', ' + a.mma_gemv if a.mma_gemv else ''}: registers / "
          f"spill store bytes / spill load bytes (cap: 256 threads, {a.ctas} CTAs per SM)"
          + ("; hot innermost loops: count, STL / LDL per pass of each" if a.loops else ""))
    for fmt in fmts:
        for c in classes:
            print(f"{fmt}, batch {'1' if c == '1' else '> 1'}")
            for label, only in rows:
                try:
                    m = measure(a.dims, fmt, c == "1", only, a.arch, mma_gemv, a.loops, a.ctas)
                except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
                    print(f"persistent_regs: {label}: {e}", file=sys.stderr)
                    return 1
                hot = ""
                if a.loops:
                    hot = f"  {len(m[3]):2d}: " + " ".join(f"{s}/{l}" for _, _, _, s, l in m[3])
                print(f"  {label:22s} {m[0]:4d} {m[1]:6d} {m[2]:6d}{hot}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
