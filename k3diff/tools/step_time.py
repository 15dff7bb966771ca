"""One decode step of several backends on the same inputs, side by side.

    python -m k3diff.tools.step_time --stage kda --backends megakernel,fla,torch-blocked \\
        --preset full --batches 1,8,64

Each backend runs the stage as k3diff calls it (`backend.run`: projections, its own host work and
syncs included; the outputs it provides), on the inputs of one drawn case per batch size (every
row live), the states carried from call to call. The backends take turns (round after round, so
drift hits all alike); per round the mean of `--iters` synchronised calls, then the median of the
rounds. The last column of each row is each backend's time over the first backend's. A backend
that cannot run here is named with its reason and left out of the rows.

Expert parallelism (the EP bench): `--stage moe --ranks N` draws each batch's case on N ranks
(contiguous experts, as many as a distributed case keeps), which a distributed backend runs on
its N rank processes as k3diff does (inputs to the ranks and outputs back through the pool's
pipes included) and a one-device backend runs whole, e.g. on a two-GPU machine

    python -m k3diff.tools.step_time --stage moe --preset full --ranks 2 --batches 1,8,64 \\
        --backends megakernel,megakernel-ep,torch-blocked-ep
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace

from k3diff import ep_config

EXIT_USAGE = 2


def _case(stage: str, preset: str, T: int, ranks: int = 0):
    """The case of batch T; with ranks, a moe case on that many ranks (contiguous placement) with
    the experts a distributed case keeps (ep_config.fit_experts), which every backend then runs."""
    from k3diff.case import Case
    if stage == "kda":
        return Case(stage="kda", preset=preset, batch=T, n_slots=T + 1, state_idx=tuple(range(1, T + 1)), seed=T)
    case = Case(stage="moe", preset=preset, batch=T, seed=T)
    if not ranks:
        return case
    case = replace(case, overrides=ep_config.fit_experts(case.config(), case.overrides))
    return ep_config.placed(case, ranks)


def _step(backend, stage, cfg, prepared, inputs, out, sync) -> None:
    backend.run(stage, cfg, prepared, inputs, out)
    sync()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m k3diff.tools.step_time", description=__doc__.splitlines()[0])
    p.add_argument("--stage", choices=("kda", "moe"), default="kda")
    p.add_argument("--backends", default="megakernel,torch-blocked")
    p.add_argument("--preset", choices=("tiny", "small", "full"), default="small")
    p.add_argument("--batches", default="1,8,64")
    p.add_argument("--device", default="cuda")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--ranks", type=int, default=0,
                   help="moe: the case on N ranks (contiguous experts), for distributed backends "
                        "(torch-blocked-ep, megakernel-ep); the others run the same case on one device")
    a = p.parse_args(argv)
    import torch

    from k3diff import backends
    from k3diff.materialize import materialize
    from k3diff.stages import dims, output_specs, resolve_shape

    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("step_time: --device cuda needs a CUDA device", file=sys.stderr)
        return EXIT_USAGE
    if a.ranks and (a.stage != "moe" or not 2 <= a.ranks <= 8):
        print("step_time: --ranks takes 2..8, with --stage moe", file=sys.stderr)
        return EXIT_USAGE
    sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)
    try:
        batches = [int(b) for b in a.batches.split(",")]
    except ValueError:
        print(f"step_time: --batches must be integers, got {a.batches!r}", file=sys.stderr)
        return EXIT_USAGE
    loaded = []
    for name in a.backends.split(","):
        try:
            b = backends.load(name)
        except Exception as e:  # noqa: BLE001 - an unknown name or a broken backend: one line
            print(f"step_time: backend {name!r} does not load: {e}".splitlines()[0], file=sys.stderr)
            return EXIT_USAGE
        reason = b.available() or (None if a.stage in getattr(b, "stages", (a.stage,))
                                   else f"does not implement {a.stage}")
        if reason:
            print(f"  {name}: left out ({reason})")
        else:
            loaded.append((name, b))
    if not loaded:
        print("step_time: no backend can run here", file=sys.stderr)
        return EXIT_USAGE
    print(f"stage {a.stage}, preset {a.preset}, {a.device}; us per step (median of {a.rounds} rounds "
          f"of {a.iters}); x = over {loaded[0][0]}")
    print(f"{'T':>4} " + " ".join(f"{n:>16}" for n, _ in loaded) + "  " + " ".join(f"{'x ' + n:>18}" for n, _ in loaded[1:]))
    with torch.no_grad():
        for T in batches:
            case = _case(a.stage, a.preset, T, a.ranks)
            cfg, weights, inputs = materialize(case, a.device)
            runs = []
            for name, b in loaded:
                why = getattr(b, "supports", lambda c, s: None)(cfg, a.stage)
                if why:
                    print(f"  {name}: skips T={T} ({why})")
                    continue
                mine = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in inputs.items()}
                sizes = dims(cfg, a.stage, mine)
                out = {s.name: torch.empty(resolve_shape(s, sizes), dtype=s.dtype, device=a.device)
                       for s in output_specs(a.stage, set(b.provides(a.stage)))}
                if getattr(b, "distributed", False):
                    if not a.ranks:
                        print(f"  {name}: skips T={T} (a distributed backend: give --ranks N)")
                        continue
                    b.bind_case(case)           # its ranks, placement and home rows
                prep = b.prepare(cfg, a.stage, weights)
                for _ in range(3):
                    _step(b, a.stage, cfg, prep, mine, out, sync)
                runs.append((name, b, prep, mine, out, []))
            for _ in range(a.rounds):
                for name, b, prep, mine, out, times in runs:
                    t0 = time.perf_counter()
                    for _ in range(a.iters):
                        _step(b, a.stage, cfg, prep, mine, out, sync)
                    times.append((time.perf_counter() - t0) / a.iters * 1e6)
            med = {name: statistics.median(times) for name, _, _, _, _, times in runs}
            first = med.get(loaded[0][0])
            cells = " ".join(f"{med[n]:16.1f}" if n in med else f"{'-':>16}" for n, _ in loaded)
            ratios = " ".join(f"{med[n] / first:18.2f}" if n in med and first else f"{'-':>18}" for n, _ in loaded[1:])
            print(f"{T:>4} {cells}  {ratios}", flush=True)
            del runs, weights, inputs
    for _, b in loaded:
        getattr(b, "close", lambda: None)()       # a distributed backend's rank processes
    return 0


if __name__ == "__main__":
    sys.exit(main())
