"""The task order of the persistent launch (k_persistent.py), built on the host; pure Python.

Two queues, each a global ticket counter over its own list of tasks:
- routed (priority): gemv_x, route, schedule, expert_up by expert group, expert_down by group,
  combine, out_routed, final_sum;
- shared (filler): gemv_shared, shared_act, out_shared.
The first `shared_first` CTAs per SM (by block index: the first wave) take shared tasks until
that queue is empty, then join the others. The others hold one routed ticket at a time. When
that task's dependencies are met they run it; otherwise, while more than `threshold` of the
awaited tasks are still missing, they run the next shared task instead (backfill) and check
again; near the end of the wait they spin. So the shared experts' bf16 rows stream all along
(beside the MXFP4 experts' decode-bound tasks) and through the routed chain's latency-bound
stretches (route, schedule, the expert group joins, combine), placed at run time rather than in
a fixed order.

Deadlock-free: within each queue a task waits only on smaller tickets of the same queue, held by
CTAs that are running them; the one cross-queue wait (final_sum on out_shared) is taken by a CTA
that backfills the shared queue until it is drained, so every shared ticket is drawn and runs.
`build` checks the ticket property for every plan it returns.

Plan table (int32, what the kernel reads): header, per-stage dependencies (two (counter, target)
pairs and the backfill threshold), then each queue's segments (stage, first ticket, first local
task index, count), each list closed by a sentinel segment at its total.
"""
from dataclasses import dataclass

STAGES = ("gemv_x", "route", "schedule", "expert_up", "expert_down", "combine", "out_routed",
          "gemv_shared", "shared_act", "out_shared", "final_sum")
(GEMV_X, ROUTE, SCHEDULE, UP, DOWN, COMBINE, OUT_ROUTED, GEMV_SHARED, SHARED_ACT, OUT_SHARED,
 FINAL_SUM) = range(11)
NST = len(STAGES)

# sync words (int32, zero before the first launch; the last CTA out resets those below ERR but ERROR)
TICKET, EXITED, ERROR = 0, 1, 2
DONE = 16                 # DONE + stage: tasks of the stage finished
GROUP = 32                # GROUP + g: up tasks of expert group g finished
MAX_GROUPS = 32
# the watchdog (k_persistent._give_up, `describe`): per stage, its first wait that gave up:
# ERR + ERR_SLOT * stage + (taken, queue, local index, ticket, expert group, the counter short,
# its count, its target)
ERR = GROUP + MAX_GROUPS
ERR_SLOT = 8
SYNC_WORDS = ERR + ERR_SLOT * NST

ROUTED_TICKET, SHARED_TICKET = TICKET, 3
ROUTED_STAGES = (GEMV_X, ROUTE, SCHEDULE, UP, DOWN, COMBINE, OUT_ROUTED, FINAL_SUM)
SHARED_STAGES = (GEMV_SHARED, SHARED_ACT, OUT_SHARED)

# plan words
HDR_TOTAL_R, HDR_TOTAL_S, HDR_GT, HDR_UB, HDR_SHARED_FIRST = 0, 1, 2, 3, 4
DEPS = 8                  # DEPS + 8 * stage: counter, target, counter, target, threshold
PER_GROUP = -2            # counter code: GROUP + this task's expert group (expert_down)
NEVER = 1 << 30           # threshold: always spin, never backfill
MAX_SEGS = 80             # per queue
SEGS_R = DEPS + 8 * NST
SEGS_S = SEGS_R + 4 * (MAX_SEGS + 1)
PLAN_WORDS = SEGS_S + 4 * (MAX_SEGS + 1)


@dataclass(frozen=True)
class Order:
    """Knobs of the persistent launch's plan (`python -m megakernel.tools.tune_persistent`)."""
    backfill: float = 0.125    # backfill while more than this share of the awaited tasks is missing
    min_backfill: int = 16     # waits on fewer tasks than this always spin (short stages)
    groups: int = 16           # expert groups per expert stage (tasks = groups x row tiles)
    gemv_tiles: int = 1        # 8-row tiles per GEMV task
    shared_first: int = 1      # CTAs per SM that take shared tasks first (the rest: routed first)


@dataclass(frozen=True)
class Shape:
    """Task counts the kernel implies (k_persistent.PersistentStep.shape)."""
    tiles_x: int          # 8-row tiles of gemv_x
    tiles_routed: int     # of out_routed
    tiles_shared: int     # of gemv_shared
    tiles_sdown: int      # of out_shared
    up_tiles: int         # row tiles per expert, expert_up
    down_tiles: int       # and expert_down
    route_per_token: int
    act_per_token: int
    sum_per_token: int


