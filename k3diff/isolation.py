"""Crash and hang isolation: the candidate lives in a child process, from its first import on;
the judgement never does.

A fused kernel that reads out of bounds does not raise: it kills the process (segfault, abort), or
leaves the CUDA context unusable for every later call ("illegal memory access", a device-side
assert), or never returns. And a backend can do all of that at import. So the child (a fresh
interpreter: no CUDA state inherited) imports, constructs and asks `available()` of the backend
itself, then keeps it and its caches (weights, prepared/compiled kernels) across cases; the parent
never imports it and knows it only by the facts the child sends back (`BackendInfo`):

  - loading: the interpreter and torch get STARTUP_TIMEOUT; the backend's own import, construction,
    `available()` and contract get the case timeout. A crash, a hang or an error there is one
    BackendError line (pytest exit 4, `k3diff` exit 2), never a dead or hung parent;
  - before each call the in-flight case is written atomically to `<dir>/.inflight-<pid>.json`
    (a fresh temporary file, then a rename: never through a link planted at either name), so even
    a run killed from outside leaves the case that was running;
  - the child dies, or reports a sticky device error (a CUDA error text, or a failing
    `torch.cuda.synchronize()` after the call) -> verdict "crash:"; the next case gets a fresh child;
  - the candidate's own calls (supports/provides, prepare, run) past `timeout` seconds in one
    case -> verdict "hang:". k3diff's own work (the draw, the reference, the judgement) is not
    counted there: it has its own limit, whose expiry is the machine's (k3diff.time_limits).

The child only runs the candidate. This process draws the case, makes every buffer, runs the
reference and judges (k3diff.runner, through `IsolatedChecker` as the candidate's link): the child
gets the weights once per set (shared, not copied, where large or on the GPU: k3diff.transfer),
fills the output buffers it is sent, and answers with tensors and facts in a format that cannot
carry code or a verdict. A reply that is malformed, or a message nobody asked for, is a `crash:`.
So a candidate that writes a forged verdict onto the socket, or patches k3diff's judge in its own
process, judges nothing.

Nothing is left behind: the child leads its own session (so its process group holds it, whatever
it forks, and a terminal's Ctrl-C reaches only the parent); the whole group is killed on a hang, a
crash, `close()`, the parent's SIGTERM/SIGHUP, and at exit; and the child asks the kernel for
SIGKILL when its parent dies (PR_SET_PDEATHSIG), for a parent killed with SIGKILL.

Crash and hang verdicts are final: `Session.fuzz` saves the case as the seed and ends that chunk
without shrinking (shrinking a crash would relaunch the crash dozens of times).
"""
from __future__ import annotations

import atexit
import gc
import json
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

from k3diff import caches, closed_output, orphans
from k3diff.fatal import CRASH, HANG, CandidateFailed, signal_name
from k3diff.host_memory import keep_freed_memory
from k3diff.judge import judge
from k3diff.schedule import declared, problem
from k3diff.time_limits import MAX_WAIT, checked_seconds

DEFAULT_TIMEOUT = 600.0     # generous: the first call of a kernel may compile it
STARTUP_TIMEOUT = 600.0     # a fresh interpreter importing torch (k3diff's own code, not the backend)
STICKY = re.compile(r"illegal memory access|device-side assert|CUDA error|unspecified launch failure|"
                    r"misaligned address|illegal instruction|CUDA_ERROR", re.IGNORECASE)
_BOOT = ("import json, sys; sys.path[:] = json.loads(sys.argv[2]); "
         "from k3diff.isolation import _child_entry; _child_entry(int(sys.argv[1]), int(sys.argv[3]))")
_FRAME = struct.Struct("<Q")
# a reply is read into one buffer of the length its header gives, so the header is bounded by what
# the request could bring back: its tensors' bytes (a run's buffers return at most once each) and
# this much for the plain data; a longer header is not a reply (and allocates nothing)
REPLY_SLACK = 64 << 20


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


