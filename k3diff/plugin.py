"""The pytest plugin: `pytest --k3diff` runs the differential suite against a candidate backend.

Shape (after Hypothesis's own plugin and pytest-randomly): one option group; markers registered in
pytest_configure; every case's result carried on the test report (user_properties), so pytest-xdist
workers send them back; one summary at the end, on the controller, with the replay command of every
failure and the command to run next.
"""
from __future__ import annotations

import hashlib
import json
import random
from collections import defaultdict
from pathlib import Path

import pytest

PROFILES = {
    # examples per stage, split into this many test items (so xdist and shards can spread them)
    "quick": {"examples": 8, "chunks": 2},
    "ci": {"examples": 40, "chunks": 4},
    "nightly": {"examples": 2000, "chunks": 32},
}
MARKER = "k3diff"
REGRESSIONS = Path("corpora") / "regressions"
_REPORT_KEY = "k3diff_cases"
_FAILURE_KEY = "k3diff_failure"
_MUTANT_KEY = "k3diff_mutant"
MUTANT_MARKER = "k3diff_mutants"


def pytest_addoption(parser):
    group = parser.getgroup("k3diff", "k3diff differential testing of the K3 decode megakernel")
    group.addoption("--k3diff", action="store_true", default=False,
                    help="run the differential suite (skipped without this flag)")
    group.addoption("--k3diff-backend", default=None, metavar="NAME",
                    help="candidate: a registered name (megakernel, torch-blocked, torch, reference, "
                         "or an entry point of group k3diff.backends) or module:object. "
                         "Default: megakernel when it can run here, else torch-blocked")
    group.addoption("--k3diff-profile", default="quick", choices=sorted(PROFILES),
                    help="fuzz budget: quick (before a merge), ci, nightly")
    group.addoption("--k3diff-replay", action="append", default=[], metavar="PATH",
                    help="replay a seed file or every seed in a folder (repeatable)")
    group.addoption("--k3diff-save", default=str(Path("corpora") / "failures"), metavar="DIR",
                    help="where failing seeds are written (default corpora/failures)")
    group.addoption("--k3diff-shard", default=None, metavar="I/N",
                    help="run only shard I of N (1-based); shards are disjoint and cover the run")
    group.addoption("--k3diff-seed", default=None, type=int, metavar="N",
                    help="seed of the run (default: drawn once and printed in the summary)")
    group.addoption("--k3diff-device", default=None, metavar="DEV",
                    help="cpu or cuda (default: cuda when present; xdist workers take GPU worker%%count)")
    group.addoption("--k3diff-preset", default=None, choices=["tiny", "small"],
                    help="model dims to fuzz around (default: tiny on cpu, small on a GPU)")
    group.addoption("--k3diff-mutants", action="store_true", default=False,
                    help="run k3diff against each planted bug of k3diff.mutants and print the mutation score")
    group.addoption("--k3diff-report", default=None, metavar="FILE",
                    help="write every case run and its verdict as JSON lines to FILE")


