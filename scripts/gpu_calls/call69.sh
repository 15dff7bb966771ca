#!/usr/bin/env bash
# call 69 (fourteenth session): the final tree (b8f73a7: 7643e1f's PTX) on the GPU once more and
# the nightly profile's MLA cases at seed 99016. As first run, the shard lane chose nothing (a
# shard picks test items before -k: 0 cases, pytest's exit 5); the same call then ran the MLA
# stage's whole nightly, the second lane below.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-330}
TAIL=6 cmd A_tests 60 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_mla_gpu.py -k "tma or passes_k3diff"
PROFILE=nightly ci N_mla_layer_99016_1of8 $(left) -k "mla or layer" --k3diff-seed 99016 --k3diff-shard 1/8
PROFILE=nightly ci N_mla_99016 240 -k "mla and not layer" --k3diff-seed 99016
finish
