"""The megakernel's expert parallelism on the CPU (issue 34): megakernel/ep.py's `ep_step` (the
dispatch, the rank's experts over what it received, the combine back into (token, slot) places)
judged by k3diff on gloo ranks with a torch engine in place of the kernels (ep_torch.py); a
dispatch to the wrong rank caught; the `megakernel-ep` declaration loaded as a distributed
candidate that says in one line why it cannot run without a GPU. On a GPU the same plumbing
runs the kernels: tests/megakernel/test_mk_ep_gpu.py."""
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from k3diff import ep_config
from k3diff.case import Case
from k3diff.runner import check_case

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
if str(HERE) not in sys.path:                # ep_torch: loaded by name in the ranks (they get sys.path)
    sys.path.insert(0, str(HERE))


def ep_case(ranks=2, placement="contiguous", owners=None, **kw):
    return ep_config.placed(Case(**{"stage": "moe", **kw}), ranks, placement, owners)


@pytest.fixture(scope="module")
def torch_ep():
    import ep_torch

    cand = ep_torch.TorchEngineEP()
    yield cand
    cand.close()


ODD = (("n_experts", 15),)          # 15 % 2 != 0 and 15 % 4 != 0: uneven shards


@pytest.mark.parametrize("case", [
    ep_case(2, "contiguous", batch=1),                                       # rank 1: no token
    ep_case(3, "uneven", owners=(2,) * 6 + (0,) * 6, batch=5, routing="hot", seed=2),  # rank 1: no expert
    ep_case(2, "strided", batch=7, overrides=ODD, routing="dropped", seed=5),
    ep_case(4, "scattered", owners=[(e * 7) % 5 % 4 for e in range(12)], batch=9, expert_format="mxfp4",
            routing="forced", seed=9),
    ep_case(3, "contiguous", batch=2, overrides=ODD, routing="ties", seed=11),  # a rank with no token
], ids=["idle-rank", "empty-rank-hot", "E%N-dropped", "scattered-mxfp4-forced", "fewer-tokens-than-ranks"])
def test_ep_step_passes_the_runner(torch_ep, case):
    verdict = check_case(case, torch_ep)
    assert verdict.ok, verdict.failures()
    names = {r.tensor for r in verdict.reports}
    assert {"out", "combined", "routed_out"} <= names, names       # the combine's own tensors compared


def test_a_route_sent_to_the_wrong_rank_fails_the_case_by_name():
    """The issue's planted dispatch bug (a route to the next rank when E % N != 0): the receiving
    engine refuses an expert it does not own, so the case fails with that line, not silently."""
    import ep_torch

    bug = ep_torch.ShiftedOwnersEP()
    try:
        verdict = check_case(ep_case(2, "contiguous", batch=4, overrides=ODD, seed=1), bug)
        assert not verdict.ok and "does not own" in (verdict.error or ""), verdict.headline()
        assert check_case(ep_case(2, "contiguous", batch=4, seed=1), bug).ok   # E % N == 0: not taken
    finally:
        bug.close()


def test_y_rows_in_the_wrong_slot_fail_numerically():
    import ep_torch

    bug = ep_torch.SlotsSwappedEP()
    try:
        verdict = check_case(ep_case(2, "strided", batch=6, seed=3), bug)
        assert not verdict.ok and not verdict.error, verdict.headline()
        assert any("combined" in f for f in verdict.failures()), verdict.failures()
    finally:
        bug.close()


def test_a_distributed_run_keeps_its_ranks_everywhere():
    """The mixed-in production cases and the boundary sweep run on the run's ranks too, and at
    K3's widths a distributed case keeps its experts within EP_EXPERT_BYTES."""
    from hypothesis import given, settings

    from k3diff.ep_config import EP_EXPERT_BYTES
    from k3diff.strategies import GPU_SPACE, boundary_plan, cases

    space = replace(GPU_SPACE, ranks=3)
    plan = boundary_plan("moe", space, seed=5)
    assert plan and all(c.ep_ranks == 3 for c in plan)
    assert {c.ep_placement for c in plan} == set(ep_config.PLACEMENTS)
    assert {c.config().n_experts for c in plan} >= {256, 257, 512, 513}       # E's boundaries, small widths
    seen = []

    @settings(max_examples=40, database=None, deadline=None)
    @given(cases("moe", space))
    def draw(case):
        seen.append(case)

    draw()
    assert all(c.ep_ranks == 3 for c in seen) and any(c.preset == "full" for c in seen)
    for c in seen + plan:
        cfg = c.config()
        assert 6 * cfg.n_experts * cfg.moe_intermediate * cfg.latent_dim <= EP_EXPERT_BYTES
    assert not any(c.ep_ranks for c in boundary_plan("moe", GPU_SPACE, seed=5))


