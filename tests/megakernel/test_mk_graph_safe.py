"""The megakernel declares itself graph-safe (k3diff's `graph` schedule): what makes its decode
path capturable, checked on the CPU. The GPU side (the step captured and replayed bit for bit
against its eager run) is k3diff's own graph replay, run by scripts/gpu_schedule_check.sh."""
from __future__ import annotations

import torch

from k3diff import schedule
from megakernel import backend as mk_backend
from megakernel import mla
from megakernel.backend import MegakernelBackend


def test_the_megakernel_is_drawn_under_graph_replay():
    assert MegakernelBackend.graph_safe
    assert schedule.GRAPH in schedule.declared(MegakernelBackend())


class _Step:
    def __init__(self):
        self.got = {}

    def launch(self, *args, **kw):
        self.got = dict(kw, args=args)
        return {name: torch.zeros(2, 8) for name in mla.OUTPUTS.values()}


class _Lens(torch.Tensor):
    """cache_lens that fails any read back to the host, as a graph capture would."""

    def max(self, *a, **k):
        raise AssertionError("cache_lens read to size the step")


def test_the_mla_step_is_sized_from_the_caches_capacity_not_its_lengths():
    step = _Step()
    lens = torch.tensor([3, 9]).as_subclass(_Lens)
    inputs = {"x": torch.zeros(2, 4), "kv_cache": torch.zeros(2, 17, 3), "cache_lens": lens}
    MegakernelBackend._run_mla(step, inputs, {"out": torch.empty(2, 8)})
    assert step.got["max_len"] == 16


def test_an_mla_layer_is_sized_from_the_caches_capacity():
    class _Layer:
        def launch(self, work, res):
            self.work = work

    layer = _Layer()
    inputs = {"prefix": torch.zeros(2, 4, dtype=torch.bfloat16), "blocks": torch.zeros(2, 3, 4, dtype=torch.bfloat16),
              "kv_cache": torch.zeros(2, 11, 3), "cache_lens": torch.tensor([1, 2]), "layer_idx": 1}
    MegakernelBackend._run_layer(layer, inputs, {})
    assert layer.work["max_len"] == 10 and "max_len" not in inputs


class _Moe:
    streams = "persistent"

    class dm:
        d = 4

    def launch(self, x, forced_ids=None, out=None):
        return {"out": torch.zeros(x.shape[0], 4, dtype=x.dtype)}

    def check_persistent(self):
        raise RuntimeError("sync words read back")


def test_the_persistent_moes_read_back_check_runs_on_eager_calls_only(monkeypatch):
    x = torch.zeros(2, 4, dtype=torch.bfloat16)
    out = {"out": torch.empty(2, 4, dtype=torch.bfloat16)}
    monkeypatch.setattr(mk_backend, "_capturing", lambda: True)
    MegakernelBackend().run("moe", None, _Moe(), {"x": x}, out)
    monkeypatch.setattr(mk_backend, "_capturing", lambda: False)
    try:
        MegakernelBackend().run("moe", None, _Moe(), {"x": x}, out)
    except RuntimeError as e:
        assert "sync words" in str(e)
    else:
        raise AssertionError("the eager call skipped the persistent check")


def test_a_captured_mla_step_gets_scratch_of_its_own(monkeypatch):
    from megakernel.dims import MLA_FULL

    step = object.__new__(mla.MlaStep)
    step.md, step.device, step._scratch = MLA_FULL, torch.device("meta"), {}
    monkeypatch.setattr(mla, "_capturing", lambda device: False)
    eager = step.scratch(2, 4)
    assert step.scratch(2, 4) is eager                           # kept for the next eager call
    monkeypatch.setattr(mla, "_capturing", lambda device: True)
    captured = step.scratch(2, 4)
    assert captured is not eager and captured["pa"].shape == eager["pa"].shape
    assert step._scratch == {(2, 4): eager}                       # the eager cache untouched
    monkeypatch.setattr(mla, "_capturing", lambda device: False)
    step.scratch(3, 4)                                            # another batch: the eager one replaced
    assert list(step._scratch) == [(3, 4)]
