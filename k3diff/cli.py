"""`k3diff replay FILE|DIR` (verdict and metrics of seeds) and `k3diff show FILE` (its case).

Exit status: the table in k3diff/exit_codes.py, the same numbers as `pytest --k3diff`, each with one
line on stderr. 0 pass; 1 the candidate fails (a failing, crashing or hanging case); 4 the command
was wrong (an unknown option, a bad value); 6 nothing was judged: the candidate refused (`stages`,
`supports()`) every case of a stage asked for; 7 k3diff could not write its output (stdout closed: broken pipe; disk
full); 8 the backend cannot be used (unknown, or it crashes, hangs or raises while it loads); 9 a
seed that cannot be read; 11 not on this machine (no such device, a case too big for its GPU); 130
interrupted (Ctrl-C), 143 on SIGTERM: the candidate's processes are killed first. `replay DIR`
replays every seed under the folder: 1 if any case fails, else 8 or 9 if a seed could not be read
or its backend not loaded (the others are still replayed), else 6 if none was judged, else 0.

Seeds are data: a replay runs the backend named by `--backend`, else the seed's own only when it
is a registered name (a built-in or a `k3diff.backends` entry point); a seed naming `module:object`
is refused unless that is given with `--backend`.

Candidates run in a child process (`--isolate off` to run them here), so a crash or hang of the
kernel is reported as a failing verdict ("crash: ..."/"hang: ...", exit 1), never a dead CLI.
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path

from k3diff import __version__, exit_codes as ex
from k3diff.budgets import describe
from k3diff.early_exit import guard
from k3diff.extras import check
from k3diff.isolation import DEFAULT_TIMEOUT
from k3diff.options import DEFAULT_SAVE
from k3diff.report import add_arguments, run as _report
from k3diff.rerun import cli_line
from k3diff.sanitize import run as _sanitize
from k3diff.search import first_failure_over
from k3diff.session import choose_space
from k3diff.time_limits import checked_seconds
from k3diff.usage import MachineProblem, UsageProblem, at_least_one

EXIT = {"pass": ex.PASS, "fail": ex.FAIL, "usage": ex.USAGE, "nothing judged": ex.NOTHING_JUDGED,
        "output": ex.OUTPUT_LOST, "interrupted": 130}


class _Parser(argparse.ArgumentParser):
    """argparse, but a wrong command is one line and exit 4 (argparse's own: usage text and 2)."""

    def error(self, message):
        self.exit(ex.USAGE, f"{self.prog}: error: {message}\n")


def positive_seconds(text: str) -> float:
    """A per-case limit: finite and > 0 (0 or -5 made a correct candidate a "hang"; inf overflowed)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expects seconds, got {text!r}") from None

    try:
        return checked_seconds(value, "--timeout")     # finite, > 0, not absurd (the one rule)
    except UsageProblem as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--timeout ")) from None


def stage_name(text: str) -> str:
    """A stage k3diff knows: a typo is the command's fault (exit 4), not a bad seed (9)."""
    from k3diff.stages import STAGES        # here, not at import: `k3diff report` never imports torch

    if text not in STAGES:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(STAGES)}, got {text!r}")
    return text


