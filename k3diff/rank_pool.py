"""The ranks of a distributed candidate (k3diff/distributed.py): N processes under one
torch.distributed process group (gloo on the CPU; NCCL on GPUs, rank r on cuda:r, NVLink
multicast off: NCCL_NVLS_ENABLE=0 in the rank), a pipe to each, kept across cases.

Each rank loads the per-rank implementation by "module:object", keeps the prepared shards it is
sent (by key), and answers each step with its rows. A shard travels as shared-memory tensors (the
pipe carries their handles: a GiB by value took 11.7 s on the 2-core CPU machine, 0.5 s this way,
`python scripts/shard_transport.py 1`); the steps' inputs and rows, small, by value (torch.save
bytes).
Failures: a rank that dies is a `crash:`, one with no answer within the timeout a `hang:`, one
that raises its message (RankFailure.verdict_error, used by runner.py as the case's error); in
each case every rank is killed, so the next case starts a fresh pool.

A pool never outlives the process that started it (its owner): ranks fork from a multiprocessing
forkserver (torch imported once, so a pool restarted after a failure starts in milliseconds), and
a watchdog thread in each rank exits as soon as the owner stops; so when isolation.py kills a hung
candidate process its ranks go with it, and then the forkserver. The forkserver keeps the
environment it started with: variables set later in the owner do not reach the ranks.
"""
from __future__ import annotations

import atexit
import contextlib
import datetime
import io
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from multiprocessing.connection import wait

from k3diff import orphans
from k3diff.ep_config import Layout
from k3diff.fatal import CRASH, HANG, signal_name

RANK_TIMEOUT = float(os.environ.get("K3DIFF_RANK_TIMEOUT", "300"))   # one rank's answer to one step
START_TIMEOUT = 300.0          # N fresh interpreters importing torch on a loaded machine


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


class RankFailure(RuntimeError):
    """A rank died, hung or raised. `verdict_error` is the case's error line (runner.py uses it
    as is, so `crash:`/`hang:` stay final verdicts)."""

    def __init__(self, line: str):
        super().__init__(line)
        self.verdict_error = line


# ------------------------------------------------------------------ transport of tensors

def _pack(obj) -> bytes:
    """Tensors (any dtype, bf16 included) and plain values through a pipe, by value."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _unpack(blob: bytes, device=None):
    import torch

    return torch.load(io.BytesIO(blob), map_location=device, weights_only=True)


def _shared(tensors: dict):
    """The tensors moved into shared memory (in place: give it tensors of your own), for the pipe
    to carry by handle (torch.multiprocessing's reductions, registered on import); or, when
    /dev/shm has not room for them twice over (Docker's default is 64 MB, and a full tmpfs
    kills the writer with SIGBUS rather than an error), torch.save bytes as before."""
    import torch
    import torch.multiprocessing  # noqa: F401 - registers the shared-memory tensor reductions

    need = sum(v.numel() * v.element_size() for v in tensors.values() if torch.is_tensor(v))
    try:
        st = os.statvfs("/dev/shm")
        room = st.f_bavail * st.f_frsize
    except OSError:
        room = 0
    if room < 2 * need + (64 << 20):
        return _pack(_to_cpu(tensors))
    out = {}
    for k, v in tensors.items():
        if torch.is_tensor(v):
            v = v.detach().cpu().share_memory_()
        out[k] = v
    return out


def _placed(tensors, device) -> dict:
    """A received shard (shared tensors, or bytes: _shared) on the rank's device (a GPU rank
    copies it there; the CPU keeps the shared pages)."""
    import torch

    if isinstance(tensors, bytes):
        return _unpack(tensors, device)
    if device in (None, "cpu"):
        return tensors
    return {k: v.to(device) if torch.is_tensor(v) else v for k, v in tensors.items()}


def _to_cpu(tensors: dict) -> dict:
    import torch

    return {k: (v.detach().cpu() if torch.is_tensor(v) else v) for k, v in tensors.items()}


# ------------------------------------------------------------------ one rank

@dataclass
class RankContext:
    rank: int
    world: int
    layout: Layout
    device: str
    group: object = None

    @property
    def rows(self) -> tuple:
        return self.layout.rows[self.rank]


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][:1] not in "ZX"      # a zombie has stopped
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False


def _die_with(owner: int) -> None:
    """Exit when the process that started the pool stops. Our parent is the forkserver, which
    outlives that process while any rank holds its liveness pipe, so a thread watches the owner
    itself (a rank blocked in a collective has released the GIL); PR_SET_PDEATHSIG covers a
    forkserver that dies."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)     # PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):
        pass

    def watch():
        while _running(owner):
            time.sleep(0.25)
        os._exit(1)

    if not _running(owner):
        os._exit(1)
    threading.Thread(target=watch, name="k3diff-rank-watchdog", daemon=True).start()


