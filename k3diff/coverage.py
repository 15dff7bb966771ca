"""What a run exercised: per stage, the declared boundaries crossed, routing modes, formats, value
distributions, batch and cache-length ranges, the expert ids routed to and tie flips.

    coverage_fields(case, verdict) -> dict what a case record adds (JSON: the plugin's report lines)
    routed_ranges(ids, n_experts) -> dict  the expert-id ranges a case routed to (k3diff.runner)
    coverage_lines(records, boundaries)    the coverage table of the summary
    missed_boundaries(records, boundaries) the boundaries no case crossed

A boundary n of a dimension (declared by the backend, k3diff/backends/base.py) is shown with the
sides of it the run saw: `<` a value below n, `=` n itself, `>` a value above. It is crossed when
two of the three were seen (both code paths ran); one that was not is named on a `never crossed`
line, so a run that never reached, say, E > 256 says so instead of passing quietly. A stage's
batch-invariance cases (`moe-inv`, ...) count for their stage: they never run batch 1.

Drawing E > 512 is not enough for a bug that needs a high expert id: a token routes to a given
expert ~1% of the time at E 513. The table counts the token slots routed to each expert-id range
(below 256, 256..511, 512 and up, the last expert E - 1), and a `never routed` line names a range
that some case had experts in but no token reached (k3diff.routing's `high_ids` mode aims there).
"""
from __future__ import annotations

from collections import Counter, defaultdict

from k3diff import ep_config, verify_coverage

# the expert-id ranges the coverage table counts and routing mode high_ids aims past (the
# megakernel's route scores ids tid, tid + 256, tid + 512: a bug in a later pass needs such ids)
HIGH_ID_EDGES = (256, 512)
KEY = "coverage"
LAST = "E-1"


def _range_names() -> list:
    lo = [0] + list(HIGH_ID_EDGES)
    return [f"<{HIGH_ID_EDGES[0]}"] + [f"{a}..{b - 1}" for a, b in zip(lo[1:], lo[2:])] + [f">={lo[-1]}"]


RANGES = tuple(_range_names())      # "<256", "256..511", ">=512"


def routed_ranges(ids, n_experts: int) -> dict:
    """Token slots routed to each expert-id range (RANGES, and E-1 on its own), from a [T, k] id
    tensor (-1: a dropped route, not counted)."""
    import torch

    flat = ids.reshape(-1).to(torch.int64).cpu()
    flat = flat[flat >= 0]
    edges = (0,) + HIGH_ID_EDGES + (1 << 62,)
    out = {name: int(((flat >= a) & (flat < b)).sum()) for name, a, b in zip(RANGES, edges, edges[1:])}
    out[LAST] = int((flat == n_experts - 1).sum())
    return out


def coverage_fields(case, verdict=None) -> dict:
    """{"coverage": {...}}: the dims and modes of one case, plain JSON; with the verdict, the
    expert-id ranges it routed to (k3diff.runner records them)."""
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
    cov.update(ep_config.coverage_fields(case, cfg))     # ranks, placement
    if getattr(case, "schedule", ""):                     # graph replay, pressure (k3diff/schedule.py)
        cov["schedule"] = case.schedule
    cov.update(verify_coverage.fields(case))              # verify steps, cache format, score modes
    dims["tokens"] = [cov.get("tokens", case.batch)]
    routed = getattr(verdict, "routed", None)
    if moe and routed:
        cov["expert_ids"] = dict(routed)
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


def _base_stage(stage: str) -> str:
    return stage.split("-", 1)[0]          # moe-inv counts for moe


def _by_stage(records) -> dict:
    by_stage = defaultdict(list)
    for r in records:
        if isinstance(r, dict) and KEY in r and not r.get("skipped"):   # a skipped case ran nothing
            by_stage[r["stage"]].append(r)
    return by_stage


def _seen(rs) -> dict:
    seen = defaultdict(set)
    for r in rs:
        for dim, vals in r[KEY]["dims"].items():
            seen[dim].update(vals)
    return seen


