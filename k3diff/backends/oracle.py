"""The reference in its two numerics modes, wrapped as backends.

`reference` (float64, exact) is the ground truth; `torch` (faithful-bf16: f32 accumulate, bf16 at
docs/k3-decode.md §7's points) is the same-precision baseline the error rule calibrates against. Wrapped as
backends they can also be run as candidates, which is how the controls are checked for false alarms.
"""
from __future__ import annotations

import torch

from k3diff.backends.base import Backend
from k3diff.stages import STATE


def run_reference(stage: str, cfg, weights: dict, inputs: dict, mode: str, magnitudes: bool = False) -> dict:
    """The oracle's result as a plain dict (float64 outputs in exact mode); inputs untouched.
    `magnitudes` (exact mode): also each accumulated output's Σ|a||b| as "abs.<name>", for the
    error rule's accumulation floor (k3diff.budgets)."""
    import reference

    if magnitudes and mode == "exact":
        mode = reference.Numerics("exact", magnitudes=True)
    return reference.run_stage(stage, cfg, weights, inputs, mode=mode)


class ReferenceBackend(Backend):
    deterministic = True
    batch_invariant = True

    def __init__(self, mode: str = "exact"):
        self.mode = mode
        self.name = "reference" if mode == "exact" else "torch"

    def supports(self, cfg, stage, features=frozenset()) -> str | None:
        return None                      # the reference computes verify steps and the FP8 cache

    def run(self, stage, cfg, prepared, inputs, out) -> None:
        result = run_reference(stage, cfg, prepared, inputs, self.mode)
        if self.mode == "exact" and inputs.get("kv_cache") is not None and inputs["kv_cache"].dtype == torch.uint8:
            _fp8_entries_of_outputs(stage, cfg, inputs, result)
        for name, buf in out.items():
            buf.copy_(result[name].to(buf.dtype))
        for name in STATE[stage]:
            if name in inputs and name in result:
                # the oracle computes whole new states; write back only what changed, so NaN
                # padding keeps its exact bits (the reference may canonicalise NaN payloads)
                new = result[name].to(inputs[name].dtype)
                keep = torch.isnan(new) & torch.isnan(inputs[name])
                inputs[name].copy_(torch.where(keep, inputs[name], new))


def _fp8_entries_of_outputs(stage, cfg, inputs, result) -> None:
    """The exact oracle as a candidate writes an FP8 entry as a kernel would: from the kv_c | k_pe
    it outputs (bf16), not from its unrounded float64 values (docs/k3-decode.md §15: the entry is
    fixed bit for bit by the kernel's own kv_c)."""
    from reference import fp8_cache
    from reference.mla import token_rows

    pre = "attn." if stage == "layer" else ""
    seq, pos = token_rows(inputs["cache_lens"], inputs.get("query_lens"), result[pre + "kv_c"].device)
    kv_c, k_pe = (result[pre + n].to(torch.bfloat16) for n in ("kv_c", "k_pe"))
    result["kv_cache"][seq, pos] = fp8_cache.quantise(kv_c, k_pe, cfg, exact=False)


def exact() -> ReferenceBackend:
    return ReferenceBackend("exact")


def faithful() -> ReferenceBackend:
    return ReferenceBackend("faithful")