def _info(spec: str, backend) -> dict:
    """The child's description of its backend, as plain data (the parent rebuilds BackendInfo)."""
    from k3diff.backends import BackendError
    from k3diff.stages import STAGES
    from k3diff.strategies import normalize_boundaries

    try:
        boundaries = normalize_boundaries(getattr(backend, "boundaries", None))
    except ValueError as exc:
        raise BackendError(f"backend {spec!r}: {exc}") from None
    version = getattr(backend, "version", None)
    return {"spec": spec, "name": str(getattr(backend, "name", spec)),
            "version": None if version is None else str(version),
            "stages": [str(x) for x in getattr(backend, "stages", STAGES)],
            "boundaries": {name: list(sizes) for name, sizes in boundaries},
            "batch_invariant": bool(getattr(backend, "batch_invariant", False)),
            "distributed": bool(getattr(backend, "distributed", False)),
            "schedules": list(_schedules(spec, backend)),
            "provides": {str(k): [str(n) for n in v] for k, v in getattr(backend, "frozen_provides", {}).items()}}


def _schedules(spec: str, backend) -> tuple:
    from k3diff.backends import BackendError

    try:
        return declared(backend)
    except ValueError as exc:
        raise BackendError(f"backend {spec!r}: {exc}") from None


def _info_from(d) -> BackendInfo:
    from k3diff.strategies import normalize_boundaries
    from k3diff.transfer import Malformed

    try:
        schedules = tuple(str(x) for x in d.get("schedules", ()))
        if any(problem(x) for x in schedules):
            raise ValueError("a schedule k3diff does not know")
        info = BackendInfo(spec=str(d["spec"]), name=str(d["name"]),
                           version=None if d["version"] is None else str(d["version"]),
                           stages=tuple(str(x) for x in d["stages"]),
                           boundaries=normalize_boundaries(d["boundaries"]),
                           batch_invariant=d["batch_invariant"] is True, distributed=d["distributed"] is True,
                           schedules=schedules,
                           provides=tuple((str(k), tuple(str(n) for n in v)) for k, v in d.get("provides", {}).items()))
    except (KeyError, TypeError, ValueError) as exc:
        raise Malformed(f"backend description: {exc}") from None
    return info


# ------------------------------------------------------------------ framing

def _send_frame(sock, data) -> None:
    sock.sendall(_FRAME.pack(memoryview(data).nbytes))
    sock.sendall(data)


def _send_parts(sock, parts: list) -> None:
    """One frame from buffers sent one after another (a reply's tensors are not joined first)."""
    sock.sendall(_FRAME.pack(sum(memoryview(p).nbytes for p in parts)))
    for p in parts:
        sock.sendall(p)


