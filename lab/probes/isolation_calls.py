"""Where an isolated case's time goes, call by call: 20 cases of a stage (CPU default preset, seed 3)
through one IsolatedChecker, the phases summed, and the parent's own `to_child` and `decode` timed
around every call (what is left of `transfer` is the child's side and the socket).

    PYTHONPATH=$PWD python lab/probes/isolation_calls.py [STAGE]
"""
import tempfile
import time, statistics as st
from hypothesis import HealthCheck, given, seed, settings
from k3diff import transfer, isolation
from k3diff.isolation import IsolatedChecker
from k3diff.session import choose_space
from k3diff.strategies import cases
import sys
stage = sys.argv[1] if len(sys.argv) > 1 else "moe"
drawn = []
@seed(3)
@settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(cases(stage, choose_space("cpu", None, None)))
def draw(c): drawn.append(c)
draw()
rec = []
real_to_child, real_decode = transfer.to_child, transfer.decode
def tc(obj, shares=None):
    t0 = time.perf_counter(); d = real_to_child(obj, shares); rec.append(("to_child", time.perf_counter() - t0, len(d), obj[0] if isinstance(obj, tuple) else None)); return d
def dc(data, *a, **k):
    t0 = time.perf_counter(); r = real_decode(data, *a, **k); rec.append(("decode", time.perf_counter() - t0, len(data), None)); return r
transfer.to_child, transfer.decode = tc, dc
ch = IsolatedChecker(None, device="cpu", inflight_dir=tempfile.mkdtemp())
ch.check(drawn[0])
rec.clear()
t0 = time.perf_counter()
vs = [ch.check(c) for c in drawn[1:21]]
wall = time.perf_counter() - t0
ch.close()
ph = {}
for v in vs:
    for k, s in v.phases.items(): ph[k] = ph.get(k, 0) + s
print(stage, "20 cases", f"{wall:.2f} s", {k: round(s, 3) for k, s in ph.items()})
for kind in ("to_child", "decode"):
    xs = [r for r in rec if r[0] == kind]
    print(kind, len(xs), "calls; total s %.3f; median s %.4f; bytes median %d max %d" % (sum(r[1] for r in xs), st.median(r[1] for r in xs), st.median(r[2] for r in xs), max(r[2] for r in xs)))
big = sorted((r for r in rec if r[0]=="to_child"), key=lambda r: -r[2])[:5]
print("largest requests", [(r[3], r[2], round(r[1],4)) for r in big])
