"""The megakernel's verify steps and FP8 cache (megakernel/verify.py, fp8_cache.py) judged by k3diff
on the CPU: the backend's run paths and the real MLA, KDA and layer steps over emulated kernels
(emulated_kernels.py; the layer's MoE is torch-blocked's), on verify and FP8 cases at the small
preset's dims; and planted bugs in
what the backend builds around the kernels, each caught. The kernels themselves are judged on the
GPU (the ci profile with the megakernel)."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")

from k3diff.features import case_features  # noqa: E402
from k3diff.mutants import first_failure  # noqa: E402
from k3diff.session import choose_space  # noqa: E402
from megakernel import fp8_cache, verify  # noqa: E402
from tests.megakernel import emulated_kernels as emu  # noqa: E402

EXAMPLES = 8           # a stage: enough verify and FP8 cases to catch each planted bug below


@pytest.fixture(autouse=True)
def _emulated(monkeypatch):
    emu.emulate(monkeypatch)


def _hunt(stages=("kda", "mla"), seed=1, need=frozenset(), examples=EXAMPLES, decode=False):
    seen = []

    def keep(case):
        # small cases (the emulated attention is a loop over tokens), no dense layer 0 (its MLP's
        # kernels are not emulated); decode: those alone
        f = case_features(case)
        small = case.batch <= 16 and max(case.cache_lens, default=0) <= 700
        if (not f if decode else f and need <= f) and small and (case.stage != "layer" or case.layer_idx):
            seen.append(f)
            return True
        return False

    verdict, count, _, _ = first_failure(emu.EmulatedBackend(), stages, examples_per_stage=examples,
                                         seed=seed, space=choose_space("cpu", preset="small"),
                                         case_filter=keep)
    return verdict, count, seen


@pytest.mark.parametrize("seed,stages", [(1, ("kda", "mla", "layer")), (2, ("kda", "mla"))])
def test_verify_and_fp8_cases_pass_through_the_steps_three_parts(seed, stages):
    verdict, count, seen = _hunt(stages, seed=seed)
    assert verdict is None, verdict.headline()
    assert count == len(stages) * EXAMPLES
    assert any("verify" in f for f in seen) and any("fp8_cache" in f for f in seen)


def test_decode_cases_pass_through_the_same_steps():
    """The decode step's own path (query_lens absent, a bf16 cache) through the real steps."""
    verdict, count, seen = _hunt(("kda", "mla", "layer"), seed=3, decode=True)
    assert verdict is None, verdict.headline()
    assert count == 3 * EXAMPLES and not any(seen)


def _early_commit(first, accepted):             # the state of the token before the last accepted
    return first + torch.clamp(accepted - 2, min=0)


def _reversed_tokens(j, first, w):               # a sequence's tokens run last to first
    jj = torch.clamp(w - 1 - j, min=0)
    return first + jj, jj


