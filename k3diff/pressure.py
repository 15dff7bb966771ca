"""Schedules `pressure:*`: the candidate runs while a co-runner holds part of the GPU
(k3diff/schedule.py says why).

The co-runner is a persistent Triton kernel launched on its own stream just before the candidate:
one CTA of 1024 threads per SM it is to hold, each keeping 64 floats a thread live in registers, so
that it takes its SM's whole register file (the CTA scheduler places the first CTAs of a grid one
per SM on an idle GPU, and no other CTA fits beside one), each spinning on a flag in device memory that the candidate's stream sets once
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
# no `from __future__ import annotations`: Triton 3.0's interpreter (torch 2.4 brings Triton 3.0)
# takes a kernel's parameter as constexpr only where its annotation is tl.constexpr itself, not the
# string; the kernels in Triton's interpreter are what the CPU tests run

import contextlib
import functools
import importlib.util

import torch

from k3diff.stages import STATE

MAX_ITERS = 1 << 20          # polls per CTA before it gives up (well under a second on an H100)
WARPS = 32                   # 1024 threads a CTA, the most a CTA may have
# floats each CTA keeps live across its loop: 64 a thread, the most ptxas grants a 1024-thread CTA,
# so one CTA takes its SM's whole register file and no other CTA fits beside it (what "holds the SM"
# means; compiled offline by Triton 3.6 for sm_90a: 64 registers a thread and a few bytes of
# spills, both modes); HOLD_FALLBACK where a GPU refuses that launch (it then only shares its SMs)
HOLD, HOLD_FALLBACK = 1 << 16, 1 << 12
_BUFFERS: dict = {}
_HOLD: dict = {}             # device -> the HOLD its launch took
_FLAGS: dict = {}            # device -> the co-runner's stop word


def sms_held(kind: str, n_sms: int) -> int:
    """CTAs (= SMs on an idle GPU) the co-runner of `kind` holds on a GPU of `n_sms` SMs."""
    return {"pressure:one_sm": 1, "pressure:half": n_sms // 2, "pressure:all_but_one": n_sms - 1,
            "pressure:l2": max(1, n_sms // 4)}[kind]


@functools.lru_cache(maxsize=1)
def _kernel():
    import triton
    # tl a module global, not a local: Triton 3.0 and 3.1 (torch 2.4's, 2.5's) look a kernel's names up
    # in its module's globals only (compiling for sm_90: NameError 'tl is not defined')
    global tl
    import triton.language as tl

    @triton.jit
    def spin(flag_ptr, buf_ptr, sink_ptr, n_buf, max_iters, THRASH: tl.constexpr, HOLD: tl.constexpr):
        pid = tl.program_id(0)
        offs = tl.arange(0, HOLD)
        acc = tl.zeros([HOLD], dtype=tl.float32)         # live in registers: the SM's register file
        pos = pid * HOLD
        step = tl.num_programs(0) * HOLD
        it = pid * 0
        stop = tl.load(flag_ptr, volatile=True)
        while (stop == 0) & (it < max_iters):
            if THRASH:                                    # stream the buffer through the L2
                acc += tl.load(buf_ptr + (pos + offs) % n_buf)
                pos = (pos + step) % n_buf
            else:
                acc += 1.0
            stop = tl.load(flag_ptr, volatile=True)
            it += 1
        tl.store(sink_ptr + pid * HOLD + offs, acc)      # the loop is not dead code

    return spin


def _buffers(device, kind: str, ctas: int, hold: int):
    props = torch.cuda.get_device_properties(device)
    # as many floats as the L2 has bytes: a buffer four times its size
    n_buf = max(getattr(props, "L2_cache_size", 0), 50 << 20) if kind == "pressure:l2" else 1
    key = (str(device), n_buf, ctas, hold)
    if key not in _BUFFERS:
        _BUFFERS.clear()
        _BUFFERS[key] = (torch.ones(n_buf, dtype=torch.float32, device=device),
                         torch.empty(ctas * hold, dtype=torch.float32, device=device))
    return _BUFFERS[key]


def _launch(kind, device, ctas, flag):
    """Start the co-runner on the current stream; the HOLD it runs with (the first launch on a
    device tries HOLD, then HOLD_FALLBACK)."""
    spin = _kernel()
    tries = [_HOLD[str(device)]] if str(device) in _HOLD else [HOLD, HOLD_FALLBACK]
    for i, hold in enumerate(tries):
        buf, sink = _buffers(device, kind, ctas, hold)
        try:
            spin[(ctas,)](flag, buf, sink, buf.numel(), MAX_ITERS, THRASH=kind == "pressure:l2", HOLD=hold,
                          num_warps=WARPS)
        except Exception:  # noqa: BLE001 - out of resources on this GPU: the smaller hold
            if i == len(tries) - 1:
                raise
            continue
        _HOLD[str(device)] = hold
        return hold
    raise AssertionError("unreachable")


@contextlib.contextmanager
def co_runner(kind: str, device):
    """While the body enqueues its work on the current stream, the co-runner of `kind` holds its
    SMs from another stream; it stops when the body's work is done. Yields (CTAs, floats held
    per CTA)."""
    n_sms = torch.cuda.get_device_properties(device).multi_processor_count
    ctas = sms_held(kind, n_sms)
    main = torch.cuda.current_stream(device)
    if str(device) not in _FLAGS:
        _FLAGS[str(device)] = torch.zeros(1, dtype=torch.int32, device=device)
    flag = _FLAGS[str(device)]
    flag.zero_()                          # on the candidate's stream, before the fork: its stop comes after
    side = torch.cuda.Stream(device)
    side.wait_stream(main)
    with torch.cuda.stream(side):
        hold = _launch(kind, device, ctas, flag)
    try:
        yield ctas, hold
    finally:
        flag.fill_(1)                     # on the candidate's stream: after its last kernel
        main.wait_stream(side)


def available() -> bool:
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
