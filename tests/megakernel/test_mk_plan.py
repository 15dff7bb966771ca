"""CPU: the persistent launch's task order (megakernel/plan.py) is complete and deadlock-free.

The simulation below reads the same plan words the kernel reads and runs its two-queue protocol
on one CTA; every wait must target the producer stage's full task count (a smaller target would
let a consumer read a half-written buffer; a larger one would hang)."""
import itertools

import pytest

pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl not installed")

from megakernel import gemv, plan as P, registry  # noqa: E402
from megakernel.config import ALL_GEMVS  # noqa: E402
from megakernel.dims import FULL, SMALL  # noqa: E402

ORDERS = [P.Order(), P.Order(backfill=0.0, min_backfill=1, groups=1, gemv_tiles=1),
          P.Order(backfill=1.0, min_backfill=1000, groups=32, gemv_tiles=5),
          P.Order(groups=8)]


def _shape(dm, fmt, T1, mma=ALL_GEMVS):
    return registry.persistent_step(dm, fmt, False, T1, gemv_mma=gemv.moe_mma(mma)).shape()


def tasks_of(words, base, total):
    segs, i = [], 0
    while True:
        segs.append(words[base + 4 * i: base + 4 * i + 4])
        if segs[-1][1] == total and segs[-1][3] == 0:
            break
        i += 1
    out = []
    for (st, t0, lo, n), nxt in zip(segs, segs[1:]):
        assert nxt[1] == t0 + n, "segments must tile the tickets"
        out += [(st, lo + i) for i in range(n)]
    assert len(out) == total
    return out


