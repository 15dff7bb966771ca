"""Cases per second, stage by stage, of the current code against a baseline revision, on the SAME cases.

    python -m k3diff.tools.throughput --stages moe,mla,kda,layer --cases 100
    python -m k3diff.tools.throughput --device cuda --preset small --stages moe --cases 200
    python -m k3diff.tools.throughput --device cuda --preset full --stages moe --cases 20 --compare-with none
    python -m k3diff.tools.throughput --workers 2 --stages mla     # two processes per side, as pytest -n 2
    python -m k3diff.tools.throughput --profile /tmp/prof --stages moe     # cProfile of the current code
    python -m k3diff.tools.throughput --isolate on --compare-with 850aeff --repeat 2 --cases 24
    python -m k3diff.tools.throughput --device cuda --preset full --compare-with 9e08121 --baseline-version 2

The cases are drawn once, by the current code's strategies (the space of `--preset`), and written to
a JSON file; each side then runs in its own subprocesses with its own PYTHONPATH: the current tree,
and a detached git worktree of `--compare-with` (default none: the current code only). With
`--workers N` a side's cases are dealt round-robin to N processes, each loads (imports, backend)
and waits, then all start together; the side's time is from the first start to the last end,
weight draws included (every process draws its own, as every xdist worker does). A case is
judged as a fuzzing session judges it: `check_case` with the controls on (poisoned outputs, inputs
and weights checked, run twice), and the batch-invariance check on every 8th case of batch >= 2
(the session's share). Both sides print their Verdict.to_dict() per case and the table says, per
stage, whether they are bitwise the same, the same verdicts with every number within 1e-9
relative ("same": a float64 sum taken in another order, e.g. the reference's batched expert
GEMMs), or different (exit 1: a speed-up must not change a verdict). Per stage each side also gets
one `time per case` line, worded as the pytest summary's: the median seconds of a check and each
phase's share of them (draw, reference, candidate, ...); "-" for a tree whose verdicts carry no phases.

`--isolate on` judges each case the way a default pytest run does, through each tree's own
isolated checker (`k3diff.isolation.IsolatedChecker`: the candidate in a child process, loaded
before the clock starts): where the baseline ran the whole check in the child and the current code
runs only the candidate there and judges in the parent, the table is the cost of that move on the
same cases. Cases the baseline cannot read (fields it does not know: verify steps, the FP8 cache,
schedules) are left out of a comparison. `--baseline-version V`: the baseline judges each case
at case version V, i.e. drawn the way that version draws (k3diff/case.py), and the current code at
its own: how a change of drawing moves the speed. The numbers then differ by construction, so the
verdicts are compared by outcome alone ("outcomes same (other draws)"). `--repeat N` runs the two sides N times, alternating
which goes first, and rates each side by its fastest run (a loaded machine slows runs, it never
speeds one up); every run's seconds are printed.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from k3diff.exit_codes import SEED
from k3diff.search import find_failure
from k3diff.session import choose_space, load_available

DEFAULT_BASE = "none"      # a baseline is named: an old default stops reading the cases drawn today
HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
INVARIANCE_EVERY = 8


def draw_cases(stage: str, n: int, preset: str | None, device: str, seed: int, backend=None) -> list[dict]:
    """n cases of `stage` as the fuzzer draws them (Hypothesis, fixed seed)."""
    from k3diff.strategies import cases

    try:
        space = choose_space(device, preset, backend)
    except TypeError:                       # a session without the backend argument
        space = choose_space(device, preset)
    got = []

    class _Pass:
        ok, skipped = True, None

    def judge(case):
        got.append(case.to_dict())
        return _Pass()

    find_failure(cases(stage, space), judge, examples=n, seed=seed, shrink=False)
    return got[:n]


def _worker(args) -> int:
    """Runs inside the side's own interpreter (its own k3diff): judges its share of the cases
    (every workers-th, from its part), after a start signal on stdin so that all workers of a side
    start together; prints one JSON line."""
    import torch

    from k3diff.case import Case
    from k3diff.invariance import check_batch_invariance
    from k3diff.runner import check_case

    part, workers = (int(v) for v in args.part.split("/"))
    drawn = json.loads(Path(args.cases_file).read_text())
    mine = list(range(part, len(drawn), workers))
    cases = {i: Case.from_dict(drawn[i]) for i in mine}
    if args.isolate == "on":
        check, invariance_of, close = _isolated(args)
    else:
        backend = load_available(args.backend)
        check = lambda case: check_case(case, backend, device=args.device)  # noqa: E731
        invariance_of = lambda case, i: check_batch_invariance(case, backend, i, device=args.device)  # noqa: E731
        close = lambda: None  # noqa: E731
    drawn_in = _draw_weights_first(cases.values(), args.device) if args.weights_first else 0.0
    print(f"K3DIFF-READY {drawn_in:.3f}", flush=True)
    sys.stdin.readline()
    verdicts, invariance, timing = {}, {}, []
    prof = None
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
    sync = (lambda: torch.cuda.synchronize()) if args.device.startswith("cuda") else (lambda: None)
    sync()
    start = time.time()
    for i in mine:
        case = cases[i]
        verdict = check(case)
        verdicts[i] = verdict.to_dict()
        timing.append(timing_of(verdict))
        if i % INVARIANCE_EVERY == 0 and case.batch >= 2:
            verdict = invariance_of(case, i)
            invariance[i] = verdict.to_dict()
            timing.append(timing_of(verdict))
    sync()
    end = time.time()
    close()
    if prof is not None:
        prof.disable()
        prof.dump_stats(args.profile)
    # the timing beside the verdicts, never inside them: to_dict() is what seed files record, and
    # the two sides' verdicts are compared as they are
    print("K3DIFF-THROUGHPUT " + json.dumps({"start": start, "end": end, "verdicts": verdicts,
                                             "invariance": invariance, "timing": [t for t in timing if t]}))
    return 0


def timing_of(verdict) -> dict | None:
    """A check's seconds and seconds per phase, as a results record has them (k3diff/results.py),
    for k3diff.summary.time_per_case; None from a tree whose verdicts have no phases (this worker
    runs on the baseline's k3diff too)."""
    phases = getattr(verdict, "phases", None)
    if not phases:
        return None
    return {"seconds": round(getattr(verdict, "seconds", 0.0), 4), "phases": {k: round(v, 4) for k, v in phases.items()}}


def _isolated(args):
    """(check, invariance check, close) through this tree's own isolated checker, its child
    started and the backend loaded there now, before the clock. The constructor and the two checks
    are the same in every tree that has one; what runs in the child differs (the point)."""
    import torch

    from k3diff.isolation import IsolatedChecker

    checker = IsolatedChecker(args.backend, device=args.device, threads=torch.get_num_threads())
    checker.start()
    return checker.check, checker.check_invariance, checker.close


def _draw_weights_first(cases, device) -> float:
    """Draw every case's weights before the clock starts (as a long session has drawn each weight
    set long before); seconds it took. Works with older trees: their own weight cache is used."""
    from k3diff import materialize
    draw = getattr(materialize, "weights_for", None)
    start = time.time()
    for case in cases:
        draw(case, device) if draw is not None else materialize.materialize(case, device)
    return time.time() - start


def _run_side(root: Path, cases_file: str, backend: str, device: str, profile: str | None,
              workers: int = 1, weights_first: bool = False, isolate: str = "off") -> dict:
    """The side's verdicts (in case order) and its wall time: from the first worker's start to the
    last one's end, the workers released together once every one has loaded."""
    # the side's tree first, then whatever the caller's path held (site dirs of carried packages,
    # e.g. CuTe DSL unpacked outside site-packages on the GPU machine)
    rest = os.environ.get("PYTHONPATH")
    env = dict(os.environ, PYTHONPATH=str(root) + (os.pathsep + rest if rest else ""))
    if workers > 1:     # the cores shared out, as pytest-xdist workers would share them
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
    procs = []
    for part in range(workers):
        cmd = [sys.executable, str(HERE), "--worker", "--cases-file", cases_file, "--backend", backend,
               "--device", device, "--part", f"{part}/{workers}", "--isolate", isolate]
        cmd += ["--weights-first"] if weights_first else []
        if profile and part == 0:
            cmd += ["--profile", profile]
        procs.append(subprocess.Popen(cmd, cwd=root, env=env, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    drawing = 0.0
    for proc in procs:
        line = proc.stdout.readline()
        while line and not line.startswith("K3DIFF-READY"):
            line = proc.stdout.readline()
        if line.split()[1:]:
            drawing = max(drawing, float(line.split()[1]))
    results = []
    for proc in procs:                   # all loaded (or dead): release them together
        try:
            proc.stdin.write("go\n")
            proc.stdin.flush()            # communicate() below closes it
        except BrokenPipeError:
            pass
    for proc in procs:
        out, err = proc.communicate()
        got = [ln for ln in out.splitlines() if ln.startswith("K3DIFF-THROUGHPUT ")]
        if not got:
            for other in procs:
                other.kill()
            raise RuntimeError(f"worker in {root} failed (exit {proc.returncode}): {err.strip()[-2000:]}")
        results.append(json.loads(got[0].split(" ", 1)[1]))
    merged = {k: {int(i): v for r in results for i, v in r[k].items()} for k in ("verdicts", "invariance")}
    return {"seconds": max(r["end"] for r in results) - min(r["start"] for r in results), "drawing": drawing,
            "cases": len(merged["verdicts"]), "workers": workers,
            "verdicts": [merged["verdicts"][i] for i in sorted(merged["verdicts"])],
            "invariance": [merged["invariance"][i] for i in sorted(merged["invariance"])],
            "timing": [t for r in results for t in r.get("timing", ())]}


def time_line(stage: str, side: str, got: dict | None) -> str:
    """A side's median case seconds and phase shares, worded as the pytest summary words them
    (k3diff.summary.time_per_case); "-" where its tree's verdicts carry no phases."""
    # imported here, not at the top: this file is also the worker, run on the baseline's k3diff,
    # which may not have it
    from k3diff.summary import time_per_case

    # not "  stage: side ...": that is a run's line, which readers of this output count
    return f"  {stage} ({side}) time per case: {time_per_case((got or {}).get('timing', ())) or '-'}"


def _drew(side: dict) -> str:
    return f" (weights drawn first, in {side['drawing']:.1f} s)" if side.get("drawing") else ""


AGREEMENT = ("DIFFERENT", "same", "bitwise")      # worst first
REL = 1e-9
SIM_ABS = 1e-12


def agreement(a, b) -> str:
    """How two sides' verdicts of one case agree: "bitwise", "same" (equal but for numbers within
    REL relative, and `similarity` within SIM_ABS absolute: 1 - 2xy/(x^2+y^2) of nearly equal
    tensors is a difference of nearly equal sums, where the last bits of a sum taken in another
    order move it by ~1e-16, i.e. far more than REL relative) or "DIFFERENT". Reports are matched
    by tensor, not by position: two trees may judge a stage's tensors in another order (the same
    verdict, "same")."""
    if a == b:
        return "bitwise"
    a, b = _by_tensor(a), _by_tensor(b)

    def close(x, y, key=None):
        numbers = (int, float)
        if isinstance(x, numbers) and isinstance(y, numbers) and float in (type(x), type(y)):
            both_nan = x != x and y != y
            if key == "similarity":
                return x == y or both_nan or abs(x - y) <= SIM_ABS
            return x == y or both_nan or abs(x - y) <= REL * max(abs(x), abs(y))
        if isinstance(x, dict) and isinstance(y, dict):
            return x.keys() == y.keys() and all(close(x[k], y[k], k) for k in x)
        if isinstance(x, list) and isinstance(y, list):
            return len(x) == len(y) and all(map(close, x, y))
        return x == y

    return "same" if close(a, b) else "DIFFERENT"


def outcome(v) -> tuple:
    """A verdict dict's outcome alone: passed, skipped (why), the error, the failing tensors."""
    bad = sorted(str(r.get("tensor")) for r in v.get("reports", []) if isinstance(r, dict) and not r.get("ok"))
    return bool(v.get("ok")), v.get("skipped"), v.get("error"), bad


def _by_tensor(v):
    """A verdict dict with its reports in one order (by stage and tensor, then content)."""
    if not (isinstance(v, dict) and isinstance(v.get("reports"), list)):
        return v
    key = lambda r: (str(r.get("stage")), str(r.get("tensor")), json.dumps(r, sort_keys=True, default=str))  # noqa: E731
    return dict(v, reports=sorted(v["reports"], key=lambda r: key(r) if isinstance(r, dict) else ("", "", str(r))))


def _gist(v: dict) -> str:
    """One line of a verdict dict: its outcome and its first failing report (or error)."""
    if v.get("error"):
        return f"ERROR {v['error']}"
    bad = [r for r in v.get("reports", []) if not r.get("ok")]
    if not bad:
        return "ok" if v.get("ok") else f"FAIL (routing: {(v.get('routing') or {}).get('note')})"
    r = bad[0]
    what = r.get("note") or f"max|err| {r.get('max_err'):.3g} vs bound {r.get('bound'):.3g}"
    return f"FAIL {r.get('stage')}/{r.get('tensor')}: {what} ({len(bad)} failing report(s))"


def readable_by(root: Path, drawn: list[dict]) -> list[dict]:
    """The drawn cases the tree at `root` can read: those whose every field it knows (a newer
    field is left out of a case's dict at its default, so a plain decode case reads in both) and
    whose case version it reads (a tree before versions were written reads version 1 only)."""
    code = ("import dataclasses, json; from k3diff import case; print(json.dumps([[f.name for f in "
            "dataclasses.fields(case.Case)], list(getattr(case, 'CASE_VERSIONS', (1,)))]))")
    got = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=str(root)))
    fields, versions = json.loads(got.stdout.strip().splitlines()[-1])
    return [d for d in drawn if set(d) <= set(fields) and d.get("version", 1) in versions]


def baseline_tree(rev: str) -> tuple[Path, bool]:
    """(a tree of `rev`, whether it was made here): `rev` may be a directory holding a tree, else a
    detached git worktree of it is added under the temp dir (and removed after the run)."""
    if Path(rev).is_dir() and (Path(rev) / "k3diff").is_dir():
        return Path(rev).resolve(), False
    sha = subprocess.run(["git", "rev-parse", "--short=12", rev], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    path = Path(tempfile.gettempdir()) / f"k3diff-base-{sha}"
    if (path / "k3diff").is_dir():
        return path, False
    subprocess.run(["git", "worktree", "add", "--detach", str(path), sha], cwd=ROOT, check=True,
                   capture_output=True)
    return path, True


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m k3diff.tools.throughput", description=__doc__.split("\n")[0])
    p.add_argument("--stages", default="moe,mla,kda,layer")
    p.add_argument("--cases", type=int, default=100, help="cases per stage")
    p.add_argument("--device", default="cpu")
    p.add_argument("--preset", default=None, help="tiny | small | full (default: the device's)")
    p.add_argument("--backend", default=None, help="candidate (default: the session's default)")
    p.add_argument("--compare-with", default=DEFAULT_BASE, metavar="REV",
                   help="baseline: a git revision or a folder holding a tree (default none: the current code only)")
    p.add_argument("--seed", type=int, default=12)
    p.add_argument("--keep-preset", default=None, metavar="NAME",
                   help="keep only the drawn cases of this preset (e.g. full: the full-dims half of the full space)")
    p.add_argument("--profile", default=None, metavar="PREFIX",
                   help="write a cProfile of the current side per stage to PREFIX-<stage>.prof")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="judge the cases in N processes started together, the cores shared out (as "
                        "`pytest -n N`); the rate is all cases over the wall time of the N")
    p.add_argument("--weights-first", action="store_true",
                   help="draw every case's weights before the clock starts (the rate of a long session, "
                        "which draws each weight set once; the drawing time is printed apart)")
    p.add_argument("--isolate", choices=("on", "off"), default="off",
                   help="judge through each tree's own isolated checker, the candidate in a child process "
                        "(as a default pytest run; default off: check_case in the worker)")
    p.add_argument("--baseline-version", type=int, default=None, metavar="V",
                   help="the baseline judges the same cases at case version V (its draws: a change of "
                        "how cases are drawn timed against the old way); verdicts compared by outcome")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run both sides N times, alternating which goes first; each rated by its fastest run")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--part", default="0/1", help=argparse.SUPPRESS)
    p.add_argument("--cases-file", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.workers < 1:
        p.error(f"--workers must be >= 1, got {args.workers}")
    if args.repeat < 1:
        p.error(f"--repeat must be >= 1, got {args.repeat}")
    if args.isolate == "on" and args.weights_first:
        p.error("--weights-first draws in the worker, which an isolated baseline's child does not share; "
                "leave it out with --isolate on")
    if args.worker:
        return _worker(args)
    if args.baseline_version is not None and args.compare_with in ("none", ""):
        p.error("--baseline-version needs a baseline: name one with --compare-with")

    from k3diff import backends

    backend_name = args.backend or backends.default_name()
    backend = load_available(backend_name)
    base, made = (None, False) if args.compare_with in ("none", "") else baseline_tree(args.compare_with)
    try:
        return _bench(args, backend_name, backend, base)
    finally:
        if made:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, capture_output=True)


