"""reference/counter_draw.py: device-independent draws. On the CPU: the torch arithmetic against a
numpy model of the same integer hash (numpy's uint64 wraps by definition, so a torch op that did
not would show), a stream read in parts against one read, the table pinned by its checksum, the
distribution. On a GPU: its bits against the CPU's."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from reference import counter_draw as cd

M64 = (1 << 64) - 1


def _model_words(key: int, first: int, n: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = np.arange(first, first + n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(key & M64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _model_normal(key: int, n: int) -> np.ndarray:
    z = _model_words(key, 0, (n + 1) // 2)
    nums = np.stack([z & np.uint64(0xFFFFFFFF), z >> np.uint64(32)], axis=1).reshape(-1)[:n]   # low, high
    q, dq = (t.numpy() for t in cd.table("cpu"))
    k = (nums >> np.uint64(16)).astype(np.int64)
    u = (nums & np.uint64(0xFFFF)).astype(np.float32) * np.float32(2.0 ** -16)
    return (dq[k] * u).astype(np.float32) + q[k]            # f32 product, then f32 sum


@pytest.mark.parametrize("key", [0, 1, (1 << 63) - 1, 0x1234_5678_9ABC_DEF0, -5])
def test_the_hash_is_splitmix64_in_wrapping_arithmetic(key):
    got = cd.words(cd._wrap(key), 3, 1000, "cpu").numpy().view(np.uint64)
    assert np.array_equal(got, _model_words(key, 3, 1000))


def test_normals_are_the_models_bit_for_bit():
    got = cd.normal(987654321, (4097,), "cpu").numpy()
    assert np.array_equal(got.view(np.uint32), _model_normal(987654321, 4097).view(np.uint32))


def test_a_stream_read_in_parts_or_chunks_is_one_read(monkeypatch):
    whole = cd.normal(11, (3, 1001), "cpu")
    s = cd.Stream(11, "cpu")
    parts = torch.cat([s.normal((7,)), s.normal((1000,)), s.normal((3 * 1001 - 1007,))])
    assert torch.equal(parts, whole.view(-1))
    monkeypatch.setattr(cd, "_CHUNK", 5)                   # odd offsets across many chunks
    assert torch.equal(cd.normal(11, (3, 1001), "cpu"), whole)
    assert torch.equal(cd.normal(11, (100,), "cpu", offset=33), whole.view(-1)[33:133])
    f = cd.finite_sentinels(4, (999,), torch.float32, "cpu")
    monkeypatch.setattr(cd, "_CHUNK", 1 << 22)
    assert torch.equal(f, cd.finite_sentinels(4, (999,), torch.float32, "cpu"))


def test_the_table_is_pinned():
    q, dq = cd.table("cpu")
    digest = hashlib.sha256(q.numpy().tobytes() + dq.numpy().tobytes()).hexdigest()
    assert digest == TABLE_SHA256, "the inverse-CDF table moved: every counter draw would too"


def test_the_draws_look_like_their_distributions():
    x = cd.normal(3, (1 << 20,), "cpu").double()
    assert abs(float(x.mean())) < 5e-3 and abs(float(x.std()) - 1) < 5e-3
    assert 4.5 < float(x.abs().max()) <= 5.33
    assert abs(float((x.abs() > 3).double().mean()) - 0.0026998) < 4e-4      # the normal's tail
    keys = [cd.normal(k, (4096,), "cpu") for k in (1, 2)]
    assert abs(float(torch.corrcoef(torch.stack(keys))[0, 1])) < 0.05     # streams unrelated
    f = cd.finite_sentinels(9, (10000,), torch.float32, "cpu").double()
    e = torch.floor(torch.log2(f.abs()))
    assert torch.isfinite(f).all() and int(e.min()) == 100 and int(e.max()) == 126
    assert 0.45 < float((f > 0).double().mean()) < 0.55


def test_a_gpu_draws_the_cpus_bits():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    for key in (5, -77):
        assert torch.equal(cd.normal(key, (3, 1 << 20), "cuda").cpu(), cd.normal(key, (3, 1 << 20), "cpu"))
        assert torch.equal(cd.finite_sentinels(key, (1 << 20,), torch.bfloat16, "cuda").cpu(),
                           cd.finite_sentinels(key, (1 << 20,), torch.bfloat16, "cpu"))


TABLE_SHA256 = "84c39112ea64cf33c6df0cfcb8a00a7f75bfa7b0ed7c2983dd53b19528b7cb7c"
