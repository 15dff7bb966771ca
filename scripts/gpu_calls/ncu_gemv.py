"""One GEMV launch to profile under ncu: python3 scripts/gpu_calls/ncu_gemv.py NAME T 'VARIANT-JSON'...
(tune_gemv's shapes at full dims; each variant launched twice, so --launch-skip 1 takes a warm one)."""
import json, sys, torch
from megakernel import cache
from megakernel.tools.tune_gemv import shapes
name, T = sys.argv[1], int(sys.argv[2])
N, K, out_bf16, _ = shape = shapes("full")[name]
w = (torch.randn(N, K, device="cuda") / K ** 0.5).bfloat16()
x = torch.randn(T, K, device="cuda").bfloat16()
y = torch.empty(T, N, dtype=torch.bfloat16 if out_bf16 else torch.float32, device="cuda")
for v in sys.argv[3:]:
    launch = cache.compiled("gemv", shape, **json.loads(v))
    for _ in range(2):
        launch(dict(w=w, x=x, y=y, T=T, ctas=1 << 30), torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
print("done")
