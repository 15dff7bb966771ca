"""An attention step's launches over the caller's stream and one side stream (mla.py, kda.py).

Why: both steps open with one wide x-side GEMV whose largest part, the output gate's projection
(H x V = 12288 rows of 7168 at full dims: 176 MB of the MLA step's 464, of the KDA step's 707),
is read only by the step's last launches (MLA's merge, KDA's gated norm). Between them lie
launches that are chains of latencies at small batch (MLA's norms, q_b, absorb, attention; KDA's
f_b, conv, core). So the gate's GEMV runs on a side stream beside that chain and the chain joins
it just before the launch that reads the gate: its bytes stream while the chain waits on
latencies (the MoE does the same with its shared experts: launch_streams.py).

Each step declares its stages once (Stages: mla.STEPS, kda.STEPS), and its plans (launch_plan.py:
the one plan model and executor, the MoE's too) are built from that. The other mode, "fused", is the
step without a side stream: the x-side projection as one GEMV over all its rows (gate included),
then the chain, all on the caller's stream (`fused_plan`). Each row's dot is the same whichever
GEMV launch holds it (one K split per GEMV, the same for the three), no two launches of a plan
write the same bytes, so every mode gives the same bits
(tests/megakernel/test_mk_side_stream_gpu.py). Which mode is faster is measured
(`python -m megakernel.tools.tune_fork`), and each step's default says so.
"""
import contextlib
from dataclasses import dataclass

from megakernel.config import ATTN_MODES as MODES
from megakernel.launch_plan import TwoStreams, fused_plan, launches, plan


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


@dataclass(frozen=True)
class Stages:
    """An attention step's launches, declared once (mla.STEPS, kda.STEPS): the plans of both
    modes, each stage's kernel variant at a batch and each GEMV's arguments come from here."""
    chain: tuple      # the main stream's stages, in order
    side: tuple       # the side stream's (the output gate's rows of the x-side GEMV)
    fused: str        # the x-side GEMV over all its rows: chain[0] and side in one launch
    join: str         # the first chain stage that reads what the side writes
    forks: dict       # fork point -> the chain stage after which the side starts (None: start)
    bind: dict        # GEMV stage -> {kernel argument: buffer}
    variant: dict     # another stage -> its variant at batch T (the kernel's measured choice)
    streams: str      # the measured defaults: stream mode, fork point, cap on the side's grid
    fork: str
    side_ctas_per_sm: int

    @property
    def stages(self):
        """Every launch of either mode."""
        return (self.fused,) + self.chain[:1] + self.side + self.chain[1:]

    def plan(self, mode, fork):
        """The plan in `mode`, forked at `fork`. Needs no GPU."""
        return (fused_plan(self.fused, self.chain) if mode == "fused" else
                plan(self.chain, self.side, self.join, self.forks[fork]))


class Modes:
    """The stream-mode knobs and the launch of an attention step (mla.MlaStep, kda.KdaStep),
    whose class declares its STEPS (Stages)."""

    def _modes(self, device, settings, streams, fork, side_ctas_per_sm):
        import torch
        from megakernel import config
        d = self.STEPS
        self.settings = settings or config.current()
        self.streams = streams or self.settings.attn.streams or d.streams
        self.fork = fork or d.fork
        self.side_ctas_per_sm = d.side_ctas_per_sm if side_ctas_per_sm is None else side_ctas_per_sm
        if self.streams not in MODES or self.fork not in d.forks:
            raise ValueError(f"megakernel {type(self).__name__}: streams in {MODES}, fork in "
                             f"{tuple(d.forks)}; got {self.streams!r}, {self.fork!r}")
        self._memo = {}                # (mode, fork) -> plan
        self._streams = TwoStreams(device)
        self._nsm = (torch.cuda.get_device_properties(device).multi_processor_count
                     if torch.device(device).type == "cuda" else 0)

    def plan(self):
        # kept per setting: a launch asks for its plan every step (the host's hot path), and
        # the knobs are attributes a tuner may change between steps
        key = (self.streams, self.fork)
        if key not in self._memo:
            self._memo[key] = self.STEPS.plan(*key)
        return self._memo[key]

    def launches(self):
        """The launch names of the current mode, in order (the benches time each alone)."""
        return launches(self.plan())

    def side_grid(self, full_grid):
        """The side GEMV's grid cap (`ctas`)."""
        cap = self._nsm * self.side_ctas_per_sm
        return cap if cap else full_grid

    def kernel(self, stage, T):
        """(kernel name, variant) of `stage` at batch T: a GEMV's from gemv.py, another's from
        STEPS.variant (a step may override it; a None name: the stage is no launch here)."""
        from megakernel import gemv
        d = self.STEPS
        if stage in d.bind:
            return stage, gemv.variant(stage, T, self.settings.gemv)
        return stage, d.variant[stage](T) if stage in d.variant else {}

    def run(self, named, T, dims, stages=None):
        """Enqueue the current mode's plan over the buffers `named`; `stages`: only those."""
        from megakernel import cache

        def go(name, st):
            kname, v = self.kernel(name, T)
            if kname is not None and (stages is None or name in stages):
                cache.compiled(kname, dims, **v)(named, st, self.STEPS.bind.get(name))

        self._streams.run(self.plan(), go, one_stream=self.streams == "fused")
