"""The schedule dimension on the CPU: the case field and its seeds, what the strategies draw where,
the coverage table, the judging of a scheduled run's raw tensors, the neighbour-content check, the
schedule mutants' registration. What needs a GPU is in test_schedule_gpu.py."""
from __future__ import annotations
from wall_clock import limit      # a hang guard, never a speed check (tests/wall_clock.py)

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from k3diff import schedule
from k3diff.backends.blocked import TorchBlockedBackend
from k3diff.backends.blocked_graph import TorchBlockedGraphBackend
from k3diff.case import Case, CaseError
from k3diff.corpus import load
from k3diff.coverage import coverage_fields, coverage_lines
from k3diff.session import choose_space
from k3diff.strategies import CPU_SPACE, SMALL_PROD, cases
from k3diff.usage import UsageProblem
from k3diff.verdict import Verdict

ROOT = Path(__file__).resolve().parents[2]


def test_an_eager_case_writes_no_schedule_and_old_seeds_read_back_byte_identical():
    assert "schedule" not in Case(stage="moe").to_dict()
    seeds = sorted((ROOT / "corpora" / "regressions").rglob("*.json"))
    assert seeds
    for path in seeds:
        record = json.loads(path.read_text())
        case, _ = load(path)
        assert case.schedule == ""
        assert case.to_dict() == record["case"], path


def test_a_schedule_travels_in_the_seed_and_the_label():
    case = Case(stage="kda", batch=2, n_slots=3, state_idx=(1, 2), schedule="pressure:half").validate()
    assert case.to_dict()["schedule"] == "pressure:half"
    assert Case.from_dict(json.loads(case.to_json())) == case
    assert case.label().endswith("schedule=pressure:half")
    assert "schedule" not in Case(stage="moe").label()


@pytest.mark.parametrize("bad", ["warp", "pressure:all", 3, None])
def test_an_unknown_schedule_is_one_line(bad):
    with pytest.raises(CaseError, match="unknown schedule"):
        Case(stage="moe", schedule=bad).validate()


def test_declared_schedules():
    assert schedule.declared(TorchBlockedBackend()) == schedule.PRESSURES
    assert schedule.declared(TorchBlockedGraphBackend()) == (schedule.GRAPH,) + schedule.PRESSURES

    class Distributed:
        distributed = True
        graph_safe = True

    class Named:
        schedules = ("graph",)

    class Bad:
        schedules = ("sometimes",)

    assert schedule.declared(Distributed()) == ()
    assert schedule.declared(Named()) == ("graph",)
    assert schedule.declared(None) == ()
    with pytest.raises(ValueError, match="unknown schedule"):
        schedule.declared(Bad())


def test_schedules_and_wave_batches_only_in_a_gpu_space(monkeypatch):
    from k3diff import pressure

    monkeypatch.setattr(pressure, "available", lambda: True)
    cpu = choose_space("cpu", None, TorchBlockedGraphBackend())
    assert cpu.schedules == () and "batch" not in dict(cpu.boundaries)
    gpu = choose_space("cuda", "small", TorchBlockedGraphBackend())
    assert gpu.schedules == (schedule.GRAPH,) + schedule.PRESSURES
    assert set(schedule.WAVE_BATCHES) <= set(dict(gpu.boundaries)["batch"])
    assert choose_space("cuda", "small", TorchBlockedBackend()).schedules == schedule.PRESSURES
    monkeypatch.setattr(pressure, "available", lambda: False)          # no Triton: no pressure drawn
    assert choose_space("cuda", "small", TorchBlockedGraphBackend()).schedules == (schedule.GRAPH,)


def test_the_environment_restricts_or_turns_off_the_dimension(monkeypatch):
    from k3diff import pressure

    monkeypatch.setattr(pressure, "available", lambda: True)
    monkeypatch.setenv(schedule.ENV, "graph,pressure:l2")
    assert choose_space("cuda", "small", TorchBlockedGraphBackend()).schedules == ("graph", "pressure:l2")
    monkeypatch.setenv(schedule.ENV, "off")
    assert choose_space("cuda", "small", TorchBlockedGraphBackend()) == choose_space("cuda", "small")
    assert choose_space("cuda", "small", None) == SMALL_PROD
    monkeypatch.setenv(schedule.ENV, "graph,sometimes")
    with pytest.raises(UsageProblem, match="unknown schedule 'sometimes'"):
        choose_space("cuda", "small", TorchBlockedGraphBackend())


