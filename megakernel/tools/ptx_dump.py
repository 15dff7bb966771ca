"""python -m megakernel.tools.ptx_dump --out DIR [--arch sm_90a] [--dims full,small] [--experimental]
   python -m megakernel.tools.ptx_dump --diff BEFORE AFTER

The PTX of every kernel of the compile list (`python -m megakernel compile`'s), one file per
(dims, kernel, variant), compiled fresh; then `--diff` says which files differ between two dumps.
A refactor that must not change a kernel dumps before and after and diffs: byte-identical
PTX means the same machine code. The kernel's symbol names hold its module path
(`kernel_cutlass_kernel_megakernelk_final_sum...`), so a kernel moved to another module differs in
those names only: `--diff` reports that case apart ("names only")."""
import argparse
import re
import sys
import tempfile
from pathlib import Path


def _label(dn, name, var):
    vs = ",".join(f"{k}={v}" for k, v in sorted(var.items()))
    return re.sub(r"[^A-Za-z0-9_.,=+-]", "_", f"{dn}__{name}__{vs}")


def dump(out, dims_names, experimental=False):
    from megakernel import cache, compile_list, config, registry
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    n = 0
    extra = None
    if experimental:
        from megakernel import experimental as X
        registry.KERNELS.update(X.kernels())
        extra = X.variants
    for dn, name, var, dims in compile_list.entries(dims_names, config.current(), extra):
        fn = cache.compile_kernel(name, dims, fresh=True, **var)
        (out / (_label(dn, name, var) + ".ptx")).write_text(fn.__ptx__)
        n += 1
    print(f"ptx_dump: {n} kernels in {out}")
    return 0


_SYM = re.compile(r"kernel_cutlass_kernel_\w+")


def diff(a, b):
    a, b = Path(a), Path(b)
    fa, fb = {p.name for p in a.glob("*.ptx")}, {p.name for p in b.glob("*.ptx")}
    same = names = 0
    bad = []
    for f in sorted(fa & fb):
        x, y = (a / f).read_text(), (b / f).read_text()
        if x == y:
            same += 1
        elif _SYM.sub("K", x) == _SYM.sub("K", y):
            names += 1
            print(f"names only  {f}")
        else:
            bad.append(f)
            print(f"DIFFERS     {f}")
    for f in sorted(fa - fb):
        print(f"before only {f}")
    for f in sorted(fb - fa):
        print(f"after only  {f}")
    print(f"ptx_dump: {same} identical, {names} differ in symbol names only, {len(bad)} differ, "
          f"{len(fa - fb)} before only, {len(fb - fa)} after only")
    return 1 if bad else 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m megakernel.tools.ptx_dump")
    ap.add_argument("--out")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--dims", default="full,small")
    ap.add_argument("--diff", nargs=2, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--experimental", action="store_true", help="also experimental/'s kernels")
    ap.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.diff:
        return diff(*a.diff)
    if not a.out:
        ap.error("--out DIR (or --diff BEFORE AFTER)")
    if a._child:
        return dump(a.out, a.dims.split(","), a.experimental)
    import subprocess
    from megakernel import config
    with tempfile.TemporaryDirectory() as d:      # the DSL keeps PTX only with a dump folder
        env = config.child_env(CUTE_DSL_ARCH=a.arch, CUTE_DSL_KEEP="ptx", CUTE_DSL_DUMP_DIR=d,
                               MEGAKERNEL_CACHE="off")
        return subprocess.run([sys.executable, "-m", "megakernel.tools.ptx_dump", "--_child",
                               "--out", a.out, "--dims", a.dims] + ["--experimental"] * a.experimental,
                              env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
