"""What crosses the isolation socket per case, each way, for a few cases of each stage at a preset
(default small), and the seconds `to_child` and `encode` take on this machine: where the cost of
judging outside the candidate's process goes at dims larger than the CPU's. The child's side is
simulated in this process (the request unpickled as the child does, its tensors handed back as
they came: a candidate that writes its caches and states in place), so a tree whose replies name
the parent's shared buffers shows that here.

    PYTHONPATH=$PWD python lab/probes/reply_bytes.py [PRESET] [CASES_PER_STAGE]
"""
import sys
import time

from hypothesis import HealthCheck, given, seed, settings

from k3diff.controls import Controls, make_calls
from k3diff.materialize import materialize
from k3diff.session import choose_space
from k3diff.stages import output_specs
from k3diff.strategies import cases
from k3diff import transfer
from k3diff.transfer import encode, from_parent, to_child

preset = sys.argv[1] if len(sys.argv) > 1 else "small"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 3
for stage in ("kda", "layer", "moe", "mla"):
    drawn = []

    @seed(1)
    @settings(max_examples=n + 1, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(cases(stage, choose_space("cpu", preset, None)))
    def draw(c):
        drawn.append(c)

    draw()
    for c in drawn[:n]:
        cfg, _, inputs = materialize(c, "cpu")
        _, calls = make_calls(c.stage, cfg, inputs, {s.name for s in output_specs(c.stage)}, "cpu", Controls(), "")
        t0 = time.perf_counter()
        sent = to_child(calls)
        t1 = time.perf_counter()
        reply = encode(from_parent(sent))
        t2 = time.perf_counter()
        getattr(transfer, "forget_received", lambda: None)()
        print(f"{stage:6} {c.label()[:58]:58} | {len(calls)} calls; to child {len(sent) / 2**20:6.1f} MB "
              f"({t1 - t0:.2f} s); reply {len(reply) / 2**20:6.1f} MB ({t2 - t1:.2f} s)", flush=True)
