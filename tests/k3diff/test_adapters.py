"""CPU tests of the public-library adapters (`fla`, `flashinfer`; k3diff/backends/fla_kda.py and
flashinfer_mla.py).

What runs here without the libraries or a GPU:
- the adapters import, register, and say in one line what is missing;
- each convention-mapping helper (conv window, state transpose, slot gather/scatter, live rows,
  page table and paged view) against plain torch;
- the adapters' whole plumbing through `k3diff.runner.check_case` against the float64 reference,
  with the library kernels replaced by torch stand-ins written from the libraries' kernel source
  (FLA 0.6.0: causal_conv1d_update_kernel, kda_gate_fwd_kernel, fused_recurrent_kda_fwd_kernel,
  layer_norm_gated_fwd_kernel; FlashInfer 0.7.4: BatchMLAPagedAttentionWrapper's plan/run
  contract). The stand-ins assert the argument conventions the real kernels rely on (shapes,
  contiguity, dtypes, layouts), so a wrong mapping fails here, not only on the GPU.
The library-dependent tests (the real kernels) are skipped with the adapter's own one-line reason.
"""
from __future__ import annotations
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)

import pytest
import torch

from k3diff import backends
from k3diff.backends import fla_kda, flashinfer_mla
from k3diff.backends.fla_kda import FlaKdaBackend
from k3diff.backends.flashinfer_mla import FlashInferMlaBackend
from k3diff.case import Case
from k3diff.runner import check_case
from k3diff.search import find_failure
from k3diff.strategies import Space, cases

F32, BF = torch.float32, torch.bfloat16
SMALL = Space(max_batch=9, long_len=90)


# ================================================================ registry and availability
@pytest.mark.parametrize("name,cls,stage", [("fla", FlaKdaBackend, "kda"),
                                            ("flashinfer", FlashInferMlaBackend, "mla")])
def test_registered_and_loadable(name, cls, stage):
    assert name in backends.names()
    b = backends.load(name)
    assert isinstance(b, cls) and b.name == name
    assert stage in b.stages and "layer" in b.stages
    # set from the H200 measurement (`scripts/gpu_check.sh OUT adapters`): deterministic, not batch invariant
    assert b.deterministic and not b.batch_invariant


