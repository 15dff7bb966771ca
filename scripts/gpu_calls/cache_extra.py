"""Compile, on the CPU, the kernels a GPU call times beyond `python -m megakernel compile`'s list,
into $MEGAKERNEL_CACHE (build_cache.sh packs it as .gpu/mkc.tgz for common.sh): mla_ksplit's
attention variants, tune_attn's lat-only merges and one-warp KDA cores, tune_mma's expert variants, and the persistent launch in tune_persistent's
builds (its default and `lean`, both formats and batch classes, full and small dims)."""
import os
import sys

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
from megakernel import cache, compile_list, config, gemv          # noqa: E402
from megakernel import experimental as X                         # noqa: E402
from megakernel.dims import FULL, KDA_FULL, MLA_FULL, SMALL       # noqa: E402
from megakernel.tools import mla_ksplit, tune_attn, tune_mma, tune_persistent  # noqa: E402


def main():
    for name in mla_ksplit.VARIANTS:
        mla_ksplit.compiled(name, MLA_FULL)
    for code in ("v32x8", "v128x4"):
        cache.compiled("mla_merge", MLA_FULL, **tune_attn.lat_merge(code))
    for sp in X.WARP_SPLITS:                 # tune_attn's wS (call93.sh)
        tune_attn.core_launch(f"w{sp}", KDA_FULL)
    for name, lst in (("expert_up_mma", tune_mma.UPS), ("expert_down_mma", tune_mma.DOWNS)):
        for v in lst:
            cache.compiled(name, FULL, **v)
            print(name, v, flush=True)
    s = config.current()
    for label, *rest in tune_persistent.SETTINGS:
        st = tune_persistent._built(s, *rest[2:])
        for dm in (FULL, SMALL):
            for fmt in ("bf16", "mxfp4"):
                for t1 in (True, False):
                    v = compile_list.persistent_variant(st, fmt, False, t1,
                                                        gemv.moe_mma(st.gemv.mma))
                    cache.compile_kernel("persistent", dm, **v)
                    print("persistent", label, dm is FULL, fmt, t1, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
