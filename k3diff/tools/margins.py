"""How far a correct candidate and the bugs the error rule must catch are from its bound.

    python -m k3diff.tools.margins --preset full --backend megakernel [--device cuda]

For the router logits, the expert outputs, MLA's attention (the latent, the scores' one-chunk-short
variant) and KDA's state and readout, one row per tensor: the share of budget (max over the cases;
> 100% fails) and accuracy class (error in units of u·Σ|a||b|, f32 accumulations only) a correct
candidate uses, the torch-blocked candidate beside it, and the share each planted variant uses:
f32 outputs rounded to bf16, every GEMM one 16-wide K chunk short, MLA's scores one chunk short,
KDA's delta rule one chunk short, KDA's state kept in bf16 (its own rule: recurrent_state.f32, the
share of values delivered as bf16 values; k3diff/mutants.py; those run on torch-blocked on the same device),
and with --controls the correct variants of k3diff/false_alarms.py (another summation order, TF32...).
A correct candidate's share is the false-alarm margin; a variant's share over 100% is how far past
the bound a bug lands. MoE cases route with forced ids, so an expert output's share measures the
experts, not a routing difference the logits caused.
"""
from __future__ import annotations

import argparse
import sys

import torch

from k3diff import backends, false_alarms
from k3diff.backends.blocked import TorchBlockedBackend
from k3diff.budgets import pct
from k3diff.case import Case
from k3diff.mutants import BY_NAME, MutantBackend
from k3diff.sizing import CaseTooLarge

TENSORS = {"moe": ("router_logits", "combined", "routed_out", "out"),
           "mla": ("attn_latent", "attn_out", "out"),
           "kda": ("core", "recurrent_state", "recurrent_state.f32", "out")}
VARIANTS = ("f32_outputs_rounded_to_bf16", "gemm_one_chunk_short", "mla_scores_one_chunk_short",
            "kda_delta_rule_one_chunk_short", "kda_state_in_bf16")


def cases(preset: str, batches, seed: int = 0) -> dict:
    """A few fixed cases per stage at `preset`: each batch size, plain and outlier values."""
    out = {s: [] for s in TENSORS}
    for i, T in enumerate(batches):
        for dist in ("plain", "outliers"):
            s = seed + 10 * i + (dist == "outliers")
            out["moe"].append(Case("moe", preset, batch=T, routing="forced", value_dist=dist, seed=s,
                                   expert_format="mxfp4" if i % 2 else "bf16"))
            cap = Case("mla", preset).config().max_cache_len - 1
            lens = tuple(min(cap, (0, 17, 300, 4097, 64, 1000, 2, 129)[j % 8]) for j in range(T))
            out["mla"].append(Case("mla", preset, batch=T, cache_lens=lens, value_dist=dist, seed=s))
            out["kda"].append(Case("kda", preset, batch=T, n_slots=T + 1, state_idx=tuple(range(1, T + 1)),
                                   value_dist=dist, seed=s, steps=2))
    return out


def measure(backend, stage_cases: dict, device: str) -> dict:
    """(stage, tensor) -> (max share of budget, max accuracy class or None) over the cases."""
    from k3diff import caches, materialize
    from k3diff.runner import check_case

    found = {}
    for stage, cs in stage_cases.items():
        for case in cs:
            # every case starts from nothing held: at full dims the last one's weights and prepared
            # copies (torch-blocked dequantises an MXFP4 set to 55 GiB of bf16; the megakernel packs
            # its own) beside this one's ran the H200 out of memory twice (945021e, 65bbe65); a
            # redraw on the GPU costs seconds, and the margins are a handful of cases
            materialize.evict_weights(0)
            caches.weights_dropped()
            try:
                verdict = check_case(case, backend, device=device)
            except CaseTooLarge as exc:             # the machine, not the candidate: exit 2
                _refuse(f"margins: {exc}")
            except torch.OutOfMemoryError as exc:
                _refuse(f"margins: {getattr(backend, 'name', backend)} ran out of memory on "
                        f"{case.label()}: {str(exc).splitlines()[0][:160]}")
            if verdict.error:
                raise SystemExit(f"margins: {getattr(backend, 'name', backend)} crashed on {case.label()}: "
                                 f"{verdict.error}")
            for r in verdict.reports:
                name = r.tensor.split("@")[0]
                if name not in TENSORS[stage] or (r.note and not r.bound):    # bitwise / not judged
                    continue
                share, acc = found.get((stage, name), (0.0, None))
                if r.accuracy is not None:
                    acc = max(acc or 0.0, r.accuracy)
                found[(stage, name)] = (max(share, r.ratio), acc)
    return found


