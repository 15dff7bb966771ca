"""The k3diff differential suite (skipped unless pytest runs with --k3diff / --k3diff-mutants)."""
from k3diff.suite import test_batch_invariance, test_fuzz, test_mutant_is_caught, test_seed  # noqa: F401
