"""The coverage table's verify lines (k3diff.coverage calls these): which verify widths,
acceptances, cache formats and score modes a run's cases crossed, and the token counts around
every tile / pass edge (docs/k3-decode.md §14).

    fields(case) -> dict       what a case record adds under "coverage"
    lines(covs, tokens)        the lines of one stage's block
"""
from __future__ import annotations

from collections import Counter

from k3diff.verify_dims import accepted_at, tokens, widths
from k3diff.verify_draws import TOKEN_EDGES, WIDTH_EDGES, crosses_tile


def _acceptance(case) -> str:
    if not case.accepted:
        return "all"
    kinds = set()
    for step in range(case.steps):
        acc, w = accepted_at(case, step), widths(case)
        kinds.add("all" if acc == w else "none" if not any(acc) else "some")
    return "+".join(sorted(kinds))


def fields(case) -> dict:
    out = {"tokens": tokens(case), "step_kind": "verify" if case.widths else "decode"}
    if case.widths:
        out["widths"] = sorted(set(case.widths))
        out["width_kind"] = "fixed" if len(set(case.widths)) == 1 else "ragged"
        if case.attention_kind is not None:
            out["acceptance"] = _acceptance(case)
        if crosses_tile(case):
            out["draft_crosses_tile"] = True
    if case.attention_kind == "mla":
        out["cache_format"] = case.cache_format
    if case.stage == "mla":
        out["scores"] = case.scores
    return out


def _counts(counter: Counter) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items(), key=lambda kv: str(kv[0]))) or "-"


def _sides(values, n) -> str:
    return "".join(c if ok else " " for c, ok in
                   (("<", any(v < n for v in values)), ("=", n in values), (">", any(v > n for v in values))))


def lines(covs, tokens_seen) -> list:
    out = []
    kinds = Counter(c.get("step_kind", "decode") for c in covs)
    ver = [c for c in covs if c.get("step_kind") == "verify"]
    if ver:
        ws = sorted({w for c in ver for w in c["widths"]})
        edge = ", ".join(f"W {n} {'yes' if n in ws else 'NO'}" for n in WIDTH_EDGES)
        out.append(f"  verify   {_counts(kinds)}; widths {','.join(map(str, ws))} ({edge}); "
                   f"{_counts(Counter(c['width_kind'] for c in ver))}; "
                   f"drafts across a tile {sum(bool(c.get('draft_crosses_tile')) for c in ver)}")
        acc = Counter(c["acceptance"] for c in ver if "acceptance" in c)
        if acc:
            out.append(f"  accepted {_counts(acc)}")
    tok = sorted(tokens_seen)
    if tok:
        out.append("  tokens   " + "; ".join(f"T {n} [{_sides(tok, n)}]" for n in TOKEN_EDGES) +
                   f" (T {tok[0]}..{tok[-1]})")
    for label, key in (("cache", "cache_format"), ("scores", "scores")):
        counter = Counter(c[key] for c in covs if key in c)
        if counter:
            out.append(f"  {label:8} {_counts(counter)}")
    return out
