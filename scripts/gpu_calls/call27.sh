#!/usr/bin/env bash
# call 27 (run as call 29's lane D on 88c821b: 7 passed): after re-applying ae9139b (megakernel-ep's combine overlapped with
# the experts block by block, ep.py and ep_ipc.py): still bit for bit the one-GPU step through IPC?
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=8 END=${END:-150}
TAIL=14 cmd A_ep_ipc $(left) python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_ep_gpu.py -k "ipc and not wrong_offset"
finish
