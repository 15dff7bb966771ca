"""Memory given back by both processes (k3diff.sizing.check_fits, k3diff.isolation.give_back).

With the candidate in its own process, the device's free memory excludes what that process holds:
its copies of the weights, its prepared sets, its allocator's cached transients, and (on a GPU) the
shared expert weights it maps, which stay allocated in the judging process until it lets go. A
case that does not fit must therefore be looked at again only after BOTH processes gave back: the
judging process's weight sets dropped, the candidate's process told at once (not with the next
case's call, after the second look) to forget them and empty its cache.

On the CPU the device memory is faked: `available_bytes` is a total minus what a holder says it
holds. The GPU run of the same mechanism is scripts/gpu_memory_check.sh.
"""
import pytest

from k3diff import caches, materialize, sizing
from k3diff.case import Case
from k3diff.isolation import IsolatedChecker

GiB = 1 << 30
TOTAL = 80 * GiB            # an H100's worth
NEED = 56 * GiB             # a full-dims bf16 moe case's estimate, about


class FakeChild:
    """A candidate's process holding `held` bytes of device memory for dropped weight sets,
    registered as the real one is (k3diff.caches): it lets go when weights are dropped."""

    def __init__(self, held):
        self.held, self.asked = held, 0
        caches.register("fake candidate process", self.drop)

    def drop(self):
        self.asked += 1
        self.held = 0


@pytest.fixture
def fake_device(monkeypatch):
    materialize.evict_weights(0)           # this process holds no weight set: nothing of its own to drop
    monkeypatch.setattr(sizing, "estimate_bytes", lambda case, device=None: NEED)
    yield monkeypatch
    caches._DEPENDANTS.pop("fake candidate process", None)


def test_a_case_fits_once_the_candidates_process_gave_back(fake_device):
    """The child holds 44 GiB, this process nothing: check_fits must ask the child, not only drop
    its own (empty) caches, and then the case fits."""
    child = FakeChild(44 * GiB)
    fake_device.setattr(sizing, "available_bytes", lambda device: TOTAL - child.held)
    sizing.check_fits(Case("moe", batch=2), "cpu")
    assert child.asked == 1 and child.held == 0


def test_a_case_that_does_not_fit_after_both_gave_back_is_too_large(fake_device):
    child = FakeChild(10 * GiB)
    fake_device.setattr(sizing, "available_bytes", lambda device: 50 * GiB - child.held)
    with pytest.raises(sizing.CaseTooLarge, match=r"needs about 56\.0 GiB, 50\.0 GiB free"):
        sizing.check_fits(Case("moe", batch=2), "cpu")
    assert child.asked == 1


class FakeCache(FakeChild):
    """A candidate's process whose allocator caches `cached` bytes of the last cases' transients
    besides `held` bytes of weights: it empties the cache when asked for its reserve (weights kept)."""

    def __init__(self, held, cached):
        super().__init__(held)
        self.cached, self.emptied = cached, 0
        sizing.register_reserve("fake candidate process", self.empty)

    def empty(self):
        self.emptied += 1
        self.cached = 0


@pytest.fixture
def fake_reserve(fake_device):
    yield fake_device
    sizing._RESERVES.pop("fake candidate process", None)


def test_cached_transients_go_before_any_weight(fake_reserve):
    """The room a case lacks is in the child's allocator cache: it empties it, the case fits and
    no weight set is dropped (a full-dims set is never drawn again for a batch's buffers)."""
    child = FakeCache(held=40 * GiB, cached=30 * GiB)     # 10 GiB free, 16 GiB needed beyond the weights
    fake_reserve.setattr(materialize, "cached_bytes_for", lambda case, device: 40 * GiB)
    fake_reserve.setattr(sizing, "available_bytes", lambda device: TOTAL - child.held - child.cached)
    sizing.check_fits(Case("moe", batch=2), "cpu")
    assert child.emptied == 1 and child.asked == 0 and child.held == 40 * GiB


