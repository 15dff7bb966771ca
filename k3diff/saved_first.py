"""Failing seeds of earlier runs replayed first, as Hypothesis's example database replays the
failures it saved before it generates anything: the seeds in the save folder (`--k3diff-save`,
default corpora/failures) join the regression corpus as `test_seed[saved-<file>]` items, run
before every other k3diff item, so a bug that is not fixed yet fails in seconds instead of after
a search. `--k3diff-replay-saved off` leaves them out (a run that must judge only what it draws).

Each shard replays its own machine's saved seeds: they take no part in the shard split, so
shards on machines with different save folders still split the drawn items the same way.
"""
from __future__ import annotations

from pathlib import Path

from k3diff import options as opt

PREFIX = "saved-"        # the parametrize id's prefix of a seed from the save folder


def seeds(config, already=()) -> list[Path]:
    """The save folder's seed files, less those in `already` or named as one of them (a seed file is
    named for its stage and case id: a failure copied into the regression corpus is replayed there)."""
    from k3diff.corpus import CorpusError, seed_files

    if config.getoption(opt.REPLAY_SAVED) == "off":
        return []
    folder = Path(config.getoption(opt.SAVE))
    if not folder.is_dir():
        return []
    try:
        found = seed_files(folder)
    except CorpusError:             # an unreadable save folder: --k3diff-save's own probe says so
        return []
    seen, names = {_real(p) for p in already}, {Path(p).name for p in already}
    return [p for p in found if _real(p) not in seen and p.name not in names]


def _real(path) -> str:
    try:
        return str(Path(path).resolve())
    except OSError:
        return str(path)


def is_saved(item) -> bool:
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "k3diff_seed_file" in callspec.params and callspec.id.startswith(PREFIX)


def first(items) -> None:
    """The saved seeds' items first, every other item in its order."""
    items[:] = [it for it in items if is_saved(it)] + [it for it in items if not is_saved(it)]
