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
    provides(stage) -> set[str]
        Names from k3diff.stages.OUTPUTS[stage] this backend writes (must include the final one);
        the framework compares exactly these.
    prepare(cfg, stage, weights) -> object
        Packing/compilation, once per weight set. `weights` must not be modified.
    run(stage, cfg, prepared, inputs, out) -> None
        One decode step. Writes every tensor in `out` (buffers allocated by the framework, poisoned
        before each call) and updates in place the state inputs listed in k3diff.stages.STATE.
        It must not modify any other input.

`device` is chosen by the framework (inputs arrive on it); a backend must not move them.
"""
from __future__ import annotations

from k3diff.stages import OUTPUTS


class Backend:
    name = "base"
    deterministic = True
    batch_invariant = False
    stages = ("moe", "mla", "kda", "layer")

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
