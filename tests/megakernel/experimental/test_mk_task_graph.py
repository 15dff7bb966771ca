"""CPU: the layer's persistent schedule (megakernel/experimental/: task_graph.py, layer_graph.py, task_sim.py).

- The generic planner expresses the MoE launch's own schedule (plan.py) exactly: the same
  tickets in each queue, the same waits.
- Every KDA and MLA layer graph (small and full dims, batch 1 to 256, MLA's cache splits) passes
  the static check and completes under the layer protocol, and under the one that takes no
  ticket of either queue unready (experimental/peek.py), for any CTA count and filler-first count,
  in random interleavings.
- The MoE launch's protocol (filler tickets drawn unready) hangs on a layer graph: why the layer
  needs the other one. A filler order that puts a stage before one the critical chain needs
  first is refused by the check, and hangs in the simulation: neither check can only pass.
"""
import itertools

import pytest

pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")

from megakernel import gemv, plan as P, registry  # noqa: E402
from megakernel.config import ALL_GEMVS  # noqa: E402
from megakernel.experimental import layer_graph, task_sim  # noqa: E402
from megakernel.dims import FULL, SMALL  # noqa: E402
from megakernel.experimental.task_graph import CRIT, FILL, Dep, Graph, Stage  # noqa: E402
from reference.config import preset  # noqa: E402

ORDERS = [P.Order(), P.Order(groups=1, gemv_tiles=1), P.Order(groups=32, gemv_tiles=5)]


def _plan_tickets(words, base, total):
    out, i = [], 0
    while True:
        st, t0, lo, n = words[base + 4 * i: base + 4 * i + 4]
        if t0 == total and n == 0:
            return out
        out += [(P.STAGES[st], lo + j) for j in range(n)]
        i += 1


@pytest.mark.parametrize("dm", [SMALL, FULL], ids=["small", "full"])
@pytest.mark.parametrize("fmt", ["bf16", "mxfp4"])
def test_the_generic_planner_gives_the_moe_launch_its_own_schedule(dm, fmt):
    for T, order in itertools.product((1, 2, 8, 64, 256), ORDERS):
        sh = registry.persistent_step(dm, fmt, False, T == 1, gemv_mma=gemv.moe_mma(ALL_GEMVS)).shape()
        words, tot_r, tot_s = P.build(sh, T, min(dm.E, T * dm.k), order)
        g = layer_graph.moe(Graph(), dm, fmt, T, None, order).check()
        assert g.tickets(CRIT) == _plan_tickets(words, P.SEGS_R, tot_r)
        assert g.tickets(FILL) == _plan_tickets(words, P.SEGS_S, tot_s)
        for st, name in enumerate(P.STAGES):
            pairs = words[P.DEPS + 8 * st: P.DEPS + 8 * st + 4]
            want = [(c, t) for c, t in zip(pairs[::2], pairs[1::2]) if c != -1]
            got = []
            for d in g.stages[name].deps:
                if d.per:
                    got.append((P.PER_GROUP, d.src_per))
                else:
                    got.append((P.DONE + P.STAGES.index(d.src), g.stages[d.src].tasks))
            assert got == want, (name, T, order)
        for peek in (True, False, "both"):         # its filler waits only on filler: all safe
            task_sim.run(g, 5, 1, seed=T, peek=peek)


LAYERS = [(name, kind, T, NS) for name in ("small", "full") for kind in ("kda", "mla")
          for T in ((1, 8, 64, 256) if name == "small" else (1, 8))
          for NS in ((1, 9, 33) if kind == "mla" else (1,))]


@pytest.mark.parametrize("name,kind,T,NS", LAYERS)
def test_every_layer_graph_is_sound_and_completes(name, kind, T, NS):
    g = layer_graph.layer(preset(name), kind, T, NS=NS).check()
    crit = {s for s, _ in g.tickets(CRIT)}
    fill = {s for s, _ in g.tickets(FILL)}
    assert fill == {f"{kind}_g", "gemv_shared", "shared_act", "out_shared"}
    assert crit | fill == set(g.stages) and "final_sum" in crit
    for ctas, ff in ((1, 0), (1, 1), (2, 1), (7, 3), (64, 64)):
        task_sim.run(g, ctas, ff, seed=1000 * T + ctas)
        task_sim.run(g, ctas, ff, seed=1000 * T + ctas, peek="both")   # experimental/peek.py


def test_the_moe_launch_protocol_can_hang_on_a_layer():
    """Filler tickets drawn unready (k_persistent.py's protocol): the gate's and the shared
    experts' tickets are held by spinning CTAs while the critical task they wait for is drawn by
    nobody. Some schedule of a small MLA layer at batch 8 shows it."""
    g = layer_graph.layer(preset("small"), "mla", 8).check()
    hung = 0
    for seed in range(20):
        try:
            task_sim.run(g, 3, 1, seed=seed, peek=False)
        except task_sim.Deadlock:
            hung += 1
    assert hung > 0
    for seed in range(20):                             # the layer protocol: never
        task_sim.run(g, 3, 1, seed=seed, peek=True)


def _bad_filler_order():
    """A small MLA layer with the shared experts queued before the gate the merge needs."""
    g = layer_graph.layer(preset("small"), "mla", 2)
    fill = g.order[FILL]
    gate = [s for s in fill if s[0] == "mla_g"]
    g.order[FILL][:] = [s for s in fill if s[0] != "mla_g"] + gate
    return g


def test_a_filler_order_that_can_hang_is_refused_and_hangs():
    with pytest.raises(ValueError, match="can hang on the cycle"):
        _bad_filler_order().check()
    with pytest.raises(task_sim.Deadlock, match="no CTA can move"):
        task_sim.run(_bad_filler_order(), 4, 1, seed=0)


def test_a_critical_wait_on_a_later_ticket_is_refused():
    g = Graph().add(Stage("b", 2, CRIT, (Dep("a"),))).add(Stage("a", 2, CRIT))
    with pytest.raises(ValueError, match="can hang on the cycle b -> a -> b"):
        g.check()


def test_keyed_waits_need_only_their_key():
    """expert_down-style: consumer task i waits for producer key i // per only."""
    g = Graph().add(Stage("up", 6, CRIT)).add(Stage("down", 3, CRIT, (Dep("up", 1, 2),))).check()
    S = task_sim._State(g)
    for t in (0, 1):
        S.finish("up", t)
    assert S.missing("down", 0) == 0 and S.missing("down", 1) == 2
    assert g.producers("down", 1, 3) == [("up", 2, 6)]
    task_sim.run(g, 2, 0, seed=3)


@pytest.mark.parametrize("build,match", [
    (lambda: Graph().add(Stage("a", 1, CRIT)).add(Stage("a", 1, CRIT)), "repeated"),
    (lambda: Graph().add(Stage("a", 0, CRIT)), "without tasks"),
    (lambda: Graph().add(Stage("a", 2, CRIT, (Dep("z"),))).check(), "depends on"),
    (lambda: Graph().add(Stage("a", 4, CRIT), [(0, 2)]).check(), "covered as"),
    (lambda: Graph().add(Stage("u", 5, CRIT)).add(Stage("d", 2, CRIT, (Dep("u", 1, 2),))).check(),
     "not keys of 2"),
    (lambda: layer_graph.layer(preset("small"), "gqa", 1), "kind kda or mla"),
])
def test_bad_graphs_are_one_line_errors(build, match):
    with pytest.raises(ValueError, match=match):
        build()
