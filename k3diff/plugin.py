"""The pytest plugin: `pytest --k3diff` runs the differential suite (`k3diff.suite`) against a candidate.

Hooks only (after Hypothesis's own plugin and pytest-randomly): options named once in
`k3diff.options`; the run's state one object in `config.stash` (`k3diff.run_state`);
the library (torch, Hypothesis, the backends) imported lazily, so the plugin costs
nothing when k3diff is off; one run seed drawn on the controller and handed to xdist workers
(the xdist hook is registered only when xdist is present); the seed and profile in the report
header; every case streamed to the results file as it is judged (under xdist each worker writes its
own part, k3diff/results.py) and carried on its test report (user_properties, shortened before
JUnit reads them), so the controller's summary sees every case; a progress line
(k3diff/progress.py); the planted-bug suite collected only with --k3diff-mutants; one summary at
the end, on the controller, with the replay command of every failure and the command to run next. The run itself lives in `k3diff.session`, shared with the CLI; crash and
hang isolation in `k3diff.isolation`.

Exit status: the table in k3diff/exit_codes.py, shared with the `k3diff` CLI. 0 all passed; 1 a
candidate failed (a failing, crashing or hanging case) and nothing else; 4 the command was wrong (an
option value, a shard without a seed); 6 nothing judged; 7 the results file lost mid-run; 8 the
backend cannot be used (unknown, or it crashes, hangs, raises or exits while imported, built or
asked available(), in the child under --k3diff-timeout; or it breaks the contract); 9 a seed under
--k3diff-replay that cannot be read; 10 an output path that cannot be written; 11 not on this
machine (no such device, a case too big for its GPU, too many workers). Each is one line on stderr.
"""
from __future__ import annotations

import json
import math
import os
import random
import shlex
import sys
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest

from k3diff import exit_codes, observations, rerun, saved_first
from k3diff import options as opt
from k3diff.early_exit import guard_command_line
from k3diff.progress import Progress, Tail, TerminalLine
from k3diff.refusals import refusal_lines
from k3diff.results import end_record, loaded_record, record, run_header, worker_path
from k3diff.run_state import run_state
from k3diff.session import (PROFILES, Session, UsageProblem, check_output_dir, compare_with_record,
                            hunt_mutant, open_report)

# the summary's numbers, JUnit's short fields, the progress line's budgets, the user_properties keys
from k3diff.summary import (BAD_INPUT_KEY, FAILURE_KEY, MUTANT_KEY, REPORT_KEY, budgets_from_ids,
                            distinct_judged, junit_properties, l2_lines, minimal_failures, near_edge_lines,
                            summary_lines, time_lines)
from k3diff.usage import MachineProblem

MARKER = "k3diff"
MUTANT_MARKER = "k3diff_mutants"
# a stage an item was run for (the nothing-judged rule); dropped before JUnit (summary.junit_properties)
_ASKED_KEY = "k3diff_asked"
# pytest's way to end a run with a status of one's own before any test; named ERROR so that its one
# line reads like pytest's usage errors ("ERROR: ...")
_Stop = type("ERROR", (pytest.exit.Exception,), {})


def _stop(exc):
    """End the run now: the error's one line and its own exit status (k3diff/exit_codes.py)."""
    return _Stop(str(exc), returncode=exit_codes.status_of(exc))


def pytest_addoption(parser):
    opt.add_options(parser, PROFILES)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    opt.refuse_moved_rootdir(early_config, parser, args)      # pytest's public API only (k3diff/options.py)
    opt.add_default_suite(early_config, parser, args)


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


def _xdist_on(config) -> bool:
    return bool(config.pluginmanager.hasplugin("xdist") and getattr(config.option, "numprocesses", None)
                and not getattr(config.option, "dist", "no") == "no")


def _run_id(config) -> str:
    """One token per run, shared with the workers: a part streamed by a worker belongs to the
    controller file with the same run id (not a stale part of an earlier run in that folder)."""
    worker = getattr(config, "workerinput", None)
    if worker and "k3diff_run_id" in worker:
        return worker["k3diff_run_id"]
    state = run_state(config)
    if state.run_id is None:
        state.run_id = f"{random.getrandbits(48):012x}"
    return state.run_id


