"""Peak memory of every Python process of a run, written where K3DIFF_MEMORY_PROBE names, for
scripts/gpu_memory_check.sh. On the path (PYTHONPATH) of a pytest run, it is loaded by the run's
process and by the candidate's process it starts (k3diff.isolation: a fresh interpreter with the
same environment), in any tree of k3diff, without a line of k3diff knowing it.

Each process rewrites `<dir>/<pid>.json` every second from a daemon thread (a candidate's process
is killed at the end of a run, so an exit hook alone would lose its numbers): its role ("child":
the candidate's process, started as `python -c`; else "parent"), its peak resident set size, and
once torch has made a CUDA context its allocator's peak and current reserved bytes
(`torch.cuda.max_memory_reserved`: what that process kept of the GPU, cached transients included).
Without K3DIFF_MEMORY_PROBE it does nothing. Another sitecustomize later on the path still runs.
"""
import json
import os
import sys
import threading


def _sample(out, role):
    import resource

    rec = {"pid": os.getpid(), "role": role, "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            rec["peak_reserved"] = int(torch.cuda.max_memory_reserved(0))
            rec["reserved"] = int(torch.cuda.memory_reserved(0))
            rec["peak_allocated"] = int(torch.cuda.max_memory_allocated(0))
    except Exception:  # noqa: BLE001 - a probe never breaks the run it watches
        pass
    tmp = os.path.join(out, f".{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(rec, f)
    os.replace(tmp, os.path.join(out, f"{os.getpid()}.json"))


def _watch(out, role):
    import time

    while True:
        try:
            _sample(out, role)
        except Exception:  # noqa: BLE001
            pass
        time.sleep(1.0)


def _start():
    out = os.environ.get("K3DIFF_MEMORY_PROBE")
    if not out or not os.path.isdir(out):
        return
    role = "child" if sys.argv[:1] == ["-c"] else "parent"
    threading.Thread(target=_watch, args=(out, role), daemon=True, name="k3diff-memory-probe").start()
    import atexit

    atexit.register(lambda: _sample(out, role))


def _chain():
    """Run the next sitecustomize on the path: this one shadows it."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.origin and os.path.abspath(spec.origin) != os.path.abspath(__file__):
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_start()
try:
    _chain()
except Exception:  # noqa: BLE001
    pass
