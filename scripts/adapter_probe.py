"""Measure a public-library adapter on the GPU: determinism, batch invariance, decode-step time.

    python3 scripts/adapter_probe.py --backend fla --stage kda --out $OUT/fla_probe.json
    python3 scripts/adapter_probe.py --backend flashinfer --stage mla --out $OUT/flashinfer_probe.json

For a few fixed cases of the 'small' preset (docs/k3-decode.md §9 dims: 8 heads, D = 128, R = 512):
- determinism: the step run `--repeats` times on identical inputs (fresh clones each time): every
  output and state must be bitwise equal to the first run's -> the `deterministic` claim;
- batch invariance: tokens alone (first, middle, last) against the same tokens inside the batch,
  bitwise, outputs and the token's state slot / cache row -> the `batch_invariant` claim;
- time: mean seconds of one decode step (projections included, CUDA-synchronised, after warm-up)
  for the adapter and for torch-blocked (the torch implementation) on the same inputs.
Prints one line per measurement and writes everything as JSON; the claims to set are printed last.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from k3diff import backends
from k3diff.case import Case
from k3diff.materialize import materialize
from k3diff.stages import STATE, dims, output_specs, resolve_shape

_PER_TOKEN = ("x", "cache_lens", "state_idx", "kv_cache")


def kda_case(batch: int, pad: int, seed: int) -> Case:
    live = list(range(1, batch - pad + 1))
    g = torch.Generator().manual_seed(seed)
    rows = [live[i] for i in torch.randperm(len(live), generator=g).tolist()] + [0] * pad
    return Case(stage="kda", preset="small", batch=batch, n_slots=batch - pad + 2, state_idx=tuple(rows), seed=seed)


def mla_case(batch: int, long_len: int, seed: int) -> Case:
    g = torch.Generator().manual_seed(seed)
    lens = [int(v) for v in torch.randint(0, max(long_len, 1), (batch,), generator=g)]
    lens[0] = 0
    if batch > 1:
        lens[-1] = long_len
    return Case(stage="mla", preset="small", batch=batch, cache_lens=tuple(lens), seed=seed)


def clone(inputs: dict) -> dict:
    return {k: (v.clone() if torch.is_tensor(v) else v) for k, v in inputs.items()}


def run_once(backend, stage, cfg, prepared, inputs, names) -> dict:
    sizes = dims(cfg, stage, inputs)
    out = {s.name: torch.full(resolve_shape(s, sizes), float("nan"), dtype=s.dtype, device=inputs["x"].device)
           if s.dtype.is_floating_point else torch.zeros(resolve_shape(s, sizes), dtype=s.dtype,
                                                         device=inputs["x"].device)
           for s in output_specs(stage, names)}
    backend.run(stage, cfg, prepared, inputs, out)
    torch.cuda.synchronize()
    return out


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8) if t.dtype.is_floating_point and t.dim() else t


def bit_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN poison in unused slots / cache rows compares equal to itself)."""
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_bits(a), _bits(b))


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest |a - b| over the elements that differ; NaN in one of them only counts as inf."""
    if a.shape != b.shape:
        return float("inf")
    a, b = a.double(), b.double()
    both_nan = torch.isnan(a) & torch.isnan(b)
    d = torch.nan_to_num((a - b).abs(), nan=float("inf")).masked_fill(both_nan, 0.0)
    return float(d.max()) if d.numel() else 0.0


def determinism(backend, stage, cfg, prepared, inputs, names, repeats) -> dict:
    first_in = clone(inputs)
    first = run_once(backend, stage, cfg, prepared, first_in, names)
    worst = {}
    for _ in range(repeats - 1):
        again_in = clone(inputs)
        again = run_once(backend, stage, cfg, prepared, again_in, names)
        for k in first:
            if not bit_equal(first[k], again[k]):
                worst[k] = max(worst.get(k, 0.0), max_diff(first[k], again[k]))
        for k in STATE[stage]:
            if k in first_in and not bit_equal(first_in[k], again_in[k]):
                worst[k] = max(worst.get(k, 0.0), max_diff(first_in[k], again_in[k]))
    return worst


def batch_invariance(backend, stage, cfg, prepared, inputs, names) -> dict:
    B = inputs["x"].shape[0]
    batched_in = clone(inputs)
    batched = run_once(backend, stage, cfg, prepared, batched_in, names)
    worst = {}
    for p in sorted({0, B // 2, B - 1}):
        alone_in = {k: (v[p:p + 1].clone() if (k in _PER_TOKEN and torch.is_tensor(v)) else
                        (v.clone() if torch.is_tensor(v) else v)) for k, v in inputs.items()}
        alone = run_once(backend, stage, cfg, prepared, alone_in, names)
        for k in alone:
            if not bit_equal(alone[k], batched[k][p:p + 1]):
                worst[k] = max(worst.get(k, 0.0), max_diff(alone[k], batched[k][p:p + 1]))
        if stage == "kda":
            slot = int(inputs["state_idx"][p])
            if slot > 0:
                for k in ("conv_state", "recurrent_state"):
                    if not bit_equal(alone_in[k][slot], batched_in[k][slot]):
                        worst[k] = max(worst.get(k, 0.0), max_diff(alone_in[k][slot], batched_in[k][slot]))
        else:
            if not bit_equal(alone_in["kv_cache"][0], batched_in["kv_cache"][p]):
                worst["kv_cache"] = max(worst.get("kv_cache", 0.0),
                                        max_diff(alone_in["kv_cache"][0], batched_in["kv_cache"][p]))
    return worst


def step_time(backend, stage, cfg, prepared, inputs, names, iters) -> float:
    state = clone(inputs)
    for _ in range(3):
        run_once(backend, stage, cfg, prepared, state, names)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        run_once(backend, stage, cfg, prepared, state, names)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", required=True)
    ap.add_argument("--stage", required=True, choices=["kda", "mla"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args(argv)
    cand = backends.load(args.backend)
    reason = cand.available()
    if reason is not None:
        print(f"{args.backend}: cannot run here: {reason}")
        return 2
    torch_impl = backends.load("torch-blocked")
    if args.stage == "kda":
        todo = [kda_case(1, 0, 1), kda_case(8, 2, 2), kda_case(64, 0, 3), kda_case(128, 8, 4)]
    else:
        todo = [mla_case(1, 0, 1), mla_case(8, 300, 2), mla_case(64, 4200, 3), mla_case(128, 1024, 4)]
    report = {"backend": args.backend, "stage": args.stage, "device": torch.cuda.get_device_name(),
              "torch": torch.__version__, "cases": []}
    for case in todo:
        cfg, weights, inputs = materialize(case, "cuda")
        row = {"case": case.label()}
        try:
            with torch.no_grad():
                names = set(cand.provides(args.stage))
                prep = cand.prepare(cfg, args.stage, weights)
                row["nondeterministic"] = determinism(cand, args.stage, cfg, prep, inputs, names, args.repeats)
                row["batch_variant"] = batch_invariance(cand, args.stage, cfg, prep, inputs, names)
                row["seconds"] = step_time(cand, args.stage, cfg, prep, inputs, names, args.iters)
                tprep = torch_impl.prepare(cfg, args.stage, weights)
                row["torch_blocked_seconds"] = step_time(torch_impl, args.stage, cfg, tprep, inputs,
                                                         set(torch_impl.provides(args.stage)), args.iters)
                plan = getattr(getattr(cand, "attend", None), "last_plan", None)
                if plan:
                    row["plan"] = plan
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:400]
        report["cases"].append(row)
        print(json.dumps(row), flush=True)
    ok = [r for r in report["cases"] if "error" not in r]
    report["claims"] = {
        "deterministic": bool(ok) and all(not r["nondeterministic"] for r in ok) and len(ok) == len(todo),
        "batch_invariant": bool(ok) and all(not r["batch_variant"] for r in ok) and len(ok) == len(todo),
    }
    print(f"claims measured for {args.backend}: {report['claims']}")
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    return 0 if len(ok) == len(todo) else 1


if __name__ == "__main__":
    sys.exit(main())