def _run_seed(config):
    given = config.getoption(opt.SEED)
    if given is not None:
        return given
    worker = getattr(config, "workerinput", None)
    if worker and "k3diff_seed" in worker:
        return worker["k3diff_seed"]
    state = run_state(config)
    if state.seed is None:
        state.seed = random.getrandbits(31)
    return state.seed


def _worker_device(config):
    """The device of this process: one GPU per xdist worker (worker index modulo GPU count)."""
    from k3diff.session import pick_device

    device = pick_device(config.getoption(opt.DEVICE))
    worker = getattr(config, "workerinput", None)
    if worker and not device.startswith("cuda"):
        import torch

        torch.set_num_threads(1)        # xdist runs one worker per core: two threads each thrash
    if device == "cuda" and not worker and _xdist_on(config):
        import torch

        from k3diff.sizing import workers_too_many

        n = config.option.numprocesses
        why = isinstance(n, int) and workers_too_many(n, torch.cuda.device_count(),
                                                      torch.cuda.get_device_properties(0).total_memory)
        if why:
            raise _stop(MachineProblem(f"k3diff: {why}"))
    if device == "cuda" and worker:
        import torch

        from k3diff.gpu_share import share_gpu

        index = int(worker.get("workerid", "gw0")[2:] or 0)
        gpus = max(1, torch.cuda.device_count())
        gpu = index % gpus
        torch.cuda.set_device(gpu)
        # workers beyond the GPU count share a GPU: each gets its part of the memory
        share_gpu(gpu, len(range(gpu, int(worker.get("workercount", gpus)), gpus)))
        return f"cuda:{gpu}"
    return device


def _make_session(config):
    from k3diff.backends import BackendError

    timeout = config.getoption(opt.TIMEOUT)
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise pytest.UsageError(f"{opt.TIMEOUT} must be > 0 seconds and finite, got {timeout}")
    if config.getoption(opt.ISOLATE) == "off" and not hasattr(config, "workerinput"):
        # before the backend loads: an early exit is never green
        guard_command_line(config.getoption(opt.SAVE), tuple(config.invocation_params.args))
    try:
        worker = getattr(config, "workerinput", {}).get("workerid")
        if worker is None:                  # the controller probed it before its workers started
            check_output_dir(config.getoption(opt.SAVE), opt.SAVE)
        report = config.getoption(opt.REPORT)
        if report:
            # under xdist each worker streams its own part (results.worker_path); the controller's
            # file holds the run line, the saved failures and the end record
            run_state(config).report = open_report(worker_path(report, worker) if worker else report)
            _write_start_record(config, worker, report)     # before the backend loads
            from k3diff import observations                 # the cases as Hypothesis observability lines

            observations.start(config, worker_path(report, worker) if worker else report)
        session = Session(backend_name=config.getoption(opt.BACKEND), device=_worker_device(config),
                          seed=_run_seed(config), profile=config.getoption(opt.PROFILE),
                          preset=config.getoption(opt.PRESET), save_dir=Path(config.getoption(opt.SAVE)),
                          isolate=config.getoption(opt.ISOLATE) == "on", timeout=timeout)
        # a distributed candidate's ranks; imported here, as k3diff.rank_pool reads K3DIFF_RANK_TIMEOUT
        # at import and every pytest run in this environment loads the plugin
        from k3diff.distributed import apply_ranks

        apply_ranks(session, config.getoption(opt.RANKS))
        if run_state(config).report is not None:
            _write_report(config, loaded_record(session))
        return session
    except (BackendError, UsageProblem) as exc:
        _write_stop_record(config, exit_codes.status_of(exc), str(exc))
        raise _stop(exc) from None
    except _Stop as exc:                    # this machine cannot run it (_worker_device)
        _write_stop_record(config, exc.returncode, str(exc.msg))
        raise


# ---------------------------------------------------------------- the results file's start and end
# records around a run that stops before judging (the nightly merge reads the end record's status)

def _write_start_record(config, worker, report):
    """Line 1 of the results file from the command line alone, written before the backend loads,
    so a backend that cannot load leaves a file that names the run (k3diff.results.run_header)."""
    known = SimpleNamespace(seed=_run_seed(config), profile_name=config.getoption(opt.PROFILE),
                            backend_name=config.getoption(opt.BACKEND), device=config.getoption(opt.DEVICE))
    header = run_header(known, config.getoption(opt.SHARD), worker=worker,
                        parts=() if worker or not _xdist_on(config) else [f"{Path(report).name}:gw*"])
    header["run_id"] = _run_id(config)
    if worker is None:                      # the command that repeats the run, as data (k3diff/rerun.py)

        header["rerun"] = rerun.pytest_record(config, known.seed)
    run_state(config).started = header["started_unix"]
    _write_report(config, header)


