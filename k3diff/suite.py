"""The differential suite. Collected by tests/differential/ here, or anywhere with
`pytest --k3diff --pyargs k3diff.suite` once k3diff is installed."""
import pytest

from k3diff.mutants import MUTANTS
from k3diff.stages import STAGES


@pytest.mark.k3diff
@pytest.mark.parametrize("stage", STAGES)
def test_fuzz(k3diff, stage, k3diff_chunk):
    """Hypothesis draws cases for one stage; the first failure is shrunk, saved and reported."""
    k3diff.fuzz(stage, k3diff_chunk)


@pytest.mark.k3diff
def test_seed(k3diff, k3diff_seed_file):
    """Every seed in corpora/regressions/ and every --k3diff-replay path, replayed."""
    k3diff.replay(k3diff_seed_file)


@pytest.mark.k3diff
@pytest.mark.parametrize("stage", STAGES)
def test_batch_invariance(k3diff, stage):
    """A token alone versus at a random position inside a batch of other tokens."""
    k3diff.fuzz_invariance(stage)


@pytest.mark.k3diff_mutants
@pytest.mark.parametrize("mutant", [m.name for m in MUTANTS])
def test_mutant_is_caught(k3diff, mutant):
    """Each planted bug (k3diff/mutants.py) must be caught within the profile's budget."""
    k3diff.hunt_mutant(mutant)
