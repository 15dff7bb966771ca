"""The disk cache of compiled kernels: one exported object file per kernel variant.

`cute.compile` keeps nothing across processes, and k3diff starts many: one isolated child per
xdist worker, a fresh child after every crash, one process per nightly shard. Each would compile
every kernel of every dims it meets again (0.1-3 s a kernel; ~10 s for a new set of dims). So a
compiled kernel is exported (`export_to_c`: an object file holding the host launcher and the
cubin; no GPU needed) and later loaded (`cute.runtime.load_module`, milliseconds).

The file name is a hash of everything that decides the binary: the kernel name, dims and variant,
the target arch (CUTE_DSL_ARCH), the CuTe DSL version and the source of every module in megakernel/
(any edit to a kernel changes every name: stale binaries are never loaded, only left behind); no
other environment, since every setting that changes a binary is in its variant (config.py).
Where: Settings.kernel_cache ($MEGAKERNEL_CACHE), default ~/.cache/k3diff/megakernel; off turns
it off. Files are written to a temporary name and renamed, so parallel
processes never read half a file; a file that does not load is compiled again and replaced.
"""
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
_DIGEST = None


def directory() -> Path | None:
    """The cache directory, or None when the cache is off."""
    from megakernel import config
    where = config.current().kernel_cache
    if where.lower() in ("off", "0", "none"):
        return None
    return Path(where).expanduser() if where else Path.home() / ".cache" / "k3diff" / "megakernel"


def _digest() -> str:
    """What every kernel's binary depends on besides its own key (computed once per process)."""
    global _DIGEST
    if _DIGEST is None:
        import cutlass

        from megakernel import config
        h = hashlib.sha256()
        h.update(f"{cutlass.__version__}|{config.dsl_arch()}".encode())
        # the kernels' modules (experimental/'s too: its kernels are stored), not tools/
        for f in sorted([*HERE.glob("*.py"), *HERE.glob("experimental/*.py")]):
            h.update(str(f.relative_to(HERE)).encode() + f.read_bytes())
        _DIGEST = h.hexdigest()
    return _DIGEST


def prefix(key) -> str:
    """The symbol prefix and file stem of a kernel key (a C identifier)."""
    return "mk_" + hashlib.sha256((_digest() + repr(key)).encode()).hexdigest()[:24]


def load(key):
    """(function, module) from the disk cache, or None (absent, cache off, or unreadable)."""
    d = directory()
    if d is None:
        return None
    name = prefix(key)
    path = d / f"{name}.o"
    if not path.is_file():
        return None
    try:
        import cutlass.cute as cute

        module = cute.runtime.load_module(str(path))
        return getattr(module, name), module
    except Exception as e:  # noqa: BLE001 - a bad file is compiled again, never fatal
        print(f"megakernel: cached kernel {path.name} does not load ({type(e).__name__}); compiling it again",
              file=sys.stderr)
        return None


def store(key, fn) -> None:
    """Export `fn` under its key (atomically). A cache that cannot be written is skipped."""
    d = directory()
    if d is None:
        return
    name = prefix(key)
    tmp = None
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp = tempfile.mkdtemp(dir=d, prefix=".tmp-")
        fn.export_to_c(tmp, name, name)
        os.replace(os.path.join(tmp, f"{name}.o"), d / f"{name}.o")
    except Exception as e:  # noqa: BLE001 - read-only home, full disk: run on without the cache
        print(f"megakernel: kernel cache {d} not written ({type(e).__name__}: {e})".splitlines()[0],
              file=sys.stderr)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
