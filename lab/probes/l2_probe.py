"""python lab/probes/l2_probe.py [--cases N] [--device cpu|cuda]: the L2 ratio (TensorReport.l2_ratio,
||cand - ref|| / ||base - ref|| of the bf16 tensors) over the same drawn cases of the moe, mla, kda
and layer stages, for the correct candidate, every false-alarm control (k3diff/false_alarms.py)
and a candidate whose MLA output is scaled by 1.01 (a uniform error the max-element rule can pass):
per candidate its failures (the whole-tensor rule, k3diff.budgets.L2_RTOL, among the others) and
its three largest ratios. Some of the figures behind that rule."""
import argparse
import random

from k3diff import backends
from k3diff.backends.blocked import TorchBlockedBackend
from k3diff.case import Case
from k3diff.false_alarms import CONTROLS, ControlBackend
from k3diff.runner import check_case


class ScaledMla(TorchBlockedBackend):
    name = "mla out x 1.01"
    stages = ("mla",)

    def run(self, stage, cfg, prepared, inputs, out):
        super().run(stage, cfg, prepared, inputs, out)
        out["out"].mul_(1.01)


def cases(n, seed=5):
    rng = random.Random(seed)
    out = []
    for stage in ("moe", "mla", "kda", "layer"):
        for i in range(n):
            B = rng.choice([1, 3, 8, 17])
            kw = dict(stage=stage, batch=B, seed=i, value_dist=rng.choice(["plain", "outliers", "large", "tiny"]))
            if stage in ("mla", "layer"):
                kw["cache_lens"] = tuple(rng.choice([0, 5, 64, 300]) for _ in range(B))
            if stage in ("kda", "layer"):
                kw.update(n_slots=B + 1, state_idx=tuple(range(1, B + 1)))
            out.append(Case(**kw).validate())
    return out


def main():
    ap = argparse.ArgumentParser(prog="python lab/probes/l2_probe.py")
    ap.add_argument("--cases", type=int, default=10, help="cases per stage")
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    drawn = cases(a.cases)
    cands = [("torch-blocked", backends.load("torch-blocked")), (ScaledMla.name, ScaledMla())]
    cands += [(c.name, ControlBackend(c)) for c in CONTROLS if not c.cuda_only or a.device == "cuda"]
    for name, cand in cands:
        worst, fails, judged = {}, 0, 0
        for case in drawn:
            if case.stage not in getattr(cand, "stages", (case.stage,)):
                continue
            v = check_case(case, cand, device=a.device)
            judged += 1
            fails += not v.ok
            for r in v.reports:
                if r.l2_ratio is not None:
                    k = (case.stage, r.tensor.split("@")[0])
                    worst[k] = max(worst.get(k, 0.0), r.l2_ratio)
        top = sorted(worst.items(), key=lambda x: -x[1])[:3]
        print(f"{name:24s} cases {judged:3d} fails {fails}  largest L2 ratios: "
              + ", ".join(f"{s}/{t} {v:.2f}" for (s, t), v in top), flush=True)


if __name__ == "__main__":
    main()
