"""Keep freed host memory in the process instead of giving it back to the OS, once per process.

Why: a case makes and drops tensors of tens of MB (an MLA cache of [batch, capacity, 576] and
its copies: clones per role, the float64 working copy, the poisoned output buffers). glibc hands
every block above its mmap threshold (at most 32 MiB) straight back to the OS on free, and trims
the heap top, so the next case's tensors fault in fresh pages, about 1.6 us per 4 KiB page on the
CPU CI machine: a bf16 clone of a 9 MB cache took 3.6 ms, a tenth of it copying. Kept, the
memory is reused: 200 cases of the tiny mla space took 9.5-10.6 s instead of 12.9-14.0 s on the
2-core CPU (`docs/throughput.md`). The process holds its peak resident size until it exits,
which a fuzzing process does soon; numbers and verdicts do not change.

A no-op where the C library is not glibc (macOS, musl) or where `K3DIFF_KEEP_HOST_MEMORY=0`.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3       # glibc's mallopt parameter numbers
_MMAP_THRESHOLDS = (1 << 30, 32 << 20)              # glibc < 2.35 refuses more than 32 MiB
_done = False


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds (first call only). True when they were raised."""
    global _done
    if _done:
        return False
    _done = True
    if os.environ.get("K3DIFF_KEEP_HOST_MEMORY", "1") == "0":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        libc.gnu_get_libc_version       # glibc only: musl's mallopt does nothing useful
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    if not any(mallopt(_M_MMAP_THRESHOLD, t) == 1 for t in _MMAP_THRESHOLDS):
        return False
    return mallopt(_M_TRIM_THRESHOLD, (1 << 31) - 1) == 1
