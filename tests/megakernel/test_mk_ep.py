"""The megakernel's expert parallelism on the CPU (issue 34): megakernel/ep.py's `ep_step` (the
dispatch, the rank's experts over what it received, the combine back into (token, slot) places)
judged by k3diff on gloo ranks with a torch engine in place of the kernels (ep_torch.py), over
both exchanges (torch.distributed's all-to-all; ep_ipc.py's, its buffers shared file mappings
here); ep_ipc's buffers against all_to_all_single's output, its offsets, who picks it, its
setting; a dispatch to the wrong rank and rows at a wrong offset caught; the `megakernel-ep`
declaration loaded as a distributed candidate that says in one line why it cannot run without
a GPU. On a GPU the same plumbing runs the kernels: tests/megakernel/test_mk_ep_gpu.py."""
import subprocess
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from k3diff import ep_config
from k3diff.case import moe_case
from k3diff.runner import check_case

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
if str(HERE) not in sys.path:                # ep_torch: loaded by name in the ranks (they get sys.path)
    sys.path.insert(0, str(HERE))


ep_case = moe_case


@pytest.fixture(scope="module")
def torch_ep():
    import ep_torch

    cand = ep_torch.TorchEngineEP()
    yield cand
    cand.close()


@pytest.fixture(scope="module")
def torch_ep_ipc():
    import ep_torch

    cand = ep_torch.TorchEngineIpcEP()
    yield cand
    cand.close()


ODD = (("n_experts", 15),)          # 15 % 2 != 0 and 15 % 4 != 0: uneven shards
CASES = [
    ep_case(2, "contiguous", batch=1),                                       # rank 1: no token
    ep_case(3, "uneven", owners=(2,) * 6 + (0,) * 6, batch=5, routing="hot", seed=2),  # rank 1: no expert
    ep_case(2, "strided", batch=7, overrides=ODD, routing="dropped", seed=5),
    ep_case(4, "scattered", owners=[(e * 7) % 5 % 4 for e in range(12)], batch=9, expert_format="mxfp4",
            routing="forced", seed=9),
    ep_case(3, "contiguous", batch=2, overrides=ODD, routing="ties", seed=11),  # a rank with no token
]
CASE_IDS = ["idle-rank", "empty-rank-hot", "E%N-dropped", "scattered-mxfp4-forced", "fewer-tokens-than-ranks"]