def simulate(words, tot_r, tot_s):
    """One CTA running the kernel's protocol alone (the worst case: nobody else makes progress):
    routed tickets in order; a routed task whose inputs are missing pulls shared tasks, in their
    order, until they are complete. Anything that would still wait is a deadlock."""
    routed = tasks_of(words, P.SEGS_R, tot_r)
    shared = tasks_of(words, P.SEGS_S, tot_s)
    every = routed + shared
    counts = {st: sum(1 for s, _ in every if s == st) for st in range(P.NST)}
    up_tiles = words[P.DEPS + 8 * P.DOWN + 1]
    done = [0] * P.SYNC_WORDS

    def missing(st, loc):
        miss = 0
        for j in range(2):
            ctr, tgt = words[P.DEPS + 8 * st + 2 * j: P.DEPS + 8 * st + 2 * j + 2]
            if ctr == -1:
                continue
            if ctr == P.PER_GROUP:
                down_tiles = counts[P.DOWN] // (counts[P.UP] // up_tiles)
                ctr = P.GROUP + loc // down_tiles
                assert tgt == up_tiles
            else:
                assert tgt == counts[ctr - P.DONE], (P.STAGES[st], "waits for a partial stage")
            miss = max(miss, tgt - done[ctr])
        return miss

    def run(st, loc):
        assert missing(st, loc) <= 0, (P.STAGES[st], loc, "would wait forever")
        done[P.DONE + st] += 1
        if st == P.UP:
            done[P.GROUP + loc // up_tiles] += 1

    si = 0
    for st, loc in routed:
        thr = words[P.DEPS + 8 * st + 4]
        while missing(st, loc) > 0 and si < len(shared):
            if missing(st, loc) <= thr:
                # the kernel spins here: safe only if what it waits on is in its own queue
                ctrs = [words[P.DEPS + 8 * st + 2 * j] for j in range(2)]
                assert all(c == P.PER_GROUP or c - P.DONE in P.ROUTED_STAGES
                           for c in ctrs if c != -1), (P.STAGES[st], "spins on the shared queue")
                break
            run(*shared[si])
            si += 1
        run(st, loc)
    for st, loc in shared[si:]:
        run(st, loc)
    for st in range(P.NST):                         # each stage's local indices exactly once
        locs = sorted(loc for s, loc in every if s == st)
        assert locs == list(range(len(locs))) and locs, P.STAGES[st]
    assert {s for s, _ in routed} == set(P.ROUTED_STAGES)
    assert {s for s, _ in shared} == set(P.SHARED_STAGES)
    return counts


@pytest.mark.parametrize("dm", [SMALL, FULL], ids=["small", "full"])
@pytest.mark.parametrize("fmt", ["bf16", "mxfp4"])
def test_every_plan_is_complete_and_deadlock_free(dm, fmt):
    for T, order in itertools.product((1, 2, 8, 64, 256), ORDERS):
        shape = _shape(dm, fmt, T == 1)
        maxU = min(dm.E, T * dm.k)
        words, tot_r, tot_s = P.build(shape, T, maxU, order)
        counts = simulate(words, tot_r, tot_s)
        assert counts[P.ROUTE] == T * shape.route_per_token
        groups = counts[P.UP] // shape.up_tiles
        assert groups * words[P.HDR_UB] >= maxU, "some expert slots have no task"


def test_bad_knobs_are_one_line_errors():
    shape = _shape(SMALL, "bf16", True)
    for bad in (P.Order(groups=0), P.Order(groups=99), P.Order(gemv_tiles=0),
                P.Order(backfill=1.5), P.Order(min_backfill=0)):
        with pytest.raises(ValueError, match="persistent order"):
            P.build(shape, 1, SMALL.k, bad)


def test_check_rejects_an_order_that_could_hang():
    shape = _shape(SMALL, "bf16", True)
    n = {st: 1 for st in range(P.NST)}
    segs = [(st, 0, 1) for st in range(P.NST)]
    segs[0], segs[1] = segs[1], segs[0]               # route before gemv_x
    deps = {P.ROUTE: [(P.DONE + P.GEMV_X, 1)]}
    with pytest.raises(AssertionError, match="would wait on gemv_x"):
        P._check(segs, n, deps, shape)


def test_task_table_follows_the_gemv_kernels():
    """The one launch's task table counts each GEMV's tiles, which differ between the CUDA-core
    and the tensor-core kernel: switching the step's settings (Settings.gemv.mma) must not reuse
    a table built for the other kernels (a reused one did a quarter of gemv_shared's rows)."""
    from types import SimpleNamespace

    from megakernel.experimental import launch_persistent
    from megakernel.config import Gemv, Settings

    moe = SimpleNamespace(dm=SMALL, fmt="bf16", order=P.Order(), _plans={}, _nsm=132,
                          device="cpu", settings=Settings(gemv=Gemv(mma=())))
    core = launch_persistent.task_table(moe, 5, 4)
    moe.settings = Settings(gemv=Gemv(mma=("gemv_shared",)))
    mma = launch_persistent.task_table(moe, 5, 4)
    assert len(moe._plans) == 2 and not bool((core == mma).all())
    words, _, _ = P.build(_shape(SMALL, "bf16", False, ("gemv_shared",)), 5, 4, P.Order(), 132)
    assert mma.tolist() == words


def _slot(w, st, q, loc, tick, grp, ctr, seen, tgt):
    b = P.ERR + P.ERR_SLOT * st
    w[b:b + P.ERR_SLOT] = [1, q, loc, tick, grp, ctr, seen, tgt]


def test_watchdog_words_are_described():
    """plan.describe names the root wait the watchdog gave up on (k_persistent._give_up writes a
    slot per stage; test_mk_gpu.py plants a broken wait on the GPU): the stage whose producer did
    not give up, with its counter, count and target, and the stages behind it; the ERR slots lie
    past what the last CTA resets and what the stages count."""
    assert P.GROUP + P.MAX_GROUPS <= P.ERR and P.ERR + P.ERR_SLOT * P.NST == P.SYNC_WORDS
    w = [0] * P.SYNC_WORDS
    w[P.ERROR] = 3
    _slot(w, P.DOWN, 0, 7, 41, 3, P.GROUP + 3, 5, 6)
    line = P.describe(w)
    assert "routed ticket 41 (expert_down task 7, expert group 3)" in line
    assert "GROUP+3" in line and "stood at 5 of 6" in line and "\n" not in line
    # the waits behind it: combine on expert_down (which gave up), out_routed on combine
    _slot(w, P.COMBINE, 0, 0, 60, 0, P.DONE + P.DOWN, 2, 448)
    _slot(w, P.OUT_ROUTED, 0, 4, 61, 0, P.DONE + P.COMBINE, 0, 1)
    line = P.describe(w)
    assert "gave up on routed ticket 41 (expert_down" in line
    assert line.endswith("behind it gave up: combine, out_routed; that launch's results are wrong")
    w = [0] * P.SYNC_WORDS
    _slot(w, P.OUT_ROUTED, 0, 4, 61, 0, P.DONE + P.COMBINE, 0, 1)      # out_routed gave up first,
    _slot(w, P.COMBINE, 0, 0, 60, 0, P.DONE + P.DOWN, 448, 449)        # combine is the root
    assert "gave up on routed ticket 60 (combine task 0): it waited on DONE+expert_down" in P.describe(w)
    w = [0] * P.SYNC_WORDS
    _slot(w, P.OUT_SHARED, 1, 7, 41, 0, P.DONE + P.SHARED_ACT, 4, 5)
    assert "shared ticket 41 (out_shared task 7): it waited on DONE+shared_act" in P.describe(w)
    _slot(w, P.OUT_SHARED, 1, 7, 41, 0, -1, 0, 0)
    assert "arrived late" in P.describe(w)
    assert "no watchdog slot" in P.describe([0] * P.SYNC_WORDS)
