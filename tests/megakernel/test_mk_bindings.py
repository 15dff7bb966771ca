"""CPU: every launch of the attention steps and the layer stage finds each argument its kernel
declares (kernel_args: ARGS, bound by name) among the buffers the host code passes, with nothing
compiled or run. A name the host code forgets, or misspells, fails here instead of on a GPU.
The kernels are replaced by a recorder; the MoE (whose launches need CUDA streams) by a stub, and
the steps' two streams (launch_plan.TwoStreams) by a walk of the plan that records on
which stream each launch goes ("+" marks the side stream)."""
import pytest

pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")
torch = pytest.importorskip("torch")


@pytest.fixture()
def recorder(monkeypatch):
    from megakernel import cache, launch_plan, layer, registry
    from megakernel.kernel_args import call_values, dtypes

    calls = []

    class Recorded:
        def __init__(self, name, dims, variant):
            self.name = name
            self.args = dtypes(registry.KERNELS[name](dims, **variant))

        def __call__(self, named, stream, bind=None):
            values = call_values(self.args, named, bind)      # KeyError: a missing buffer
            for v, (n, t) in zip(values, self.args):
                assert isinstance(v, int), (self.name, n)
            calls.append(self.name + ("+" if stream == "side" else ""))

    def walk(self, steps, go, one_stream=False):
        for what, s in steps:
            if s is not None:
                go(s, what)

    class MoeStub:
        def __init__(self, dims, weights, device, settings=None):
            pass

        def launch(self, x, forced_ids=None, out=None):
            assert out is not None and out.shape == x.shape
            calls.append("moe")

    monkeypatch.setattr(cache, "compiled", lambda name, dims, fresh=False, **v: Recorded(name, dims, v))
    monkeypatch.setattr(layer, "stream", lambda: 0)
    monkeypatch.setattr(launch_plan.TwoStreams, "run", walk)
    import megakernel.moe
    monkeypatch.setattr(megakernel.moe, "LatentMoE", MoeStub)
    return calls


FORKED = {0: ["attn_res", "kda_g+", "kda_in", "kda_fb", "kda_conv", "kda_core", "kda_norm",
              "kda_out", "attn_res", "gemv_shared", "shared_act", "out_shared"],
          3: ["attn_res", "mla_g+", "mla_a", "mla_norm", "mla_qb", "mla_absorb_mma",
              "mla_attn", "mla_merge", "mla_uv", "mla_out", "attn_res", "moe"]}
FUSED = {0: ["attn_res", "kda_x", "kda_fb", "kda_conv", "kda_core", "kda_norm", "kda_out",
             "attn_res", "gemv_shared", "shared_act", "out_shared"],
         3: ["attn_res", "mla_x", "mla_norm", "mla_qb", "mla_absorb_mma",
             "mla_attn", "mla_merge", "mla_uv", "mla_out", "attn_res", "moe"]}


@pytest.mark.parametrize("mode", ["fork", "fused"])
@pytest.mark.parametrize("layer_idx", [0, 3])      # KDA + dense MLP + block write; MLA + MoE
def test_layer_launches_bind_every_kernel_argument(recorder, mode, layer_idx):
    from dataclasses import replace

    from megakernel import config
    base = config.current()
    settings = replace(base, attn=replace(base.attn, streams=mode))
    expect = (FORKED if mode == "fork" else FUSED)[layer_idx]
    from k3diff.case import Case
    from k3diff.materialize import materialize
    from k3diff.stages import OUTPUTS
    from megakernel.backend import MegakernelBackend
    from megakernel.layer import LayerStep

    kw = (dict(cache_lens=(0, 300, 5)) if layer_idx == 3 else dict(n_slots=5, state_idx=(1, 3, 0)))
    case = Case(stage="layer", preset="small", layer_idx=layer_idx, batch=3, **kw)
    cfg, weights, inputs = materialize(case, "cpu")
    step = LayerStep(cfg, weights, "cpu", settings=settings)
    out = {s.name: torch.empty(3, cfg.hidden, dtype=s.dtype) for s in OUTPUTS["layer"]}
    MegakernelBackend._run_layer(step, inputs, out)
    # the attention: the settings' and the arch's (k_mla_attn_mma.attention_kernel)
    from megakernel.dims import mla_from_cfg
    from megakernel.k_mla_attn_mma import attention_kernel
    attn = attention_kernel(mla_from_cfg(cfg), settings.attn)
    expect = [attn if n == "mla_attn" else n for n in expect]
    if not settings.attn.mla_mma:                              # MK_MLA_MMA=0
        expect = [{"mla_absorb_mma": "mla_absorb"}.get(n, n) for n in expect if n != "mla_uv"]
    assert recorder == expect
