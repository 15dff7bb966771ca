"""Backend registry: built-ins, the `k3diff.backends` entry-point group, and `module:object`.

k3diff reaches the megakernel (and any user kernel) only through here, so the framework runs where
the kernel cannot (no GPU, no CuTe DSL): such a backend loads, then says why it is unavailable.
"""
from __future__ import annotations

from importlib.metadata import entry_points

from k3diff import distributed
from k3diff.backends.base import Backend, BackendError
from k3diff.backends.targets import _one_line, load_target as _load_target
from k3diff.stages import OUTPUTS, STAGES

BUILTIN = {
    "reference": "k3diff.backends.oracle:exact",
    "torch": "k3diff.backends.oracle:faithful",
    "torch-blocked": "k3diff.backends.blocked:TorchBlockedBackend",
    "torch-blocked-ep": "k3diff.backends.blocked_ep:TorchBlockedEP",      # distributed: --k3diff-ranks N
    # optional: public libraries' kernels (GPU + the extra installed; else available() says why)
    "fla": "k3diff.backends.fla_kda:FlaKdaBackend",                       # pip install -e '.[fla]'
    "flashinfer": "k3diff.backends.flashinfer_mla:FlashInferMlaBackend",  # pip install -e '.[flashinfer]'
}
ENTRY_POINT_GROUP = "k3diff.backends"


def _entry_points() -> dict:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def names() -> list[str]:
    return sorted(set(BUILTIN) | set(_entry_points()))


def is_registered(spec) -> bool:
    """A name k3diff itself vouches for (a built-in or an installed entry point): the only backend
    a seed file may choose; a `module:object` runs only when the user names it (seeds are data)."""
    return isinstance(spec, str) and (spec in BUILTIN or spec in _entry_points())


def _instantiate(obj, label: str):
    try:
        backend = obj() if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "run")) else obj
    except BaseException as exc:  # noqa: BLE001 - a constructor that raises or exits (`sys:exit`): one line
        raise BackendError(f"backend {label!r} failed to construct: {_one_line(exc)}") from None
    if distributed.declared(backend):     # ranks declared by a package that cannot import k3diff
        try:
            backend = distributed.Declared(backend)
        except BaseException as exc:  # noqa: BLE001 - e.g. a rank_impl that does not import: one line
            raise BackendError(f"backend {label!r} failed to construct: {_one_line(exc)}") from None
    missing = [m for m in ("run", "available", "provides", "prepare") if not hasattr(backend, m)]
    if missing:
        raise BackendError(f"backend {label!r} lacks {', '.join(missing)} (see k3diff/backends/base.py)")
    return backend


def check_contract(backend, label: str) -> dict:
    """The strict contract (base.py): a backend claims at least one stage, and every stage it claims
    provides its final outputs, else it would 'pass' every case with nothing compared. Returns the
    load-time answer of provides() per claimed stage (frozen: `Loaded`); BackendError (one line)
    otherwise."""
    stages = getattr(backend, "stages", STAGES)
    if not isinstance(stages, (tuple, list, frozenset, set)) or not all(isinstance(s, str) for s in stages):
        raise BackendError(f"backend {label!r}: `stages` must be a tuple of stage names ({', '.join(STAGES)}), "
                           f"got {type(stages).__name__}")
    if not stages:
        # every case would be skipped and the run read green with nothing judged
        raise BackendError(f"backend {label!r} claims no stage (`stages` is empty): nothing to judge; "
                           f"stages are {', '.join(STAGES)}")
    unknown = [s for s in stages if s not in OUTPUTS]
    if unknown:
        raise BackendError(f"backend {label!r} claims unknown stage(s) {', '.join(map(repr, unknown))}; "
                           f"stages are {', '.join(STAGES)}")
    answers = {}
    for stage in stages:
        try:
            provided = frozenset(backend.provides(stage))
        except BaseException as exc:  # noqa: BLE001
            raise BackendError(f"backend {label!r}: provides({stage!r}) raised {_one_line(exc)}") from None
        finals = [spec.name for spec in OUTPUTS[stage] if spec.final]
        missing = [n for n in finals if n not in provided]
        if missing:
            raise BackendError(f"backend {label!r}: provides({stage!r}) lacks the final output "
                               f"{', '.join(map(repr, missing))} (k3diff.stages); a backend must write its "
                               "stage's final output, or drop the stage from `stages`")
        extra = sorted(provided - {spec.name for spec in OUTPUTS[stage]})
        if extra:
            raise BackendError(f"backend {label!r}: provides({stage!r}) names unknown output(s) "
                               f"{', '.join(map(repr, extra))} (k3diff.stages.OUTPUTS)")
        answers[stage] = provided
    return answers


