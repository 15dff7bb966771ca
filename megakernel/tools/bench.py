"""python -m megakernel bench: the kernel vs torch eager, torch.compile and the copy roofline.

Method: weights drawn on the GPU; the small config rotates 8 weight sets and every
config rotates 8 inputs so L2 (60 MB) does not serve repeated reads (a full-dim step reads >= 0.6
GB anyway); the kernel's 11 launches (fork-join over two streams, and again all on one stream)
are captured R times in one CUDA graph and the replays timed with events, median of 5 (and the
one-launch persistent step, k_persistent.py, the same way: "1-launch us"; and the fork-join
with the MoE's four GEMVs all on the other kernel: the tensor-core k_gemv_mma.py when none is on
it by default (config.Gemv.mma), else the CUDA-core k_gemv.py: "other-GEMV us", and the
one launch so: "other-GEMV 1-launch"; at batch > 8 the fork-join with its tensor-core GEMVs on
mma.sync instead of wgmma, config.Gemv.wgmma, the same bits: ">8 on mma.sync us", nan while
gemv.WGMMA_GEMVS holds none of the MoE's); torch
columns timed with events, median of 5 (no graph: the eager loop syncs on the selected ids).
Roofline = bytes the step must read (each needed weight byte once: the x-side and output
weights, plus every distinct selected expert) / device-copy bandwidth (read + write counted)
measured in the same run ("%copyBW", the figures of the log); "%roof2" is the two-limit
floor, max(bytes / read bandwidth, flops / dense bf16 rate) (tools/roofline.py; B or F: which
limit), measured in the same run too.
"""
import contextlib
import os
import statistics
import sys
import time
from dataclasses import replace

import torch

from megakernel import config, gemv
from megakernel.config import MOE_GEMVS
from megakernel.dims import FULL, SMALL
from megakernel.moe import STAGES, LatentMoE
from megakernel.tools import roofline
from megakernel.tools.torch_moe import TorchMoE

DEV = torch.device("cuda")


def no_gpu(tool) -> bool:
    """True (after one line on stderr) when no CUDA GPU is here: the tools then exit 2."""
    if torch.cuda.is_available():
        return False
    print(f"{tool}: needs a CUDA GPU", file=sys.stderr)
    return True


def attn_step_args(p):
    """The attention tuners' shared arguments (tune_fork): --steps, --batches,
    --len, --R; `attn_step_values` reads them (ValueError on a bad one)."""
    p.add_argument("--steps", default="mla,kda", help="mla and/or kda")
    p.add_argument("--batches", default="1,8,64")
    p.add_argument("--len", default="1024", help="MLA cache length")
    p.add_argument("--R", default="4", help="steps per CUDA graph")


def attn_step_values(a):
    """(steps, batches, L, R) from attn_step_args' arguments; ValueError on a bad one."""
    steps, batches = a.steps.split(","), [int(b) for b in a.batches.split(",")]
    L, R = int(a.len), int(a.R)
    if not set(steps) <= {"mla", "kda"} or min(batches) < 1 or L < 0 or R < 1:
        raise ValueError
    return steps, batches, L, R


def copy_bw():
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device=DEV).random_(0, 255)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    ts = []
    for _ in range(10):
        s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        s.record(); b.copy_(a); e.record(); e.synchronize()  # noqa: E702
        ts.append(s.elapsed_time(e) * 1e-3)
    del a, b
    return 2 * n / statistics.median(ts)


