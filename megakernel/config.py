"""The megakernel's settings: one frozen object, read from the environment here and nowhere else.

Why one object: a kernel's variant is chosen from these settings, so a step, the compile list and
a bench that times "the other kernel" beside the default must all see the same values. Each step
takes a Settings (default: `current()`, the environment's, read once per process); a bench or a
tuner builds its own (`dataclasses.replace`) instead of flipping module globals. The backend's
`available()` calls `check()`, so a bad value is one line before any case runs.

The environment sets only what a user picks (which kernel runs, how a step is launched, the
caches); tuning knobs are fields a tuner sets on its own object (tools/). Importing this module
imports no cutlass.

The variables, their defaults and what each changes: docs/guide.md, "Environment variables"
(one table for k3diff and the megakernel). Each maps to one field: MEGAKERNEL_STREAMS moe.streams,
MEGAKERNEL_ATTN_STREAMS attn.streams, MK_GEMV_MMA gemv.mma, MK_MLA_MMA attn.mla_mma and
attn.mla_wg, MEGAKERNEL_LAYER layer, MEGAKERNEL_CACHE kernel_cache, MEGAKERNEL_FAST_CALL
fast_call, MEGAKERNEL_EP_EXCHANGE ep_exchange (from_env below).
"""
import os
from dataclasses import dataclass, field, replace
from functools import lru_cache

# every GEMV of the three steps (gemv.py): the MoE's four, KDA's five, MLA's five
# (the MoE's in the order of the persistent launch's key, which names them)
MOE_GEMVS = ("gemv_x", "out_routed", "gemv_shared", "out_shared")
KDA_GEMVS = ("kda_x", "kda_in", "kda_g", "kda_fb", "kda_out")
MLA_GEMVS = ("mla_x", "mla_a", "mla_g", "mla_qb", "mla_out")
ALL_GEMVS = ("gemv_x", "gemv_shared", "out_shared", "out_routed") + KDA_GEMVS + MLA_GEMVS
MOE_MODES = ("fork", "serial", "persistent")
ATTN_MODES = ("fused", "fork")
MLA_PATHS = ("0", "1", "sync", "wg")      # MK_MLA_MMA: CUDA cores, default, mma.sync, wgmma
# megakernel-ep's exchange (ep.py): "ipc" writes rows straight into the peers' device buffers
# (ep_ipc.py: ranks of one host on GPUs, a gloo group); "dist" torch.distributed's
# all_to_all_single (NCCL, or gloo through host copies); "auto" ipc where it can run, else dist
EP_EXCHANGES = ("auto", "ipc", "dist")


@dataclass(frozen=True)
class Gemv:
    # the GEMVs on the tensor cores (k_gemv_mma.py); the others on the CUDA cores (k_gemv.py).
    # All of them by default: measured faster at batch 8 and 64 (lab/gemv/, gemv.py)
    mma: tuple = ALL_GEMVS
    # (name, U) over the CUDA-core GEMVs' unroll (gemv.UNROLL), for tuning runs (tune_streams)
    unroll: tuple = ()
    # gemv.WGMMA_GEMVS at batch > 8 on wgmma where it runs (gemv.WGMMA), else mma.sync: the same
    # bits either way; False for the benches' side-by-side column
    wgmma: bool = True

    def other(self, names):
        """The benches' side-by-side column: every GEMV on the kernel `names` do not use now
        (all on the CUDA cores if any of them is on the tensor cores, else all on them)."""
        return replace(self, mma=() if any(g in self.mma for g in names) else ALL_GEMVS)


@dataclass(frozen=True)
class Persist:
    """The persistent launch's build (k_persistent.py), for tuning runs (tune_persistent,
    persistent_regs); part of its compile key. Every value gives the same bits."""
    ctas: int = 3            # CTAs per SM it is built to fit (4: registers capped at 64)
    unroll: int = 8          # K chunks in flight per lane of its CUDA-core GEMV tasks
    mma_gemv: tuple = ()     # (knob, value) laid over its tensor-core GEMVs' variants; never KS


@dataclass(frozen=True)
class Moe:
    streams: str = "fork"    # moe.MODES: launch_streams.py (fork / serial), launch_persistent.py
    mx_mma: bool = True      # MXFP4 experts on the tensor cores (k_expert_mma.py) where they fit
    # the tensor-core experts' variants (k_expert_mma.py; tune_mma): None = the measured default
    up: tuple | None = None
    down: tuple | None = None
    persist: Persist = field(default_factory=Persist)