def _rank_main(conn, rank: int, world: int, store: str, impl_spec: str, kind: str, timeout: float,
               owner: int, on_gpu: bool = False) -> None:
    _die_with(owner)
    orphans.mark_this_process()        # what it daemonises: swept by the owner (k3diff/orphans.py)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if kind == "nccl":
        os.environ["NCCL_NVLS_ENABLE"] = "0"     # NVLink multicast off (these machines' notes)
    device = "cpu"
    if kind == "gloo":
        if "GLOO_SOCKET_IFNAME" not in os.environ and os.path.exists("/sys/class/net/lo"):
            os.environ["GLOO_SOCKET_IFNAME"] = "lo"       # ranks of one host: loopback only
    try:
        if kind == "nccl" or on_gpu:             # gloo with on_gpu: ranks share the GPUs there are
            device = f"cuda:{rank % max(1, torch.cuda.device_count())}"
            torch.cuda.set_device(device)
        impl = load_impl(impl_spec)
        dist.init_process_group(kind, init_method=f"file://{store}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout + 60))
    except BaseException as exc:  # noqa: BLE001 - one line to the parent
        conn.send(("error", _line(exc)))
        return
    conn.send(("ready", os.getpid()))
    shards: dict = {}
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break
        if msg is None:
            break
        try:
            if msg[0] == "shard":
                _, key, stage, cfg, layout, blob = msg
                if len(shards) > 4:
                    shards.clear()
                ctx = RankContext(rank, world, layout, device, dist.group.WORLD)
                shards[key] = impl.prepare_rank(cfg, stage, _placed(blob, device), ctx)
                conn.send(("ok", None))
            else:
                _, key, stage, cfg, layout, blob = msg
                ctx = RankContext(rank, world, layout, device, dist.group.WORLD)
                with torch.no_grad():
                    rows = impl.run_rank(stage, cfg, shards[key], _unpack(blob, device), ctx)
                if device != "cpu":
                    torch.cuda.synchronize()
                conn.send(("ok", _pack(_to_cpu(rows))))
        except BaseException as exc:  # noqa: BLE001 - the parent tears the pool down
            conn.send(("error", _line(exc)))
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass


def load_impl(spec: str):
    """A per-rank implementation by "module:object" (a class is instantiated)."""
    from k3diff.backends.targets import load_target

    obj = load_target(spec)
    impl = obj() if isinstance(obj, type) else obj
    missing = [m for m in ("prepare_rank", "run_rank", "provides") if not hasattr(impl, m)]
    if missing:
        from k3diff.backends.base import BackendError

        raise BackendError(f"rank implementation {spec!r} lacks {', '.join(missing)} (k3diff/distributed.py)")
    return impl


def _line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]




# ------------------------------------------------------------------ the pool

_POOLS: "weakref.WeakSet[RankPool]" = weakref.WeakSet()


@atexit.register
def _close_pools():
    for pool in list(_POOLS):
        pool.kill()


