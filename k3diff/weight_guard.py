"""Is every weight bitwise what it was before the candidate ran? Without a copy of the weights per case.

The controls used to clone every weight before each candidate call and compare after it: at full
K3 dims that is a second 59 GB (bf16 experts) per call. Weights are cached across cases and never
change, so the guard keeps, once per weight tensor: a copy of a small tensor (compared exactly,
bit for bit, through an integer view) or, for a large one (>= LARGE bytes, the expert tensors at
production dims), a 128-bit fingerprint of its bits (two position-weighted int64 sums over its
32-bit words; a modification that leaves both unchanged is astronomically unlikely), recomputed
after each call in chunks that read the tensor once.
"""
from __future__ import annotations

import weakref
from collections import OrderedDict

import torch

LARGE = 256 << 20
_CHUNK = 1 << 26
_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_KEPT: OrderedDict = OrderedDict()   # (id, data_ptr, shape, dtype) -> (weakref to the tensor, copy | fingerprint)
_KEPT_SIZE = 96


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().reshape(-1).view(_INT_VIEW[t.element_size()])


def fingerprint(t: torch.Tensor) -> tuple:
    flat = t.detach().reshape(-1)
    nbytes = flat.numel() * flat.element_size()
    words = flat.view(torch.int32) if nbytes % 4 == 0 else _bits(flat).to(torch.int32)
    s1 = torch.zeros((), dtype=torch.int64, device=t.device)
    s2 = torch.zeros((), dtype=torch.int64, device=t.device)
    for lo in range(0, words.numel(), _CHUNK):
        w = words[lo:lo + _CHUNK].to(torch.int64)
        pos = torch.arange(lo + 1, lo + 1 + w.numel(), dtype=torch.int64, device=t.device)
        s1 += w.sum()
        s2 += (w * (pos * 0x9E3779B1 + 0x7F4A7C15)).sum()   # wraps mod 2^64: fine for a hash
    return int(s1), int(s2), tuple(t.shape), t.dtype


def _key(t):
    return (id(t), t.data_ptr(), tuple(t.shape), t.dtype)


def remember(weights: dict) -> dict:
    """What `changed` needs to check these weights later (kept once per tensor)."""
    token = {}
    for name, t in weights.items():
        if not torch.is_tensor(t):
            continue
        k = _key(t)
        entry = _KEPT.get(k)
        if entry is None or entry[0]() is not t:      # new, or a dead tensor's id reused
            big = t.numel() * t.element_size() >= LARGE
            entry = _KEPT[k] = (weakref.ref(t), fingerprint(t) if big else _bits(t).clone())
            while len(_KEPT) > _KEPT_SIZE:
                _KEPT.popitem(last=False)
        _KEPT.move_to_end(k)
        token[name] = (t, entry[1])
    return token


def changed(token: dict, weights: dict) -> list[str]:
    """Names of weights whose bits differ from when `remember` saw them. A changed tensor is
    forgotten, so the next call is judged against its bits as they are then (as a snapshot per
    call would)."""
    bad = []
    for name, (orig, kept) in token.items():
        t = weights.get(name)
        if t is None or t is not orig and (t.shape != orig.shape or t.dtype != orig.dtype):
            bad.append(name)
        elif isinstance(kept, tuple):
            if fingerprint(t) != kept:
                bad.append(name)
        elif not torch.equal(_bits(t), kept):
            bad.append(name)
    for name in bad:
        t = weights.get(name)
        if torch.is_tensor(t):
            _KEPT.pop(_key(t), None)
    return bad
