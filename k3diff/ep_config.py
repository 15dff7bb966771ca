"""Expert parallelism as a case dimension: how many ranks, which rank owns which expert ids, which
rank is each token's home. Plain Python (no torch at import): case.py, the strategies
and the coverage table read it.

A Case carries three fields, all absent from its JSON when it is a single-device case, so every
seed written before them keeps its bytes and its id:

    ep_ranks      0: one device (as always); N >= 1: the candidate runs on N ranks
    ep_placement  how the owners were drawn: contiguous, strided, uneven, scattered (a label for the
                  coverage table; the owners themselves are what runs)
    ep_owners     one rank per expert id: ep_owners[e] holds expert e's weights

Tokens: every rank gets the same inputs; rank r is the home of the contiguous block of rows
`token_rows(B, N)[r]` (the first B % N ranks one row more; B < N leaves ranks with no token,
which still own experts and take part in every exchange). A token's routes go to the owners of
its experts and come back to its home rank, which combines them.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

PLACEMENTS = ("contiguous", "strided", "uneven", "scattered")
MAX_RANKS = 8               # gloo on 2 CPU cores; a GPU host has at most 8 NVLink peers
# a rank's shard travels by value (k3diff/rank_pool.py: torch.save bytes through a pipe, through
# host memory): a drawn distributed case keeps its routed experts within this many bytes in
# bf16, fewer experts where the widths are large (32 at K3's r 3584 and I 3072, where all 896
# would be 59 GB); E's boundaries (256, 512) are crossed at the small widths (fit_experts)
EP_EXPERT_BYTES = 2 << 30
FIELDS = ("ep_ranks", "ep_placement", "ep_owners")


# ------------------------------------------------------------------ placements

def contiguous(E: int, N: int) -> tuple:
    """Blocks of ids, the first E % N ranks one expert more (vLLM's and DeepEP's layout)."""
    base, extra = divmod(E, N)
    out = []
    for r in range(N):
        out += [r] * (base + (r < extra))
    return tuple(out)


def strided(E: int, N: int) -> tuple:
    return tuple(e % N for e in range(E))


def from_counts(counts) -> tuple:
    """Contiguous blocks of the given sizes (a size may be 0: a rank that owns no expert)."""
    out = []
    for r, c in enumerate(counts):
        out += [r] * c
    return tuple(out)


def rotate(owners: tuple, shift: int, N: int) -> tuple:
    """The same layout with the rank labels moved by `shift`: puts a chosen expert on any rank."""
    return tuple((r + shift) % N for r in owners)


def token_rows(B: int, N: int) -> list:
    """(start, stop) of each rank's home rows."""
    base, extra = divmod(B, N)
    out, start = [], 0
    for r in range(N):
        n = base + (r < extra)
        out.append((start, start + n))
        start += n
    return out


def counts(owners, N: int) -> list:
    c = [0] * N
    for r in owners:
        c[r] += 1
    return c


@dataclass(frozen=True)
class Layout:
    """What every rank needs of a case's configuration (sent to the ranks with each run)."""
    ranks: int
    owners: tuple
    rows: tuple                     # (start, stop) per rank

    def experts_of(self, r: int) -> list:
        return [e for e, o in enumerate(self.owners) if o == r]


def layout_of(case, n_experts: int, batch: int) -> Layout:
    """The case's layout; a single-device case runs on one rank that owns everything."""
    if not getattr(case, "ep_ranks", 0):
        return Layout(1, (0,) * n_experts, ((0, batch),))
    return Layout(case.ep_ranks, tuple(case.ep_owners), tuple(token_rows(batch, case.ep_ranks)))


# ------------------------------------------------------------------ the Case's fields

def validate(case, n_experts: int) -> str | None:
    """Why the case's EP fields are invalid, or None."""
    N, owners, placement = case.ep_ranks, case.ep_owners, case.ep_placement
    if not (isinstance(N, int) and not isinstance(N, bool)):
        return f"ep_ranks must be an integer, got {N!r}"
    if N == 0:
        return None if not owners and not placement else "ep_owners/ep_placement given without ep_ranks"
    if not 1 <= N <= MAX_RANKS:
        # the option's own limit (distributed.apply_ranks): a seed with more ranks could never run,
        # and replayed it failed a correct candidate ("at most 8 on one host") instead of the seed
        return f"ep_ranks must lie in 1..{MAX_RANKS} (the most --k3diff-ranks allows: one host), got {N}"
    if placement not in PLACEMENTS:
        return f"unknown ep_placement {placement!r} (known: {', '.join(PLACEMENTS)})"
    if len(owners) != n_experts:
        return f"ep_owners has {len(owners)} entries for {n_experts} experts"
    bad = [r for r in owners if not (isinstance(r, int) and not isinstance(r, bool) and 0 <= r < N)]
    if bad:
        return f"ep_owners holds {bad[0]!r}, not a rank in 0..{N - 1}"
    return None


def strip_defaults(d: dict) -> dict:
    """A case dict without the EP fields when they are at their defaults (old JSON, bit for bit)."""
    if d.get("ep_ranks", 0) == 0:
        for k in FIELDS:
            d.pop(k, None)
    else:
        d["ep_owners"] = list(d["ep_owners"])
    return d


def label(case) -> str:
    if not case.ep_ranks:
        return ""
    return f"ep={case.ep_ranks}:{case.ep_placement}"


