"""What a run exercised: per stage, the declared boundaries crossed, routing modes, formats, value
distributions, batch and cache-length ranges and tie flips (issue 12).

    coverage_fields(case) -> dict          what a case record adds (JSON: the plugin's report lines)
    coverage_lines(records, boundaries)    the coverage table of the summary

A boundary n of a dimension (declared by the backend, k3diff/backends/base.py) is shown with the
sides of it the run saw: `<` a value below n, `=` n itself, `>` a value above. It is crossed when
two of the three were seen (both code paths ran); one that was not is named on a `never crossed`
line, so a run that never reached, say, E > 256 says so instead of passing quietly.
"""
from __future__ import annotations

from collections import Counter, defaultdict

from k3diff import ep_config

MOE_DIMS = ("n_experts", "top_k", "latent_dim", "moe_intermediate")
KEY = "coverage"


def coverage_fields(case) -> dict:
    """{"coverage": {...}}: the dims and modes of one case, plain JSON."""
    cfg = case.config()
    dims = {"batch": [case.batch], "hidden": [cfg.hidden]}
    cov = {"preset": case.preset, "value_dist": case.value_dist, "dims": dims}
    moe = case.stage == "moe" or (case.stage == "layer" and cfg.is_moe_layer(case.layer_idx))
    if moe:
        dims.update({"n_experts": [cfg.n_experts], "top_k": [cfg.top_k], "latent_dim": [cfg.latent_dim],
                     "moe_intermediate": [cfg.moe_intermediate]})
        cov["expert_format"] = case.expert_format
        cov["scaling"] = cfg.routed_scaling_factor
    if case.stage == "moe":
        cov["routing"] = case.routing
    if case.cache_lens:
        dims["cache_len"] = sorted(set(int(n) for n in case.cache_lens))
    if case.stage == "layer":
        cov["layer_kind"] = case.attention_kind
    cov.update(ep_config.coverage_fields(case, cfg))     # ranks, placement (issue 34)
    return {KEY: cov}


def _sides(values, n) -> str:
    return "".join(c if ok else " " for c, ok in
                   (("<", any(v < n for v in values)), ("=", n in values), (">", any(v > n for v in values))))


def crossed(values, n) -> bool:
    return sum(c != " " for c in _sides(values, n)) >= 2


def _counts(counter: Counter) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items(), key=lambda kv: str(kv[0]))) or "-"


def _range(values) -> str:
    return f"{min(values)}..{max(values)}" if values else "-"


def coverage_lines(records, boundaries=()) -> list[str]:
    """The coverage table: one block per stage, then the boundaries never crossed."""
    bounds = dict(boundaries or ())
    by_stage = defaultdict(list)
    for r in records:
        if isinstance(r, dict) and KEY in r and not r.get("skipped"):   # a skipped case ran nothing
            by_stage[r["stage"]].append(r)
    lines, missed = [], []
    for stage in sorted(by_stage):
        rs = by_stage[stage]
        covs = [r[KEY] for r in rs]
        seen = defaultdict(set)
        for c in covs:
            for dim, vals in c["dims"].items():
                seen[dim].update(vals)
        pieces = [f"batch {_range(seen['batch'])}"]
        if seen.get("cache_len"):
            pieces.append(f"cache len {_range(seen['cache_len'])}")
        if seen.get("n_experts"):
            pieces.append(f"E {','.join(map(str, sorted(seen['n_experts'])))}")
            pieces.append(f"top-k {_range(seen['top_k'])}")
        pieces.append(f"tie flips {sum(r.get('tie_flips', 0) for r in rs)}")
        lines.append(f"coverage {stage} ({len(rs)} cases): " + "; ".join(pieces))
        for label, key in (("presets", "preset"), ("routing", "routing"), ("formats", "expert_format"),
                           ("scaling", "scaling"), ("values", "value_dist"), ("layers", "layer_kind")):
            counter = Counter(c[key] for c in covs if key in c)
            if counter:
                lines.append(f"  {label:8} {_counts(counter)}")
        lines += ep_config.coverage_lines(covs)
        marks = []
        for dim in sorted(bounds):
            values = seen.get(dim)
            if not values:
                continue          # this stage has no such dimension (cache_len of moe, ...)
            for n in bounds[dim]:
                marks.append(f"{dim} {n} [{_sides(values, n)}]")
                if not crossed(values, n):
                    missed.append(f"{stage} {dim} {n} (seen: {_sides(values, n).strip() or 'nothing'})")
        if marks:
            lines.append("  bounds   " + "; ".join(marks))
    if bounds and by_stage:
        lines.append("never crossed: " + (", ".join(missed) if missed else "none (every declared boundary crossed)"))
    return lines
