"""Crash and hang isolation: the candidate runs in a long-lived child process.

A fused kernel that reads out of bounds does not raise: it kills the process (segfault, abort), or
leaves the CUDA context unusable for every later call ("illegal memory access", a device-side
assert), or never returns. So a k3diff run judges every case in a child process (spawn context, so
no CUDA state is inherited) that loads the backend by its spec string once and keeps its caches
(weights, prepared/compiled kernels) across cases:

  - before each call the in-flight case is written atomically to `<dir>/.inflight-<pid>.json`, so
    even a run killed from outside leaves the case that was running;
  - the child dies, or reports a sticky device error (a CUDA error text in the candidate's
    exception, or a failing `torch.cuda.synchronize()` after the call) -> verdict "crash:"; the
    child is replaced by a fresh one for the next case;
  - no verdict within `timeout` seconds -> the child is killed, verdict "hang:".

Such verdicts are final: `Session.fuzz` saves the case as the seed and ends that chunk without
shrinking (shrinking a crash would relaunch the crash dozens of times).
"""
from __future__ import annotations

import atexit
import contextlib
import json
import multiprocessing
import os
import re
import signal
import sys
import tempfile
import time
import weakref
from pathlib import Path

DEFAULT_TIMEOUT = 600.0     # generous: the first call of a kernel may compile it
STARTUP_TIMEOUT = 600.0     # a fresh child importing torch and loading the backend (not a case)
CRASH, HANG = "crash:", "hang:"
STICKY = re.compile(r"illegal memory access|device-side assert|CUDA error|unspecified launch failure|"
                    r"misaligned address|illegal instruction|CUDA_ERROR", re.IGNORECASE)


def is_fatal(verdict) -> bool:
    """A crash or hang verdict: final, never shrunk."""
    return bool(verdict.error) and verdict.error.startswith((CRASH, HANG))


def _signal_name(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


# ------------------------------------------------------------------ the child

def _child_main(conn, spec: str, threads: int | None, device: str) -> None:
    import torch

    if threads:
        torch.set_num_threads(threads)
    if device.startswith("cuda:"):
        torch.cuda.set_device(int(device.split(":")[1]))
    from k3diff.session import load_available

    try:
        backend = load_available(spec)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as one line
        conn.send(("raise", _picklable(exc)))
        return
    conn.send(("ready", None))
    from k3diff.invariance import check_batch_invariance
    from k3diff.runner import check_case

    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        kind, case, position = msg
        try:
            if kind == "invariance":
                verdict = check_batch_invariance(case, backend, position, device=device)
            else:
                verdict = check_case(case, backend, device=device)
        except BaseException as exc:  # noqa: BLE001 - CaseTooLarge and friends: re-raised by the parent
            sticky = STICKY.search(str(exc))
            if sticky:
                conn.send(("sticky", f"{type(exc).__name__}: {exc}".splitlines()[0][:300]))
                os._exit(70)
            conn.send(("raise", _picklable(exc)))
            continue
        sticky = verdict.error if verdict.error and STICKY.search(verdict.error) else _sync_error(device)
        if sticky:
            conn.send(("sticky", sticky))
            os._exit(70)       # the context is unusable: the parent starts a fresh child
        conn.send(("verdict", verdict))


def _sync_error(device: str) -> str | None:
    if not device.startswith("cuda"):
        return None
    import torch

    try:
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        return f"torch.cuda.synchronize() failed after the call: {exc}".splitlines()[0][:300]
    return None


def _picklable(exc: BaseException) -> BaseException:
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(exc).__name__}: {exc}")


# ------------------------------------------------------------------ the parent

_LIVE: "weakref.WeakSet[IsolatedChecker]" = weakref.WeakSet()


@atexit.register
def _kill_children():
    """Children are not daemons (a backend may need worker processes of its own), so none may
    outlive an interpreter that exits without closing its checker."""
    for checker in list(_LIVE):
        checker._kill()


@contextlib.contextmanager
def _main_not_reimported():
    """The child needs nothing from the caller's __main__ (its target lives here), and spawn would
    re-run a script's top level in the child (a script without a __main__ guard would recurse):
    hide __main__'s origin while the child starts."""
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__spec__", "__file__") if main is not None and k in main.__dict__}
    try:
        if main is not None:
            main.__dict__["__spec__"] = None
            main.__dict__.pop("__file__", None)
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)
            if "__file__" not in saved:
                main.__dict__.pop("__file__", None)
            if "__spec__" not in saved:
                main.__dict__.pop("__spec__", None)