def _drawn(space, stage, n=60):
    got = []

    @settings(max_examples=n, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(cases(stage, space))
    def draw(case):
        got.append(case)

    draw()
    return got


def test_the_cpu_space_draws_no_schedule_and_a_gpu_space_draws_both():
    assert {c.schedule for c in _drawn(CPU_SPACE, "kda", 30)} == {""}
    space = replace(CPU_SPACE, schedules=(schedule.GRAPH, "pressure:half"))
    seen = {c.schedule for c in _drawn(space, "kda")}
    assert seen == {"", "graph", "pressure:half"}


def test_coverage_counts_the_schedules():
    recs = [{"stage": "kda", **coverage_fields(Case(stage="kda", batch=1, n_slots=2, state_idx=(1,), schedule=s))}
            for s in ("", "graph", "graph", "pressure:one_sm")]
    lines = coverage_lines(recs)
    assert any(line.split() == ["schedule", "graph", "2,", "pressure:one_sm", "1"] for line in lines), lines
    assert "schedule" not in coverage_fields(Case(stage="moe"))["coverage"]


# ------------------------------------------------------------------ the judging side

def _verdict(sched="graph"):
    return Verdict(Case(stage="moe", schedule=sched), "x")


def _judge(got, cand, backend=TorchBlockedBackend(), judge=lambda outs: []):
    v = _verdict(got.get("schedule", "graph"))
    reps = schedule.reports("moe", lambda n: n, dict(cand, _schedule=got), judge,
                           getattr(backend, "deterministic", True), v)
    return reps, v


def test_same_bits_pass_other_bits_fail_named():
    out = torch.arange(6, dtype=torch.float32).view(2, 3)
    reps, _ = _judge({"schedule": "graph", "outputs": {"out": out.clone()}, "states": {}}, {"out": out})
    assert [r.tensor for r in reps] == ["out@graph"] and all(r.ok for r in reps)
    other = out.clone()
    other[1, 2] = 0.5
    reps, _ = _judge({"schedule": "pressure:half", "outputs": {"out": other}, "states": {}}, {"out": out})
    assert not reps[0].ok and reps[0].tensor == "out@pressure:half"
    assert "under pressure:half" in reps[0].note and "1 element(s) differ" in reps[0].note


def test_a_capture_failure_fails_and_a_skip_is_a_note():
    reps, _ = _judge({"schedule": "graph", "error": "CUDA graph capture failed: RuntimeError: x"}, {})
    assert len(reps) == 1 and not reps[0].ok and reps[0].note.startswith("CUDA graph capture failed")
    reps, v = _judge({"schedule": "graph", "skip": "schedule graph needs a CUDA device"}, {})
    assert reps == [] and v.notes == ["schedule graph needs a CUDA device"]


def test_a_nondeterministic_candidate_is_judged_by_the_error_rule():
    class Nondeterministic:
        deterministic = False

    seen = []

    def judge(outs):
        from k3diff.divergence import TensorReport

        seen.append(outs)
        return [TensorReport("moe", "out", True)]

    out = torch.ones(2, 3)
    reps, _ = _judge({"schedule": "graph", "outputs": {"out": out * 2}, "states": {}}, {"out": out},
                     Nondeterministic(), judge)
    assert seen and torch.equal(seen[0]["out"], out * 2)
    assert [r.tensor for r in reps] == ["out@graph"] and reps[0].ok


def test_a_graph_case_on_the_cpu_is_judged_eagerly_with_a_note():
    from k3diff.runner import check_case

    case = Case(stage="kda", batch=3, n_slots=4, state_idx=(2, 0, 1), schedule="graph", seed=3).validate()
    v = check_case(case, TorchBlockedGraphBackend())
    assert v.ok, v.failures()
    assert any("needs a CUDA device" in n for n in v.notes)


def test_the_graph_safe_kda_matches_torch_blocked_within_the_rule():
    from k3diff.runner import check_case

    case = Case(stage="kda", batch=5, n_slots=7, state_idx=(3, -1, 6, 0, 1), seed=11, steps=2).validate()
    v = check_case(case, TorchBlockedGraphBackend())
    assert v.ok, v.failures()


# ------------------------------------------------------------------ neighbour content

class _BatchScaled:
    """The faithful reference, declared batch-invariant, but x quantised with one scale over the
    whole batch (a dynamic per-tensor scale): row b moves with its neighbours' magnitudes."""
    name = "batch-scaled"
    deterministic = True
    batch_invariant = True
    stages = ("moe",)

    def __init__(self):
        from k3diff.backends.oracle import faithful

        self.inner = faithful()

    def provides(self, stage):
        return self.inner.provides(stage)

    def prepare(self, cfg, stage, weights):
        return weights

    def run(self, stage, cfg, prepared, inputs, out):
        x = inputs["x"]
        s = x.float().abs().amax().clamp_min(1e-30) / 127
        xq = (torch.round(x.float() / s) * s).to(x.dtype)
        self.inner.run(stage, cfg, prepared, dict(inputs, x=xq), out)


def test_neighbour_content_passes_the_reference_and_catches_a_batch_wide_scale():
    from k3diff.backends.oracle import faithful
    from k3diff.invariance import check_batch_invariance

    case = Case(stage="moe", batch=4, seed=5).validate()
    good = check_batch_invariance(case, faithful(), 1)
    names = [r.tensor for r in good.reports]
    assert good.ok and "out.row_vs_neighbours" in names
    bad = check_batch_invariance(case, _BatchScaled(), 1)
    failed = [r for r in bad.reports if not r.ok and r.tensor.endswith(".row_vs_neighbours")]
    assert failed and "when only the other rows' inputs did" in failed[0].note


def test_others_changed_keeps_row_b_and_its_slot():
    from k3diff.neighbours import others_changed

    inputs = {"x": torch.ones(3, 2), "state_idx": torch.tensor([2, 0, 1]),
              "recurrent_state": torch.ones(4, 2), "kv_cache": torch.ones(3, 2, 2)}
    got = others_changed(inputs, 0)
    assert torch.equal(got["x"][0], inputs["x"][0]) and (got["x"][1:] == -2).all()
    assert torch.equal(got["recurrent_state"][[0, 2]], torch.ones(2, 2))          # null slot, row 0's slot
    assert (got["recurrent_state"][[1, 3]] == -2).all()
    assert (inputs["x"] == 1).all()                                                 # the inputs untouched


# ------------------------------------------------------------------ mutants

def test_schedule_mutants_are_gpu_only_and_hunted_in_their_schedules(monkeypatch):
    from k3diff import mutants, pressure, schedule_mutants

    names = {m.name for m in mutants.GPU_MUTANTS}
    assert names == {b[0] for b in schedule_mutants.BUGS}
    assert not names & {m.name for m in mutants.for_device("cpu")}
    assert names <= {m.name for m in mutants.for_device("cuda")}
    monkeypatch.setattr(pressure, "available", lambda: True)
    space = choose_space("cuda", "small")
    assert schedule_mutants.hunt_space(schedule_mutants.GraphInputCachedByIdentity(), space, "cuda").schedules == ("graph",)
    assert schedule_mutants.hunt_space(schedule_mutants.SplitKRouter(), space, "cuda").schedules == schedule.PRESSURES
    assert schedule_mutants.hunt_space(mutants.MutantBackend(mutants.MUTANTS[0]), space, "cuda") == space


def test_the_schedule_mutants_are_right_eagerly_on_the_cpu():
    """Each planted schedule bug is a correct candidate when run once eagerly: what makes it a
    schedule bug (the GPU test shows each caught under its schedule)."""
    from k3diff import schedule_mutants
    from k3diff.runner import check_case

    kda = Case(stage="kda", batch=3, n_slots=4, state_idx=(2, 0, 1), seed=2).validate()
    for cls in (schedule_mutants.GraphInputCachedByIdentity, schedule_mutants.GraphOutputSkippedWhenUnchanged,
                schedule_mutants.GraphHostRead):
        v = check_case(kda, cls())
        assert v.ok, (cls.name, v.failures())
    kda_cls = (schedule_mutants.GraphInputCachedByIdentity, schedule_mutants.GraphOutputSkippedWhenUnchanged,
               schedule_mutants.GraphHostRead, schedule_mutants.GraphLiveRowsByBuffer)
    for cls in kda_cls[3:]:
        v = check_case(kda, cls())
        assert v.ok, (cls.name, v.failures())
    moe = Case(stage="moe", batch=3, seed=2).validate()
    for cls in (schedule_mutants.SplitKRouter, schedule_mutants.SplitKOrdered):
        v = check_case(moe, cls())
        assert v.ok, (cls.name, v.failures())


_SPIN_CHECK = """
import torch
from k3diff import pressure
spin = pressure._kernel()
hold, ctas = 64, 3
for thrash, n_buf, first in ((False, 1, 5.0), (True, 1000, float(sum(range(0, 5 * ctas * hold, ctas * hold))))):
    flag, buf = torch.zeros(1, dtype=torch.int32), torch.arange(n_buf, dtype=torch.float32)
    sink = torch.empty(ctas * hold)
    spin[(ctas,)](flag, buf, sink, n_buf, 5, THRASH=thrash, HOLD=hold, num_warps=32)
    assert float(sink[0]) == first, (thrash, float(sink[0]))
    flag.fill_(1)
    spin[(ctas,)](flag, buf, sink, n_buf, 5, THRASH=thrash, HOLD=hold, num_warps=32)
    assert not sink.any()
print("ok")
"""


_ROUTER_CHECK = """
import torch
from k3diff.schedule_kernels import BLOCK_E, router_logits
g = torch.Generator().manual_seed(0)
for T, E, K, grid in ((5, 70, 130, 3), (2, 64, 64, 4), (9, 5, 200, 2)):
    x = torch.randn(T, K, generator=g).to(torch.bfloat16)
    w = torch.randn(E, K, generator=g).to(torch.bfloat16)
    want = x.double() @ w.double().t()
    for kind in ("by_program", "two_launches"):
        got = router_logits(x, w, kind=kind, grid=grid, hold=64)
        assert got.dtype == torch.float32 and got.shape == (T, E), kind
        err = (got.double() - want).abs().max().item()
        assert err < 1e-3 * want.abs().max().item(), (kind, T, E, K, err)
    assert torch.equal(router_logits(x, w, kind="by_program", grid=grid),
                       router_logits(x, w, kind="two_launches", grid=grid, hold=64))
print("ok")
"""


def test_the_router_kernels_compute_x_times_w_in_the_interpreter():
    """The correct variants of the pressure bugs' kernels (k3diff/schedule_kernels.py) in Triton's
    interpreter: the logits of every row, whatever the grid and tile remainders, the same bits by
    either (each row's K order is the same). The planted variants read %smid or wait on every CTA
    at once, which the interpreter (one program after another) cannot run: the GPU tests do."""
    import os
    import subprocess
    import sys

    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join([str(ROOT)] + sys.path))
    done = subprocess.run([sys.executable, "-c", _ROUTER_CHECK], capture_output=True, text=True, env=env, timeout=limit(600))
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_the_co_runner_kernel_polls_its_flag_and_streams_its_buffer():
    """The spin kernel's loop in Triton's interpreter (CPU; its own process: the interpreter must be
    chosen before triton is imported): without the stop word it polls max_iters times, with it it
    stops at once; pressure:l2 walks the buffer a grid-stride a poll."""
    import os
    import subprocess
    import sys

    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join([str(ROOT)] + sys.path))
    done = subprocess.run([sys.executable, "-c", _SPIN_CHECK], capture_output=True, text=True, env=env, timeout=limit(300))
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


