"""Backend registry: built-ins, the `k3diff.backends` entry-point group, and `module:object`.

k3diff reaches the megakernel (and any user kernel) only through here, so the framework runs where
the kernel cannot (no GPU, no CuTe DSL): such a backend loads, then says why it is unavailable.
"""
from __future__ import annotations

from importlib.metadata import entry_points

from k3diff.backends.base import Backend, BackendError
from k3diff.backends.targets import _one_line, load_target as _load_target

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
    from k3diff import distributed
    if distributed.declared(backend):     # ranks declared by a package that cannot import k3diff
        try:
            backend = distributed.Declared(backend)
        except BaseException as exc:  # noqa: BLE001 - e.g. a rank_impl that does not import: one line
            raise BackendError(f"backend {label!r} failed to construct: {_one_line(exc)}") from None
    missing = [m for m in ("run", "available", "provides", "prepare") if not hasattr(backend, m)]
    if missing:
        raise BackendError(f"backend {label!r} lacks {', '.join(missing)} (see k3diff/backends/base.py)")
    return backend


def check_contract(backend, label: str) -> None:
    """The strict contract (base.py): every stage a backend claims must provide its final outputs,
    else it would 'pass' every case with nothing compared. BackendError (one line) otherwise."""
    from k3diff.stages import OUTPUTS, STAGES

    stages = getattr(backend, "stages", STAGES)
    if not isinstance(stages, (tuple, list, frozenset, set)) or not all(isinstance(s, str) for s in stages):
        raise BackendError(f"backend {label!r}: `stages` must be a tuple of stage names ({', '.join(STAGES)}), "
                           f"got {type(stages).__name__}")
    unknown = [s for s in stages if s not in OUTPUTS]
    if unknown:
        raise BackendError(f"backend {label!r} claims unknown stage(s) {', '.join(map(repr, unknown))}; "
                           f"stages are {', '.join(STAGES)}")
    for stage in stages:
        try:
            provided = set(backend.provides(stage))
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
    it loads (raise, exit, raise KeyboardInterrupt) is that line, never a traceback or an exit."""
    name = name or default_name()
    backend = load(name)
    try:
        reason = backend.available()
    except BaseException as exc:  # noqa: BLE001 - a broken available() is the backend's bug, one line
        raise BackendError(f"backend {name!r}: available() raised {_one_line(exc)}") from None
    if reason is not None:
        raise BackendError(f"backend {name!r} cannot run here: {reason}")
    check_contract(backend, name)
    return backend


def default_name() -> str:
    """The megakernel when it can run here (GPU + CuTe DSL), else the CPU candidate."""
    try:
        mk = load("megakernel")
        if mk.available() is None:
            return "megakernel"
    except Exception:  # noqa: BLE001 - a megakernel that cannot even load: the CPU candidate
        pass
    return "torch-blocked"


__all__ = ["Backend", "BackendError", "check_contract", "is_registered", "load", "load_available", "names",
           "default_name"]
