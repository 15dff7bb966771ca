"""The launch plan of a fork-join step and its one executor: the MoE's 11 launches
(launch_streams.plan) and the attention steps' (side_stream.Stages.plan) are both plans, run by
TwoStreams.run.

A plan is a list of (what, stage): ("main", s) / ("side", s) enqueue launch s on that stream;
("fork", None): the side waits for what the main stream has enqueued so far; ("join", None):
the main stream waits for what the side has enqueued so far. Run on one stream (the caller's),
the launches go in plan order and the waits are moot. Builders only produce lists; only the
executor touches CUDA, so a plan is checked on the CPU (tests/megakernel/test_mk_side_stream.py).
"""


def launches(steps):
    """The stage names of a plan, in its order."""
    return tuple(s for _, s in steps if s is not None)


def fused_plan(fused, chain):
    """A step without a side stream: launch `fused` in place of chain[0], then the chain."""
    return [("main", fused)] + [("main", s) for s in chain[1:]]


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


class TwoStreams:
    """A step object's main (high priority: a hint to the CTA scheduler that graph capture
    copies into the kernel nodes) and side CUDA streams, and the executor of its plans. The pair
    is made at the first forked launch, or at once (now=True: before any graph capture)."""

    def __init__(self, device, now=False):
        self.device = device
        self._pair = None
        if now:
            self._make()

    def _make(self):
        import torch
        if self._pair is None:        # lower number = higher priority
            self._pair = (torch.cuda.Stream(self.device, priority=-1),
                          torch.cuda.Stream(self.device, priority=0))
        return self._pair

    def run(self, steps, go, one_stream=False):
        """Enqueue `steps` (a plan): go(stage, stream handle) enqueues one launch; each launch
        names its stream, so none needs the current stream switched."""
        import torch
        if one_stream:
            st = torch.cuda.current_stream().cuda_stream
            for s in launches(steps):
                go(s, st)
            return
        main, side = self._make()
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
