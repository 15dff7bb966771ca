"""CPU: the L2 prefetch kernel's region (megakernel/experimental/k_l2_prefetch.py): a prefix of
every row, or the whole tensor as one region."""
import pytest


def test_a_prefetch_region_is_a_prefix_of_every_row_or_the_whole_tensor():
    pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")
    import torch
    from megakernel.experimental.k_l2_prefetch import region
    w = torch.empty(7168, 12288, dtype=torch.bfloat16)        # MLA's o_proj, 168 MiB
    rows, rb, pre = region(w, 32)
    assert (rows, rb) == (7168, 24576) and pre % 16 == 0
    assert 32 * 2 ** 20 - 16 * rows < rows * pre <= 32 * 2 ** 20
    assert region(w, None) == (1, w.numel() * 2, w.numel() * 2)
    assert region(w, 10 ** 6) == region(w, None)
    a = torch.empty(14400, 7168, dtype=torch.bfloat16)[:2112]  # a row view (MLA's [q_a | kv_a])
    assert region(a, None) == (1, 2112 * 7168 * 2, 2112 * 7168 * 2)