def _write_stop_record(config, status, line):
    """The end record of a run that stops before any case (pytest's sessionfinish never comes):
    its exit status and its one line."""
    state = run_state(config)
    if state.report is None or state.started is None:
        return

    _write_report(config, end_record(state.started, status, 0, 0, error=line))
    state.started = None                    # one end record


# ---------------------------------------------------------------- pytest hooks

def pytest_configure(config):
    config.addinivalue_line("markers", f"{MARKER}: a k3diff differential test (runs with {opt.ENABLE})")
    config.addinivalue_line("markers", f"{MUTANT_MARKER}: the planted-bug suite (runs with {opt.MUTANTS})")
    state = run_state(config)
    state.shard = _parse_shard(config.getoption(opt.SHARD))
    if state.shard and config.getoption(opt.SEED) is None and config.getoption(opt.ENABLE):
        raise pytest.UsageError(f"{opt.SHARD} needs {opt.SEED} N: every shard must draw the same run "
                                f"(e.g. {opt.SHARD} {config.getoption(opt.SHARD)} {opt.SEED} 1234)")
    if config.getoption(opt.ENABLE) or config.getoption(opt.MUTANTS):
        _run_seed(config)
        state.session = _make_session(config)
        _check_replay_paths(config)
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
    observations.finish(config)
    state = run_state(config)
    if state.tail is not None:
        state.tail.stop.set()
    if state.session is not None:
        state.session.close()
    if state.report is not None:
        try:
            state.report.close()
        except OSError:             # its last flush on a full disk: said at sessionfinish if it was lost
            pass


def _write_report(config, record):
    """One JSON line per case, as it arrives (a killed run keeps what it did)."""
    state = run_state(config)
    sink = state.report
    if sink is not None:
        try:
            sink.write(json.dumps(record, sort_keys=True) + "\n")
            sink.flush()
        except OSError as exc:      # disk full: the run goes on; one line and its exit status at the end
            state.report = None
            state.report_lost = (f"k3diff: {opt.REPORT} {config.getoption(opt.REPORT)}: write failed "
                                 f"({exc.strerror or exc}); the results file is incomplete")
            try:
                sink.close()
            except OSError:
                pass


def _rerun_line(config) -> str:
    """The command that repeats this run (k3diff/rerun.py); on an xdist worker, the controller's."""
    worker = getattr(config, "workerinput", None)
    if worker and "k3diff_rerun" in worker:
        return worker["k3diff_rerun"]

    return rerun.pytest_line(config, _run_seed(config))


class _XdistHooks:
    def pytest_configure_node(self, node):
        node.workerinput["k3diff_seed"] = run_state(node.config).session.seed
        node.workerinput["k3diff_run_id"] = _run_id(node.config)
        node.workerinput["k3diff_rerun"] = _rerun_line(node.config)


def pytest_pycollect_makeitem(collector, name, obj):
    """The planted-bug suite is not collected at all without --k3diff-mutants (a default run says
    only what it did: no pile of skipped mutant items)."""
    marks = getattr(obj, "pytestmark", ())
    if callable(obj) and any(getattr(m, "name", None) == MUTANT_MARKER for m in marks) \
            and not collector.config.getoption(opt.MUTANTS):
        return []
    return None


def _write_end_record(session, exitstatus):
    """The end record: a results file without it was cut short (killed, or still running)."""
    config = session.config
    state = run_state(config)
    if state.report is None or state.started is None:
        return

    # on a worker these are its own items' records (its collector saw its reports first)
    judged = distinct_judged(state.results)
    failing = len(minimal_failures(state.results, state.failures))
    _write_report(config, end_record(state.started, exitstatus, len(judged), failing))


def _check_replay_paths(config):
    """Every --k3diff-replay path exists before a case runs: a typo is exit 9 and one line, not a
    collection error that reads like pytest's own failure."""
    from k3diff.corpus import CorpusError, seed_files

    for root in config.getoption(opt.REPLAY):
        try:
            seed_files(root)
        except CorpusError as exc:
            _write_stop_record(config, exit_codes.status_of(exc), str(exc))
            raise _stop(exc) from None


