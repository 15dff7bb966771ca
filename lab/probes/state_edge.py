"""The one near-edge tensor of nightly seed 94001 (shard 2/8): the layer's KDA recurrent_state at 96.8%
of its budget (layer full B=7 E=512 rsf 2.5 layer 12 tiny, case seed 1047); every other of its 2475
state checks used <= 51%. Re-judge that case and its neighbours (other case seeds, tiny and plain)
with the megakernel and torch-blocked on this GPU: is the share the kernel's, or the baseline's luck?"""
import dataclasses
import sys

from k3diff.backends import load_available
from k3diff.case import Case
from k3diff.runner import check_case

base = Case(stage="layer", preset="full", overrides=(("n_experts", 512), ("routed_scaling_factor", 2.5)),
            batch=7, n_slots=10, state_idx=(3, 6, 7, 9, 5, 8, 2), layer_idx=12, value_dist="tiny",
            seed=1047, version=2)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 12
cands = {"mk": load_available("megakernel.backend:MegakernelBackend"), "tb": load_available("torch-blocked")}
print(f"{'dist':6} {'seed':>6} {'who':3} {'ratio':>7} {'max_err':>10} {'base_err':>10} {'atol':>10} {'err/base':>8} where")
for dist in ("tiny", "plain"):
    for seed in [1047] + list(range(2000, 2000 + n)):
        case = dataclasses.replace(base, value_dist=dist, seed=seed)
        for who, c in cands.items():
            v = check_case(case, c, device="cuda")
            for r in v.reports:
                if r.tensor == "recurrent_state":
                    print(f"{dist:6} {seed:6d} {who:3} {r.ratio:7.3f} {r.max_err:10.3g} {r.base_err:10.3g} "
                          f"{r.atol:10.3g} {r.max_err / max(r.base_err, 1e-30):8.2f} {r.where}", flush=True)
