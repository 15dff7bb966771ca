"""Is every weight bitwise what it was before the candidate ran? Without a copy of the weights per case.

The controls used to clone every weight before each candidate call and compare after it: at full
K3 dims that is a second 59 GB (bf16 experts) per call. Weights are cached across cases and never
change, so the guard keeps, once per weight tensor: a copy of a small tensor (compared exactly,
bit for bit, through an integer view) or, for a large one (>= LARGE bytes, the expert tensors at
production dims), a fingerprint of its bits (position-weighted int64 sums of its 32-bit words, see
`fingerprint`; a modification that leaves them all unchanged is astronomically unlikely),
recomputed after each call.
"""
from __future__ import annotations

import weakref
from collections import OrderedDict

import torch

LARGE = 256 << 20
_WIDTH = 4096
_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_KEPT: OrderedDict = OrderedDict()   # (id, data_ptr, shape, dtype) -> (weakref to the tensor, copy | fingerprint)
_KEPT_SIZE = 96


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().reshape(-1).view(_INT_VIEW[t.element_size()])


def _mult(n: int, salt: int, device) -> torch.Tensor:
    """n distinct odd int64 multipliers, of positions 1..n (odd: no nonzero change times one
    wraps to 0 mod 2^64)."""
    return (torch.arange(1, n + 1, dtype=torch.int64, device=device) * 0x9E3779B1 + salt) | 1


def fingerprint(t: torch.Tensor) -> tuple:
    """Its 32-bit words laid out as rows of _WIDTH: a weighted sum of the row sums and one of the
    column sums (plus the words past the last full row, each weighted). A changed word moves both;
    a swap within a row moves the column term, within a column the row term. Row and column sums
    are int32 and wrap (mod 2^32: integer addition, so every reduction order gives the same
    bits): torch would widen the whole tensor to int64 for an int64 sum, a 79 GB copy for a
    full-dims expert tensor, and three passes over it instead of two reads."""
    flat = t.detach().reshape(-1)
    nbytes = flat.numel() * flat.element_size()
    words = flat.view(torch.int32) if nbytes % 4 == 0 else _bits(flat).to(torch.int32)
    rows = words.numel() // _WIDTH
    body, tail = words[:rows * _WIDTH].view(rows, _WIDTH), words[rows * _WIDTH:]
    dev = t.device
    s_rows = (body.sum(1, dtype=torch.int32).to(torch.int64) * _mult(rows, 0x7F4A7C15, dev)).sum()
    s_cols = (body.sum(0, dtype=torch.int32).to(torch.int64) * _mult(_WIDTH, 0x2545F491, dev)).sum()
    s_tail = (tail.to(torch.int64) * _mult(tail.numel(), 0x5851F42D, dev)).sum()
    return int(s_rows), int(s_cols), int(s_tail), tuple(t.shape), t.dtype


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