def pytest_report_header(config):
    state = run_state(config)
    session = state.session
    if session is None:
        return None
    shard = f"; shard {config.getoption(opt.SHARD)}" if state.shard else ""
    return (f"k3diff: backend {session.backend_name} on {session.device}; profile {session.profile_name}; "
            f"seed {session.seed}{shard} (rerun: {opt.SEED} {session.seed})")


def pytest_generate_tests(metafunc):
    if "k3diff_seed_file" in metafunc.fixturenames:
        from k3diff.corpus import CorpusError, regression_dirs, seed_files

        config = metafunc.config
        roots = regression_dirs(config.rootpath) + [Path(p) for p in config.getoption(opt.REPLAY)]
        paths = []
        for root in roots:
            try:
                paths += seed_files(root)
            except CorpusError as exc:
                raise pytest.UsageError(str(exc)) from None
        saved = saved_first.seeds(config, already=paths)        # earlier runs' failing seeds, replayed first
        metafunc.parametrize("k3diff_seed_file", [str(p) for p in paths + saved],
                             ids=[p.name for p in paths] + [saved_first.PREFIX + p.name for p in saved])
    if "k3diff_chunk" in metafunc.fixturenames:
        metafunc.parametrize("k3diff_chunk", range(PROFILES[metafunc.config.getoption(opt.PROFILE)]["chunks"]))


def _start_progress(config, nodeids) -> None:
    """The live progress line (k3diff/progress.py), on the process that owns the terminal."""
    run = run_state(config)
    if hasattr(config, "workerinput") or run.session is None or run.budgets_sent:
        return
    run.budgets_sent = True                 # once: xdist calls this for every worker
    budgets = budgets_from_ids(nodeids, run.session.profile)
    _write_report(config, {"kind": "budgets", "budgets": budgets})
    tr = config.pluginmanager.get_plugin("terminalreporter")
    mode = os.environ.get("K3DIFF_PROGRESS")
    if tr is None or config.option.verbose < 0 or mode == "off" or not config.getoption(opt.ENABLE):
        return

    # under xdist the controller prints each worker's result as it lands, and our cases arrive in
    # the same hook: whole lines there, never a live line (K3DIFF_PROGRESS=tty included);
    # k3diff/progress.py draws through pytest's public terminal API either way
    tty = not _xdist_on(config) and (mode == "tty" or (mode != "log" and bool(tr.isatty)))
    write = TerminalLine(tr, tty, config.pluginmanager.getplugin("capturemanager"))

    interval = os.environ.get("K3DIFF_PROGRESS_INTERVAL")
    run.progress = Progress(budgets, write, tty, float(interval) if interval else None)
    run.progress_restore = write.end if tty else None
    report = config.getoption(opt.REPORT)
    if _xdist_on(config) and report:        # the workers' parts, tailed: cases as they are judged
        run.tail = Tail(report, run.progress)
        run.tail.start()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    _start_progress(node.config, ids)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    # last: after -k and -m have deselected (pytest's own hook), so a shard is a share of the items
    # the command selects; first, the shards split every collected item and `-k moe --k3diff-shard
    # 1/2` could hold none of the selected ones (exit 5) while shard 2 held them all
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

    shard = run_state(config).shard
    if shard:
        i, n = shard
        ordered = sorted((it for it in marked if not saved_first.is_saved(it)), key=lambda it: it.nodeid)
        drop = {it.nodeid for k, it in enumerate(ordered) if k % n != i - 1}
        deselected = [it for it in items if it.nodeid in drop]
        items[:] = [it for it in items if it.nodeid not in drop]
        config.hook.pytest_deselected(items=deselected)
    saved_first.first(items)                # earlier runs' failing seeds: every shard, and first
    if not _xdist_on(config):
        _start_progress(config, [it.nodeid for it in items if it.get_closest_marker(MARKER)])


@pytest.fixture(scope="session", autouse=True)
def _k3diff_rerun_property(request):
    """The rerun line as a JUnit <testsuite> property (pytest's record_testsuite_property; under
    xdist, which that fixture does not support, a failing testcase carries it instead)."""
    session = run_state(request.config).session
    if session is not None and not hasattr(request.config, "workerinput"):
        request.getfixturevalue("record_testsuite_property")("k3diff_rerun", _rerun_line(request.config))


