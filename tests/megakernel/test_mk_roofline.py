"""CPU: the benches' two-limit roofline (issue 31): the floor is the larger of bytes over the read
bandwidth and flops over the dense bf16 rate, and the flops each step counts are its own."""
import pytest

from megakernel.dims import FULL, KDA_FULL, MLA_FULL
from megakernel.tools import bench, bench_kda, bench_mla
from megakernel.tools.roofline import Machine, share

H200ISH = Machine(read_bw=4.6e12, bf16_flops=700e12)


def test_the_floor_is_the_larger_limit_and_says_which():
    assert H200ISH.us(4.6e12, 0) == pytest.approx(1e6) and H200ISH.limit(4.6e12, 0) == "bytes"
    assert H200ISH.us(0, 700e12) == pytest.approx(1e6) and H200ISH.limit(1, 700e12) == "flops"
    assert share(H200ISH, 2e6, 4.6e12, 1.0).split() == ["50.0%", "B"]


def test_mla_counts_its_attention_flops_per_cached_row():
    md, T, L = MLA_FULL, 64, 32768
    attn = bench_mla.step_flops(md, T, L) - bench_mla.step_flops(md, T, -1)   # L + 1 rows vs none
    assert attn == 2 * T * (L + 1) * md.H * (576 + 512)                         # K3: C 576, R 512
    # issue 31's figure for batch 64 / 32k (~2.9 GB, ~4.4e11 flops): compute-bound on an H200
    assert bench_mla.step_bytes(md, T, L) == pytest.approx(2.88e9, rel=0.01)
    assert H200ISH.limit(bench_mla.step_bytes(md, T, L), bench_mla.step_flops(md, T, L)) == "flops"
    assert H200ISH.limit(bench_mla.step_bytes(md, 1, 1024), bench_mla.step_flops(md, 1, 1024)) == "bytes"


def test_gemv_steps_count_two_flops_per_weight_element_and_token():
    assert bench_kda.step_flops(KDA_FULL, 2) == 2 * bench_kda.step_flops(KDA_FULL, 1)
    dm = FULL
    per_token = dm.E * dm.d + 2 * dm.r * dm.d + 3 * dm.Is * dm.d + dm.k * 3 * dm.I * dm.r
    assert bench.step_flops(dm, 8) == 2 * 8 * per_token
