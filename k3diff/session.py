"""A k3diff run without pytest: the candidate, device, seed and budget, and the operations the
plugin and the CLI share (fuzz a stage, check batch invariance, replay a seed, hunt a mutant, save
a failure). The plugin (`k3diff.plugin`) only turns these into pytest items and reports; the CLI
(`k3diff.cli`) into exit codes.
"""
from __future__ import annotations

import hashlib

PROFILES = {
    # examples per stage, split into this many test items (so xdist and shards can spread them)
    "quick": {"examples": 8, "chunks": 2},
    "ci": {"examples": 40, "chunks": 4},
    "nightly": {"examples": 2000, "chunks": 32},
}


def pick_device(requested: str | None = None) -> str:
    """The device named, else cuda when present."""
    if requested:
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_available(name: str | None):
    """The backend `name` (None: the default), loaded and able to run here; else BackendError
    with one line saying why."""
    from k3diff import backends

    name = name or backends.default_name()
    backend = backends.load(name)
    reason = backend.available()
    if reason is not None:
        raise backends.BackendError(f"backend {name!r} cannot run here: {reason}")
    return backend


def choose_space(device: str, preset: str | None = None, backend=None):
    """The strategy space: the preset named (tiny, small, full), else `small` dims on a GPU and
    `tiny` on the CPU; with the backend's declared boundaries (k3diff.strategies.with_boundaries)."""
    from k3diff.strategies import CPU_SPACE, GPU_SPACE, SPACES, with_boundaries

    if preset is None:
        space = GPU_SPACE if str(device).startswith("cuda") else CPU_SPACE
    else:
        space = SPACES[preset]
    return with_boundaries(space, backend)


def sub_seed(seed: int, *parts) -> int:
    """A 32-bit seed for one part of a run (a stage's chunk, a mutant), the same in every process."""
    digest = hashlib.sha1(":".join(str(p) for p in (seed,) + parts).encode()).digest()
    return int.from_bytes(digest[:4], "little")


class Session:
    """What every k3diff check in this process shares. Each operation calls `on_case(case,
    verdict)` for every case it judges, so a caller can record them as they happen."""

    def __init__(self, *, backend_name, device, seed, profile, preset=None, save_dir):
        from k3diff import backends

        self.backend_name = backend_name or backends.default_name()
        self.backend = load_available(self.backend_name)
        self.device = device
        self.seed = seed
        self.profile_name = profile
        self.profile = PROFILES[profile]
        self.space = choose_space(device, preset, self.backend)
        self.save_dir = save_dir

    def check(self, case):
        from k3diff.runner import check_case

        return check_case(case, self.backend, device=self.device)

    def fuzz(self, stage, chunk, on_case):
        """Fuzz one chunk of a stage; the shrunk failing verdict, or None."""
        from k3diff.search import find_failure
        from k3diff.strategies import cases

        def judge(case):
            verdict = self.check(case)
            on_case(case, verdict)
            return verdict

        verdict, _ = find_failure(cases(stage, self.space), judge,
                                  examples=max(1, self.profile["examples"] // self.profile["chunks"]),
                                  seed=sub_seed(self.seed, stage, chunk))
        return verdict

    def fuzz_invariance(self, stage, on_case):
        """A token alone versus inside a batch; the shrunk failing verdict, or None."""
        from hypothesis import strategies as st

        from k3diff.invariance import check_batch_invariance
        from k3diff.search import find_failure
        from k3diff.strategies import cases

        def judge(drawn):
            case, position = drawn
            verdict = check_batch_invariance(case, self.backend, position, device=self.device)
            on_case(case, verdict)
            return verdict

        strategy = st.tuples(cases(stage, self.space).filter(lambda c: c.batch >= 2), st.integers(0, 1 << 16))
        verdict, _ = find_failure(strategy, judge, examples=max(2, self.profile["examples"] // 8),
                                  seed=sub_seed(self.seed, stage, "invariance"))
        return verdict

    def replay(self, path, on_case):
        """The verdict of one seed file (CorpusError if it cannot be read)."""
        from k3diff.corpus import load

        case, _ = load(path)
        verdict = self.check(case)
        on_case(case, verdict)
        return verdict

    def save_failure(self, verdict):
        """Write the failing case as a seed file; (path, replay command)."""
        from k3diff.corpus import replay_command, save

        path = save(verdict.case, verdict.to_dict(), self.save_dir, self.backend_name)
        return path, replay_command(path, self.backend_name)


def hunt_mutant(name: str, *, examples: int, seed: int | None):
    """Fuzz one planted bug on the CPU space; its HuntResult. A fixed seed unless one is given: the
    mutation score of a CI run must not be a lottery."""
    from k3diff.mutants import BY_NAME, hunt

    return hunt(BY_NAME[name], examples_per_stage=examples, seed=sub_seed(seed or 0, name),
                space=choose_space("cpu"))