def draw_weights(dm, fmt, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)

    def rn(*s, fan):
        t = torch.randn(*s, device=DEV, dtype=torch.bfloat16, generator=g)
        return t.mul_(fan ** -0.5)

    w = {"router.weight": rn(dm.E, dm.d, fan=dm.d),
         "router.bias": 0.01 * torch.randn(dm.E, device=DEV, generator=g),
         "down.weight": rn(dm.r, dm.d, fan=dm.d), "latent_norm.weight": 1 + rn(dm.r, fan=100),
         "up.weight": rn(dm.d, dm.r, fan=dm.r), "shared.gate_up": rn(2 * dm.Is, dm.d, fan=dm.d),
         "shared.down": rn(dm.d, dm.Is, fan=dm.Is)}
    if fmt == "bf16":
        w["experts.w13"] = rn(dm.E, 2 * dm.I, dm.r, fan=dm.r)
        w["experts.w2"] = rn(dm.E, dm.r, dm.I, fan=dm.I)
    else:
        def ri(lo, hi, *s):
            return torch.randint(lo, hi, s, device=DEV, dtype=torch.uint8, generator=g)
        w["experts.w13_packed"] = ri(0, 256, dm.E, 2 * dm.I, dm.r // 2)
        w["experts.w13_scale"] = ri(118, 123, dm.E, 2 * dm.I, dm.r // 32)
        w["experts.w2_packed"] = ri(0, 256, dm.E, dm.r, dm.I // 2)
        w["experts.w2_scale"] = ri(118, 123, dm.E, dm.r, dm.I // 32)
    return w


def step_bytes(dm, fmt, n_experts):
    dense = 2 * ((dm.E + dm.r + 2 * dm.Is) * dm.d + dm.d * dm.r + dm.d * dm.Is + dm.r) + 4 * dm.E
    if fmt == "bf16":
        per = 2 * (2 * dm.I * dm.r + dm.r * dm.I)
    else:
        per = (2 * dm.I * dm.r + dm.r * dm.I) * (1 / 2 + 1 / 32)
    return dense + n_experts * per


def step_flops(dm, T):
    """The flops the step must do: every dense GEMV for each of T tokens, and each token's k experts
    (W13 and W2); MXFP4 counts the same (the tensor cores see bf16 after the dequant)."""
    dense = dm.E * dm.d + 2 * dm.r * dm.d + 3 * dm.Is * dm.d
    return 2 * T * (dense + dm.k * 3 * dm.I * dm.r)


def gpu_state() -> str:
    """The card's temperature, SM clock and power draw now, from nvidia-smi ("" without it): the
    MXFP4 rows ran 4-17% slower after the bf16 rows than alone (lab/order-effect/), so each row's log line carries the state the card was in
    after it."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=temperature.gpu,clocks.sm,power.draw",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = out.strip().splitlines()
    return lines[min(torch.cuda.current_device(), len(lines) - 1)].strip() if lines else ""


def time_events(fn, reps=5):
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        s.record(); fn(); e.record(); e.synchronize()  # noqa: E702
        ts.append(s.elapsed_time(e) * 1e3)
    return statistics.median(ts)


def eager_and_compiled_us(fn, args, do_compile, reps=3):
    """[eager, torch.compile (dynamic shapes)] us of fn(*args), timed with events after two
    warm-up calls (the compile among them); nan for a column that is off or fails (one line)."""
    out = []
    for f in [fn] + ([torch.compile(fn, dynamic=True)] if do_compile else []):
        try:
            with torch.no_grad():
                for _ in range(2):
                    f(*args)
                out.append(time_events(lambda: f(*args), reps=reps))
        except Exception as e:  # noqa: BLE001 - a column, not the run
            print(f"  torch {'compile' if out else 'eager'} failed: {type(e).__name__}: "
                  f"{str(e).splitlines()[0][:160]}", flush=True)
            out.append(float("nan"))
    return out + [float("nan")] * (2 - len(out))


def graph_us(mods, xs, R):
    """Microseconds per step: R steps captured in one CUDA graph, replays timed with events."""
    nm, NX = len(mods), len(xs)
    st = torch.cuda.Stream()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):              # warm-up outside capture (allocations, compiles)
        for i in range(R):
            mods[i % nm].launch(xs[i % NX])
    torch.cuda.current_stream().wait_stream(st)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(R):
            mods[i % nm].launch(xs[i % NX])
    g.replay(); torch.cuda.synchronize()  # noqa: E702
    us = time_events(g.replay) / R
    del g
    return us


def bench_case(dm, fmt, mods, batches, do_compile, bw, rows, log, machine):
    NX = 8
    tm = [TorchMoE(dm, m) for m in mods]
    tc = None
    if do_compile:
        tc = [torch.compile(t, dynamic=True) for t in tm]
    for T in batches:
        xs = [torch.randn(T, dm.d, device=DEV).to(torch.bfloat16) for _ in range(NX)]
        nm = len(mods)
        # distinct experts actually streamed (from the kernel's own schedule)
        nexp = []
        for i in range(NX):
            s = mods[i % nm].launch(xs[i])
            torch.cuda.synchronize()
            nexp.append(int(s["nact"][0]))
        nbytes = step_bytes(dm, fmt, statistics.mean(nexp))
        est = nbytes / 4e12
        R = max(1, min(40, int(0.02 / max(est, 1e-6))))
        k_us = graph_us(mods, xs, R)
        for m in mods:                 # the same launches on one stream, for comparison
            m.streams = "serial"
        serial_us = graph_us(mods, xs, R)
        for m in mods:                 # the whole step in one launch (k_persistent.py)
            m.streams = "persistent"
        for i in range(2):             # same bits as the 11 launches, checked on the GPU
            a = mods[i % nm].launch(xs[i])["out"].clone()
            mods[i % nm].streams = "fork"
            assert torch.equal(a, mods[i % nm].launch(xs[i])["out"]), "persistent != fork-join"
            mods[i % nm].streams = "persistent"
        one_us = graph_us(mods, xs, R)
        for m in mods:
            m.check_persistent()
            m.streams = "fork"
        # the same fork-join with the MoE's GEMVs on the other kernel (config.Gemv.other: every
        # one on the tensor cores, k_gemv_mma.py, when none is now; else every one on the CUDA
        # cores), through a second settings object
        mma_now = any(g in mods[0].settings.gemv.mma for g in MOE_GEMVS)
        with other_gemv_kernel(mods, MOE_GEMVS):
            try:
                alt_us = graph_us(mods, xs, R)
                for m in mods:         # and the one launch so (its task table follows the set)
                    m.streams = "persistent"
                alt_one_us = graph_us(mods, xs, R)
            finally:
                for m in mods:
                    m.streams = "fork"
        # and with the GEMVs at batch > 8 on the other instruction, wgmma or mma.sync
        # (config.Gemv.wgmma: the same bits), the fork-join only (the one launch's GEMV tasks are
        # mma.sync either way); nan while none of the MoE's is among gemv.WGMMA_GEMVS
        wg_us = float("nan")
        if T > 8 and any(g in gemv.WGMMA_GEMVS for g in MOE_GEMVS):
            with other_large_gemv(mods):
                wg_us = graph_us(mods, xs, R)
        # where the time goes: each launch alone, R times in its own graph (same scratch)
        parts = []
        for i, name in enumerate(STAGES):
            gi = torch.cuda.CUDAGraph()
            with torch.cuda.graph(gi):
                for j in range(R):
                    mods[j % nm].launch(xs[j % NX], stages={i})
            gi.replay(); torch.cuda.synchronize()  # noqa: E702
            parts.append(time_events(gi.replay) / R)
            del gi
        log(f"  {dm.tag} {fmt} T={T}: each launch alone (us): "
            + " | ".join(f"{n} {u:.1f}" for n, u in zip(STAGES, parts))
            + f" | sum {sum(parts):.1f} | one stream {serial_us:.1f} | fork-join {k_us:.1f}"
            + f" | one launch {one_us:.1f}"
            + f" | fork-join, GEMVs all on the {'CUDA' if mma_now else 'tensor'} cores {alt_us:.1f}"
            + f" | one launch so {alt_one_us:.1f}"
            + (f" | fork-join, GEMVs at batch > 8 on mma.sync {wg_us:.1f}" if T > 8 else "")
            + f" | distinct experts {statistics.mean(nexp):.1f}"
            + f" | card after it (C, SM MHz, W): {gpu_state() or '-'}")

        def eager_loop(fns, Re):
            def f():
                for i in range(Re):
                    fns[i % len(fns)](xs[i % NX])
            return f
        Re = max(1, min(8, R))
        eager_loop(tm, Re)()
        e_us = time_events(eager_loop(tm, Re), reps=3) / Re
        c_us = float("nan")
        if tc is not None:
            try:
                t0 = time.time()
                eager_loop(tc, Re)()
                eager_loop(tc, Re)()
                log(f"  torch.compile warm-up {time.time() - t0:.1f}s")
                c_us = time_events(eager_loop(tc, Re), reps=3) / Re
            except Exception as ex:  # noqa: BLE001
                log(f"  torch.compile failed: {type(ex).__name__}: {str(ex).splitlines()[0][:200]}")
                tc = None
        roof_us = nbytes / bw * 1e6
        row = (dm.tag, fmt, T, nbytes, k_us, 100 * roof_us / k_us, e_us / k_us, c_us / k_us,
               roof_us, e_us, c_us, serial_us, one_us, alt_us, alt_one_us,
               roofline.share(machine, k_us, nbytes, step_flops(dm, T)), wg_us)
        rows.append(row)
        log(fmt_row(row))


HDR = (f"{'config':6s} {'format':6s} {'batch':>5s} {'MB read':>9s} {'kernel us':>10s} "
       f"{'%copyBW':>8s} {'%roof2':>8s} {'x eager':>8s} {'x compile':>9s} | {'roof us':>8s} {'eager us':>9s} "
       f"{'compile us':>10s} {'1-stream us':>11s} {'1-launch us':>11s} {'other-GEMV us':>13s} "
       f"{'other-GEMV 1-launch':>19s} {'>8 on mma.sync us':>17s}")


def fmt_row(r):
    return (f"{r[0]:6s} {r[1]:6s} {r[2]:5d} {r[3] / 1e6:9.1f} {r[4]:10.1f} {r[5]:7.1f}% {r[15]:>8s} "
            f"{r[6]:8.2f} {r[7]:9.2f} | {r[8]:8.1f} {r[9]:9.1f} {r[10]:10.1f} {r[11]:11.1f} "
            f"{r[12]:11.1f} {r[13]:13.1f} {r[14]:19.1f} {r[16]:17.1f}")


@contextlib.contextmanager
def with_settings(steps, settings_of):
    """Within the block each step object runs on settings_of(its settings) (a second
    config.Settings: the benches' side-by-side columns), restored after."""
    was = [s.settings for s in steps]
    try:
        for s in steps:
            s.settings = settings_of(s.settings)
        yield
    finally:
        for s, w in zip(steps, was):
            s.settings = w


def other_gemv_kernel(steps, names):
    """with_settings: every GEMV on the kernel `names` do not use now (config.Gemv.other)."""
    return with_settings(steps, lambda s: replace(s, gemv=s.gemv.other(names)))


def other_large_gemv(steps):
    """with_settings: the tensor-core GEMVs at batch > 8 on the other instruction (wgmma or
    mma.sync, config.Gemv.wgmma; the same bits)."""
    return with_settings(steps, lambda s: replace(s, gemv=replace(s.gemv, wgmma=not s.gemv.wgmma)))


def out_log(name, out=None):
    """A log function for the GPU tools: prints each line and, given a folder (the tool's --out),
    appends it to out/name at once, so that a run cut short keeps what it measured."""
    if out:
        os.makedirs(out, exist_ok=True)
    path = os.path.join(out, name) if out else None
    if path:
        open(path, "w").close()

    def log(s):
        print(s, flush=True)
        if path:
            with open(path, "a") as f:
                f.write(s + "\n")
    return log


def main(a):
    if no_gpu("megakernel bench"):
        return 2
    log = out_log("bench.txt", a.out)

    bw = copy_bw()
    machine = roofline.measure(DEV)
    log(f"device {torch.cuda.get_device_name()}; copy bandwidth (1 GiB, read+write) "
        f"{bw / 1e12:.2f} TB/s; {machine.line()}")
    rows = []
    batches = [int(b) for b in a.batches.split(",")]
    for cname in a.configs.split(","):
        base = {"full": FULL, "small": SMALL}[cname]
        for fmt in a.formats.split(","):
            dm = base
            t0 = time.time()
            nsets = 1 if cname == "full" else 8
            mods = []
            for i in range(nsets):
                w = draw_weights(dm, fmt, seed=i)
                mods.append(LatentMoE(dm, w, DEV))
                del w
            torch.cuda.synchronize()
            dmt = _Tagged(dm, cname)
            for m in mods:
                m.compile_all(1), m.compile_all(8)
            log(f"[{cname} {fmt}] weights+compile {time.time() - t0:.1f}s; card (C, SM MHz, W): {gpu_state() or '-'}")
            bench_case(dmt, fmt, mods, batches, not a.no_compile, bw, rows, log, machine)
            del mods
            torch.cuda.empty_cache()
    log("")
    log(HDR)
    for r in rows:
        log(fmt_row(r))
    return 0


class _Tagged:
    """Dims plus a printable config name (Dims is frozen and used as a compile-cache key)."""

    def __init__(self, dm, tag):
        self.__dict__.update(dm.__dict__)
        self.tag = tag