# ------------------------------------------------------------------ the strategy

def fit_experts(cfg, overrides: tuple) -> tuple:
    """`overrides` with n_experts (and top_k with it) lowered until the routed experts, in bf16,
    fit EP_EXPERT_BYTES; unchanged when they fit."""
    per = 3 * cfg.moe_intermediate * cfg.latent_dim * 2
    cap = max(1, EP_EXPERT_BYTES // per)
    if cfg.n_experts <= cap:
        return overrides
    ov = dict(overrides, n_experts=cap)
    if cfg.top_k > cap:
        ov["top_k"] = cap
    return tuple(sorted(ov.items()))


def hot_experts(seed: int, E: int, k: int) -> list:
    """The experts routing mode `hot` boosts (k3diff.routing.apply_routing draws them from this
    generator; tests/k3diff/test_distributed.py checks the two agree)."""
    import torch

    g = torch.Generator().manual_seed(seed + 7919)
    return torch.randperm(E, generator=g)[:k].tolist()


def placed(case, ranks: int, placement: str = "contiguous", owners=None, rng=None):
    """`case` on `ranks` ranks, validated: the given owners, else the placement's (contiguous,
    strided; uneven: every expert on rank 0; scattered: drawn from `rng`, a random.Random)."""
    E, N = case.config().n_experts, ranks
    if owners is None:
        owners = {"contiguous": lambda: contiguous(E, N), "strided": lambda: strided(E, N),
                  "uneven": lambda: from_counts([E] + [0] * (N - 1)),
                  "scattered": lambda: tuple(rng.randrange(N) for _ in range(E))}[placement]()
    return replace(case, ep_ranks=N, ep_placement=placement, ep_owners=tuple(owners)).validate()


def sweep_layout(case, ranks: int, i: int, rng):
    """Case number i of a boundary sweep (k3diff/strategies.py boundary_plan) on `ranks` ranks:
    its experts fitted (fit_experts), the placements in turn (uneven: all on rank i mod N)."""
    case = replace(case, overrides=fit_experts(case.config(), case.overrides))
    placement = PLACEMENTS[i % len(PLACEMENTS)]
    out = placed(case, ranks, placement, rng=rng)
    if placement == "uneven":
        out = replace(out, ep_owners=rotate(out.ep_owners, i % ranks, ranks))
    return out


def draw_ep(draw, fields: dict, cfg, ranks: int) -> dict:
    """EP fields for a case drawn on `ranks` ranks: a placement, uneven counts (a rank may own
    none), and in routing mode `hot` the first hot expert rotated onto a drawn rank."""
    from hypothesis import strategies as st

    E, N = cfg.n_experts, ranks
    placement = draw(st.sampled_from(PLACEMENTS))
    if placement == "contiguous":
        owners = contiguous(E, N)
    elif placement == "strided":
        owners = strided(E, N)
    elif placement == "uneven":
        cuts = sorted(draw(st.lists(st.integers(0, E), min_size=N - 1, max_size=N - 1)))
        edges = [0] + cuts + [E]
        owners = from_counts([edges[i + 1] - edges[i] for i in range(N)])
    else:
        owners = tuple(draw(st.lists(st.integers(0, N - 1), min_size=E, max_size=E)))
    if fields.get("routing") == "hot" and N > 1:
        hot = hot_experts(fields["seed"], E, cfg.top_k)[0]
        owners = rotate(owners, draw(st.integers(0, N - 1)) - owners[hot], N)
    return {"ep_ranks": N, "ep_placement": placement, "ep_owners": owners}


# ------------------------------------------------------------------ coverage

def coverage_fields(case, cfg) -> dict:
    """{"ep": {...}} for a distributed case, else {}."""
    if not case.ep_ranks:
        return {}
    N = case.ep_ranks
    c = counts(case.ep_owners, N)
    cov = {"ranks": N, "placement": case.ep_placement, "min": min(c), "max": max(c),
           "divisible": cfg.n_experts % N == 0,
           "idle": sum(1 for a, b in token_rows(case.batch, N) if a == b)}
    if case.routing == "hot":
        cov["hot_rank"] = case.ep_owners[hot_experts(case.seed, cfg.n_experts, cfg.top_k)[0]]
    return {"ep": cov}


def coverage_lines(covs: list) -> list:
    """The `  ep ...` lines of one stage's block of the coverage table."""
    eps = [c["ep"] for c in covs if "ep" in c]
    if not eps:
        return []

    def show(counter):
        return ", ".join(f"{k} {v}" for k, v in sorted(counter.items(), key=lambda kv: str(kv[0])))

    lines = [f"  ep       ranks {show(Counter(e['ranks'] for e in eps))}; "
             f"placement {show(Counter(e['placement'] for e in eps))}",
             f"  ep       experts per rank {min(e['min'] for e in eps)}..{max(e['max'] for e in eps)}; "
             f"E % ranks != 0: {sum(not e['divisible'] for e in eps)} cases; "
             f"a rank with no expert: {sum(e['min'] == 0 for e in eps)}; "
             f"a rank with no token: {sum(e['idle'] > 0 for e in eps)}"]
    hot = Counter(e["hot_rank"] for e in eps if "hot_rank" in e)
    lines.append(f"  ep       hot expert on rank {show(hot) if hot else '- (no hot-routing case)'}")
    return lines
