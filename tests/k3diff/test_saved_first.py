"""Earlier runs' failing seeds replayed first (k3diff/saved_first.py), as Hypothesis's database does."""
import shutil
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)
import subprocess
import sys
from pathlib import Path

from k3diff.corpus import SHIPPED_REGRESSIONS

ROOT = Path(__file__).resolve().parents[2]


def _collected(cwd, *args):
    """The items a run would judge, in order: collection only, so no child process for the candidate
    (--k3diff-isolate off: it would be started, and cost seconds, for nothing)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--k3diff", "--k3diff-backend", "torch-blocked", "--co",
                           "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--k3diff-seed", "1",
                           "--k3diff-isolate", "off", *args,
                           str(ROOT / "tests" / "differential")], cwd=cwd, capture_output=True, text=True, timeout=limit(600))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_saved_seeds_run_first_in_every_shard_unless_turned_off(tmp_path):
    seed = sorted(SHIPPED_REGRESSIONS.glob("moe-*.json"))[0]
    (tmp_path / "seeds").mkdir()
    shutil.copy(seed, tmp_path / "seeds" / "moe-000000000000.json")
    ids = _collected(tmp_path, "--k3diff-save=seeds")
    assert ids[0].endswith("test_seed[saved-moe-000000000000.json]"), ids[:3]
    assert sum("[saved-" in i for i in ids) == 1
    assert not any("[saved-" in i for i in _collected(tmp_path, "--k3diff-save=seeds", "--k3diff-replay-saved", "off"))
    # the shipped corpus's own copy of a seed is not replayed twice
    shutil.copy(seed, tmp_path / "seeds" / seed.name)
    shards = [_collected(tmp_path, "--k3diff-save=seeds", "--k3diff-shard", f"{k}/2") for k in (1, 2)]
    for ids in shards:
        assert ids[0].endswith("test_seed[saved-moe-000000000000.json]"), ids[:3]
    rest = [set(i for i in ids if "[saved-" not in i) for ids in shards]
    assert rest[0] and rest[1] and not rest[0] & rest[1]
    assert sum(f"saved-{seed.name}" in i for i in shards[0]) == 0


def test_the_default_save_folder_is_replayed_without_any_flag(tmp_path):
    # what a kernel engineer expects after a failing run: rerunning the same command (no flag, the
    # default save folder in the folder it ran from) tries the failures it saved before anything else
    seed = sorted(SHIPPED_REGRESSIONS.glob("mla-*.json"))[0]
    (tmp_path / "corpora" / "failures").mkdir(parents=True)
    shutil.copy(seed, tmp_path / "corpora" / "failures" / "mla-000000000000.json")
    ids = _collected(tmp_path)
    assert ids[0].endswith("test_seed[saved-mla-000000000000.json]"), ids[:3]