def build(sh: Shape, T: int, maxU: int, order: Order = Order(), nsm: int = 132):
    """-> (plan words, routed tasks, shared tasks). ValueError on a knob no plan can honour."""
    if not 1 <= order.groups <= MAX_GROUPS or order.gemv_tiles < 1:
        raise ValueError(f"persistent order: 1 <= groups <= {MAX_GROUPS} and gemv_tiles >= 1, "
                         f"got {order}")
    if order.shared_first < 0:
        raise ValueError(f"persistent order: shared_first must be >= 0, got {order}")
    if not 0.0 <= order.backfill <= 1.0 or order.min_backfill < 1:
        raise ValueError(f"persistent order: 0 <= backfill <= 1 and min_backfill >= 1, got {order}")
    gt = order.gemv_tiles
    cdiv = lambda a, b: (a + b - 1) // b  # noqa: E731
    groups = min(order.groups, maxU)
    ub = cdiv(maxU, groups)               # experts per task
    groups = cdiv(maxU, ub)
    n = [0] * NST
    n[GEMV_X], n[OUT_ROUTED] = cdiv(sh.tiles_x, gt), cdiv(sh.tiles_routed, gt)
    n[GEMV_SHARED], n[OUT_SHARED] = cdiv(sh.tiles_shared, gt), cdiv(sh.tiles_sdown, gt)
    n[ROUTE], n[SCHEDULE], n[COMBINE] = T * sh.route_per_token, 1, T
    n[UP], n[DOWN] = groups * sh.up_tiles, groups * sh.down_tiles
    n[SHARED_ACT], n[FINAL_SUM] = T * sh.act_per_token, T * sh.sum_per_token

    deps = {ROUTE: [(DONE + GEMV_X, n[GEMV_X])], SCHEDULE: [(DONE + ROUTE, n[ROUTE])],
            UP: [(DONE + SCHEDULE, 1)], DOWN: [(PER_GROUP, sh.up_tiles)],
            COMBINE: [(DONE + DOWN, n[DOWN])], OUT_ROUTED: [(DONE + COMBINE, n[COMBINE])],
            SHARED_ACT: [(DONE + GEMV_SHARED, n[GEMV_SHARED])],
            OUT_SHARED: [(DONE + SHARED_ACT, n[SHARED_ACT])],
            FINAL_SUM: [(DONE + OUT_ROUTED, n[OUT_ROUTED]), (DONE + OUT_SHARED, n[OUT_SHARED])]}

    routed = [(GEMV_X, 0, n[GEMV_X]), (ROUTE, 0, n[ROUTE]), (SCHEDULE, 0, 1)]
    routed += [(UP, g * sh.up_tiles, (g + 1) * sh.up_tiles) for g in range(groups)]
    routed += [(DOWN, g * sh.down_tiles, (g + 1) * sh.down_tiles) for g in range(groups)]
    routed += [(COMBINE, 0, n[COMBINE]), (OUT_ROUTED, 0, n[OUT_ROUTED]),
               (FINAL_SUM, 0, n[FINAL_SUM])]
    shared = [(GEMV_SHARED, 0, n[GEMV_SHARED]), (SHARED_ACT, 0, n[SHARED_ACT]),
              (OUT_SHARED, 0, n[OUT_SHARED])]
    if len(routed) > MAX_SEGS:
        raise ValueError(f"persistent plan has {len(routed)} routed segments, the kernel holds "
                         f"{MAX_SEGS}: use fewer groups")
    _check(routed, n, deps, sh)
    _check(shared, n, deps, sh)

    words = [0] * PLAN_WORDS
    tot_r = sum(hi - lo for _, lo, hi in routed)
    tot_s = sum(hi - lo for _, lo, hi in shared)
    words[HDR_TOTAL_R], words[HDR_TOTAL_S], words[HDR_GT], words[HDR_UB] = tot_r, tot_s, gt, ub
    words[HDR_SHARED_FIRST] = nsm * order.shared_first     # CTAs 0 .. this-1
    for st in range(NST):
        dl = deps.get(st, []) + [(-1, 0)] * 2
        big = max(t for _, t in dl)
        thr = NEVER if big < order.min_backfill else int(order.backfill * big)
        if st == FINAL_SUM:
            thr = 0     # waits across queues: backfill until the shared queue is drained
        words[DEPS + 8 * st: DEPS + 8 * st + 5] = [*dl[0], *dl[1], thr]
    for base, segs in ((SEGS_R, routed), (SEGS_S, shared)):
        tick = 0
        for i, (st, lo, hi) in enumerate(segs + [(0, 0, 0)]):
            words[base + 4 * i: base + 4 * i + 4] = [st, tick, lo, hi - lo]
            tick += hi - lo
    return words, tot_r, tot_s