def _bench(args, backend_name, backend, base) -> int:
    stages = [s for s in args.stages.split(",") if s]
    rows, mismatches = [], 0
    print(f"backend {backend_name} on {args.device}; preset {args.preset or 'default'}; "
          f"{args.cases} cases per stage; invariance on every {INVARIANCE_EVERY}th; "
          f"{args.workers} worker process{'es' if args.workers > 1 else ''} per side; isolation "
          f"{args.isolate}; {args.repeat} run(s) per side; baseline {args.compare_with if base else 'none'}", flush=True)
    for stage in stages:
        filtered = bool(args.keep_preset or base)
        drawn = draw_cases(stage, args.cases * (3 if filtered else 1), args.preset, args.device,
                           args.seed, backend)
        if args.keep_preset:
            drawn = [d for d in drawn if d["preset"] == args.keep_preset]
        # the baseline's copy of each case: at --baseline-version, the same case drawn the old way
        other = bool(base) and args.baseline_version is not None
        theirs = [dict(d, version=args.baseline_version) for d in drawn] if other else drawn
        if base:
            n = len(drawn)
            read = {id(d) for d in readable_by(base, theirs)}
            pairs = [(a, b) for a, b in zip(drawn, theirs) if id(b) in read]
            drawn, theirs = [a for a, _ in pairs], [b for _, b in pairs]
            if n and not drawn:
                print(f"python -m k3diff.tools.throughput: the baseline {args.compare_with} reads none of the "
                      f"{n} {stage} cases drawn (their fields or case version are newer): compare with a "
                      "newer revision", file=sys.stderr)
                return SEED
        drawn, theirs = drawn[:args.cases], theirs[:args.cases]
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(drawn, f)
        cases_of = {"baseline": f.name, "now": f.name}
        if other:
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as g:
                json.dump(theirs, g)
            cases_of["baseline"] = g.name
        prof = f"{args.profile}-{stage}.prof" if args.profile else None
        new = old = None
        for r in range(args.repeat):
            # alternate which side goes first: a machine whose load drifts slows both alike
            for side in (("now", "baseline") if r % 2 == 0 else ("baseline", "now")):
                if side == "baseline" and not base:
                    continue
                got = _run_side(ROOT if side == "now" else base, cases_of[side], backend_name, args.device,
                                prof if side == "now" and r == 0 else None, args.workers, args.weights_first,
                                args.isolate)
                print(f"  {stage}: {side} {got['cases']} cases in {got['seconds']:.2f} s{_drew(got)}", flush=True)
                best = new if side == "now" else old
                if best is None or got["seconds"] < best["seconds"]:
                    best = got
                if side == "now":
                    new = best
                else:
                    old = best
        for side, got in (("now", new), ("baseline", old)):
            if side == "now" or base:
                print(time_line(stage, side, got), flush=True)
        same = "-"
        if old is not None:
            pairs = list(zip(old["verdicts"] + old["invariance"], new["verdicts"] + new["invariance"]))
            same = min((agreement(a, b) for a, b in pairs), key=AGREEMENT.index, default="bitwise")
            if args.baseline_version is not None and same == "DIFFERENT" and all(
                    outcome(a) == outcome(b) for a, b in pairs):
                same = "outcomes same (other draws)"      # other numbers by construction
            if same == "DIFFERENT":
                mismatches += 1
                if all(outcome(a) == outcome(b) for a, b in pairs):
                    # two trees whose judges differ (more tensors judged, another note): the same
                    # pass / fail / skip / error on every case, said apart from a changed outcome
                    same = "DIFFERENT (outcomes same)"
                # the first case whose verdict differs (pairs past the drawn cases are invariance checks)
                first = next(i for i, (a, b) in enumerate(pairs) if agreement(a, b) == "DIFFERENT")
                what = json.dumps(drawn[first]) if first < len(drawn) else "a batch-invariance check"
                print(f"  verdict differs on {what}", file=sys.stderr)
                for side, v in zip(("baseline", "now"), pairs[first]):
                    print(f"    {side}: {_gist(v)}", file=sys.stderr)
        fails = sum(1 for v in new["verdicts"] if not v["ok"] and not v["skipped"])
        rows.append((stage, len(drawn), fails, old and old["cases"] / old["seconds"],
                     new["cases"] / new["seconds"], same))
        for name in set(cases_of.values()):
            os.unlink(name)
    # ratio: after / before, of cases per second (above 1: the current code is faster)
    print(f"{'stage':7} {'cases':>6} {'fail':>5} {'before/s':>9} {'after/s':>9} {'ratio':>8}  verdicts")
    for stage, n, fails, before, after, same in rows:
        b = f"{before:9.1f}" if before else f"{'-':>9}"
        s = f"{after / before:7.2f}x" if before else f"{'-':>8}"
        print(f"{stage:7} {n:6d} {fails:5d} {b} {after:9.1f} {s}  {same}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
