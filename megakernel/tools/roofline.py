"""The two limits of a decode step: the bytes it must read over the read bandwidth, and the
flops it must do over the dense bf16 tensor-core rate, both measured in the same run as the step.

The benches' first roofline counted bytes only, against the copy bandwidth. That hides the second
limit: MLA decode at 96 heads reads each cached row once but does H x (C + R) x 2 flops on it
(about 2e5 per row at K3's dims), so at long caches and many tokens the tensor cores, not HBM, set
the floor. And weight streaming only reads, so the bytes go against a read-only stream, not a copy.

    read bandwidth   a sum over 2 GiB of f32 (one read per byte, a scalar written)
    dense bf16 rate  an 8192^3 bf16 GEMM through cuBLAS (torch.matmul): the best dense rate the
                     machine shows to torch; a kernel's own wgmma loop can only approach it

`Machine.us(bytes, flops)` is the floor of a step, `Machine.limit(...)` which of the two it is.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Machine:
    read_bw: float       # bytes / s
    bf16_flops: float    # flop / s

    def us(self, nbytes: float, flops: float) -> float:
        """The step's floor in microseconds: the larger of its two limits."""
        return max(nbytes / self.read_bw, flops / self.bf16_flops) * 1e6

    def limit(self, nbytes: float, flops: float) -> str:
        """"bytes" or "flops": which limit sets the floor."""
        return "bytes" if nbytes / self.read_bw >= flops / self.bf16_flops else "flops"

    def line(self) -> str:
        return (f"read bandwidth {self.read_bw / 1e12:.2f} TB/s (a read-only stream), dense bf16 "
                f"{self.bf16_flops / 1e12:.0f} TFLOP/s (an 8192^3 GEMM)")


def _median_s(fn, reps: int) -> float:
    fn()
    fn()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1e-3)
    return statistics.median(ts)


def measure(device="cuda") -> Machine:
    """Both limits, measured now on `device` (the same run as the rows they judge)."""
    n = 1 << 29                                              # 2 GiB of f32
    a = torch.empty(n, dtype=torch.float32, device=device).uniform_()
    read_bw = 4 * n / _median_s(lambda: a.sum(), 10)
    a = None                                                 # freed before the GEMM (a name, not del: the lambda)
    m = 8192
    x = torch.randn(m, m, device=device).to(torch.bfloat16)
    y = torch.randn(m, m, device=device).to(torch.bfloat16)
    rate = 2 * m ** 3 / _median_s(lambda: x @ y, 10)
    x = y = None
    torch.cuda.empty_cache()
    return Machine(read_bw, rate)


def share(machine: Machine, us: float, nbytes: float, flops: float) -> str:
    """A row's cell: its share of the two-limit floor and which limit it is (B bytes, F flops)."""
    return f"{machine.us(nbytes, flops) / us:6.1%} {machine.limit(nbytes, flops)[0].upper()}"
