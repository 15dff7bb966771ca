import sys, torch
from megakernel import cache
from megakernel.dims import MLA_FULL
from megakernel.launch_streams import stream
from megakernel.tools.tune_attn import mla_step_scratch
from megakernel.tools.mla_ksplit import VARIANTS
T, L = int(sys.argv[1]), int(sys.argv[2])
s, named, kv, lens = mla_step_scratch(T, L, 1)
for v in sys.argv[3:]:
    kw = dict(VARIANTS[v])
    name = ("mla_attn_tma" if kw.pop("tma", False) else "mla_attn_wg" if kw.pop("wg", False)
            else "mla_attn_mma")
    launch = cache.compiled(name, MLA_FULL, **kw)
    launch(named, stream()); torch.cuda.synchronize()
    launch(named, stream()); torch.cuda.synchronize()
print("done")