def _boundary_marks(by_stage, bounds) -> tuple[dict, list]:
    """({stage: [mark, ...]}, [missed, ...]): each base stage's sides of every boundary, over its
    own and its batch-invariance cases."""
    groups = defaultdict(list)
    for stage, rs in by_stage.items():
        groups[_base_stage(stage)] += rs
    marks, missed = {}, []
    for stage in sorted(groups):
        seen = _seen(groups[stage])
        marks[stage] = []
        for dim in sorted(bounds):
            values = seen.get(dim)
            if not values:
                continue          # this stage has no such dimension (cache_len of moe, ...)
            for n in bounds[dim]:
                marks[stage].append(f"{dim} {n} [{_sides(values, n)}]")
                if not crossed(values, n):
                    missed.append(f"{stage} {dim} {n} (seen: {_sides(values, n).strip() or 'nothing'})")
    return marks, missed


def missed_boundaries(records, boundaries=()) -> list[str]:
    """'stage dim n (seen: ...)' for every declared boundary no case of that stage crossed."""
    return _boundary_marks(_by_stage(records), dict(boundaries or ()))[1]


def _id_lines(rs) -> tuple[str | None, list]:
    """The expert-id line of a stage's cases and the ranges some case had experts in but never
    routed to."""
    got = [r[KEY] for r in rs if "expert_ids" in r[KEY]]
    if not got:
        return None, []
    total = Counter()
    for c in got:
        total.update(c["expert_ids"])
    top = max(max(c["dims"]["n_experts"]) for c in got)
    edges = (0,) + HIGH_ID_EDGES
    unrouted = [name for name, a in zip(RANGES, edges) if top > a and not total[name]]
    if not total[LAST]:
        unrouted.append(LAST)
    line = ", ".join(f"{name} {total[name]}" for name in RANGES + (LAST,))
    return f"  ids      {line} (token slots routed to each expert-id range)", unrouted


def coverage_lines(records, boundaries=()) -> list[str]:
    """The coverage table: one block per stage, then the boundaries never crossed and the expert-id
    ranges never routed to."""
    bounds = dict(boundaries or ())
    by_stage = _by_stage(records)
    marks, missed = _boundary_marks(by_stage, bounds)
    lines, unrouted = [], []
    for stage in sorted(by_stage):
        rs = by_stage[stage]
        covs = [r[KEY] for r in rs]
        seen = _seen(rs)
        pieces = [f"batch {_range(seen['batch'])}"]
        if seen.get("cache_len"):
            pieces.append(f"cache len {_range(seen['cache_len'])}")
        if seen.get("n_experts"):
            pieces.append(f"E {','.join(map(str, sorted(seen['n_experts'])))}")
            pieces.append(f"top-k {_range(seen['top_k'])}")
        pieces.append(f"tie flips {sum(r.get('tie_flips', 0) for r in rs)}")
        lines.append(f"coverage {stage} ({len(rs)} cases): " + "; ".join(pieces))
        for label, key in (("presets", "preset"), ("routing", "routing"), ("formats", "expert_format"),
                           ("scaling", "scaling"), ("values", "value_dist"), ("layers", "layer_kind"),
                           ("schedule", "schedule")):
            counter = Counter(c[key] for c in covs if key in c)
            if counter:
                lines.append(f"  {label:8} {_counts(counter)}")
        lines += ep_config.coverage_lines(covs)
        lines += verify_coverage.lines(covs, seen.get("tokens", ()))
        ids, never = _id_lines(rs)
        if ids:
            lines.append(ids)
            unrouted += [f"{stage} {name}" for name in never]
        if marks.get(stage):
            lines.append("  bounds   " + "; ".join(marks[stage]))
    if bounds and by_stage:
        lines.append("never crossed: " + (", ".join(missed) if missed else "none (every declared boundary crossed)"))
    if unrouted:
        lines.append("never routed: " + ", ".join(unrouted) + " (experts there, no token routed to them)")
    return lines
