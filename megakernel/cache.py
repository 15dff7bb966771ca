"""The compile cache: `compiled(name, dims, **variant)` is the Launch of a kernel of the registry
(registry.py), compiled once per process (each kernel class declares its arguments:
kernel_args.py).

Kernels take raw global pointers (16-byte aligned) and the batch T as a run-time Int32; every model
dimension is a compile-time constant of the Dims the kernel set is built for. `compile_kernel`
needs no GPU (a placeholder address and a fake stream), so the same code builds every kernel on a
CPU-only machine (`python -m megakernel compile`). Compiled functions are kept per process in
_CACHE; `cute.compile` is not thread-safe, so callers compile from one thread.

A disk cache (kernel_store.py) keeps every compiled kernel as an exported object file, so a new
process (an isolated k3diff child, an xdist worker, the next nightly run) loads in milliseconds
what it would otherwise compile again (0.1-3 s a kernel, ~10 s per new set of dims).
"""
import time

from megakernel.cute_env import import_cutlass

import_cutlass()
import cutlass.cute as cute  # noqa: E402
from cutlass.cute.runtime import make_ptr, make_fake_stream  # noqa: E402

from megakernel.device import GMEM  # noqa: E402
from megakernel import fast_call, kernel_store, registry  # noqa: E402
from megakernel.kernel_args import INT, call_values, dtypes, placeholders  # noqa: E402

_CACHE = {}
COMPILE_SECONDS = {}       # key -> seconds, for kernels compiled by this process
LOADED = {}                # key -> seconds, for kernels loaded from the disk cache


def ptr(dtype, addr):
    return make_ptr(dtype, addr, GMEM, assumed_align=16)


class Launch:
    """A compiled kernel with its object: `launch(named, stream, bind)` passes the arguments its
    class declares (ARGS) by name from `named` (kernel_args.call_values); `stream` is a handle
    (int) or a CUstream. After the first call through CuTe DSL, calls go through a checked
    FastCall (fast_call.py) when it can be built."""

    def __init__(self, fn, obj, module=None):
        self.fn, self.obj = fn, obj
        self.module = module      # a loaded object file: must live as long as fn
        self.args = dtypes(obj)
        self.fast = None
        self._tried = not fast_call.enabled()

    def __call__(self, named, stream, bind=None):
        values = call_values(self.args, named, bind)
        if self.fast is not None:
            self.fast(values, int(stream))
            return
        args = [v if t == INT else ptr(t, v) for v, (_, t) in zip(values, self.args)]
        cs = fast_call.cu_stream(stream)
        self.fn(*args, cs)
        if not self._tried:
            self._tried = True
            kinds = ["int" if t == INT else "ptr" for _, t in self.args]
            self.fast = fast_call.FastCall.attach(self.fn, kinds, values, args, cs)


def compiled(name, dims, fresh=False, **variant):
    """The Launch of kernel `name`: from this process's cache, else the disk cache, else compiled
    (and then stored on disk). fresh=True compiles even when the disk holds it."""
    key = (name, dims, tuple(sorted(variant.items())))
    hit = _CACHE.get(key)
    if hit is None:
        obj = registry.KERNELS[name](dims, **variant)
        t0 = time.time()
        stored = None if fresh else kernel_store.load(key)
        if stored is not None:
            LOADED[key] = time.time() - t0
            hit = Launch(stored[0], obj, stored[1])
        else:
            fn = cute.compile(obj, *placeholders(obj, ptr), make_fake_stream())
            COMPILE_SECONDS[key] = time.time() - t0
            kernel_store.store(key, fn)
            hit = Launch(fn, obj)
        _CACHE[key] = hit
    return hit


def compile_kernel(name, dims, fresh=False, **variant):
    """The compiled function of kernel `name` (positional arguments: its ARGS, then a stream)."""
    return compiled(name, dims, fresh, **variant).fn
