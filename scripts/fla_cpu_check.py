"""Judge the real fla-core kernels through the `fla` adapter on a CPU, with Triton's interpreter.

    pip install 'fla-core==0.6.0' 'triton==3.6.0' einops      # triton's wheel installs without a GPU
    TRITON_INTERPRET=1 PYTHONPATH=$PWD python scripts/fla_cpu_check.py [--examples 6] [--seed 3]

Draws `kda` cases of the 'tiny' preset (k3diff.strategies) and runs each through
k3diff.runner.check_case with the adapter calling FLA's own Triton kernels, interpreted on the CPU.
It checks the adapter's convention mapping against the float64 reference with the library's real
kernel code, before any GPU time is spent. Three interpreter gaps are patched here, never on a GPU:
- autotuning benchmarks need a GPU driver: every autotuned kernel takes its first config;
- the interpreter rounds f32 -> bf16 by truncation, the GPU (and the rtne casts FLA asks for) to
  nearest even: the cast is replaced by torch's round-to-nearest-even;
- `tl.range` with a runtime bound (fused_recurrent_kda's token loop) gets that bound as a one-element
  array: it is read as an int.
Exit status 0 when every case passes. K3DIFF_FLA_SLOTS / K3DIFF_FLA_STATE select the adapter's modes.
"""
from __future__ import annotations

import argparse
import os
import sys


def patch_interpreter() -> None:
    import numpy as np
    import torch
    import triton.language as tl
    import triton.runtime.autotuner as at
    import triton.runtime.interpreter as ip

    at.Autotuner._bench = lambda self, *a, **k: [1.0, 1.0, 1.0]
    if "do_bench" in at.Autotuner.__dict__:
        try:
            delattr(at.Autotuner, "do_bench")
        except AttributeError:
            pass
    at.Autotuner.do_bench = property(lambda self: (lambda fn, quantiles=None: [1.0, 1.0, 1.0]))

    convert = ip._convert_float

    def rne(inp, src, dst, mode):
        if src == tl.float32 and dst == tl.bfloat16 and mode in (None, "rtne"):
            t = torch.from_numpy(np.ascontiguousarray(inp).astype(np.float32)).to(torch.bfloat16)
            return t.view(torch.int16).numpy().view(np.uint16)
        return convert(inp, src, dst, mode)
    ip._convert_float = rne

    core = ip._patch_lang_core

    def as_int(v):
        h = getattr(v, "handle", None)
        return int(np.asarray(h.data).reshape(-1)[0]) if h is not None else v

    def patch_core(lang, scope):
        core(lang, scope)
        inner = lang.range

        def rng(a1, a2=None, step=None, **kw):
            return inner(as_int(a1), None if a2 is None else as_int(a2), None if step is None else as_int(step), **kw)
        scope.set_attr(lang, "range", rng)
        scope.set_attr(lang, "static_range", rng)
    ip._patch_lang_core = patch_core


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=6)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") != "1":
        print("set TRITON_INTERPRET=1 (Triton's CPU interpreter)")
        return 2
    patch_interpreter()
    from k3diff.backends.fla_kda import FlaKdaBackend, fla_version
    from k3diff.runner import check_case
    from k3diff.search import find_failure
    from k3diff.strategies import Space, cases

    print(f"fla-core {fla_version()} through the `fla` adapter, Triton interpreter, tiny preset", flush=True)
    backend = FlaKdaBackend()

    def judge(case):
        verdict = check_case(case, backend, device="cpu")
        print(verdict.headline(), flush=True)
        for line in verdict.failures()[:4]:
            print("   ", line)
        return verdict
    verdict, count = find_failure(cases("kda", Space(max_batch=6, long_len=50)), judge,
                                  examples=args.examples, seed=args.seed, shrink=False)
    print(f"{count} cases, {'a failure' if verdict else 'all passed'}")
    return 1 if verdict else 0


if __name__ == "__main__":
    sys.exit(main())
