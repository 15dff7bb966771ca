"""Write N cases drawn as a ci run draws them on a GPU (the schedule dimension included) as seed
files, for `k3diff sanitize` (scripts/gpu_schedule_check.sh).

    python scripts/schedule_seeds.py OUT_DIR [--n 50] [--seed 0] [--backend megakernel]

Only cases the candidate runs are written (a case it refuses, a verify step or an FP8 cache it
does not serve, would replay as "nothing judged" under the sanitizer and sanitize nothing); the
seeds record no verdict (drawn, not judged), so a replay judges them afresh instead of comparing
with an outcome nobody saw.
"""
from __future__ import annotations

import argparse

from hypothesis import HealthCheck, given, seed, settings

from k3diff import backends
from k3diff.corpus import environment, save
from k3diff.features import refusal
from k3diff.session import choose_space
from k3diff.strategies import cases


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--n", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default="megakernel")
    args = p.parse_args()
    backend = backends.load_available(args.backend)
    space = choose_space("cuda", None, backend)
    stages = list(getattr(backend, "stages", ("moe", "mla", "kda", "layer")))
    per = -(-args.n // len(stages))
    written, refused = [], 0
    for stage in stages:
        mine = []

        # up to 10 draws per seed kept: a candidate that refuses most of a stage's cases still
        # gets its share, one that refuses all of them gets none (and the count says so)
        @seed(args.seed)
        @settings(max_examples=10 * per, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(cases(stage, space))
        def draw(case):
            nonlocal refused
            if len(written) + len(mine) >= args.n or len(mine) >= per:
                return
            if refusal(backend, case):
                refused += 1
                return
            mine.append(save(case, {}, args.out, args.backend, environment=environment()))

        draw()
        written += mine
    print(f"{len(written)} seeds in {args.out}" + (f" ({refused} drawn cases the candidate refuses left out)"
                                                   if refused else ""))


if __name__ == "__main__":
    main()
