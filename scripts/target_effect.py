"""Does hypothesis.target() on the worst share of budget catch the planted bugs sooner?

    python scripts/target_effect.py [--seeds 0,1,2,3,4] [--examples 40] [--only NAME[,NAME]] [--device cpu]

Each planted bug of `k3diff mutants` (k3diff/mutants.py) is hunted at every seed twice in this one
process, without and with `target(share_of_budget)` (k3diff.search.find_failure's `aim`), and one
row per bug prints the examples to its first catch at each seed side by side ('-': not caught
within the budget), as `k3diff mutants --seed N --examples E` counts them. Hypothesis starts its
target phase once half of the examples of a stage are drawn, so a bug caught before that is caught
at the same example either way: the rows that can differ are the late or missed ones.
Exit 0 when the table printed; 4 (exit_codes.USAGE) for a bad argument.
"""
from __future__ import annotations

import argparse
import sys


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers") from None
    if not seeds:
        raise argparse.ArgumentTypeError("no seed given")
    return seeds


def _examples(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of examples, at least 1")
    return n


def _cell(result) -> str:
    return str(result.examples) if result.caught else "-"


def _total(results, budget: int) -> int:
    """Examples to catch summed over the seeds, a miss counted as the whole budget it spent."""
    return sum(r.examples if r.caught else budget for r in results)


def rows(mutants, seeds, examples, space, device):
    """(name, stages, [without per seed], [with per seed]) HuntResults for each planted bug."""
    from k3diff.mutants import hunt

    out = []
    for m in mutants:
        pair = [[hunt(m, examples_per_stage=examples, seed=s, space=space, device=device, aim=aim) for s in seeds]
                for aim in (False, True)]
        out.append((m.name, len(m.stages), pair[0], pair[1]))
        print(f"  {m.name}: without {' '.join(map(_cell, pair[0]))}; with {' '.join(map(_cell, pair[1]))}",
              file=sys.stderr, flush=True)
    return out


def table(measured, seeds, examples) -> list[str]:
    width = max(11, 3 * len(seeds))
    lines = [f"examples to catch per seed ({','.join(map(str, seeds))}), {examples} examples a stage; "
             f"'-' not caught; total counts a miss as its whole budget",
             f"{'mutant':34} {'without':>{width}} {'with':>{width}} {'total w/o':>9} {'total with':>10}  effect"]
    sooner = later = 0
    for name, stages, without, with_ in measured:
        budget = examples * stages
        a, b = _total(without, budget), _total(with_, budget)
        effect = "same" if [_cell(r) for r in without] == [_cell(r) for r in with_] else (
            "sooner" if b < a else "later" if b > a else "differs")
        sooner += effect == "sooner"
        later += effect == "later"
        lines.append(f"{name:34} {' '.join(f'{_cell(r):>2}' for r in without):>{width}} "
                     f"{' '.join(f'{_cell(r):>2}' for r in with_):>{width}} {a:9d} {b:10d}  {effect}")
    caught = lambda k: sum(r.caught for row in measured for r in row[k + 1])  # noqa: E731
    lines.append(f"{len(measured)} mutants x {len(seeds)} seeds: caught {caught(1)} without, {caught(2)} with; "
                 f"target() sooner on {sooner}, later on {later}, the same on {len(measured) - sooner - later}")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=_seeds, default=[0, 1, 2, 3, 4])
    p.add_argument("--examples", type=_examples, default=40, help="examples per stage (the ci profile's budget)")
    p.add_argument("--only", default=None, metavar="NAME[,NAME]")
    p.add_argument("--device", default="cpu")
    from k3diff.exit_codes import USAGE

    try:
        args = p.parse_args(argv)
    except SystemExit as exc:
        return USAGE if exc.code else 0
    from k3diff.mutants import BY_NAME, for_device
    from k3diff.session import choose_space

    chosen = for_device(args.device)
    if args.only:
        unknown = [n for n in args.only.split(",") if n not in BY_NAME]
        if unknown:
            print(f"target_effect: unknown mutant {unknown[0]!r}", file=sys.stderr)
            return USAGE
        chosen = [BY_NAME[n] for n in args.only.split(",")]
    # the space `k3diff mutants` hunts in (k3diff.cli._mutant_space)
    space = choose_space(args.device, "small" if str(args.device).startswith("cuda") else None)
    print("\n".join(table(rows(chosen, args.seeds, args.examples, space, args.device), args.seeds, args.examples)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
