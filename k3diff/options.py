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
                    help="model dims to fuzz around (default: tiny on cpu, small on a GPU; full: the real K3 "
                         "MoE dims mixed with small, see k3diff/strategies.py)")
    group.addoption(MUTANTS, action="store_true", default=False,
                    help="run k3diff against each planted bug of k3diff.mutants and print the mutation score")
    group.addoption(REPORT, default=None, metavar="FILE",
                    help="write every case run and its verdict as JSON lines to FILE")
