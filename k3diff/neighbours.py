"""Neighbour content: for a batch-invariant candidate, changing the other rows' inputs changes no
bit of row b.

Alone-vs-batched (k3diff/invariance.py) compares a token in a batch of one with the same token in
a batch of B: it catches a result that depends on the batch size, but not one that depends on what
the other rows hold at the same size: an expert schedule or a split chosen from the routes of the
whole batch, a dynamic scale taken over all rows, a row that reads its neighbour's cache or state
slot ("results leaking from other conversations"). This check runs the same batch twice, the
second time with every other row's floating inputs multiplied by -2 (x, the layer's prefix, delta
and blocks, the other sequences' cache rows, every state slot but row b's and the null slot's:
still a valid step, other routes, scores and magnitudes, so a scale over the batch moves too), and row b's outputs, cache row and state slot must be the
same bits. Its reports are named `<tensor>.row_vs_neighbours`.
"""
from __future__ import annotations

import torch

from k3diff.budgets import Budget
from k3diff.comparisons import compare_many
from k3diff.divergence import TensorReport
from k3diff.stages import output_specs

ROWS = ("x", "prefix", "delta", "blocks", "kv_cache")          # dim 0: the token / sequence
SLOTS = ("conv_state", "recurrent_state")                     # dim 0: the state slot
SUFFIX = ".row_vs_neighbours"
_EXACT = Budget(0, 0, "declared batch-invariant: neighbours' content", bitwise=True)


def _slot(inputs: dict, p: int) -> int | None:
    idx = inputs.get("state_idx")
    return None if idx is None else int(idx[p])


def others_changed(inputs: dict, p: int) -> dict:
    """The inputs with every row but p (every slot but p's and the null slot) times -2."""
    out = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in inputs.items()}
    for k in ROWS:
        v = out.get(k)
        if torch.is_tensor(v) and v.dtype.is_floating_point and v.shape[0] > 1:
            keep = torch.zeros(v.shape[0], dtype=torch.bool, device=v.device)
            keep[p] = True
            v[~keep] = v[~keep] * -2      # exact in bf16 and f32: other signs and magnitudes
    slot = _slot(inputs, p)
    for k in SLOTS:
        v = out.get(k)
        if torch.is_tensor(v) and v.dtype.is_floating_point:
            keep = torch.zeros(v.shape[0], dtype=torch.bool, device=v.device)
            keep[0] = True
            if slot is not None and slot > 0:
                keep[slot] = True
            v[~keep] = v[~keep] * -2      # exact in bf16 and f32: other signs and magnitudes
    return out


def reports(run, stage, inputs: dict, provides, p: int, batched: dict) -> list:
    """Row p of the batch run (`batched`, `run(inputs)`'s result: k3diff.invariance's candidate
    call, judged on this side) against row p of a run with the other rows changed, bitwise."""
    batch = next(v.shape[0] for k, v in inputs.items() if k in ("x", "prefix") and torch.is_tensor(v))
    if batch < 2:
        return []
    again = run(others_changed(inputs, p))
    items = [(stage, spec.name + SUFFIX, again[spec.name][p:p + 1], batched[spec.name][p:p + 1], None, _EXACT)
             for spec in output_specs(stage, provides)
             if spec.name != "topk_ids" and spec.name in again and spec.name in batched]
    items += [(stage, k + SUFFIX, again[k][p], batched[k][p], None, _EXACT)     # row p's own state rows
              for k in ("kv_cache", "prefix", "blocks") if k in again and k in batched]
    slot = _slot(inputs, p)
    if slot is not None and slot > 0:
        items += [(stage, k + SUFFIX, again[k][slot], batched[k][slot], None, _EXACT)
                  for k in SLOTS if k in again and k in batched]
    found = compare_many(items)
    if "topk_ids" in again and "topk_ids" in batched:
        same = torch.equal(torch.sort(again["topk_ids"][p:p + 1], -1).values,
                           torch.sort(batched["topk_ids"][p:p + 1], -1).values)
        if not same:
            found.append(TensorReport(stage, "topk_ids" + SUFFIX, False,
                                      note="the token chose other experts when its neighbours' inputs changed"))
    for rep in found:
        if not rep.ok:
            rep.note = f"row {p} changed when only the other rows' inputs did: {rep.note}"
    return found