def _per_tensor_quantise(kv_c, k_pe, md):         # one scale for a row's every tile
    n, R = kv_c.shape
    t = fp8_cache.tile(R)
    v = kv_c.to(torch.float32).view(n, R // t, t)
    s = torch.clamp(v.abs().amax((-1, -2)) / 448.0, min=torch.finfo(torch.float32).tiny)
    s = s.view(n, 1).expand(n, R // t).contiguous()
    q = (v / s.unsqueeze(-1)).to(torch.float8_e4m3fn).view(n, R)
    return torch.cat([q.view(torch.uint8), s.view(torch.uint8).view(n, -1),
                      k_pe.to(torch.bfloat16).contiguous().view(torch.uint8).view(n, -1)], dim=-1)


def _own_row_unquantised(cache, seq, pos, rows, md):
    """fp8_cache.write with the step's own rows put into the bf16 copy as computed, not as the
    FP8 cache holds them."""
    work = fp8_cache.read(cache, md)
    cache[seq, pos] = fp8_cache.quantise(rows[:, :md.R], rows[:, md.R:], md)
    work[seq, pos] = rows
    return work


def _sees_next(n, bind, md, **v):                 # token j also attends row L + j + 1
    n["lens"][:n["T"]] += 1
    emu._mla_attn(n, bind, md, **v)
    n["lens"][:n["T"]] -= 1


def _plant_kernel(mp, names, fn):
    for name in names:
        mp.setitem(emu.KERNELS, name, fn)


PLANTED = {
    "kda: the slot continues from the token before the last accepted":
        (("kda",), frozenset({"verify"}), lambda mp: mp.setattr(verify, "_accepted_row", _early_commit)),
    "mla and kda: a sequence's tokens run in reverse order":
        (("kda", "mla"), frozenset({"verify"}), lambda mp: mp.setattr(verify, "_token_rows", _reversed_tokens)),
    "mla: token j also attends row L + j + 1 (the causal mask among the drafts)":
        (("mla",), frozenset({"verify"}),
         lambda mp: _plant_kernel(mp, ("mla_attn", "mla_attn_mma", "mla_attn_wg", "mla_attn_tma"), _sees_next)),
    "mla: the FP8 scale taken per row, not per tile":
        (("mla",), frozenset({"fp8_cache"}), lambda mp: mp.setattr(fp8_cache, "quantise", _per_tensor_quantise)),
    # the subtlest: one row of a token's L + 1 off by e4m3's rounding; the error rule's whole-tensor
    # bound sees it (2.3-2.4x the baseline's error), within 4-17 FP8 cases at seeds 1-3
    "mla: a token reads its own FP8 entry unquantised":
        (("mla",), frozenset({"fp8_cache"}), lambda mp: mp.setattr(fp8_cache, "write", _own_row_unquantised), 40),
}


@pytest.mark.parametrize("name", list(PLANTED))
def test_a_planted_bug_around_the_kernels_is_caught(name, monkeypatch):
    stages, need, plant, *examples = PLANTED[name]
    plant(monkeypatch)
    verdict, count, _ = _hunt(stages, need=need, examples=examples[0] if examples else EXAMPLES)
    assert verdict is not None, f"{name}: not caught in {count} cases"
    assert not verdict.error, verdict.headline()      # a judged divergence, not a crash


def test_an_fp8_entry_round_trips_the_contract():
    """quantise: the contract's scale per tile and e4m3 values; read: e4m3 * scale, then bf16."""
    from types import SimpleNamespace

    md = SimpleNamespace(R=512, RP=64)
    g = torch.Generator().manual_seed(0)
    kv_c = (torch.randn(5, 512, generator=g) * torch.tensor([1e-3, 1.0, 30.0, 0.0]).repeat_interleave(128)).bfloat16()
    k_pe = torch.randn(5, 64, generator=g).bfloat16()
    rows = fp8_cache.quantise(kv_c, k_pe, md)
    assert rows.shape == (5, fp8_cache.row_bytes(md)) == (5, 656)
    scale = rows[:, 512:528].contiguous().view(torch.float32)
    amax = kv_c.float().view(5, 4, 128).abs().amax(-1)
    assert torch.equal(scale, torch.clamp(amax / 448.0, min=torch.finfo(torch.float32).tiny))
    back = fp8_cache.read(rows, md)
    assert torch.equal(back[:, 512:], k_pe)
    assert torch.equal(back[:, 384:512], torch.zeros(5, 128, dtype=torch.bfloat16))   # a zero tile
    err = (back[:, :384].float() - kv_c[:, :384].float()).abs() / kv_c[:, :384].float().abs().clamp(min=1e-30)
    assert float(err.max()) <= 2 ** -4 + 2 ** -8      # e4m3's half step, then bf16's


def test_a_width_past_the_contract_is_one_clear_error():
    ql = torch.tensor([9, 1])
    with pytest.raises(ValueError, match="widths"):
        verify.launches(ql, 10)


class _NoRead(torch.Tensor):
    """An integer input that fails any read back to the host, as a CUDA graph's capture would."""

    def item(self):
        raise AssertionError("a host read in a verify step")

    def tolist(self):
        raise AssertionError("a host read in a verify step")

    def __int__(self):
        raise AssertionError("a host read in a verify step")


class _Launches:
    """A decode step (mla.MlaStep's or kda.KdaStep's launch, scratch and splits) that records each
    launch's stages and leaves its buffers as they are: zeros, 4 wide."""

    def __init__(self, names, C=5):
        from types import SimpleNamespace
        self.names, self.calls, self.md, self.kept = tuple(names), [], SimpleNamespace(C=C), {}

    def scratch(self, T, NS=1, keep=True):
        return self.kept.setdefault(T, {n: torch.zeros(T, 4) for n in self.names + ("z", "q", "graw")})

    def splits(self, n_max):
        return 1

    def launch(self, x, *args, stages=None, scratch=None, **kw):
        self.calls.append(stages)
        return scratch if scratch is not None else self.scratch(x.shape[0])

    def count(self, stages):
        return sum(1 for c in self.calls if c == stages)


def test_a_verify_step_reads_nothing_back_so_a_graph_holds_it(monkeypatch):
    from megakernel.kda import OUTPUTS as KDA, STATE_STAGES
    from megakernel.mla import CACHE_STAGES, OUTPUTS as MLA
    monkeypatch.setattr(verify, "_capturing", lambda: True)
    nr = lambda *v: torch.tensor(v).as_subclass(_NoRead)          # noqa: E731
    widths, T = nr(3, 1, 2), 6
    mla = _Launches(MLA.values())
    out = verify.mla(mla, torch.zeros(T, 8), torch.zeros(3, 12, 5, dtype=torch.bfloat16), nr(4, 0, 7), widths, max_len=11)
    assert mla.count(CACHE_STAGES) == T - 3 + 1 and out["out"].shape == (T, 4)
    assert len(mla.calls) == T - 3 + 1 + 2              # and the per-token launches, once each
    kda = _Launches(KDA)
    out = verify.kda(kda, torch.zeros(T, 8), torch.zeros(5, 2, 3), torch.zeros(5, 2, 2, 2),
                     nr(1, 0, 4), widths, nr(2, 1, 0), torch.zeros(T, 2, 3), torch.zeros(T, 2, 2, 2))
    assert kda.count(STATE_STAGES) == T - 3 + 1 and out["core"].shape == (T, 4)


def test_an_eager_verify_step_launches_as_many_as_its_widest_sequence():
    from megakernel.mla import CACHE_STAGES, OUTPUTS as MLA
    mla = _Launches(MLA.values())
    verify.mla(mla, torch.zeros(6, 8), torch.zeros(3, 12, 5, dtype=torch.bfloat16), torch.tensor([4, 0, 7]),
               torch.tensor([3, 1, 2]), max_len=11)
    assert mla.count(CACHE_STAGES) == 3


def test_a_caller_knowing_the_width_saves_a_captured_steps_launches(monkeypatch):
    """Captured, the launch count is the shapes' bound (8 for 8 sequences of 2), unless the caller
    gives the width it knows (a fixed-width verify step: 2); eagerly a wrong one is one error."""
    from megakernel.mla import CACHE_STAGES, OUTPUTS as MLA
    args = (torch.zeros(16, 8), torch.zeros(8, 12, 5, dtype=torch.bfloat16), torch.zeros(8, dtype=torch.int64), torch.full((8,), 2))
    with monkeypatch.context() as m:
        m.setattr(verify, "_capturing", lambda: True)
        bound, known = _Launches(MLA.values()), _Launches(MLA.values())
        verify.mla(bound, *args, max_len=11)
        verify.mla(known, *args, max_len=11, widest=2)
    assert (bound.count(CACHE_STAGES), known.count(CACHE_STAGES)) == (8, 2)
    with pytest.raises(ValueError, match="widths"):
        verify.mla(_Launches(MLA.values()), *args, max_len=11, widest=1)


def test_the_parts_of_a_step_are_the_kernels_reads_and_writes():
    """verify.py moves a launch's token rows by name (mla.CACHE_READS / CACHE_WRITES, kda.STATE_*):
    the names must be every per-token buffer the cache or state kernels take (their ARGS), and
    the three parts every launch of the step."""
    pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")
    from megakernel import kda, mla
    from megakernel.k_kda_conv import KdaConv
    from megakernel.k_kda_core import KdaCore
    from megakernel.k_mla_attn import MlaAttn
    from megakernel.k_mla_merge import MlaMerge

    assert set(mla.TOKEN_STAGES + mla.CACHE_STAGES + mla.OUT_STAGES) == set(mla.STEPS.stages)
    assert set(kda.TOKEN_STAGES + kda.STATE_STAGES + kda.OUT_STAGES) == set(kda.STEPS.stages)
    # the per-token buffers of each step (its scratch, less the split partials and the slots)
    mla_rows = {"z", "qc", "kvc", "kpe", "q", "ql", "lat", "o", "gated", "out"}
    kda_rows = {"z", "graw", "conv_out", "decay", "beta", "core", "normed", "out"}
    taken = {n for k in (MlaAttn, MlaMerge) for n, _ in k.ARGS} & mla_rows
    assert taken == set(mla.CACHE_READS) | set(mla.CACHE_WRITES)
    taken = {n for k in (KdaConv, KdaCore) for n, _ in k.ARGS} & kda_rows
    assert taken == set(kda.STATE_READS) | set(kda.STATE_WRITES)


def _gpu_check_plants():
    """gpu_check.sh's plants in verify.py: (name, sed expression, stage)."""
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.sh").read_text()
    return re.findall(r"^\s*plant (\w+) verify\.py '([^']+)' (\w+)$", text, flags=re.M)


@pytest.mark.parametrize("name,expr,stage", _gpu_check_plants() or [("none", "", "")])
def test_the_gpu_checks_verify_plants_are_caught_here_too(name, expr, stage, monkeypatch, tmp_path):
    """The bugs gpu_check.sh's mutants lane plants in a throwaway copy of verify.py (by its own sed
    expression), caught by k3diff through the emulated steps: the expression plants a real bug."""
    import importlib.util
    import subprocess
    import sys
    from pathlib import Path

    import megakernel
    assert expr, "gpu_check.sh plants nothing in verify.py"
    src = Path(verify.__file__)
    copy = tmp_path / "verify.py"
    copy.write_text(subprocess.run(["sed", expr, str(src)], capture_output=True, text=True, check=True).stdout)
    assert copy.read_text() != src.read_text(), f"{name}: the expression plants nothing"
    spec = importlib.util.spec_from_file_location("megakernel.verify", copy)
    planted = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(planted)
    monkeypatch.setitem(sys.modules, "megakernel.verify", planted)
    monkeypatch.setattr(megakernel, "verify", planted)
    verdict, count, _ = _hunt((stage,), need=frozenset({"verify"}))
    assert verdict is not None and not verdict.error, f"{name}: not caught in {count} cases"


def test_the_verify_bench_runs_its_rows_through_the_emulated_steps(monkeypatch, capsys):
    """bench_verify's rows end to end on the CPU (small dims, the emulated kernels, each timed
    step run once instead of captured): its calls into verify.py and fp8_cache.py are the ones a
    GPU will time, so a GPU call is not spent finding a wrong argument."""
    from megakernel.tools import bench_kda, bench_mla, bench_verify as bv, roofline

    cpu = torch.device("cpu")
    for mod in (bv, bench_kda, bench_mla):
        monkeypatch.setattr(mod, "DEV", cpu)
    monkeypatch.setattr(bv, "no_gpu", lambda tool: False)
    monkeypatch.setattr(bv, "graph_us", lambda fn, R: [fn(i) for i in range(R)] and 10.0)
    monkeypatch.setattr(roofline, "measure", lambda dev: roofline.Machine(3e12, 7e14))
    assert bv.main(["--dims", "small", "--batches", "2", "--widths", "1,3", "--lens", "40"]) == 0
    rows = [ln.split() for ln in capsys.readouterr().out.splitlines() if ln.startswith(("mla ", "kda "))]
    assert [(r[0], r[1], r[4]) for r in rows] == [("mla", "bf16", "1"), ("mla", "bf16", "3"),
                                                 ("mla", "fp8", "1"), ("mla", "fp8", "3"),
                                                 ("kda", "-", "1"), ("kda", "-", "3")]
