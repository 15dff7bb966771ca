"""K3 model dimensions: one frozen dataclass, three presets (docs/k3-decode.md §9), and validation.

Every impossible combination raises ``ConfigError`` with a one-line message that names the field,
so a fuzzer that draws dims around the presets gets a clear refusal rather than a shape error deep
inside a GEMM.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field


class ConfigError(ValueError):
    """An impossible K3 configuration or decode shape; the message names the offending field."""


MXFP4_GROUP = 32  # OCP MX block size along K (docs/k3-decode.md §6)


@dataclass(frozen=True)
class K3Config:
    # residual stream / model
    hidden: int = 7168
    n_layers: int = 93
    vocab: int = 163840
    rms_eps: float = 1e-5
    kda_layers: tuple[int, ...] = ()          # 1-based, as in config.json
    full_attn_layers: tuple[int, ...] = ()    # 1-based
    attn_res_block_size: int = 12
    # SiTU
    situ_beta: float = 4.0
    situ_linear_beta: float = 25.0
    # gated MLA (NoPE)
    mla_heads: int = 96
    q_lora_rank: int = 1536
    kv_lora_rank: int = 512
    qk_nope_dim: int = 128
    qk_rope_dim: int = 64
    v_head_dim: int = 128
    # KDA
    kda_heads: int = 96
    kda_head_dim: int = 128
    conv_width: int = 4
    gate_lower_bound: float = -5.0
    # LatentMoE
    n_experts: int = 896
    top_k: int = 16
    n_group: int = 1
    topk_group: int = 1
    moe_intermediate: int = 3072
    latent_dim: int = 3584
    n_shared: int = 2
    dense_intermediate: int = 33792
    routed_scaling_factor: float = 1.0
    renormalize: bool = True
    first_k_dense_replace: int = 1
    # capacity of the per-sequence MLA cache a test may allocate (validation of cache lengths)
    max_cache_len: int = 1 << 20
    name: str = field(default="custom", compare=False)

    # ---- derived ----
    @property
    def kda_proj(self) -> int:
        """P = H_k * D: width of each of q, k, v, g in KDA."""
        return self.kda_heads * self.kda_head_dim

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_dim + self.qk_rope_dim

    @property
    def mla_cache_dim(self) -> int:
        """One latent cache entry: kv_c (kv_lora_rank) then k_pe (qk_rope_dim)."""
        return self.kv_lora_rank + self.qk_rope_dim

    @property
    def shared_intermediate(self) -> int:
        return self.n_shared * self.moe_intermediate

    @property
    def n_blocks(self) -> int:
        return math.ceil(self.n_layers / self.attn_res_block_size)

    def is_kda_layer(self, i: int) -> bool:
        """Layer i (0-based) is KDA iff i+1 is in kda_layers (docs/k3-decode.md §1.2)."""
        return (i + 1) in self.kda_layers

    def is_moe_layer(self, i: int) -> bool:
        return i >= self.first_k_dense_replace

    def layer_kind(self, i: int) -> str:
        return "kda" if self.is_kda_layer(i) else "mla"

    def replace(self, **changes) -> "K3Config":
        """A validated copy with some fields changed."""
        return dataclasses.replace(self, **changes).validate()

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["kda_layers"] = list(self.kda_layers)
        d["full_attn_layers"] = list(self.full_attn_layers)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "K3Config":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown config field(s): {', '.join(unknown)}")
        d = dict(d)
        for key in ("kda_layers", "full_attn_layers"):
            if key in d:
                d[key] = tuple(int(v) for v in d[key])
        return cls(**d).validate()

    # ---- validation ----
    def validate(self) -> "K3Config":
        def need(ok: bool, fld: str, why: str) -> None:
            if not ok:
                raise ConfigError(f"K3Config.{fld}: {why}")

        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.type in ("int", "float", "bool"):
                need(not isinstance(v, bool) or f.type == "bool", f.name, f"must be a number, got {v!r}")
                need(isinstance(v, (int, float)), f.name, f"must be a number, got {v!r}")
            if f.type == "int":
                need(isinstance(v, int), f.name, f"must be an integer, got {v!r}")
            if f.type == "float":
                need(math.isfinite(v), f.name, f"must be finite, got {v!r}")
        for fld in ("hidden", "n_layers", "vocab", "attn_res_block_size", "mla_heads", "q_lora_rank",
                    "kv_lora_rank", "qk_nope_dim", "v_head_dim", "kda_heads", "kda_head_dim",
                    "conv_width", "n_experts", "top_k", "n_group", "topk_group", "moe_intermediate",
                    "latent_dim", "dense_intermediate", "max_cache_len"):
            need(getattr(self, fld) >= 1, fld, f"must be >= 1, got {getattr(self, fld)}")
        need(self.qk_rope_dim >= 0, "qk_rope_dim", f"must be >= 0, got {self.qk_rope_dim}")
        need(self.n_shared >= 0, "n_shared", f"must be >= 0, got {self.n_shared}")
        need(self.rms_eps > 0, "rms_eps", f"must be > 0, got {self.rms_eps}")
        need(self.situ_beta > 0 and self.situ_linear_beta > 0, "situ_beta",
             "SiTU soft caps must be > 0")
        need(self.top_k <= self.n_experts, "top_k",
             f"top_k={self.top_k} is larger than n_experts={self.n_experts}")
        need(self.n_experts % self.n_group == 0, "n_group",
             f"n_experts={self.n_experts} is not divisible by n_group={self.n_group}")
        need(self.topk_group <= self.n_group, "topk_group",
             f"topk_group={self.topk_group} is larger than n_group={self.n_group}")
        per_group = self.n_experts // self.n_group
        need(self.n_group == 1 or per_group >= 2, "n_group",
             f"grouped top-k scores a group by its top-2 experts, but groups hold {per_group}")
        need(self.topk_group * per_group >= self.top_k, "topk_group",
             f"the {self.topk_group} kept group(s) of {per_group} experts cannot supply top_k={self.top_k}")
        need(self.latent_dim % MXFP4_GROUP == 0, "latent_dim",
             f"MXFP4 K dimension latent_dim={self.latent_dim} is not a multiple of {MXFP4_GROUP}")
        need(self.moe_intermediate % MXFP4_GROUP == 0, "moe_intermediate",
             f"MXFP4 K dimension moe_intermediate={self.moe_intermediate} is not a multiple of {MXFP4_GROUP}")
        need(self.qk_rope_dim <= self.qk_nope_dim + self.qk_rope_dim, "qk_rope_dim", "inconsistent")
        need(self.v_head_dim == self.qk_nope_dim, "v_head_dim",
             f"v_head_dim={self.v_head_dim} must equal qk_nope_dim={self.qk_nope_dim} "
             "(kv_b_proj rows are laid out [W_UK | W_UV] per head)")
        need(self.conv_width >= 2, "conv_width", f"short conv needs width >= 2, got {self.conv_width}")
        need(-5.0 <= self.gate_lower_bound < 0, "gate_lower_bound",
             f"must lie in [-5, 0), got {self.gate_lower_bound}")
        need(self.routed_scaling_factor > 0, "routed_scaling_factor", "must be > 0")
        need(0 <= self.first_k_dense_replace <= self.n_layers, "first_k_dense_replace",
             f"must lie in [0, n_layers], got {self.first_k_dense_replace}")
        layers = set(self.kda_layers) | set(self.full_attn_layers)
        need(not (set(self.kda_layers) & set(self.full_attn_layers)), "kda_layers",
             "a layer is listed both as KDA and as full attention")
        need(layers == set(range(1, self.n_layers + 1)), "kda_layers",
             f"kda_layers and full_attn_layers must together list layers 1..{self.n_layers} once")
        return self


def _layer_split(n_layers: int, mla_every: int = 4) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """K3's schedule: every 4th layer is MLA, the last two are MLA (1-based lists)."""
    mla = {i for i in range(1, n_layers + 1) if i % mla_every == 0} | {n_layers - 1, n_layers}
    kda = tuple(i for i in range(1, n_layers + 1) if i not in mla)
    return kda, tuple(sorted(mla))


