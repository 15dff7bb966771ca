"""MXFP4 against a table-driven decode written out by hand (OCP MX spec values)."""
import math

import pytest
import torch

from reference import mxfp4

# The OCP E2M1 table, spelled out independently of reference.mxfp4.
TABLE = {0: 0.0, 1: 0.5, 2: 1.0, 3: 1.5, 4: 2.0, 5: 3.0, 6: 4.0, 7: 6.0,
         8: -0.0, 9: -0.5, 10: -1.0, 11: -1.5, 12: -2.0, 13: -3.0, 14: -4.0, 15: -6.0}
SCALE_CODES = (0, 1, 127, 254, 255)


def decode_by_hand(byte: int, scale_code: int) -> tuple[float, float]:
    s = math.nan if scale_code == 255 else math.ldexp(1.0, scale_code - 127)
    return TABLE[byte & 0xF] * s, TABLE[byte >> 4] * s


@pytest.mark.parametrize("scale_code", SCALE_CODES)
def test_dequantise_all_codes_and_edge_scales(scale_code):
    # one row of 32 elements = 16 bytes; every byte pairs code lo=i with hi=15-i
    packed = torch.tensor([[i | ((15 - i) << 4) for i in range(16)]], dtype=torch.uint8)
    scale = torch.tensor([[scale_code]], dtype=torch.uint8)
    for dtype in (torch.float32, torch.float64):
        got = mxfp4.dequantize(packed, scale, dtype)[0].tolist()
        want = [v for b in packed[0].tolist() for v in decode_by_hand(b, scale_code)]
        # the exact value, rounded to the output dtype (6 * 2^127 overflows f32 to inf)
        want = torch.tensor(want, dtype=torch.float64).to(dtype).tolist()
        for g, w in zip(got, want):
            if math.isnan(w):
                assert math.isnan(g)
            else:
                assert g == w and math.copysign(1, g) == math.copysign(1, w)


def test_pack_unpack_roundtrip_and_nibble_order():
    codes = torch.randint(0, 16, (3, 5, 64), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    packed = mxfp4.pack(codes)
    assert packed.shape == (3, 5, 32)
    assert torch.equal(mxfp4.unpack(packed), codes)
    assert int(mxfp4.pack(torch.tensor([3, 12], dtype=torch.uint8))[0]) == 3 | (12 << 4)  # low = even


def test_quantise_round_trips_representable_values_and_rounds_to_nearest_even():
    scale = torch.full((1, 2), 120, dtype=torch.uint8)
    s = 2.0 ** (120 - 127)
    vals = torch.tensor(list(TABLE.values()) * 4, dtype=torch.float64) * s
    packed, sc = mxfp4.quantize(vals.view(1, 64), scale)
    assert torch.equal(mxfp4.dequantize(packed, sc, torch.float64).view(-1), vals)
    # midpoints: 0.25->0, 0.75->1.0, 1.25->1.0, 1.75->2.0, 2.5->2.0, 3.5->4.0, 5->4.0; >6 saturates
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -5.0, 0.3] + [0.0] * 22, dtype=torch.float64)
    q = mxfp4.dequantize(*mxfp4.quantize(mids.view(1, 32) * s, scale[:, :1]), torch.float64).view(-1) / s
    assert q[:10].tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -4.0, 0.5]


def test_realistic_scales_are_exact_in_bf16():
    w = torch.randn(64, 128, generator=torch.Generator().manual_seed(1)) / math.sqrt(128)
    packed, scale = mxfp4.quantize(w)
    assert 115 <= int(scale.min()) and int(scale.max()) <= 126
    deq = mxfp4.dequantize(packed, scale, torch.float32)
    assert torch.equal(deq.to(torch.bfloat16).float(), deq)
    rel = (deq - w).norm() / w.norm()
    assert rel < 0.2                       # 4-bit quantisation error, sanity only
