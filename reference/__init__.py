"""Float64 PyTorch reference oracle of one Kimi K3 decode step (docs/k3-decode.md).

Plain tensors in, tensors out; imports neither k3diff nor megakernel (independence of the oracle).
Entry points: `run_stage` (one stage, exact or faithful-bf16 numerics), `make_weights` /
`make_inputs` (deterministic materialisation), `K3Config` / `preset` (dimensions).
"""
from .api import OUT_DTYPES, STATE_NAMES, run_stage
from .config import ConfigError, K3Config, check_cache_lens, preset
from .materialize import make_inputs, make_weights, weight_shapes
from .numerics import Numerics

__all__ = ["run_stage", "make_weights", "make_inputs", "weight_shapes", "K3Config", "preset",
           "ConfigError", "check_cache_lens", "Numerics", "OUT_DTYPES", "STATE_NAMES"]
