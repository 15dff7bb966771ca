"""The backend protocol every implementation under test (and the oracle) follows.

A backend is any object with these attributes and methods (subclassing `Backend` is optional):

    name: str
    deterministic: bool      # same inputs -> bitwise same outputs on every call
    batch_invariant: bool    # a token's outputs do not depend on the other tokens in the batch
    available() -> str | None
        None when it can run here, else a one-line reason (no GPU, no CuTe DSL, ...).
    supports(cfg, stage) -> str | None        (optional)
        None when the backend runs cases of these dims, else a one-line reason (a library kernel
        that takes only some head widths, say); such cases are reported as skipped, never passed.
    supports(cfg, stage, features=frozenset()) -> str | None
        The same, told what else the case needs: "verify" (W tokens per sequence) and/or
        "fp8_cache" (docs/k3-decode.md §14-15; k3diff/features.py). A supports() without the
        `features` argument is refused such cases: it predates them.
    provides(stage) -> set[str]
        Names from k3diff.stages.OUTPUTS[stage] this backend writes; the framework compares exactly
        these. It MUST include the stage's final output(s) (TensorSpec.final) for every stage in
        `stages`, and name nothing else: else the backend is refused at load with one line
        (BackendError: exit 8 from `k3diff` and pytest), rather than passing every case with
        nothing compared. The answer is fixed at load (k3diff.backends.Loaded): one that changes
        later fails the case ("contract: provides(...) changed"), never a verdict over nothing.
    prepare(cfg, stage, weights) -> object
        Packing/compilation, once per weight set. `weights` must not be modified.
    run(stage, cfg, prepared, inputs, out) -> None
        One decode step. Writes every tensor in `out` (buffers allocated by the framework, poisoned
        before each call) and updates in place the state inputs listed in k3diff.stages.STATE.
        It must not modify any other input. Write INTO the buffers: after each run the framework
        checks that every `out` entry is still the buffer it allocated, with the dtype and shape of
        k3diff.stages (a backend that rebinds `out[name]` to a new tensor, e.g. a float64 result
        where bf16 is required, fails the case with a "contract:" report line).
    stages: tuple[str, ...]   (optional; default all four) the stages it implements; at least one
                              (an empty tuple is refused at load, exit 8: it would judge nothing).
    version: str              (optional) recorded in seed files; replay warns when it differs.

Optional:

    boundaries: dict[str, tuple[int, ...]]
        Sizes at which the backend's code changes path, by case dimension: "batch", "cache_len",
        "n_experts", "top_k", "latent_dim", "moe_intermediate", "hidden" (e.g. the megakernel's
        {"batch": (1, 4, 8, 256), "n_experts": (256, 512), ...}: token tiles, experts per thread
        of a 256-thread CTA). The strategies draw on and around each size (n-1, n, n+1, or +-32
        for dims that must stay multiples of 32) with high probability, and the coverage table of
        the summary names every declared boundary a run did not cross (k3diff/coverage.py).

    graph_safe: bool         (default False)
        The backend may be captured into a CUDA graph and replayed, as serving engines run a decode
        step: `run` reads nothing back to the host, keeps no per-call decision in Python that a
        replay would freeze (a cache by tensor identity, a size read at capture), and allocates
        nothing it frees before a later replay. On a GPU k3diff then draws the case schedule
        `graph` (k3diff/schedule.py, k3diff/graph_replay.py): captured once per shape after a
        warm-up on a side stream, replayed with each case's inputs copied in; the replay's outputs
        and states must be the eager run's bits. A capture that fails is a failing case.
    schedules: tuple[str, ...]   (optional) the schedules k3diff may draw for it besides eager
        (k3diff.schedule.SCHEDULES); default: every `pressure:*` (a co-runner holding SMs or the
        L2 while it runs: a deterministic backend must give the same bits), and `graph` where
        graph_safe.

`device` is chosen by the framework (inputs arrive on it); a backend must not move them.

Isolation: k3diff runs the backend in a child process it loads by its spec string (a registered
name or `module:object`), so the object must be importable from a fresh interpreter; a crash
(segfault, abort, a sticky CUDA error) or a hang (`--k3diff-timeout`) becomes a "crash:" or
"hang:" verdict with the case saved as a seed, and the next case runs in a fresh child.
"""
from __future__ import annotations

from k3diff import exit_codes
from k3diff.stages import OUTPUTS


class Backend:
    name = "base"
    deterministic = True
    batch_invariant = False
    graph_safe = False
    stages = ("moe", "mla", "kda", "layer")
    boundaries: dict = {}

    def available(self) -> str | None:
        return None

    def provides(self, stage: str) -> set[str]:
        return {s.name for s in OUTPUTS[stage]}

    def prepare(self, cfg, stage, weights):
        return weights

    def run(self, stage, cfg, prepared, inputs, out) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class BackendError(RuntimeError):
    """A backend could not be found, loaded or run; the message is one line for the user."""
    exit_code = exit_codes.BACKEND
