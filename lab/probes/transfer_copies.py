"""A reply's round trip in one process, `decode(encode(tensors))`, best of 5, at a few sizes: the
copies k3diff.transfer makes of every byte a candidate's process sends back (run it in two trees
to compare them).

    PYTHONPATH=$PWD python lab/probes/transfer_copies.py
"""
import time

import torch

from k3diff.transfer import decode, encode

for mb in (4, 32, 128):
    tensors = {"a": torch.randn(mb << 18), "b": torch.randn(mb << 17).to(torch.bfloat16)}   # mb MB + mb/4 MB
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        decode(encode(tensors))
        best = min(best, time.perf_counter() - t0)
    print(f"{mb:4d}+{mb // 4} MB: encode+decode {best * 1e3:7.1f} ms")
