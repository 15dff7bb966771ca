"""Crash and hang isolation: the candidate lives in a child process, from its first import on.

A fused kernel that reads out of bounds does not raise: it kills the process (segfault, abort), or
leaves the CUDA context unusable for every later call ("illegal memory access", a device-side
assert), or never returns. And a backend can do all of that at import. So the child (a fresh
interpreter: no CUDA state inherited) imports, constructs and asks `available()` of the backend
itself, then keeps it and its caches (weights, prepared/compiled kernels) across cases; the parent
never imports it and knows it only by the facts the child sends back (`BackendInfo`):

  - loading: the interpreter and torch get STARTUP_TIMEOUT; the backend's own import, construction,
    `available()` and contract get the case timeout. A crash, a hang or an error there is one
    BackendError line (pytest exit 4, `k3diff` exit 2), never a dead or hung parent;
  - before each call the in-flight case is written atomically to `<dir>/.inflight-<pid>.json`, so
    even a run killed from outside leaves the case that was running;
  - the child dies, or reports a sticky device error (a CUDA error text, or a failing
    `torch.cuda.synchronize()` after the call) -> verdict "crash:"; the next case gets a fresh child;
  - no verdict within `timeout` seconds -> verdict "hang:".

Nothing is left behind: the child leads its own session (so its process group holds it, whatever
it forks, and a terminal's Ctrl-C reaches only the parent); the whole group is killed on a hang, a
crash, `close()`, the parent's SIGTERM/SIGHUP, and at exit; and the child asks the kernel for
SIGKILL when its parent dies (PR_SET_PDEATHSIG), for a parent killed with SIGKILL.

Crash and hang verdicts are final: `Session.fuzz` saves the case as the seed and ends that chunk
without shrinking (shrinking a crash would relaunch the crash dozens of times).
"""
from __future__ import annotations

import atexit
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

from k3diff.fatal import CRASH, HANG, signal_name
from k3diff.judge import judge

DEFAULT_TIMEOUT = 600.0     # generous: the first call of a kernel may compile it
STARTUP_TIMEOUT = 600.0     # a fresh interpreter importing torch (k3diff's own code, not the backend)
STICKY = re.compile(r"illegal memory access|device-side assert|CUDA error|unspecified launch failure|"
                    r"misaligned address|illegal instruction|CUDA_ERROR", re.IGNORECASE)
_BOOT = ("import json, sys; sys.path[:] = json.loads(sys.argv[2]); "
         "from k3diff.isolation import _child_entry; _child_entry(int(sys.argv[1]), int(sys.argv[3]))")


@dataclass(frozen=True)
class BackendInfo:
    """What the parent knows of a backend loaded in the child: the attributes k3diff reads outside
    a judgement (the stage list, the strategy boundaries, the names a seed file records)."""
    spec: str
    name: str
    version: str | None
    stages: tuple
    boundaries: tuple
    batch_invariant: bool
    distributed: bool = False      # runs on ranks (k3diff/distributed.py: --k3diff-ranks)
    schedules: tuple = ()          # schedules it allows besides eager (k3diff/schedule.py: declared)
    provides: tuple = ()           # ((stage, output names), ...) checked at load (backends.Loaded)


def _info(spec: str, backend) -> BackendInfo:
    from k3diff.backends import BackendError
    from k3diff.stages import STAGES
    from k3diff.strategies import normalize_boundaries

    try:
        boundaries = normalize_boundaries(getattr(backend, "boundaries", None))
    except ValueError as exc:
        raise BackendError(f"backend {spec!r}: {exc}") from None
    version = getattr(backend, "version", None)
    return BackendInfo(spec=spec, name=str(getattr(backend, "name", spec)),
                       version=None if version is None else str(version),
                       stages=tuple(getattr(backend, "stages", STAGES)), boundaries=boundaries,
                       batch_invariant=bool(getattr(backend, "batch_invariant", False)),
                       distributed=bool(getattr(backend, "distributed", False)),
                       schedules=_schedules(spec, backend),
                       provides=tuple(getattr(backend, "frozen_provides", {}).items()))


def _schedules(spec: str, backend) -> tuple:
    from k3diff.backends import BackendError
    from k3diff.schedule import declared

    try:
        return declared(backend)
    except ValueError as exc:
        raise BackendError(f"backend {spec!r}: {exc}") from None