# ------------------------------------------------------------------ graph replay, with a stand-in CUDA graph

class _FakeGraph:
    """CUDA-graph semantics on the CPU for a backend that launches through `_launch`: at capture the
    backend's Python runs once and its launches are recorded; a replay runs only the launches."""
    capturing = None

    def __init__(self):
        self.ops = []

    def replay(self):
        for op in self.ops:
            op()


class _FakeCapture:
    def __init__(self, graph):
        self.graph = graph

    def __enter__(self):
        _FakeGraph.capturing = self.graph

    def __exit__(self, *exc):
        _FakeGraph.capturing = None


def _launch(op):
    if _FakeGraph.capturing is not None:
        _FakeGraph.capturing.ops.append(op)
    else:
        op()


class _Doubler:
    """out = 2 x, launched; with `cache_by_identity`, x is re-packed only for a new tensor object
    or version (the planted graph bug of k3diff/schedule_mutants.py, in launches)."""
    deterministic = True

    def __init__(self, cache_by_identity=False, host_read=False):
        self.cache, self.host_read, self.packed = cache_by_identity, host_read, None

    def run(self, stage, cfg, prepared, inputs, out):
        import weakref

        x = inputs["x"]
        if self.host_read and _FakeGraph.capturing is not None:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        if not self.cache or self.packed is None or self.packed[0]() is not x or self.packed[1] != x._version:
            buf = torch.empty_like(x)
            _launch(lambda: buf.copy_(x))
            self.packed = (weakref.ref(x), x._version, buf)
        src = self.packed[2]
        _launch(lambda: out["out"].copy_(src * 2))


