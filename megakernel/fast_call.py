"""Calling a compiled kernel without CuTe DSL's per-call argument machinery.

Why: `JitCompiledFunction.__call__` rebuilds the C argument array from Python objects on every
call (a cute.Pointer per pointer, each argument's spec and adapter looked up, the CUstream
adapted). The megakernel's step is eleven launches, and k3diff runs thousands of steps, so that
host time, not the GPU, bounded the candidate in the small space on the H200 (docs/throughput.md).

What this does instead: every kernel here takes only global pointers, Int32s and a stream
(kernel_args.ARGS), each one C value. The compiled host function reads a packed array of
`void*`, entry i pointing at argument i's value, then the executor's own trailing entries. So the
array is built once per kernel over slots this object owns, and a call writes the new values
into the slots and calls the host function: the same C call with the same values.

Trust: the first call goes through CuTe DSL's own path (which also creates its executor). The
fast path is then built and checked against the argument array CuTe DSL builds for that same call
(as many entries, the same values behind them) and used only if they agree. Anything unexpected
(another CuTe DSL version, an argument of another kind) keeps CuTe DSL's path for that kernel and
says so once on stderr. MEGAKERNEL_FAST_CALL=0 turns the fast path off everywhere.
"""
import ctypes
import sys

from cuda.bindings import driver

ENV = "MEGAKERNEL_FAST_CALL"
_SLOT = {"ptr": ctypes.c_void_p, "int": ctypes.c_int32, "stream": ctypes.c_void_p}


def enabled() -> bool:
    from megakernel import config
    return config.current().fast_call


def _address(p) -> int:
    """An entry of CuTe DSL's exe_args (an int or a c_void_p) as an address."""
    return p.value if isinstance(p, ctypes.c_void_p) else int(p)


class FastCall:
    """The packed-argument call of one compiled function: `slots` hold its arguments' values (the
    stream's last), `packed` the array the host function reads. Build with `FastCall.attach`
    after a call through CuTe DSL's own path."""

    def __init__(self, executor, packed, slots):
        self._func = executor.capi_func
        self._result = executor.cuda_result if executor._has_cuda_result else None
        self._packed, self._slots = packed, slots
        self._keep = executor          # the executor owns the loaded module and the context

    @classmethod
    def attach(cls, fn, kinds, values, args, cu_stream):
        """A FastCall for `fn` (a JitCompiledFunction just called with (*args, cu_stream)), whose
        arguments have the kinds `kinds` ("ptr" | "int", in order) and the C values `values`,
        checked against the argument array CuTe DSL builds for that call; None (and one line on
        stderr) when it cannot be trusted."""
        try:
            executor = fn._default_executor
            if executor is None or getattr(fn, "_pyir_spec", None) is not None:
                raise RuntimeError("no default executor, or a traced call spec")
            kinds = tuple(kinds) + ("stream",)
            exe_args, adapted = fn.execution_args.generate_execution_args(tuple(args) + (cu_stream,), {})
            if len(exe_args) != len(kinds):
                raise RuntimeError(f"{len(exe_args)} C arguments for {len(kinds)} declared")
            slots = [_SLOT[k]() for k in kinds]
            base = [ctypes.addressof(s) for s in slots]
            # the executor appends its own entries (the result slot, the kernel handles) to the
            # base entries, in an array it reuses: keep a private copy
            shared = executor._get_invoke_packed_args(base)
            packed = (ctypes.c_void_p * len(shared))()
            ctypes.memmove(packed, shared, ctypes.sizeof(packed))
            call = cls(executor, packed, slots)
            call._set(values, int(cu_stream))
            # CuTe DSL's entries point into objects that `adapted` and `args` keep alive here
            for kind, slot, theirs in zip(kinds, slots, exe_args):
                if _SLOT[kind].from_address(_address(theirs)).value != slot.value:
                    raise RuntimeError(f"a {kind} argument differs from CuTe DSL's")
            del adapted
            return call
        except Exception as e:  # noqa: BLE001 - any surprise keeps the slow, known path
            print(f"megakernel: fast kernel call not used ({type(e).__name__}: {e})".splitlines()[0],
                  file=sys.stderr)
            return None

    def _set(self, values, stream: int):
        slots = self._slots
        for i, v in enumerate(values):
            slots[i].value = v
        slots[-1].value = stream

    def __call__(self, values, stream: int):
        """values: per argument its address (ptr) or value (int), in order; stream: a handle."""
        self._set(values, stream)
        self._func(self._packed)
        if self._result is not None and self._result.value != 0:
            raise RuntimeError(f"kernel launch failed: CUDA error {self._result.value}")


def cu_stream(stream) -> "driver.CUstream":
    """The CUstream CuTe DSL's own path takes, from a handle (int) or a CUstream."""
    return stream if isinstance(stream, driver.CUstream) else driver.CUstream(int(stream))
