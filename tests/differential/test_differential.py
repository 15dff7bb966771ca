"""The k3diff differential suite (skipped unless pytest runs with --k3diff)."""
from k3diff.suite import test_fuzz, test_seed  # noqa: F401  (collected by pytest)
