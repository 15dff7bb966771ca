"""Hypothesis draws of the verify-step dimensions (docs/k3-decode.md §14-15; k3diff.strategies
calls these): widths per sequence, acceptance per step, the cache format, score modes, and the
corners the fuzzer must reach on purpose.

Boundaries drawn with high probability: W 1, 2 and 8 (the smallest verify step, the first with a
draft, the widest), fixed and ragged widths, all / none / some accepted, token counts T on and
next to the tile and pass edges (TOKEN_EDGES: 8/9, 16/17, 32/33, 64/65, and the batch the backend
declares), a draft that crosses a cache tile or split edge (rows L_b .. L_b + W_b - 1 straddle a
multiple of TILE_ROWS or a declared cache_len boundary), FP8 caches, softmax-stressing scores.
"""
from __future__ import annotations

from hypothesis import strategies as st

from k3diff.verify_dims import CACHE_FORMATS, MAX_WIDTH, SCORE_MODES

WIDTH_EDGES = (1, 2, MAX_WIDTH)
TOKEN_EDGES = (8, 16, 32, 64)
TILE_ROWS = 64          # a cache tile / split-KV chunk (torch-blocked's KV_CHUNK, the megakernel's split)


def token_targets(space, top: int) -> list:
    """T values on and just past every token edge (and the backend's declared batch sizes) that fit."""
    edges = set(TOKEN_EDGES) | set(space.around("batch"))
    return sorted(v for n in edges for v in (n, n + 1) if 1 <= v <= top)


def split_tokens(T: int, batch: int) -> tuple:
    """T tokens over `batch` sequences as evenly as widths allow (fixed when batch divides T)."""
    base, rem = divmod(T, batch)
    return tuple(base + (1 if b < rem else 0) for b in range(batch))


@st.composite
def widths_for(draw, batch: int, space, top_tokens: int):
    """(batch, widths): a verify step's widths; may change the batch to reach a token edge."""
    how = draw(st.sampled_from(("fixed", "ragged", "tokens")))
    if how == "tokens":
        targets = token_targets(space, min(top_tokens, MAX_WIDTH * batch))
        if targets:
            T = draw(st.sampled_from(targets))
            lo = -(-T // MAX_WIDTH)
            b = draw(st.integers(lo, min(T, max(lo, batch))))
            return b, split_tokens(T, b)
        how = "fixed"
    cap = max(1, min(MAX_WIDTH, top_tokens // batch))
    one = st.one_of(st.sampled_from([w for w in WIDTH_EDGES if w <= cap]), st.integers(1, cap))
    if how == "fixed":
        return batch, (draw(one),) * batch
    return batch, tuple(draw(st.lists(one, min_size=batch, max_size=batch)))


@st.composite
def acceptance(draw, widths: tuple, steps: int):
    """Accepted counts, step by step: all, none, or each drawn in 0..W_b."""
    out = []
    for _ in range(steps):
        how = draw(st.sampled_from(("all", "none", "some")))
        if how == "all":
            out += list(widths)
        elif how == "none":
            out += [0] * len(widths)
        else:
            out += [draw(st.integers(0, w)) for w in widths]
    return tuple(out)


def crossing_lens(draw, lens: tuple, widths: tuple, space, hi: int) -> tuple:
    """Some sequences' cache lengths moved so that their draft straddles a tile / split edge."""
    edges = sorted(set(space.around("cache_len")) | {TILE_ROWS})
    out = list(lens)
    for b, w in enumerate(widths):
        if w >= 2 and draw(st.integers(0, 3)) == 0:
            fit = [n for n in edges if 1 <= n - 1 <= hi]
            if fit:
                n = draw(st.sampled_from(fit))
                out[b] = max(0, n - draw(st.integers(1, w - 1)))     # rows L .. L+W-1 hold n-1 and n
    return tuple(out)


def crosses_tile(case) -> bool:
    """Whether some sequence's draft rows straddle a multiple of TILE_ROWS (the coverage line)."""
    if not case.widths or not case.cache_lens:
        return False
    return any((L // TILE_ROWS) != ((L + w - 1) // TILE_ROWS) for L, w in zip(case.cache_lens, case.widths))


def cache_formats():
    return st.sampled_from(("bf16", "bf16") + tuple(f for f in CACHE_FORMATS if f != "bf16"))


def score_modes():
    return st.one_of(st.just("natural"), st.sampled_from(SCORE_MODES))
