#!/usr/bin/env bash
# call 28 (for a session lent nvidia-h200-x2; not yet run): issue 34's two-GPU runs in one call,
# carrying [".device", ".gpu"] (the kernel cache built on the CPU first: call18.sh says how):
# megakernel-ep's GPU tests (its IPC cases skip there: a GPU per rank takes NCCL), both
# distributed candidates' ci on 2 ranks (NCCL, a GPU each), and the bench: ep_time (its last
# column then the copy between the two GPUs) and step_time (the one-GPU megakernel, megakernel-ep
# and torch-blocked-ep on the same cases).
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-585}
EP=megakernel.backend:MegakernelEPBackend
TAIL=30 cmd A_ep_gpu 150 python3 -m pytest -q -p no:cacheprovider -rs tests/megakernel/test_mk_ep_gpu.py
BACKEND=$EP ci B_ep_ci_x2 130 -k moe --k3diff-ranks 2 --k3diff-seed 99002
BACKEND=torch-blocked-ep ci C_torch_ep_ci_x2 100 -k moe --k3diff-ranks 2 --k3diff-seed 99003
TAIL=24 cmd D_ep_time 90 python3 -m megakernel.tools.ep_time --ranks 2 --dims full --batches 1,8,64
TAIL=10 cmd E_step_time $(left) python3 -m k3diff.tools.step_time --stage moe --preset full --ranks 2 \
  --batches 1,8,64 --iters 3 --rounds 3 --backends megakernel.backend:MegakernelBackend,$EP,torch-blocked-ep
finish
