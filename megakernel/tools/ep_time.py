"""python -m megakernel.tools.ep_time: where one megakernel-ep step's time goes, for
both exchanges (ep.py: "dist", torch.distributed's all-to-all over gloo through host copies;
"ipc", ep_ipc.py's writes into the peers' device buffers), ranks sharing this host's GPUs.

For each dims, rank count and batch: N processes (rank r on cuda:r mod the GPUs there are, a
gloo group), each drawing the same weights (bench.draw_weights) and keeping its contiguous
share of the experts, as a k3diff case's rank does. Per exchange, one step first (it loads or
compiles the kernels its batch needs, and the IPC exchange shares its buffers), then --steps
steps with a device sync and the clock read as each phase ends (route, dispatch, experts,
combine, finish: ep_step's `mark`), then --steps whole steps without those syncs. Every step
starts behind a barrier of all ranks; a figure is the slowest rank's median. The rows of the
two exchanges must be equal bit for bit ("bits").

With IPC the dispatch column holds the rank's own experts too: they run while its rows are in
flight. Side by side in the same run: the one-GPU step (moe.LatentMoE over all the experts, the
whole batch, rank 0's GPU, the others waiting), the bytes the ranks put on the links per step
(each remote route's row and id out, its y back) and the bandwidth of the path they take (a copy
to the next GPU, or within the GPU when there is one). Also printed: what a rank's preparation costs (weights drawn, the engine's two
LatentMoE packed, the first steps' kernel loads and compiles), the suspects of a k3diff case's
time on ranks (lab/ep/).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace

PHASES = ("route", "dispatch", "experts", "combine", "finish")
EXCHANGES = ("dist", "ipc")


def _values(a):
    """(dims names, rank counts, batches, steps, fmt, experts); ValueError on a bad one."""
    dims = a.dims.split(",")
    ranks = [int(v) for v in a.ranks.split(",")]
    batches = [int(v) for v in a.batches.split(",")]
    steps, experts = int(a.steps), int(a.experts)
    if (not dims or not set(dims) <= {"full", "small"} or min(ranks) < 1 or max(ranks) > 8
            or min(batches) < 1 or steps < 1 or a.format not in ("bf16", "mxfp4") or experts < 16):
        raise ValueError
    for n in ranks:
        if max(batches) > 256 * n:           # a rank's home tokens: at most MAX_T
            raise ValueError
    return dims, ranks, batches, steps, a.format, experts


def _dims(name, experts):
    from megakernel.dims import FULL, SMALL

    # full: K3's widths with the experts a distributed k3diff case keeps (EP_EXPERT_BYTES), the
    # dims tests/megakernel/test_mk_ep_gpu.py compiles; small: the small preset as it is
    return replace(FULL, E=experts) if name == "full" else SMALL


def _rank(rank, world, store, job, answers):
    """One rank (a spawned process): its figures, or its error line, onto `answers`."""
    import torch
    import torch.distributed as dist

    from megakernel import config

    try:
        dev = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        config.gloo_loopback()
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
        answers.put((rank, _measure(rank, world, dev, job)))
    except BaseException as exc:  # noqa: BLE001 - one line to the parent, which would wait
        text = str(exc).strip().splitlines()
        answers.put((rank, f"{type(exc).__name__}: {text[0] if text else ''}"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _measure(rank, world, dev, job):
    import torch
    import torch.distributed as dist

    from megakernel import cache
    from megakernel.ep import MegakernelEngine, ep_step
    from megakernel.ep_ipc import IpcExchange
    from megakernel.moe import LatentMoE
    from megakernel.tools.bench import draw_weights

    dm, group = job["dims"], dist.group.WORLD

    def together():
        torch.cuda.synchronize()
        dist.barrier(group=group)

    def kernels():
        return (len(cache.COMPILE_SECONDS), sum(cache.COMPILE_SECONDS.values()),
                len(cache.LOADED), sum(cache.LOADED.values()))

    t0 = time.perf_counter()
    w = draw_weights(dm, job["fmt"], seed=0)              # the same on every rank
    owners = [e * world // dm.E for e in range(dm.E)]     # contiguous placement
    mine = torch.tensor([e for e in range(dm.E) if owners[e] == rank], dtype=torch.int64, device=dev)
    shard = {n: t.index_select(0, mine) if n.startswith("experts.") else t for n, t in w.items()}
    shard["expert_ids"] = mine
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    engine = MegakernelEngine(dm, shard, dev)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    del shard
    single = LatentMoE(dm, w, dev) if rank == 0 else None     # the one-GPU step, side by side
    del w
    owners_t = torch.tensor(owners, dtype=torch.int64, device=dev)
    out = {"weights": t1 - t0, "engine": t2 - t1, "batches": {}}
    for B in job["batches"]:
        a, b = rank * B // world, (rank + 1) * B // world
        g = torch.Generator(device=dev).manual_seed(B)
        xa = torch.randn(B, dm.d, generator=g, device=dev).to(torch.bfloat16)
        x = xa[a:b].contiguous()
        row, last_out = {"single": None}, {}
        if single is not None:                # rank 0 alone, the others wait at the barrier
            single.launch(xa)
            torch.cuda.synchronize()
            times = []
            for _ in range(job["steps"]):
                t = time.perf_counter()
                single.launch(xa)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t)
            row["single"] = statistics.median(times)
        together()
        for ex in EXCHANGES:
            ipc = IpcExchange(group, rank, world, dev, dm.r) if ex == "ipc" else None

            def step(mark=None):
                return ep_step(engine, x, None, owners_t, world, group, dm.k, dm.r, ipc=ipc, mark=mark)

            k0 = kernels()
            together()
            t = time.perf_counter()
            step()
            torch.cuda.synchronize()
            first = time.perf_counter() - t
            k1 = kernels()
            phases = {p: [] for p in PHASES}
            for _ in range(job["steps"]):
                together()
                clock = [time.perf_counter()]

                def mark(p):
                    torch.cuda.synchronize()
                    now = time.perf_counter()
                    phases[p].append(now - clock[0])
                    clock[0] = now

                step(mark)
            whole = []
            for _ in range(job["steps"]):
                together()
                t = time.perf_counter()
                o = step()
                torch.cuda.synchronize()
                whole.append(time.perf_counter() - t)
            last_out[ex] = o.get("out")
            last_out["ids"] = o.get("topk_ids")
            if ipc is not None:
                ipc.close()
            row[ex] = {"first": first, "compiled": (k1[0] - k0[0], k1[1] - k0[1]),
                       "loaded": (k1[2] - k0[2], k1[3] - k0[3]), "step": statistics.median(whole),
                       **{p: statistics.median(v) for p, v in phases.items()}}
        # bytes this rank put on the links per step: each remote route's hl row and expert id
        # out, its y row back
        ids = last_out["ids"]
        remote = 0 if ids is None else int(((ids >= 0) & (owners_t[ids.clamp(min=0).long()] != rank)).sum())
        row["bytes"] = remote * (2 * dm.r + 8 + 2 * dm.r)
        d, i = last_out["dist"], last_out["ipc"]
        row["bits"] = (d is None and i is None) or (d is not None and i is not None and torch.equal(d, i))
        out["batches"][B] = row
    if rank == 0:
        out["link"] = _link_bandwidth(dev)
    return out


def _link_bandwidth(dev):
    """(GB/s, what was measured): a 256 MiB copy from this GPU to the next (the path the IPC
    writes take between GPUs), or, with one GPU, a copy within it (read + write counted)."""
    import torch

    n = torch.cuda.device_count()
    src = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    other = torch.device("cuda", (dev.index + 1) % n) if n > 1 else dev
    dst = torch.empty_like(src, device=other)
    times = []
    for _ in range(6):
        torch.cuda.synchronize(dev)
        torch.cuda.synchronize(other)
        t = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize(dev)
        torch.cuda.synchronize(other)
        times.append(time.perf_counter() - t)
    s = statistics.median(times[1:])
    if n > 1:
        return src.numel() / s / 1e9, f"copy cuda:{dev.index} -> cuda:{other.index}"
    return 2 * src.numel() / s / 1e9, "one GPU: a copy within it, read + write"


def _run(dm, world, job, timeout=900.0):
    """Every rank's figures for one (dims, ranks); RuntimeError with a rank's line on a failure."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    answers = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="ep-time-") as tmp:
        procs = [ctx.Process(target=_rank, daemon=True,
                             args=(r, world, os.path.join(tmp, "store"), dict(job, dims=dm), answers))
                 for r in range(world)]
        for p in procs:
            p.start()
        try:
            got = dict(answers.get(timeout=timeout) for _ in procs)
        finally:
            for p in procs:
                p.join(30)
                if p.is_alive():
                    p.kill()
    bad = [(r, v) for r, v in sorted(got.items()) if isinstance(v, str)]
    if bad:
        raise RuntimeError(f"rank {bad[0][0]} of {world}: {bad[0][1]}")
    return [got[r] for r in range(world)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m megakernel.tools.ep_time", description=__doc__.splitlines()[0])
    p.add_argument("--ranks", default="2,3", help="rank counts (ranks share the GPUs there are)")
    p.add_argument("--dims", default="full,small")
    p.add_argument("--batches", default="8,64", help="the whole batch, split over the ranks' homes")
    p.add_argument("--steps", default="7", help="timed steps per figure (median)")
    p.add_argument("--format", default="bf16", help="bf16 or mxfp4 experts")
    p.add_argument("--experts", default="32", help="E at full dims (small keeps its 112)")
    a = p.parse_args(argv)
    try:
        dims, ranks, batches, steps, fmt, experts = _values(a)
    except ValueError:
        print("ep_time: --dims full,small; --ranks 1..8; --batches 1..256 per rank; --steps >= 1; "
              "--format bf16|mxfp4; --experts >= 16 (integers)", file=sys.stderr)
        return 2
    from megakernel.tools.bench import no_gpu

    if no_gpu("ep_time"):
        return 2
    import torch

    n_gpu = torch.cuda.device_count()
    print(f"ep_time: {n_gpu} x {torch.cuda.get_device_name(0)}, rank r on cuda:r mod {n_gpu}, gloo group; "
          f"{fmt} experts; ms, the slowest rank's median of {steps} steps", flush=True)
    print("  ipc: dispatch includes the rank's own experts (they overlap its copies); "
          "step: whole steps, no syncs between phases", flush=True)
    head = (f"{'dims':>5} {'ranks':>5} {'B':>4} {'exch':>4} " + " ".join(f"{ph:>8}" for ph in PHASES)
            + f" {'step':>8} {'first s':>8} {'compiled n, s':>13} {'loaded n, s':>13} bits")
    printed = False
    failed = False
    for name in dims:
        dm = _dims(name, experts)
        for world in ranks:
            t = time.perf_counter()
            try:
                figs = _run(dm, world, {"fmt": fmt, "batches": batches, "steps": steps})
            except Exception as exc:  # noqa: BLE001 - one line, the other rows still run
                print(f"{name:>5} {world:>5} failed: {exc}", flush=True)
                failed = True
                continue
            if not printed:
                print(head, flush=True)
                printed = True
            for B in batches:
                rows = [f["batches"][B] for f in figs]
                for ex in EXCHANGES:
                    def mx(key, i=None, ex=ex):
                        return max(r[ex][key] if i is None else r[ex][key][i] for r in rows)
                    bits = "y" if all(r["bits"] for r in rows) else "N"
                    failed |= bits == "N"
                    print(f"{name:>5} {world:>5} {B:>4} {ex:>4} "
                          + " ".join(f"{1e3 * mx(ph):8.2f}" for ph in PHASES)
                          + f" {1e3 * mx('step'):8.2f} {mx('first'):8.2f}"
                          f" {mx('compiled', 0):4d} {mx('compiled', 1):7.1f}s"
                          f" {mx('loaded', 0):4d} {mx('loaded', 1):7.1f}s {bits:>4}", flush=True)
            gbs, how = figs[0]["link"]
            for B in batches:
                byt = sum(f["batches"][B]["bytes"] for f in figs)
                print(f"{name:>5} {world:>5} {B:>4} one GPU step {1e3 * figs[0]['batches'][B]['single']:8.2f} ms; "
                      f"exchanged {byt / 1e6:.2f} MB per step over all ranks, {1e6 * byt / (gbs * 1e9):.1f} us "
                      f"at {gbs:.0f} GB/s ({how}, measured in this run)", flush=True)
            print(f"{name:>5} {world:>5} prepare per rank (slowest): weights drawn {max(f['weights'] for f in figs):.2f} s, "
                  f"engine {max(f['engine'] for f in figs):.2f} s; all of it {time.perf_counter() - t:.1f} s "
                  "with the processes' start", flush=True)
    if failed:
        print("ep_time: a configuration failed or the exchanges' bits differ (above)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
