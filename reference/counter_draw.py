"""Random numbers that are a pure function of (key, position): the same bits on every device.

torch's generators draw other bits on a GPU than on the CPU (and CUDA's spread a draw over the
SMs), so a case drawn on a GPU could not be replayed on the CPU. Here number i of stream `key` is
made from a 64-bit hash of (key, i) by integer arithmetic and a table lookup only, then by
correctly rounded f32 operations, one torch op at a time (no fused multiply-add): every step is
exact or IEEE-rounded, so a CPU and a GPU give the same bits (tests/reference/test_counter_draw.py
checks the CPU against a numpy model of the same arithmetic; a GPU run checks the GPU against the
CPU). Numbers are drawn in chunks written into the result, so a stream read in parts gives the
bits of one read, and the temporaries stay bounded.

- hash: SplitMix64's finaliser of key + w * 0x9E3779B97F4A7C15 (wrapping int64 arithmetic, the
  shifts made logical by a mask): word w gives numbers 2w (its low 32 bits) and 2w + 1 (its high).
- normal: of a number's 32 bits, the high 16 pick a cell k of the inverse normal CDF tabulated at
  k / 65536 (k = 0 .. 65536; the two end points at 2^-24 and 1 - 2^-24, so |x| <= 5.3), the low 16
  a place u in the cell: x = Q[k] + (Q[k+1] - Q[k]) * u in f32. Linear within cells of 1/65536 of
  the probability: the mean, the variance and the tails to 5 sigma are the normal's.
- the table is computed once in float64 by Python's statistics.NormalDist (pure Python on libm's
  log and sqrt) and rounded to f32; its checksum is pinned in the tests, so a platform whose libm
  moved an entry shows.
"""
from __future__ import annotations

import functools
import statistics

import torch

_GAMMA = -7046029254386353131          # 0x9E3779B97F4A7C15 as a signed int64
_M1 = -4658895280553007687             # 0xBF58476D1CE4E5B9
_M2 = -7723592293110705685             # 0x94D049BB133111EB
_CELLS = 1 << 16
_CHUNK = 1 << 22                       # 64-bit words hashed at once
# the temporaries of one chunk at their peak (a word and its shift: 16 bytes; then 2 numbers a
# word, each an index, a place and two f32 values: 32 bytes): 200 MB
PEAK_BYTES = 48 * _CHUNK


@functools.lru_cache(maxsize=None)
def _table_cpu() -> tuple:
    nd = statistics.NormalDist()
    end = 2.0 ** -24
    q = torch.tensor([nd.inv_cdf(min(max(k / _CELLS, end), 1 - end)) for k in range(_CELLS + 1)],
                     dtype=torch.float64).to(torch.float32)
    return q[:-1].contiguous(), (q[1:] - q[:-1]).contiguous()       # Q[k], Q[k+1] - Q[k]


_TABLES: dict = {}


def table(device) -> tuple:
    """(Q[k], Q[k+1] - Q[k]) for k < 65536, f32, on `device` (the CPU's bits, copied)."""
    dev = torch.device(device)
    if dev not in _TABLES:
        _TABLES[dev] = tuple(t.to(dev) for t in _table_cpu())
    return _TABLES[dev]


def words(key: int, first: int, n: int, device) -> torch.Tensor:
    """The 64-bit hash words first .. first + n - 1 of stream `key` (int64)."""
    z = torch.arange(first, first + n, dtype=torch.int64, device=device)
    z.mul_(_GAMMA).add_(_wrap(key))
    t = torch.empty_like(z)
    for shift, mul in ((30, _M1), (27, _M2), (31, None)):
        torch.bitwise_right_shift(z, shift, out=t)
        t.bitwise_and_((1 << (64 - shift)) - 1)          # a logical shift: the sign bits cleared
        z.bitwise_xor_(t)
        if mul is not None:
            z.mul_(mul)
    return z


def _wrap(v: int) -> int:
    """v as a signed 64-bit integer (two's complement)."""
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


def _fill(out: torch.Tensor, key: int, offset: int, make) -> None:
    """out (flat) = make(numbers offset .. offset + out.numel() - 1 of stream `key`), by chunks.
    Number 2w is word w's low 32 bits and 2w + 1 its high ones (int32, two's complement): the
    words' own memory read as int32 on a little-endian machine (x86, ARM and NVIDIA GPUs all are),
    no copy."""
    n, dev = out.numel(), out.device
    done = 0
    while done < n:
        pos = offset + done
        w0, r = divmod(pos, 2)
        m = min(n - done, 2 * _CHUNK - r)
        z = words(key, w0, (r + m + 1) // 2, dev)
        out[done:done + m] = make(z.view(torch.int32)[r:r + m])
        done += m


def _normal_of(nums: torch.Tensor) -> torch.Tensor:
    q, dq = table(nums.device)
    k = (nums >> 16) & 0xFFFF
    u = (nums & 0xFFFF).to(torch.float32).mul_(2.0 ** -16)
    # index_select, not t[k]: 1.6x faster on the CPU, the same values
    x = torch.index_select(dq, 0, k).mul_(u)      # two ops, each rounded: no fused multiply-add
    return x.add_(torch.index_select(q, 0, k))


def normal(key: int, shape, device, offset: int = 0) -> torch.Tensor:
    """f32 normals of `shape`: numbers offset .. of stream `key`."""
    out = torch.empty(tuple(shape), dtype=torch.float32, device=device)
    _fill(out.view(-1), key, offset, _normal_of)
    return out


def finite_sentinels(key: int, shape, dtype: torch.dtype, device, offset: int = 0) -> torch.Tensor:
    """sign * 2^e * (1 + m): e in [100, 126] and m in [0, 1) on a 2^-16 grid, from stream `key`;
    the float64 built from its bits (integer ops only), then rounded to `dtype` (bf16 or f32) as
    a cast rounds everywhere."""
    out = torch.empty(tuple(shape), dtype=torch.int64, device=device)

    def make(nums):
        nums = nums.to(torch.int64) & 0xFFFFFFFF
        e = 100 + ((nums >> 16) & 0x7FFF) % 27
        return (((nums >> 31) & 1) << 63) | ((e + 1023) << 52) | ((nums & 0xFFFF) << 36)
    _fill(out.view(-1), key, offset, make)
    return out.view(torch.float64).to(dtype)


class Stream:
    """Stream `key` on `device`, read in order: each draw takes the next numbers (a generator's
    use, as reference.materialize draws from its torch.Generator)."""

    def __init__(self, key: int, device):
        self.key, self.device, self.offset = key, torch.device(device), 0

    def normal(self, shape) -> torch.Tensor:
        out = normal(self.key, shape, self.device, self.offset)
        self.offset += out.numel()
        return out

    def finite_sentinels(self, shape, dtype) -> torch.Tensor:
        out = finite_sentinels(self.key, shape, dtype, self.device, self.offset)
        self.offset += out.numel()
        return out