@pytest.fixture
def fake_cuda(monkeypatch):
    import contextlib

    from k3diff import graph_replay

    monkeypatch.setattr(torch.cuda, "Stream", lambda *a, **k: type("S", (), {"wait_stream": lambda self, o: None})())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: type("S", (), {"wait_stream": lambda self, o: None})())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", _FakeCapture)
    graph_replay._GRAPHS.clear()
    yield graph_replay
    graph_replay._GRAPHS.clear()


def _alloc(inputs, fill):
    return {"out": torch.full_like(inputs["x"], float("nan"))}


def _graph_reports(backend, replay, x):
    got = dict(replay(backend, "moe", None, "prepared", {"x": x}, _alloc), schedule="graph")
    eager = _alloc({"x": x}, "nan")
    backend.run("moe", None, "prepared", {"x": x.clone()}, eager)
    return schedule.reports("moe", lambda n: n, dict(eager, _schedule=got), lambda o: [],
                            getattr(backend, "deterministic", True), _verdict())


def test_graph_replay_captures_once_per_shape_and_copies_each_cases_inputs_in(fake_cuda):
    backend = _Doubler()
    for seed in range(3):
        x = torch.randn(4, 3, generator=torch.Generator().manual_seed(seed))
        reps = _graph_reports(backend, fake_cuda.replay, x)
        assert reps and all(r.ok for r in reps), [r.line() for r in reps]
    assert len(fake_cuda._GRAPHS) == 1                         # one shape: one capture
    _graph_reports(backend, fake_cuda.replay, torch.randn(5, 3))
    assert len(fake_cuda._GRAPHS) == 2


