"""The persistent protocol of task_graph.py run on the CPU: N CTAs interleaved at random, each
task taking a random number of rounds; a round in which no CTA can move while tasks remain is a
deadlock. Pure Python (tests/megakernel/experimental/test_mk_task_graph.py).

`peek=True` is the layer's protocol: a filler ticket is drawn only when its task is ready.
`peek=False` is the MoE launch's (k_persistent.py): the next filler ticket is drawn whatever it
is, and a CTA holding an unready one spins. On the MoE's graph both are safe (its filler tasks
wait only on filler tasks); on a layer's graph the second can hang, which the tests show.
`peek="both"`: no ticket of either queue is drawn before its task is ready (experimental/peek.py): the CTA tries its first queue's head, then the
other's, else polls.
"""
import random

from megakernel.experimental.task_graph import CRIT, FILL


class Deadlock(AssertionError):
    pass


class _State:
    def __init__(self, g):
        self.g = g
        self.done = {n: 0 for n in g.stages}
        self.key_done = {}                     # (src, src_per, key) -> finished tasks
        self.next = [0, 0]                     # the next ticket of each queue
        self.tickets = [g.tickets(CRIT), g.tickets(FILL)]
        self.finished = set()

    def missing(self, name, t):
        worst = 0
        for d in self.g.stages[name].deps:
            if d.per:
                k = t // d.per
                need = min(d.src_per, self.g.stages[d.src].tasks - k * d.src_per)
                worst = max(worst, need - self.key_done.get((d.src, d.src_per, k), 0))
            else:
                worst = max(worst, self.g.stages[d.src].tasks - self.done[d.src])
        return worst

    def finish(self, name, t):
        assert (name, t) not in self.finished, (name, t, "ran twice")
        assert self.missing(name, t) == 0, (name, t, "ran before its inputs")
        self.finished.add((name, t))
        self.done[name] += 1
        for p in self.g.keys(name):
            k = (name, p, t // p)
            self.key_done[k] = self.key_done.get(k, 0) + 1

    def left(self, q):
        return self.next[q] < len(self.tickets[q])

    def draw(self, q):
        self.next[q] += 1
        return self.tickets[q][self.next[q] - 1]


def run(g, ctas: int, fill_first: int, seed: int, peek=True, backfill=0.125,
        min_backfill=16, max_rounds=None):
    """Run graph `g` (checked or not) with `ctas` CTAs, the first `fill_first` of them filler
    first. Returns the rounds taken; raises Deadlock with the CTAs' states when none can move."""
    rnd = random.Random(seed)
    S = _State(g)
    thr = {n: g.threshold(n, backfill, min_backfill) for n in g.stages}
    # per CTA: running (name, t, rounds left) | None; held critical ticket | None; held unready
    # filler ticket (peek=False only) | None; filler first
    cta = [dict(run=None, crit=None, fill=None, ff=i < fill_first) for i in range(ctas)]
    total = sum(st.tasks for st in g.stages.values())
    rounds = 0

    def start(c, task):
        c["run"] = (task[0], task[1], rnd.randint(1, 3))

    def try_fill(c):
        """Take the next filler task if the protocol allows; True if the CTA moved."""
        if not S.left(FILL):
            return False
        if peek:
            name, t = S.tickets[FILL][S.next[FILL]]
            if S.missing(name, t) > 0:
                return False
            start(c, S.draw(FILL))
            return True
        c["fill"] = S.draw(FILL)
        return True

    def ready_head(c):
        """peek="both": take the first ready head, this CTA's first queue first."""
        for q in ((FILL, CRIT) if c["ff"] else (CRIT, FILL)):
            if S.left(q) and S.missing(*S.tickets[q][S.next[q]]) <= 0:
                start(c, S.draw(q))
                return True
        return False

    def step(c):
        if c["run"] is not None:
            name, t, k = c["run"]
            if k > 1:
                c["run"] = (name, t, k - 1)
            else:
                S.finish(name, t)
                c["run"] = None
            return True
        if peek == "both":
            return ready_head(c)
        if c["fill"] is not None:                  # peek=False: spins until it is ready
            if S.missing(*c["fill"]) > 0:
                return False
            start(c, c["fill"])
            c["fill"] = None
            return True
        if c["ff"] and c["crit"] is None:
            if not S.left(FILL):
                c["ff"] = False
            elif try_fill(c):
                return True
            elif not peek:
                return False
        if c["crit"] is None:
            if S.left(CRIT):
                c["crit"] = S.draw(CRIT)
                return True
            return try_fill(c)
        name, t = c["crit"]
        miss = S.missing(name, t)
        if miss <= 0:
            start(c, c["crit"])
            c["crit"] = None
            return True
        if miss > thr[name]:
            return try_fill(c)
        return False                               # spins

    while len(S.finished) < total:
        rounds += 1
        order = list(range(ctas))
        rnd.shuffle(order)
        moved = False
        for i in order:
            moved |= step(cta[i])
        if not moved:
            held = [(c["crit"], c["fill"]) for c in cta if c["crit"] or c["fill"]]
            raise Deadlock(f"no CTA can move after {rounds} rounds, {len(S.finished)} of "
                           f"{total} tasks done; held tickets {held[:6]}; next filler "
                           f"{S.tickets[FILL][S.next[FILL]] if S.left(FILL) else None}")
        if max_rounds and rounds > max_rounds:
            raise Deadlock(f"{rounds} rounds")
    return rounds