class Loaded:
    """A backend that passed the contract at load, with `stages` and `provides()` frozen at the
    answers checked then: a provides() that changes later (to nothing, or without the final
    output) would leave a case with nothing to judge. Each call still asks the backend, and an
    answer that differs from the load-time one raises BackendError, which the judgement turns into
    a failing verdict (k3diff.judge), never a verdict over nothing. Everything else is the
    backend's own (attributes read and written through)."""

    def __init__(self, backend, label: str, provided: dict):
        object.__setattr__(self, "_backend", backend)
        object.__setattr__(self, "_label", label)
        object.__setattr__(self, "_provided", dict(provided))

    @property
    def stages(self) -> tuple:
        return tuple(self._provided)

    @property
    def frozen_provides(self) -> dict:
        """{stage: sorted output names} as checked at load (recorded in k3diff.isolation.BackendInfo)."""
        return {stage: tuple(sorted(names)) for stage, names in self._provided.items()}

    def provides(self, stage: str) -> set:
        if stage not in self._provided:     # a stage it does not claim: never judged
            return set(self._backend.provides(stage))
        now = set(self._backend.provides(stage))
        if now != self._provided[stage]:
            raise BackendError(f"backend {self._label!r}: contract: provides({stage!r}) changed since the "
                               f"load-time check (was {sorted(self._provided[stage])}, now {sorted(now)})")
        return set(self._provided[stage])

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_backend", "_label", "_provided"):
            raise AttributeError(name)
        if name == "name" and not hasattr(self._backend, "name"):
            return type(self._backend).__name__         # what a nameless backend was called before
        return getattr(self._backend, name)

    def __setattr__(self, name, value):
        setattr(self._backend, name, value)

    def __repr__(self):
        return f"Loaded({self._backend!r})"


def load(spec: str):
    """A backend by registered name, or by `module:object` (a class, factory or instance)."""
    if spec in BUILTIN:
        return _instantiate(_load_target(BUILTIN[spec]), spec)
    eps = _entry_points()
    if spec in eps:
        try:
            obj = eps[spec].load()
        except BaseException as exc:  # noqa: BLE001 - a broken third-party plugin: one line, never a dead run
            raise BackendError(f"backend {spec!r} failed to load: {type(exc).__name__}: {exc}") from None
        return _instantiate(obj, spec)
    if ":" in spec:
        return _instantiate(_load_target(spec), spec)
    raise BackendError(f"unknown backend {spec!r}; known: {', '.join(names())}, or give module:object")


def load_available(name: str | None):
    """The backend `name` (None: the default), loaded, able to run here and keeping the contract
    (base.py); else BackendError with one line saying why. Whatever the backend's code does while
    it loads (raise, exit, raise KeyboardInterrupt) is that line, never a traceback or an exit.
    The backend comes wrapped (`Loaded`): its stages and provides() fixed at what was checked."""
    name = name or default_name()
    backend = load(name)
    try:
        reason = backend.available()
    except BaseException as exc:  # noqa: BLE001 - a broken available() is the backend's bug, one line
        raise BackendError(f"backend {name!r}: available() raised {_one_line(exc)}") from None
    if reason is not None:
        raise BackendError(f"backend {name!r} cannot run here: {reason}")
    return Loaded(backend, name, check_contract(backend, name))


def default_name() -> str:
    """The megakernel when it can run here (GPU + CuTe DSL), else the CPU candidate."""
    try:
        mk = load("megakernel")
        if mk.available() is None:
            return "megakernel"
    except Exception:  # noqa: BLE001 - a megakernel that cannot even load: the CPU candidate
        pass
    return "torch-blocked"


__all__ = ["Backend", "BackendError", "Loaded", "check_contract", "is_registered", "load", "load_available", "names",
           "default_name"]
