"""What a `pytest --k3diff` run will draw, without judging a case (no GPU, no backend run):

    python -m k3diff.tools.plan --profile ci                       # the GPU default, megakernel's boundaries
    python -m k3diff.tools.plan --profile ci --preset full --seed 31337
    python -m k3diff.tools.plan --profile ci --device cpu --backend torch-blocked

The cases are the session's own (k3diff.session.Session.fuzz and fuzz_invariance: the same
strategies, chunk seeds and boundary sweep), so the table is the coverage the run will show:
per stage the presets, the declared boundaries crossed and the ones never crossed, and the kernel
dims sets the run needs (each one compiled kernel set of the megakernel: ~10 s on a cold kernel
cache, the main cost of a cold run). The backend is only loaded for its declared `boundaries`
(megakernel imports no CUDA for that). Exit 0; 1 when a declared boundary is never crossed (the
run could not show it); 2 on a bad argument (one line).
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter

from k3diff.search import find_failure
from k3diff.session import PROFILES, choose_space, sub_seed


def drawn_cases(stage: str, space, seed: int, profile: dict) -> list:
    """[(record stage, case), ...] of one stage, in the order the session judges them."""
    from hypothesis import strategies as st

    from k3diff.strategies import cases, chunk_plan

    got = []

    class _Pass:
        ok, skipped = True, None

    def keep(tag):
        def judge(value):
            got.append((tag, value[0] if isinstance(value, tuple) else value))
            return _Pass()
        return judge

    chunks = profile["chunks"]
    for chunk in range(chunks):
        sweep = chunk_plan(stage, space, sub_seed(seed, stage, "sweep"), chunk, chunks) if profile.get("sweep") else []
        find_failure(cases(stage, space), keep(stage), examples=max(1, profile["examples"] // chunks),
                     seed=sub_seed(seed, stage, chunk), explicit=sweep)
    inv = st.tuples(cases(stage, space).filter(lambda c: c.batch >= 2), st.integers(0, 1 << 16))
    find_failure(inv, keep(f"{stage}-inv"), examples=max(2, profile["examples"] // 8),
                 seed=sub_seed(seed, stage, "invariance"))
    return got


def dims_set(case) -> tuple:
    """What a megakernel kernel set is compiled for, as far as a case says: the preset and its
    MoE overrides and expert format (moe, MoE layers), the attention kind (mla, kda, layers)."""
    cfg = case.config()
    moe = case.stage == "moe" or (case.stage == "layer" and cfg.is_moe_layer(case.layer_idx))
    return (case.stage, case.preset, case.overrides if moe else (), case.expert_format if moe else None,
            case.attention_kind)


def host_numbers(case) -> int:
    """Random numbers the host draws for a case's inputs (reference.materialize draws them on the
    CPU at every preset; ~0.1 G a second on one core): the MLA cache, the KDA states, the layer's
    blocks and the activations."""
    cfg = case.config()
    n = case.batch * cfg.hidden * (2 + cfg.n_blocks) * case.steps
    if case.attention_kind == "mla":
        n += case.batch * (max(case.cache_lens) + case.steps) * cfg.mla_cache_dim
    if case.attention_kind == "kda":
        n += case.n_slots * (cfg.kda_heads * cfg.kda_head_dim ** 2 + 3 * cfg.kda_proj * (cfg.conv_width - 1))
    return n


def main(argv=None) -> int:
    from k3diff import backends
    from k3diff.coverage import coverage_fields, coverage_lines, missed_boundaries
    from k3diff.stages import STAGES

    p = argparse.ArgumentParser(prog="python -m k3diff.tools.plan", description=__doc__.split("\n")[0])
    p.add_argument("--profile", default="ci", choices=sorted(PROFILES))
    p.add_argument("--preset", default=None, choices=("tiny", "small", "full"))
    p.add_argument("--device", default="cuda", help="whose default space (cuda: the GPU's; no GPU needed)")
    p.add_argument("--backend", default="megakernel", help="whose declared boundaries")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--stages", default=",".join(STAGES))
    args = p.parse_args(argv)
    stages = [s for s in args.stages.split(",") if s]
    bad = [s for s in stages if s not in STAGES]
    if bad:
        print(f"plan: unknown stage {bad[0]!r} (stages: {', '.join(STAGES)})", file=sys.stderr)
        return 2
    try:
        backend = backends.load(args.backend)
    except backends.BackendError as exc:
        print(f"plan: {exc}", file=sys.stderr)
        return 2
    space = choose_space(args.device, args.preset, backend)
    records, sets, host = [], Counter(), Counter()
    for stage in stages:
        for tag, case in drawn_cases(stage, space, args.seed, PROFILES[args.profile]):
            records.append({"stage": tag, "tie_flips": 0, **coverage_fields(case)})
            sets[dims_set(case)] += 1
            host[stage] += host_numbers(case)
    print(f"plan of `pytest --k3diff --k3diff-profile {args.profile}` on {args.device}"
          f"{' --k3diff-preset ' + args.preset if args.preset else ''} --k3diff-seed {args.seed}, "
          f"boundaries of {args.backend}: {len(records)} cases")
    for line in coverage_lines(records, space.boundaries):
        print(line)
    for stage in stages:
        mine = Counter({k: v for k, v in sets.items() if k[0] == stage})
        full = sum(v for k, v in mine.items() if k[1] == "full")
        print(f"{stage}: {sum(mine.values())} cases ({full} at full dims), {len(mine)} kernel dims sets, "
              f"{host[stage] / 1e9:.2f} G input numbers drawn on the host")
    moe_sets = {(k[1], k[2], k[3]) for k in sets if k[3] is not None}
    attn_sets = {(k[1], k[4]) for k in sets if k[4] is not None}
    print(f"distinct kernel dims sets: {len(moe_sets)} MoE (dims x format), {len(attn_sets)} attention "
          f"(preset x kind); ~10 s each to compile on a cold megakernel cache")
    return 1 if missed_boundaries(records, space.boundaries) else 0


if __name__ == "__main__":
    sys.exit(main())