class RankPool:
    """N rank processes and one pipe to each. Any failure kills them all (`kill`)."""

    def __init__(self, impl_spec: str, world: int, kind: str, timeout: float = RANK_TIMEOUT,
                 on_gpu: bool = False):
        """kind: the process group's backend; on_gpu: every rank on a GPU (rank r on cuda:r mod
        the GPUs there are), as NCCL always is and gloo is for a candidate whose ranks run GPU
        kernels on fewer GPUs than ranks."""
        self.world, self.kind, self.timeout = world, kind, timeout
        self.on_gpu = on_gpu or kind == "nccl"
        self.dir = tempfile.mkdtemp(prefix="k3diff-ranks-")
        # forkserver: one server imports torch once; every rank of every later pool forks from it
        # (a pool restarted after a failure costs milliseconds, not N interpreters importing torch)
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["torch", "torch.distributed", "k3diff.rank_pool"])
        self.procs, self.conns, self.pids = [], [], []
        orphans.adopt()                  # a rank's daemonised child is reparented here, not to init
        _POOLS.add(self)
        for r in range(world):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_rank_main, name=f"k3diff-rank{r}", daemon=True,
                               args=(child, r, world, os.path.join(self.dir, "store"), impl_spec, kind, timeout,
                                     os.getpid(), self.on_gpu))
            with _main_not_reimported():         # spawn must not rerun the caller's script
                proc.start()
            child.close()
            self.procs.append(proc)
            self.conns.append(parent)
        for r, (tag, payload) in enumerate(self._gather(START_TIMEOUT, "start")):
            if tag != "ready":
                self.kill()
                from k3diff.backends.base import BackendError

                raise BackendError(f"rank {r} of {world} did not start: {payload}")
            self.pids.append(payload)

    def alive(self) -> bool:
        return bool(self.procs) and all(p.is_alive() for p in self.procs)

    def broadcast(self, msgs: list, what: str) -> list:
        """Send msgs[r] to rank r, then wait for every answer; RankFailure (pool killed) if a rank
        dies, hangs or raises."""
        for r, (conn, msg) in enumerate(zip(self.conns, msgs)):
            try:
                conn.send(msg)
            except (OSError, BrokenPipeError):
                self._fail_dead(r, what)
        answers = self._gather(self.timeout, what)
        errors = [(r, p) for r, (t, p) in enumerate(answers) if t == "error" and p is not None]
        if errors:
            self._blame_the_dead(what)       # a peer's "connection closed" follows a rank's death
            self.kill()
            r, line = errors[0]
            raise RankFailure(f"rank {r} of {self.world} raised during {what}: {line}")
        return [p for _, p in answers]

    def _gather(self, timeout: float, what: str) -> list:
        deadline = time.monotonic() + timeout
        answers = [None] * self.world
        pending = set(range(self.world))
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                late = ", ".join(map(str, sorted(pending)))
                self.kill()
                raise RankFailure(f"{HANG} rank(s) {late} of {self.world} gave no answer to {what} within "
                                  f"{timeout:g} s (K3DIFF_RANK_TIMEOUT); every rank was killed")
            # a pipe with an answer, or a process that ended (its sentinel), wakes us at once
            ready = set(wait([self.conns[r] for r in pending] + [self.procs[r].sentinel for r in pending],
                             timeout=min(left, 1.0)))
            for r in sorted(pending):
                conn = self.conns[r]
                try:
                    if conn in ready or conn.poll(0):
                        answers[r] = conn.recv()
                        pending.discard(r)
                        if answers[r][0] == "error":     # the others may wait for it forever
                            return [a if a is not None else ("error", None) for a in answers]
                    elif self.procs[r].sentinel in ready or not self.procs[r].is_alive():
                        self._fail_dead(r, what)
                except (EOFError, OSError):
                    self._fail_dead(r, what)
        return answers

    def _blame_the_dead(self, what: str, grace: float = 2.0) -> None:
        """If a rank has died (or dies within `grace` s), that is the failure: a crash."""
        wait([p.sentinel for p in self.procs], timeout=grace)
        dead = [r for r, p in enumerate(self.procs) if not p.is_alive()]
        if dead:
            self._fail_dead(dead[0], what)

    def _fail_dead(self, r: int, what: str):
        self.procs[r].join(2)
        code = self.procs[r].exitcode
        self.kill()
        raise RankFailure(f"{CRASH} rank {r} of {self.world} died during {what} ({signal_name(code, 'still running')}); "
                          "the other ranks were torn down")

    def kill(self) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
        for proc in self.procs:
            proc.join(5)
        for conn in self.conns:
            conn.close()
        self.procs, self.conns = [], []
        shutil.rmtree(self.dir, ignore_errors=True)
        orphans.ended()                  # and whatever the ranks daemonised (k3diff/orphans.py)

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except OSError:
                pass
        for proc in self.procs:
            proc.join(5)
        self.kill()