@pytest.fixture
def k3diff(request):
    """The k3diff run of this process, bound to the calling test item."""
    session = run_state(request.config).session
    if session is None:
        pytest.skip(f"k3diff differential suite: run with {opt.ENABLE}")
    return _ItemRun(session, request.node)


class _ItemRun:
    """One test item's view of the session: records each case on the item's report and turns a
    failing verdict into a saved seed and a pytest failure."""

    def __init__(self, session, item):
        self.session, self.item = session, item
        self.failed_once = False
        self.too_large: list = []                       # skipped lines of cases this machine could not hold

    def _on_case(self, case, verdict, stage=None, phase=None):
        record = _record(case, verdict)
        record["device"] = self.session.device          # under xdist: this worker's GPU
        if stage:
            record["stage"] = stage
        # after an item's first failure every further case is Hypothesis shrinking it: tagged, so
        # counts and the report fold the steps under the minimal seed instead of counting each
        record["phase"] = phase or ("shrink" if self.failed_once else "generate")
        record["item"] = self.item.nodeid
        record["judged_at"] = round(time.time(), 3)            # the progress line's replay, the report's timeline
        if not verdict.ok and not verdict.skipped:
            self.failed_once = True
        if getattr(verdict, "too_large", False):         # k3diff.search.skip_too_large
            self.too_large.append(verdict.skipped)
        self.item.user_properties.append((REPORT_KEY, record))
        config = self.item.config
        run_state(config).in_flight.append(record)
        _write_report(config, record)               # streamed here, on this worker or the only process
        observations.add(config, record)
        progress = run_state(config).progress
        if progress is not None:
            progress.add(record)

    def _guard(self, run):
        from k3diff.backends import BackendError
        from k3diff.case import CaseError
        from k3diff.sizing import CaseTooLarge

        try:
            return run()
        except (CaseTooLarge, CaseError, BackendError) as exc:
            self._bad_input(exc)

    def _bad_input(self, exc):
        """An input this run cannot judge (k3diff/exit_codes.py): its test fails with the one line,
        and the run's status is the input's own unless a candidate failed."""
        self.item.user_properties.append((BAD_INPUT_KEY, {"status": exit_codes.status_of(exc), "line": str(exc)}))
        pytest.fail(str(exc), pytrace=False)

    def fuzz(self, stage, chunk):
        self.item.user_properties.append((_ASKED_KEY, stage))
        verdict = self._guard(lambda: self.session.fuzz(stage, chunk, self._on_case))
        if verdict is not None:
            self._fail_with_seed(verdict)
        self._machine_limits()

    def fuzz_invariance(self, stage):
        self.item.user_properties.append((_ASKED_KEY, stage))
        on_case = lambda case, verdict: self._on_case(case, verdict, f"{stage}-inv")  # noqa: E731
        verdict = self._guard(lambda: self.session.fuzz_invariance(stage, on_case))
        if verdict is not None:
            self._fail_with_seed(verdict, prefix=f"batch invariance (position {verdict.position}): ")
        self._machine_limits()

    def _machine_limits(self):
        """A search that passed past cases this machine could not hold (k3diff.search.skip_too_large:
        every other case of it was judged) fails with their line: exit 11 unless a candidate failed."""
        from k3diff.sizing import CaseTooLarge

        if self.too_large:
            more = f" (+{len(self.too_large) - 1} more case(s) of this test)" if len(self.too_large) > 1 else ""
            self._bad_input(CaseTooLarge(self.too_large[0] + more))

    def replay(self, path):
        from k3diff.corpus import CorpusError

        try:
            verdict, record = self._guard(lambda: self.session.replay(
                path, lambda c, v: self._on_case(c, v, phase="replay")))
        except CorpusError as exc:
            self._bad_input(exc)
        if verdict.skipped:
            pytest.skip(verdict.skipped)
        if not verdict.ok:
            notes = compare_with_record(verdict, record, self.session.backend_name, self.session.backend)
            self._fail_with_seed(verdict, path, extra=notes)

    def hunt_mutant(self, name):
        from k3diff.mutants import BY_NAME

        result = hunt_mutant(name, examples=self.session.profile["examples"],
                             seed=self.item.config.getoption(opt.SEED))
        self.item.user_properties.append((MUTANT_KEY, dict(vars(result))))
        if not result.caught:
            pytest.fail(f"mutant {name} ({BY_NAME[name].description}) survived {result.examples} examples",
                        pytrace=False)

    def _fail_with_seed(self, verdict, existing=None, prefix="", extra=()):
        from k3diff.corpus import case_id

        path = existing if existing else self.session.save_failure(verdict)[0]
        # shell-quoted: a seed path with a space or a backend module:object pastes as one word
        command = shlex.join(["k3diff", "replay", str(path), "--backend", self.session.backend_name])
        headline = prefix + verdict.headline()
        self.item.user_properties.append((FAILURE_KEY, {
            "stage": verdict.case.stage, "path": str(path), "replay": command, "headline": headline,
            "item": self.item.nodeid, "id": case_id(verdict.case), "rerun": _rerun_line(self.item.config)}))
        details = "\n".join("  " + line for line in list(verdict.failures()) + list(verdict.notes) + list(extra))
        pytest.fail(f"{headline}\n{details}\n  seed: {path}\n  replay: {command}", pytrace=False)


