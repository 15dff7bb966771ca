"""A k3diff run without pytest: the candidate, device, seed and budget, and the operations the
plugin and the CLI share (fuzz a stage, check batch invariance, replay a seed, hunt a mutant, save
a failure). The plugin (`k3diff.plugin`) only turns these into pytest items and reports; the CLI
(`k3diff.cli`) into exit codes.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import stat
import tempfile
from pathlib import Path

from k3diff.isolation import InProcessChecker, IsolatedChecker
from k3diff.schedule import with_schedules
from k3diff.search import find_failure, skip_too_large, stop_on_fatal
from k3diff.usage import MachineProblem, PathProblem, UsageProblem  # noqa: F401 - the plugin and the CLI name it from here

PROFILES = {
    # examples per stage, split into this many test items (so xdist and shards can spread them);
    # sweep: a production space's boundary cases too (k3diff.strategies.boundary_plan: ~20 a stage,
    # every MoE menu point, so a cold kernel cache compiles every set: not for a quick run)
    "quick": {"examples": 8, "chunks": 2, "sweep": False},
    "ci": {"examples": 40, "chunks": 4, "sweep": True},
    "nightly": {"examples": 2000, "chunks": 32, "sweep": True},
}


TARGET_ENV = "K3DIFF_TARGET"


def target_wanted(environ=None) -> bool:
    """K3DIFF_TARGET=on|off: each fuzzed case's worst share of budget told to hypothesis.target().
    Off by default, because it has not been seen to help: it can act only in a search of more than
    10 examples (k3diff/search.py: a nightly chunk, not a quick or ci one), and over the planted
    bugs at 40 examples a stage and seeds 0-4 on the CPU (scripts/target_effect.py) it caught none
    sooner in total: 35 of the 36 the same at every seed (most are caught within 8 examples,
    before the target phase can start); ties_to_higher_id caught at seed 2 in 19 examples, not 39,
    but at seed 1 only after 70 judged cases where the run without it stopped at its 40."""
    import os

    value = (os.environ if environ is None else environ).get(TARGET_ENV, "off").strip().lower() or "off"
    if value not in ("on", "off"):
        raise UsageProblem(f"{TARGET_ENV}={value!r}: on or off")
    return value == "on"


def pick_device(requested: str | None = None) -> str:
    """The device named (checked: it must exist here), else cuda when present."""
    import torch

    if not requested:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(requested)
    except (RuntimeError, ValueError):
        raise UsageProblem(f"device {requested!r} is not a device name (cpu, cuda, cuda:N)") from None
    if dev.type not in ("cpu", "cuda"):
        raise UsageProblem(f"device {requested!r}: k3diff runs on cpu or cuda")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise MachineProblem(f"device {requested!r} requested but no CUDA device is usable here "
                               f"(torch {torch.__version__}, CUDA {torch.version.cuda}); use cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise MachineProblem(f"device {requested!r}: this machine has {torch.cuda.device_count()} GPU(s)")
    return requested


def check_output_dir(path, what: str) -> None:
    """A folder k3diff will write into, probed with a real write before any case runs rather than
    losing a failing seed later. A folder that does not exist yet is probed at its nearest existing
    ancestor (the in-flight note or the seed's save makes the rest): the probe makes and removes
    nothing but a temporary file of its own, so runs and xdist workers probing one missing folder
    at once cannot pull it from under each other (they did: a sibling's probe removed the folder
    mid-write and the worker died on startup)."""
    path = Path(path)
    try:
        probe_at = path.absolute()
        while not probe_at.exists() and not probe_at.is_symlink() and probe_at != probe_at.parent:
            probe_at = probe_at.parent
        fd, probe = tempfile.mkstemp(prefix=".k3diff-probe-", dir=probe_at)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise PathProblem(f"{what} {path}: not a writable folder ({exc.strerror or exc})") from None


def open_report(path):
    """The JSON-lines report, opened before any case runs, for this run alone: locked (a second
    run given the same file is refused, where two writers would interleave and lose cases), then
    emptied. One line per case, flushed."""
    path = Path(path)
    if path.is_dir():
        raise PathProblem(f"report {path}: is a folder; give a file name")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise PathProblem(f"report {path}: cannot write ({exc.strerror or exc})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise PathProblem(f"report {path}: another k3diff run is writing this file; give each run its own") from None
    if stat.S_ISREG(os.fstat(fd).st_mode):
        os.ftruncate(fd, 0)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "w", buffering=1)


def load_available(name: str | None):
    """The backend `name` (None: the default) loaded in this process (k3diff.backends.load_available)."""
    from k3diff import backends

    return backends.load_available(name)


def open_candidate(spec, *, device, isolate=True, timeout=None, inflight_dir=None):
    """(checker, backend) for the backend `spec` (None: the default). Isolated, the backend is
    loaded in the child and `backend` is its BackendInfo: this process never imports it (a module
    that crashes or hangs at import is one BackendError line). Else it is loaded here."""
    if isolate:
        import torch

        checker = IsolatedChecker(spec, device=device, timeout=timeout, inflight_dir=inflight_dir,
                                  threads=torch.get_num_threads())
        return checker, checker.start()
    backend = load_available(spec)
    return InProcessChecker(backend, device=device, inflight_dir=inflight_dir), backend


def choose_space(device: str, preset: str | None = None, backend=None):
    """The strategy space: the preset named (tiny, small, full), else on a GPU small dims with one
    case in three at K3's real dims, and `tiny` on the CPU; with the backend's declared boundaries
    (k3diff.strategies.with_boundaries)."""
    from k3diff.strategies import CPU_SPACE, GPU_SPACE, SPACES, with_boundaries

    if preset is None:
        space = GPU_SPACE if str(device).startswith("cuda") else CPU_SPACE
    else:
        space = SPACES[preset]
    # graph replay, pressure, batches past one wave
    return with_schedules(with_boundaries(space, backend), device, backend)


def sub_seed(seed: int, *parts) -> int:
    """A 32-bit seed for one part of a run (a stage's chunk, a mutant), the same in every process."""
    digest = hashlib.sha1(":".join(str(p) for p in (seed,) + parts).encode()).digest()
    return int.from_bytes(digest[:4], "little")


class Session:
    """What every k3diff check in this process shares. Each operation calls `on_case(case,
    verdict)` for every case it judges, so a caller can record them as they happen. Cases are
    judged in a child process unless `isolate` is False (k3diff.isolation)."""

    def __init__(self, *, backend_name, device, seed, profile, preset=None, save_dir, isolate=True, timeout=None,
                 aim=None):
        from k3diff import backends

        # hypothesis.target() on each case's worst share of budget: K3DIFF_TARGET, read once, first
        # (a bad value is one line before any candidate process starts)
        aim = target_wanted() if aim is None else aim

        self.checker, self.backend = open_candidate(backend_name, device=device, isolate=isolate, timeout=timeout,
                                                    inflight_dir=save_dir)
        self.backend_name = backend_name or getattr(self.backend, "spec", None) or backends.default_name()
        self.device = device
        self.seed = seed
        self.profile_name = profile
        self.profile = PROFILES[profile]
        self.space = choose_space(device, preset, self.backend)
        self.save_dir = save_dir
        self.isolate = isolate
        self.aim = aim

    def close(self):
        self.checker.close()

    def check(self, case):
        """The case's verdict; in a fuzz run a case this machine cannot hold is a skipped verdict
        (`skip_too_large`), so the run goes on past it. A replay judges through the checker
        itself: there the same case is one line and exit 11."""
        return skip_too_large(case, self.backend_name, lambda: self.checker.check(case))

    def fuzz(self, stage, chunk, on_case):
        """Fuzz one chunk of a stage; the shrunk failing verdict (a crash or hang: the first, not
        shrunk, and the chunk ends there), or None."""
        from k3diff.strategies import cases, chunk_plan

        # a production space's boundary sweep, this chunk's share (k3diff.strategies.boundary_plan)
        sweep = chunk_plan(stage, self.space, sub_seed(self.seed, stage, "sweep"), chunk,
                           self.profile["chunks"]) if self.profile.get("sweep") else []
        verdict, _ = find_failure(cases(stage, self.space), stop_on_fatal(self.check, on_case),
                                  examples=max(1, self.profile["examples"] // self.profile["chunks"]),
                                  seed=sub_seed(self.seed, stage, chunk), explicit=sweep, aim=self.aim)
        return verdict

    def fuzz_invariance(self, stage, on_case):
        """A token alone versus inside a batch; the shrunk failing verdict, or None. The verdict's
        `position` attribute is the token's position (recorded in its seed file)."""
        from hypothesis import strategies as st

        from k3diff.strategies import cases

        def check(drawn):
            case, position = drawn
            verdict = skip_too_large(case, self.backend_name, lambda: self.checker.check_invariance(case, position))
            verdict.position = position
            return verdict

        judge = stop_on_fatal(check, lambda drawn, verdict: on_case(drawn[0], verdict))
        strategy = st.tuples(cases(stage, self.space).filter(lambda c: c.batch >= 2), st.integers(0, 1 << 16))
        verdict, _ = find_failure(strategy, judge, examples=max(2, self.profile["examples"] // 8),
                                  seed=sub_seed(self.seed, stage, "invariance"))
        return verdict

    def replay(self, path, on_case):
        """(verdict, record) of one seed file, judged now (CorpusError if it cannot be read)."""
        from k3diff.corpus import load

        case, record = load(path)
        verdict = replay_record(self.checker, case, record)
        on_case(case, verdict)
        return verdict, record

    def save_failure(self, verdict):
        """Write the failing case as a seed file; (path, replay command). A folder that became
        unwritable mid-run never loses the seed: it goes to a temporary folder, named in the path."""
        from k3diff.corpus import environment, replay_command, save

        position = getattr(verdict, "position", None)
        check = {"kind": "case"} if position is None else {"kind": "invariance", "position": int(position)}
        env = environment(self.backend)
        try:
            path = save(verdict.case, verdict.to_dict(), self.save_dir, self.backend_name, check=check,
                        environment=env)
        except OSError as exc:
            fallback = tempfile.mkdtemp(prefix="k3diff-seeds-")
            path = save(verdict.case, verdict.to_dict(), fallback, self.backend_name, check=check, environment=env)
            verdict.notes.append(f"could not write to {self.save_dir} ({exc.strerror or exc}); seed saved in {fallback}")
        return path, replay_command(path, self.backend_name)


def replay_record(checker, case, record):
    """Judge a seed's case now, with the check it records (a whole case, or batch invariance at the
    recorded position)."""
    check = record.get("check") or {"kind": "case"}
    if check.get("kind") == "invariance":
        verdict = checker.check_invariance(case, check["position"])
        verdict.position = check["position"]
        return verdict
    return checker.check(case)


def compare_with_record(verdict, record, backend_name, backend=None) -> list[str]:
    """Lines a replay prints after its verdict: whether the outcome (pass/fail and the failing
    tensor names, not stale numbers) matches the recorded one, and one line of environment drift."""
    from k3diff.corpus import environment, environment_drift, outcome

    lines = []
    recorded = record.get("verdict")
    # an empty verdict is a case drawn and saved without judging it (scripts/schedule_seeds.py):
    # there is no outcome to reproduce, so none is claimed to differ
    if isinstance(recorded, dict) and recorded and backend_name == record.get("backend"):
        was_ok, was_names = outcome(recorded)
        now_ok, now_names = outcome(verdict.to_dict())
        if (was_ok, was_names) == (now_ok, now_names):
            lines.append(f"reproduced the recorded outcome ({'pass' if now_ok else 'FAIL'}"
                         + (f": {', '.join(now_names)}" if now_names else "") + ")")
        else:
            lines.append(f"outcome DIFFERS from the recording: recorded {'pass' if was_ok else 'FAIL'}"
                         f"{' (' + ', '.join(was_names) + ')' if was_names else ''}, now "
                         f"{'pass' if now_ok else 'FAIL'}{' (' + ', '.join(now_names) + ')' if now_names else ''}")
    drift = environment_drift(record.get("environment") or {}, environment(backend))
    if drift:
        lines.append("warning: " + drift)
    return lines


def hunt_mutant(name: str, *, examples: int, seed: int | None):
    """Fuzz one planted bug on the CPU space; its HuntResult. A fixed seed unless one is given: the
    mutation score of a CI run must not be a lottery."""
    from k3diff.mutants import BY_NAME, hunt

    return hunt(BY_NAME[name], examples_per_stage=examples, seed=sub_seed(seed or 0, name),
                space=choose_space("cpu"))
