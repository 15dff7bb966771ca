"""`k3diff replay FILE|DIR` (verdict and metrics of seeds) and `k3diff show FILE` (its case).

Exit status: 0 pass; 1 the candidate fails (a failing, crashing or hanging case); 2 the command
was wrong: a bad seed file, an unknown or broken backend, a device that is not here (the one-line
reason on stderr). `replay DIR` replays every seed under the folder: 2 if any seed could not be
read (the others are still replayed), else 1 if any case fails, else 0.

Candidates run in a child process (`--isolate off` to run them here), so a crash or hang of the
kernel is reported as a failing verdict ("crash: ..."/"hang: ...", exit 1), never a dead CLI.
"""
from __future__ import annotations

import argparse
import json
import sys


def _parser():
    p = argparse.ArgumentParser(prog="k3diff", description="k3diff seed tools")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("replay", help="re-run a seed file (or every seed under a folder) and print its verdict")
    r.add_argument("file")
    r.add_argument("--backend", default=None, help="candidate (default: the one recorded in the seed)")
    r.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    r.add_argument("--json", action="store_true", help="print the verdict as JSON")
    _isolation_args(r)
    s = sub.add_parser("show", help="describe the case of a seed file")
    s.add_argument("file")
    sub.add_parser("budgets", help="print the error-budget table")
    h = sub.add_parser("hunt", help="fuzz a backend until the first failure: examples and seconds to catch")
    h.add_argument("--backend", required=True)
    h.add_argument("--stage", action="append", default=None, help="stage(s) to fuzz (default: all it has)")
    h.add_argument("--examples", type=int, default=40, help="examples per stage")
    h.add_argument("--seed", type=int, default=0)
    h.add_argument("--device", default=None)
    _isolation_args(h)
    h.add_argument("--preset", default=None, choices=("tiny", "small", "full"),
                   help="dims to fuzz around (default: tiny on cpu, small on a GPU)")
    m = sub.add_parser("mutants", help="run k3diff against every planted bug and print the mutation score")
    m.add_argument("--examples", type=int, default=40, help="examples per stage (the ci profile's budget)")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--only", default=None, metavar="NAME[,NAME]", help="these planted bugs only (names: the table's first column)")
    m.add_argument("--controls", default="all", metavar="all|none|NAME[,NAME]",
                   help="the false-alarm controls (correct variants, k3diff/false_alarms.py) to run after the bugs")
    m.add_argument("--control-examples", type=int, default=10, help="examples per stage for each control")
    m.add_argument("--device", default="cpu", help="cpu, or cuda: the GPU space and the CUDA-only controls (TF32)")
    # -- report (k3diff/report/): the HTML report of results files, or --compare BASE NEW
    from k3diff.report import add_arguments
    add_arguments(sub.add_parser("report", help="HTML report of results files (shards merged), or --compare BASE NEW"))
    return p


def _isolation_args(p):
    from k3diff.isolation import DEFAULT_TIMEOUT

    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help=f"per-case limit in seconds; past it the case is a hang (default {DEFAULT_TIMEOUT:g})")
    p.add_argument("--isolate", choices=["on", "off"], default="on",
                   help="judge in a child process so a crash or hang cannot take k3diff down (default on)")


def _replay(args) -> int:
    from pathlib import Path

    from k3diff.corpus import CorpusError, seed_files

    paths = seed_files(args.file)
    checkers = {}
    if not Path(args.file).is_dir():
        try:
            return _replay_one(args, paths[0], checkers)
        finally:
            for checker, _ in checkers.values():
                checker.close()
    if not paths:
        raise CorpusError(f"{args.file}: no seed files (*.json) under this folder")
    status = 0
    try:
        for path in paths:
            print(f"== {path}")
            try:
                status = max(status, _replay_one(args, path, checkers))
            except CorpusError as exc:
                print(f"k3diff: {exc}", file=sys.stderr)
                status = 2
    finally:
        for checker, _ in checkers.values():
            checker.close()
    return status


