import sys, torch
from megakernel.dims import MLA_FULL
from megakernel.launch_streams import stream
from megakernel.tools.tune_attn import mla_step_scratch
from megakernel.tools.mla_ksplit import compiled
T, L = int(sys.argv[1]), int(sys.argv[2])
s, named, kv, lens = mla_step_scratch(T, L, 1, default_attn=True)   # the step's own splits
for v in sys.argv[3:]:
    launch = compiled(v, MLA_FULL)
    launch(named, stream()); torch.cuda.synchronize()
    launch(named, stream()); torch.cuda.synchronize()
print("done")