def test_weights_go_when_the_transients_were_not_enough(fake_reserve):
    child = FakeCache(held=44 * GiB, cached=2 * GiB)
    fake_reserve.setattr(sizing, "available_bytes", lambda device: TOTAL - child.held - child.cached)
    sizing.check_fits(Case("moe", batch=2), "cpu")
    assert child.emptied == 1 and child.asked == 1 and child.held == 0


def test_a_case_that_fits_asks_nobody(fake_device):
    child = FakeChild(4 * GiB)
    fake_device.setattr(sizing, "available_bytes", lambda device: TOTAL - child.held)
    sizing.check_fits(Case("moe", batch=2), "cpu")
    assert child.asked == 0 and child.held == 4 * GiB     # its prepared sets stay for the next case


def test_the_real_candidate_process_forgets_dropped_weights_at_once(tmp_path, monkeypatch):
    """A real child (torch-blocked): after a case it holds the case's weight set and its prepared
    copy; when this process drops its weights, the child drops them in the same moment, and a case
    that did not fit for what the child held then fits."""
    checker = IsolatedChecker("torch-blocked", device="cpu", inflight_dir=tmp_path, threads=1)
    try:
        checker.start()
        case = Case("moe", batch=2, seed=5)
        assert checker.check(case).ok
        assert checker.give_back() == {"weight_sets": 1, "prepared": 1}     # nothing dropped: it keeps them

        # the device's free memory: what the child's weight sets leave (asked of the child itself)
        looks = []

        def available(device):
            looks.append(checker.give_back()["weight_sets"])
            return TOTAL - 40 * GiB * looks[-1]

        monkeypatch.setattr(sizing, "available_bytes", available)
        monkeypatch.setattr(sizing, "estimate_bytes", lambda case, device=None: NEED)
        sizing.check_fits(Case("moe", batch=3, seed=6), "cpu")
        # too little at first; still too little once both caches were emptied (the child kept its
        # weight set: nothing was dropped yet); the child let go of it before the last look
        assert looks == [1, 1, 0]
        assert checker.started == 1         # by answering, not by being killed
        assert checker.check(case).ok       # and the next case sends the weights again
    finally:
        checker.close()


def test_a_child_that_cannot_give_back_is_replaced(tmp_path):
    """No answer to `give_back` (dead here): the child is killed, which gives back everything, and
    the next case starts a fresh one; never an error of k3diff's."""
    checker = IsolatedChecker("torch-blocked", device="cpu", inflight_dir=tmp_path, threads=1)
    try:
        checker.start()
        import os
        import signal

        os.kill(checker.pgid, signal.SIGKILL)
        assert checker.give_back() is None and checker.pgid is None
        assert checker.check(Case("moe", batch=2, seed=5)).ok and checker.started == 2
    finally:
        checker.close()


def test_a_set_past_the_last_few_kept_is_forgotten_without_a_collection(tmp_path, monkeypatch):
    """Each moe case with a routing mode brings a weight set of its own (a copy of the router), so
    past KEEP_SETS the oldest is dropped nearly every case: the child forgets it (it holds at most
    KEEP_SETS) without collecting (gc, the captured graphs, the device's cache), which cost each
    case 20-40 ms. Memory is still given back when this process asks (the tests above)."""
    import sys
    from pathlib import Path

    from k3diff.candidate_link import KEEP_SETS

    here = str(Path(__file__).parent)
    if here not in sys.path:            # the child gets this process's sys.path
        sys.path.insert(0, here)
    clears = tmp_path / "clears.txt"
    monkeypatch.setenv("K3DIFF_TEST_CLEARS", str(clears))
    checker = IsolatedChecker("crashing_candidates:CountsCollections", device="cpu", inflight_dir=tmp_path,
                              threads=1)
    try:
        for seed in range(KEEP_SETS + 4):
            assert checker.check(Case("moe", batch=2, seed=seed, routing="skewed")).ok
        assert checker.give_back() == {"weight_sets": KEEP_SETS, "prepared": KEEP_SETS}
        assert not clears.exists() or clears.read_text() == "", clears.read_text()
    finally:
        checker.close()