def _parse_shard(text):
    if text is None:
        return None
    try:
        i, n = (int(p) for p in text.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--k3diff-shard expects I/N such as 1/4, got {text!r}") from None
    if not (n >= 1 and 1 <= i <= n):
        raise pytest.UsageError(f"--k3diff-shard expects 1 <= I <= N, got {text!r}")
    return i, n


class Session:
    """What every k3diff test in this process shares: the candidate, device, seed and budget."""

    def __init__(self, config):
        from k3diff import backends
        from k3diff.backends.base import BackendError
        from k3diff.runner import pick_device
        from k3diff.strategies import CPU_SPACE, GPU_SPACE

        opt = config.getoption
        self.config = config
        self.profile = PROFILES[opt("--k3diff-profile")]
        self.profile_name = opt("--k3diff-profile")
        self.save_dir = Path(opt("--k3diff-save"))
        self.seed = _run_seed(config)
        self.device = _worker_device(config, opt("--k3diff-device"), pick_device)
        requested = opt("--k3diff-backend")
        self.backend_name = requested or backends.default_name()
        try:
            self.backend = backends.load(self.backend_name)
        except BackendError as exc:
            raise pytest.UsageError(str(exc)) from None
        reason = self.backend.available()
        if reason is not None:
            raise pytest.UsageError(f"backend {self.backend_name!r} cannot run here: {reason}")
        space = GPU_SPACE if self.device.startswith("cuda") else CPU_SPACE
        preset = opt("--k3diff-preset")
        if preset and preset != space.preset:
            space = GPU_SPACE if preset == "small" else CPU_SPACE
        self.space = space

    def chunk_seed(self, stage, chunk):
        digest = hashlib.sha1(f"{self.seed}:{stage}:{chunk}".encode()).digest()
        return int.from_bytes(digest[:4], "little")

    # ---- running ----
    def check(self, case, item):
        from k3diff.case import CaseError
        from k3diff.runner import check_case
        from k3diff.sizing import CaseTooLarge

        try:
            verdict = check_case(case, self.backend, device=self.device)
        except (CaseTooLarge, CaseError) as exc:
            pytest.fail(str(exc), pytrace=False)
        item.user_properties.append((_REPORT_KEY, _record(case, verdict)))
        return verdict

    def fuzz(self, stage, chunk, item):
        from k3diff.search import find_failure
        from k3diff.strategies import cases

        verdict, _ = find_failure(cases(stage, self.space), lambda case: self.check(case, item),
                                  examples=max(1, self.profile["examples"] // self.profile["chunks"]),
                                  seed=self.chunk_seed(stage, chunk))
        if verdict is not None:
            self.fail_with_seed(verdict, item)

    def fuzz_invariance(self, stage, item):
        from hypothesis import strategies as st

        from k3diff.invariance import check_batch_invariance
        from k3diff.search import find_failure
        from k3diff.strategies import cases

        def judge(drawn):
            case, position = drawn
            verdict = check_batch_invariance(case, self.backend, position, device=self.device)
            item.user_properties.append((_REPORT_KEY, dict(_record(case, verdict), stage=f"{stage}-inv")))
            return verdict

        strategy = st.tuples(cases(stage, self.space).filter(lambda c: c.batch >= 2), st.integers(0, 1 << 16))
        verdict, _ = find_failure(strategy, judge, examples=max(2, self.profile["examples"] // 8),
                                  seed=self.chunk_seed(stage, "invariance"))
        if verdict is not None:
            details = "\n".join("  " + line for line in verdict.failures())
            pytest.fail(f"batch invariance: {verdict.headline()}\n{details}", pytrace=False)

    def hunt_mutant(self, name, item):
        from k3diff.mutants import BY_NAME, hunt
        from k3diff.strategies import CPU_SPACE

        # a fixed seed unless one is given: the mutation score of a CI run must not be a lottery
        seed = self.config.getoption("--k3diff-seed") or 0
        digest = hashlib.sha1(f"{seed}:{name}".encode()).digest()
        result = hunt(BY_NAME[name], examples_per_stage=self.profile["examples"],
                      seed=int.from_bytes(digest[:4], "little"), space=CPU_SPACE)
        item.user_properties.append((_MUTANT_KEY, dict(vars(result))))
        if not result.caught:
            pytest.fail(f"mutant {name} ({BY_NAME[name].description}) survived {result.examples} examples",
                        pytrace=False)

    def replay(self, path, item):
        from k3diff.corpus import CorpusError, load

        try:
            case, _ = load(path)
        except CorpusError as exc:
            pytest.fail(str(exc), pytrace=False)
        verdict = self.check(case, item)
        if verdict.skipped:
            pytest.skip(verdict.skipped)
        if not verdict.ok:
            self.fail_with_seed(verdict, item, path)

    def fail_with_seed(self, verdict, item, existing=None):
        """Save the (shrunk) failing case and fail the test with its replay command."""
        from k3diff.corpus import replay_command, save

        path = existing or save(verdict.case, verdict.to_dict(), self.save_dir, self.backend_name)
        command = replay_command(path, self.backend_name)
        item.user_properties.append((_FAILURE_KEY, {
            "stage": verdict.case.stage, "path": str(path), "replay": command,
            "headline": verdict.headline()}))
        details = "\n".join("  " + line for line in verdict.failures())
        pytest.fail(f"{verdict.headline()}\n{details}\n  seed: {path}\n  replay: {command}", pytrace=False)


def _record(case, verdict):
    from k3diff.results import record  # the results-file format lives in k3diff/results.py

    return record(case, verdict)


def _run_seed(config):
    given = config.getoption("--k3diff-seed")
    if given is not None:
        return given
    worker = getattr(config, "workerinput", None)
    if worker and "k3diff_seed" in worker:
        return worker["k3diff_seed"]
    if not hasattr(config, "_k3diff_seed"):
        config._k3diff_seed = random.getrandbits(31)
    return config._k3diff_seed


def _worker_device(config, requested, pick_device):
    device = pick_device(requested)
    worker = getattr(config, "workerinput", None)
    if worker and not device.startswith("cuda"):
        import torch

        torch.set_num_threads(1)        # xdist runs one worker per core: two threads each thrash
    if device == "cuda" and worker:
        import torch

        index = int(worker.get("workerid", "gw0")[2:] or 0)
        gpu = index % max(1, torch.cuda.device_count())
        torch.cuda.set_device(gpu)      # one GPU per xdist worker
        return f"cuda:{gpu}"
    return device


# ---------------------------------------------------------------- pytest hooks

def pytest_configure(config):
    config.addinivalue_line("markers", f"{MARKER}: a k3diff differential test (runs with --k3diff)")
    config.addinivalue_line("markers", "gpu: needs a CUDA device")
    config._k3diff_shard = _parse_shard(config.getoption("--k3diff-shard"))
    config._k3diff_results = []
    config._k3diff_failures = []
    config._k3diff_mutants = []
    config.addinivalue_line("markers", f"{MUTANT_MARKER}: the planted-bug suite (runs with --k3diff-mutants)")
    if config.getoption("--k3diff") or config.getoption("--k3diff-mutants"):
        _run_seed(config)
        config._k3diff = Session(config)
        config.pluginmanager.register(_Collector(config), "k3diff-collector")
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(_XdistHooks(), "k3diff-xdist")
    else:
        config._k3diff = None


class _XdistHooks:
    def pytest_configure_node(self, node):
        node.workerinput["k3diff_seed"] = node.config._k3diff.seed


def pytest_generate_tests(metafunc):
    if "k3diff_seed_file" in metafunc.fixturenames:
        from k3diff.corpus import CorpusError, seed_files

        config = metafunc.config
        paths = []
        roots = [Path(str(config.rootpath)) / REGRESSIONS] + [Path(p) for p in config.getoption("--k3diff-replay")]
        for root in roots:
            if root == Path(str(config.rootpath)) / REGRESSIONS and not root.exists():
                continue
            try:
                paths += seed_files(root)
            except CorpusError as exc:
                raise pytest.UsageError(str(exc)) from None
        metafunc.parametrize("k3diff_seed_file", [str(p) for p in paths],
                             ids=[p.name for p in paths])
    if "k3diff_chunk" in metafunc.fixturenames:
        profile = PROFILES[metafunc.config.getoption("--k3diff-profile")]
        metafunc.parametrize("k3diff_chunk", range(profile["chunks"]))


def pytest_collection_modifyitems(config, items):
    marked = [it for it in items if it.get_closest_marker(MARKER)]
    if not config.getoption("--k3diff-mutants"):
        skip = pytest.mark.skip(reason="k3diff planted-bug suite: run with --k3diff-mutants")
        for it in items:
            if it.get_closest_marker(MUTANT_MARKER):
                it.add_marker(skip)
    if not config.getoption("--k3diff"):
        skip = pytest.mark.skip(reason="k3diff differential suite: run with --k3diff")
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
    """The k3diff session of this run (backend, device, seed, budget)."""
    session = request.config._k3diff
    if session is None:
        pytest.skip("k3diff differential suite: run with --k3diff")
    return session


class _Collector:
    """Gathers the case records that tests (here or on xdist workers) attach to their reports."""

    def __init__(self, config):
        self.config = config

    def pytest_runtest_logreport(self, report):
        if report.when != "call":
            return
        for key, value in report.user_properties:
            if key == _REPORT_KEY:
                self.config._k3diff_results.append(value)
            elif key == _FAILURE_KEY:
                self.config._k3diff_failures.append(value)
            elif key == _MUTANT_KEY:
                self.config._k3diff_mutants.append(value)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if config._k3diff is None or hasattr(config, "workerinput"):
        return
    if config._k3diff_mutants:
        from k3diff.mutants import HuntResult, table

        terminalreporter.section("k3diff mutants")
        rows = sorted(config._k3diff_mutants, key=lambda r: r["mutant"])
        for line in table([HuntResult(**r) for r in rows]):
            terminalreporter.write_line(line)
    results, failures = config._k3diff_results, config._k3diff_failures
    report_path = config.getoption("--k3diff-report")
    if report_path:
        from k3diff import results as _results  # header line + case lines + saved failures

        _results.write(report_path, _results.run_header(config._k3diff, config.getoption("--k3diff-shard")),
                       results, failures)
    tr = terminalreporter
    session = config._k3diff
    tr.section("k3diff summary")
    tr.write_line(f"backend {session.backend_name} on {session.device}; profile {session.profile_name}; "
                  f"seed {session.seed}" + (f"; shard {config.getoption('--k3diff-shard')}"
                                            if config._k3diff_shard else ""))
    for line in summary_lines(results):
        tr.write_line(line)
    for f in {f["path"]: f for f in failures}.values():
        tr.write_line(f"FAILED {f['headline']}")
        tr.write_line(f"   replay: {f['replay']}")
    rerun = f"pytest --k3diff --k3diff-seed {session.seed} --k3diff-profile {session.profile_name}"
    if failures:
        tr.write_line(f"next: replay a seed above; after the fix, rerun with `{rerun}` and copy the seeds "
                      "into corpora/regressions/ so they are replayed on every run")
    elif results:
        tr.write_line(f"next: all cases passed; this run again: `{rerun}`; a bigger budget: "
                      "--k3diff-profile nightly -n auto")


def summary_lines(results):
    by_stage = defaultdict(list)
    for r in results:
        by_stage[r["stage"]].append(r)
    lines = [f"{'stage':9} {'cases':>6} {'fail':>5} {'skip':>5} {'cases/s':>8} {'ties':>5} {'forced':>6}  worst (tensor, % of budget)"]
    for stage in sorted(by_stage):
        rs = by_stage[stage]
        secs = sum(r["seconds"] for r in rs)
        fails = sum(1 for r in rs if not r["ok"] and not r["skipped"])
        skips = sum(1 for r in rs if r["skipped"])
        worst = max((r["worst"] for r in rs if r["worst"]), key=lambda w: w[1], default=None)
        worst_text = f"{worst[0]} {100 * worst[1]:.0f}%" if worst else "-"
        rate = len(rs) / secs if secs > 0 else float("inf")
        lines.append(f"{stage:9} {len(rs):6d} {fails:5d} {skips:5d} {rate:8.1f} "
                     f"{sum(r['tie_flips'] for r in rs):5d} {sum(1 for r in rs if r['forced']):6d}  {worst_text}")
    return lines
