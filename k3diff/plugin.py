"""The pytest plugin: `pytest --k3diff` runs the differential suite (`k3diff.suite`) against a candidate.

Hooks only (after Hypothesis's own plugin and pytest-randomly): options named once in
`k3diff.options`; the library (torch, Hypothesis, the backends) imported lazily, so the plugin costs
nothing when k3diff is off; one run seed drawn on the controller and handed to xdist workers
(the xdist hook is registered only when xdist is present); the seed and profile in the report
header; every case's result carried on its test report (user_properties), so xdist workers send
them back; one summary at the end, on the controller, with the replay command of every failure and
the command to run next. The run itself lives in `k3diff.session`, shared with the CLI; crash and
hang isolation in `k3diff.isolation`.

Exit status: 0 all passed; 1 a candidate failed (a failing, crashing or hanging case); 4 (pytest's
usage-error code) the command was wrong: an unknown or broken backend, a backend that breaks the
contract, a device that is not here, an unwritable --k3diff-save/--k3diff-report, a shard without
a seed, an unreadable seed file under --k3diff-replay. Each is one line on stderr.
"""
from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path

import pytest

from k3diff import options as opt
from k3diff.session import PROFILES

MARKER = "k3diff"
MUTANT_MARKER = "k3diff_mutants"
REGRESSIONS = Path("corpora") / "regressions"
_REPORT_KEY = "k3diff_cases"
_FAILURE_KEY = "k3diff_failure"
_MUTANT_KEY = "k3diff_mutant"


def pytest_addoption(parser):
    opt.add_options(parser, PROFILES)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    opt.fix_rootdir(early_config, parser, args)


def _parse_shard(text):
    if text is None:
        return None
    try:
        i, n = (int(p) for p in text.split("/"))
    except ValueError:
        raise pytest.UsageError(f"{opt.SHARD} expects I/N such as 1/4, got {text!r}") from None
    if not (n >= 1 and 1 <= i <= n):
        raise pytest.UsageError(f"{opt.SHARD} expects 1 <= I <= N, got {text!r}")
    return i, n


def _run_seed(config):
    given = config.getoption(opt.SEED)
    if given is not None:
        return given
    worker = getattr(config, "workerinput", None)
    if worker and "k3diff_seed" in worker:
        return worker["k3diff_seed"]
    if not hasattr(config, "_k3diff_seed"):
        config._k3diff_seed = random.getrandbits(31)
    return config._k3diff_seed


def _worker_device(config):
    """The device of this process: one GPU per xdist worker (worker index modulo GPU count)."""
    from k3diff.session import pick_device

    device = pick_device(config.getoption(opt.DEVICE))
    worker = getattr(config, "workerinput", None)
    if worker and not device.startswith("cuda"):
        import torch

        torch.set_num_threads(1)        # xdist runs one worker per core: two threads each thrash
    if device == "cuda" and worker:
        import torch

        index = int(worker.get("workerid", "gw0")[2:] or 0)
        gpu = index % max(1, torch.cuda.device_count())
        torch.cuda.set_device(gpu)
        return f"cuda:{gpu}"
    return device


def _make_session(config):
    from k3diff.backends import BackendError
    from k3diff.session import Session, UsageProblem, check_output_dir, open_report

    timeout = config.getoption(opt.TIMEOUT)
    if timeout is not None and not timeout > 0:
        raise pytest.UsageError(f"{opt.TIMEOUT} must be > 0 seconds, got {timeout}")
    try:
        check_output_dir(config.getoption(opt.SAVE), opt.SAVE)
        report = config.getoption(opt.REPORT)
        if report and not hasattr(config, "workerinput"):
            config._k3diff_report = open_report(report)
        session = Session(backend_name=config.getoption(opt.BACKEND), device=_worker_device(config),
                          seed=_run_seed(config), profile=config.getoption(opt.PROFILE),
                          preset=config.getoption(opt.PRESET), save_dir=Path(config.getoption(opt.SAVE)),
                          isolate=config.getoption(opt.ISOLATE) == "on", timeout=timeout)
        if config._k3diff_report is not None:
            from k3diff.results import run_header  # line 1 of the results file: the run and the machine

            _write_report(config, run_header(session, config.getoption(opt.SHARD)))
        return session
    except (BackendError, UsageProblem) as exc:
        raise pytest.UsageError(str(exc)) from None


# ---------------------------------------------------------------- pytest hooks

