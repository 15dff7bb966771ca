"""Optional dependencies (pyproject.toml's extras): a command that needs one that is not installed
says so in one line, with the pip command, and exits 11 (not on this machine), never a traceback
and never 1 (which means a candidate failed)."""
from __future__ import annotations

import importlib.util

from k3diff.usage import MachineProblem

# the module each command needs beyond the core dependencies, and the extra that installs it
NEEDS = {"report": ("matplotlib", "report")}


def check(command: str) -> None:
    """Raise MachineProblem (one line, exit 11) when `command` needs a module that is missing."""
    if command not in NEEDS:
        return
    module, extra = NEEDS[command]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):      # a module set to None in sys.modules (blocked) or half there
        found = False
    if not found:
        raise MachineProblem(f"k3diff {command} needs {module}, which is not installed here: "
                             f"pip install 'k3diff[{extra}]'")
