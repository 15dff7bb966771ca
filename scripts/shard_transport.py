"""python scripts/shard_transport.py [GiB]: a shard's way to a rank (k3diff/rank_pool.py), timed
both ways on this machine: by value (torch.save bytes through the pipe, as before 2026-12-03) and
as shared-memory tensors whose handles the pipe carries (rank_pool._shared, now). A forkserver
child, as the ranks are; the child checks what it got. The pipe column of `shared` includes the
wait for the sender's copy into shared memory (the child is already waiting); `total` is the
sender's view."""
import multiprocessing as mp
import sys
import time

import torch

from k3diff.rank_pool import _pack, _shared, _unpack


def child(conn):
    for how in ("value", "shared"):
        t0 = time.time()
        msg = conn.recv()
        t1 = time.time()
        w = _unpack(msg) if how == "value" else msg
        t2 = time.time()
        conn.send((t1 - t0, t2 - t1, float(w["experts.w"][::4096].float().sum())))


def main(gib: float) -> int:
    ctx = mp.get_context("forkserver")
    a, b = ctx.Pipe()
    p = ctx.Process(target=child, args=(b,))
    p.start()
    n = int(gib * 2 ** 29)
    want = float(len(range(0, n, 4096)))
    for how in ("value", "shared"):
        w = {"experts.w": torch.ones(n, dtype=torch.bfloat16)}
        t0 = time.time()
        msg = _pack(w) if how == "value" else _shared(w)
        t1 = time.time()
        a.send(msg)
        recv, unpack, got = a.recv()
        t2 = time.time()
        ok = "ok" if got == want else f"WRONG ({got} != {want})"
        print(f"{gib:g} GiB {how:6s}: pack {t1 - t0:5.2f} s, pipe {recv:5.2f} s, unpack {unpack:5.2f} s, "
              f"total {t2 - t0:5.2f} s, contents {ok}", flush=True)
    p.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0))