def _parser():
    p = _Parser(prog="k3diff", description="k3diff seed tools")
    p.add_argument("--version", action="version", version=f"k3diff {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("replay", help="re-run a seed file (or every seed under a folder) and print its verdict")
    r.add_argument("file")
    r.add_argument("--backend", default=None, help="candidate (default: the one recorded in the seed)")
    r.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    r.add_argument("--json", action="store_true",
                   help="print the verdict as JSON, alone on stdout (a folder: one JSON list); notes to stderr")
    _isolation_args(r)
    s = sub.add_parser("show", help="describe the case of a seed file")
    s.add_argument("file")
    sub.add_parser("budgets", help="print the error-budget table")
    h = sub.add_parser("hunt", help="fuzz a backend until the first failure: examples and seconds to catch")
    h.add_argument("--backend", required=True)
    h.add_argument("--stage", action="append", type=stage_name, default=None,
                   help="stage(s) to fuzz (default: all it has)")
    h.add_argument("--examples", type=at_least_one, default=40, help="examples per stage")
    h.add_argument("--seed", type=int, default=0)
    h.add_argument("--device", default=None)
    _isolation_args(h)
    h.add_argument("--preset", default=None, choices=("tiny", "small", "full"),
                   help="dims to fuzz around (default: tiny on cpu, small on a GPU)")
    m = sub.add_parser("mutants", help="run k3diff against every planted bug and print the mutation score")
    m.add_argument("--examples", type=at_least_one, default=40, help="examples per stage (the ci profile's budget)")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--only", default=None, metavar="NAME[,NAME]", help="these planted bugs only (names: the table's first column)")
    m.add_argument("--controls", default="all", metavar="all|none|NAME[,NAME]",
                   help="the false-alarm controls (correct variants, k3diff/false_alarms.py) to run after the bugs")
    m.add_argument("--control-examples", type=at_least_one, default=10, help="examples per stage for each control")
    m.add_argument("--device", default="cpu", help="cpu, or cuda: the GPU space and the CUDA-only controls (TF32)")
    # -- report (k3diff/report/): the HTML report of results files, or --compare BASE NEW
    add_arguments(sub.add_parser("report", help="HTML report of results files (shards merged), or --compare BASE NEW"))
    _sanitize_args(sub)
    return p


def _sanitize_args(sub):
    """`k3diff sanitize SEED... --tool ...`: seeds replayed under compute-sanitizer (k3diff/sanitize.py)."""
    from k3diff.sanitize import add_arguments

    add_arguments(sub.add_parser("sanitize", help="replay seeds under compute-sanitizer: each finding one line"))


def _isolation_args(p):
    p.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT,
                   help=f"per-case limit in seconds; past it the case is a hang (default {DEFAULT_TIMEOUT:g})")
    p.add_argument("--isolate", choices=["on", "off"], default="on",
                   help="judge in a child process so a crash or hang cannot take k3diff down (default on)")
    # the in-flight note of the case being judged (k3diff.isolation) goes where pytest's does, never
    # into the shared temporary folder, where another user can plant a link at its name
    p.add_argument("--save", default=DEFAULT_SAVE, metavar="DIR",
                   help=f"folder of the in-flight note `.inflight-<pid>.json` of the case being judged "
                        f"(default {DEFAULT_SAVE}, as pytest's --k3diff-save)")


def _replay(args) -> int:
    from k3diff.backends.base import BackendError
    from k3diff.corpus import CorpusError, seed_files

    paths = seed_files(args.file)
    checkers = {}
    verdicts = []
    try:
        if not Path(args.file).is_dir():
            status = _replay_one(args, paths[0], checkers)
            return EXIT["nothing judged"] if status is None else status
        if not paths:
            raise CorpusError(f"{args.file}: no seed files (*.json) under this folder")
        status, judged, bad = 0, 0, []
        for path in paths:
            print(f"== {printable(str(path))}", file=sys.stderr if args.json else sys.stdout, flush=True)
            try:
                one = _replay_one(args, path, checkers, verdicts)
            except (CorpusError, BackendError) as exc:
                print(f"k3diff: {exc}", file=sys.stderr, flush=True)
                bad.append(ex.status_of(exc))
                continue
            if one is not None:
                judged += 1
                status = max(status, one)
        if args.json:       # one document on stdout, whatever the folder held
            print(json.dumps(verdicts, indent=1, sort_keys=True))
        if status or bad:
            return ex.worst([status] * bool(status) + bad)      # a failing case outranks a bad seed
        return status if judged else EXIT["nothing judged"]
    finally:
        for checker, _ in checkers.values():
            if checker is not None:
                checker.close()


def _backend_for(args, record, path) -> str | None:
    """The backend a replay runs: `--backend`, else the seed's when k3diff vouches for the name
    (registered), else the default. A seed's `module:object` would be code chosen by a file."""
    from k3diff import backends
    from k3diff.corpus import CorpusError

    if args.backend:
        return args.backend
    named = record.get("backend")
    if named is None:
        return None
    if not backends.is_registered(named):
        raise CorpusError(f"{path}: the seed names backend {named!r}, which is not registered here; a seed does "
                          f"not choose the code k3diff runs: pass it yourself with --backend {named}")
    return named


def _replay_one(args, path, checkers, collect=None) -> int | None:
    """The exit status of one seed's replay (None: the candidate did not judge it)."""
    from k3diff.backends.base import BackendError
    from k3diff.corpus import load
    from k3diff.session import compare_with_record, open_candidate, pick_device, replay_record

    case, record = load(path)
    name = _backend_for(args, record, path)
    device = pick_device(args.device)
    if name not in checkers:
        try:
            checkers[name] = open_candidate(name, device=device, isolate=args.isolate == "on", timeout=args.timeout,
                                            inflight_dir=args.save)
        except BackendError as exc:
            checkers[name] = (None, exc)       # once: the other seeds of this backend say the same line
    checker, backend = checkers[name]
    if checker is None:
        raise backend
    name = name or getattr(backend, "spec", None) or getattr(backend, "name", None)
    verdict = replay_record(checker, case, record)
    now = verdict.to_dict()
    if args.json and collect is not None:
        collect.append({"path": str(path), "verdict": now})
    elif args.json:
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
    for line in compare_with_record(verdict, record, name, backend):      # names from the seed file: escaped
        print(printable(line), file=sys.stderr if args.json else sys.stdout)    # --json: stdout is the JSON alone
    if verdict.skipped:
        return None
    return EXIT["pass"] if verdict.ok else EXIT["fail"]


def _show(args) -> int:
    """The case of a seed file. Every field is the file's text (data from anywhere): each line is
    printed with its control characters escaped (no terminal escape sequence reaches the screen),
    and the replay command is built here from the file's name, quoted for a shell; the file's own
    "replay" string (any shell text) is never printed."""
    from k3diff import backends
    from k3diff.corpus import load

    case, record = load(args.file)
    cfg = case.config()
    lines = [case.label(),
             f"stage {case.stage}; preset {case.preset}; overrides {dict(case.overrides) or 'none'}",
             f"batch {case.batch}; steps {case.steps}; seed {case.seed}; weight seed {case.weight_seed}"]
    if case.cache_lens:
        lines.append(f"cache lengths {list(case.cache_lens)}")
    if case.state_idx:
        lines.append(f"state slots {list(case.state_idx)} of {case.n_slots} (<= 0: padding row)")
    lines.append(f"dims: d={cfg.hidden} E={cfg.n_experts} k={cfg.top_k} r={cfg.latent_dim} I={cfg.moe_intermediate} "
                 f"mla_heads={cfg.mla_heads} kda_heads={cfg.kda_heads}x{cfg.kda_head_dim}")
    named = record.get("backend")
    if record.get("verdict"):
        lines.append(f"recorded with backend {named}: {'pass' if record['verdict'].get('ok') else 'FAIL'}")
    command = ["k3diff", "replay", str(args.file)]
    if backends.is_registered(named):
        command += ["--backend", named]
    elif named is not None:         # a seed does not choose the code a replay runs (k3diff replay)
        lines.append(f"the seed names backend {named}, not registered here: a replay runs it only when you "
                     "give it with --backend")
    for line in lines:
        print(printable(line))
    print("replay: " + " ".join(shell_word(w) for w in command))
    return 0


def printable(text: str) -> str:
    """`text` with every character a terminal would act on (control characters, C1, bidi
    overrides: not str.isprintable) as a Python escape, so a file cannot drive the terminal."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 0x100 else
                   f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}" for c in text)


def shell_word(word: str) -> str:
    """One shell word that pastes back as `word`: shlex.quote, or where `word` holds a character
    that cannot be shown (a control character in a file name) bash's $'...' with it escaped."""
    if word.isprintable():
        return shlex.quote(word)
    return "$'" + printable(word.replace("\\", "\\\\").replace("'", "\\'")) + "'"


def _hunt(args) -> int:
    from k3diff.session import choose_space, open_candidate, pick_device
    from k3diff.strategies import cases

    device = pick_device(args.device)
    checker, backend = open_candidate(args.backend, device=device, isolate=args.isolate == "on",
                                      timeout=args.timeout, inflight_dir=args.save)
    stages = list(dict.fromkeys(args.stage or getattr(backend, "stages", ("moe", "mla", "kda", "layer"))))
    space, judged = choose_space(device, args.preset, backend), {st: 0 for st in stages}

    def check(case):                    # cases judged per stage: every stage asked must judge one
        verdict = checker.check(case)
        judged[case.stage] += not verdict.skipped
        return verdict

    counts: dict = {}
    try:
        verdict, count, seconds, stage = first_failure_over(stages, lambda st: cases(st, space), check,
                                                            examples=args.examples, seed=args.seed, counts=counts)
    finally:
        checker.close()
    unjudged = [st for st in stages if not judged[st]]
    if verdict is None and counts.get("too_large"):      # as a fuzz run: a case not judged is no pass
        print(f"k3diff: no failure in {count} examples, but {counts['too_large']} were too large for this "
              f"machine and not judged (the first: {counts['too_large_first']}); not a pass", file=sys.stderr)
        _print_rerun(args)
        return ex.MACHINE
    if verdict is None and unjudged:
        print(f"k3diff: nothing judged for stage {', '.join(unjudged)}: {args.backend} refused every case "
              f"of it ({count} drawn in all; stages/supports()); that is not a pass", file=sys.stderr)
        return EXIT["nothing judged"]
    if verdict is None:
        print(f"no failure in {count} examples ({seconds:.1f} s) over {', '.join(stages)} on {device}")
        _print_rerun(args)
        return EXIT["pass"]
    print(f"caught after {count} examples, {seconds:.1f} s, stage {stage} on {device}: {verdict.headline()}")
    for line in verdict.failures():
        print("  " + line)
    _print_rerun(args)
    return EXIT["fail"]


def _print_rerun(args):
    print(f"rerun: {cli_line(args.argv, '--seed', args.seed)}")


def _mutants(args) -> int:
    from k3diff.mutants import BY_NAME, for_device, hunt, table
    from k3diff.session import UsageProblem, pick_device

    pick_device(args.device)            # a bad --device: one line (exit 4, or 11 without the GPU)
    chosen = for_device(args.device)
    if args.only is not None:
        names = [n for n in args.only.split(",") if n]
        if not names:
            raise UsageProblem(f"--only {args.only!r} names no mutant (names: {', '.join(sorted(BY_NAME))})")
        unknown = [n for n in names if n not in BY_NAME]
        if unknown:
            raise UsageProblem(f"unknown mutant {unknown[0]!r} (known: {', '.join(sorted(BY_NAME))})")
        chosen = [BY_NAME[n] for n in names]
    results = [hunt(m, examples_per_stage=args.examples, seed=args.seed, space=_mutant_space(args.device),
                    device=args.device) for m in chosen]
    print("\n".join(table(results)))
    passed = _controls(args)
    _print_rerun(args)
    return 0 if all(r.caught for r in results) and passed else 1


def _controls(args) -> bool:
    """The false-alarm controls after the bugs: every correct variant must pass every stage."""
    from k3diff import false_alarms
    from k3diff.session import UsageProblem

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
                                  space=_mutant_space(args.device), device=args.device) for c in chosen]
    print("\n".join(false_alarms.table(results)))
    return all(r.passed for r in results)