def test_graph_replay_catches_an_input_cached_by_identity_and_names_a_capture_failure(fake_cuda):
    x = torch.randn(4, 3)
    reps = _graph_reports(_Doubler(cache_by_identity=True), fake_cuda.replay, x)
    assert not reps[0].ok and "graph replay gave other bits" in reps[0].note
    got = fake_cuda.replay(_Doubler(host_read=True), "moe", None, "p", {"x": x}, _alloc)
    assert got == {"error": "CUDA graph capture failed: RuntimeError: CUDA error: operation not permitted "
                            "when stream is capturing"}


def test_the_decoy_negates_floating_inputs_rolls_slots_and_lengths_and_keeps_states():
    from k3diff.graph_replay import decoy

    x, idx, s, lens = torch.ones(2, 3), torch.tensor([1, 0, 4]), torch.ones(3, 2), torch.tensor([5, 0, 7])
    got = decoy("kda", {"x": x, "state_idx": idx, "conv_state": s, "layer_idx": 3, "cache_lens": lens,
                        "forced_ids": torch.tensor([[1, 2], [3, 4]])})
    assert (got["x"] == -1).all() and torch.equal(got["conv_state"], s)
    assert got["state_idx"].tolist() == [4, 1, 0] and got["cache_lens"].tolist() == [7, 5, 0]
    assert got["forced_ids"].tolist() == [[1, 2], [3, 4]]
    assert got["layer_idx"] == 3 and got["conv_state"] is not s and idx.tolist() == [1, 0, 4]


