"""`k3diff replay FILE` (verdict and metrics of one seed) and `k3diff show FILE` (its case).

Exit status: 0 pass, 1 the candidate fails, 2 bad input (the one-line reason on stderr).
"""
from __future__ import annotations

import argparse
import json
import sys


def _parser():
    p = argparse.ArgumentParser(prog="k3diff", description="k3diff seed tools")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("replay", help="re-run one seed file and print its verdict")
    r.add_argument("file")
    r.add_argument("--backend", default=None, help="candidate (default: the one recorded in the seed)")
    r.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    r.add_argument("--json", action="store_true", help="print the verdict as JSON")
    s = sub.add_parser("show", help="describe the case of a seed file")
    s.add_argument("file")
    sub.add_parser("budgets", help="print the error-budget table")
    h = sub.add_parser("hunt", help="fuzz a backend until the first failure: examples and seconds to catch")
    h.add_argument("--backend", required=True)
    h.add_argument("--stage", action="append", default=None, help="stage(s) to fuzz (default: all it has)")
    h.add_argument("--examples", type=int, default=40, help="examples per stage")
    h.add_argument("--seed", type=int, default=0)
    h.add_argument("--device", default=None)
    h.add_argument("--preset", default=None, choices=("tiny", "small", "full"),
                   help="dims to fuzz around (default: tiny on cpu, small on a GPU)")
    m = sub.add_parser("mutants", help="run k3diff against every planted bug and print the mutation score")
    m.add_argument("--examples", type=int, default=40, help="examples per stage (the ci profile's budget)")
    m.add_argument("--seed", type=int, default=0)
    return p


def _replay(args) -> int:
    from k3diff import backends
    from k3diff.corpus import load
    from k3diff.runner import check_case
    from k3diff.session import load_available, pick_device

    case, record = load(args.file)
    name = args.backend or record.get("backend") or backends.default_name()
    verdict = check_case(case, load_available(name), device=pick_device(args.device))
    now = verdict.to_dict()
    if args.json:
        print(json.dumps(now, indent=1, sort_keys=True))
    else:
        print(verdict.headline())
        for rep in verdict.reports:
            print("  " + rep.line())
        if verdict.routing is not None:
            print("  " + verdict.routing.line())
        for note in verdict.notes:
            print("  note: " + note)
    recorded = record.get("verdict")
    if recorded is not None and name == record.get("backend"):
        same = json.dumps(recorded, sort_keys=True) == json.dumps(now, sort_keys=True)
        print("reproduced the recorded verdict bit for bit" if same
              else "verdict DIFFERS from the one recorded in the seed file")
    return 0 if verdict.ok else 1


def _show(args) -> int:
    from k3diff.corpus import load

    case, record = load(args.file)
    print(case.label())
    cfg = case.config()
    print(f"stage {case.stage}; preset {case.preset}; overrides {dict(case.overrides) or 'none'}")
    print(f"batch {case.batch}; steps {case.steps}; seed {case.seed}; weight seed {case.weight_seed}")
    if case.cache_lens:
        print(f"cache lengths {list(case.cache_lens)}")
    if case.state_idx:
        print(f"state slots {list(case.state_idx)} of {case.n_slots} (<= 0: padding row)")
    print(f"dims: d={cfg.hidden} E={cfg.n_experts} k={cfg.top_k} r={cfg.latent_dim} I={cfg.moe_intermediate} "
          f"mla_heads={cfg.mla_heads} kda_heads={cfg.kda_heads}x{cfg.kda_head_dim}")
    if record.get("verdict"):
        print(f"recorded with backend {record.get('backend')}: "
              f"{'pass' if record['verdict'].get('ok') else 'FAIL'}")
    print(f"replay: {record.get('replay')}")
    return 0


def _hunt(args) -> int:
    from k3diff.mutants import first_failure
    from k3diff.session import choose_space, load_available, pick_device

    backend = load_available(args.backend)
    device = pick_device(args.device)
    stages = args.stage or list(getattr(backend, "stages", ("moe", "mla", "kda", "layer")))
    verdict, count, seconds, stage = first_failure(backend, stages, examples_per_stage=args.examples,
                                                   seed=args.seed, space=choose_space(device, args.preset, backend),
                                                   device=device)
    if verdict is None:
        print(f"no failure in {count} examples ({seconds:.1f} s) over {', '.join(stages)} on {device}")
        return 0
    print(f"caught after {count} examples, {seconds:.1f} s, stage {stage} on {device}: {verdict.headline()}")
    for line in verdict.failures():
        print("  " + line)
    return 1


def _mutants(args) -> int:
    from k3diff.mutants import MUTANTS, hunt, table
    from k3diff.session import choose_space

    results = [hunt(m, examples_per_stage=args.examples, seed=args.seed, space=choose_space("cpu"))
               for m in MUTANTS]
    print("\n".join(table(results)))
    return 0 if all(r.caught for r in results) else 1


def main(argv=None) -> int:
    from k3diff.backends.base import BackendError
    from k3diff.case import CaseError
    from k3diff.corpus import CorpusError
    from k3diff.sizing import CaseTooLarge

    args = _parser().parse_args(argv)
    try:
        if args.command == "replay":
            return _replay(args)
        if args.command == "show":
            return _show(args)
        if args.command == "hunt":
            return _hunt(args)
        if args.command == "mutants":
            return _mutants(args)
        from k3diff.budgets import describe
        for where, rule, reason in describe():
            print(f"{where:32} {rule:36} {reason}")
        return 0
    except (CorpusError, CaseError, BackendError, CaseTooLarge) as exc:
        print(f"k3diff: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
