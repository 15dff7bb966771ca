"""python scripts/l2_chained_probe.py [--cases N] [--steps S] [--seed K] [--device cpu|cuda]
[--preset P] [--only NAME] [--also BACKEND] [--extra MODULE:OBJECT]: the
whole-tensor ratio ||cand - ref||_2 / ||base - ref||_2 (TensorReport.l2_ratio) of every bf16 tensor
at each step of multi-step MLA, KDA and layer cases, where candidate, baseline and reference each
carry their own cache or state (k3diff.runner), for correct candidates: torch-blocked, the
reference's faithful-bf16 mode (`torch`) and every false-alarm control (k3diff/false_alarms.py),
over every value distribution. Prints, per candidate and over all of them, the count, max, p99.9
and median at step 0 and at the later steps, and the worst tensor: the figures behind the
chained-step budget (k3diff.budgets.L2_RTOL_CHAINED). A candidate that fails a case is printed
with the failure (a correct one must not).

The drawn cases are a fixed function of --seed, so a figure in k3diff/budgets.py is reproduced by
the command written beside it.
"""
import argparse
import random
import sys
import time

from k3diff import backends
from k3diff.budgets import STEP_TAG
from k3diff.case import Case
from k3diff.false_alarms import CONTROLS, ControlBackend
from k3diff.runner import check_case

DISTS = ("plain", "outliers", "large", "tiny")


def cases(n, steps, seed, preset="tiny"):
    """n cases per stage (mla, kda, layer), each value distribution in turn, batch and cache
    lengths drawn from the sizes where the blocked code changes path."""
    rng = random.Random(seed)
    out = []
    for stage in ("mla", "kda", "layer"):
        for i in range(n):
            B = rng.choice([1, 2, 3, 8, 17])
            kw = dict(stage=stage, preset=preset, batch=B, seed=seed * 1000 + i, value_dist=DISTS[i % len(DISTS)],
                      steps=steps)
            if stage in ("mla", "layer"):
                kw["cache_lens"] = tuple(rng.choice([0, 1, 5, 47, 64, 65, 200]) for _ in range(B))
            if stage in ("kda", "layer"):
                kw.update(n_slots=B + 1, state_idx=tuple(range(1, B + 1)))
            if stage == "layer":
                kw["layer_idx"] = rng.choice([0, 1, 2, 3])
            out.append(Case(**kw).validate())
    return out


def _pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python scripts/l2_chained_probe.py")
    ap.add_argument("--cases", type=int, default=8, help="cases per stage")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--preset", default="tiny", help="model dims (small on a GPU)")
    ap.add_argument("--only", default=None, help="candidates whose name contains this")
    ap.add_argument("--also", action="append", default=[], metavar="BACKEND",
                    help="one more correct candidate, in the ALL line (e.g. megakernel on a GPU)")
    ap.add_argument("--extra", action="append", default=[], metavar="MODULE:OBJECT",
                    help="one more candidate, e.g. broken_candidate:ScaledFromStep1 (PYTHONPATH=tests/k3diff), "
                         "printed apart: not in the ALL line of correct candidates")
    a = ap.parse_args(argv)
    drawn = cases(a.cases, a.steps, a.seed, a.preset)
    cands = [("torch-blocked", backends.load("torch-blocked")), ("torch (faithful)", backends.load("torch"))]
    cands += [(c.name, ControlBackend(c)) for c in CONTROLS if not c.cuda_only or a.device == "cuda"]
    if a.only:
        cands = [c for c in cands if a.only in c[0]]
    cands += [(spec, backends.load(spec)) for spec in a.also]
    extra = [(spec, backends.load(spec)) for spec in a.extra]
    every = {"step0": [], "later": []}
    worst_all = (0.0, "")
    for name, cand in cands + extra:
        got = {"step0": [], "later": []}
        worst, fails, t0 = (0.0, ""), 0, time.time()
        per_case = []           # each case's largest later-step ratio
        for case in drawn:
            if case.stage not in getattr(cand, "stages", (case.stage,)):
                continue
            v = check_case(case, cand, device=a.device)
            if not v.ok:
                fails += 1
                print(f"  {name}: FAIL {case.label()}: {(v.failures() or [v.error])[0]}", flush=True)
            later_max = 0.0
            for r in v.reports:
                if r.l2_ratio is None:
                    continue
                head, _, step = r.tensor.rpartition(STEP_TAG)
                where = "later" if head and int(step) > 0 else "step0"
                got[where].append(r.l2_ratio)
                if where == "later":
                    later_max = max(later_max, r.l2_ratio)
                if where == "later" and r.l2_ratio > worst[0]:
                    worst = (r.l2_ratio, f"{case.stage} {r.tensor} {case.value_dist} ({case.label()})")
            per_case.append(later_max)
        if (name, cand) not in extra:
            for k in got:
                every[k] += got[k]
            worst_all = max(worst_all, worst)
        print(f"{name:24s} fails {fails}  " + "  ".join(
            f"{k}: n {len(v)} max {max(v, default=0):.3f} p99.9 {_pct(v, 0.999):.3f} median {_pct(v, 0.5):.3f} "
            f"min {min(v, default=0):.3f}"
            for k, v in got.items()) + f"  worst later {worst[0]:.3f} {worst[1]}  ({time.time() - t0:.0f} s)", flush=True)
        print(f"{'':24s} cases whose largest later-step ratio reaches "
              + ", ".join(f">= {t:g}: {sum(x >= t for x in per_case)}/{len(per_case)}" for t in (1.5, 2.0, 2.5, 3.0)),
              flush=True)
    print("ALL " + "  ".join(f"{k}: n {len(v)} max {max(v, default=0):.3f} p99.9 {_pct(v, 0.999):.3f}"
                             for k, v in every.items()) + f"  worst later {worst_all[0]:.3f} {worst_all[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