def _replay_one(args, path, checkers) -> int:
    from k3diff import backends
    from k3diff.corpus import load
    from k3diff.session import compare_with_record, load_available, make_checker, pick_device, replay_record

    case, record = load(path)
    name = args.backend or record.get("backend") or backends.default_name()
    device = pick_device(args.device)
    if name not in checkers:
        backend = load_available(name)
        checkers[name] = (make_checker(name, backend, device=device, isolate=args.isolate == "on",
                                       timeout=args.timeout), backend)
    checker, backend = checkers[name]
    verdict = replay_record(checker, case, record)
    now = verdict.to_dict()
    if args.json:
        print(json.dumps(now, indent=1, sort_keys=True))
    else:
        position = getattr(verdict, "position", None)
        print(("" if position is None else f"batch invariance (position {position}): ") + verdict.headline())
        for rep in verdict.reports:
            print("  " + rep.line())
        if verdict.routing is not None:
            print("  " + verdict.routing.line())
        for note in verdict.notes:
            print("  note: " + note)
    for line in compare_with_record(verdict, record, name, backend):
        print(line)
    return 0 if verdict.ok or verdict.skipped else 1


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
    import time

    from k3diff.isolation import is_fatal
    from k3diff.search import Stop, find_failure
    from k3diff.session import choose_space, load_available, make_checker, pick_device
    from k3diff.strategies import cases

    backend = load_available(args.backend)
    device = pick_device(args.device)
    stages = args.stage or list(getattr(backend, "stages", ("moe", "mla", "kda", "layer")))
    checker = make_checker(args.backend, backend, device=device, isolate=args.isolate == "on", timeout=args.timeout)

    def judge(case):
        verdict = checker.check(case)
        if is_fatal(verdict):
            raise Stop(verdict)
        return verdict

    count, start, verdict, stage = 0, time.perf_counter(), None, ""
    try:
        for stage in stages:
            verdict, n = find_failure(cases(stage, choose_space(device, args.preset, backend)), judge, examples=args.examples,
                                      seed=args.seed, shrink=False)
            count += n
            if verdict is not None:
                break
    finally:
        checker.close()
    seconds = time.perf_counter() - start
    if verdict is None:
        print(f"no failure in {count} examples ({seconds:.1f} s) over {', '.join(stages)} on {device}")
        return 0
    print(f"caught after {count} examples, {seconds:.1f} s, stage {stage} on {device}: {verdict.headline()}")
    for line in verdict.failures():
        print("  " + line)
    return 1


def _mutants(args) -> int:
    from k3diff.mutants import BY_NAME, MUTANTS, hunt, table
    from k3diff.session import UsageProblem, choose_space

    chosen = MUTANTS
    if args.only:
        names = [n for n in args.only.split(",") if n]
        unknown = [n for n in names if n not in BY_NAME]
        if unknown:
            raise UsageProblem(f"unknown mutant {unknown[0]!r} (known: {', '.join(sorted(BY_NAME))})")
        chosen = [BY_NAME[n] for n in names]
    results = [hunt(m, examples_per_stage=args.examples, seed=args.seed, space=choose_space(args.device),
                    device=args.device) for m in chosen]
    print("\n".join(table(results)))
    passed = _controls(args)
    return 0 if all(r.caught for r in results) and passed else 1


def _controls(args) -> bool:
    """The false-alarm controls after the bugs: every correct variant must pass every stage."""
    from k3diff import false_alarms
    from k3diff.session import UsageProblem, choose_space

    if args.controls == "none":
        return True
    chosen = false_alarms.selected(args.device)
    if args.controls != "all":
        names = [n for n in args.controls.split(",") if n]
        unknown = [n for n in names if n not in false_alarms.BY_NAME]
        if unknown:
            raise UsageProblem(f"unknown control {unknown[0]!r} (known: {', '.join(sorted(false_alarms.BY_NAME))})")
        chosen = [false_alarms.BY_NAME[n] for n in names]
    results = [false_alarms.check(c, examples_per_stage=args.control_examples, seed=args.seed,
                                  space=choose_space(args.device), device=args.device) for c in chosen]
    print("\n".join(false_alarms.table(results)))
    return all(r.passed for r in results)


def main(argv=None) -> int:
    from k3diff.backends.base import BackendError
    from k3diff.case import CaseError
    from k3diff.corpus import CorpusError
    from k3diff.session import UsageProblem
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
        if args.command == "report":  # -- report
            from k3diff.report import run as _report
            return _report(args)
        from k3diff.budgets import describe
        for where, rule, reason in describe():
            print(f"{where:32} {rule:36} {reason}")
        return 0
    except (CorpusError, CaseError, BackendError, CaseTooLarge, UsageProblem) as exc:
        print(f"k3diff: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
