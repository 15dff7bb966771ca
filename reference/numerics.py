"""The two numerics modes of the reference, produced by ONE implementation through a rounding hook.

Every stage is written once, in terms of a `Numerics` object:

- ``exact`` ("Oracle-F64"): float64 throughout, starting from the bf16 (or MXFP4-dequantised)
  values the kernel sees; no intermediate rounding at all. This is the ground truth of docs/design.md.
- ``faithful`` ("Faithful-BF16"): working dtype float32 and a round-to-bf16-and-back at exactly
  the points docs/k3-decode.md §7 marks "→bf16" (including the routed-expert ``act`` and ``y_j``, which §7
  marks [INFERRED]). It models *where* a real kernel loses precision, so that the
  megakernel-vs-reference distance can be judged against a same-precision pipeline.

Why GEMMs accumulate in float64 even in faithful mode: the result is then rounded once to f32,
i.e. it is the correctly rounded value of the exact f32-accumulated dot product (any real f32
accumulation order can only be worse). This keeps the faithful reference independent of BLAS
blocking, split-K order and TF32 settings, so CPU and CUDA agree and a user's global
``allow_tf32=True`` cannot silently change the oracle.

RMSNorm choice (docs/k3-decode.md §7 note): everywhere, a SINGLE rounding
``bf16(x * rsqrt(mean(x^2) + eps) * w)`` with the math in the working dtype (f32 / f64). This is
what the AttnRes and FLA gated-norm kernels do; vLLM's generic CUDA RMSNorm rounds twice
(``bf16(bf16(x*rinv)*w)``), a difference that §8's tolerances cover.

Magnitudes (``Numerics("exact", magnitudes=True)``, exact mode only): beside every accumulated
output ``name`` the stage also returns ``"abs." + name``, the same contraction over absolute values
(Σ_k |a_k||b_k| in float64, the quantity in Higham's a-priori bound |fl(aᵀb) − aᵀb| ≤ γ_K·|a|ᵀ|b|),
so a checker can allow a correct kernel the accumulation error its own computation permits. They
are extra products computed beside the existing ones: no existing output changes by a bit.

Outputs: in exact mode every float output is returned as float64 (the comparison code casts); in
faithful mode outputs carry the dtype the contract (k3diff/stages.py) specifies, bf16 or f32.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

MODES = ("exact", "faithful")


@dataclass(frozen=True)
class Numerics:
    mode: str = "exact"
    magnitudes: bool = False       # also return the "abs." contractions (see the module docstring)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.magnitudes and self.mode != "exact":
            raise ValueError("magnitudes are computed in exact mode only (they are a float64 bound)")

    @property
    def exact(self) -> bool:
        return self.mode == "exact"

    @property
    def dtype(self) -> torch.dtype:
        """Working dtype of all non-GEMM math."""
        return torch.float64 if self.exact else torch.float32

    def load(self, t: torch.Tensor) -> torch.Tensor:
        """A private working-dtype copy of an input (bf16/f32 values are exact in f32 and f64).

        Always copies, so no later in-place op can reach the caller's tensor."""
        return t.to(self.dtype, copy=True)

    def round(self, x: torch.Tensor) -> torch.Tensor:
        """A "→bf16" point of docs/k3-decode.md §7: round-to-nearest-even to bf16 and back (identity if exact)."""
        return x if self.exact else x.to(torch.bfloat16).to(self.dtype)

    def linear(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """y = x W^T, accumulated in float64, returned in the working dtype (NOT rounded to bf16:
        callers put `round` where the spec stores bf16). See the module docstring for why f64."""
        return (x.to(torch.float64) @ w.to(torch.float64).T).to(self.dtype)

    def mm(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """a @ b (any batch dims) with the same float64-accumulate-then-cast rule as `linear`."""
        return (a.to(torch.float64) @ b.to(torch.float64)).to(self.dtype)

    def abs_linear(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """|x| |W|^T in float64: the contraction over absolute values beside `linear`."""
        return x.to(torch.float64).abs() @ w.to(torch.float64).abs().T

    def rmsnorm(self, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        """RMSNorm with one rounding at the end (the documented choice for every norm)."""
        x = x.to(self.dtype)
        inv = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return self.round(x * inv * w.to(self.dtype))

    def out(self, x: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        """Cast a stage output: float64 in exact mode, the contract dtype (bf16 / f32) in faithful.

        Integer tensors (ids, lengths) pass through unchanged."""
        if not x.is_floating_point():
            return x
        return x.to(torch.float64) if self.exact else x.to(dtype)


def get(mode) -> Numerics:
    """Accept a mode name or a Numerics object."""
    return mode if isinstance(mode, Numerics) else Numerics(mode)
