"""The false-alarm controls (k3diff/false_alarms.py): correct variants of the torch-blocked
candidate that differ only in legitimate numerics must pass every stage; the variants themselves
must really differ from the candidate (a control that changes nothing proves nothing); the margins
tool (k3diff/tools/margins.py) runs end to end at tiny dims."""
import pytest
import torch

from k3diff import false_alarms
from k3diff.backends import blocked_ops
from k3diff.backends import blocked_variants as bv
from k3diff.session import choose_space

CPU = [c.name for c in false_alarms.selected("cpu")]
# CI budget: examples per stage per control (tiny dims, CPU: ~45 s of CPU for all of them;
# `k3diff mutants` runs 10 per stage)
EXAMPLES = 1


@pytest.mark.parametrize("name", CPU)
def test_correct_variant_passes_every_stage(name):
    r = false_alarms.check(false_alarms.BY_NAME[name], examples_per_stage=EXAMPLES, seed=1,
                           space=choose_space("cpu"))
    assert r.passed, f"false alarm on a correct variant: {r.stage}: {r.headline}"
    assert r.examples == EXAMPLES * len(false_alarms.BY_NAME[name].stages)


def test_cuda_only_controls_are_left_out_on_the_cpu():
    assert "gemm_tf32" not in CPU and "gemm_tf32" in [c.name for c in false_alarms.selected("cuda")]


def test_the_summation_orders_really_differ_and_stay_correct():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 1000, generator=g).bfloat16()
    w = (torch.randn(5, 1000, generator=g) * 0.02).bfloat16()
    exact = x.double() @ w.double().T
    absdot = x.double().abs() @ w.double().abs().T
    outs = {f.__name__: f(x, w) for f in (bv.gemm_sequential, bv.gemm_reversed, bv.gemm_pairwise,
                                           bv.gemm_split_tree(2), bv.gemm_split_tree(8))}
    outs["default"] = blocked_ops.gemm(x, w)
    distinct = {tuple(o.flatten().tolist()) for o in outs.values()}
    assert len(distinct) >= 4, "the orders should round differently"
    for name, o in outs.items():
        assert float(((o.double() - exact).abs() / (2 ** -24 * absdot)).max()) < 8, name


def test_results_across_bf16_midpoints_flip_their_rounding_and_stay_inside_the_floor():
    from k3diff.budgets import C_ACCUM

    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 512, generator=g).bfloat16()
    w = torch.randn(4096, 512, generator=g).bfloat16()
    plain = blocked_ops.gemm(x, w)
    moved = bv.gemm_across_midpoints(blocked_ops.gemm)(x, w)
    changed = moved != plain
    # about (2 * MIDPOINT_ULPS + 1) / 2^16 of the results: a few in ten thousand, not none
    assert 20 < int(changed.sum()) < 0.002 * plain.numel()
    # every one of them rounds to the other bf16 neighbour: one bf16 ulp from the baseline's value
    assert bool((moved.bfloat16() != plain.bfloat16())[changed].all())
    assert bool((moved.bfloat16() == plain.bfloat16())[~changed].all())
    # and moved by no more than C_ACCUM u·|x| <= C_ACCUM u·Σ|a||b|: inside the floor of every GEMM
    absdot = x.float().abs() @ w.float().abs().T
    assert float(((moved - plain).abs() / (2 ** -24 * plain.abs())).max()) <= 30
    assert bool(((moved - plain).abs() <= C_ACCUM * 2 ** -24 * absdot).all())


def test_approximate_functions_sit_at_their_documented_error():
    x = torch.linspace(-20, 5, 1001)
    exact = torch.exp(x.double())
    ulp = (torch.nextafter(torch.exp(x), torch.tensor(float("inf"))) - torch.exp(x)).double()
    err = ((bv.exp_approx(x).double() - exact).abs() / ulp)
    assert float(err.max()) <= 2 + float((1.173 * x.abs()).max()) + 1 and float(err.min()) >= 1
    r = torch.linspace(0.01, 100, 1001)
    assert not torch.equal(bv.rsqrt_approx(r), torch.rsqrt(r))
    tiny = torch.tensor([1e-39, -1e-40, 1.0, 2e-38])
    assert bv.ftz(tiny).tolist() == [0.0, -0.0, 1.0, pytest.approx(2e-38)]


def test_pairwise_sum_is_a_tree():
    parts = [torch.tensor([float(i)]) for i in range(7)]
    assert float(bv.pairwise(iter(parts))) == 21.0


def test_margins_tool_runs_at_tiny_dims(capsys):
    from k3diff.tools import margins

    assert margins.main(["--preset", "tiny", "--device", "cpu", "--batch", "3", "--controls", "combine_reversed"]) == 0
    out = capsys.readouterr().out
    assert "router_logits" in out and "recurrent_state" in out and "combine_reversed" in out
    moe = out[out.index("\nmoe"):out.index("\nmla")]
    correct = next(line for line in moe.splitlines() if "torch-blocked (correct)" in line)
    short = next(line for line in moe.splitlines() if "gemm_one_chunk_short" in line)
    assert "acc" in correct and correct.split()[2].endswith("%"), correct   # the correct one passes
    assert short.split()[1].endswith("x"), short                             # the bug lands far past


def test_margins_refuses_a_bad_request_in_one_line_before_any_case(capsys):
    from k3diff.tools import margins

    for argv, said in ((["--stages", "foo"], "unknown stage 'foo'"), (["--variants", "nope"], "unknown variant 'nope'")):
        with pytest.raises(SystemExit) as exc:
            margins.main(argv + ["--device", "cpu", "--batch", "1"])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and said in err and err.count("\n") == 1
