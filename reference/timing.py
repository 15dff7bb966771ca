"""Wall time of one whole decode layer of the reference: ``python -m reference.timing``.

Times a KDA+MoE layer and an MLA+MoE layer (MXFP4 experts) for the tiny and small presets in both
numerics modes, after one warm-up call, on the CPU (one thread by default) or ``--device cuda``
(add ``--presets full --draw-on device`` there). Prints one line each.
"""
from __future__ import annotations

import argparse
import time

import torch

from .api import run_stage
from .config import preset
from .materialize import make_inputs, make_weights


def time_layer(cfg, layer_idx: int, batch: int, mode: str, device="cpu", repeat: int = 3,
               draw_on: str = "cpu", weights: dict | None = None) -> float:
    """Best-of-`repeat` seconds for one run_stage('layer', ...) call."""
    w = weights if weights is not None else make_weights(
        cfg, "layer", 0, expert_format="mxfp4", layer_idx=layer_idx, device=device, draw_on=draw_on)
    x = make_inputs(cfg, "layer", 1, batch=batch, layer_idx=layer_idx, device=device)
    run_stage("layer", cfg, w, x, mode)                       # warm-up
    best = float("inf")
    for _ in range(repeat):
        if device != "cpu":
            torch.cuda.synchronize()
        t = time.perf_counter()
        run_stage("layer", cfg, w, x, mode)
        if device != "cpu":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return best


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--presets", default="tiny,small")
    ap.add_argument("--draw-on", default="cpu", choices=("cpu", "device"),
                    help="where weights are drawn ('device' is fast on a GPU, see materialize)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (default 1; 0 keeps torch's default, which on a busy "
                         "2-core machine made the tiny layer ~100x slower through OpenMP spin-waits)")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {a.device}, batch {a.batch}")
    for name in a.presets.split(","):
        cfg = preset(name)
        kda_i = next(i for i in range(1, cfg.n_layers) if cfg.is_kda_layer(i))
        mla_i = next(i for i in range(1, cfg.n_layers) if not cfg.is_kda_layer(i))
        for i in (kda_i, mla_i):
            t = time.perf_counter()
            w = make_weights(cfg, "layer", 0, expert_format="mxfp4", layer_idx=i, device=a.device, draw_on=a.draw_on)
            print(f"{name:6s} layer {i} weights drawn in {time.perf_counter() - t:.2f} s")
            for mode in ("exact", "faithful"):
                s = time_layer(cfg, i, a.batch, mode, a.device, a.repeat, weights=w)
                print(f"{name:6s} layer {i} ({cfg.layer_kind(i)}+moe) {mode:9s} {s * 1e3:9.2f} ms", flush=True)
            del w


if __name__ == "__main__":
    main()
