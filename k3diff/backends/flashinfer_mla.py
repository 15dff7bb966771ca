"""`flashinfer`: the gated NoPE MLA decode step (docs/k3-decode.md §3) with FlashInfer's MLA attention core.

A backend that judges a kernel nobody here wrote: flashinfer-python's BatchMLAPagedAttentionWrapper
(absorbed-MLA paged decode; FlashInfer JIT-compiles it with nvcc on first use). Everything around
the attention core is plain torch, written from docs/k3-decode.md: the fused a-projection, the two RMSNorms
(f32 math, one rounding), q_b, the absorption ql = bf16(q_nope W_UK), the cache write, the
un-absorption o = bf16(lat W_UV^T), the output gate and o_proj (bf16 operands widened to f32,
f32 GEMMs with TF32 off, one bf16 rounding at each docs/k3-decode.md §7 point).

Convention mapping (k3diff contract -> FlashInfer), each one a helper the CPU tests pin:
- Query. FlashInfer's absorbed query per token and head is [ckv | kpe] = [ql (R=512) | q_pe (64)],
  bf16, packed as one tensor [T, H, R + rope] (query_layout="packed"). Heads = cfg.mla_heads.
- Cache. k3diff's cache is contiguous [T, Lcap, R + rope] bf16, row t of sequence b = entry t; the
  first R columns are kv_c (FlashInfer's "ckv"), the last rope are k_pe ("kpe"): the packed
  kv_cache layout FlashInfer takes ([num_pages, page_size, R + rope], kv_cache_layout="packed").
  The adapter views the cache as pages of `page_size` rows (default 1: every cache row is a page;
  K3DIFF_FLASHINFER_PAGE=N uses N when N divides Lcap, else 1) without copying: page id of row t of
  sequence b = (b * Lcap + t) / page_size. `page_table` builds the CSR metadata: qo_indptr =
  [0, 1, .., T] (one query token per sequence), kv_indptr = cumsum(pages_b), kv_indices = the page
  ids of b in order, kv_len_arr = L_b + 1 (the new entry is written at row L_b in torch BEFORE the
  attention, so sequence b attends over rows 0..L_b; rows past L_b are never named).
- Scale. sm_scale = (qk_nope + qk_rope)^-1/2 = 192^-1/2 (K3's scale of the un-absorbed head dim),
  not (R + rope)^-1/2: FlashInfer applies exactly the sm_scale it is given.
- Output. FlashInfer returns lat = softmax(z) C as bf16 [T, H, R] (f32 accumulate, one rounding),
  K3's `attn_latent`. causal=False: one query row per sequence attends over all of its rows.
- Backend. K3DIFF_FLASHINFER_MLA_BACKEND, default "fa2": FlashInfer's original MLA decode kernel
  (batch_mla_*.cu, JIT-built with nvcc, no CUTLASS), the one a single 10-minute GPU call can build
  and test; "auto" lets FlashInfer pick (on Hopper it prefers its FA3/CUTLASS MLA kernel), "fa3"
  forces that one. The planned backend's name is kept in `last_plan` for the logs.
"""
from __future__ import annotations

import os

import torch

from k3diff.backends.blocked_attn import token_positions
from k3diff.backends.library_adapter import LibraryAttentionBackend, missing_library

F32, BF16 = torch.float32, torch.bfloat16
FLASHINFER_VERSION = "0.7.4"
WORKSPACE_BYTES = 128 * 1024 * 1024


def missing_reason() -> str | None:
    """None when flashinfer-python and a CUDA GPU are here; else one line saying what is missing."""
    return missing_library("flashinfer", "flashinfer-python", FLASHINFER_VERSION, "flashinfer",
                           "FlashInfer's MLA decode is a CUDA kernel", _flashinfer)


def _flashinfer():
    from flashinfer.mla import BatchMLAPagedAttentionWrapper, MLAPlanMetadata
    return BatchMLAPagedAttentionWrapper, MLAPlanMetadata


# ---------------------------------------------------------------- convention helpers (pure torch)
def pick_page_size(lcap: int, requested: int) -> int:
    """The page size the cache is viewed with: `requested` when it divides Lcap, else 1."""
    return requested if requested >= 1 and lcap % requested == 0 else 1


