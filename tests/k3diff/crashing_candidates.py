"""Candidates that crash or hang on one batch size, for the isolation tests (k3diff.isolation).

Each wraps the correct `torch-blocked` candidate and misbehaves only on one batch size, so a fuzz
run meets the bad case among good ones. Loaded by name (`crashing_candidates:Abort`) in a fresh
child process, like any `module:object` backend.
"""
import ctypes
import os
import time

import torch

from k3diff.backends.blocked import TorchBlockedBackend

BAD_BATCH = 3


class _OnBatch(TorchBlockedBackend):
    stages = ("moe",)

    def run(self, stage, cfg, prepared, inputs, out):
        if inputs["x"].shape[0] == BAD_BATCH:
            self.misbehave()
        return super().run(stage, cfg, prepared, inputs, out)


class OutOfMemory(_OnBatch):
    """Out of device memory on the first two tries of one batch size, then not (as on the H100 of
    call 86: a full-dims bf16 layer case out of memory twice, then held when Hypothesis replayed
    it): the machine's limit (k3diff.judge), a case the fuzz run skips and goes on past, exit 11."""
    name = "crashing_candidates:OutOfMemory"
    tries = 0

    def misbehave(self):
        OutOfMemory.tries += 1
        if OutOfMemory.tries <= 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 59.00 GiB.")


class Abort(_OnBatch):
    """SIGABRT, as a failed assert in C++ would."""
    name = "crashing_candidates:Abort"

    def misbehave(self):
        os.abort()


class Segfault(_OnBatch):
    """A read of address 0: SIGSEGV, as an out-of-bounds host pointer would."""
    name = "crashing_candidates:Segfault"

    def misbehave(self):
        ctypes.string_at(0)


class Exit(_OnBatch):
    """The process just goes away (os._exit), as a kernel library calling exit() would."""
    name = "crashing_candidates:Exit"

    def misbehave(self):
        os._exit(3)


class Hang(_OnBatch):
    """Never returns, as a kernel spinning on a flag nobody sets would."""
    name = "crashing_candidates:Hang"

    def misbehave(self):
        while True:
            time.sleep(1)


class StickyError(_OnBatch):
    """Raises what a CUDA runtime reports after an out-of-bounds access (CPU stand-in)."""
    name = "crashing_candidates:StickyError"

    def misbehave(self):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")


class CudaIllegalAddress(_OnBatch):
    """A real illegal address on the GPU on batch 3 (for the GPU lane; unavailable without CUDA
    and Triton): a Triton kernel stores 1 TiB past the end of a CUDA tensor, an unmapped address.
    The device reports "an illegal memory access was encountered" and the context stays unusable
    for every later call, as after an out-of-bounds store in a fused kernel."""
    name = "crashing_candidates:CudaIllegalAddress"

    def available(self):
        if not torch.cuda.is_available():
            return "needs a CUDA device"
        try:
            import triton  # noqa: F401
        except ImportError:
            return "needs Triton"
        return None

    def misbehave(self):
        x = torch.zeros(16, device="cuda")
        _far_store()[(1,)](x)
        torch.cuda.synchronize()


_FAR_STORE = None


def _far_store():
    """The Triton kernel, built on first use (Triton is imported only where it runs)."""
    global _FAR_STORE
    if _FAR_STORE is None:
        import triton
        import triton.language as tl

        @triton.jit
        def far_store(p):
            tl.store(p + (1 << 38), 1.0)          # 2^38 floats = 1 TiB past p

        _FAR_STORE = far_store
    return _FAR_STORE


class CudaDeviceAssert(_OnBatch):
    """An out-of-bounds index on the GPU on batch 3: torch's device-side bounds check fires (a
    device-side assert), which also leaves the CUDA context unusable."""
    name = "crashing_candidates:CudaDeviceAssert"

    def available(self):
        return None if torch.cuda.is_available() else "needs a CUDA device"

    def misbehave(self):
        x = torch.zeros(16, device="cuda")
        idx = torch.full((16,), 1 << 40, dtype=torch.int64, device="cuda")
        x[idx] = 1.0                     # out of bounds: device-side assert
        torch.cuda.synchronize()


