#!/usr/bin/env bash
# The adapters' packages into .site/ on the GPU machine (ignored: a warm machine keeps it), from
# .whl/ (scripts/pack_adapters.sh on the CPU), carried alone: the bundle and they do not fit one
# call's 64 MiB together. Used by the calls that time FlashInfer and FLA (call15.sh, call40.sh).
set -uo pipefail
mkdir -p .site && python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target .site .whl/*.whl \
  && tar -xJf .whl/flashinfer-0.7.4-mla.tar.xz -C .site && ls .site
