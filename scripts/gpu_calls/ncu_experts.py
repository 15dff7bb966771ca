"""The MXFP4 expert launches to profile under ncu, each alone inside an NVTX range:
python3 scripts/gpu_calls/ncu_experts.py T. Full dims, tune_mma's weights (seed 0). A full step
first leaves the scratch the stages read; then up (stage 3) and down (stage 4) twice each, in
ranges named up / down, so `ncu --nvtx --nvtx-include down/ --launch-skip 1 --launch-count 1`
takes a warm launch of one kernel. (Call 77 ran it with a layout argument, the since-deleted rot
layout beside the stored one: ranges down_ocp / down_rot.)"""
import sys

import torch

from megakernel.dims import FULL
from megakernel.moe import LatentMoE
from megakernel.tools.bench import DEV, draw_weights

T = int(sys.argv[1])
moe = LatentMoE(FULL, draw_weights(FULL, "mxfp4", seed=0), DEV)
x = torch.randn(T, FULL.d, device=DEV).to(torch.bfloat16)
moe.launch(x)
torch.cuda.synchronize()
for name, stage in (("up", 3), ("down", 4)):
    torch.cuda.nvtx.range_push(name)
    for _ in range(2):
        moe.launch(x, stages={stage})
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
print("done")
