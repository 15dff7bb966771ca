"""The dimensions a kernel set is compiled for (all compile-time constants): the MoE's, KDA's, MLA's."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Dims:
    d: int            # hidden
    r: int            # latent width of the routed experts
    E: int            # routed experts
    k: int            # experts per token
    I: int            # routed expert FFN width
    Is: int           # merged shared expert width (n_shared * I)
    rsf: float = 1.0  # routed_scaling_factor
    renorm: bool = True
    eps: float = 1e-5
    beta: float = 4.0
    beta_lin: float = 25.0

    def check(self):
        for name in ("d", "r", "I", "Is"):
            if getattr(self, name) % 32:
                raise ValueError(f"megakernel needs {name} % 32 == 0 (MXFP4 groups, 16-byte loads)")
        if self.E > 1024 or self.k > 32:
            raise ValueError("megakernel supports E <= 1024 and top_k <= 32")
        return self


MAX_T = 256   # decode batch limit (the schedule kernel stages T*k ids in shared memory)

# Sizes at which the kernels change code path, published to k3diff as the backend's `boundaries`
# (k3diff/backends/base.py): the fuzzer draws on and around each (n-1, n, n+1; 32 for r and I).
# Literal copies, so this module imports no cutlass; where each comes from:
#   batch      1: T == 1 runs token tiles of 1, T > 1 tiles of TT_EXPERT = 4 (CUDA-core expert
#                 kernels) and of TT_GEMV = 8 (the CUDA-core GEMVs, those not in Settings.gemv.mma) -- gemv.py;
#                 4, 8: a tile full / one over; 8 is also the mma kernels' N (pairs per pass,
#                 k_expert_mma.py), where their down launch changes variant (WIDE_T, the same
#                 bits) and where the tensor-core GEMVs change variant (T > 8: 8 token
#                 tiles per pass); 64 = GEMV_PASS, one pass full / a second one; MAX_T the limit
#   n_experts  256, 512: experts per thread EPT = ceil(E / 256) in k_route.Route and k_schedule.Schedule
#                 (256 threads): E = 257 is the first case with a second expert per thread, 513 a third
#   top_k      1 (no renormalisation partner), 16 (K3's k; lanes 0..k-1 of warp 0 renormalise)
#   latent_dim, moe_intermediate: the MXFP4 tensor-core path needs r % 128 == 0 and I % 128 == 0
#                 (k_expert_mma.fits), else the CUDA-core kernels; around 128 and the presets' widths
#   cache_len  MLA (k_mla_attn.py): a cache of L rows attends over n = L + 1; splits of CH_SHORT =
#                 64 rows up to SHORT = 2048 rows, of CH = 256 beyond: 63 puts n on the first split
#                 edge, 2047 on the switch (n = 2048: 32 splits of 64; n = 2049: 9 of 256)
BOUNDARIES = {
    "batch": (1, 4, 8, 64, MAX_T),
    "n_experts": (256, 512),
    "top_k": (1, 16),
    "latent_dim": (128, 512, 3584),
    "moe_intermediate": (128, 256, 3072),
    "cache_len": (63, 2047),
}

@dataclass(frozen=True)
class KdaDims:
    """A KDA layer's dimensions (docs/k3-decode.md §4): hidden d, H heads of D, conv width W, the decay's
    lower bound lb, the gated norm's eps."""
    d: int
    H: int
    D: int
    W: int = 4
    lb: float = -5.0
    eps: float = 1e-5

    @property
    def P(self) -> int:
        return self.H * self.D

    @property
    def N(self) -> int:
        """Width of the fused in-projection's output z = [q | k | v | f_a | beta_raw | g]: the
        main stream's kda_in writes the first NM columns, the side stream's kda_g the gate's P
        (kda.py)."""
        return 4 * self.P + self.D + self.H

    @property
    def NM(self) -> int:
        return 3 * self.P + self.D + self.H

    # z's column offsets of f_a, beta_raw and the output gate g
    FA0 = property(lambda self: 3 * self.P)
    B0 = property(lambda self: 3 * self.P + self.D)
    G0 = property(lambda self: self.NM)

    def check(self):
        if self.D % 32 or self.d % 32:
            raise ValueError("megakernel KDA needs kda_head_dim % 32 == 0 and hidden % 32 == 0")
        if self.N % 8:
            raise ValueError("megakernel KDA needs the fused in-projection width % 8 == 0 (kda_heads % 8)")
        if self.W < 2:
            raise ValueError("megakernel KDA needs conv_width >= 2")
        return self


