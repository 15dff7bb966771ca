"""An attention step's launches over the caller's stream and one side stream (mla.py, kda.py).

Why: both steps open with one wide x-side GEMV whose largest part, the output gate's projection
(H x V = 12288 rows of 7168 at full dims: 176 MB of the MLA step's 464, of the KDA step's 707),
is read only by the step's last launches (MLA's merge, KDA's gated norm). Between them lie
launches that are chains of latencies at small batch (MLA's norms, q_b, absorb, attention; KDA's
f_b, conv, core). So the gate's GEMV runs on a side stream beside that chain and the chain joins
it just before the launch that reads the gate: its bytes stream while the chain waits on
latencies (the MoE does the same with its shared experts: launch_streams.py).

A plan is a list of (what, stage): ("main", s) / ("side", s) enqueue launch s on that stream;
("fork", None): the side waits for what the main stream has enqueued so far; ("join", None):
the main stream waits for what the side has enqueued so far. The other mode, "fused", is the
step without a side stream: the x-side projection as one GEMV over all its rows (gate included),
then the chain, all on the caller's stream (`fused_plan`). Each row's dot is the same whichever
GEMV launch holds it (one K split per GEMV, the same for the three), no two launches of a plan
write the same bytes, so every mode gives the same bits
(tests/megakernel/test_mk_side_stream_gpu.py). Which mode is faster is measured
(`python -m megakernel.tools.tune_fork`), and each step's default says so.

Prefetch stages (k_l2_prefetch.py): ("main" | "side", "<step>_pf_<w>") fetches the first MiB of a
later GEMV's weights into L2 while latency-bound launches run. Each is placed right after a named
launch, on that launch's stream, or at the start ("start"); a spec says which:
"o@mla_g:32,a@start:all" (weight short name @ the launch it follows : MiB or all). Each step
class names its prefetchable weights (PREFETCH) and a default spec per stream mode
(PF_DEFAULT); MEGAKERNEL_PREFETCH=off drops them (for side-by-side runs). They change no bit.
"""
import contextlib
import os

MODES = ("fused", "fork")
PF_VARIANT = dict(ctas=132, last=False)    # the prefetch kernel's variant (k_l2_prefetch.py)


@contextlib.contextmanager
def other_mode(step):
    """For the benches' side-by-side columns: within the block `step` runs in its other stream
    mode. Yields that mode's name."""
    was = step.streams
    step.streams = "fork" if was == "fused" else "fused"
    try:
        yield step.streams
    finally:
        step.streams = was


def mode_from_env(default: str) -> str:
    """MEGAKERNEL_ATTN_STREAMS (fused | fork) overrides the attention steps' default;
    MEGAKERNEL_STREAMS=serial (everything on one stream) means fused for them too."""
    v = os.environ.get("MEGAKERNEL_ATTN_STREAMS")
    if v:
        if v not in MODES:
            raise ValueError(f"MEGAKERNEL_ATTN_STREAMS: {' or '.join(MODES)}; got {v!r}")
        return v
    return "fused" if os.environ.get("MEGAKERNEL_STREAMS") == "serial" else default


def prefetch_from_env():
    """MEGAKERNEL_PREFETCH: "off" drops the steps' prefetch stages, "on" (or unset) keeps them."""
    v = os.environ.get("MEGAKERNEL_PREFETCH", "on")
    if v not in ("on", "off"):
        raise ValueError(f"MEGAKERNEL_PREFETCH: on or off; got {v!r}")
    return v == "on"


def parse_prefetch(spec, stages):
    """[(stage, after, MiB or None = all)] of a spec "w@after:MiB,..." ("off" or "": none);
    `stages` maps a short name w to its stage name."""
    out = []
    for item in ([] if spec in ("", "off") else spec.split(",")):
        try:
            w, rest = item.split("@")
            after, mb = rest.split(":")
            mb = None if mb == "all" else int(mb)
            if w not in stages or (mb is not None and mb <= 0) or stages[w] in [
                    o[0] for o in out]:
                raise ValueError
        except ValueError:
            raise ValueError(f"prefetch spec {item!r}: w@after:MiB (MiB > 0 or all), w in "
                             f"{sorted(stages)}, each w once") from None
        out.append((stages[w], None if after == "start" else after, mb))
    return out


def with_prefetches(steps, prefetches):
    """`steps` (a plan) with each prefetch stage placed right after its launch, on that launch's
    stream (after None: before the first main launch, after the fork)."""
    out = list(steps)
    for stage, after, _ in prefetches:
        if after is None:
            i = next(i for i, (what, _) in enumerate(out) if what == "main")
            out.insert(i, ("main", stage))
            continue
        at = [i for i, (_, s) in enumerate(out) if s == after]
        if not at:
            raise ValueError(f"prefetch {stage}: no launch {after!r} in this mode's plan "
                             f"{launches(out)}")
        out.insert(at[0] + 1, (out[at[0]][0], stage))
    return out


def fused_plan(fused, chain):
    """The step without a side stream: launch `fused` in place of chain[0], then the chain."""
    return [("main", fused)] + [("main", s) for s in chain[1:]]


def launches(steps):
    """The stage names of a plan, in its order."""
    return tuple(s for _, s in steps if s is not None)


