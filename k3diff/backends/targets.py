"""`module:object` to the object it names: the backend registry's (k3diff/backends/__init__.py) and
the rank processes' (k3diff/rank_pool.py), in a module of its own so the ranks' loader imports no
registry (which reaches the distributed candidate, which starts the ranks)."""
from __future__ import annotations

import importlib
import os
import sys

from k3diff.backends.base import BackendError


def load_target(target: str):
    """The object `module:object` names (a dotted module, then an attribute path); BackendError,
    one line, when it does not import or has no such attribute."""
    module_name, _, attr = target.partition(":")
    if not module_name or not all(p.isidentifier() for p in module_name.split(".")) or (
            attr and not all(p.isidentifier() for p in attr.split("."))):
        raise BackendError(f"backend {target!r} is not module:object (a dotted module name, then an attribute)")
    # a candidate module beside the user (`--backend mykernels.fused:Step`) imports from the
    # current folder under the `k3diff` console script too, as under `python -m` and pytest:
    # the replay line a run prints must work as printed
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
    try:
        obj = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendError(f"cannot import backend module {module_name!r}: {exc}") from None
    except BaseException as exc:  # noqa: BLE001 - SyntaxError, sys.exit, a raise at import: the module's bug
        raise BackendError(f"backend module {module_name!r} failed at import: {_one_line(exc)}") from None
    for part in attr.split(".") if attr else []:
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise BackendError(f"module {module_name!r} has no attribute {attr!r}") from None
    return obj


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]
