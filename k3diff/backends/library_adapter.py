"""What the public-library adapters (`fla`, `flashinfer`) share: torch-blocked's wiring with one
attention kind served by the library.

A subclass names its attention stage ("kda" or "mla"), a weight that marks a layer of that kind,
and how to prepare and run that attention; its own stage runs the library, and in the `layer`
stage only layers of its kind use the library (the others run torch-blocked's implementation).
"""
from __future__ import annotations

import importlib.util

import torch

from k3diff.backends.blocked import TorchBlockedBackend
from k3diff.backends.blocked_ops import exact_f32_matmul


def missing_library(module: str, package: str, version: str, extra: str, gpu_why: str, load) -> str | None:
    """None when `module` imports (through `load()`) and a CUDA GPU is here; else one line saying
    what is missing and how to install it."""
    reasons = []
    if importlib.util.find_spec(module) is None:
        reasons.append(f"{package} is not installed: pip install -e '.[{extra}]' ({package}=={version})")
    if not torch.cuda.is_available():
        reasons.append(f"no CUDA GPU ({gpu_why})")
    if reasons:
        return "; ".join(reasons)
    try:
        load()
    except Exception as exc:  # a broken install must say why, on one line
        return f"{package} does not import: {type(exc).__name__}: {exc}".splitlines()[0][:300]
    return None


class LibraryAttentionBackend(TorchBlockedBackend):
    attention = ""      # the stage the library serves: "kda" or "mla"
    marker = ""         # an attention weight present only in layers of that kind

    def missing(self) -> str | None:  # pragma: no cover - interface
        raise NotImplementedError

    def prepare_attention(self, cfg, weights):  # pragma: no cover - interface
        raise NotImplementedError

    def run_attention(self, cfg, prepared, inputs) -> dict:  # pragma: no cover - interface
        raise NotImplementedError

    def available(self) -> str | None:
        return self.missing()

    def prepare(self, cfg, stage, weights):
        if stage == self.attention:
            return {self.attention: self.prepare_attention(cfg, weights)}
        if stage != "layer":
            raise KeyError(f"{self.name}: serves {self.attention} and layer, not {stage!r}")
        p = super().prepare(cfg, stage, weights)
        attn = {k[len("attn."):]: v for k, v in weights.items() if k.startswith("attn.")}
        if self.marker in attn:
            p[self.attention] = self.prepare_attention(cfg, attn)
        return p

    def run(self, stage, cfg, prepared, inputs, out) -> None:
        if stage != self.attention:
            return super().run(stage, cfg, prepared, inputs, out)
        with torch.no_grad(), exact_f32_matmul():
            res = self.run_attention(cfg, prepared[self.attention], inputs)
        for name, buf in out.items():
            buf.copy_(res[name])
