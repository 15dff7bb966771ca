"""Pointwise f32 math of the spec on device values: sigmoid, SiTU (docs/k3-decode.md §5.1), bf16 rounding."""
from megakernel.device import cute, BFloat16, Float32

def sigmoid(x):
    return Float32(1.0) / (Float32(1.0) + cute.math.exp(-x))


def situ(g, u, beta, beta_lin):
    """SiTU(g,u) = (b tanh(g/b) sigmoid(g)) (bl tanh(u/bl)), f32 (docs/k3-decode.md §5.1)."""
    b = Float32(beta)
    bl = Float32(beta_lin)
    return (b * cute.math.tanh(g / b) * sigmoid(g)) * (bl * cute.math.tanh(u / bl))


def bf16_round(x):
    """f32 -> nearest-even bf16 -> f32 (a rounding point of docs/k3-decode.md §7)."""
    return x.to(BFloat16).to(Float32)
