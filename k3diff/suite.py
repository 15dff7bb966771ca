"""The differential suite. Collected by tests/differential/ here, or anywhere with
`pytest --k3diff --pyargs k3diff.suite` once k3diff is installed."""
import pytest

from k3diff.case import STAGES


@pytest.mark.k3diff
@pytest.mark.parametrize("stage", STAGES)
def test_fuzz(k3diff, stage, k3diff_chunk, request):
    """Hypothesis draws cases for one stage; the first failure is shrunk, saved and reported."""
    k3diff.fuzz(stage, k3diff_chunk, request.node)


@pytest.mark.k3diff
def test_seed(k3diff, k3diff_seed_file, request):
    """Every seed in corpora/regressions/ and every --k3diff-replay path, replayed."""
    k3diff.replay(k3diff_seed_file, request.node)
