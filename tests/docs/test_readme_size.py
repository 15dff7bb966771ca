"""The README stays a page a newcomer reads in one sitting: at most 10 KB (10,000 bytes); the
details belong in docs/guide.md, ARCHITECTURE.md and docs/megakernel.md, which it links."""
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_is_at_most_10_kb():
    size = README.stat().st_size
    assert size <= 10_000, f"README.md is {size} bytes: move detail to docs/guide.md"
