"""Where k_mla_attn_wg.py's partials go wrong, if they do: one token, small caches, the merged
latent against float64 per head and per 64-column block (a layout bug shows as a pattern)."""
import torch

from megakernel import cache
from megakernel.dims import MLA_FULL
from megakernel.launch_streams import stream
from megakernel.tools.mla_ksplit import exact, merged
from megakernel.tools.tune_attn import mla_step_scratch

md = MLA_FULL
for T, L in ((1, 10), (1, 63), (1, 300), (2, 3000)):
    s, named, kv, lens = mla_step_scratch(T, L, 1)
    ref = exact(md, s, kv, lens)
    for name in ("mla_attn_mma", "mla_attn_wg"):
        s["pa"].fill_(float("nan"))
        cache.compiled(name, md)(named, stream())
        torch.cuda.synchronize()
        got = merged(s["pm"], s["pl"], s["pa"])
        err = (got - ref).abs() / ref.abs().max()
        print(f"T={T} L={L} {name}: max {float(err.max()):.2e} nan {int(got.isnan().sum())}")
        if name == "mla_attn_wg" and float(err.nan_to_num(1.0).max()) > 1e-3:
            e = err[0].nan_to_num(9.0)
            print("  per head (max over columns):", " ".join(f"{float(v):.1e}" for v in e.max(1).values[:96:4]))
            print("  per 64-col block (max over heads):", " ".join(f"{float(v):.1e}" for v in e.view(md.H, -1, 64).amax((0, 2))))
            print("  pm wg vs head 0..3:", s["pm"][0, :4, :3].tolist(), "pl", s["pl"][0, :4, :3].tolist())
            print("  got[0,0,:8]", got[0, 0, :8].tolist(), "ref", ref[0, 0, :8].tolist())