# ------------------------------------------------------------------ the child

def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when the parent dies, even of SIGKILL (Linux; elsewhere a no-op)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)      # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:       # it died before prctl took effect
        os._exit(1)


def _child_entry(fd: int, parent_pid: int) -> None:
    from multiprocessing.connection import Connection

    _die_with_parent(parent_pid)
    conn = Connection(fd)
    try:
        threads, device, spec, gpu_share = conn.recv()
    except (EOFError, OSError):
        return
    import torch

    if threads:
        torch.set_num_threads(threads)
    if device.startswith("cuda:"):
        from k3diff.gpu_share import cap_gpu

        torch.cuda.set_device(int(device.split(":")[1]))
        cap_gpu(int(device.split(":")[1]), gpu_share)     # a worker sharing its GPU: the child too
    conn.send(("booted", None))
    from k3diff import backends

    try:
        spec = spec or backends.default_name()
        backend = backends.load_available(spec)
        info = _info(spec, backend)
    except BaseException as exc:  # noqa: BLE001 - BackendError and anything the module threw: one line
        conn.send(("refused", str(exc) if isinstance(exc, backends.BackendError) else
                   f"backend {spec!r} failed to load: {type(exc).__name__}: {exc}".splitlines()[0][:300]))
        return
    conn.send(("ready", info))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        kind, case, position = msg
        try:
            verdict = judge(kind, case, position, backend, device, own_sigint=False)
        except BaseException as exc:  # noqa: BLE001 - CaseTooLarge and CaseError: re-raised by the parent
            conn.send(("raise", _picklable(exc)))
            continue
        sticky = verdict.error if verdict.error and STICKY.search(verdict.error) else _sync_error(device)
        if sticky:
            conn.send(("sticky", sticky.removeprefix(CRASH).strip()))
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
_PREVIOUS: dict = {}


@atexit.register
def _kill_children():
    """No candidate group may outlive an interpreter that exits without closing its checker."""
    for checker in list(_LIVE):
        checker._kill()


def _on_signal(signum, frame):
    """SIGTERM/SIGHUP of the parent: kill every candidate group, then do what was set before
    (the default: die of the same signal, so the caller sees how the run ended)."""
    _kill_children()
    previous = _PREVIOUS.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
        return
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _watch_signals() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGHUP):
        current = signal.getsignal(signum)
        if current is _on_signal or current in (signal.SIG_IGN, None):
            continue
        try:
            signal.signal(signum, _on_signal)
            _PREVIOUS[signum] = current
        except (ValueError, OSError):
            pass


def _share_of(device: str) -> float:
    """The GPU share this worker was given (k3diff.gpu_share), for its child; 1.0 off the GPU."""
    if not device.startswith("cuda"):
        return 1.0
    from k3diff.gpu_share import gpu_share

    return gpu_share(device)


