"""The command-line options of `pytest --k3diff`, named once (read by the plugin and the session)."""
from __future__ import annotations

import os
from pathlib import Path

ENABLE = "--k3diff"
BACKEND = "--k3diff-backend"
PROFILE = "--k3diff-profile"
REPLAY = "--k3diff-replay"
SAVE = "--k3diff-save"
SHARD = "--k3diff-shard"
SEED = "--k3diff-seed"
DEVICE = "--k3diff-device"
PRESET = "--k3diff-preset"
MUTANTS = "--k3diff-mutants"
REPORT = "--k3diff-report"
TIMEOUT = "--k3diff-timeout"
ISOLATE = "--k3diff-isolate"
RANKS = "--k3diff-ranks"
REPLAY_SAVED = "--k3diff-replay-saved"

PRESETS = ("tiny", "small", "full")
DEFAULT_SAVE = str(Path("corpora") / "failures")


def add_options(parser, profiles) -> None:
    group = parser.getgroup("k3diff", "k3diff differential testing of the K3 decode megakernel")
    group.addoption(ENABLE, action="store_true", default=False,
                    help="run the differential suite (skipped without this flag)")
    group.addoption(BACKEND, default=None, metavar="NAME",
                    help="candidate: a registered name (megakernel, torch-blocked, torch, reference, "
                         "or an entry point of group k3diff.backends) or module:object. "
                         "Default: megakernel when it can run here, else torch-blocked")
    group.addoption(PROFILE, default="quick", choices=sorted(profiles),
                    help="fuzz budget: quick (before a merge), ci, nightly")
    group.addoption(REPLAY, action="append", default=[], metavar="PATH",
                    help="replay a seed file or every seed in a folder (repeatable)")
    group.addoption(SAVE, default=DEFAULT_SAVE, metavar="DIR",
                    help=f"where failing seeds are written (default {DEFAULT_SAVE})")
    group.addoption(SHARD, default=None, metavar="I/N",
                    help="run only shard I of N (1-based); shards are disjoint and cover the run")
    group.addoption(SEED, default=None, type=int, metavar="N",
                    help="seed of the run (default: drawn once and printed in the summary)")
    group.addoption(DEVICE, default=None, metavar="DEV",
                    help="cpu or cuda (default: cuda when present; xdist workers take GPU worker%%count)")
    group.addoption(PRESET, default=None, choices=list(PRESETS),
                    help="model dims to fuzz around (default: tiny on cpu; on a GPU small dims around the "
                         "backend's boundaries with 1 case in 3 at K3's real dims; small: only the small dims; "
                         "full: half at real dims; see k3diff/strategies.py)")
    group.addoption(MUTANTS, action="store_true", default=False,
                    help="run k3diff against each planted bug of k3diff.mutants and print the mutation score")
    group.addoption(REPORT, default=None, metavar="FILE",
                    help="write every case run and its verdict as JSON lines to FILE (opened at start, "
                         "one line per case as it is judged)")
    group.addoption(TIMEOUT, default=None, type=float, metavar="SECONDS",
                    help="per-case limit; a case past it is a 'hang' failure and its child process is "
                         "killed (default 600: generous for a first-call kernel compile)")
    group.addoption(ISOLATE, default="on", choices=["on", "off"],
                    help="judge cases in a child process, so a crash or hang of the candidate fails "
                         "the case instead of the run (default on)")
    group.addoption(REPLAY_SAVED, default="on", choices=["on", "off"],
                    help=f"replay the seeds in the {SAVE} folder first, as Hypothesis replays its saved "
                         "failures (default on; k3diff/saved_first.py)")
    group.addoption(RANKS, default=None, type=int, metavar="N",
                    help="run a distributed candidate (torch-blocked-ep) on N ranks: moe cases draw a placement "
                         "of the experts over them (k3diff/ep_config.py); gloo on the CPU, NCCL on GPUs")


# options whose value is a path: pytest's first parse, made before any plugin is loaded, takes the
# value of the space form (`--k3diff-save DIR`) for a test path
PATH_OPTIONS = (SAVE, REPLAY, REPORT)
SUITE_MODULE = "k3diff.suite"


def _dir_of(text: str, base: Path):
    """The folder pytest's rootdir search takes from a command-line word (None: no such path)."""
    path = Path(text.split("::")[0])
    path = Path(os.path.abspath(path if path.is_absolute() else base / path))
    if not path.exists():
        return None
    return path if path.is_dir() else path.parent


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


# pytest's ini files, and the section that makes each one pytest's (None: any such file)
_INI_FILES = (("pytest.ini", None), (".pytest.ini", None), ("pyproject.toml", "[tool.pytest"),
              ("tox.ini", "[pytest]"), ("setup.cfg", "[tool:pytest]"))


def _ini_above(folder: Path):
    """The ini file pytest would take for `folder`: the first one declaring pytest's section in it
    or a parent (None: none)."""
    for d in (folder, *folder.parents):
        for name, section in _INI_FILES:
            path = d / name
            try:
                if path.is_file() and (section is None or section in path.read_text(errors="replace")):
                    return path
            except OSError:
                continue
    return None


def refuse_moved_rootdir(config, parser, args) -> None:
    """A path option in the space form whose value moved pytest's rootdir: one line, exit 4.

    pytest finds its rootdir and ini file from a first parse of the command line made before any
    plugin is loaded, so the value of `--k3diff-save DIR` is taken for a test path: when DIR exists
    outside the folders under test, the rootdir moves to a common ancestor and the project's ini
    (testpaths, addopts) is lost. pytest has no public way to redo that search once our options are
    known, so the run is refused with the form that has no such effect (`--k3diff-save=DIR`). Only
    when the ini was lost: a value that does not exist yet or lies inside the tested folders moves
    nothing, and where no ini file is above the tested folders there is none to lose. With
    `--rootdir` or `-c` the user has chosen the rootdir and ini: nothing to refuse."""
    import pytest

    ns = parser.parse_known_args(list(args))
    if getattr(ns, "rootdir", None) or getattr(ns, "inifilename", None):
        return
    base = Path(config.invocation_params.dir)
    real = [d for d in (_dir_of(a, base) for a in ns.file_or_dir if not a.startswith("-")) if d is not None]
    ancestor = Path(os.path.commonpath([str(d) for d in real])) if real else base
    lost = _ini_above(ancestor)
    if lost is None or lost == config.inipath:          # the project's ini was found: nothing lost
        return
    for option, value in zip(args, args[1:]):
        if option in PATH_OPTIONS:
            moved = _dir_of(value, base)
            if moved is not None and not _inside(moved, ancestor):
                raise pytest.UsageError(
                    f"{option} {value}: pytest takes {value} for a test path before k3diff is loaded, which "
                    f"moves its rootdir away from {ancestor} and loses its ini {lost}; write {option}={value}")


def add_default_suite(config, parser, args) -> bool:
    """`pytest --k3diff` with no test path (none on the command line, no ini testpaths) runs the
    installed suite, as `--pyargs k3diff.suite` would: from an empty folder, or with k3diff
    installed from a wheel, there is nothing else it could mean (pytest would collect 0 items and
    exit 5). Returns whether the suite was added."""
    ns = parser.parse_known_args(list(args))
    if not (getattr(ns, "k3diff", False) or getattr(ns, "k3diff_mutants", False)):
        return False
    if ns.file_or_dir or config.getini("testpaths"):
        return False
    args += ["--pyargs", SUITE_MODULE]
    return True
