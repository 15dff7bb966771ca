"""python -m megakernel compile [--arch sm_90a,sm_103a] [--dims full,small] [--experimental] | bench [...]

bench is megakernel/tools/bench.py; the other tools run as `python -m megakernel.tools.<name>`."""
import argparse
import subprocess
import sys
import time

from megakernel.cute_env import ARCHS


def _compile_one_arch(dims_names, experimental):
    # runs in a child whose CUTE_DSL_ARCH is already set
    from megakernel import cache, compile_list, config, registry
    arch = config.dsl_arch()
    extra = None
    if experimental:
        from megakernel import experimental as X
        registry.KERNELS.update(X.kernels())
        extra = X.variants
    ok = True
    for dn, name, var, dims in compile_list.entries(dims_names, config.current(), extra):
        t0 = time.time()
        try:
            # always compiled (this is the check), and stored: it warms the disk cache
            cache.compile_kernel(name, dims, fresh=True, **var)
            status = "ok"
        except Exception as e:  # report and continue: one line per kernel x arch
            status = f"FAIL {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            ok = False
        vs = ",".join(f"{k}={v}" for k, v in var.items())
        print(f"{arch:8s} {dn:5s} {name:12s} {vs:24s} {time.time() - t0:6.2f}s {status}",
              flush=True)
    return ok


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m megakernel")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile", help="compile every kernel for each arch (no GPU needed)")
    c.add_argument("--arch", default="sm_90a,sm_103a")
    c.add_argument("--dims", default="full,small")
    c.add_argument("--experimental", action="store_true",
                   help="also megakernel/experimental/'s kernels (off the shipped path)")
    c.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    b = sub.add_parser("bench", help="time the kernel against torch eager / compile / roofline")
    b.add_argument("--configs", default="full,small")
    b.add_argument("--formats", default="bf16,mxfp4")
    b.add_argument("--batches", default="1,8,64")
    b.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    b.add_argument("--out", help="a folder: the rows also go to OUT/bench.txt as they come")
    a = ap.parse_args(argv)
    if a.cmd == "compile":
        archs, dims = a.arch.split(","), a.dims.split(",")
        if not (archs and set(archs) <= set(ARCHS) and dims and set(dims) <= {"full", "small"}):
            print(f"compile: --arch takes {' and/or '.join(ARCHS)} (the archs these kernels are "
                  f"built and tested for), --dims full and/or small; got --arch {a.arch} --dims "
                  f"{a.dims}", file=sys.stderr)
            return 2
        if a._child:
            return 0 if _compile_one_arch(a.dims.split(","), a.experimental) else 1
        from megakernel import config
        # one child per arch, side by side: compiling is one core's work per kernel, and the two
        # archs on CI's 2 cores take half the time (300 s one after the other, measured there);
        # each line is printed whole and names its arch, so interleaved lines stay readable
        children = [subprocess.Popen([sys.executable, "-m", "megakernel", "compile", "--_child",
                                      "--dims", a.dims] + ["--experimental"] * a.experimental,
                                     env=config.child_env(CUTE_DSL_ARCH=arch))
                    for arch in archs]
        rc = 0
        for child in children:
            rc |= child.wait()
        print("compile:", "all ok" if rc == 0 else "FAILED")
        return 1 if rc else 0
    from megakernel.tools import bench
    return bench.main(a)


if __name__ == "__main__":
    sys.exit(main())