def test_megakernel_ep_is_a_declared_distributed_candidate():
    from k3diff.backends import load
    from k3diff.distributed import Declared

    b = load("megakernel-ep")
    assert isinstance(b, Declared) and b.name == "megakernel-ep" and b.ranks_on_gpu
    assert b.stages == ("moe",) and "combined" in b.provides("moe")
    assert b.boundaries["n_experts"] == (256, 512)
    import torch

    if not torch.cuda.is_available():
        why = b.available()
        assert why and "\n" not in why


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the no-GPU answer")
def test_pytest_k3diff_megakernel_ep_without_a_gpu_is_one_line():
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--k3diff",
                          "--k3diff-backend", "megakernel-ep", "--k3diff-ranks", "2", "tests/differential"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 4, run.stdout[-2000:] + run.stderr[-2000:]
    lines = [ln for ln in run.stderr.splitlines() if "megakernel-ep" in ln]
    assert lines and "cannot run here" in lines[0], run.stderr[-2000:]


def test_ranks_on_a_gpu_are_asked_for_by_the_candidate_not_the_group():
    """A GPU case with more ranks than GPUs exchanges over gloo; a kernel candidate's ranks still
    run on the GPU (megakernel-ep), a torch one's on the CPU (torch-blocked-ep)."""
    from k3diff.backends import load

    assert load("megakernel-ep").ranks_on_gpu and not load("torch-blocked-ep").ranks_on_gpu


def test_the_ranks_expert_kernels_are_compiled_in_ci():
    """`python -m megakernel compile` (CI, both archs) builds what a megakernel-ep rank launches:
    the schedule and expert kernels at dims k = 1, under labels of their own (ptx_dump's files)."""
    from megakernel import compile_list, config
    from megakernel.dims import FULL, SMALL

    entries = compile_list.entries(["full", "small"], config.current())
    ep = {(dn, n, dm) for dn, n, v, dm in entries if dn.endswith("-ep")}
    for dn, dm in (("full-ep", FULL), ("small-ep", SMALL)):
        for name in ("schedule", "expert_up", "expert_down", "expert_up_mma", "expert_down_mma"):
            assert (dn, name, replace(dm, k=1)) in ep
    labels = [(dn, n, tuple(sorted(v.items()))) for dn, n, v, _ in entries]
    assert len(labels) == len(set(labels))


def test_a_rank_launches_the_fork_joins_own_expert_kernels(monkeypatch):
    """launch_streams.expert_launches is what launches() runs as schedule, expert_up and
    expert_down (both formats, both expert kernels, every batch class): megakernel-ep's bitwise
    claim rests on the same kernels (the compile replaced by its key: no GPU, no compile)."""
    from types import SimpleNamespace

    from megakernel import cache, config, launch_streams
    from megakernel.dims import SMALL

    monkeypatch.setattr(cache, "compiled", lambda name, dims, **v: (name, dims, tuple(sorted(v.items()))))
    for fmt, mma in (("bf16", False), ("mxfp4", False), ("mxfp4", True)):
        moe = SimpleNamespace(dm=SMALL, settings=config.current(), fmt=fmt, uses_mma=lambda m=mma: m)
        for T in (1, 2, 8, 9, 64, 256):
            every = launch_streams.launches(moe, T, forced=False)
            assert every[2:5] == launch_streams.expert_launches(moe, T)
            assert [k[0] for k in every[2:5]] == ["schedule", "expert_up_mma" if mma else "expert_up",
                                                 "expert_down_mma" if mma else "expert_down"]
