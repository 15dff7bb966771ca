"""The PTX of k3diff's own Triton kernels (the pressure co-runner and the planted schedule bugs'
router kernels), every specialisation, compiled for sm_90 without a GPU, written to OUT_DIR: run in
two trees and compare with line info dropped, to show a change left the kernels as they were.

    PYTHONPATH=$PWD python lab/probes/triton_ptx.py OUT_DIR        (needs triton; no GPU)
    strip() { awk '/\.section[ \t]+\.debug/{exit} !/^[ \t]*\.(loc|file)[ \t]/' "$1"; }
    for f in A/*.ptx; do cmp -s <(strip "$f") <(strip "B/${f#A/}") || echo "differs: $f"; done
"""
import inspect
import sys

import triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget

from k3diff import pressure, schedule_kernels

out = sys.argv[1]
rows, two = schedule_kernels.kernels()
spin = pressure._kernel()
tgt = GPUTarget("cuda", 90, 32)


def comp(tag, fn, types, consts):
    names = list(inspect.signature(fn.fn).parameters)
    sig = {n: ("constexpr" if n in consts else types[n] if n in types else "i32") for n in names}
    k = triton.compile(ASTSource(fn, signature=sig, constexprs={(names.index(n),): v for n, v in consts.items()}), target=tgt)
    open(f"{out}/{tag}.ptx", "w").write(k.asm["ptx"])


P = "*fp32"
for by_sm in (False, True):
    comp(f"rows_bysm{by_sm}", rows, dict(x_ptr=P, w_ptr=P, out_ptr=P, slot_ptr=P), dict(BLOCK_E=64, BLOCK_K=64, BY_SM=by_sm))
for barrier in (False, True):
    for phase in (0, 1):
        comp(f"two_b{barrier}_p{phase}", two, dict(x_ptr=P, w_ptr=P, tmp_ptr=P, out_ptr=P, count_ptr="*i32", sink_ptr=P), dict(BLOCK_E=64, BLOCK_K=64, BARRIER=barrier, PHASE=phase, HOLD=1024))
for thrash in (False, True):
    comp(f"spin_t{thrash}", spin, dict(flag_ptr="*i32", buf_ptr=P, sink_ptr=P), dict(THRASH=thrash, HOLD=1024))
print("dumped", out)