class ReallocatesOutput(TorchBlockedBackend):
    """Breaks the output contract: rebinds out['out'] to a new float64 tensor."""
    name = "crashing_candidates:ReallocatesOutput"
    stages = ("moe",)

    def run(self, stage, cfg, prepared, inputs, out):
        super().run(stage, cfg, prepared, inputs, out)
        out["out"] = out["out"].double()


class NoFinalOutput(TorchBlockedBackend):
    """Breaks the provides contract: does not write the stage's final output."""
    name = "crashing_candidates:NoFinalOutput"
    stages = ("moe",)

    def provides(self, stage):
        return {"router_logits"}


class RaisesInInit(TorchBlockedBackend):
    def __init__(self):
        raise RuntimeError("cannot open /dev/nvidia0")


class RaisesInAvailable(TorchBlockedBackend):
    def available(self):
        raise OSError("driver query failed")


class BatchDependent(TorchBlockedBackend):
    """Declares batch invariance but a token's output changes when it has neighbours."""
    name = "crashing_candidates:BatchDependent"
    stages = ("moe",)
    batch_invariant = True

    def run(self, stage, cfg, prepared, inputs, out):
        super().run(stage, cfg, prepared, inputs, out)
        if inputs["x"].shape[0] > 1:
            out["out"].mul_(1.0078125)


# ---- the attacks of issue 29: a candidate that tries to look right, or to outlive the run

def _note_group(extra=()):
    """Write this process group (and any extra pids) where the test asked, so it can check that
    nothing of the candidate survives."""
    path = os.environ.get("K3DIFF_TEST_PIDFILE")
    if path:
        with open(path + ".tmp", "w") as f:
            f.write(" ".join(str(p) for p in (os.getpgid(0), os.getpid(), *extra)))
        os.replace(path + ".tmp", path)


class WrongThenExit(TorchBlockedBackend):
    """Writes a doubled (wrong) output, then exits 0 before k3diff can judge it: replay printed
    nothing and exited 0."""
    name = "crashing_candidates:WrongThenExit"
    stages = ("moe",)

    def run(self, stage, cfg, prepared, inputs, out):
        super().run(stage, cfg, prepared, inputs, out)
        out["out"].mul_(2)
        raise SystemExit(0)


class InterruptsItself(_OnBatch):
    """Raises KeyboardInterrupt inside run(): it aborted the whole run with no seed."""
    name = "crashing_candidates:InterruptsItself"

    def misbehave(self):
        raise KeyboardInterrupt


class RaisesInPrepare(TorchBlockedBackend):
    """prepare() raises: a 100-line traceback and no seed, where a verdict was due."""
    name = "crashing_candidates:RaisesInPrepare"
    stages = ("moe",)

    def prepare(self, cfg, stage, weights):
        raise RuntimeError("packing failed")


class RefusesEverything(TorchBlockedBackend):
    """Claims moe, then refuses every case through supports(): 0 cases judged was "all passed"."""
    name = "crashing_candidates:RefusesEverything"
    stages = ("moe",)
    batch_invariant = True

    def supports(self, cfg, stage):
        return "this candidate runs no case at all"


class ForksAndPasses(TorchBlockedBackend):
    """Correct, but forks a process that outlives each call (a passing run left 11 behind)."""
    name = "crashing_candidates:ForksAndPasses"
    stages = ("moe",)

    def run(self, stage, cfg, prepared, inputs, out):
        pid = os.fork()
        if pid == 0:
            time.sleep(300)
            os._exit(0)
        _note_group((pid,))
        return super().run(stage, cfg, prepared, inputs, out)