class _Generator:
    """PyTorch's default CUDA generator as far as a capture that fails part way touches it."""

    def __init__(self):
        self.state = "clean"

    def clone_state(self):
        return "clone of " + self.state

    def graphsafe_set_state(self, saved):
        self.state = saved


def test_a_failed_capture_puts_the_cuda_generators_state_back(fake_cuda, monkeypatch):
    gen = _Generator()
    monkeypatch.setattr(fake_cuda, "_generator", lambda device: gen)

    class _LeavesTheGeneratorCapturing(_Doubler):
        def run(self, stage, cfg, prepared, inputs, out):
            if _FakeGraph.capturing is not None:
                gen.state = "capturing"            # what torch's capture_begin does to it
                raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
            super().run(stage, cfg, prepared, inputs, out)

    got = fake_cuda.replay(_LeavesTheGeneratorCapturing(), "moe", None, "p", {"x": torch.ones(2, 2)}, _alloc)
    assert got["error"].startswith("CUDA graph capture failed")
    assert gen.state == "clone of clean"
    ok = fake_cuda.replay(_Doubler(), "moe", None, "p", {"x": torch.ones(2, 2)}, _alloc)
    assert "error" not in ok and gen.state == "clone of clean"


def test_the_graph_safe_kda_refuses_a_verify_case_instead_of_failing_on_its_shapes():
    """A verify case (T = ΣW rows against B slots) once reached the one-token step and failed on a
    size mismatch, which made every graph mutant built on it look caught without its schedule."""
    from k3diff import schedule_mutants
    from k3diff.runner import check_case

    case = Case(stage="kda", batch=3, n_slots=5, state_idx=(2, 0, 4), widths=(3, 2, 1), accepted=(2, 1, 0),
                seed=1).validate()
    for backend in (TorchBlockedGraphBackend(), schedule_mutants.GraphSafeControl()):
        v = check_case(case, backend)
        assert v.skipped and not v.failures(), (v.skipped, v.failures())


def test_the_schedule_hunt_prints_its_rows_as_they_come_and_needs_a_gpu(capsys):
    from k3diff import exit_codes
    from k3diff.tools import schedule_hunt

    said = []
    lines, good = schedule_hunt.with_and_without(1, 0, "cpu", isolate=False, only={"graph_safe_control"},
                                                 say=said.append)
    assert said == lines and len(lines) == 2 and good
    assert lines[1].startswith("control graph_safe_control") and " pass " in lines[1]
    assert schedule_hunt.main(["--device", "cpu"]) == exit_codes.MACHINE
    assert "need a CUDA device" in capsys.readouterr().err


def test_what_caught_a_bug_is_named_by_its_first_failing_tensor():
    from k3diff.divergence import TensorReport
    from k3diff.tools.schedule_hunt import caught_by

    v = _verdict()
    v.reports += [TensorReport("moe", "out", True), TensorReport("moe", "router_logits@pressure:half", False)]
    assert caught_by(v) == "schedule"
    v.reports.insert(0, TensorReport("moe", "determinism", False))
    assert caught_by(v) == "eager"


def test_the_hunt_isolates_the_candidates_that_may_hang_with_a_time_limit(monkeypatch):
    from k3diff import isolation, schedule_mutants
    from k3diff.tools import schedule_hunt

    made = []

    class _Isolated:
        def __init__(self, spec, name, *, device, timeout, threads):
            made.append((spec, name, timeout))

        def start(self):
            pass

        def check(self, case):
            pass

        def close(self):
            pass

    monkeypatch.setattr(isolation, "IsolatedChecker", _Isolated)
    schedule_hunt._checker(schedule_mutants.RouterGridBarrier, "cuda", 30.0, True)
    assert made == [("k3diff.schedule_mutants:RouterGridBarrier", "mutant:router_grid_barrier", 30.0)]
    schedule_hunt._checker(schedule_mutants.GraphSafeControl, "cuda", 30.0, True)     # plain PyTorch: here
    schedule_hunt._checker(schedule_mutants.RouterTwoLaunches, "cuda", 30.0, False)   # --in-process
    assert len(made) == 1
