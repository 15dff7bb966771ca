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
    launch = (cache.compiled("mla_attn_wg", MLA_FULL, **kw) if kw.pop("wg", False) else
              cache.compiled("mla_attn_mma", MLA_FULL, **kw))
    launch(named, stream()); torch.cuda.synchronize()
    launch(named, stream()); torch.cuda.synchronize()
print("done")
