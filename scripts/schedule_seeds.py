"""Write N cases drawn as a ci run draws them on a GPU (the schedule dimension included) as seed
files, for `k3diff sanitize` (scripts/gpu_schedule_check.sh).

    python scripts/schedule_seeds.py OUT_DIR [--n 50] [--seed 0] [--backend megakernel]
"""
from __future__ import annotations

import argparse

from hypothesis import HealthCheck, given, seed, settings

from k3diff import backends
from k3diff.corpus import environment, save
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
    written = []
    for stage in stages:
        @seed(args.seed)
        @settings(max_examples=per, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(cases(stage, space))
        def draw(case):
            if len(written) < args.n and len([w for w in written if w.name.startswith(stage)]) < per:
                written.append(save(case, {}, args.out, args.backend, environment=environment()))

        draw()
    print(f"{len(written)} seeds in {args.out}")


if __name__ == "__main__":
    main()
