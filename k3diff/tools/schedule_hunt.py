"""The planted schedule bugs (k3diff/schedule_mutants.py) hunted with and without the schedule
dimension, and the correct-variant controls under it: the table the schedule dimension is judged by.

    python -m k3diff.tools.schedule_hunt --device cuda [--examples 40] [--seed 0] [--timeout 60]
                                         [--in-process] [--only NAME,...]

Each bug is hunted twice over the same draws (the GPU's small production space, `--examples` per
stage): without the schedules it declares (the eager run and its run-twice control only) and with
them (k3diff.schedule_mutants.hunt_space). A schedule bug is shown when it is caught with the
dimension and missed without it; one the eager controls catch as well (split_k_atomics: atomics
reorder on an idle GPU too) is listed with what caught it and expected to be caught either way.
A candidate whose kernels wait on other CTAs (`may_hang`: the Triton pressure bugs and their
controls) is judged in its own process with a per-case time limit (`--timeout`), so one that waits
for CTAs that never start gives a "hang:" verdict, not a stuck hunt; the others, plain PyTorch, are
judged in this process (a child's start-up is seconds the GPU call has not got). `--in-process`
judges every one here.

Columns: with / without: caught or not, examples judged, seconds to the catch (or for all of
them), and `by`: "schedule" when the first failing tensor is the scheduled run's (name@schedule),
"eager" when an eager check caught it. Exit 0 when every bug is as expected and every control
passes; 1 otherwise; 11 without a CUDA device.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from k3diff import exit_codes
from k3diff.schedule import TAG
from k3diff.schedule_mutants import BUGS, CONTROLS, hunt_space, schedule_only


def _checker(cls, device, timeout, isolate):
    """(check(case) -> verdict, close()) for a fresh candidate of class `cls`."""
    from k3diff.isolation import InProcessChecker, IsolatedChecker

    if not (isolate and getattr(cls, "may_hang", False)):
        checker = InProcessChecker(cls(), device=device)
    else:
        import torch

        checker = IsolatedChecker(f"{cls.__module__}:{cls.__name__}", cls.name, device=device,
                                  timeout=timeout, threads=torch.get_num_threads())
        checker.start()
    return checker.check, checker.close


def _hunt(check, stages, space, examples, seed):
    """(verdict or None, examples, seconds) of one hunt."""
    from k3diff.search import first_failure_over
    from k3diff.strategies import cases

    v, n, s, _ = first_failure_over(stages, lambda st: cases(st, space), check, examples=examples, seed=seed)
    return v, n, s


def caught_by(verdict) -> str:
    """"schedule" when the verdict's first failing report is the scheduled run's, else "eager"."""
    bad = [r for r in verdict.reports if not r.ok]
    if bad:
        return "schedule" if TAG in bad[0].tensor else "eager"
    return "eager"      # an error or a hang of the eager run


def _head(verdict) -> str:
    return (verdict.failures() or [""])[0][:70] if verdict is not None else ""


def with_and_without(examples: int, seed: int, device: str, timeout: float = 60.0, isolate: bool = True,
                     only=None, say=lambda line: None) -> tuple[list, bool]:
    """(table lines, all as expected): each bug hunted without and with the schedule dimension,
    then each control under it. Expected: a schedule-only bug caught with and missed without; a
    bug the eager controls catch, caught with; every control passing. `say(line)` is told each
    line as it is made (a run cut short by its time limit still shows the rows it finished)."""
    from k3diff.session import choose_space

    base = choose_space(device, "small")
    lines = [f"{'planted bug':36} {'with':5} {'ex':>3} {'s':>6} {'by':8}  {'without':7} {'ex':>3} {'s':>6}  "
             f"{'as expected':11}  first failure"]
    say(lines[0])
    good = True
    for name, _, stages, _, cls in BUGS:
        if only and name not in only:
            continue
        with_sp = hunt_space(cls(), base, device)
        # one candidate process for both hunts, the eager one first (no scheduled run yet)
        check, close = _checker(cls, device, timeout, isolate)
        try:
            v0, n0, s0 = _hunt(check, stages, replace(with_sp, schedules=()), examples, seed)
            v1, n1, s1 = _hunt(check, stages, with_sp, examples, seed)
        finally:
            close()
        need = schedule_only(cls)
        ok = v1 is not None and (v0 is None if need else True)
        good &= ok
        by = caught_by(v1) if v1 is not None else ""
        note = "yes" if ok else "NO"
        if not need:
            note += " (eager too)"
        lines.append(f"{name:36} {'yes' if v1 else 'no':5} {n1:3d} {s1:6.1f} {by:8}  {'yes' if v0 else 'no':7} "
                     f"{n0:3d} {s0:6.1f}  {note:11}  {_head(v1) or _head(v0)}")
        say(lines[-1])
    for name, stages, cls in CONTROLS:
        if only and name not in only:
            continue
        check, close = _checker(cls, device, timeout, isolate)
        try:
            v, n, s = _hunt(check, stages, hunt_space(cls(), base, device), examples, seed)
        finally:
            close()
        good &= v is None
        lines.append(f"control {name:28} {'pass' if v is None else 'FAIL':5} {n:3d} {s:6.1f}  {_head(v)}")
        say(lines[-1])
    return lines, good


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m k3diff.tools.schedule_hunt",
                                description="planted schedule bugs, hunted with and without the schedule dimension")
    p.add_argument("--examples", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a case may take (isolated judging)")
    p.add_argument("--in-process", action="store_true", help="judge in this process (no per-case time limit)")
    p.add_argument("--only", default="", help="comma list of bug and control names")
    args = p.parse_args(argv)
    import torch

    if not (args.device.startswith("cuda") and torch.cuda.is_available()):
        print("k3diff.tools.schedule_hunt: the schedule bugs need a CUDA device", file=sys.stderr)
        return exit_codes.MACHINE
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    _, good = with_and_without(args.examples, args.seed, args.device, args.timeout, not args.in_process, only,
                               say=lambda line: print(line, flush=True))
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