def _refuse(line: str):
    """One line on stderr and exit 2: a usage problem or a case this machine cannot hold (a
    correct candidate that crashes is exit 1, as SystemExit(text) gives)."""
    print(line, file=sys.stderr)
    raise SystemExit(2)


def _fmt_share(v):
    return "-" if v is None else pct(v[0])


def rows(columns: dict) -> list[str]:
    """One block per stage: a line per candidate or variant, a cell per tensor (share, and the
    accuracy class where there is one)."""
    lines = []
    for stage, tensors in TENSORS.items():
        present = [t for t in tensors if any((stage, t) in col for col in columns.values())]
        if not present:
            continue
        lines.append(f"{stage:32}" + "".join(f"{t:>26}" for t in present))
        for name, col in columns.items():
            if not any((stage, t) in col for t in present):
                continue
            cells = []
            for t in present:
                v = col.get((stage, t))
                acc = "" if v is None or v[1] is None else f" acc {v[1]:.3g}"
                cells.append(f"{_fmt_share(v) + acc:>26}")
            lines.append(f"  {name[:30]:30}" + "".join(cells))
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m k3diff.tools.margins", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="tiny", choices=("tiny", "small", "full"))
    p.add_argument("--backend", default="torch-blocked", help="the correct candidate to measure")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    p.add_argument("--batch", default="1,8,64", help="batch sizes, comma-separated")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stages", default="moe,mla,kda", help="stages to measure, comma-separated")
    p.add_argument("--variants", default=",".join(VARIANTS), help="planted variants to measure ('' for none)")
    p.add_argument("--controls", default="", metavar="all|NAME[,NAME]",
                   help="false-alarm controls (correct variants, k3diff/false_alarms.py) to measure too")
    args = p.parse_args(argv)

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    stages = [t for t in args.stages.split(",") if t]
    unknown = [t for t in stages if t not in TENSORS]
    if unknown:
        _refuse(f"margins: unknown stage {unknown[0]!r} (stages: {', '.join(TENSORS)})")
    variants = [v for v in args.variants.split(",") if v]
    for name in variants:                   # before any case: a typo is one line, not minutes lost
        if name not in BY_NAME:
            _refuse(f"margins: unknown variant {name!r} (k3diff/mutants.py names)")
    stage_cases = {k: v for k, v in cases(args.preset, [int(b) for b in args.batch.split(",") if b],
                                          args.seed).items() if k in stages}
    candidate = backends.load(args.backend)
    why = getattr(candidate, "available", lambda: None)()
    if why:
        _refuse(f"margins: backend {args.backend!r} cannot run here: {why}")
    columns = {f"{args.backend} (correct)": measure(candidate, stage_cases, device)}
    if args.backend != "torch-blocked":
        columns["torch-blocked (correct)"] = measure(TorchBlockedBackend(), stage_cases, device)

    chosen = false_alarms.selected(device) if args.controls == "all" else [
        false_alarms.BY_NAME[n] for n in args.controls.split(",") if n]
    for c in chosen:
        columns[c.name] = measure(false_alarms.ControlBackend(c),
                                  {s: v for s, v in stage_cases.items() if s in c.stages}, device)
    for name in variants:
        m = BY_NAME[name]
        columns[name] = measure(MutantBackend(m), {s: c for s, c in stage_cases.items() if s in m.stages}, device)
    print(f"margins at preset {args.preset} on {device}, batches {args.batch}: share of budget (max over "
          f"{sum(map(len, stage_cases.values()))} cases; > 100% fails) and accuracy class in u·Σ|a||b|")
    print("\n".join(rows(columns)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
