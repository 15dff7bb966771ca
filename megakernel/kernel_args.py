"""Each kernel's argument list, declared once, as `ARGS` on its class.

ARGS: (name, type) pairs in call order. type is a cutlass dtype (the argument is a 16-byte
aligned global pointer to it), the name of an instance attribute holding that dtype (when the
variant decides it, e.g. a weight format: "wdt"), or INT (a run-time Int32: the batch T, or a grid
size). HOST_ONLY: the names the launch uses but the kernel does not take (e.g. maxU, the grid's
y extent). Names are those of the step's buffers (moe.LatentMoE.buffers) or run-time ints; a
generic kernel used for several stages (Gemv, the experts) is bound to buffers per stage
(launch_streams.BIND). From ARGS:
- cache.compile_kernel builds the placeholder arguments (`placeholders`),
- the launchers build each call from a dict of named buffers (`call_values`),
- `declare` writes the signatures of the class's `@cute.jit __call__` (ARGS, then the stream) and
  `@cute.kernel kernel` (ARGS less HOST_ONLY, then KERNEL_EXTRA).

Why the signatures are written by `declare` and not in the source: CuTe DSL makes one typed IR
parameter per Python parameter it finds in `inspect.signature` of the function (annotations give
the types: cute.Pointer, Int32). A `@cute.jit` function accepts `*args`, but a `@cute.kernel`
function does not (it asserts one named parameter per argument). `inspect.signature` honours
`__signature__`, so the functions are written `(self, *a)` and get their explicit signature from
ARGS here: the same parameters, annotations and order as the hand-written lists they replace,
hence the same PTX (checked: every variant's PTX hash before and after).
"""
import inspect
import types
from types import SimpleNamespace

from megakernel.device import cute, Int32
import cuda.bindings.driver as _cuda

INT = "int"


def dtypes(obj):
    """[(name, dtype or INT)] of a kernel object, instance attributes resolved."""
    return [(n, getattr(obj, t) if isinstance(t, str) and t != INT else t) for n, t in obj.ARGS]


def placeholders(obj, ptr):
    """Compile-time stand-ins: Int32(1) for INT, ptr(dtype, 256) for pointers."""
    return [Int32(1) if t == INT else ptr(t, 256) for _, t in dtypes(obj)]


def call_values(args, named, bind=None):
    """The run-time values of a launch, in ARGS order (`args`: `dtypes(obj)`), from `named`
    (buffer name -> a tensor, or an int for INT): a pointer argument's address, an INT's value;
    `bind` maps an argument name to the buffer name it takes when they differ (a generic kernel
    used for several stages)."""
    if bind:
        return [named[bind.get(n, n)] if t == INT else named[bind.get(n, n)].data_ptr() for n, t in args]
    return [named[n] if t == INT else named[n].data_ptr() for n, t in args]


class TokenLaunch:
    """The launch of the per-token kernels (k_shared_act.py, k_final_sum.py, k_mla_norm.py,
    k_mla_merge.py): grid (T, CTAS) of `threads`, body(*ARGS, token, CTA index)."""

    def __init__(self, dims):
        self.dm = dims

    @cute.jit
    def __call__(self, *a):           # ARGS, stream (signatures: declare)
        A = Args(self, a, host=True)
        self.kernel(*A.kernel()).launch(grid=(A.T, self.CTAS, 1), block=(self.threads, 1, 1),
                                        stream=A.stream)

    @cute.kernel
    def kernel(self, *a):             # ARGS
        t, by, _ = cute.arch.block_idx()
        self.body(*a, t, by)


class Args(SimpleNamespace):
    """Inside `__call__` / `kernel`: the arguments by name (and `stream` in `__call__`)."""

    def __init__(self, obj, a, host: bool):
        names = [n for n, _ in obj.ARGS if host or n not in obj.HOST_ONLY]
        if host:
            names.append("stream")
        assert len(names) == len(a), (type(obj).__name__, names, len(a))
        super().__init__(**dict(zip(names, a)))
        self._kernel_names = [n for n, _ in obj.ARGS if n not in obj.HOST_ONLY]

    def kernel(self, **override):
        """The kernel's arguments, in order (HOST_ONLY dropped), some replaced by `override`."""
        return [override.get(n, getattr(self, n)) for n in self._kernel_names]


def _params(obj_args, stream):
    P = inspect.Parameter
    ps = [P("self", P.POSITIONAL_OR_KEYWORD)]
    ps += [P(n, P.POSITIONAL_OR_KEYWORD, annotation=Int32 if t == INT else cute.Pointer)
           for n, t in obj_args]
    if stream:
        # typed: export_to_c (the disk cache, kernel_store.py) refuses an unannotated argument;
        # the stream is host-only, so the PTX is unchanged (checked: every variant's PTX hash)
        ps.append(P("stream", P.POSITIONAL_OR_KEYWORD, annotation=_cuda.CUstream))
    return inspect.Signature(ps)


def _sign(fn, sig):
    while fn is not None:          # the DSL wrapper and the function it wraps
        fn.__signature__ = sig
        fn = getattr(fn, "__wrapped__", None)


def _own(cls, attr, deco):
    """cls's own copy of an inherited `@cute.jit` / `@cute.kernel` method: the DSL reads the
    signature from the function object, so classes with different ARGS cannot share one."""
    if attr in cls.__dict__:
        return cls.__dict__[attr]
    raw = getattr(cls, attr).__wrapped__
    code = getattr(raw, "_original_code", raw.__code__)
    f = types.FunctionType(code, raw.__globals__, raw.__name__, raw.__defaults__, raw.__closure__)
    f.__qualname__, f.__doc__ = raw.__qualname__, raw.__doc__
    setattr(cls, attr, deco(f))
    return cls.__dict__[attr]


def declare(cls):
    """Class decorator: the signatures of cls.__call__ and cls.kernel from cls.ARGS (the methods
    may be inherited from a launch shared by several kernels: each class gets its own copy)."""
    cls.HOST_ONLY = tuple(getattr(cls, "HOST_ONLY", ()))
    _sign(_own(cls, "__call__", cute.jit), _params(cls.ARGS, True))
    sig = _params([a for a in cls.ARGS if a[0] not in cls.HOST_ONLY], False)
    # KERNEL_EXTRA: kernel-only parameters the host function makes (a TMA atom and its tensor:
    # the DSL types them from the values), after ARGS
    P = inspect.Parameter
    sig = sig.replace(parameters=list(sig.parameters.values()) + [
        P(n, P.POSITIONAL_OR_KEYWORD) for n in getattr(cls, "KERNEL_EXTRA", ())])
    _sign(_own(cls, "kernel", cute.kernel), sig)
    return cls
