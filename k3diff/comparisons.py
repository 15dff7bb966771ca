"""Many comparisons at once: the error rule of `k3diff.divergence` applied to every tensor of a
case with a few dozen launches and one host sync, instead of about sixty launches and a sync per
tensor. On a GPU those launches and syncs were most of a small case's comparison time.

Tensors with the same storage dtype are measured together by `divergence.measure_numeric`, the one
implementation of the rule (a tensor alone is measured by the same function with one tensor).
The verdicts are those of `divergence.compare`, number for number, except `similarity` and
`frac_outside`, sums taken in another order (they may differ in the last bits; they are reported,
never judged). Bitwise checks, integer dtypes and settled cases go one by one, and so does
everything on the CPU, where a launch costs little (measured: no faster together).

An item is (stage, name, cand, ref, base, budget[, dtype[, absdot]]): `absdot` is the reference's
Σ|a||b| of an accumulated tensor (`k3diff.budgets`), None for any other.
"""
from __future__ import annotations

import torch

from k3diff.divergence import Pending, TensorReport, measure, measure_numeric, settled


def compare_many(items, together: bool | None = None) -> list[TensorReport]:
    """`divergence.compare` of each item, read back in one host sync. `together`: measure same-dtype
    tensors together (default: on a GPU, where launches cost; on the CPU one by one is as fast)."""
    items = [tuple(it) + (None,) * (8 - len(it)) for it in items]
    measured: list = [None] * len(items)
    groups: dict = {}
    for i, (stage, name, cand, ref, base, budget, dtype, absdot) in enumerate(items):
        dtype = dtype or cand.dtype
        items[i] = (stage, name, cand, ref, base, budget, dtype, absdot)
        done = settled(stage, name, cand, ref, budget)
        if done is not None:
            measured[i] = done
        elif budget.bitwise or not dtype.is_floating_point or not (
                together if together is not None else cand.device.type == "cuda"):
            measured[i] = measure(stage, name, cand, ref, base, budget, dtype, absdot)
        else:
            groups.setdefault((dtype, cand.device), []).append(i)
    for (dtype, _), idx in groups.items():
        for i, pending in zip(idx, measure_numeric([items[i] for i in idx], dtype)):
            measured[i] = pending
    pending = [m for m in measured if isinstance(m, Pending)]
    if pending:
        values = torch.cat([m.scalars for m in pending]).tolist()
        at = 0
        for m in pending:
            m.values, at = values[at:at + m.scalars.numel()], at + m.scalars.numel()
    return [m.finish() if isinstance(m, Pending) else m for m in measured]
