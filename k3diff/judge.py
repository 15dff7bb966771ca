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

Out of device memory: the weights drawn, the float64 reference and the candidate share one GPU,
and sizing.check_fits can only estimate the candidate's part (on an H100, 80 GB, full-dims bf16
layer cases ran out in a nightly shard where an H200 holds them). The case is judged once more with
every cache given back; out of memory again, it is CaseTooLarge (one line, exit 11, no seed saved
against the candidate), unless the candidate raised it on a case whose whole estimate is far below
the memory free (k3diff.sizing.own_out_of_memory): then it is the candidate's failure, with a seed.
k3diff's own out of memory (the reference, the draw) is always the machine's.

The verdict is made in this process even when the candidate runs in a child: the child sends
outputs, never a verdict (k3diff.isolation), so an exception raised here while judging a remote
candidate is k3diff's own and is not turned into a verdict against the candidate.
"""
from __future__ import annotations

import contextlib
import gc
import signal
import threading

from k3diff.fatal import CRASH, CandidateFailed, describe  # noqa: F401 - describe: named from here too


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


def judge(kind: str, case, position, candidate, device: str, *, own_sigint: bool = True):
    """The verdict of one check (`kind` "case" or "invariance"); never raises for the candidate.
    `candidate` a backend object (judged in this process) or a link to the candidate's process
    (k3diff.isolation.RemoteLink): either way the judgement is made here. `own_sigint` False
    where no user can reach the process with Ctrl-C, so any KeyboardInterrupt is the candidate's."""
    from k3diff.candidate_link import link_for
    from k3diff.case import CaseError
    from k3diff.sizing import CaseTooLarge, own_out_of_memory
    from k3diff.verdict import Verdict

    link = link_for(candidate)
    seen: list = []
    for attempt in (1, 2):
        oom = None
        link.begin_case()
        try:
            with _sigint_seen(seen) if own_sigint else contextlib.nullcontext():
                if kind == "invariance":
                    from k3diff.invariance import check_batch_invariance

                    return check_batch_invariance(case, link, position, device=device)
                from k3diff.runner import check_case

                return check_case(case, link, device=device)
        except (CaseTooLarge, CaseError):
            raise
        except CandidateFailed as failed:
            if not failed.oom:
                verdict = Verdict(case, link.name)
                verdict.error = failed.error
                return verdict
            oom = failed
        except BaseException as exc:  # noqa: BLE001 - the point: nothing the candidate does skips the verdict
            if isinstance(exc, KeyboardInterrupt) and seen:
                raise
            if not out_of_memory(exc):
                if getattr(link, "remote", False):
                    raise           # the candidate runs elsewhere: an error here is k3diff's own, not a verdict
                verdict = Verdict(case, link.name)
                verdict.error = f"{CRASH} the candidate raised {describe(exc)} before its verdict"
                return verdict
            oom = exc           # this process's own (the reference, the draw): the machine's
        # out of the except block: the exception being handled holds the failed attempt's
        # frames and their tensors until the block ends, so memory given back inside it stays
        give_memory_back()
        if attempt == 2:
            own = own_out_of_memory(case, device) if isinstance(oom, CandidateFailed) else None
            if own:
                verdict = Verdict(case, link.name)
                verdict.error = f"{own}: {oom.error.removeprefix(CRASH).strip()}"
                return verdict
            raise CaseTooLarge(f"case too large for {device}: out of memory twice, the second time with "
                               f"every cache given back ({case.label()})")


def out_of_memory(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.OutOfMemoryError)


def give_memory_back() -> None:
    """Every weight set and everything built from them (prepared copies) dropped, the allocator's
    cache returned to the device."""
    from k3diff import caches, materialize

    gc.collect()                        # a cycle through a frame of the failed attempt keeps its tensors
    materialize.evict_weights(0)
    caches.weights_dropped()
