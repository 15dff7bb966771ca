"""What a case asks of a candidate beyond its dims, and a candidate's refusal of it.

A backend says which cases it runs through `supports(cfg, stage)` (k3diff/backends/base.py). A
case that needs a part of the contract an older kernel never implemented also names it:

    "verify"     a verify step: W_b tokens per sequence in an attention (docs/k3-decode.md §14)
    "fp8_cache"  the FP8 latent cache (§15)

and the framework passes them as `supports(cfg, stage, features=frozenset(...))` to a backend
whose supports() takes a `features` argument. One whose supports() does not take it cannot serve
these cases (it was written before they existed) and is refused them here, with that reason: a
verify case run by a kernel that ignores `query_lens` would be a failure of the contract, not of
the kernel, and must not count as one. A moe case needs no feature: its T rows are its tokens.
"""
from __future__ import annotations

import inspect


def case_features(case) -> frozenset:
    out = set()
    if case.widths and case.attention_kind is not None:
        out.add("verify")
    if case.cache_format == "fp8":
        out.add("fp8_cache")
    return frozenset(out)


def _takes_features(fn) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "features" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def refusal(candidate, case) -> str | None:
    """None when the candidate runs `case`, else its one-line reason (the case is skipped)."""
    return refusal_of(candidate, case.config(), case.stage, case_features(case))


def refusal_of(candidate, cfg, stage, feats=frozenset()) -> str | None:
    """`refusal` from a case's parts (a wrapper candidate asks its inner one this way)."""
    supports = getattr(candidate, "supports", None)
    if supports is None:
        return None if not feats else f"it declares no supports(); cases needing {', '.join(sorted(feats))} are refused"
    if not feats:
        return supports(cfg, stage)
    if not _takes_features(supports):
        return (f"its supports() predates {', '.join(sorted(feats))} (no `features` argument): "
                "such cases are refused")
    return supports(cfg, stage, features=feats)
