"""The planted schedule bugs (k3diff/schedule_mutants.py) hunted with and without the schedule
dimension, and the correct-variant controls under it: the table the schedule dimension is judged by.

    python -m k3diff.tools.schedule_hunt --device cuda [--examples 40] [--seed 0]

Each bug is hunted twice over the same draws (the GPU's small production space, `--examples` per
stage): with the schedules it declares (k3diff.schedule_mutants.hunt_space) and without them (the
eager run and its run-twice control only). Exit 0 when every bug is caught with the dimension and
every control passes under it; 1 otherwise; 11 without a CUDA device.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import torch

from k3diff import exit_codes
from k3diff.schedule_mutants import BUGS, CONTROLS, hunt_space
from k3diff.search import first_failure_over
from k3diff.session import choose_space


def _hunt(backend, stages, space, examples, seed, device):
    from k3diff.runner import check_case
    from k3diff.strategies import cases

    return first_failure_over(stages, lambda st: cases(st, space), lambda c: check_case(c, backend, device=device),
                              examples=examples, seed=seed)


def with_and_without(examples: int, seed: int, device: str) -> tuple[list, bool]:
    """(table lines, all good): each bug hunted with and without the schedule dimension, then
    each control under it. Good: every bug caught with it and every control passing."""
    base = choose_space(device, "small")
    lines = [f"{'planted bug':36} {'with':5} {'ex':>4} {'s':>7}   {'without':7} {'ex':>4} {'s':>7}  first failure (with)"]
    good = True
    for name, _, stages, _, cls in BUGS:
        with_sp = hunt_space(cls(), base, device)
        v1, n1, s1, _ = _hunt(cls(), stages, with_sp, examples, seed, device)
        v0, n0, s0, _ = _hunt(cls(), stages, replace(with_sp, schedules=()), examples, seed, device)
        good &= v1 is not None
        head = (v1.failures() or [""])[0][:80] if v1 is not None else ""
        lines.append(f"{name:36} {'yes' if v1 else 'NO':5} {n1:4d} {s1:7.1f}   {'yes' if v0 else 'no':7} "
                     f"{n0:4d} {s0:7.1f}  {head}")
    for name, stages, cls in CONTROLS:
        backend = cls()
        v, n, s, _ = _hunt(backend, stages, hunt_space(backend, base, device), examples, seed, device)
        good &= v is None
        lines.append(f"control {name:28} {'pass' if v is None else 'FAIL':5} {n:4d} {s:7.1f}  "
                     + ("" if v is None else (v.failures() or [""])[0][:80]))
    return lines, good


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m k3diff.tools.schedule_hunt",
                                description="planted schedule bugs, hunted with and without the schedule dimension")
    p.add_argument("--examples", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda")
    args = p.parse_args(argv)
    if not (args.device.startswith("cuda") and torch.cuda.is_available()):
        print("k3diff.tools.schedule_hunt: the schedule bugs need a CUDA device", file=sys.stderr)
        return exit_codes.MACHINE
    lines, good = with_and_without(args.examples, args.seed, args.device)
    print("\n".join(lines))
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