def _full() -> K3Config:
    kda, mla = _layer_split(93)
    return K3Config(kda_layers=kda, full_attn_layers=mla, name="full").validate()


def _small() -> K3Config:
    return K3Config(
        hidden=1024, n_layers=9, vocab=4096, kda_layers=(1, 2, 3, 5, 6, 7), full_attn_layers=(4, 8, 9),
        attn_res_block_size=4, mla_heads=8, q_lora_rank=512, kv_lora_rank=512, qk_nope_dim=128,
        qk_rope_dim=64, v_head_dim=128, kda_heads=8, kda_head_dim=128, n_experts=112, top_k=16,
        moe_intermediate=256, latent_dim=512, n_shared=2, dense_intermediate=4096,
        max_cache_len=1 << 16, name="small").validate()


def _tiny() -> K3Config:
    return K3Config(
        hidden=64, n_layers=5, vocab=256, kda_layers=(1, 2, 3), full_attn_layers=(4, 5),
        attn_res_block_size=2, mla_heads=2, q_lora_rank=32, kv_lora_rank=32, qk_nope_dim=16,
        qk_rope_dim=8, v_head_dim=16, kda_heads=2, kda_head_dim=16, n_experts=12, top_k=4,
        moe_intermediate=64, latent_dim=64, n_shared=2, dense_intermediate=128,
        max_cache_len=4096, name="tiny").validate()


PRESETS = {"full": _full, "small": _small, "tiny": _tiny}


def preset(name: str) -> K3Config:
    """One of the docs/k3-decode.md §9 presets: 'full' (real K3), 'small' (one GPU), 'tiny' (CPU)."""
    try:
        return PRESETS[name]()
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}") from None


def check_cache_lens(cfg: K3Config, cache_lens, capacity: int | None = None) -> None:
    """Cached lengths L_b before this step: each must satisfy 0 <= L_b and L_b + 1 <= capacity."""
    cap = cfg.max_cache_len if capacity is None else capacity
    for b, n in enumerate(int(v) for v in cache_lens):
        if n < 0:
            raise ConfigError(f"cache_lens[{b}]={n} is negative")
        if n + 1 > cap:
            raise ConfigError(f"cache_lens[{b}]={n} leaves no room for the new token in a cache of capacity {cap}")
