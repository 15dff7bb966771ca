"""A verdict only from a finished judgement: whatever the candidate does before k3diff has judged
its outputs (raise in prepare(), sys.exit or KeyboardInterrupt in run(), ...) is a `crash:` verdict.

`check_case` turns a candidate's ordinary exception inside run() into a failing verdict; everything
else that escapes the judgement (SystemExit, KeyboardInterrupt, an exception from prepare(),
provides() or supports()) would otherwise end the run, or worse: a candidate that writes a wrong
output and then calls `sys.exit(0)` made `k3diff replay` exit 0 with nothing printed. Both checkers
(k3diff.isolation) judge through `judge()`, so isolation on or off the outcome is the same verdict,
and a verdict is saved as a seed like any failure.

The only exceptions that pass through are k3diff's own statements about the case (CaseTooLarge,
CaseError): they are not the candidate's doing. In this process a KeyboardInterrupt from a real
Ctrl-C (SIGINT arrived while judging) is the user's and is re-raised.

Out of device memory is the machine's, not a verdict: the weights drawn, the float64 reference and
the candidate share one GPU, and sizing.check_fits can only estimate the candidate's part (on an
H100, 80 GB, full-dims bf16 layer cases ran out in a nightly shard, call 84, where an H200 holds
them). The case is judged once more with every cache given back; out of memory again, it is
CaseTooLarge: one line, exit 11, no seed saved against the candidate.
"""
from __future__ import annotations

import contextlib
import signal
import threading

from k3diff.fatal import CRASH


def describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}({exc})" if str(exc) else type(exc).__name__
    return text.splitlines()[0][:300]


@contextlib.contextmanager
def _sigint_seen(flag: list):
    """Note a real SIGINT (then behave as Python does: KeyboardInterrupt). Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous in (signal.SIG_IGN, None):     # ignored, or set from C: leave it be
        yield
        return

    def handler(signum, frame):
        flag.append(signum)
        if callable(previous):
            previous(signum, frame)
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGINT, handler)
    except (ValueError, OSError):
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def judge(kind: str, case, position, backend, device: str, *, own_sigint: bool = True):
    """The verdict of one check (`kind` "case" or "invariance"); never raises for the candidate.
    `own_sigint` False in the isolated child: no user can reach it with Ctrl-C (own session), so
    any KeyboardInterrupt there is the candidate's."""
    from k3diff.case import CaseError
    from k3diff.sizing import CaseTooLarge
    from k3diff.verdict import Verdict

    seen: list = []
    for attempt in (1, 2):
        oom = False
        try:
            with _sigint_seen(seen) if own_sigint else contextlib.nullcontext():
                if kind == "invariance":
                    from k3diff.invariance import check_batch_invariance

                    return check_batch_invariance(case, backend, position, device=device)
                from k3diff.runner import check_case

                return check_case(case, backend, device=device)
        except (CaseTooLarge, CaseError):
            raise
        except BaseException as exc:  # noqa: BLE001 - the point: nothing the candidate does skips the verdict
            if isinstance(exc, KeyboardInterrupt) and seen:
                raise
            if not out_of_memory(exc):
                verdict = Verdict(case, getattr(backend, "name", type(backend).__name__))
                verdict.error = f"{CRASH} the candidate raised {describe(exc)} before its verdict"
                return verdict
            oom = True
        if oom:
            # out of the except block: the exception being handled holds the failed attempt's
            # frames and their tensors until the block ends, so memory given back inside it stays
            give_memory_back()
            if attempt == 2:
                raise CaseTooLarge(f"case too large for {device}: out of memory twice, the second time with "
                                   f"every cache given back ({case.label()})")


def out_of_memory(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.OutOfMemoryError)


def give_memory_back() -> None:
    """Every weight set and everything built from them (prepared copies) dropped, the allocator's
    cache returned to the device."""
    import gc

    from k3diff import caches, materialize

    gc.collect()                        # a cycle through a frame of the failed attempt keeps its tensors
    materialize.evict_weights(0)
    caches.weights_dropped()