class IsolatedChecker:
    """Judges cases in a child process; `check(case)` and `check_invariance(case, position)` return
    a Verdict like `check_case` does, with crash/hang verdicts where the child could not answer."""

    def __init__(self, spec: str, backend_name: str, *, device: str, timeout: float | None = None,
                 inflight_dir=None, threads: int | None = None):
        self.spec, self.backend_name, self.device = spec, backend_name, device
        self.timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
        self.inflight_dir = Path(inflight_dir) if inflight_dir else Path(tempfile.gettempdir())
        self.threads = threads
        self._proc = self._conn = None
        self.started = 0                    # children started (1 + crashes/hangs)
        _LIVE.add(self)

    @property
    def inflight_path(self) -> Path:
        return self.inflight_dir / f".inflight-{os.getpid()}.json"

    def _start(self):
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_child_main, args=(child, self.spec, self.threads, self.device),
                           name="k3diff-candidate", daemon=False)   # a backend may start its own workers
        with _main_not_reimported():
            proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        self.started += 1
        # the per-case clock starts once the backend is loaded: startup is not the case's time
        from k3diff.backends.base import BackendError

        try:
            if not parent.poll(max(STARTUP_TIMEOUT, self.timeout)):
                raise BackendError(f"backend {self.spec!r}: the candidate process did not start within "
                                   f"{max(STARTUP_TIMEOUT, self.timeout):g} s")
            tag, payload = parent.recv()
        except (EOFError, OSError):
            proc.join(5)
            code = proc.exitcode
            self._kill()
            raise BackendError(f"backend {self.spec!r}: the candidate process died while loading the backend "
                               f"({_signal_name(code)})") from None
        if tag == "raise":
            self._kill()
            raise payload

    def _kill(self):
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            conn.close()
        if proc is not None:
            if proc.is_alive():
                proc.kill()
            proc.join(5)

    def close(self):
        if self._conn is not None:
            try:
                self._conn.send(None)
            except OSError:
                pass
            self._proc.join(5)
        self._kill()
        try:
            self.inflight_path.unlink()
        except OSError:
            pass

    def _write_inflight(self, case, kind, position):
        record = {"case": case.to_dict(), "kind": kind, "position": position, "backend": self.backend_name,
                  "device": self.device, "started": time.time()}
        try:
            self.inflight_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.inflight_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(record, sort_keys=True))
            os.replace(tmp, self.inflight_path)
        except OSError:
            pass        # the output paths were checked at start; never lose the case over this note

    def check(self, case):
        return self._call(case, "case", None)

    def check_invariance(self, case, position):
        return self._call(case, "invariance", position)

    def _call(self, case, kind, position):
        from k3diff.verdict import Verdict

        if self._proc is None or not self._proc.is_alive():
            self._kill()
            self._start()
        self._write_inflight(case, kind, position)
        start = time.perf_counter()
        verdict = Verdict(case, self.backend_name)
        try:
            self._conn.send((kind, case, position))
            if not self._conn.poll(self.timeout):
                self._kill()
                verdict.error = (f"{HANG} no verdict within {self.timeout:g} s (--k3diff-timeout); "
                                 "the candidate process was killed")
                verdict.seconds = time.perf_counter() - start
                return verdict
            tag, payload = self._conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            self._proc.join(5)
            code = self._proc.exitcode
            self._kill()
            verdict.error = f"{CRASH} the candidate process died ({_signal_name(code)})"
            verdict.seconds = time.perf_counter() - start
            return verdict
        if tag == "raise":
            raise payload
        if tag == "sticky":
            self._kill()
            verdict.error = f"{CRASH} sticky device error: {payload}"
            verdict.seconds = time.perf_counter() - start
            return verdict
        return payload

    def __del__(self):  # pragma: no cover - best effort at interpreter exit
        try:
            self._kill()
        except Exception:  # noqa: BLE001
            pass


class InProcessChecker:
    """The same interface, in this process (`--k3diff-isolate off`, mutant hunts)."""

    def __init__(self, backend, *, device: str):
        self.backend, self.device = backend, device

    def check(self, case):
        from k3diff.runner import check_case

        return check_case(case, self.backend, device=self.device)

    def check_invariance(self, case, position):
        from k3diff.invariance import check_batch_invariance

        return check_batch_invariance(case, self.backend, position, device=self.device)

    def close(self):
        pass