def kda_from_cfg(cfg) -> KdaDims:
    """The KDA dims of a reference.config.K3Config (duck typed)."""
    return KdaDims(d=cfg.hidden, H=cfg.kda_heads, D=cfg.kda_head_dim, W=cfg.conv_width,
                   lb=float(cfg.gate_lower_bound), eps=float(cfg.rms_eps)).check()


@dataclass(frozen=True)
class MlaDims:
    """A gated MLA layer's dimensions (docs/k3-decode.md §3): hidden d, H heads, the q latent QL, the kv
    latent R, the nope / rope / value head widths NP / RP / V, the norms' eps."""
    d: int
    H: int
    QL: int
    R: int
    NP: int = 128
    RP: int = 64
    V: int = 128
    eps: float = 1e-5

    @property
    def C(self) -> int:
        """One cache entry: the normed kv latent and k_pe."""
        return self.R + self.RP

    @property
    def NA(self) -> int:
        """Width of the fused x-side projection [q_a | kv_a | g]: q_c, kv_c, k_pe, the gate."""
        return self.QL + self.C + self.H * self.V

    @property
    def G0(self) -> int:
        """The gate's first column in that projection (mla.py: mla_a writes the columns before)."""
        return self.QL + self.C

    def check(self):
        for name in ("d", "QL", "R", "RP", "V"):
            if getattr(self, name) % 32:
                raise ValueError(f"megakernel MLA needs {name} % 32 == 0 (a lane per 32 elements)")
        if self.NP % 8 or self.R > 1024 or self.RP > 128:
            raise ValueError("megakernel MLA needs qk_nope_dim % 8 == 0, kv_lora_rank <= 1024, "
                             "qk_rope_dim <= 128")
        return self


def mla_from_cfg(cfg) -> MlaDims:
    """The MLA dims of a reference.config.K3Config (duck typed)."""
    return MlaDims(d=cfg.hidden, H=cfg.mla_heads, QL=cfg.q_lora_rank, R=cfg.kv_lora_rank,
                   NP=cfg.qk_nope_dim, RP=cfg.qk_rope_dim, V=cfg.v_head_dim,
                   eps=float(cfg.rms_eps)).check()


FULL = Dims(d=7168, r=3584, E=896, k=16, I=3072, Is=6144)
SMALL = Dims(d=1024, r=512, E=112, k=16, I=256, Is=512)
KDA_FULL = KdaDims(d=7168, H=96, D=128)
KDA_SMALL = KdaDims(d=1024, H=8, D=128)
MLA_FULL = MlaDims(d=7168, H=96, QL=1536, R=512)
MLA_SMALL = MlaDims(d=1024, H=8, QL=512, R=512)


def from_cfg(cfg) -> Dims:
    """Read only the attributes of reference.config.K3Config the kernel needs (duck typed)."""
    if getattr(cfg, "n_group", 1) != 1:
        raise ValueError("megakernel supports n_group == 1 only")
    return Dims(d=cfg.hidden, r=cfg.latent_dim, E=cfg.n_experts, k=cfg.top_k,
                I=cfg.moe_intermediate, Is=cfg.moe_intermediate * cfg.n_shared,
                rsf=float(cfg.routed_scaling_factor), renorm=bool(cfg.renormalize),
                eps=float(cfg.rms_eps), beta=float(cfg.situ_beta),
                beta_lin=float(cfg.situ_linear_beta)).check()
