"""CPU: bench_mla's FlashInfer column plans the same pages as k3diff's flashinfer backend
(k3diff/backends/flashinfer_mla.py, whose plan the H200 checked against the reference), and the
column is off in one line where flashinfer is missing."""
import torch

from k3diff.backends.flashinfer_mla import page_table
from megakernel.tools import bench_mla


def test_the_column_plans_the_pages_k3diffs_flashinfer_backend_plans():
    for lens, lcap in (([0, 5, 2, 7], 8), ([1023], 1030), ([3, 3, 3], 4)):
        lens = torch.tensor(lens)
        ours = bench_mla.csr_one_row_pages(lens, lcap)
        theirs = page_table(lens, lcap, 1)
        for a, b in zip(ours, theirs):
            assert a.dtype == b.dtype == torch.int32 and torch.equal(a, b)


def test_without_flashinfer_the_column_is_off_in_one_line(capsys, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_flashinfer(name, *args, **kw):
        if name.startswith("flashinfer"):
            raise ModuleNotFoundError("No module named 'flashinfer'")
        return real(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_flashinfer)
    fi = bench_mla.FlashInferAttn()
    assert fi.wrapper is None and fi.us(None, None, None) is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("fi column off: flashinfer does not import")