def paged_view(kv_cache: torch.Tensor, page_size: int) -> torch.Tensor:
    """[T, Lcap, C] contiguous -> [T * Lcap / page_size, page_size, C], a view (no copy)."""
    T, lcap, C = kv_cache.shape
    if not kv_cache.is_contiguous():
        raise ValueError("kv_cache must be contiguous to be viewed as pages")
    if lcap % page_size:
        raise ValueError(f"page size {page_size} does not divide the cache capacity {lcap}")
    return kv_cache.view(T * lcap // page_size, page_size, C)


def page_table(cache_lens: torch.Tensor, lcap: int, page_size: int = 1, query_lens=None):
    """CSR metadata over k3diff's contiguous cache viewed as pages (`paged_view`), after the new
    entry is written at row L_b: (qo_indptr, kv_indptr, kv_indices, kv_len_arr), int32, on the
    device of cache_lens. Sequence b's pages are b*Lcap/page_size + 0..ceil((L_b+1)/page_size)-1.
    A verify step (query_lens W_b, docs/k3-decode.md §14.2): W_b queries per sequence (qo_indptr
    their prefix sum) over L_b + W_b rows, planned causal (query j sees rows <= L_b + j)."""
    dev = cache_lens.device
    w = None if query_lens is None else query_lens.to(device=dev, dtype=torch.int64)
    lens = cache_lens.to(torch.int64) + (1 if w is None else w)
    if bool((lens > lcap).any()):
        raise ValueError("a cache length + 1 exceeds the cache capacity")
    T = lens.numel()
    pages = (lens + page_size - 1) // page_size
    kv_indptr = torch.zeros(T + 1, dtype=torch.int64, device=dev)
    kv_indptr[1:] = torch.cumsum(pages, 0)
    per_seq = lcap // page_size
    total = int(kv_indptr[-1])
    seq_of = torch.repeat_interleave(torch.arange(T, device=dev), pages)           # [total]
    within = torch.arange(total, device=dev) - kv_indptr[:-1][seq_of]
    kv_indices = seq_of * per_seq + within
    if w is None:
        qo_indptr = torch.arange(T + 1, dtype=torch.int32, device=dev)
    else:
        qo_indptr = torch.zeros(T + 1, dtype=torch.int32, device=dev)
        qo_indptr[1:] = torch.cumsum(w, 0).to(torch.int32)
    return qo_indptr, kv_indptr.to(torch.int32), kv_indices.to(torch.int32), lens.to(torch.int32)


def gather_pages(paged: torch.Tensor, kv_indptr, kv_indices, kv_len, b: int) -> torch.Tensor:
    """The rows sequence b attends over, read through the page table (what the kernel sees)."""
    ids = kv_indices[int(kv_indptr[b]):int(kv_indptr[b + 1])].to(torch.int64)
    return paged[ids].reshape(-1, paged.shape[-1])[: int(kv_len[b])]


def linear_bf16(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x.to(F32) @ w.to(F32).t()).to(BF16)


def rmsnorm_bf16(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.to(F32)
    return (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w.to(F32)).to(BF16)



# ---------------------------------------------------------------- the stage
def prepare_mla(cfg, w: dict) -> dict:
    H, nope, v, R = cfg.mla_heads, cfg.qk_nope_dim, cfg.v_head_dim, cfg.kv_lora_rank
    kv_b = w["kv_b.weight"].view(H, nope + v, R)
    return {
        "qkv_a": torch.cat([w["q_a.weight"], w["kv_a.weight"]], dim=0),
        "q_norm": w["q_a_norm.weight"], "kv_norm": w["kv_a_norm.weight"], "q_b": w["q_b.weight"],
        "w_uk": kv_b[:, :nope, :].to(F32),                   # [H, nope, R]
        "w_uv_t": kv_b[:, nope:, :].transpose(1, 2).to(F32),  # [H, R, v]
        "g": w["g.weight"], "o": w["o.weight"],
    }


class FlashInferAttention:
    """One wrapper (and its 128 MiB workspace) per device; planned again for every step."""

    def __init__(self):
        self._wrappers = {}
        self.last_plan = None

    def __call__(self, cfg, query: torch.Tensor, kv_cache: torch.Tensor, cache_lens: torch.Tensor,
                 query_lens=None) -> torch.Tensor:
        Wrapper, Metadata = _flashinfer()
        backend = os.environ.get("K3DIFF_FLASHINFER_MLA_BACKEND", "fa2")
        key = (str(query.device), backend)
        if key not in self._wrappers:
            ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=query.device)
            self._wrappers[key] = Wrapper(ws, backend=backend)
        wrapper = self._wrappers[key]
        _, lcap, C = kv_cache.shape
        T = query.shape[0]
        ps = pick_page_size(lcap, int(os.environ.get("K3DIFF_FLASHINFER_PAGE", "1")))
        qo, kv_indptr, kv_indices, kv_len = page_table(cache_lens, lcap, ps, query_lens)
        wrapper.plan(metadata=Metadata.csr(qo, kv_indptr, kv_indices, kv_len),
                     num_heads=cfg.mla_heads, head_dim_ckv=cfg.kv_lora_rank, head_dim_kpe=cfg.qk_rope_dim,
                     page_size=ps, causal=query_lens is not None, sm_scale=float(cfg.qk_nope_dim + cfg.qk_rope_dim) ** -0.5,
                     q_data_type=BF16, kv_data_type=BF16)
        self.last_plan = {"backend": getattr(wrapper, "_planned_backend_name", None), "page_size": ps}
        out = torch.empty(T, cfg.mla_heads, cfg.kv_lora_rank, dtype=BF16, device=query.device)
        res = wrapper.run(query=query.contiguous(), kv_cache=paged_view(kv_cache, ps), out=out)
        return res


def run_mla(cfg, p: dict, x, kv_cache, cache_lens, attend, query_lens=None) -> dict:
    T = x.shape[0]
    H, nope, rope, v = cfg.mla_heads, cfg.qk_nope_dim, cfg.qk_rope_dim, cfg.v_head_dim
    qr, R, eps = cfg.q_lora_rank, cfg.kv_lora_rank, cfg.rms_eps
    a = linear_bf16(x, p["qkv_a"])
    q_c = rmsnorm_bf16(a[:, :qr], p["q_norm"], eps)
    kv_c = rmsnorm_bf16(a[:, qr:qr + R], p["kv_norm"], eps)
    k_pe = a[:, qr + R:].contiguous()                        # not normalised, no rotary (NoPE)
    q = linear_bf16(q_c, p["q_b"]).view(T, H, nope + rope)
    gz = linear_bf16(x, p["g"])
    ql = torch.einsum("thp,hpr->thr", q[..., :nope].to(F32), p["w_uk"]).to(BF16)   # [T, H, R]
    # cache write (torch), before the attention: token j of sequence b at row L_b + j
    seq, pos = token_positions(cache_lens, query_lens, T, x.device)
    kv_cache[seq, pos] = torch.cat([kv_c, k_pe], dim=-1).to(kv_cache.dtype)
    query = torch.cat([ql, q[..., nope:]], dim=-1)          # [T, H, R + rope] bf16
    if query_lens is None:
        lat = attend(cfg, query, kv_cache, cache_lens).to(BF16)
    else:
        lat = attend(cfg, query, kv_cache, cache_lens, query_lens).to(BF16)
    o = torch.einsum("thr,hrv->thv", lat.to(F32), p["w_uv_t"]).to(BF16)
    gated = (o.reshape(T, H * v).to(F32) * torch.sigmoid(gz.to(F32))).to(BF16)
    out = linear_bf16(gated, p["o"])
    return {"out": out, "q_c": q_c, "kv_c": kv_c, "k_pe": k_pe, "ql": ql, "attn_latent": lat,
            "attn_out": o, "gated": gated}


class FlashInferMlaBackend(LibraryAttentionBackend):
    """`mla` with FlashInfer's attention; `layer` = torch-blocked's layer wiring (AttnRes, KDA, MoE)
    with this MLA. A KDA layer of the `layer` stage therefore runs torch-blocked's KDA."""
    name = "flashinfer"
    # Measured on the H200 (`scripts/gpu_check.sh OUT adapters` -> scripts/adapter_probe.py, flashinfer 0.7.4, FA2
    # plan, page size 1; 2026-11-30): two runs on identical inputs are bitwise equal at B = 1, 8,
    # 64, 128 (deterministic); a token alone vs inside a batch differs by up to 2e-3 in attn_latent
    # at B = 8..128 (the plan's split-KV chunking depends on the batch's lengths: not invariant).
    deterministic = True
    batch_invariant = False
    stages = ("mla", "layer")
    attention, marker = "mla", "q_a.weight"

    def supports(self, cfg, stage, features=frozenset()) -> str | None:
        """FlashInfer's MLA kernels take latent widths that are multiples of 128 and rope widths
        that are multiples of 64 (K3: 512 and 64); other dims are not a case this library runs.
        Verify steps run on its multi-query (qo_indptr) causal plan; the FP8 latent cache is
        refused: its MLA wrapper reads bf16 or per-tensor-scaled FP8 caches, not the per-tile
        fp8_ds_mla layout (docs/k3-decode.md §15)."""
        if "fp8_cache" in features:
            return "flashinfer MLA reads no fp8_ds_mla cache (per-tile scales, bf16 rope)"
        if stage in ("mla", "layer") and (cfg.kv_lora_rank % 128 or cfg.qk_rope_dim % 64):
            return (f"flashinfer MLA needs kv_lora_rank % 128 == 0 and qk_rope_dim % 64 == 0 "
                    f"(got {cfg.kv_lora_rank}, {cfg.qk_rope_dim})")
        return None

    def __init__(self):
        self.attend = FlashInferAttention()

    def missing(self) -> str | None:
        return missing_reason()

    def prepare_attention(self, cfg, weights):
        return prepare_mla(cfg, weights)

    def run_mla_attention(self, cfg, p, x, kv_cache, cache_lens, query_lens=None) -> dict:
        return run_mla(cfg, p, x, kv_cache, cache_lens, self.attend, query_lens)

    def run_attention(self, cfg, p, inputs) -> dict:
        return run_mla(cfg, p, inputs["x"], inputs["kv_cache"], inputs["cache_lens"], self.attend,
                       inputs.get("query_lens"))
