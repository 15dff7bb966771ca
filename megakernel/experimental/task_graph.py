"""A persistent launch's task graph for any sequence of stages: two ticket queues, dependency
counters, the static check that no schedule can hang; pure Python.

State: checked on the CPU only (tests/megakernel/experimental/test_mk_task_graph.py); no kernel
runs it (the layer's one launch is not written). Next: that kernel, or nothing.

Why a second planner beside plan.py: plan.py is the MoE step's, with its eleven stages, their
order and their counters written out, and the MoE's one launch reads its words. A whole decode
layer in one launch (AttnRes -> attention -> AttnRes -> LatentMoE) has ~25 stages,
and in it, unlike the MoE, the filler work depends on the critical chain: the attention's
output-gate GEMV waits for the first AttnRes, the shared experts for the second. So a filler
ticket may not be ready when drawn, and the MoE's protocol (a waiting routed CTA backfills the
next shared ticket, whatever it is) could deadlock: every CTA holding a filler ticket whose
input is a critical task nobody is free to draw (task_sim.py builds that schedule).

The protocol this planner is for (task_sim.py runs it; the layer's kernel is not written yet):
- critical tickets are drawn in order, one held per CTA; a CTA whose critical task is not ready
  backfills filler tasks while more than `threshold` of the awaited tasks are missing, else spins;
- a filler ticket is drawn only when its task is ready (read the counter, check the task's
  inputs, compare-and-swap the counter forward): a filler task is never held unready;
- the first `fill_first` CTAs take filler tasks first, and critical ones whenever the next
  filler task is not ready.
No schedule hangs if the graph whose nodes are the tickets, with an edge from each ticket to the
next of its queue and from each producer task to each consumer task, has no cycle (`check`, on
segments: each queue's runs of one stage). Sketch: take the earliest unfinished critical ticket
m; every critical ticket before it is done; its filler producers come before it in that graph,
so the next undrawn filler ticket f is before it too, hence all of f's inputs are done or
running: f becomes ready and is drawn (by m's CTA at the latest, which backfills); by induction
m's inputs complete. task_sim.py checks it by running the protocol under random interleavings.

Dependencies: Dep(src) waits for all of src's tasks; Dep(src, per, src_per) is keyed: consumer
task i waits for the src tasks j with j // src_per == i // per (the MoE's expert_down group on
its expert_up group; a token's tasks on its token's).
"""
from dataclasses import dataclass, field

CRIT, FILL = 0, 1
NEVER = 1 << 30           # a threshold that never backfills (spin)


@dataclass(frozen=True)
class Dep:
    src: str
    per: int = 0          # keyed: consumer tasks per key (0: the whole stage)
    src_per: int = 0      # keyed: producer tasks per key


@dataclass(frozen=True)
class Stage:
    name: str
    tasks: int
    queue: int            # CRIT or FILL
    deps: tuple = ()


@dataclass
class Graph:
    """Stages and each queue's order: segments (stage name, first local task, end)."""
    stages: dict = field(default_factory=dict)
    order: tuple = field(default_factory=lambda: ([], []))

    def add(self, stage: Stage, segments=None):
        """Append `stage` to its queue, as one segment or as `segments` ((lo, hi) ranges, to be
        interleaved with later stages' by `interleave`)."""
        if stage.name in self.stages or stage.tasks < 1:
            raise ValueError(f"task graph: stage {stage.name!r} repeated or without tasks")
        self.stages[stage.name] = stage
        for lo, hi in segments or [(0, stage.tasks)]:
            self.order[stage.queue].append((stage.name, lo, hi))
        return self

    def keys(self, name):
        """How many counters a keyed producer needs (its tasks per key divide its tasks)."""
        pers = {d.src_per for s in self.stages.values() for d in s.deps if d.src == name and d.per}
        out = {}
        for p in pers:
            if self.stages[name].tasks % p:
                raise ValueError(f"task graph: {name}'s {self.stages[name].tasks} tasks are not "
                                 f"keys of {p}")
            out[p] = self.stages[name].tasks // p
        return out

    def producers(self, name, lo, hi):
        """[(src stage, src lo, src hi)]: the producer tasks consumer tasks lo..hi-1 wait for."""
        out = []
        for d in self.stages[name].deps:
            n = self.stages[d.src].tasks
            if not d.per:
                out.append((d.src, 0, n))
            else:
                k0, k1 = lo // d.per, (hi - 1) // d.per + 1
                out.append((d.src, k0 * d.src_per, min(n, k1 * d.src_per)))
        return out

    def threshold(self, name, backfill=0.125, min_backfill=16):
        """How many awaited tasks may be missing before a waiting critical CTA spins instead of
        backfilling (plan.Order's rule); 0 for a wait on the filler queue (backfill to the end)."""
        st = self.stages[name]
        if any(self.stages[d.src].queue != st.queue for d in st.deps):
            return 0
        big = max([d.src_per if d.per else self.stages[d.src].tasks for d in st.deps] + [0])
        return NEVER if big < min_backfill else int(backfill * big)

    def check(self):
        """ValueError unless every stage's tasks are in its queue exactly once, every dependency
        names a stage, and the ticket graph (queue order + producer -> consumer) has no cycle."""
        for q, segs in enumerate(self.order):
            for name, lo, hi in segs:
                if self.stages[name].queue != q or not 0 <= lo < hi <= self.stages[name].tasks:
                    raise ValueError(f"task graph: segment {name} {lo}..{hi} in queue {q}")
        for name, st in self.stages.items():
            cover = sorted((lo, hi) for s, lo, hi in self.order[st.queue] if s == name)
            if cover[0][0] != 0 or cover[-1][1] != st.tasks or any(
                    a[1] != b[0] for a, b in zip(cover, cover[1:])):
                raise ValueError(f"task graph: {name}'s tasks covered as {cover}")
            for d in st.deps:
                if d.src not in self.stages or d.src == name or (d.per and d.src_per < 1):
                    raise ValueError(f"task graph: {name} depends on {d}")
            for d in st.deps:
                self.keys(d.src)
        nodes = [(q, i) for q, segs in enumerate(self.order) for i in range(len(segs))]
        edges = {n: set() for n in nodes}
        for q, segs in enumerate(self.order):
            for i in range(len(segs) - 1):
                edges[(q, i)].add((q, i + 1))
        where = {}
        for q, segs in enumerate(self.order):
            for i, (name, lo, hi) in enumerate(segs):
                where.setdefault(name, []).append((lo, hi, (q, i)))
        for q, segs in enumerate(self.order):
            for i, (name, lo, hi) in enumerate(segs):
                for src, a, b in self.producers(name, lo, hi):
                    for plo, phi, node in where[src]:
                        if plo < b and a < phi:
                            edges[node].add((q, i))
        cyc = _cycle(nodes, edges)
        if cyc:
            path = " -> ".join(self.order[q][i][0] for q, i in cyc)
            raise ValueError(f"task graph: a schedule can hang on the cycle {path}")
        return self

    def tickets(self, q):
        """[(stage, local task)] of queue q in ticket order."""
        return [(name, t) for name, lo, hi in self.order[q] for t in range(lo, hi)]


def _cycle(nodes, edges):
    """One cycle of the directed graph as a node list, or None (iterative DFS)."""
    state = {n: 0 for n in nodes}                 # 0 new, 1 on the stack, 2 done
    for root in nodes:
        if state[root]:
            continue
        stack = [(root, iter(sorted(edges[root])))]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state[nxt] == 1:
                path = [n for n, _ in stack]
                return path[path.index(nxt):] + [nxt]
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(edges[nxt]))))
    return None
