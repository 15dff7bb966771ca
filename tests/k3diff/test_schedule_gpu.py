"""The schedule dimension on a GPU: graph replay of a capturable candidate bit for bit, the planted
graph bugs caught only under graph replay, the planted pressure bugs caught only beside a
co-runner, a deterministic candidate's bits unchanged under every pressure, the co-runner stopping
when the candidate is done, a failed capture leaving CUDA's random numbers usable. Skipped without
CUDA (and the pressure tests without Triton)."""
from __future__ import annotations

import time

import pytest
import torch

from k3diff import pressure, schedule, schedule_mutants
from k3diff.backends.blocked import TorchBlockedBackend
from k3diff.case import Case
from k3diff.runner import check_case

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
needs_triton = pytest.mark.skipif(not pressure.available(), reason="pressure needs Triton")


def _kda(batch, seed, sched="graph", steps=1, preset="tiny"):
    idx = tuple(((i * 7) % batch) + 1 if i % 5 else 0 for i in range(batch))
    return Case(stage="kda", preset=preset, batch=batch, n_slots=batch + 2, state_idx=idx, seed=seed,
                steps=steps, schedule=sched).validate()


def _scheduled(v):
    return [r for r in v.reports if schedule.TAG in r.tensor]


@pytest.mark.parametrize("batch", [1, 3, 132, 192])
def test_graph_replay_of_a_capturable_candidate_is_the_eager_runs_bits(batch):
    backend = schedule_mutants.GraphSafeControl()
    for seed in (1, 2):                     # the second case of a shape replays the cached graph
        v = check_case(_kda(batch, seed, steps=2), backend, device="cuda")
        assert v.ok, v.failures()
        assert _scheduled(v) and all(r.ok for r in _scheduled(v))


@pytest.mark.parametrize("cls, says", [
    (schedule_mutants.GraphInputCachedByIdentity, "element(s) differ bitwise"),
    (schedule_mutants.GraphOutputSkippedWhenUnchanged, "element(s) differ bitwise"),
    (schedule_mutants.GraphHostRead, "CUDA graph capture failed"),
    (schedule_mutants.GraphLiveRowsByBuffer, "element(s) differ bitwise"),
])
def test_graph_bugs_are_caught_under_graph_replay_and_pass_eagerly(cls, says):
    eager = check_case(_kda(5, 7, sched=""), cls(), device="cuda")
    assert eager.ok, eager.failures()
    v = check_case(_kda(5, 7), cls(), device="cuda")
    assert not v.ok
    assert any(says in r.note for r in _scheduled(v) if not r.ok), v.failures()


def test_cuda_random_numbers_work_after_a_failed_capture():
    v = check_case(_kda(5, 8), schedule_mutants.GraphHostRead(), device="cuda")
    assert any("CUDA graph capture failed" in r.note for r in _scheduled(v) if not r.ok), v.failures()
    torch.cuda.synchronize()
    assert torch.randn(4, device="cuda").isfinite().all()        # no "Offset increment outside graph capture"


def _moe(kind, batch=192, seed=3):
    return Case(stage="moe", preset="small", batch=batch, seed=seed, schedule=kind).validate()


@needs_triton
@pytest.mark.parametrize("cls", [schedule_mutants.RouterKernel, schedule_mutants.RouterGridBarrier])
def test_pressure_bugs_pass_eagerly_twice_and_are_caught_beside_a_co_runner(cls):
    eager = check_case(_moe(""), cls(), device="cuda")            # the run-twice control included
    assert eager.ok, eager.failures()
    v = check_case(_moe("pressure:all_but_one"), cls(), device="cuda")
    assert not v.ok
    assert any(not r.ok for r in _scheduled(v)), v.failures()
    assert not [r for r in v.reports if not r.ok and schedule.TAG not in r.tensor], v.failures()


@needs_triton
@pytest.mark.parametrize("kind", schedule.PRESSURES)
@pytest.mark.parametrize("cls", [schedule_mutants.RouterSlotByProgram, schedule_mutants.RouterTwoLaunches])
def test_the_pressure_bugs_controls_keep_their_bits_under_pressure(cls, kind):
    v = check_case(_moe(kind, batch=140), cls(), device="cuda")
    assert v.ok, v.failures()
    assert _scheduled(v) and all(r.ok for r in _scheduled(v))


@needs_triton
@pytest.mark.parametrize("kind", schedule.PRESSURES)
def test_a_deterministic_candidate_keeps_its_bits_under_pressure(kind):
    moe = Case(stage="moe", preset="small", batch=192, seed=3, schedule=kind).validate()
    v = check_case(moe, TorchBlockedBackend(), device="cuda")
    assert v.ok, v.failures()
    assert _scheduled(v) and all(r.ok for r in _scheduled(v))
    v = check_case(_kda(132, 4, sched=kind), schedule_mutants.GraphSafeControl(), device="cuda")
    assert v.ok, v.failures()


@needs_triton
def test_the_co_runner_holds_sms_and_stops_with_the_candidate():
    a = torch.randn(1024, 1024, device="cuda")
    torch.cuda.synchronize()

    def timed(kind=None):
        t = time.perf_counter()
        if kind is None:
            for _ in range(20):
                a @ a
        else:
            with pressure.co_runner(kind, a.device):
                for _ in range(20):
                    a @ a
        torch.cuda.synchronize()
        return time.perf_counter() - t

    timed(), timed("pressure:half")                          # compile and warm up
    idle, squeezed = timed(), timed("pressure:all_but_one")
    print(f"20 matmuls of 1024^2: idle {idle * 1e3:.1f} ms, beside all_but_one {squeezed * 1e3:.1f} ms")
    # stopped by the flag, not by the cap (MAX_ITERS polls: most of a second); and the SMs were held
    assert squeezed < 0.5, squeezed
    assert squeezed > 3 * idle, (idle, squeezed)