def _check(segs, n, deps, sh):
    """One queue: each of its stages' tasks exactly once, and every dependency inside the queue
    on smaller tickets only (the cross-queue one, final_sum on out_shared, is met by backfill)."""
    first, last = {}, {}                   # (stage, local) range -> tickets, per stage
    tick = 0
    seen = [[] for _ in range(NST)]
    for st, lo, hi in segs:
        seen[st].append((lo, hi))
        first.setdefault(st, tick)
        last[st] = tick + (hi - lo) - 1
        tick += hi - lo
    for st in {s_ for s_, _, _ in segs}:
        cover = sorted(seen[st])
        ok = cover and cover[0][0] == 0 and cover[-1][1] == n[st] and all(
            a[1] == b[0] for a, b in zip(cover, cover[1:]))
        if not ok:
            raise AssertionError(f"persistent plan covers {STAGES[st]} as {cover}, "
                                 f"not 0..{n[st]}")
    for st, dl in deps.items():
        for ctr, _ in dl:
            if ctr == PER_GROUP or st not in first or ctr - DONE not in first:
                continue                    # per group: below; across queues: backfill
            src = ctr - DONE
            if last[src] >= first[st]:
                raise AssertionError(f"persistent plan: {STAGES[st]} (from ticket {first[st]}) "
                                     f"would wait on {STAGES[src]} (to ticket {last[src]})")
    # expert_down group g waits on expert_up group g
    tick, up_end, down_start = 0, {}, {}
    for st, lo, hi in segs:
        if st == UP:
            up_end[lo // sh.up_tiles] = tick + (hi - lo) - 1
        if st == DOWN:
            down_start.setdefault(lo // sh.down_tiles, tick)
        tick += hi - lo
    for g, t0 in down_start.items():
        if up_end.get(g, t0) >= t0:
            raise AssertionError(f"persistent plan: expert_down group {g} before its up group")


def _gave_up(words, st):
    """Stage st's watchdog slot as (queue, local, ticket, group, counter, seen, target), or None."""
    b = ERR + ERR_SLOT * st
    return tuple(words[b + 1:b + ERR_SLOT]) if words[b] else None


def _producer(ctr):
    """The stage whose finished tasks counter `ctr` counts (expert_up for a group's), or None."""
    if ctr >= GROUP:
        return UP
    return ctr - DONE if DONE <= ctr < DONE + NST else None


def describe(words) -> str:
    """The one-line error for sync words (a list of ints) whose ERROR is set: the wait the
    watchdog gave up on at the root (a stage waiting on a counter whose producing stage did not
    itself give up: that producer ran all its tasks, so the count is final and the target out of
    reach), with its counter, count and target, and the stages that gave up behind it."""
    slots = {st: s for st in range(NST) if (s := _gave_up(words, st))}
    roots = [st for st, s in slots.items() if _producer(s[4]) not in slots]
    st = (roots or sorted(slots) or [None])[0]
    if st is None:
        return ("megakernel persistent launch: a wait gave up past the spin limit, and no "
                "watchdog slot says which; that launch's results are wrong")
    q, loc, tick, grp, ctr, seen, tgt = slots[st]
    if ctr >= GROUP:
        counter = f"GROUP+{ctr - GROUP} (expert_up tasks of expert group {ctr - GROUP} done)"
    elif DONE <= ctr < DONE + NST:
        counter = f"DONE+{STAGES[ctr - DONE]} ({STAGES[ctr - DONE]} tasks done)"
    elif ctr < 0:
        counter = "a counter that had reached its target by the time it was read (it arrived late)"
    else:
        counter = f"sync word {ctr}"
    task = f"{('routed', 'shared')[q] if q in (0, 1) else f'queue {q}'} ticket {tick} ({STAGES[st]} task {loc}"
    task += f", expert group {grp})" if st in (UP, DOWN) else ")"
    where = (f"it waited on {counter}, which stood at {seen} of {tgt} after the spin limit "
             "(a dependency never signalled)" if ctr >= 0 else f"it waited on {counter}")
    behind = [STAGES[s] for s in sorted(slots) if s != st]
    also = f"; behind it gave up: {', '.join(behind)}" if behind else ""
    return (f"megakernel persistent launch: the watchdog gave up on {task}: {where}{also}; that "
            "launch's results are wrong")
