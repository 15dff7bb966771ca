"""Out of device memory (k3diff.judge): the case is judged once more with every cache given back;
out of memory again, on a case large for this machine, it is CaseTooLarge (one line, exit 11),
never a verdict against the candidate (on an H100 full-dims bf16 layer cases ran out in a nightly
shard and were saved as the candidate's failures). On a case whose whole estimate is far below the
memory free, the candidate's own out of memory is its failure (k3diff.sizing.own_out_of_memory)."""
import pytest
import torch

from k3diff import materialize
from k3diff.backends.blocked import TorchBlockedBackend
from k3diff.case import Case
from k3diff.judge import judge
from k3diff.sizing import CaseTooLarge


class OutOfMemory(TorchBlockedBackend):
    """The correct candidate, out of memory in its first `times` runs (in run(), where the
    runner turns any other exception into a failing verdict), or in prepare()."""
    stages = ("moe",)

    def __init__(self, times, where="run"):
        super().__init__()
        self.times, self.where, self.calls = times, where, 0

    def _maybe(self):
        self.calls += 1
        if self.calls <= self.times:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 756.00 MiB.")

    def prepare(self, cfg, stage, weights):
        if self.where == "prepare":
            self._maybe()
        return super().prepare(cfg, stage, weights)

    def run(self, stage, cfg, prepared, inputs, out):
        if self.where == "run":
            self._maybe()
        return super().run(stage, cfg, prepared, inputs, out)


@pytest.mark.parametrize("kind", ["case", "invariance"])
@pytest.mark.parametrize("where", ["run", "prepare"])
def test_once_out_of_memory_is_judged_again_with_the_caches_given_back(kind, where, monkeypatch):
    given_back = []
    real = materialize.evict_weights
    monkeypatch.setattr(materialize, "evict_weights", lambda keep=0: (given_back.append(keep), real(keep)))
    cand = OutOfMemory(1, where)
    v = judge(kind, Case(stage="moe", batch=3, seed=11), 1, cand, "cpu")
    assert v.ok and not v.error, v.error
    assert given_back.count(0) == 1          # once, by the judge (materialize evicts to its budget too)


@pytest.mark.parametrize("kind", ["case", "invariance"])
def test_twice_out_of_memory_on_a_large_case_is_the_machines_one_line(kind, monkeypatch):
    from k3diff import sizing

    monkeypatch.setattr(sizing, "FAR_BELOW", 1 << 60)       # this machine's memory: the case's limit
    case = Case(stage="moe", batch=3, seed=7)
    with pytest.raises(CaseTooLarge) as exc:
        judge(kind, case, 1, OutOfMemory(2), "cpu")
    line = str(exc.value)
    assert "\n" not in line and "out of memory twice" in line and case.label() in line
    assert exc.value.exit_code == 11


def test_another_exception_in_run_is_still_the_candidates_failure():
    class Broken(TorchBlockedBackend):
        stages = ("moe",)

        def run(self, stage, cfg, prepared, inputs, out):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    v = judge("case", Case(stage="moe", batch=3), 1, Broken(), "cpu")
    assert not v.ok and "illegal memory access" in v.error


@pytest.mark.parametrize("kind", ["case", "invariance"])
@pytest.mark.parametrize("where", ["run", "prepare"])
def test_twice_out_of_memory_on_a_tiny_case_is_the_candidates_failure(kind, where):
    case = Case(stage="moe", batch=3, seed=7)
    v = judge(kind, case, 1, OutOfMemory(2, where), "cpu")
    assert not v.ok and v.error.startswith("out of memory on a case of about"), v.error
    assert "OutOfMemoryError" in v.error and "\n" not in v.error


def test_this_processs_own_out_of_memory_stays_the_machines(monkeypatch):
    """The reference (k3diff's own work) running out is never the candidate's, however small the case."""
    from k3diff import runner

    def reference_out_of_memory(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory (the reference)")

    monkeypatch.setattr(runner, "run_reference", reference_out_of_memory)
    with pytest.raises(CaseTooLarge):
        judge("case", Case(stage="moe", batch=3, seed=7), None, TorchBlockedBackend(), "cpu")


@pytest.mark.parametrize("times, verdict", [(1, "judged"), (2, "machine"), (2, "candidate")])
def test_out_of_memory_receiving_the_case_in_the_candidates_process(tmp_path, monkeypatch, times, verdict):
    """The candidate's process runs out of device memory rebuilding the request's tensors, before
    the candidate is called (an H100 shared by several runs: the child died with a traceback and
    the case was saved as the candidate's crash). It answers instead of dying; the case is judged
    again with the weights sent afresh; out of memory twice it is judged by the case's size as a
    candidate's own out of memory is: the machine's on a case this machine's memory limits (exit
    11), the candidate's where the case is far below the memory free (what fills its process is
    its own: a forged answer gains it nothing)."""
    import sys
    from pathlib import Path

    from k3diff import sizing
    from k3diff.isolation import IsolatedChecker

    here = str(Path(__file__).parent)
    if here not in sys.path:                    # the child gets this process's sys.path
        sys.path.insert(0, here)
    from crashing_candidates import FullOnArrival

    if verdict == "machine":
        monkeypatch.setattr(sizing, "FAR_BELOW", 1 << 60)       # this machine's memory: the case's limit
    checker = IsolatedChecker("torch-blocked", "torch-blocked", device="cpu", inflight_dir=tmp_path)
    real, runs = checker._round, []

    def full_on_arrival(request):
        if request[0] == "run":
            runs.append(request[4] is not None)        # the weights went with this request
            if len(runs) <= times:
                request = request[:-1] + (FullOnArrival(),)
        return real(request)

    checker._round = full_on_arrival
    case = Case(stage="moe", batch=3, seed=7)
    try:
        if verdict == "machine":
            with pytest.raises(CaseTooLarge) as exc:
                checker.check(case)
            assert "out of memory twice" in str(exc.value) and exc.value.exit_code == 11
        else:
            v = checker.check(case)
            if verdict == "judged":
                assert v.ok and not v.error, v.error
            else:
                assert not v.ok and v.error.startswith("out of memory on a case of about"), v.error
                assert "receiving the case in the candidate's process" in v.error and "\n" not in v.error
        assert checker.started == 1                    # the same process answered every request
        assert all(runs[: times + 1]), runs            # every try after a lost one sent the weights again
        again = checker.check(Case(stage="moe", batch=1, seed=8))
        assert again.ok, again.failures()
    finally:
        checker.close()


def test_a_request_the_candidates_process_could_not_receive_is_sent_again_whole():
    """What was lost with it goes with the next request: the set it carried for the first time
    (sent again under a new token) and the sets the candidate's process was to forget (else it
    would keep them: it only learns of a drop from a request)."""
    from k3diff.candidate_link import KEEP_SETS, WeightTokens

    tokens = WeightTokens()
    sets = [{"w": torch.zeros(1)} for _ in range(KEEP_SETS + 1)]
    for w in sets[:KEEP_SETS]:
        tokens.token(w)
    token, new = tokens.token(sets[KEEP_SETS])          # drops the oldest set
    drop = tokens.take_dropped()
    assert new and drop == [1]
    tokens.undelivered(token, drop)
    again, new = tokens.token(sets[KEEP_SETS])
    assert new and again != token                        # sent again, under a token of its own
    assert tokens.take_dropped() == [1]                  # the drop goes with it
    tokens.undelivered(None, [])                         # a set sent before: nothing to send again
    assert tokens.token(sets[KEEP_SETS]) == (again, False)
