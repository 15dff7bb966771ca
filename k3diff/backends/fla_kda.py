"""`fla`: the KDA decode step (docs/k3-decode.md §4) on flash-linear-attention's public kernels (fla-core 0.6.0).

A backend that judges kernels nobody here wrote. The projections are plain torch (bf16 operands
widened to f32, f32 GEMM with TF32 off, one bf16 rounding at the docs/k3-decode.md §7 points); every other
part of the step is an FLA kernel:

  short conv   fla.modules.causal_conv1d.causal_conv1d_update(x, cache, weight=, activation="silu")
  decay gate   fla.ops.kda.gate.fused_kda_gate(graw, A_log, dt_bias, lower_bound=lb, f32 out)
  L2 norm      inside fused_recurrent_kda (use_qk_l2norm_in_kernel=True: x / sqrt(sum x^2 + 1e-6))
  beta         inside fused_recurrent_kda (use_beta_sigmoid_in_kernel=True, raw bf16 logits in)
  delta rule   fla.ops.kda.fused_recurrent (fused_recurrent_kda_fwd with ssm_state_indices, or the
               public fused_recurrent_kda on gathered slots; K3DIFF_FLA_SLOTS picks, below)
  gated norm   fla.modules.fused_norm_gate.rms_norm_gated(o, g2, o_norm.w, activation="sigmoid",
               eps=1e-5) (the functional form of FusedRMSNormGated)

Only the `beta` output is computed in torch (sigmoid of the bf16 logits); the kernel applies its own
sigmoid to the same logits, so the contract's `beta` does not judge FLA's.

Convention mapping (k3diff contract -> FLA), each one a helper below that the CPU tests pin:
- Null rows. K3: state_idx <= 0 is a padding row (slot 0 = null slot): all outputs exactly 0, no
  state read or written. FLA's decode kernel has no such rule (it would read slot 0, and index -1
  out of bounds), so the adapter keeps only live rows (`live_rows`) and runs every kernel on them;
  padding rows keep the zeros the adapter writes. Live slots are distinct (k3diff's contract).
- Conv state. K3 conv_state [S, 3P, W-1], oldest first, raw bf16 inputs. FLA's
  causal_conv1d_update takes cache [N, D, W] (W = kernel width, not W-1): it reads columns 1..W-1
  as the history, puts x in column W-1, convolves the W columns with weight [D, W], and writes the
  shifted window back into cache. `conv_window` builds [0 | history] per live slot (column 0 is
  never read); `conv_state_from_window` takes columns 1.. back as the new K3 state. Weight: K3
  conv.weight [3P, W] f32, column W-1 = current token = FLA's layout; passed as f32.
- Gate space. FLA's g is the log-space decay gk (S <- S * exp(gk) along K); fused_kda_gate with
  lower_bound=lb computes lb * sigmoid(exp(A_log[h]) * (graw + dt_bias)), K3's bounded gate.
  A_log: the first H entries of the stored vector (per head); dt_bias [H*D] f32.
- Scale. FLA multiplies q by `scale` after its in-kernel L2 norm; scale = D^-1/2 as K3.
- Recurrent state. K3 recurrent_state [S, H, V, K] f32 (V-major). FLA's default is [N, H, K, V];
  0.6.0 also has state_v_first=True ([N, H, V, K]). K3DIFF_FLA_STATE picks:
    "vk" (default): state_v_first=True, no copy of layout;
    "kv": FLA's default layout, the adapter transposes explicitly (`k3_to_fla_state` /
          `fla_to_k3_state`) around the kernel.
- Slots. K3DIFF_FLA_SLOTS picks:
    "indexed" (default): fused_recurrent_kda_fwd(..., initial_state=<the whole pool>,
          ssm_state_indices=<live slots>, inplace_final_state=True): FLA's continuous-batching
          path reads and writes each sequence's slot in the pool in place (vLLM's decode path).
          Needs the "vk" layout (the pool is K3's).
    "gather": the public fused_recurrent_kda(initial_state=pool[slots], output_final_state=True),
          and the adapter scatters the final states back (`gather_slots` / `scatter_slots`).
- Shapes. One token per sequence: q, k [n, 1, H, D], v [n, 1, H, D], g [n, 1, H, D], beta [n, 1, H]
  (B = n sequences, T = 1, no cu_seqlens). v is passed as f32 so the kernel's output o (allocated
  like v) stays f32 into the gated norm (K3's fused path; the `core` output is f32); q, k stay bf16
  (the kernel widens them to f32 before the norm).
- Verify steps (docs/k3-decode.md §14). FLA's spec-decode path (fused_recurrent with per-token
  ssm_state_indices and num_accepted_tokens, as vLLM drives it) is not wired: its argument
  conventions in fla-core 0.6.0 could not be confirmed from its source without a GPU here. A
  verify case runs the decode step above token position by token position (torch-blocked's
  `run_kda_verify` with this `run_kda` as the step), so FLA's conv update, gate, delta rule and
  norm are judged on every draft token's state chaining, and the adapter commits the accepted
  state. The FP8 cache is MLA's: no KDA case asks for it.
- Gated norm. rms_norm_gated over rows [n*H, D] with f32 x = o, bf16 gate g2, bf16 weight; its f32
  result is rounded once to bf16 (`normed`), as K3's single rounding.
"""
from __future__ import annotations

