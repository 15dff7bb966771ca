"""k3diff: differential correctness testing for the Kimi K3 fused decode megakernel."""
__version__ = "0.1.0"