def _mutant_space(device):
    """Planted bugs and correct variants are torch-blocked (a PyTorch candidate): on a GPU they are
    judged at the small production dims, not at K3's real ones, where dequantising 896 experts
    in PyTorch runs the card out of memory (seen on the H200: 37 GiB asked with 9 free)."""
    return choose_space(device, "small" if str(device).startswith("cuda") else None)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)       # the `rerun:` line (k3diff/rerun.py)
    if argv is None and getattr(args, "isolate", None) == "off":   # the command itself: before the backend loads
        guard(getattr(args, "save", None) or tempfile.gettempdir())
    try:
        status = _run(args)
        sys.stdout.flush()
        return status
    except KeyboardInterrupt:
        print("k3diff: interrupted; the candidate's processes were killed", file=sys.stderr)
        return EXIT["interrupted"]
    except OSError as exc:
        if exc.errno not in (errno.EPIPE, errno.ENOSPC, errno.EDQUOT, errno.EIO):
            raise
        _quiet_stdout()
        what = "stdout was closed (broken pipe)" if exc.errno == errno.EPIPE else (exc.strerror or str(exc))
        print(f"k3diff: could not write the output: {what}", file=sys.stderr)
        return EXIT["output"]


def _quiet_stdout():
    """After stdout failed, point it at /dev/null so the interpreter's exit flush cannot print a
    second error (Python's own 'Exception ignored ... BrokenPipeError')."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _run(args) -> int:
    if args.command == "report":        # -- report: reads JSON files; imports neither torch nor a backend
        if bool(args.results) == bool(args.compare):     # the command's fault: exit 4, as every other
            print("k3diff report: give results files (k3diff report RESULTS...) or --compare BASE NEW, "
                  "one of the two", file=sys.stderr)
            return ex.USAGE
        try:
            check("report")                 # its optional dependency: one line, exit 11
        except MachineProblem as exc:
            print(str(exc), file=sys.stderr)
            return ex.status_of(exc)
        return _report(args)
    from k3diff.backends.base import BackendError
    from k3diff.case import CaseError
    from k3diff.corpus import CorpusError
    from k3diff.session import UsageProblem
    from k3diff.sizing import CaseTooLarge

    try:
        if args.command == "replay":
            return _replay(args)
        if args.command == "show":
            return _show(args)
        if args.command == "hunt":
            return _hunt(args)
        if args.command == "mutants":
            return _mutants(args)
        if args.command == "sanitize":
            return _sanitize(args)
        for where, rule, reason in describe():
            print(f"{where:32} {rule:36} {reason}")
        return 0
    except (CorpusError, CaseError, BackendError, CaseTooLarge, UsageProblem) as exc:
        print(f"k3diff: {exc}", file=sys.stderr)
        return ex.status_of(exc)


if __name__ == "__main__":
    sys.exit(main())