def _record(case, verdict):
    from k3diff.coverage import coverage_fields

    return dict(record(case, verdict), **coverage_fields(case, verdict))   # the format: k3diff/results.py


class _Collector:
    """Gathers the case records that tests (here or on xdist workers) attach to their reports."""

    def __init__(self, config):
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report):
        state = run_state(self.config)
        restore = state.progress_restore
        if restore is not None:
            restore()                       # the live progress line ends: pytest's own output below it
        if report.when == "teardown":
            # before junitxml reads them: a few short fields per item, not every case record
            # (those are in the results file)
            report.user_properties = junit_properties(report.user_properties)
            return
        if report.failed:
            state.failed_reports += 1
        if report.when != "call":
            return
        if getattr(report, "node", None) is None:
            state.in_flight.clear()                 # this process's item ended: its cases are on the report
        sinks = {BAD_INPUT_KEY: state.bad_inputs, REPORT_KEY: state.results, FAILURE_KEY: state.failures,
                 MUTANT_KEY: state.mutants, _ASKED_KEY: state.asked}
        from_worker = getattr(report, "node", None) is not None
        for key, value in report.user_properties:
            if key in sinks:
                sinks[key].append(value)
            if key == REPORT_KEY and from_worker and state.progress is not None and state.tail is None:
                state.progress.add(value)   # a worker's cases, once its item ends
            elif key == FAILURE_KEY and not hasattr(self.config, "workerinput"):
                _write_report(self.config, dict(value, kind="failure"))    # a saved seed, wherever it ran


def _unjudged_stages(config) -> list:
    """Stages the run asked for (a test item of the stage was run, or a case of it drawn or
    replayed) of which no case was judged: every one refused (`stages`, supports()), or none met.
    Every stage asked counts, not only those the candidate claims: a candidate that implements
    none of them judged nothing, and that is not a pass."""
    state = run_state(config)
    by_stage = defaultdict(list)
    for stage in state.asked:
        by_stage[stage]
    for r in state.results:
        by_stage[str(r["stage"]).split("-")[0]].append(r)
    # refused by the candidate (k3diff.runner: "backend ... does not ..."); a case the machine
    # could not hold or judge in time is the machine's, reported with its own line and exit 11
    refused = lambda r: bool(r["skipped"]) and str(r["skipped"]).startswith("backend ")  # noqa: E731
    return sorted(st for st, rs in by_stage.items() if all(refused(r) for r in rs))


