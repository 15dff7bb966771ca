"""Schedules `pressure:*`: the candidate runs while a co-runner holds part of the GPU
(k3diff/schedule.py says why).

The co-runner is a persistent Triton kernel launched on its own stream just before the candidate:
one CTA of 4 warps per SM it is to hold (the CTA scheduler places the first CTAs of a grid one per
SM on an idle GPU), each spinning on a flag in device memory that the candidate's stream sets once
the candidate's work is done; `pressure:l2` instead streams a buffer four times the L2's size
through a quarter of the SMs, so the candidate finds its working set evicted. Each CTA also gives
up after MAX_ITERS polls (about a second), so a candidate whose CTAs wait on each other (a grid
barrier that assumes every CTA is resident) ends up slow rather than hung, and a device-wide
synchronize inside the candidate only waits that long.

The candidate's CTAs thus land on other SMs, in another order, and for longer: a race whose
outcome depends on which CTAs share an SM, or a split whose partials are summed by atomics, gives
other bits than on an idle GPU. A deterministic candidate must give the same bits under every
pressure (k3diff.schedule.reports).

Triton is imported on first use (a GPU machine only); without it the strategies draw no pressure
(`available`) and a pressure seed replayed there is judged eagerly with a note saying so.
"""
from __future__ import annotations

import contextlib
import functools

import torch

from k3diff.stages import STATE

MAX_ITERS = 1 << 21          # polls per CTA before it gives up (~1 s on an H100)
BLOCK = 1024                 # floats a CTA reads per poll under pressure:l2
_BUFFERS: dict = {}


def sms_held(kind: str, n_sms: int) -> int:
    """CTAs (= SMs on an idle GPU) the co-runner of `kind` holds on a GPU of `n_sms` SMs."""
    return {"pressure:one_sm": 1, "pressure:half": n_sms // 2, "pressure:all_but_one": n_sms - 1,
            "pressure:l2": max(1, n_sms // 4)}[kind]


@functools.lru_cache(maxsize=1)
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def spin(flag_ptr, buf_ptr, sink_ptr, n_buf, max_iters, THRASH: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        pos = pid * BLOCK
        step = tl.num_programs(0) * BLOCK
        it = pid * 0
        stop = tl.load(flag_ptr, volatile=True)
        while (stop == 0) & (it < max_iters):
            if THRASH:
                acc += tl.load(buf_ptr + (pos + offs) % n_buf)
                pos = (pos + step) % n_buf
            stop = tl.load(flag_ptr, volatile=True)
            it += 1
        tl.store(sink_ptr + pid * BLOCK + offs, acc)     # the reads are not dead code

    return spin


def _buffers(device, kind: str, ctas: int):
    props = torch.cuda.get_device_properties(device)
    # as many floats as the L2 has bytes: a buffer four times its size
    n_buf = max(getattr(props, "L2_cache_size", 0), 50 << 20) if kind == "pressure:l2" else BLOCK
    key = (str(device), n_buf, ctas)
    if key not in _BUFFERS:
        _BUFFERS.clear()
        _BUFFERS[key] = (torch.zeros(1, dtype=torch.int32, device=device),
                         torch.ones(n_buf, dtype=torch.float32, device=device),
                         torch.empty(ctas * BLOCK, dtype=torch.float32, device=device))
    return _BUFFERS[key]


@contextlib.contextmanager
def co_runner(kind: str, device):
    """While the body enqueues its work on the current stream, the co-runner of `kind` holds its
    SMs from another stream; it stops when the body's work is done."""
    spin = _kernel()
    n_sms = torch.cuda.get_device_properties(device).multi_processor_count
    ctas = sms_held(kind, n_sms)
    flag, buf, sink = _buffers(device, kind, ctas)
    main = torch.cuda.current_stream(device)
    flag.zero_()
    side = torch.cuda.Stream(device)
    side.wait_stream(main)
    with torch.cuda.stream(side):
        spin[(ctas,)](flag, buf, sink, buf.numel(), MAX_ITERS, THRASH=kind == "pressure:l2", BLOCK=BLOCK,
                      num_warps=4)
    try:
        yield ctas
    finally:
        flag.fill_(1)                     # on the candidate's stream: after its last kernel
        main.wait_stream(side)


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("triton") is not None


def run_under(kind: str, backend, stage, cfg, prepared, inputs: dict, alloc) -> dict:
    """{"outputs", "states"} of one run of the candidate under the co-runner of `kind`, or
    {"skip": line} where Triton is missing."""
    if not available():
        return {"skip": f"schedule {kind} needs Triton, not installed here; judged eagerly only"}
    device = next(v.device for v in inputs.values() if torch.is_tensor(v))
    out = alloc(inputs, "nan")
    with co_runner(kind, device):
        backend.run(stage, cfg, prepared, inputs, out)
    torch.cuda.synchronize(device)
    return {"outputs": {k: v.clone() for k, v in out.items()},
            "states": {k: inputs[k].clone() for k in STATE[stage] if k in inputs}}
