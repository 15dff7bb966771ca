"""The per-process caches, one owner: what a case leaves behind for the next one, and how it goes.

A k3diff process keeps, across cases: the drawn weight sets (k3diff.materialize, by dims and weight
seed) and the backends' prepared copies of them (k3diff.runner, by backend and weight tensors). A
prepared copy of an evicted weight set is dead weight that still holds its memory, so they are
evicted together: each dependant cache registers here, and when weights go (the memory budget in
k3diff.sizing, the cache budget in materialize) `weights_dropped()` clears them, without any module
reaching into another's globals. (The controls' stale buffers, k3diff.controls._STALE, are bounded
by count and stay: clearing them would change what a second run sees, hence verdicts.)
"""
from __future__ import annotations

_DEPENDANTS: dict = {}          # name -> clear(): caches that are worthless once weights are dropped


def register(name: str, clear) -> None:
    """`clear()` is called whenever weight sets are evicted (idempotent: by name)."""
    _DEPENDANTS[name] = clear


def weights_dropped() -> None:
    """Weight sets were evicted: drop everything built from them, then give the device its memory."""
    for clear in list(_DEPENDANTS.values()):
        clear()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
