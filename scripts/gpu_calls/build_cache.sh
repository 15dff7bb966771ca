#!/usr/bin/env bash
# The kernel cache a GPU call unpacks (common.sh): every default kernel (`python -m megakernel
# compile`, sm_90a, full and small dims) and the variants the calls time (cache_extra.py), compiled
# on the CPU into /tmp/mkc and packed as .gpu/mkc.tgz (ignored by git; carry [".device", ".gpu"]).
# Rebuild after any edit under megakernel/ (the cache key digests its sources). ~4 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf /tmp/mkc
export MEGAKERNEL_CACHE=/tmp/mkc CUTE_DSL_ARCH=sm_90a
python -m megakernel compile --arch sm_90a --dims full,small
python scripts/gpu_calls/cache_extra.py
mkdir -p .gpu && tar czf .gpu/mkc.tgz -C /tmp/mkc .
echo "kernel cache: $(find /tmp/mkc -type f | wc -l) files, $(du -h .gpu/mkc.tgz | cut -f1)"