@pytest.mark.parametrize("mod,lib,extra", [(fla_kda, "fla", "fla"), (flashinfer_mla, "flashinfer", "flashinfer")])
def test_available_one_line_reason(mod, lib, extra, monkeypatch):
    reason = mod.missing_reason()
    if reason is None:
        pytest.skip(f"{lib} and a GPU are here")
    assert "\n" not in reason and reason
    import importlib.util
    if importlib.util.find_spec(lib) is None:
        assert f"pip install -e '.[{extra}]'" in reason
    if not torch.cuda.is_available():
        assert "no CUDA GPU" in reason
    # the library present but no GPU: the reason names the GPU only
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object() if n == lib else real(n, *a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert mod.missing_reason() == ("no CUDA GPU (fla-core's kernels are Triton)" if lib == "fla"
                                    else "no CUDA GPU (FlashInfer's MLA decode is a CUDA kernel)")


# ================================================================ FLA convention helpers
def test_live_rows_skip_null_and_negative():
    rows, slots = fla_kda.live_rows(torch.tensor([3, 0, -1, 1, 5]))
    assert rows.tolist() == [0, 3, 4] and slots.tolist() == [3, 1, 5] and slots.dtype == torch.int64


def test_conv_window_roundtrip_matches_shift_and_append():
    g = torch.Generator().manual_seed(0)
    S, C, W = 6, 10, 4
    conv = torch.randn(S, C, W - 1, generator=g).to(BF)
    before = conv.clone()
    slots = torch.tensor([4, 1, 2])
    win = fla_kda.conv_window(conv, slots)
    assert win.shape == (3, C, W) and win.is_contiguous()
    assert torch.equal(win[..., 0], torch.zeros(3, C, dtype=BF))            # placeholder, never read
    assert torch.equal(win[..., 1:], conv[slots])                           # history, oldest first
    assert torch.equal(conv, before)                                        # only read
    x = torch.randn(3, C, generator=g).to(BF)
    shifted = torch.cat([win[..., 1:], x.unsqueeze(-1)], -1)                # what FLA's kernel writes
    new = fla_kda.conv_state_from_window(shifted)
    assert torch.equal(new, torch.cat([conv[slots][..., 1:], x.unsqueeze(-1)], -1))


def test_state_transpose_roundtrip():
    s = torch.randn(3, 2, 4, 5)                                             # [n, H, V, K]
    f = fla_kda.k3_to_fla_state(s)
    assert f.shape == (3, 2, 5, 4) and f.is_contiguous()
    assert torch.equal(f[1, 0, 3, 2], s[1, 0, 2, 3])                       # FLA [K][V] = K3 [V][K]
    assert torch.equal(fla_kda.fla_to_k3_state(f), s)


def test_slot_gather_scatter_touch_only_live_slots():
    pool = torch.randn(6, 2, 3, 3)
    keep = pool.clone()
    slots = torch.tensor([5, 2])
    got = fla_kda.gather_slots(pool, slots)
    assert torch.equal(got, keep[slots]) and got.is_contiguous()
    fla_kda.scatter_slots(pool, slots, got + 1)
    assert torch.equal(pool[slots], keep[slots] + 1)
    others = [i for i in range(6) if i not in (5, 2)]
    assert torch.equal(pool[others], keep[others])                          # slot 0 included


# ================================================================ FlashInfer convention helpers
@pytest.mark.parametrize("page_size", [1, 2, 4])
def test_page_table_names_exactly_rows_0_to_L(page_size):
    g = torch.Generator().manual_seed(1)
    T, lcap, C = 4, 8, 5
    cache = torch.randn(T, lcap, C, generator=g)
    lens = torch.tensor([0, 7, 3, 4])
    qo, indptr, indices, kv_len = flashinfer_mla.page_table(lens, lcap, page_size)
    assert all(t.dtype == torch.int32 for t in (qo, indptr, indices, kv_len))
    assert qo.tolist() == list(range(T + 1)) and kv_len.tolist() == [1, 8, 4, 5]
    paged = flashinfer_mla.paged_view(cache, page_size)
    assert paged.data_ptr() == cache.data_ptr()                             # a view, no copy
    for b in range(T):
        rows = flashinfer_mla.gather_pages(paged, indptr, indices, kv_len, b)
        assert torch.equal(rows, cache[b, :int(lens[b]) + 1])
        n_pages = int(indptr[b + 1] - indptr[b])
        assert n_pages == -(-(int(lens[b]) + 1) // page_size)


def test_page_size_falls_back_to_one():
    assert flashinfer_mla.pick_page_size(12, 4) == 4
    assert flashinfer_mla.pick_page_size(10, 4) == 1
    with pytest.raises(ValueError):
        flashinfer_mla.page_table(torch.tensor([8]), 8, 1)                 # L+1 > capacity


# ================================================================ torch stand-ins for the library kernels
class FakeFla:
    """FLA 0.6.0 kernel semantics in torch (read from the kernels' source), asserting conventions."""

    def __init__(self):
        self.calls = []

    @staticmethod
    def conv_update(x, cache, residual=None, weight=None, bias=None, activation=None):
        n, D = x.shape
        W = weight.shape[1]
        assert cache.shape == (n, D, W) and cache.is_contiguous() and weight.shape == (D, W)
        win = torch.cat([cache[..., 1:].to(F32), x.to(F32).unsqueeze(-1)], -1)   # columns 1.. then x
        y = (win * weight.to(F32)).sum(-1)
        assert activation == "silu"
        y = y * torch.sigmoid(y)
        cache.copy_(win.to(cache.dtype))
        return y.to(x.dtype), cache

    @staticmethod
    def gate(g, A_log=None, dt_bias=None, lower_bound=None, output_dtype=F32):
        H, K = g.shape[-2:]
        assert lower_bound is not None and A_log.shape == (H,) and dt_bias.shape == (H * K,)
        y = g.to(F32) + dt_bias.view(H, K)
        return (lower_bound * torch.sigmoid(torch.exp(A_log.to(F32)).view(H, 1) * y)).to(output_dtype)

    @staticmethod
    def _step(h, q, k, v, g, beta, scale, v_first):
        """One token, one sequence, all heads: h [H, V, K] if v_first else [H, K, V]."""
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * scale
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        beta = torch.sigmoid(beta)
        if v_first:
            h = h * torch.exp(g).unsqueeze(1)
            u = beta.unsqueeze(-1) * (v - (h * k.unsqueeze(1)).sum(-1))
            h = h + u.unsqueeze(-1) * k.unsqueeze(1)
            o = (h * q.unsqueeze(1)).sum(-1)
        else:
            h = h * torch.exp(g).unsqueeze(-1)
            u = beta.unsqueeze(-1) * (v - (h * k.unsqueeze(-1)).sum(-2))
            h = h + k.unsqueeze(-1) * u.unsqueeze(1)
            o = (h * q.unsqueeze(-1)).sum(-2)
        return h, o

    def _check(self, q, k, v, g, beta, kw):
        B, T, H, K = q.shape
        assert T == 1 and k.shape == q.shape and v.shape[:3] == (B, 1, H) and g.shape == (B, 1, H, K)
        assert beta.shape == (B, 1, H)
        assert all(t.is_contiguous() for t in (q, k, v, g, beta))
        assert v.dtype == F32                                                # o comes back f32
        assert kw["use_qk_l2norm_in_kernel"] and kw["use_beta_sigmoid_in_kernel"]
        assert abs(kw["scale"] - K ** -0.5) < 1e-12
        assert not kw.get("use_gate_in_kernel", False)                       # g is log-space gk

    def recurrent_fwd(self, q, k, v, g, beta, initial_state=None, inplace_final_state=True,
                      state_v_first=False, ssm_state_indices=None, **kw):
        self._check(q, k, v, g, beta, kw)
        self.calls.append("indexed")
        assert inplace_final_state and state_v_first and ssm_state_indices.dtype == torch.int32
        assert initial_state.is_contiguous() and initial_state.dtype == F32
        out = torch.zeros_like(v)
        for i, slot in enumerate(ssm_state_indices.tolist()):
            assert slot > 0                                                  # nulls never reach FLA
            h, o = self._step(initial_state[slot], q[i, 0].float(), k[i, 0].float(), v[i, 0],
                              g[i, 0], beta[i, 0].float(), kw["scale"], True)
            initial_state[slot] = h
            out[i, 0] = o
        return out, initial_state

    def recurrent(self, q, k, v, g, beta, initial_state=None, output_final_state=False,
                  state_v_first=False, **kw):
        self._check(q, k, v, g, beta, kw)
        self.calls.append("gather-" + ("vk" if state_v_first else "kv"))
        assert output_final_state and initial_state.shape[0] == q.shape[0]
        out, ht = torch.zeros_like(v), torch.empty_like(initial_state)
        for i in range(q.shape[0]):
            ht[i], out[i, 0] = self._step(initial_state[i].clone(), q[i, 0].float(), k[i, 0].float(), v[i, 0],
                                          g[i, 0], beta[i, 0].float(), kw["scale"], state_v_first)
        return out, ht

    @staticmethod
    def gated_norm(x, g, weight, bias, activation="swish", residual=None, prenorm=False,
                   residual_in_fp32=False, eps=1e-6):
        assert activation == "sigmoid" and bias is None and eps == 1e-5 and x.dim() == 2
        xf = x.to(F32)
        y = xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + eps) * weight.to(F32) * torch.sigmoid(g.to(F32))
        return y.to(x.dtype)

    def table(self):
        return {"conv_update": self.conv_update, "gate": self.gate, "recurrent": self.recurrent,
                "recurrent_fwd": self.recurrent_fwd, "gated_norm": self.gated_norm}


class FakeMlaWrapper:
    """FlashInfer's BatchMLAPagedAttentionWrapper contract (canonical CSR plan, packed query/cache)."""
    plans = []

    def __init__(self, workspace, backend="auto"):
        assert workspace.dtype == torch.uint8
        self._planned_backend_name = "fake"

    def plan(self, *, metadata, num_heads, head_dim_ckv, head_dim_kpe, page_size, causal, sm_scale,
             q_data_type, kv_data_type):
        self.m, self.H, self.R, self.rope, self.ps, self.scale = (metadata, num_heads, head_dim_ckv,
                                                                  head_dim_kpe, page_size, sm_scale)
        self.causal = causal
        assert q_data_type == BF and kv_data_type == BF
        FakeMlaWrapper.plans.append(page_size)

    def run(self, *, query, kv_cache, out):
        m = self.m
        T = query.shape[0]
        assert query.shape == (T, self.H, self.R + self.rope) and query.dtype == BF
        assert kv_cache.dim() == 3 and kv_cache.shape[1:] == (self.ps, self.R + self.rope)
        qo = m.qo_indptr.tolist()
        assert qo[-1] == T and (self.causal or qo == list(range(T + 1)))
        for b in range(len(qo) - 1):
            pages = m.kv_indices[int(m.kv_indptr[b]):int(m.kv_indptr[b + 1])].long()
            n = int(m.kv_len_arr[b])
            rows = kv_cache[pages].reshape(-1, self.R + self.rope)[:n].to(F32)
            nq = qo[b + 1] - qo[b]
            for i in range(nq):     # causal: aligned bottom right, query i sees n - nq + i + 1 rows
                seen = rows[: n - nq + i + 1] if self.causal else rows
                p = torch.softmax(self.scale * (query[qo[b] + i].to(F32) @ seen.t()), -1)
                out[qo[b] + i] = (p @ seen[:, :self.R]).to(out.dtype)
        return out


class FakeMetadata:
    @staticmethod
    def csr(qo_indptr, kv_indptr, kv_indices, kv_len_arr):
        from types import SimpleNamespace
        return SimpleNamespace(qo_indptr=qo_indptr, kv_indptr=kv_indptr, kv_indices=kv_indices,
                               kv_len_arr=kv_len_arr)


def _judge_all(stage, backend, examples, seed, kind=None, bf16_cache=False):
    strategy = cases(stage, SMALL)
    if kind:
        strategy = strategy.filter(lambda c: c.attention_kind == kind)
    if bf16_cache:          # a candidate that refuses the FP8 cache (it would be skipped)
        strategy = strategy.filter(lambda c: c.cache_format == "bf16")
    seen = []

    def judge(case):
        v = check_case(case, backend, device="cpu")
        seen.append(v)
        return v
    verdict, _ = find_failure(strategy, judge, examples=examples, seed=seed, shrink=False)
    assert verdict is None, "\n".join([verdict.headline()] + verdict.failures())
    assert seen and not any(v.skipped for v in seen)


@pytest.mark.parametrize("slots,layout", [("indexed", "vk"), ("gather", "vk"), ("gather", "kv")])
def test_fla_adapter_plumbing_vs_reference(monkeypatch, slots, layout):
    """The adapter with FLA's kernels emulated passes k3diff's own check (reference, controls,
    untouched inputs, null rows, multi-step state) on drawn kda cases."""
    fake = FakeFla()
    monkeypatch.setattr(fla_kda, "_fla", fake.table)
    monkeypatch.setenv("K3DIFF_FLA_SLOTS", slots)
    monkeypatch.setenv("K3DIFF_FLA_STATE", layout)
    _judge_all("kda", FlaKdaBackend(), examples=6, seed=7)
    assert set(fake.calls) == {"indexed" if slots == "indexed" else f"gather-{layout}"}


def test_fla_indexed_needs_vk(monkeypatch):
    monkeypatch.setattr(fla_kda, "_fla", FakeFla().table)
    with pytest.raises(ValueError, match="needs K3DIFF_FLA_STATE=vk"):
        fla_kda.run_kda(None, {}, torch.zeros(1, 1), None, None, torch.tensor([1]),
                        slots_mode="indexed", state_layout="kv")


def test_fla_layer_uses_fla_kda(monkeypatch):
    fake = FakeFla()
    monkeypatch.setattr(fla_kda, "_fla", fake.table)
    _judge_all("layer", FlaKdaBackend(), examples=2, seed=3, kind="kda")
    assert fake.calls


@pytest.mark.parametrize("page", ["1", "4"])
def test_flashinfer_adapter_plumbing_vs_reference(monkeypatch, page):
    FakeMlaWrapper.plans.clear()
    # the stand-in wrapper has no width limit: the CPU dims (R = 32) exercise the plumbing
    monkeypatch.setattr(FlashInferMlaBackend, "supports", lambda self, cfg, stage, features=frozenset(): None)
    monkeypatch.setattr(flashinfer_mla, "_flashinfer", lambda: (FakeMlaWrapper, FakeMetadata))
    monkeypatch.setenv("K3DIFF_FLASHINFER_PAGE", page)
    _judge_all("mla", FlashInferMlaBackend(), examples=6, seed=11, bf16_cache=True)
    assert FakeMlaWrapper.plans and set(FakeMlaWrapper.plans) <= {1, int(page)}


def test_flashinfer_layer_uses_flashinfer(monkeypatch):
    FakeMlaWrapper.plans.clear()
    monkeypatch.setattr(FlashInferMlaBackend, "supports", lambda self, cfg, stage, features=frozenset(): None)
    monkeypatch.setattr(flashinfer_mla, "_flashinfer", lambda: (FakeMlaWrapper, FakeMetadata))
    _judge_all("layer", FlashInferMlaBackend(), examples=2, seed=5, kind="mla", bf16_cache=True)
    assert FakeMlaWrapper.plans


def test_flashinfer_declares_its_width_limits():
    from reference.config import preset

    b = FlashInferMlaBackend()
    assert b.supports(preset("small"), "mla") is None                   # R 512, rope 64: runs
    reason = b.supports(preset("tiny"), "mla")
    assert reason and "kv_lora_rank" in reason
    assert b.supports(preset("small"), "mla", features=frozenset({"verify"})) is None
    assert "fp8_ds_mla" in b.supports(preset("small"), "mla", features=frozenset({"fp8_cache"}))
    v = check_case(Case(stage="mla", batch=1, cache_lens=(3,)), b, device="cpu")
    assert v.skipped and "does not run this case" in v.skipped


@pytest.mark.parametrize("backend", [FlashInferMlaBackend, FlaKdaBackend])
def test_adapters_judged_on_verify_cases(monkeypatch, backend):
    """Verify steps through each adapter's wiring, the libraries emulated: FlashInfer's causal
    multi-query plan, FLA's decode kernels token by token."""
    from k3diff.case import Case

    monkeypatch.setattr(FlashInferMlaBackend, "supports", lambda self, cfg, stage, features=frozenset(): None)
    monkeypatch.setattr(flashinfer_mla, "_flashinfer", lambda: (FakeMlaWrapper, FakeMetadata))
    monkeypatch.setattr(fla_kda, "_fla", FakeFla().table)
    if backend is FlashInferMlaBackend:
        case = Case(stage="mla", batch=3, cache_lens=(62, 0, 5), widths=(3, 1, 8), steps=2,
                    accepted=(1, 1, 8, 3, 0, 2))
    else:
        case = Case(stage="kda", batch=3, n_slots=5, state_idx=(2, 0, 4), widths=(3, 2, 8), steps=2,
                    accepted=(2, 1, 0, 3, 0, 8))
    v = check_case(case.validate(), backend(), device="cpu")
    assert v.ok and not v.skipped, v.failures()


# ================================================================ the real libraries (GPU)
@pytest.mark.parametrize("name,stage", [("fla", "kda"), ("flashinfer", "mla")])
def test_real_library_on_gpu(name, stage):
    b = backends.load(name)
    reason = b.available()
    if reason is not None:
        pytest.skip(reason)
    strategy = cases(stage, Space(preset="small", max_batch=9, long_len=300, vary_dims=False))
    verdict, _ = find_failure(strategy, lambda c: check_case(c, b, device="cuda"), examples=4, seed=2,
                              shrink=False)
    assert verdict is None, "\n".join([verdict.headline()] + verdict.failures())


def test_real_fla_kernels_interpreted_on_cpu():
    """fla-core's own Triton kernels, run by Triton's CPU interpreter (scripts/fla_cpu_check.py),
    judged through the adapter against the reference. Needs fla-core and triton importable."""
    import importlib.util
    import os
    import subprocess
    import sys
    from pathlib import Path
    missing = [m for m in ("fla", "triton", "einops") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (pip install -e '.[fla]' triton)")
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([str(root)] + [p for p in sys.path if p]))
    r = subprocess.run([sys.executable, "-W", "ignore", str(root / "scripts" / "fla_cpu_check.py"),
                        "--examples", "3"], env=env, capture_output=True, text=True, timeout=limit(600))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