import os

import torch

from k3diff.backends.blocked import _verify_inputs
from k3diff.backends.blocked_attn import run_kda_verify
from k3diff.backends.library_adapter import LibraryAttentionBackend, missing_library

F32, BF16 = torch.float32, torch.bfloat16
FLA_VERSION = "0.6.0"
SLOT_MODES = ("indexed", "gather")
STATE_LAYOUTS = ("vk", "kv")


# ---------------------------------------------------------------- availability
def missing_reason() -> str | None:
    """None when fla-core and a CUDA GPU are here; else one line saying what is missing."""
    return missing_library("fla", "fla-core", FLA_VERSION, "fla", "fla-core's kernels are Triton", _fla)


def _fla():
    """The FLA entry points this adapter uses (imported lazily: CPU machines have no fla)."""
    from fla.modules.causal_conv1d import causal_conv1d_update
    from fla.modules.fused_norm_gate import rms_norm_gated
    from fla.ops.kda import fused_recurrent_kda
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd
    from fla.ops.kda.gate import fused_kda_gate
    return {"conv_update": causal_conv1d_update, "gate": fused_kda_gate,
            "recurrent": fused_recurrent_kda, "recurrent_fwd": fused_recurrent_kda_fwd,
            "gated_norm": rms_norm_gated}


def fla_version() -> str | None:
    try:
        import fla
        return getattr(fla, "__version__", "?")
    except Exception:
        return None


# ---------------------------------------------------------------- convention helpers (pure torch)
def live_rows(state_idx: torch.Tensor):
    """(rows, slots): the rows with state_idx > 0 and their slots (int64), in row order."""
    rows = torch.nonzero(state_idx > 0).squeeze(1)
    return rows, state_idx[rows].to(torch.int64)


