"""A distributed candidate: N rank processes under torch.distributed, seen by the runner as one
ordinary backend.

    DistributedCandidate      the Backend protocol (k3diff/backends/base.py) around a per-rank
                              implementation named by `rank_impl` ("module:object"); runner.py and
                              invariance.py bind it to each case (`bind_case`), so it knows the
                              case's layout (k3diff/ep_config.py)
    RankPool                  the N processes (k3diff/rank_pool.py): one process group (gloo on
                              the CPU; NCCL on GPUs, NVLink multicast off), kept across cases

Every rank gets the same inputs and its shard of the experts (the others' rows never reach it);
each returns the rows of its home tokens, which are written into the framework's `out` buffers,
so the controls (poison, run twice, inputs unchanged), the routing rule and the error rule judge
the distributed result exactly as a single-device one.

A per-rank implementation has: `prepare_rank(cfg, stage, shard, ctx)` -> prepared and
`run_rank(stage, cfg, prepared, inputs, ctx)` -> {output name: rows of ctx's home tokens}, where
ctx is a RankContext (rank, world, group, layout, device) and `shard` holds the replicated
weights plus `experts.*` of ctx's own experts, ascending id, with `expert_ids` naming them.

Failures: a rank that dies is a `crash:` of the case, a rank with no answer within
`rank_timeout` seconds a `hang:` (both final, like isolation.py's); a rank that raises fails the
case with its message. Every rank is then killed (none outlives its owner: rank_pool.py) and the
next case starts a fresh pool.
"""
from __future__ import annotations

import itertools
from dataclasses import replace

from k3diff.ep_config import MAX_RANKS, Layout, layout_of
from k3diff.rank_pool import RANK_TIMEOUT, RankPool, _pack, _shared, _to_cpu, _unpack, load_impl
from k3diff.usage import UsageProblem


def is_distributed(backend) -> bool:
    return bool(getattr(backend, "distributed", False))


def bind_case(candidate, case) -> None:
    """Tell a distributed candidate which case it is about to run (a no-op for any other)."""
    bind = getattr(candidate, "bind_case", None)
    if bind is not None:
        bind(case)


def apply_ranks(session, ranks) -> None:
    """`--k3diff-ranks N` checked against the session's backend, device and preset, then put in its
    strategy space; UsageProblem (one line, pytest exit 4) for a bad combination."""
    name = session.backend_name
    if ranks is None:
        if is_distributed(session.backend):
            raise UsageProblem(f"backend {name!r} is distributed: give --k3diff-ranks N (1..{MAX_RANKS})")
        return
    if not is_distributed(session.backend):
        raise UsageProblem(f"--k3diff-ranks {ranks}: backend {name!r} is not distributed "
                           "(use a distributed one, e.g. torch-blocked-ep)")
    if ranks < 1:
        raise UsageProblem(f"--k3diff-ranks must be >= 1, got {ranks}")
    from reference.config import preset

    experts = preset(session.space.preset).n_experts
    if ranks > experts:
        raise UsageProblem(f"--k3diff-ranks {ranks} is more ranks than the {experts} experts of preset "
                           f"{session.space.preset!r}")
    if ranks > MAX_RANKS:
        raise UsageProblem(f"--k3diff-ranks {ranks}: at most {MAX_RANKS} ranks (one host)")
    # more ranks than GPUs is allowed: they exchange over gloo (DistributedCandidate.run)
    session.space = replace(session.space, ranks=ranks)


# ------------------------------------------------------------------ the candidate

_KEYS = itertools.count(1)


