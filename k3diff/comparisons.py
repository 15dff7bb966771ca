"""Many comparisons at once: the error rule of `k3diff.divergence` applied to every tensor of a
case with a few dozen launches and one host sync, instead of about sixty launches and a sync per
tensor. On a GPU those launches and syncs were most of a small case's comparison time.

Tensors with the same storage dtype are measured together: their values are concatenated, every
element-wise step of `divergence.measure` runs once over all of them, and each reduction runs per
tensor as a row of a zero-padded [tensors, longest] matrix (zero is neutral for every reduction
here: the maxima are of non-negative values, and the first maximum of a row is the tensor's own).
The verdicts are those of `divergence.compare`, number for number, except `similarity` and
`frac_outside`, sums taken in another order (they may differ in the last bits; they are reported,
never judged). Bitwise checks, integer dtypes and settled cases go one by one, and so does
everything on the CPU, where a launch costs little (measured: no faster together).
"""
from __future__ import annotations

import torch

from k3diff.divergence import (Pending, TensorReport, measure, noise_floor_from, noise_floor_parts,
                               non_finite_report, numeric_report, settled, ulp)


def compare_many(items, together: bool | None = None) -> list[TensorReport]:
    """`divergence.compare` of each (stage, name, cand, ref, base, budget[, dtype]), read back in
    one host sync. `together`: measure same-dtype tensors together (default: on a GPU, where
    launches cost; on the CPU one by one is as fast and keeps every bit of `compare`)."""
    items = [tuple(it) + (None,) * (7 - len(it)) for it in items]
    measured: list = [None] * len(items)
    groups: dict = {}
    for i, (stage, name, cand, ref, base, budget, dtype) in enumerate(items):
        dtype = dtype or cand.dtype
        done = settled(stage, name, cand, ref, budget)
        if done is not None:
            measured[i] = done
        elif budget.bitwise or not dtype.is_floating_point or not (
                together if together is not None else cand.device.type == "cuda"):
            measured[i] = measure(stage, name, cand, ref, base, budget, dtype)
        else:
            groups.setdefault((dtype, cand.device), []).append(i)
    for (dtype, _), idx in groups.items():
        for i, pending in zip(idx, _measure_together([items[i] for i in idx], dtype)):
            measured[i] = pending
    pending = [m for m in measured if isinstance(m, Pending)]
    if pending:
        values = torch.cat([m.scalars for m in pending]).tolist()
        at = 0
        for m in pending:
            m.values, at = values[at:at + m.scalars.numel()], at + m.scalars.numel()
    return [m.finish() if isinstance(m, Pending) else m for m in measured]


def _measure_together(items, dtype) -> list[Pending]:
    """divergence.measure of several non-empty tensors of one storage dtype and device."""
    k = len(items)
    dev = items[0][2].device
    sizes = [it[2].numel() for it in items]
    longest = max(sizes)
    flat = lambda ts: torch.cat([t.reshape(-1).to(torch.float64) for t in ts])   # noqa: E731
    c = flat([it[2] for it in items])
    r = flat([it[3] for it in items])
    b = flat([it[4] if it[4] is not None else it[3] for it in items])    # no baseline: its error is 0
    counts = torch.tensor(sizes, device=dev)
    # each element's tensor (output_size: no host sync to learn the length)
    row = torch.repeat_interleave(torch.arange(k, device=dev), counts, output_size=sum(sizes))
    start = torch.cumsum(counts, 0) - counts
    col = torch.arange(c.numel(), device=dev) - start[row]
    at = row * longest + col

    def rows(v, fill=0):
        out = torch.full((k * longest,), fill, dtype=v.dtype, device=dev)
        out[at] = v
        return out.view(k, longest)

    finite = torch.isfinite(r)
    bad = ~torch.isfinite(c) & finite
    r0 = torch.where(finite, r, 0.0)
    c0 = torch.where(finite, c, 0.0)
    err = (c0 - r0).abs()
    base_err_el = (torch.nan_to_num(torch.where(finite, b, 0.0), nan=0.0) - r0).abs()
    per_tensor_max = lambda v: rows(v).amax(1)                             # noqa: E731
    rounded, top = noise_floor_parts(r0, dtype, per_tensor_max)
    floor = noise_floor_from(rounded, top, dtype, per_tensor_max, lambda v: v[row])
    f64 = dict(dtype=torch.float64, device=dev)
    atol = torch.tensor([it[5].atol_mult for it in items], **f64) * floor
    rtol = torch.tensor([it[5].rtol for it in items], **f64)
    err_rows = rows(err)
    flat_idx = err_rows.argmax(1)                                          # the first maximum, as argmax
    outside = err > (atol[row] + rtol[row] * base_err_el)
    pick = start + flat_idx
    scalars = torch.stack([
        rows(bad.to(torch.float64)).sum(1), rows(base_err_el).amax(1), atol, flat_idx.to(torch.float64),
        err_rows.amax(1), rows(c0 * c0 + r0 * r0).sum(1), rows(c0 * r0).sum(1),
        rows(err / ulp(r0, dtype)).amax(1), rows(outside.to(torch.float64)).sum(1) / counts,
        c0[pick], r0[pick]], dim=1)                                        # [k, 11]
    out = []
    for j, (stage, name, cand, ref, _, budget, _) in enumerate(items):
        lo, n = sum(sizes[:j]), sizes[j]
        piece = lambda v, lo=lo, n=n, shape=cand.shape: v[lo:lo + n].view(shape)   # noqa: E731
        out.append(Pending(scalars[j], lambda values, stage=stage, name=name, budget=budget, shape=cand.shape,
                           piece=piece: numeric_report(
                               stage, name, budget, shape, values, lambda: piece(err),
                               lambda: non_finite_report(stage, name, piece(c), piece(r), piece(bad)))))
    return out