def plan(chain, side, join_before, fork_after=None):
    """chain: the main stream's stages in order; side: the side's; join_before: the first main
    stage that reads what the side writes; fork_after: the main stage after which the side starts
    (None: at the start, beside the first)."""
    assert join_before in chain and (fork_after is None or
                                     chain.index(fork_after) < chain.index(join_before))
    forked = [("fork", None)] + [("side", s) for s in side]
    out = list(forked) if fork_after is None else []
    for s in chain:
        if s == join_before:
            out.append(("join", None))
        out.append(("main", s))
        if s == fork_after:
            out += forked
    return out


def short_names(step_cls):
    """A step class's prefetch short names -> stage names ("o" -> "mla_pf_o")."""
    return {s.split("_pf_")[1]: s for s in step_cls.PREFETCH}


def step_plan(step_cls, mode, fork, prefetches):
    """The plan of a step class (its CHAIN, SIDE, FUSED, JOIN, FORKS) in `mode`, forked at
    `fork`, with `prefetches` (parse_prefetch) placed; ValueError: one that names a launch the
    mode lacks. Needs no GPU (the tools check specs with it before starting one)."""
    base = (fused_plan(step_cls.FUSED, step_cls.CHAIN) if mode == "fused" else
            plan(step_cls.CHAIN, step_cls.SIDE, step_cls.JOIN, step_cls.FORKS[fork]))
    return with_prefetches(base, prefetches)


class Modes:
    """The stream-mode knobs of an attention step (mla.MlaStep, kda.KdaStep), whose class names
    its CHAIN, SIDE, FUSED, JOIN (the first chain launch reading the side's output), FORKS,
    PREFETCH (prefetch stage -> the weight buffer it fetches) and defaults STREAMS, FORK,
    SIDE_CTAS_PER_SM, PF_DEFAULT (stream mode -> prefetch spec). `prefetch`: a spec for every
    mode (None: PF_DEFAULT of the current mode, or none under MEGAKERNEL_PREFETCH=off)."""

    def _modes(self, device, streams, fork, side_ctas_per_sm, prefetch=None):
        import torch
        self.streams = streams or mode_from_env(self.STREAMS)
        self.fork = fork or self.FORK
        self.side_ctas_per_sm = self.SIDE_CTAS_PER_SM if side_ctas_per_sm is None else side_ctas_per_sm
        if self.streams not in MODES or self.fork not in self.FORKS:
            raise ValueError(f"megakernel {type(self).__name__}: streams in {MODES}, fork in "
                             f"{tuple(self.FORKS)}; got {self.streams!r}, {self.fork!r}")
        self.prefetch = prefetch if prefetch is not None or prefetch_from_env() else "off"
        self._memo = {}                # (what, mode, fork, spec) -> plan / prefetches
        for m in MODES:                # a bad spec fails here, not at the first launch
            self._plan(m, self.fork)
        self._streams = TwoStreams(device)
        self._nsm = (torch.cuda.get_device_properties(device).multi_processor_count
                     if torch.device(device).type == "cuda" else 0)

    def prefetches(self, mode=None):
        """[(stage, after, MiB)] of the prefetch stages in `mode` (None: the current one)."""
        mode = mode or self.streams
        key = ("pf", mode, None, self.prefetch)
        if key not in self._memo:
            spec = self.PF_DEFAULT[mode] if self.prefetch is None else self.prefetch
            self._memo[key] = parse_prefetch(spec, short_names(self))
        return self._memo[key]

    def _plan(self, mode, fork):
        # kept per setting: a launch asks for its plan every step (the host's hot path), and
        # the knobs are attributes a tuner may change between steps
        key = ("plan", mode, fork, self.prefetch)
        if key not in self._memo:
            self._memo[key] = step_plan(self, mode, fork, self.prefetches(mode))
        return self._memo[key]

    def plan(self):
        return self._plan(self.streams, self.fork)

    def prefetch_launch(self, name, named, stream, dims):
        """Enqueue prefetch stage `name` (its weight from `named`) on `stream`."""
        from megakernel import cache
        from megakernel.k_l2_prefetch import region
        mb = next(m for s, _, m in self.prefetches() if s == name)
        rows, row_bytes, prefix = region(named[self.PREFETCH[name]], mb)
        cache.compiled("l2_prefetch", dims, **PF_VARIANT)(
            dict(w=named[self.PREFETCH[name]], rows=rows, row_bytes=row_bytes, prefix=prefix),
            stream)

    def launches(self):
        """The launch names of the current mode, in order (the benches time each alone)."""
        return launches(self.plan())

    def side_grid(self, full_grid):
        """The side GEMV's grid cap (`ctas`)."""
        cap = self._nsm * self.side_ctas_per_sm
        return cap if cap else full_grid


class TwoStreams:
    """A step object's main (high priority) and side CUDA streams, made at the first forked
    launch, and the executor of its plans."""

    def __init__(self, device):
        self.device = device
        self._pair = None

    def run(self, steps, go, mode):
        """Enqueue `steps` (a plan): go(stage, stream handle) enqueues one launch."""
        import torch
        if mode == "fused":
            st = torch.cuda.current_stream().cuda_stream
            for s in launches(steps):
                go(s, st)
            return
        if self._pair is None:        # lower number = higher priority
            self._pair = (torch.cuda.Stream(self.device, priority=-1),
                          torch.cuda.Stream(self.device, priority=0))
        main, side = self._pair
        cur = torch.cuda.current_stream()
        main.wait_stream(cur)
        for what, s in steps:
            if what == "fork":
                side.wait_stream(main)
            elif what == "join":
                main.wait_stream(side)
            else:
                go(s, (main if what == "main" else side).cuda_stream)
        # every side launch is behind a join (plan), so the caller waits on both
        cur.wait_stream(main)