class SpawnsAndHangs(TorchBlockedBackend):
    """Starts a grandchild (`sleep 300`), then never returns: both must die with the run."""
    name = "crashing_candidates:SpawnsAndHangs"
    stages = ("moe",)

    def run(self, stage, cfg, prepared, inputs, out):
        import subprocess

        child = subprocess.Popen(["sleep", "300"])
        _note_group((child.pid,))
        while True:
            time.sleep(1)


class NoStageList(TorchBlockedBackend):
    """`stages = None`: INTERNALERROR where one line was due."""
    stages = None


# ---- a pass needs judged evidence, and a verdict blames the right party: each candidate below
# made a run read green, or blamed the machine for the candidate's own fault (scripts/attacks.sh)

class NoStages(TorchBlockedBackend):
    """Implements no stage: every case skipped read "12 passed, 7 skipped", exit 0. Refused at
    load (exit 8)."""
    name = "crashing_candidates:NoStages"
    stages = ()


class ProvidesNothingLater(TorchBlockedBackend):
    """Answers provides() honestly at the load-time check, then with nothing: zero tensors to
    judge, and a verdict over nothing was `ok`."""
    name = "crashing_candidates:ProvidesNothingLater"
    stages = ("moe",)

    def __init__(self):
        super().__init__()
        self.asked = 0

    def provides(self, stage):
        self.asked += 1
        return super().provides(stage) if self.asked == 1 else set()


class ExitsZeroInRun(TorchBlockedBackend):
    """os._exit(0) inside run(): with isolation off the whole run ended silently with status 0."""
    name = "crashing_candidates:ExitsZeroInRun"
    stages = ("moe",)

    def run(self, stage, cfg, prepared, inputs, out):
        os._exit(0)


class ForgesVerdict(TorchBlockedBackend):
    """Writes a forged passing verdict (one tensor "ok") onto the isolation socket (the child's own
    connection, fd from its command line), then leaves: while the judge ran in the candidate's
    process the parent took the forgery as the case's verdict."""
    name = "crashing_candidates:ForgesVerdict"
    stages = ("moe",)

    def run(self, stage, cfg, prepared, inputs, out):
        import sys
        from multiprocessing.connection import Connection

        from k3diff.case import Case
        from k3diff.divergence import TensorReport
        from k3diff.verdict import Verdict

        forged = Verdict(Case("moe", batch=int(inputs["x"].shape[0])), self.name,
                         reports=[TensorReport("moe", "out", True, bound=1.0)])
        try:
            Connection(int(sys.argv[1]), readable=False).send(("verdict", forged))
        except (IndexError, ValueError, OSError):
            pass                    # not in the isolated child: nothing to forge onto
        time.sleep(1)               # the parent reads the forgery before it sees this process end
        os._exit(0)


class AlwaysOutOfMemory(TorchBlockedBackend):
    """Raises torch.OutOfMemoryError on every case, however small (KB): the candidate's own fault,
    once blamed on the machine ("case too large", exit 11, no seed)."""
    name = "crashing_candidates:AlwaysOutOfMemory"
    stages = ("moe",)

    def run(self, stage, cfg, prepared, inputs, out):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 KiB.")


class MoeOnly(TorchBlockedBackend):
    """Correct, and implements moe alone: a run that asks it for kda judged nothing, and read as a
    pass because the nothing-judged rule looked only at the stages the candidate claims."""
    name = "crashing_candidates:MoeOnly"
    stages = ("moe",)


class PatchesJudge(TorchBlockedBackend):
    """Patches k3diff's judging code in its own process so that every comparison passes, then
    writes zeros: wherever the judge shares the candidate's process, it passed."""
    name = "crashing_candidates:PatchesJudge"
    stages = ("moe",)

    def run(self, stage, cfg, prepared, inputs, out):
        import k3diff.controls
        import k3diff.routing
        import k3diff.runner

        k3diff.routing.judge_moe_routing = lambda run_ref, per, ref, base, *a, **k: (ref, base)
        k3diff.runner._output_reports = lambda *a, **k: []
        k3diff.runner.state_reports = lambda *a, **k: []
        k3diff.controls.compare_many = lambda items: []
        for t in out.values():
            t.zero_()


