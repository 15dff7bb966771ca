#!/usr/bin/env bash
# call 16 (2026-12-03, seventh session): what call 14 left of issue 28 under 2bb22d8's rule, on the
# tree of bc50f4c: the default-preset ci run clean (call 14's seed 95005 was cut at its 150 s
# limit by cold compiles after 213 cases, 0 failures), two fresh seeds of it, and nightly 94001's
# shards 6-8 (1-4 ran in call 12, 5 in call 14). Kernel cache: call 15's tarball at .gpu/mkc.tgz.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-560}
ci D_def_95005 150 --k3diff-seed 95005
ci F_def_95006 120 --k3diff-seed 95006
nightly_shards 94001 8 ${SHARDS:-6 7 8}
ci G_def_95007 120 --k3diff-seed 95007
finish