def _recv_exact(sock, n: int) -> bytearray:
    """n bytes from the parent, read straight into one buffer (the child trusts its parent's length)."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], min(n - got, 1 << 24))
        if not k:
            raise EOFError
        got += k
    return buf


def _recv_frame(sock) -> bytes:
    (n,) = _FRAME.unpack(_recv_exact(sock, _FRAME.size))
    return _recv_exact(sock, n)


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


class _NoRoom(CandidateFailed):
    """The candidate's process ran out of device memory receiving a request, before the candidate
    was called (seen on an H100 that several runs shared; it died with a traceback, a crash of the
    candidate). Judged as the candidate's own out of memory is (k3diff.judge): again with the
    caches given back, then the machine's limit (exit 11), unless the case is far below the memory
    free: then what fills that process is the candidate's, and so is the failure. A candidate that
    forges the answer gains nothing over running out of memory itself."""


def _child_entry(fd: int, parent_pid: int) -> None:
    from k3diff.transfer import encode_parts, forget_received, from_parent

    _die_with_parent(parent_pid)
    sock = socket.socket(fileno=fd)
    reply = lambda *msg: _send_parts(sock, encode_parts(list(msg)))  # noqa: E731
    try:
        threads, device, spec, gpu_share = from_parent(_recv_frame(sock))
    except (EOFError, OSError):
        return
    import torch

    keep_freed_memory()         # the candidate's buffers are made and dropped per case here too
    if threads:
        torch.set_num_threads(threads)
    if device.startswith("cuda:"):
        from k3diff.gpu_share import cap_gpu

        torch.cuda.set_device(int(device.split(":")[1]))
        cap_gpu(int(device.split(":")[1]), gpu_share)     # a worker sharing its GPU: the child too
    reply("booted")
    from k3diff import backends
    from k3diff.candidate_link import CandidateHost

    try:
        spec = spec or backends.default_name()
        backend = backends.load_available(spec)
        info = _info(spec, backend)
    except BaseException as exc:  # noqa: BLE001 - BackendError and anything the module threw: one line
        reply("refused", str(exc) if isinstance(exc, backends.BackendError) else
              f"backend {spec!r} failed to load: {type(exc).__name__}: {exc}".splitlines()[0][:300])
        return
    reply("ready", info)
    host = CandidateHost(backend, guard_weights=True)
    while True:
        try:
            msg = from_parent(_recv_frame(sock))
        except (EOFError, OSError):
            return
        except torch.OutOfMemoryError as exc:
            # the request's tensors did not fit on the device as they arrived, before the candidate
            # was called: this process goes on, and the parent judges the out of memory by the
            # case's size (_NoRoom)
            forget_received()
            reply("no_room", (str(exc).splitlines() or ["out of memory"])[0][:300])
            continue
        if msg is None:
            return
        answer = closed_output.checked(_serve(host, msg, device))
        if answer[0] == "sticky":
            reply(*answer)
            os._exit(70)       # the context is unusable: the parent starts a fresh child
        reply(*answer)
        del msg, answer
        forget_received()


def _serve(host, msg, device) -> list:
    """One request of the parent, answered with plain data: ["answer", ...] to an "ask", ["done",
    calls, facts] to a "run", ["raised", failure] when the candidate raised, ["sticky", text]."""
    from k3diff.candidate_link import failure_of

    op, token, case = msg[0], None, None
    during = "ask"
    try:
        if op == "ask":
            return ["answer", host.ask(msg[1])]
        if op == "give_back":
            if msg[1]:                      # weight sets to forget, and all built on them
                host.forget(msg[1])
                _give_back(device)
            elif device.startswith("cuda"):     # only the cached transients: prepared sets and graphs stay
                import torch

                torch.cuda.empty_cache()
            return ["given", _held(host, device)]
        _, case, cfg, token, weights, drop, calls, provides = msg
        if drop:
            # sets past the last KEEP_SETS (a moe case's routing copy is a set of its own, so one
            # goes nearly every case): forgotten, not collected. Collecting here (gc, every graph
            # captured, the device's cached memory) cost each case 20-40 ms on the CPU and the
            # allocator's warm blocks on a GPU; the parent's own tensors are still its to hold,
            # and memory a case needs is asked back first (k3diff.sizing, `give_back`)
            host.forget(drop)
        during = "prepare" if (token, case.stage) not in host._prepared else "run"
        facts = host.run(case, cfg, token, weights, calls, provides)
        sticky = _sync_error(device)
        if sticky:
            return ["sticky", sticky]
        return ["done", [{"inputs": c["inputs"], "out": c["out"]} for c in calls], facts]
    except BaseException as exc:  # noqa: BLE001 - whatever the candidate raised is reported, not judged here
        if op == "run" and case is not None and (token, case.stage) in host._prepared:
            during = "run"
        failed = failure_of(exc, during)
        sticky = failed.error if STICKY.search(failed.error) else _sync_error(device)
        if sticky:
            return ["sticky", sticky.removeprefix(CRASH).strip()]
        return ["raised", {"error": failed.error, "oom": failed.oom, "crash": failed.crash}]


def _give_back(device: str) -> None:
    """What the forgotten weight sets held goes: cycles collected (a prepared object in one keeps its
    tensors, the parent's shared experts included), the caches built on them (captured graphs,
    k3diff.caches), and the allocator's cache returned to the device (the candidate's per-case
    transients stay cached otherwise: memory the judging process cannot use)."""
    gc.collect()
    caches.weights_dropped()            # ends with torch.cuda.empty_cache() where there is a GPU


def _held(host, device: str) -> dict:
    """What the candidate's process still holds after giving back (plain integers, for the parent's
    memory check and the GPU memory script): weight sets, prepared copies, and on a GPU the
    allocator's bytes now and at their peak."""
    out = {"weight_sets": len(host._weights), "prepared": len(host._prepared)}
    if device.startswith("cuda"):
        import torch

        out.update(reserved=int(torch.cuda.memory_reserved()), peak_reserved=int(torch.cuda.max_memory_reserved()))
    return out


def _sync_error(device: str) -> str | None:
    if not device.startswith("cuda"):
        return None
    import torch

    try:
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        return f"torch.cuda.synchronize() failed after the call: {exc}".splitlines()[0][:300]
    return None