class ExitsCleanly(_OnBatch):
    """os._exit(0) on one batch size: exit status 0, no exception, no atexit hook."""
    name = "crashing_candidates:ExitsCleanly"

    def misbehave(self):
        os._exit(0)


class OutOfMemoryAlways(_OnBatch):
    """Out of memory on one batch size, every time, on a KB-sized case: the candidate's own
    allocation, not the machine's limit (k3diff.sizing.own_out_of_memory)."""
    name = "crashing_candidates:OutOfMemoryAlways"

    def misbehave(self):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 59.00 GiB.")


class ScribblesOnWeights(TorchBlockedBackend):
    """Runs correctly, then adds 1 to a weight it was given: in its own process it holds its own copy
    of the small weights, which k3diff's guard cannot see; its process must report the write."""
    name = "crashing_candidates:ScribblesOnWeights"
    stages = ("moe",)

    def prepare(self, cfg, stage, weights):
        self._weights = weights
        return super().prepare(cfg, stage, weights)

    def run(self, stage, cfg, prepared, inputs, out):
        super().run(stage, cfg, prepared, inputs, out)
        self._weights["router.bias"].add_(1)


class ClaimsAHugeReply(TorchBlockedBackend):
    """Writes a frame header announcing a 512 GiB reply onto the isolation socket, then waits: the
    parent reads a reply into one buffer of the announced length, so it must refuse a length no
    reply to its request can have before it allocates anything."""
    name = "crashing_candidates:ClaimsAHugeReply"
    stages = ("moe",)

    def run(self, stage, cfg, prepared, inputs, out):
        import socket
        import struct
        import sys

        try:
            socket.socket(fileno=int(sys.argv[1])).sendall(struct.pack("<Q", 1 << 39))
        except (IndexError, ValueError, OSError):
            return super().run(stage, cfg, prepared, inputs, out)      # not isolated: nothing to claim on
        time.sleep(30)


class CountsCollections(TorchBlockedBackend):
    """torch-blocked that appends a line to the file named by K3DIFF_TEST_CLEARS each time its
    process clears the caches built on weights (k3diff.caches: what a full give-back does): how
    often the candidate's process pays for a collection."""
    name = "crashing_candidates:CountsCollections"

    def __init__(self):
        super().__init__()
        from k3diff import caches

        path = os.environ["K3DIFF_TEST_CLEARS"]

        def clear():
            with open(path, "a") as fh:
                fh.write("cleared\n")
        caches.register("collections counted", clear)


def _device_full():
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 50.00 MiB.")


class FullOnArrival:
    """Put into a request in place of a tensor that does not fit the device when the candidate's
    process rebuilds it (seen on an H100 shared by several runs): unpickling it runs out of memory
    before the candidate is called."""

    def __reduce__(self):
        return (_device_full, ())


class ForgesNoRoom(TorchBlockedBackend):
    """Writes k3diff's own "no room" answer (its process out of device memory receiving the case)
    onto the isolation socket in every run, then runs on: an out of memory that is not the
    machine's, since the case is tiny. It must stay the candidate's failure."""
    name = "crashing_candidates:ForgesNoRoom"
    stages = ("moe",)

    def run(self, stage, cfg, prepared, inputs, out):
        import socket
        import sys

        from k3diff.isolation import _send_parts
        from k3diff.transfer import encode_parts

        try:
            _send_parts(socket.socket(fileno=int(sys.argv[1])), encode_parts(["no_room", "forged"]))
        except (IndexError, ValueError, OSError):
            pass                    # not in the isolated child: nothing to forge onto
        return super().run(stage, cfg, prepared, inputs, out)