def _bad_input_status(config):
    """The status of a run whose every failure was an input it could not judge (None otherwise)."""
    state = run_state(config)
    bad = state.bad_inputs
    if not bad or state.failed_reports > len(bad):
        return None                                 # some test failed for another reason: exit 1
    return exit_codes.worst(b["status"] for b in bad)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """A run that judged nothing for a stage the candidate claims, or lost its results file, is not
    a pass: its own exit status and one line."""
    config = session.config
    state = run_state(config)
    if state.session is None:
        return
    if hasattr(config, "workerinput"):
        _write_end_record(session, session.exitstatus)      # a worker's own part of the results
        return
    status = _bad_input_status(config)
    if session.exitstatus == exit_codes.FAIL and status:
        session.exitstatus = status
    unjudged = _unjudged_stages(config)
    # only where no bad input set the status: a case too large for this machine is skipped too,
    # and it is the machine's line (exit 11), not the candidate refusing every case
    if unjudged and session.exitstatus in (exit_codes.PASS, exit_codes.FAIL):
        print(f"k3diff: nothing judged for stage {', '.join(unjudged)}: the candidate refused every case "
              "(stages, supports()); that is not a pass", file=sys.stderr)
    if state.report_lost:
        print(state.report_lost, file=sys.stderr)
    if session.exitstatus == 0 and unjudged:
        session.exitstatus = exit_codes.NOTHING_JUDGED      # past pytest's own 0-5
    elif session.exitstatus == 0 and state.report_lost:
        session.exitstatus = exit_codes.OUTPUT_LOST
    _write_end_record(session, session.exitstatus)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    state = run_state(config)
    if state.session is None or hasattr(config, "workerinput"):
        return
    tr, session = terminalreporter, state.session
    if state.mutants:
        from k3diff.mutants import HuntResult, table

        tr.section("k3diff mutants")
        for line in table([HuntResult(**r) for r in sorted(state.mutants, key=lambda r: r["mutant"])]):
            tr.write_line(line)
    # the cases of an item stopped mid-way (no report came for it) count: they were judged
    results, failures = state.results + state.in_flight, state.failures
    if state.mutants and not results and not config.getoption(opt.ENABLE):
        return                                      # a mutant run: its table above is the summary
    tr.section("k3diff summary")
    tr.write_line(f"backend {session.backend_name} on {session.device}; profile {session.profile_name}; "
                  f"seed {session.seed}" + (f"; shard {config.getoption(opt.SHARD)}" if state.shard else ""))
    # where the cases' time went, under the table whose cases/s it explains
    for line in summary_lines(results, failures) + time_lines(results):
        tr.write_line(line)
    from k3diff.coverage import coverage_lines
    for line in coverage_lines(distinct_judged(results), session.space.boundaries):
        tr.write_line(line)
    for line in refusal_lines(results):         # cases the candidate refused (supports())
        tr.write_line(line)
    for line in near_edge_lines(results) + l2_lines(results):
        tr.write_line(line)
    devices = defaultdict(int)
    for r in results:
        devices[r.get("device", session.device)] += 1
    if len(devices) > 1:
        tr.write_line("cases per device: " + ", ".join(f"{d} {n}" for d, n in sorted(devices.items())))
    for f in {f["path"]: f for f in failures}.values():
        tr.write_line(f"FAILED {f['headline']}")
        tr.write_line(f"   replay: {f['replay']}")
    rerun = _rerun_line(config)             # the recorded command, seed pinned (k3diff/rerun.py)
    if failures:
        tr.write_line(f"next: replay a seed above; after the fix, rerun with `{rerun}` and copy the seeds "
                      "into corpora/regressions/ so they are replayed on every run")
    elif _bad_input_status(config):
        lines = sorted({b["line"] for b in state.bad_inputs})
        status = _bad_input_status(config)
        tr.write_line(f"next: exit {status} ({exit_codes.MEANING[status]}): {len(state.bad_inputs)} "
                      f"test(s) could not be judged here, not the candidate's fault; "
                      + ("a machine with more memory judges it: " if status == exit_codes.MACHINE else "fix the input: ")
                      + lines[0]
                      + (f" (and {len(lines) - 1} more above)" if len(lines) > 1 else ""))
    elif exitstatus == exit_codes.INTERRUPTED and not any(not r["ok"] and not r["skipped"] for r in results):
        judged = len(distinct_judged(results))
        tr.write_line(f"next: the run was stopped (Ctrl-C or a time limit) after {judged} judged case(s), none "
                      f"failing (a partial verdict, not a pass); the whole run: `{rerun}`")
    elif any(not r["ok"] and not r["skipped"] for r in results) or exitstatus not in (0, 5):
        tr.write_line("next: the run failed (see the errors above); no seed was recorded for it")
    elif _unjudged_stages(config):
        tr.write_line(f"next: nothing was judged for stage {', '.join(_unjudged_stages(config))}; the candidate "
                      "refused every case (stages, supports()): drop the stage (-k) or fix the candidate")
    elif results:
        tr.write_line(f"next: all cases passed; this run again: `{rerun}`; a bigger budget: "
                      f"{opt.PROFILE} nightly -n auto")
