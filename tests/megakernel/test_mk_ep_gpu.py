"""GPU: the megakernel's MoE with expert parallelism (megakernel/ep.py) on ranks sharing this GPU
(one rank per process, the ranks' kernels side by side on one device), over both exchanges:
ep_ipc.py's (CUDA IPC: each rank writes its rows straight into the owners' device buffers, its
own experts running meanwhile; what the shipped backend picks here) and torch.distributed's
all-to-all over gloo (host copies). Every output of either equals the single-GPU launch's bit
for bit (the design's claim: the same kernels on the same rows, in passes that do not change a
row's bits, the combine in the same slot order), so they equal each other; k3diff judges the
shipped backend on drawn layouts; rows written at a wrong offset in a peer's buffer are caught."""
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")

HERE = Path(__file__).parent
if str(HERE) not in sys.path:            # ep_torch: loaded by name in the ranks (they get sys.path)
    sys.path.insert(0, str(HERE))

import ep_torch  # noqa: E402
from k3diff.backends import load  # noqa: E402
from k3diff.case import moe_case  # noqa: E402
from k3diff.distributed import bind_case  # noqa: E402
from k3diff.materialize import materialize  # noqa: E402
from k3diff.runner import check_case  # noqa: E402
from k3diff.stages import output_specs, resolve_shape, dims as stage_dims  # noqa: E402
from megakernel.backend import MegakernelBackend  # noqa: E402


@pytest.fixture(scope="module")
def mk_ep():
    b = load("megakernel.backend:MegakernelEPBackend")   # the entry point needs a pip install
    yield b
    b.close()


@pytest.fixture(scope="module")
def mk_by_exchange():
    """The megakernel's rank with its exchange fixed: "ipc" (refuses to fall back) and "dist"."""
    cands = {"ipc": ep_torch.MkIpcEP(), "dist": ep_torch.MkDistEP()}
    yield cands
    for c in cands.values():
        c.close()


ep_case = moe_case


def run(backend, case):
    """Every moe output of `backend` on `case` (fresh buffers, the case's inputs on the GPU)."""
    cfg, weights, inputs = materialize(case, "cuda")
    sizes = stage_dims(cfg, "moe", inputs)
    out = {s.name: torch.empty(resolve_shape(s, sizes), dtype=s.dtype, device="cuda")
           for s in output_specs("moe")}
    bind_case(backend, case)
    backend.run("moe", cfg, backend.prepare(cfg, "moe", weights), inputs, out)
    torch.cuda.synchronize()
    return out


CASES = [
    dict(ranks=2, batch=1, preset="small"),                                   # rank 1: no token
    dict(ranks=3, batch=37, preset="small", expert_format="mxfp4", seed=3),
    dict(ranks=2, batch=64, preset="small", placement="strided", routing="forced", seed=4),
    dict(ranks=4, batch=9, preset="small", placement="uneven",
         owners=(3,) * 40 + (0,) * 72, routing="dropped", seed=5),           # ranks 1, 2: no expert
    # K3's widths with the experts a distributed case keeps (k3diff/ep_config.py EP_EXPERT_BYTES)
    dict(ranks=2, batch=5, preset="full", overrides=(("n_experts", 32),), seed=6),
    dict(ranks=3, batch=65, preset="full", overrides=(("n_experts", 32),), expert_format="mxfp4",
         routing="hot", seed=7),
]


def shared_gpu(ranks):
    """The IPC exchange is for ranks under a gloo group: with a GPU per rank k3diff takes NCCL."""
    if torch.cuda.device_count() >= ranks:
        pytest.skip(f"{torch.cuda.device_count()} GPUs for {ranks} ranks: an NCCL group, no IPC exchange")


def single(case):
    return replace(case, ep_ranks=0, ep_placement="", ep_owners=())


def case_id(kw):
    return (f"{kw['ranks']}r-B{kw['batch']}-{kw['preset']}-{kw.get('expert_format', 'bf16')}-"
            f"{kw.get('routing', 'natural')}")


def assert_equal(got, want, what):
    for name, w in want.items():
        assert torch.equal(got[name], w), f"{what}: {name}: max|diff| {(got[name].float() - w.float()).abs().max()}"


@pytest.mark.parametrize("kw", CASES, ids=case_id)
@pytest.mark.parametrize("exchange", ["ipc", "dist"])
def test_ep_equals_the_single_gpu_step_bit_for_bit(mk_by_exchange, exchange, kw):
    """Each exchange equals the single-GPU launch, hence the other (select one with -k ipc / dist)."""
    if exchange == "ipc":
        shared_gpu(kw["ranks"])
    case = ep_case(**kw)
    want = run(MegakernelBackend(), single(case))
    assert_equal(run(mk_by_exchange[exchange], case), want, f"{exchange} exchange")


def test_the_shipped_rank_picks_ipc_on_a_shared_gpu():
    """megakernel-ep's own rank (its exchange from the settings: auto) takes IPC here; a rank
    that took torch.distributed fails the case (ep_torch.MkAutoRank)."""
    from megakernel import config

    if config.current().ep_exchange != "auto":
        pytest.skip(f"MEGAKERNEL_EP_EXCHANGE={config.current().ep_exchange}")
    shared_gpu(CASES[1]["ranks"])
    cand = ep_torch.MkAutoEP()
    try:
        case = ep_case(**CASES[1])
        assert_equal(run(cand, case), run(MegakernelBackend(), single(case)), "auto")
    finally:
        cand.close()


def test_ipc_rows_at_a_wrong_offset_are_caught():
    """The planted IPC bug (ep_torch.RowsOneOff: each block's rows one row late in the peer's
    buffer, ids in place): the outputs differ from the single-GPU launch and k3diff fails it."""
    shared_gpu(3)
    cand = ep_torch.MkRowsOneOffEP()
    try:
        case = ep_case(ranks=3, batch=9, preset="small", seed=8)
        got, want = run(cand, case), run(MegakernelBackend(), single(case))
        assert not torch.equal(got["combined"], want["combined"])
        verdict = check_case(case, cand, device="cuda")
        assert not verdict.ok, verdict.headline()
    finally:
        cand.close()


@pytest.mark.parametrize("kw", CASES[:4], ids=lambda kw: f"{kw['ranks']}r-B{kw['batch']}")
def test_k3diff_judges_the_ep_step(mk_ep, kw):
    verdict = check_case(ep_case(**kw), mk_ep, device="cuda")
    assert verdict.ok, verdict.failures()
