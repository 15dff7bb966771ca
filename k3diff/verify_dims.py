"""Speculative verify steps as case dimensions: widths, acceptance, the cache format.

A case with `widths` (docs/k3-decode.md §14) is a verify step: sequence b brings widths[b] tokens,
T = Σ widths rows. `accepted` holds, step by step, how many of each sequence's tokens were
accepted (steps × B entries; empty: all of them). `cache_format` "fp8" keeps an MLA cache as
§15's FP8 rows. The stage contract (k3diff/stages.py) gives the widths to a candidate as
`query_lens` and a KDA attention's acceptance as `accepted`. Which state continues into the next
step is k3diff/verify.py's. This module imports nothing of k3diff (k3diff.case uses it).
"""
from __future__ import annotations

MAX_WIDTH = 8
CACHE_FORMATS = ("bf16", "fp8")
# softmax-stressing score distributions of an MLA attention (k3diff/score_modes.py)
SCORE_MODES = ("natural", "far_negative", "dominant", "equal", "underflow")
# the fields' defaults: a seed omits them there
DEFAULTS = {"widths": (), "accepted": (), "cache_format": "bf16", "scores": "natural"}


def is_verify(case) -> bool:
    return bool(case.widths)


def widths(case) -> tuple:
    """W_b per sequence (all 1 in a decode step)."""
    return tuple(case.widths) or (1,) * case.batch


def tokens(case) -> int:
    """T, the step's token rows."""
    return sum(widths(case))


def accepted_at(case, step: int) -> tuple:
    """Each sequence's accepted count at `step` (all of its tokens unless the case says)."""
    if not case.accepted:
        return widths(case)
    return tuple(case.accepted[step * case.batch:(step + 1) * case.batch])


def advance(case, step: int) -> tuple:
    """How far each sequence's cache has moved before `step`: Σ of the accepted counts so far."""
    return tuple(sum(accepted_at(case, s)[b] for s in range(step)) for b in range(case.batch))


def capacity_rows(case) -> int:
    """Cache rows past max(L_b) a case's steps may write (each step writes W_b rows)."""
    return case.steps * max(widths(case))


def validate(case, need, cfg) -> None:
    """The verify fields' rules (`need(ok, why)` raises the case's one-line error)."""
    from reference import fp8_cache

    need(case.cache_format in CACHE_FORMATS, f"unknown cache format {case.cache_format!r} "
         f"(formats: {', '.join(CACHE_FORMATS)})")
    for name in ("widths", "accepted"):
        bad = [v for v in getattr(case, name) if not (isinstance(v, int) and not isinstance(v, bool))]
        need(not bad, f"{name} must hold integers, got {bad[0]!r}" if bad else "")
    if case.widths:
        need(len(case.widths) == case.batch, f"widths has {len(case.widths)} entries for batch {case.batch}")
        need(all(1 <= w <= MAX_WIDTH for w in case.widths), f"widths must lie in [1, {MAX_WIDTH}]")
    if case.accepted:
        need(bool(case.widths), "accepted needs widths (a verify step)")
        need(len(case.accepted) == case.steps * case.batch,
             f"accepted has {len(case.accepted)} entries for {case.steps} step(s) x batch {case.batch}")
        w = widths(case)
        need(all(0 <= a <= w[i % case.batch] for i, a in enumerate(case.accepted)),
             "accepted counts must lie in [0, width]")
    need(case.scores in SCORE_MODES, f"unknown score mode {case.scores!r} (modes: {', '.join(SCORE_MODES)})")
    need(case.scores == "natural" or case.stage == "mla", f"score mode {case.scores} needs the mla stage")
    if case.cache_format != "bf16":
        need(case.attention_kind == "mla", f"cache_format {case.cache_format} needs an MLA attention")
        problem = fp8_cache.check(cfg)
        need(problem is None, problem)


def label_bits(case) -> list:
    bits = []
    if case.widths:
        w = list(case.widths[:4]) + (["..."] if len(case.widths) > 4 else [])
        bits.append("W=" + ",".join(map(str, w)) + f" T={tokens(case)}")
    if case.accepted:
        a = list(case.accepted[:4]) + (["..."] if len(case.accepted) > 4 else [])
        bits.append("acc=" + ",".join(map(str, a)))
    if case.cache_format != "bf16":
        bits.append(f"cache={case.cache_format}")
    if case.scores != "natural":
        bits.append(f"scores={case.scores}")
    return bits