def pytest_configure(config):
    config.addinivalue_line("markers", f"{MARKER}: a k3diff differential test (runs with {opt.ENABLE})")
    config.addinivalue_line("markers", f"{MUTANT_MARKER}: the planted-bug suite (runs with {opt.MUTANTS})")
    config.addinivalue_line("markers", "gpu: needs a CUDA device")
    config._k3diff_shard = _parse_shard(config.getoption(opt.SHARD))
    config._k3diff_results, config._k3diff_failures, config._k3diff_mutants = [], [], []
    config._k3diff = config._k3diff_report = None
    if config._k3diff_shard and config.getoption(opt.SEED) is None and config.getoption(opt.ENABLE):
        raise pytest.UsageError(f"{opt.SHARD} needs {opt.SEED} N: every shard must draw the same run "
                                f"(e.g. {opt.SHARD} {config.getoption(opt.SHARD)} {opt.SEED} 1234)")
    if config.getoption(opt.ENABLE) or config.getoption(opt.MUTANTS):
        _run_seed(config)
        config._k3diff = _make_session(config)
        config.pluginmanager.register(_Collector(config), "k3diff-collector")
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(_XdistHooks(), "k3diff-xdist")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto` with k3diff on a GPU: one worker per visible GPU (CUDA_VISIBLE_DEVICES respected),
    since each worker takes GPU worker%count."""
    if not config.getoption(opt.ENABLE) or config.getoption(opt.DEVICE) == "cpu":
        return None
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else None


def pytest_unconfigure(config):
    session = getattr(config, "_k3diff", None)
    if session is not None:
        session.close()
    if getattr(config, "_k3diff_report", None) is not None:
        config._k3diff_report.close()


def _write_report(config, record):
    """One JSON line per case, as it arrives (a killed run keeps what it did)."""
    sink = getattr(config, "_k3diff_report", None)
    if sink is not None:
        sink.write(json.dumps(record, sort_keys=True) + "\n")
        sink.flush()


class _XdistHooks:
    def pytest_configure_node(self, node):
        node.workerinput["k3diff_seed"] = node.config._k3diff.seed


def pytest_report_header(config):
    session = config._k3diff
    if session is None:
        return None
    shard = f"; shard {config.getoption(opt.SHARD)}" if config._k3diff_shard else ""
    return (f"k3diff: backend {session.backend_name} on {session.device}; profile {session.profile_name}; "
            f"seed {session.seed}{shard} (rerun: {opt.SEED} {session.seed})")


def pytest_generate_tests(metafunc):
    if "k3diff_seed_file" in metafunc.fixturenames:
        from k3diff.corpus import CorpusError, seed_files

        config = metafunc.config
        regressions = Path(str(config.rootpath)) / REGRESSIONS
        roots = ([regressions] if regressions.exists() else []) + [Path(p) for p in config.getoption(opt.REPLAY)]
        paths = []
        for root in roots:
            try:
                paths += seed_files(root)
            except CorpusError as exc:
                raise pytest.UsageError(str(exc)) from None
        metafunc.parametrize("k3diff_seed_file", [str(p) for p in paths], ids=[p.name for p in paths])
    if "k3diff_chunk" in metafunc.fixturenames:
        metafunc.parametrize("k3diff_chunk", range(PROFILES[metafunc.config.getoption(opt.PROFILE)]["chunks"]))


def pytest_collection_modifyitems(config, items):
    if not config.getoption(opt.MUTANTS):
        skip = pytest.mark.skip(reason=f"k3diff planted-bug suite: run with {opt.MUTANTS}")
        for it in items:
            if it.get_closest_marker(MUTANT_MARKER):
                it.add_marker(skip)
    marked = [it for it in items if it.get_closest_marker(MARKER)]
    if not config.getoption(opt.ENABLE):
        skip = pytest.mark.skip(reason=f"k3diff differential suite: run with {opt.ENABLE}")
        for it in marked:
            it.add_marker(skip)
        return
    if config._k3diff_shard:
        i, n = config._k3diff_shard
        ordered = sorted(marked, key=lambda it: it.nodeid)
        drop = {it.nodeid for k, it in enumerate(ordered) if k % n != i - 1}
        deselected = [it for it in items if it.nodeid in drop]
        items[:] = [it for it in items if it.nodeid not in drop]
        config.hook.pytest_deselected(items=deselected)


@pytest.fixture
def k3diff(request):
    """The k3diff run of this process, bound to the calling test item."""
    session = request.config._k3diff
    if session is None:
        pytest.skip(f"k3diff differential suite: run with {opt.ENABLE}")
    return _ItemRun(session, request.node)


class _ItemRun:
    """One test item's view of the session: records each case on the item's report and turns a
    failing verdict into a saved seed and a pytest failure."""

    def __init__(self, session, item):
        self.session, self.item = session, item

    def _on_case(self, case, verdict, stage=None):
        record = _record(case, verdict)
        record["device"] = self.session.device          # under xdist: this worker's GPU
        if stage:
            record["stage"] = stage
        self.item.user_properties.append((_REPORT_KEY, record))
        _write_report(self.item.config, record)     # here: no-op on an xdist worker (no file)

    def _guard(self, run):
        from k3diff.backends import BackendError
        from k3diff.case import CaseError
        from k3diff.sizing import CaseTooLarge

        try:
            return run()
        except (CaseTooLarge, CaseError, BackendError) as exc:
            pytest.fail(str(exc), pytrace=False)

    def fuzz(self, stage, chunk):
        verdict = self._guard(lambda: self.session.fuzz(stage, chunk, self._on_case))
        if verdict is not None:
            self._fail_with_seed(verdict)

    def fuzz_invariance(self, stage):
        on_case = lambda case, verdict: self._on_case(case, verdict, f"{stage}-inv")  # noqa: E731
        verdict = self._guard(lambda: self.session.fuzz_invariance(stage, on_case))
        if verdict is not None:
            self._fail_with_seed(verdict, prefix=f"batch invariance (position {verdict.position}): ")

    def replay(self, path):
        from k3diff.corpus import CorpusError

        from k3diff.session import compare_with_record

        try:
            verdict, record = self._guard(lambda: self.session.replay(path, self._on_case))
        except CorpusError as exc:
            pytest.fail(str(exc), pytrace=False)
        if verdict.skipped:
            pytest.skip(verdict.skipped)
        if not verdict.ok:
            notes = compare_with_record(verdict, record, self.session.backend_name, self.session.backend)
            self._fail_with_seed(verdict, path, extra=notes)

    def hunt_mutant(self, name):
        from k3diff.mutants import BY_NAME
        from k3diff.session import hunt_mutant

        result = hunt_mutant(name, examples=self.session.profile["examples"],
                             seed=self.item.config.getoption(opt.SEED))
        self.item.user_properties.append((_MUTANT_KEY, dict(vars(result))))
        if not result.caught:
            pytest.fail(f"mutant {name} ({BY_NAME[name].description}) survived {result.examples} examples",
                        pytrace=False)

    def _fail_with_seed(self, verdict, existing=None, prefix="", extra=()):
        from k3diff.corpus import replay_command

        if existing:
            path, command = existing, replay_command(existing, self.session.backend_name)
        else:
            path, command = self.session.save_failure(verdict)
        headline = prefix + verdict.headline()
        self.item.user_properties.append((_FAILURE_KEY, {
            "stage": verdict.case.stage, "path": str(path), "replay": command, "headline": headline}))
        details = "\n".join("  " + line for line in list(verdict.failures()) + list(verdict.notes) + list(extra))
        pytest.fail(f"{headline}\n{details}\n  seed: {path}\n  replay: {command}", pytrace=False)


def _record(case, verdict):
    from k3diff.coverage import coverage_fields
    from k3diff.results import record  # the results-file format lives in k3diff/results.py

    return dict(record(case, verdict), **coverage_fields(case))


class _Collector:
    """Gathers the case records that tests (here or on xdist workers) attach to their reports."""

    def __init__(self, config):
        self.config = config

    def pytest_runtest_logreport(self, report):
        if report.when != "call":
            return
        sinks = {_REPORT_KEY: self.config._k3diff_results, _FAILURE_KEY: self.config._k3diff_failures,
                 _MUTANT_KEY: self.config._k3diff_mutants}
        from_worker = getattr(report, "node", None) is not None    # xdist: written here as it arrives
        for key, value in report.user_properties:
            if key in sinks:
                sinks[key].append(value)
            if key == _REPORT_KEY and from_worker:
                _write_report(self.config, value)
            elif key == _FAILURE_KEY:                                   # a saved seed, wherever it ran
                _write_report(self.config, dict(value, kind="failure"))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if config._k3diff is None or hasattr(config, "workerinput"):
        return
    tr, session = terminalreporter, config._k3diff
    if config._k3diff_mutants:
        from k3diff.mutants import HuntResult, table

        tr.section("k3diff mutants")
        for line in table([HuntResult(**r) for r in sorted(config._k3diff_mutants, key=lambda r: r["mutant"])]):
            tr.write_line(line)
    results, failures = config._k3diff_results, config._k3diff_failures
    if config._k3diff_mutants and not results and not config.getoption(opt.ENABLE):
        return                                      # a mutant run: its table above is the summary
    tr.section("k3diff summary")
    tr.write_line(f"backend {session.backend_name} on {session.device}; profile {session.profile_name}; "
                  f"seed {session.seed}" + (f"; shard {config.getoption(opt.SHARD)}" if config._k3diff_shard else ""))
    for line in summary_lines(results):
        tr.write_line(line)
    from k3diff.coverage import coverage_lines
    for line in coverage_lines(results, session.space.boundaries):
        tr.write_line(line)
    devices = defaultdict(int)
    for r in results:
        devices[r.get("device", session.device)] += 1
    if len(devices) > 1:
        tr.write_line("cases per device: " + ", ".join(f"{d} {n}" for d, n in sorted(devices.items())))
    for f in {f["path"]: f for f in failures}.values():
        tr.write_line(f"FAILED {f['headline']}")
        tr.write_line(f"   replay: {f['replay']}")
    rerun = f"pytest {opt.ENABLE} {opt.SEED} {session.seed} {opt.PROFILE} {session.profile_name}"
    if failures:
        tr.write_line(f"next: replay a seed above; after the fix, rerun with `{rerun}` and copy the seeds "
                      "into corpora/regressions/ so they are replayed on every run")
    elif any(not r["ok"] and not r["skipped"] for r in results) or exitstatus not in (0, 5):
        tr.write_line("next: the run failed (see the errors above); no seed was recorded for it")
    elif results:
        tr.write_line(f"next: all cases passed; this run again: `{rerun}`; a bigger budget: "
                      f"{opt.PROFILE} nightly -n auto")


def summary_lines(results):
    by_stage = defaultdict(list)
    for r in results:
        by_stage[r["stage"]].append(r)
    # cases: distinct cases judged; fail: distinct failing cases (not Hypothesis's shrink attempts,
    # which re-judge variants of one failure: those are in `runs`, every call made)
    columns = [("stage", "9", lambda rs: rs[0]["stage"]),
               ("cases", ">6", lambda rs: len({r["id"] for r in rs})),
               ("runs", ">5", len),
               ("fail", ">5", lambda rs: len({r["id"] for r in rs if not r["ok"] and not r["skipped"]})),
               ("crash", ">5", lambda rs: len({r["id"] for r in rs if (r.get("error") or "").startswith(
                   ("crash:", "hang:"))})),
               ("skip", ">5", lambda rs: len({r["id"] for r in rs if r["skipped"]})),
               ("cases/s", ">8", _rate),
               ("ties", ">5", lambda rs: sum(r["tie_flips"] for r in rs)),
               ("forced", ">6", lambda rs: sum(1 for r in rs if r["forced"])),
               ("worst (tensor, % of budget)", "", _worst),
               ("accuracy (tensor, u·Σ|ab|)", "", _accuracy)]
    lines = [" ".join(f"{name:{fmt}}" for name, fmt, _ in columns)]
    for stage in sorted(by_stage):
        lines.append(" ".join(f"{fn(by_stage[stage]):{fmt}}" for _, fmt, fn in columns))
    return lines


def _rate(rs):
    secs = sum(r["seconds"] for r in rs)
    return f"{len(rs) / secs if secs > 0 else float('inf'):.1f}"


def _accuracy(rs):
    """The least accurate f32 accumulation of a stage: its error in units of u·Σ|a||b| (k3diff.budgets)."""
    classed = [(t["accuracy"], t["tensor"]) for r in rs for t in r.get("tensors", ()) if t.get("accuracy") is not None]
    if not classed:
        return "-"
    acc, tensor = max(classed)
    return f"{tensor} {acc:.3g}"


def _worst(rs):
    worst = max((r["worst"] for r in rs if r["worst"]), key=lambda w: w[1], default=None)
    from k3diff.budgets import pct

    return f"{worst[0]} {pct(worst[1])}" if worst else "-"
