"""The command-line options of `pytest --k3diff`, named once (read by the plugin and the session)."""
from __future__ import annotations

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
    group.addoption(RANKS, default=None, type=int, metavar="N",
                    help="run a distributed candidate (torch-blocked-ep) on N ranks: moe cases draw a placement "
                         "of the experts over them (k3diff/ep_config.py); gloo on the CPU, NCCL on GPUs")


def fix_rootdir(config, parser, args) -> None:
    """Path-valued options never move pytest's rootdir.

    pytest finds its rootdir and ini file from a first parse of the command line made before any
    plugin is loaded, so the value of `--k3diff-save DIR` (space form) is taken for a test path:
    the rootdir moves to a common ancestor, the project's ini (testpaths, addopts) is lost and the
    regression corpus is not found. Once our options are known (pytest_load_initial_conftests, run
    first), parse again and, when that moves the rootdir or ini file, redo pytest's own
    determination with the real test paths. (pytest has no public hook before that first parse:
    pytest_cmdline_preparse is gone; this sets the same private fields `Config.parse` set.)"""
    import copy

    try:
        from _pytest.config.findpaths import determine_setup

        ns = parser.parse_known_args(list(args), namespace=copy.copy(config.option))
        rootpath, inipath, inicfg, ignored = determine_setup(
            inifile=ns.inifilename, override_ini=ns.override_ini, args=ns.file_or_dir,
            rootdir_cmd_arg=ns.rootdir or None, invocation_dir=config.invocation_params.dir)
        if (rootpath, inipath) == (config._rootpath, config._inipath):
            return
        old_cut = str(config._inipath.parent) if config._inipath is not None else str(config._rootpath)
        config._rootpath, config._inipath, config._inicfg = rootpath, inipath, inicfg
        config._ignored_config_files = ignored
        config._inicache.clear()
        parser.extra_info["rootdir"] = str(rootpath)
        parser.extra_info["inifile"] = str(inipath)
        known = config.known_args_namespace
        known.file_or_dir = list(ns.file_or_dir)
        if known.confcutdir == old_cut:
            known.confcutdir = str(inipath.parent) if inipath is not None else str(rootpath)
        addopts = config.getini("addopts")
        if addopts:
            args[:] = list(addopts) + list(args)
    except (ImportError, AttributeError, TypeError):   # a pytest whose internals moved: leave it be
        return
