"""False-alarm controls: correct candidates beside the planted bugs (k3diff/mutants.py).

A checker that fails every wrong kernel but also a correct one is as useless as one that passes
everything: its reviewers learn to ignore it. Each control here is the `torch-blocked` candidate
with one helper swapped for a correct alternative that differs only in legitimate numerics
(k3diff/backends/blocked_variants.py): another f32 summation order, split-K merged by a tree,
FMA or separately rounded products, exp/rsqrt/sigmoid at their documented ulp error, subnormals
flushed to zero, a two-pass softmax, another split-KV partition, the combine in another slot
order, GEMM results near a bf16 midpoint moved across it (their bf16 roundings flip, as another
order's do on a GPU), TF32 on bf16-valued operands (CUDA only). Each must pass every stage: the
false-alarm score (controls passing) must be 100%, as the mutation score is. Built with the
mutants' mechanism (`mutants.Swap`, `mutants.MutantBackend`).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

from k3diff.backends import blocked, blocked_attn, blocked_fp8, blocked_moe, blocked_ops
from k3diff.backends import blocked_variants as bv
from k3diff.mutants import MutantBackend, Swap, first_failure, score_table
from k3diff.stages import STAGES


@dataclass(frozen=True)
class Patch:
    """Module attribute `name` (a constant, e.g. KV_CHUNK) set to `value` while a control runs."""
    module: object
    name: str
    value: object

    def __post_init__(self):
        if not hasattr(self.module, self.name):
            raise AttributeError(f"control patch target {self.module.__name__}.{self.name} does not exist "
                                 "(renamed or moved?): update k3diff/false_alarms.py")

    @contextlib.contextmanager
    def applied(self):
        old = getattr(self.module, self.name)
        setattr(self.module, self.name, self.value)
        try:
            yield
        finally:
            setattr(self.module, self.name, old)


@dataclass(frozen=True)
class Together:
    """Several swaps or patches at once."""
    parts: tuple

    @contextlib.contextmanager
    def applied(self):
        with contextlib.ExitStack() as stack:
            for p in self.parts:
                stack.enter_context(p.applied())
            yield


@dataclass(frozen=True)
class Control:
    name: str
    area: str
    description: str
    swap: object                          # Swap, Patch or Together: what differs while it runs
    tamper: Callable | None = None        # (backend, stage, inputs_before, inputs, out) after run
    cuda_only: bool = False               # e.g. TF32: selected when CUDA is present
    # the stages whose numbers the swap reaches; on the others the control is torch-blocked bit
    # for bit, so fuzzing them would judge torch-blocked again
    stages: tuple = STAGES
    weights = None                        # (MutantBackend reads it: controls never change weights)


class ControlBackend(MutantBackend):
    """The correct candidate with one legitimate numerics difference."""

    def __init__(self, control: Control, inner=None):
        super().__init__(control, inner)
        self.name = f"control:{control.name}"


def _flush_outputs(backend, stage, before, inputs, out):
    """Every float output and state with its subnormals flushed to zero (FTZ stores)."""
    for t in list(out.values()) + [inputs[k] for k in before]:
        if t.is_floating_point():
            t.copy_(bv.ftz(t))


def _gemm(make):
    return Swap(blocked_ops, "gemm", make)


CONTROLS = [
    Control("gemm_sequential16", "order", "every GEMV/GEMM: f32 sum of 16-wide K chunks, first to last",
            _gemm(lambda o: bv.gemm_sequential)),
    Control("gemm_reversed16", "order", "every GEMV/GEMM: the 16-wide chunks summed last to first",
            _gemm(lambda o: bv.gemm_reversed)),
    Control("gemm_pairwise16", "order", "every GEMV/GEMM: the 16-wide chunk partials summed pairwise",
            _gemm(lambda o: bv.gemm_pairwise)),
    Control("gemm_splitk2_tree", "order", "every GEMV/GEMM: split-K 2, partials merged by a tree",
            _gemm(lambda o: bv.gemm_split_tree(2))),
    Control("gemm_splitk4_tree", "order", "every GEMV/GEMM: split-K 4, partials merged by a tree",
            _gemm(lambda o: bv.gemm_split_tree(4))),
    Control("gemm_splitk8_tree", "order", "every GEMV/GEMM: split-K 8, partials merged by a tree",
            _gemm(lambda o: bv.gemm_split_tree(8))),
    Control("gemm_tf32", "tensor-core", "GEMVs on bf16 operands as TF32 tensor-core matmuls (f32 accumulate)",
            _gemm(bv.gemm_tf32), cuda_only=True),
    Control("fma", "fma", "combine and delta rule with one FMA per multiply-add",
            Together((Swap(blocked_moe, "combine", lambda o: bv.combine_fma),
                      Swap(blocked_attn, "delta_rule", lambda o: bv.delta_rule_fma))),
            stages=("moe", "kda", "layer")),
    Control("mul_then_add", "fma", "delta rule with each product rounded to f32 before its sum",
            Swap(blocked_attn, "delta_rule", lambda o: bv.delta_rule_mul_add), stages=("kda", "layer")),
    Control("approx_exp", "special", "exp and sigmoid at __expf's documented 2 + |1.173x| ulps",
            Together((Swap(blocked_ops, "exp", lambda o: bv.exp_approx),
                      Swap(blocked_ops, "sigmoid", lambda o: bv.sigmoid_approx)))),
    Control("approx_rsqrt", "special", "rsqrt (every RMSNorm) at rsqrtf's documented 2 ulps",
            Swap(blocked_ops, "rsqrt", lambda o: bv.rsqrt_approx)),
    Control("flush_subnormals", "ftz", "subnormal GEMM operands, results, outputs and states flushed to zero",
            _gemm(bv.gemm_ftz), tamper=_flush_outputs),
    Control("two_pass_softmax", "softmax", "MLA attention and AttnRes with a two-pass softmax (no online merge)",
            Together((Swap(blocked_attn, "_attend", lambda o: bv.attend_two_pass),
                      Swap(blocked, "attn_res", lambda o: bv.attn_res_two_pass))), stages=("mla", "layer")),
    Control("split_kv_16", "split-kv", "MLA split-KV partials of 16 cache rows (default 64)",
            Patch(blocked_attn, "KV_CHUNK", 16), stages=("mla", "layer")),
    Control("split_kv_48", "split-kv", "MLA split-KV partials of 48 cache rows (not a power of two)",
            Patch(blocked_attn, "KV_CHUNK", 48), stages=("mla", "layer")),
    Control("gemm_across_midpoints", "rounding", "every GEMV/GEMM: f32 results within 7 ulps of a bf16 "
            "midpoint reflected across it (bf16 roundings flip, as another sum order's do)",
            _gemm(bv.gemm_across_midpoints)),
    Control("combine_reversed", "order", "the MoE combine's f32 sum over slots in reverse order",
            Swap(blocked_moe, "combine", lambda o: bv.combine_reversed), stages=("moe", "layer")),
] + [   # verify steps and the FP8 cache (docs/k3-decode.md §14-15), beside the verify mutants
    Control("verify_token_by_token", "verify", "MLA verify steps run token after token (decode-shaped calls)",
            Swap(blocked_attn, "run_mla", bv.mla_verify_token_by_token), stages=("mla", "layer")),
    Control("verify_commit_by_replay", "verify", "KDA's accepted state committed by re-running the "
            "accepted tokens from the saved slot", Swap(blocked_attn, "run_kda_verify", bv.kda_commit_by_replay),
            stages=("kda", "layer")),
    Control("fp8_read_f32", "fp8", "FP8 cache rows dequantised into f32 operands (no bf16 rounding)",
            Swap(blocked_fp8, "read_rows", bv.fp8_read_f32, within=(blocked_fp8,)), stages=("mla", "layer")),
]
BY_NAME = {c.name: c for c in CONTROLS}


def selected(device: str) -> list[Control]:
    """The controls this device can run: the CUDA-only ones where CUDA is the device."""
    cuda = str(device).startswith("cuda")
    return [c for c in CONTROLS if cuda or not c.cuda_only]


@dataclass
class ControlResult:
    control: str
    area: str
    passed: bool
    examples: int
    seconds: float
    stage: str = ""
    headline: str = ""


def check(control: Control, *, examples_per_stage: int, seed: int, space, device="cpu") -> ControlResult:
    """Fuzz one control over the stages it reaches; it passes when no case fails (a failure is a
    false alarm)."""
    verdict, count, seconds, stage = first_failure(ControlBackend(control), control.stages,
                                                   examples_per_stage=examples_per_stage, seed=seed,
                                                   space=space, device=device)
    if verdict is None:
        return ControlResult(control.name, control.area, True, count, seconds)
    first = verdict.failures()[0] if verdict.failures() else verdict.headline()
    return ControlResult(control.name, control.area, False, count, seconds, stage, first)


def table(results) -> list[str]:
    return score_table([(r.control, r.area, r.passed, r.examples, r.seconds, r.headline) for r in results],
                       ("control (correct variant)", "passed", "false alarm"),
                       "false-alarm score: {n}/{of} correct variants passed = {pct:.0f}%")
