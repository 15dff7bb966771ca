"""The numbers of a run: per-stage counts, coverage, the slowest cases, failures and their replay
commands, and each tensor's share of its budget. Plain data; html.py and plots.py draw it."""
from __future__ import annotations

import json
import re
import shlex
from collections import Counter, defaultdict

from k3diff.budgets import pct

STAGE_COLUMNS = ("stage", "cases", "shrink steps", "failing", "skip", "cases/s", "ties", "forced",
                 "worst tensor", "% of budget")


def failed(c) -> bool:
    return not c["ok"] and not c["skipped"]


def is_shrink(c) -> bool:
    """A Hypothesis shrink step: a variant of a failure already found, re-judged (not a new case)."""
    return c.get("phase") == "shrink"


def judged(cases) -> list:
    """Each case once (by stage and id), shrink steps and skipped cases left out: what `cases` counts
    everywhere (the summary, the coverage lines, the banner)."""
    seen, out = set(), []
    for c in cases:
        key = (c["stage"], c["id"])
        if not is_shrink(c) and not c["skipped"] and key not in seen:
            seen.add(key)
            out.append(c)
    return out


def distinct_failures(cases) -> int:
    """Failing cases counted once per failure: a test item's failure and its shrink steps are one."""
    return len({(c["stage"], c.get("item") or c["id"]) for c in cases if failed(c)})


def worst_ratio(c):
    w = c.get("worst")
    return None if not w else w[1]


def stage_rows(run) -> list[tuple]:
    by_stage = defaultdict(list)
    for c in run.cases:
        by_stage[c["stage"]].append(c)
    rows = []
    for stage in sorted(by_stage):
        cs = by_stage[stage]
        secs = sum(c.get("seconds") or 0.0 for c in cs)
        worst = max((c["worst"] for c in cs if c.get("worst")), key=lambda w: w[1], default=None)
        rows.append((stage, len(judged(cs)), sum(map(is_shrink, cs)), distinct_failures(cs),
                     len({c["id"] for c in cs if c["skipped"]}),
                     f"{len(cs) / secs:.1f}" if secs > 0 else "-", sum(c.get("tie_flips", 0) for c in cs),
                     sum(1 for c in cs if c.get("forced")), worst[0] if worst else "-",
                     pct(worst[1]) if worst else "-"))
    return rows


def _bucket(n):
    if n is None:
        return None
    if n == 0:
        return "0"
    lo = 1 << (int(n).bit_length() - 1)
    return f"{lo}-{2 * lo - 1}"


def coverage(run) -> dict:
    """What the run exercised: each axis of the case space, value -> number of cases, each judged
    case once (tables.judged: shrink steps, skips and a case's repeated records left out)."""
    axes = {"batch size": Counter(), "max cache length (bucket)": Counter(), "routing mode": Counter(),
            "expert format": Counter(), "value distribution": Counter(), "preset": Counter(), "steps": Counter()}
    for c in judged(run.cases):
        case = c.get("case") or {}
        axes["batch size"][c.get("batch", case.get("batch"))] += 1
        if c.get("max_cache_len") is not None:
            axes["max cache length (bucket)"][_bucket(c["max_cache_len"])] += 1
        if case.get("stage") in ("moe", "layer"):
            axes["routing mode"][case.get("routing")] += 1
            axes["expert format"][case.get("expert_format")] += 1
        axes["value distribution"][case.get("value_dist")] += 1
        axes["preset"][case.get("preset")] += 1
        axes["steps"][case.get("steps")] += 1
    return {axis: dict(sorted(cnt.items(), key=lambda kv: _sort_key(kv[0]))) for axis, cnt in axes.items() if cnt}


def _sort_key(v):
    if isinstance(v, int):
        return (0, v, "")
    if isinstance(v, str) and re.match(r"^\d+", v):
        return (0, int(re.match(r"^\d+", v).group()), v)
    return (1, 0, str(v))


def tensor_name(stage, tensor) -> str:
    """stage/tensor with the step of a multi-step case dropped (one distribution per tensor)."""
    return stage + "/" + re.sub(r"@step\d+$", "", tensor)


def tensor_ratios(run) -> dict:
    """stage/tensor -> every graded share of budget (tensors with a zero bound are bitwise checks);
    shrink steps left out (dozens of variants of one failure would outweigh the run)."""
    out = defaultdict(list)
    for c in run.cases:
        if is_shrink(c):
            continue
        for t in c.get("tensors") or ():
            if t.get("ratio") is not None and (t.get("bound") or 0) > 0:
                out[tensor_name(c["stage"], t["tensor"])].append(t["ratio"])
    return dict(sorted(out.items()))


def slowest(run, n=10) -> list:
    return sorted(run.cases, key=lambda c: -(c.get("seconds") or 0.0))[:n]


def ties(run, n=20) -> list:
    return [c for c in run.cases if c.get("tie_flips") or c.get("forced")][:n]


def replay_command(c, failures) -> str:
    """The saved seed's replay command when the run saved this case, else one that writes the seed."""
    for f in failures:
        if str(f.get("path", "")).endswith(f"-{c['id']}.json"):
            return f["replay"]
    seed = json.dumps({"k3diff_seed_format": 1, "case": c["case"]}, sort_keys=True)
    name = f"{c['case']['stage']}-{c['id']}.json"
    return (f"echo {shlex.quote(seed)} > {shlex.quote(name)} && "
            + shlex.join(["k3diff", "replay", name, "--backend", str(c.get("backend"))]))


def tensor_values(run, key: str) -> dict:
    """stage/tensor -> every value of a per-tensor number the records carry: `accuracy` (error in
    units of u*sum|a||b|) or `l2` (L2 error over the baseline's, bf16 tensors); shrink steps left out."""
    out = defaultdict(list)
    for c in run.cases:
        if is_shrink(c):
            continue
        for t in c.get("tensors") or ():
            if t.get(key) is not None:
                out[tensor_name(c["stage"], t["tensor"])].append(t[key])
    return dict(out)


def tensor_accuracy(run) -> dict:
    return tensor_values(run, "accuracy")


def skip_reasons(run) -> list[tuple]:
    """(stage, reason, cases) for every skipped case, most frequent first."""
    cnt = Counter((c["stage"], str(c["skipped"])) for c in run.cases if c.get("skipped") and not is_shrink(c))
    return [(s, r, n) for (s, r), n in cnt.most_common()]


def environments(run) -> list[tuple[dict, list]]:
    """Each distinct environment and the results files (shards) that ran on it."""
    groups = {}
    for h in run.headers:
        env = h.get("environment") or {}
        key = json.dumps(env, sort_keys=True)
        groups.setdefault(key, (env, []))[1].append(
            f"{h.get('file', '?')} (shard {h.get('shard') or '-'}, seed {h.get('seed')}, "
            f"backend {h.get('backend')}, profile {h.get('profile')})")
    return list(groups.values())