class DistributedCandidate:
    """The runner's view of a candidate that runs on the case's ranks. Subclasses name
    `rank_impl`; `name`, `stages`, `provides` come from the implementation class."""

    distributed = True
    deterministic = True
    batch_invariant = False
    rank_impl = ""                  # "module:object" of the per-rank implementation
    rank_timeout = RANK_TIMEOUT
    # on a GPU case: False, ranks without a GPU of their own work on the CPU (gloo); True, every
    # rank runs on a GPU, sharing one when there are fewer GPUs than ranks (a kernel candidate)
    ranks_on_gpu = False

    def __init__(self):
        self._impl = load_impl(self.rank_impl)      # asked for stages and outputs, never run here
        self.stages = tuple(getattr(self._impl, "stages", ("moe",)))
        self._case = None
        self._pool = None
        self._sent: set = set()

    # -- the Backend protocol
    def available(self) -> str | None:
        import torch.distributed as dist

        if not dist.is_available():
            return "torch.distributed is not built into this torch"
        return None

    def provides(self, stage: str) -> set:
        return set(self._impl.provides(stage))

    def bind_case(self, case) -> None:
        self._case = case

    def prepare(self, cfg, stage, weights):
        """Sharding waits for the case's placement (run): here only a key for this weight set."""
        return {"key": next(_KEYS), "weights": weights}

    def run(self, stage, cfg, prepared, inputs, out) -> None:
        if self._case is None:
            raise RuntimeError(f"{self.name}: run() before bind_case(case): a distributed candidate needs "
                               "the case's layout (k3diff.distributed.bind_case)")
        layout = layout_of(self._case, cfg.n_experts, inputs["x"].shape[0])
        kind, on_gpu = "gloo", False
        if inputs["x"].device.type == "cuda":
            import torch

            # NCCL puts rank r on cuda:r and refuses two ranks on one GPU (the H200 run of cd21222:
            # 3 ranks on 1 GPU, DistBackendError); with fewer GPUs than ranks they exchange over gloo
            kind = "nccl" if layout.ranks <= torch.cuda.device_count() else "gloo"
            on_gpu = kind == "nccl" or self.ranks_on_gpu
        pool = self._pool_for(layout.ranks, kind, on_gpu)
        key = (prepared["key"], layout.owners)
        if key not in self._sent:
            msgs = [("shard", key, stage, cfg, layout, _shared(shard_of(prepared["weights"], layout, r)))
                    for r in range(layout.ranks)]
            pool.broadcast(msgs, "prepare")
            if len(self._sent) > 4:
                self._sent.clear()
            self._sent.add(key)
        blob = _pack(_to_cpu(inputs))
        answers = pool.broadcast([("run", key, stage, cfg, layout, blob)] * layout.ranks, "run")
        for r, answer in enumerate(answers):
            a, b = layout.rows[r]
            rows = _unpack(answer)
            for name, buf in out.items():
                got = rows.get(name)
                want = (b - a,) + tuple(buf.shape[1:])
                if got is None or got.dtype != buf.dtype or tuple(got.shape) != want:
                    # the copy below would convert silently: the rows must already be what the stage says
                    have = "nothing" if got is None else f"{str(got.dtype).replace('torch.', '')}{list(got.shape)}"
                    raise RuntimeError(f"contract: rank {r} returned {have} for {name!r}; required "
                                       f"{str(buf.dtype).replace('torch.', '')}{list(want)}")
                buf[a:b] = got.to(buf.device)

    # -- the pool
    def _pool_for(self, world: int, kind: str, on_gpu: bool = False) -> RankPool:
        if world > MAX_RANKS and kind == "gloo":
            raise RuntimeError(f"{world} ranks: at most {MAX_RANKS} on one host")
        pool = self._pool
        if (pool is None or pool.world != world or pool.kind != kind or pool.on_gpu != on_gpu
                or not pool.alive()):
            if pool is not None:
                pool.kill()
            self._sent.clear()
            self._pool = None
            self._pool = RankPool(self.rank_impl, world, kind, self.rank_timeout, on_gpu)
        return self._pool

    def rank_pids(self) -> list:
        """The pids of the live pool's ranks (tests: nothing may outlive a teardown)."""
        return list(self._pool.pids) if self._pool is not None else []

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __del__(self):  # pragma: no cover - best effort
        try:
            if self._pool is not None:
                self._pool.kill()
        except Exception:  # noqa: BLE001
            pass


def candidate(name: str, rank_impl: str, **attrs) -> type:
    """A DistributedCandidate class named `name` running `rank_impl` ("module:object"), `attrs`
    its other class attributes (boundaries, ranks_on_gpu): a candidate's whole declaration in one
    line (the built-in ones, the mutants', the tests')."""
    return type(f"Candidate<{name}>", (DistributedCandidate,), dict(name=name, rank_impl=rank_impl, **attrs))


class Declared(DistributedCandidate):
    """A distributed candidate declared by a package that cannot import k3diff (the megakernel:
    ARCHITECTURE.md's import rules): any backend object with `distributed = True` and a
    `rank_impl`, and none of run / prepare, is run as a DistributedCandidate with its `name`,
    `rank_impl`, `ranks_on_gpu`, `boundaries`, `stages`, and its `available()` and `supports()`
    asked too."""

    def __init__(self, declared):
        self._declared = declared
        self.name = str(getattr(declared, "name", type(declared).__name__))
        self.rank_impl = declared.rank_impl
        self.ranks_on_gpu = bool(getattr(declared, "ranks_on_gpu", False))
        self.boundaries = dict(getattr(declared, "boundaries", {}) or {})
        super().__init__()

    def available(self) -> str | None:
        return super().available() or getattr(self._declared, "available", lambda: None)()

    def supports(self, cfg, stage) -> str | None:
        return getattr(self._declared, "supports", lambda cfg, stage: None)(cfg, stage)


def declared(obj) -> bool:
    """Whether `obj` declares a distributed candidate for Declared to run."""
    return (bool(getattr(obj, "distributed", False)) and isinstance(getattr(obj, "rank_impl", None), str)
            and not isinstance(obj, DistributedCandidate) and not hasattr(obj, "run"))


def shard_of(weights: dict, layout: Layout, r: int) -> dict:
    """Rank r's weights: everything replicated except `experts.*`, of which only r's own experts
    (ascending id), with `expert_ids` naming them: CPU copies of their own (rank_pool._shared moves
    them into shared memory for the pipe; the case's weights stay where they are)."""
    import torch

    mine = layout.experts_of(r)
    index = torch.tensor(mine, dtype=torch.int64)
    shard = {}
    for k, v in weights.items():
        if not torch.is_tensor(v):
            continue
        v = v.detach()
        if k.startswith("experts.") or ".experts." in k:
            shard[k] = v.index_select(0, index.to(v.device)).cpu()
        else:
            shard[k] = v.clone() if v.device.type == "cpu" else v.cpu()
    shard["expert_ids"] = index
    return shard