@pytest.mark.parametrize("exchange", ["dist", "ipc"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_ep_step_passes_the_runner(request, exchange, case):
    """Over torch.distributed's all-to-all and over ep_ipc's exchange (its buffers shared file
    mappings on the CPU: the same offsets, growth and fences as CUDA IPC)."""
    verdict = check_case(case, request.getfixturevalue("torch_ep" if exchange == "dist" else "torch_ep_ipc"))
    assert verdict.ok, verdict.failures()
    names = {r.tensor for r in verdict.reports}
    assert {"out", "combined", "routed_out"} <= names, names       # the combine's own tensors compared


def test_ipc_rows_at_a_wrong_offset_fail_numerically(torch_ep_ipc):
    """The planted IPC bug (each block's rows one row late in the receiver, ids in place): the
    experts see other tokens' rows, so the combine is wrong and k3diff says so."""
    import ep_torch

    case = ep_case(3, "contiguous", batch=9, seed=3)
    assert check_case(case, torch_ep_ipc).ok               # the exchange without the bug passes it
    bug = ep_torch.RowsOneOffTorchEP()
    try:
        verdict = check_case(case, bug)
        assert not verdict.ok and not verdict.error, verdict.headline()
        assert any("combined" in f for f in verdict.failures()), verdict.failures()
    finally:
        bug.close()


def test_ipc_offsets_are_the_all_to_all_order_less_the_receivers_own_block():
    from megakernel.ep_ipc import offsets, remote, transposed

    C = [[2, 0, 3],          # C[s][d]: rows s sends d
         [1, 4, 0],
         [5, 2, 1]]
    off = offsets(C)
    # receiver 0 holds 1's block then 2's: [1 row of 1 | 5 rows of 2]; its own 2 rows stay home
    assert [off[1][0], off[2][0]] == [0, 1] and remote(C, 0, True) == 6
    # receiver 2 holds 0's then 1's: [3 | 0]
    assert [off[0][2], off[1][2]] == [0, 3] and remote(C, 2, True) == 3
    back = offsets(transposed(C))      # owner d's place in home s's return rows
    assert [back[1][0], back[2][0]] == [0, 0] and remote(C, 0, False) == 3   # home 0: [0 | 3 of 2]
    assert [back[0][2], back[1][2]] == [0, 5] and remote(C, 2, False) == 7   # home 2: [5 of 0 | 2 of 1]
    # against the all-to-all's receive order (by source rank), own block taken out, any counts
    import random

    rnd = random.Random(7)
    for _ in range(200):
        W = rnd.randint(1, 5)
        C = [[rnd.choice([0, 0, 1, 3, 70]) for _ in range(W)] for _ in range(W)]
        off = offsets(C)
        for d in range(W):
            a2a = [(s, i) for s in range(W) for i in range(C[s][d])]
            mine = [(s, i) for (s, i) in a2a if s != d]
            assert len(mine) == remote(C, d, True)
            for s in range(W):
                if s != d:
                    for i in range(C[s][d]):
                        assert mine[off[s][d] + i] == (s, i)


def test_the_ipc_exchange_holds_what_all_to_all_single_gives_on_gloo_ranks(tmp_path):
    """Three gloo ranks send rows and ids both ways (ep.exchange, IpcExchange over shared file
    mappings) and y back: each receiver's buffer equals the all-to-all's output less its own
    block, the y rows come back in send order; a rank that sends nothing, one that receives
    nothing, and a round that grows the buffers (past ep_ipc.FLOOR rows) and one after it.
    Also CPU ranks never pick IPC (auto: dist; ipc: refused with a ValueError)."""
    import multiprocessing

    import ep_torch
    from k3diff.rank_pool import _main_not_reimported

    rounds = [[[1, 2, 0], [0, 0, 0], [3, 0, 2]],          # rank 1 sends nothing; receives from 0 only
              [[0, 150, 7], [5, 0, 90], [1, 60, 1]],       # 210 rows into rank 1: the buffers grow
              [[2, 2, 2], [0, 3, 0], [4, 0, 0]]]           # smaller again: the grown buffers kept
    ctx = multiprocessing.get_context("spawn")
    answers = ctx.Queue()
    procs = [ctx.Process(target=ep_torch.probe_exchanges, daemon=True,
                         args=(r, 3, str(tmp_path / "store"), rounds, 32, answers)) for r in range(3)]
    with _main_not_reimported():
        for p in procs:
            p.start()
    try:
        got = sorted(answers.get(timeout=limit(240)) for _ in procs)
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    assert [g[1] for g in got] == [None, None, None], got
    assert {g[2] for g in got} == {256}, got          # 210 rows: 64 doubled twice, on every rank


def test_the_exchange_setting_and_who_picks_ipc():
    from megakernel import config
    from megakernel.ep import MegakernelEPRank
    from megakernel.ep_ipc import choose

    assert config.from_env({}).ep_exchange == "auto"
    assert config.from_env({"MEGAKERNEL_EP_EXCHANGE": "dist"}).ep_exchange == "dist"
    with pytest.raises(ValueError, match="MEGAKERNEL_EP_EXCHANGE"):
        config.from_env({"MEGAKERNEL_EP_EXCHANGE": "nvshmem"})
    assert MegakernelEPRank().exchange_setting() == config.current().ep_exchange

    class Dist(MegakernelEPRank):
        exchange = "dist"

    assert Dist().exchange_setting() == "dist"
    gpu2, cpu2 = [("h", "cuda")] * 2, [("h", "cpu")] * 2
    assert choose("auto", gpu2, "gloo") == "ipc" == choose("ipc", gpu2, "gloo")   # ranks sharing a GPU
    assert choose("dist", gpu2, "gloo") == "dist"                                  # the knob
    assert choose("auto", gpu2, "nccl") == "dist"                                  # NCCL moves device memory
    assert choose("auto", cpu2, "gloo") == "dist"                                  # CPU ranks never
    assert choose("auto", [("h", "cuda"), ("h", "cpu")], "gloo") == "dist"
    assert choose("auto", [("h", "cuda"), ("g", "cuda")], "gloo") == "dist"        # two hosts
    for peers, backend in ((cpu2, "gloo"), (gpu2, "nccl")):
        with pytest.raises(ValueError) as e:
            choose("ipc", peers, backend)
        assert "\n" not in str(e.value) and "MEGAKERNEL_EP_EXCHANGE" in str(e.value)


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
                         cwd=ROOT, capture_output=True, text=True, timeout=limit(300))
    assert run.returncode == 8, run.stdout[-2000:] + run.stderr[-2000:]   # k3diff/exit_codes.py BACKEND
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
    for fmt, mma, card in (("bf16", False, ""), ("mxfp4", False, ""), ("mxfp4", True, "NVIDIA H200"),
                           ("mxfp4", True, "NVIDIA H100 80GB HBM3")):
        moe = SimpleNamespace(dm=SMALL, settings=config.current(), fmt=fmt, uses_mma=lambda m=mma: m, card=card)
        for T in (1, 2, 8, 9, 64, 256):
            every = launch_streams.launches(moe, T, forced=False)
            assert every[2:5] == launch_streams.expert_launches(moe, T)
            assert [k[0] for k in every[2:5]] == ["schedule", "expert_up_mma" if mma else "expert_up",
                                                 "expert_down_mma" if mma else "expert_down"]