@dataclass(frozen=True)
class Attn:
    streams: str | None = None   # None: each step's measured default (mla.py fork, kda.py fused)
    mla_mma: bool = True         # MLA's products on the tensor cores (k_mla_attn_mma.py, k_mla_heads.py)
    # ... the attention on wgmma where it runs (k_mla_attn_wg.fits): 1.10-1.39x the MLA step at
    # 8k-32k caches, batch 1-64, 0.94x at 1 / 8k and 8 / 1k (lab/mla/);
    # its tiles by TMA (k_mla_attn_tma.py) 1.2-1.6x the attention alone, the scores
    # split between its warpgroups 1.02-1.06x more (m and acc the same bits, l summed
    # in another order)
    mla_wg: bool = True


@dataclass(frozen=True)
class Settings:
    gemv: Gemv = field(default_factory=Gemv)
    moe: Moe = field(default_factory=Moe)
    attn: Attn = field(default_factory=Attn)
    layer: bool = True
    kernel_cache: str = ""
    fast_call: bool = True
    ep_exchange: str = "auto"


def _gemv_mma(v):
    if v in (None, ""):
        return ALL_GEMVS
    if v in ("0", "1"):
        return ALL_GEMVS if v == "1" else ()
    names = tuple(n for n in ALL_GEMVS if n in v.split(","))
    if len(names) != len([n for n in v.split(",") if n]):
        raise ValueError(f"MK_GEMV_MMA: names among {', '.join(ALL_GEMVS)}, or 0 / 1; got {v!r}")
    return names


def _choice(env, name, ok, default):
    v = env.get(name) or default
    if v is not None and v not in ok:
        raise ValueError(f"{name}: {' or '.join(ok)}; got {v!r}")
    return v


def from_env(env=None) -> Settings:
    """The settings an environment asks for; ValueError (one line naming the variable) on a bad
    value."""
    env = os.environ if env is None else env
    mla = _choice(env, "MK_MLA_MMA", MLA_PATHS, "1")
    return Settings(
        gemv=Gemv(mma=_gemv_mma(env.get("MK_GEMV_MMA"))),
        moe=Moe(streams=_choice(env, "MEGAKERNEL_STREAMS", MOE_MODES, "fork")),
        attn=Attn(streams=_choice(env, "MEGAKERNEL_ATTN_STREAMS", ATTN_MODES, None),
                  mla_mma=mla != "0", mla_wg={"wg": True, "sync": False}.get(mla, Attn.mla_wg)),
        layer=env.get("MEGAKERNEL_LAYER") != "0",
        kernel_cache=env.get("MEGAKERNEL_CACHE", ""),
        fast_call=env.get("MEGAKERNEL_FAST_CALL", "1") != "0",
        ep_exchange=_choice(env, "MEGAKERNEL_EP_EXCHANGE", EP_EXCHANGES, "auto"))


@lru_cache(maxsize=1)
def current() -> Settings:
    """This process's settings (the environment's, read once)."""
    return from_env()


def layer_stage() -> bool:
    """Whether the backend offers the layer stage (read when backend.py is imported, so never
    raises)."""
    return os.environ.get("MEGAKERNEL_LAYER") != "0"


def check() -> str | None:
    """None if the environment's settings are valid, else the one-line reason."""
    try:
        from_env()
    except ValueError as e:
        return str(e)
    return None


def child_env(path_first=None, **overrides) -> dict:
    """The environment for a child process (tools that compile in a subprocess); path_first: a
    folder put first on its PYTHONPATH (so the child imports this very tree)."""
    env = dict(os.environ, **overrides)
    if path_first:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (path_first, env.get("PYTHONPATH")) if p)
    return env


def gloo_loopback() -> None:
    """Ranks of one host under gloo talk over the loopback device, as k3diff's ranks do
    (rank_pool.py): GLOO_SOCKET_IFNAME=lo in this process unless the environment names a
    device (tools/ep_time.py's ranks, before init_process_group)."""
    if "GLOO_SOCKET_IFNAME" not in os.environ and os.path.exists("/sys/class/net/lo"):
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"


def dsl_arch() -> str:
    """The arch CuTe DSL targets (CUTE_DSL_ARCH; cute_env.py sets the default)."""
    return os.environ.get("CUTE_DSL_ARCH", "")