def write_inflight(path: Path, record: dict) -> None:
    """The in-flight note, atomically and never through a planted link: a fresh temporary file
    (mkstemp: O_EXCL, its own random name) renamed over `path` (a rename replaces a link at the
    name, it does not follow it). Any failure is silent: never lose the case over this note."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(record, sort_keys=True))
        os.replace(tmp, path)
        tmp = None
    except OSError:
        pass        # the output paths were checked at start
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def inflight_record(case, kind, position, backend_name, device) -> dict:
    return {"case": case.to_dict(), "kind": kind, "position": position, "backend": backend_name,
            "device": device, "started": time.time()}


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
    """Judges cases with the candidate in a child process; `check(case)` and
    `check_invariance(case, position)` return a Verdict like `check_case` does, with crash/hang
    verdicts where the child could not answer. `start()` loads the backend there and returns its
    BackendInfo (BackendError if it cannot). It is also the candidate's link for k3diff.runner
    (`ask`, `run`): the judging happens here, in this process."""
    is_candidate_link = True
    remote = True

    def __init__(self, spec: str | None, backend_name: str | None = None, *, device: str,
                 timeout: float | None = None, inflight_dir=None, threads: int | None = None):
        from k3diff.candidate_link import WeightTokens

        self.spec, self.device = spec, device
        self.backend_name = backend_name or spec
        self.timeout = checked_seconds(DEFAULT_TIMEOUT if timeout is None else timeout)
        self.inflight_dir = Path(inflight_dir) if inflight_dir else Path(tempfile.gettempdir())
        self.threads = threads
        self.info: BackendInfo | None = None
        self._proc = self._sock = None
        self._pidfd = None
        self._left = self.timeout
        self.tokens = WeightTokens()
        self.started = 0                    # children started (1 + crashes/hangs)
        _LIVE.add(self)
        ref = weakref.ref(self)
        caches.register(f"candidate process {id(self)}", lambda: ref() and ref()._weights_dropped())
        from k3diff.sizing import register_reserve

        register_reserve(f"candidate process {id(self)}", lambda: ref() and ref().give_back())

    @property
    def inflight_path(self) -> Path:
        return self.inflight_dir / f".inflight-{os.getpid()}.json"

    @property
    def pgid(self) -> int | None:
        """The candidate's process group (its pid: it leads its own session); None when none runs."""
        return None if self._proc is None else self._proc.pid

    @property
    def name(self) -> str:
        return self.info.name if self.info else str(self.backend_name)

    @property
    def batch_invariant(self) -> bool:
        return bool(self.info and self.info.batch_invariant)

    def start(self) -> BackendInfo:
        if self._proc is None:
            self._start()
        return self.info

    def _start(self):
        from k3diff.backends.base import BackendError
        from k3diff.transfer import Malformed, decode, to_child

        _watch_signals()
        mine, theirs = socket.socketpair()
        try:
            proc = subprocess.Popen([sys.executable, "-c", _BOOT, str(theirs.fileno()), json.dumps(sys.path),
                                     str(os.getpid())], pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                    start_new_session=True, env=orphans.marked_env())
        finally:
            theirs.close()
        orphans.started(proc.pid)        # what it daemonises is adopted by this process (k3diff/orphans.py)
        self._proc, self._sock = proc, mine
        self.tokens.reset()
        try:
            self._pidfd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self._pidfd = None
        self.started += 1
        label = self.spec or "the default backend"
        try:
            _send_frame(self._sock, to_child((self.threads, self.device, self.spec, _share_of(self.device))))
            payload = None
            for phase, limit in (("start python and torch", STARTUP_TIMEOUT), ("load the backend", self.timeout)):
                try:
                    msg = decode(self._read(time.monotonic() + limit))
                except TimeoutError:
                    self._kill()
                    raise BackendError(f"backend {label!r}: the candidate process did not {phase} within "
                                       f"{limit:g} s (killed)") from None
                if not (isinstance(msg, list) and msg and msg[0] in ("booted", "refused", "ready")):
                    raise Malformed("not a loading message")
                if msg[0] == "refused":
                    self._kill()
                    raise BackendError(str(msg[1])[:400])
                payload = msg[1] if len(msg) > 1 else None
            self.info = _info_from(payload)
            self.backend_name = self.backend_name or self.info.spec
        except (EOFError, OSError):
            code = self._reap()
            raise BackendError(f"backend {label!r}: the candidate process died while loading the backend "
                               f"({signal_name(code)})") from None
        except Malformed as exc:
            self._kill()
            raise BackendError(f"backend {label!r}: the candidate process sent a message k3diff cannot read "
                               f"while loading ({exc}); killed") from None
        except BaseException:
            self._kill()
            raise

    def _read(self, deadline: float, most: int = REPLY_SLACK) -> bytearray:
        """One reply frame of at most `most` bytes by `deadline` (TimeoutError), EOFError if the
        child died or closed."""
        header = self._read_exact(_FRAME.size, deadline)
        (n,) = _FRAME.unpack(header)
        if n > most:
            from k3diff.transfer import Malformed

            raise Malformed(f"a reply of {n} bytes")
        return self._read_exact(n, deadline)

    def _read_exact(self, n: int, deadline: float) -> bytearray:
        """n bytes read straight into one buffer (a reply's tensors are viewed in it, not joined)."""
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        fds = [self._sock.fileno()] + ([self._pidfd] if self._pidfd is not None else [])
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select(fds, [], [], min(left, MAX_WAIT))
            if self._sock.fileno() in ready:
                k = self._sock.recv_into(view[got:], min(n - got, 1 << 24))
            elif ready:
                # dead: whatever it wrote before dying is still readable; then EOF
                self._sock.setblocking(False)
                try:
                    k = self._sock.recv_into(view[got:], min(n - got, 1 << 24))
                except BlockingIOError:
                    k = 0
                finally:
                    self._sock.setblocking(True)
            else:
                continue
            if not k:
                raise EOFError
            got += k
        return buf

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
        proc, sock, pidfd = self._proc, self._sock, self._pidfd
        self._kill_group()
        self._proc = self._sock = self._pidfd = None
        if sock is not None:
            sock.close()
        if pidfd is not None:
            os.close(pidfd)
        if proc is not None:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
            orphans.ended(proc.pid)         # what it daemonised dies with it (k3diff/orphans.py)

    def close(self):
        """A polite stop (the child may flush), then the group killed all the same: whatever the
        candidate forked dies with it."""
        if self._sock is not None:
            try:
                from k3diff.transfer import to_child

                _send_frame(self._sock, to_child(None))
                self._proc.wait(2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()
        try:
            self.inflight_path.unlink()
        except OSError:
            pass

    # ------------------------------------------------------- the link k3diff.runner judges through

    def begin_case(self) -> None:
        """The candidate's time for this case starts full (k3diff.judge, per attempt)."""
        self._left = self.timeout

    def writable(self, weights: dict) -> dict:
        """The weights the child can write to: the shared ones (k3diff.transfer); it guards its
        own copies of the rest and reports a write as a fact."""
        from k3diff.transfer import shared

        return {k: v for k, v in weights.items() if shared(v)}

    def ask(self, case) -> dict:
        msg = self._round(("ask", case))
        answer = msg[1] if len(msg) == 2 and msg[0] == "answer" else None
        if not (isinstance(answer, dict) and set(answer) == {"skip", "provides", "deterministic"}
                and (answer["skip"] is None or isinstance(answer["skip"], str))
                and isinstance(answer["provides"], list) and all(isinstance(p, str) for p in answer["provides"])
                and isinstance(answer["deterministic"], bool)):
            raise self._malformed("not an answer to `ask`")
        return answer

    def run(self, case, cfg, weights, calls, provides) -> tuple[list, dict]:
        token, new = self.tokens.token(weights)
        drop = self.tokens.take_dropped()
        start = time.perf_counter()
        try:
            msg = self._round(("run", case, cfg, token, weights if new else None, drop, calls, sorted(provides)))
        except _NoRoom:
            self.tokens.undelivered(token if new else None, drop)
            raise
        if not (len(msg) == 3 and msg[0] == "done"):
            raise self._malformed("not an answer to `run`")
        calls, facts = _same_layout(calls, msg[1], self._malformed), _facts(msg[2], self._malformed)
        # the phase clock's transfer: this call's wall less the child's own seconds, which only it
        # can time (a child that lies about them moves seconds between two phases, no verdict)
        facts["transfer_s"] = max(0.0, time.perf_counter() - start - facts.pop("host_s"))
        return calls, facts

    def _round(self, request) -> list:
        """Send one request, read its one reply within the candidate's time left in this case."""
        from k3diff.transfer import Malformed, decode, tensor_bytes, to_child

        if self._proc is None:
            self._start()
        shares: list = []      # what the request shares, which the reply may name (k3diff.transfer)
        data = to_child(request, shares)
        start = time.monotonic()
        try:
            if select.select([self._sock.fileno()], [], [], 0)[0]:
                raise Malformed("it wrote a message k3diff did not ask for")
            _send_frame(self._sock, data)
            msg = decode(self._read(start + self._left, REPLY_SLACK + tensor_bytes(request)), refs=shares)
        except TimeoutError:
            self._kill()
            raise CandidateFailed(f"{HANG} no verdict within {self.timeout:g} s of the candidate's own time "
                                  "(--k3diff-timeout); the candidate process was killed") from None
        except (EOFError, OSError):
            code = self._reap()
            raise CandidateFailed(f"{CRASH} the candidate process died ({signal_name(code)})") from None
        except Malformed as exc:
            raise self._malformed(str(exc)) from None
        except BaseException:       # our own Ctrl-C mid-case: the candidate goes with the run
            self._kill()
            raise
        finally:
            self._left -= time.monotonic() - start
        if not (isinstance(msg, list) and msg and isinstance(msg[0], str)):
            raise self._malformed("not a reply")
        if msg[0] == "no_room" and len(msg) == 2 and isinstance(msg[1], str):
            raise _NoRoom(f"{CRASH} out of memory receiving the case in the candidate's process: {msg[1][:300]}",
                          oom=True)
        if msg[0] == "sticky" and len(msg) == 2:
            self._reap()
            raise CandidateFailed(f"{CRASH} sticky device error: {str(msg[1])[:300]}")
        if msg[0] == "raised" and len(msg) == 2:
            r = msg[1]
            if not (isinstance(r, dict) and isinstance(r.get("error"), str) and isinstance(r.get("oom"), bool)
                    and isinstance(r.get("crash"), bool)):
                raise self._malformed("not a failure report")
            if r["crash"] and not r["oom"]:
                self._kill()            # it raised past its verdict: a fresh child for the next case
            raise CandidateFailed(r["error"][:400], oom=r["oom"], crash=r["crash"] or r["oom"])
        return msg

    def give_back(self) -> dict | None:
        """Ask the candidate's process to forget the weight sets this process dropped and return its
        cached device memory, then free here what only it kept alive; what it still holds (`_held`),
        or None where no child runs. Called whenever weights are dropped (k3diff.caches: the cache
        budget, sizing.check_fits finding no room, the judge's retry after out of memory): the
        child's copies and its allocator's cache are invisible to this process, and a large weight
        it maps (a CUDA IPC handle, k3diff.transfer) stays allocated HERE until it lets go of it.
        And before any weight is dropped (sizing.register_reserve), with nothing to forget: then the
        child only empties its allocator's cache and keeps its weight sets and prepared copies.
        A child that cannot answer (dead, hung, a malformed or unasked message) is killed: that
        gives back everything, and the next case starts a fresh one. No verdict depends on this."""
        from k3diff.transfer import Malformed, decode, tensor_bytes, to_child

        if self._proc is None:
            return None
        held = None
        try:
            if select.select([self._sock.fileno()], [], [], 0)[0]:
                raise Malformed("it wrote a message k3diff did not ask for")
            _send_frame(self._sock, to_child(("give_back", self.tokens.take_dropped())))
            msg = decode(self._read(time.monotonic() + self.timeout))
            if not (isinstance(msg, list) and len(msg) == 2 and msg[0] == "given" and isinstance(msg[1], dict)):
                raise Malformed("not an answer to `give_back`")
            held = {str(k): v for k, v in msg[1].items() if type(v) is int}
        except (TimeoutError, EOFError, OSError, Malformed):
            self._kill()
        finally:
            _collect_shared(self.device)
        return held

    def _weights_dropped(self) -> None:
        """k3diff.caches: this process dropped its weight sets; so does the candidate's, now (not
        with the next case's call, after this process has measured its free memory)."""
        self.tokens.clear()
        self.give_back()

    def _malformed(self, why: str) -> CandidateFailed:
        self._kill()
        return CandidateFailed(f"{CRASH} the candidate process sent a reply k3diff cannot read ({why}); "
                               "it was killed")

    # ------------------------------------------------------- the checks

    def check(self, case):
        return self._call(case, "case", None)

    def check_invariance(self, case, position):
        return self._call(case, "invariance", position)

    def _call(self, case, kind, position):
        if self._proc is None:
            self._start()
        write_inflight(self.inflight_path, inflight_record(case, kind, position, self.backend_name, self.device))
        return judge(kind, case, position, self, self.device)

    def __del__(self):  # pragma: no cover - best effort at interpreter exit
        try:
            self._kill()
        except Exception:  # noqa: BLE001
            pass


def _collect_shared(device: str) -> None:
    """Free the device memory this process shared with the candidate's and that only the candidate
    kept alive: torch keeps a freed tensor another process still maps in a limbo, collected only by
    `ipc_collect` or an allocation that fails; then the allocator's cache goes back to the device."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.ipc_collect()
        torch.cuda.empty_cache()


def _same_layout(sent: list, got, malformed) -> list:
    """The child's calls as k3diff reads them: its tensors where k3diff sent tensors, each of the
    same dtype and shape, moved to the device k3diff's was on; k3diff's own values elsewhere, and
    the keys k3diff gave each besides its buffers (a scheduled run's "schedule",
    k3diff.controls.make_calls: without it the judge takes the scheduled run for a plain one and
    never compares it with the eager run)."""
    import torch

    if not (isinstance(got, list) and len(got) == len(sent)):
        raise malformed("calls")
    out = []
    for mine, theirs in zip(sent, got):
        call = {k: v for k, v in mine.items() if k not in ("inputs", "out")}    # k3diff's, never the child's
        for part in ("inputs", "out"):
            back = theirs.get(part) if isinstance(theirs, dict) else None
            if not isinstance(back, dict):
                raise malformed(part)
            call[part] = {}
            for name, t in mine[part].items():
                b = back.get(name)
                if not torch.is_tensor(t):
                    call[part][name] = t
                    continue
                if not (torch.is_tensor(b) and b.dtype == t.dtype and tuple(b.shape) == tuple(t.shape)):
                    raise malformed(f"{part}[{name!r}]")
                call[part][name] = b.to(t.device)
        out.append(call)
    return out


def _facts(facts, malformed) -> dict:
    replaced = facts.get("replaced") if isinstance(facts, dict) else None
    if not (isinstance(replaced, list) and all(isinstance(r, list) and len(r) == 3 and isinstance(r[0], int)
                                               and isinstance(r[1], str) and isinstance(r[2], str)
                                               for r in replaced)):
        raise malformed("facts")
    for key in ("prepare_s", "host_s"):
        seconds = facts.get(key)
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0 <= seconds < 1e9:
            raise malformed("facts")
    changed = facts.get("weights_changed")
    if not (isinstance(changed, list) and all(isinstance(n, str) for n in changed)):
        raise malformed("facts")
    sched = facts.get("schedule", {})       # k3diff.schedule.fill: plain lines only
    if not (isinstance(sched, dict) and set(sched) <= {"error", "skip"} and all(isinstance(v, str) for v in sched.values())):
        raise malformed("facts")
    out = {"replaced": replaced, "prepare_s": float(facts["prepare_s"]), "host_s": float(facts["host_s"]),
           "weights_changed": changed}
    return dict(out, schedule=sched) if "schedule" in facts else out


class InProcessChecker:
    """The same interface, in this process (`--k3diff-isolate off`, mutant hunts). It writes the
    in-flight note too, so a run that this candidate ends (os._exit, a segfault) leaves its case
    (k3diff.early_exit names it)."""

    def __init__(self, backend, *, device: str, inflight_dir=None):
        from k3diff.candidate_link import LocalLink

        self.backend, self.device = backend, device
        self.link = LocalLink(backend)
        self.inflight_dir = Path(inflight_dir) if inflight_dir else Path(tempfile.gettempdir())

    @property
    def inflight_path(self) -> Path | None:
        return None if self.inflight_dir is None else self.inflight_dir / f".inflight-{os.getpid()}.json"

    def _note(self, case, kind, position):
        if self.inflight_path is not None:
            name = str(getattr(self.backend, "name", type(self.backend).__name__))
            write_inflight(self.inflight_path, inflight_record(case, kind, position, name, self.device))

    def check(self, case):
        self._note(case, "case", None)
        return judge("case", case, None, self.link, self.device)

    def check_invariance(self, case, position):
        self._note(case, "invariance", position)
        return judge("invariance", case, position, self.link, self.device)

    def close(self):
        if self.inflight_path is not None:
            try:
                self.inflight_path.unlink()
            except OSError:
                pass