def conv_window(conv_state: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """K3 conv_state [S, C, W-1] -> FLA causal_conv1d_update cache [n, C, W] for the given slots:
    column 0 is a zero placeholder (FLA reads columns 1..W-1 as the history), then the K3 history
    oldest first. A new contiguous tensor; conv_state is only read."""
    hist = conv_state[slots]
    pad = torch.zeros(hist.shape[:-1] + (1,), dtype=hist.dtype, device=hist.device)
    return torch.cat([pad, hist], dim=-1).contiguous()


def conv_state_from_window(window: torch.Tensor) -> torch.Tensor:
    """FLA's updated cache [n, C, W] (history shifted left, x appended) -> K3 [n, C, W-1]."""
    return window[..., 1:]


def k3_to_fla_state(s: torch.Tensor) -> torch.Tensor:
    """K3 [..., H, V, K] -> FLA default [..., H, K, V] (contiguous copy)."""
    return s.transpose(-1, -2).contiguous()


def fla_to_k3_state(s: torch.Tensor) -> torch.Tensor:
    """FLA default [..., H, K, V] -> K3 [..., H, V, K] (contiguous copy)."""
    return s.transpose(-1, -2).contiguous()


def gather_slots(pool: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """pool[slots] as a new contiguous tensor (the pool is only read)."""
    return pool[slots].contiguous()


def scatter_slots(pool: torch.Tensor, slots: torch.Tensor, values: torch.Tensor) -> None:
    """pool[slots] = values, in place; other slots (slot 0 included) untouched."""
    pool[slots] = values.to(pool.dtype)


def linear_bf16(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """bf16(x W^T): bf16 operands widened to f32 (exact products), f32 accumulation, one rounding."""
    return (x.to(F32) @ w.to(F32).t()).to(BF16)



def _mode(env: str, allowed: tuple, default: str) -> str:
    value = os.environ.get(env, default)
    if value not in allowed:
        raise ValueError(f"{env}={value!r}; expected one of {', '.join(allowed)}")
    return value


# ---------------------------------------------------------------- the stage
def prepare_kda(cfg, w: dict) -> dict:
    """Fuse the in-projections once; contiguous f32/bf16 views the kernels expect."""
    H, D, P = cfg.kda_heads, cfg.kda_head_dim, cfg.kda_proj
    return {
        "w_in": torch.cat([w[n] for n in ("q_proj.weight", "k_proj.weight", "v_proj.weight",
                                          "g_proj.weight", "f_a.weight", "b_proj.weight")], dim=0),
        "f_b": w["f_b.weight"], "o_proj": w["o_proj.weight"],
        "o_norm": w["o_norm.weight"].contiguous(),
        "conv": w["conv.weight"].reshape(3 * P, -1).to(F32).contiguous(),
        "A_log": w["A_log"].reshape(-1)[:H].to(F32).contiguous(),
        "dt_bias": w["dt_bias"].reshape(-1)[:H * D].to(F32).contiguous(),
    }


def run_kda(cfg, p: dict, x, conv_state, rec_state, state_idx, *, slots_mode=None, state_layout=None) -> dict:
    slots_mode = slots_mode or _mode("K3DIFF_FLA_SLOTS", SLOT_MODES, "indexed")
    state_layout = state_layout or _mode("K3DIFF_FLA_STATE", STATE_LAYOUTS, "vk")
    if slots_mode == "indexed" and state_layout != "vk":
        raise ValueError("K3DIFF_FLA_SLOTS=indexed works on K3's own pool: it needs K3DIFF_FLA_STATE=vk")
    fla = _fla()
    T, dev = x.shape[0], x.device
    H, D, P = cfg.kda_heads, cfg.kda_head_dim, cfg.kda_proj
    res = {  # padding rows keep these zeros
        "out": torch.zeros(T, cfg.hidden, dtype=BF16, device=dev),
        "conv_out": torch.zeros(T, 3 * P, dtype=BF16, device=dev),
        "decay": torch.zeros(T, H, D, dtype=F32, device=dev),
        "beta": torch.zeros(T, H, dtype=F32, device=dev),
        "core": torch.zeros(T, H, D, dtype=F32, device=dev),
        "normed": torch.zeros(T, P, dtype=BF16, device=dev),
    }
    rows, slots = live_rows(state_idx)
    n = rows.numel()
    if n == 0:
        return res

    # projections (torch)
    z = linear_bf16(x[rows], p["w_in"])
    mixed = z[:, :3 * P].contiguous()
    g2 = z[:, 3 * P:4 * P].contiguous()
    f_a, b_raw = z[:, 4 * P:4 * P + D], z[:, 4 * P + D:4 * P + D + H].contiguous()
    graw = linear_bf16(f_a, p["f_b"])

    # short conv (FLA): cache [n, 3P, W] in, updated in place
    window = conv_window(conv_state, slots)
    y, window = fla["conv_update"](x=mixed, cache=window, weight=p["conv"], activation="silu")
    y = y.reshape(n, 3 * P)
    conv_state[slots] = conv_state_from_window(window).to(conv_state.dtype)

    # gate (FLA): log-space decay, f32
    gk = fla["gate"](graw.view(n, H, D).contiguous(), p["A_log"], p["dt_bias"],
                     lower_bound=float(cfg.gate_lower_bound), output_dtype=F32)
    beta = torch.sigmoid(b_raw.to(F32))          # the contract's `beta` (torch); the kernel does its own

    q = y[:, :P].reshape(n, 1, H, D).contiguous()
    k = y[:, P:2 * P].reshape(n, 1, H, D).contiguous()
    v = y[:, 2 * P:].reshape(n, 1, H, D).to(F32).contiguous()
    g = gk.reshape(n, 1, H, D).contiguous()
    b = b_raw.reshape(n, 1, H).contiguous()
    common = dict(scale=D ** -0.5, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
    if slots_mode == "indexed":
        if not rec_state.is_contiguous():
            raise ValueError("recurrent_state must be contiguous for FLA's in-place slot update")
        o, _ = fla["recurrent_fwd"](q=q, k=k, v=v, g=g, beta=b, initial_state=rec_state,
                                    inplace_final_state=True, state_v_first=True,
                                    ssm_state_indices=slots.to(torch.int32).contiguous(), **common)
    else:
        h0 = gather_slots(rec_state, slots).to(F32)
        if state_layout == "kv":
            h0 = k3_to_fla_state(h0)
        o, ht = fla["recurrent"](q=q, k=k, v=v, g=g, beta=b, initial_state=h0, output_final_state=True,
                                 state_v_first=(state_layout == "vk"), **common)
        scatter_slots(rec_state, slots, fla_to_k3_state(ht) if state_layout == "kv" else ht)
    core = o.reshape(n, H, D).to(F32)

    # gated RMSNorm (FLA), one rounding
    normed = fla["gated_norm"](core.reshape(n * H, D).contiguous(), g2.reshape(n * H, D), p["o_norm"], None,
                               activation="sigmoid", eps=1e-5)
    normed = normed.to(BF16).reshape(n, P)
    out = linear_bf16(normed, p["o_proj"])

    for name, val in (("out", out), ("conv_out", y), ("decay", gk), ("beta", beta), ("core", core),
                      ("normed", normed)):
        res[name][rows] = val.to(res[name].dtype)
    return res


class FlaKdaBackend(LibraryAttentionBackend):
    """`kda` on FLA; `layer` = torch-blocked's layer wiring (AttnRes, MLA, MoE) with this KDA.

    An MLA layer of the `layer` stage therefore runs torch-blocked's MLA: only KDA layers judge FLA.
    """
    name = "fla"
    # Measured on the H200 (`scripts/gpu_check.sh OUT adapters` -> scripts/adapter_probe.py, fla-core 0.6.0;
    # 2026-11-30): two runs on identical inputs are bitwise equal at B = 1, 8, 64, 128
    # (deterministic); a token alone vs inside a batch differs (out by 3e-8 at B = 8; the live-row
    # compaction changes the kernels' grid with the batch, and the torch projections run at
    # another batch size): not batch invariant.
    deterministic = True
    batch_invariant = False
    stages = ("kda", "layer")
    attention, marker = "kda", "q_proj.weight"

    def missing(self) -> str | None:
        return missing_reason()

    def prepare_attention(self, cfg, weights):
        return prepare_kda(cfg, weights)

    def supports(self, cfg, stage, features=frozenset()) -> str | None:
        """Verify steps token by token through FLA's decode kernels (module doc)."""
        return None

    def run_kda_attention(self, cfg, p, x, conv_state, rec_state, state_idx, **verify) -> dict:
        if verify:
            return run_kda_verify(cfg, p, x, conv_state, rec_state, state_idx, step=run_kda, **verify)
        return run_kda(cfg, p, x, conv_state, rec_state, state_idx)

    def run_attention(self, cfg, p, inputs) -> dict:
        return self.run_kda_attention(cfg, p, inputs["x"], inputs["conv_state"], inputs["recurrent_state"],
                                      inputs["state_idx"], **_verify_inputs(inputs, "kda"))


BACKEND = FlaKdaBackend()