class IsolatedChecker:
    """Judges cases in a child process; `check(case)` and `check_invariance(case, position)` return
    a Verdict like `check_case` does, with crash/hang verdicts where the child could not answer.
    `start()` loads the backend there and returns its BackendInfo (BackendError if it cannot)."""

    def __init__(self, spec: str | None, backend_name: str | None = None, *, device: str,
                 timeout: float | None = None, inflight_dir=None, threads: int | None = None):
        self.spec, self.device = spec, device
        self.backend_name = backend_name or spec
        self.timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
        self.inflight_dir = Path(inflight_dir) if inflight_dir else Path(tempfile.gettempdir())
        self.threads = threads
        self.info: BackendInfo | None = None
        self._proc = self._conn = None
        self._pidfd = None
        self.started = 0                    # children started (1 + crashes/hangs)
        _LIVE.add(self)

    @property
    def inflight_path(self) -> Path:
        return self.inflight_dir / f".inflight-{os.getpid()}.json"

    @property
    def pgid(self) -> int | None:
        """The candidate's process group (its pid: it leads its own session); None when none runs."""
        return None if self._proc is None else self._proc.pid

    def start(self) -> BackendInfo:
        if self._proc is None:
            self._start()
        return self.info

    def _start(self):
        from multiprocessing.connection import Connection

        from k3diff.backends.base import BackendError

        _watch_signals()
        mine, theirs = socket.socketpair()
        try:
            proc = subprocess.Popen([sys.executable, "-c", _BOOT, str(theirs.fileno()), json.dumps(sys.path),
                                     str(os.getpid())], pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        finally:
            theirs.close()
        self._proc, self._conn = proc, Connection(mine.detach())
        try:
            self._pidfd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self._pidfd = None
        self.started += 1
        label = self.spec or "the default backend"
        try:
            self._conn.send((self.threads, self.device, self.spec, _share_of(self.device)))
            for phase, limit in (("start python and torch", STARTUP_TIMEOUT), ("load the backend", self.timeout)):
                got = self._wait(limit)
                if got == "timeout":
                    self._kill()
                    raise BackendError(f"backend {label!r}: the candidate process did not {phase} within "
                                       f"{limit:g} s (killed)")
                if got == "died":
                    raise EOFError
                tag, payload = self._conn.recv()
                if tag == "refused":
                    self._kill()
                    raise BackendError(payload)
            self.info = payload
            self.backend_name = self.backend_name or payload.spec
        except (EOFError, OSError):
            code = self._reap()
            raise BackendError(f"backend {label!r}: the candidate process died while loading the backend "
                               f"({signal_name(code)})") from None
        except BaseException:
            self._kill()
            raise

    def _wait(self, timeout: float) -> str:
        """"answer" (the child wrote, or closed its end), "died", or "timeout"."""
        fds = [self._conn.fileno()] + ([self._pidfd] if self._pidfd is not None else [])
        ready, _, _ = select.select(fds, [], [], timeout)
        if self._conn.fileno() in ready:
            return "answer"
        return "died" if ready else "timeout"

    def _reap(self, grace: float = 5.0) -> int | None:
        """The dead (or dying) child's exit status; its group killed (what it forked included)."""
        proc = self._proc
        if proc is None:
            return None
        if self._pidfd is not None:
            select.select([self._pidfd], [], [], grace)     # dead: a zombie, its pid still held
        code = proc.poll() if self._pidfd is None else None
        self._kill_group()
        try:
            code = proc.wait(grace) if code is None else code
        except subprocess.TimeoutExpired:
            code = None
        self._kill()
        return code

    def _kill_group(self):
        if self._proc is not None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def _kill(self):
        proc, conn, pidfd = self._proc, self._conn, self._pidfd
        self._kill_group()
        self._proc = self._conn = self._pidfd = None
        if conn is not None:
            conn.close()
        if pidfd is not None:
            os.close(pidfd)
        if proc is not None:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def close(self):
        """A polite stop (the child may flush), then the group killed all the same: whatever the
        candidate forked dies with it."""
        if self._conn is not None:
            try:
                self._conn.send(None)
                self._proc.wait(2)
            except (OSError, subprocess.TimeoutExpired):
                pass
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

        if self._proc is None:
            self._start()
        self._write_inflight(case, kind, position)
        start = time.perf_counter()
        verdict = Verdict(case, self.info.name if self.info else self.backend_name)
        try:
            self._conn.send((kind, case, position))
            got = self._wait(self.timeout)
            if got == "timeout":
                self._kill()
                verdict.error = (f"{HANG} no verdict within {self.timeout:g} s (--k3diff-timeout); "
                                 "the candidate process was killed")
                verdict.seconds = time.perf_counter() - start
                return verdict
            if got == "died":
                raise EOFError
            tag, payload = self._conn.recv()
        except (EOFError, OSError):
            code = self._reap()
            verdict.error = f"{CRASH} the candidate process died ({signal_name(code)})"
            verdict.seconds = time.perf_counter() - start
            return verdict
        except BaseException:       # our own Ctrl-C mid-case: the candidate goes with the run
            self._kill()
            raise
        if tag == "raise":
            raise payload
        if tag == "sticky":
            self._reap()
            verdict.error = f"{CRASH} sticky device error: {payload}"
            verdict.seconds = time.perf_counter() - start
            return verdict
        if payload.error and payload.error.startswith(CRASH):
            self._kill()            # it raised past its verdict: a fresh child for the next case
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
        return judge("case", case, None, self.backend, self.device)

    def check_invariance(self, case, position):
        return judge("invariance", case, position, self.backend, self.device)

    def close(self):
        pass
