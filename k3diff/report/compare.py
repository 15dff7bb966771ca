"""BASE versus NEW: the same cases (same seed) judged for two candidates or two commits, matched
by the case itself (stage and the id of the case a seed file would hold: a hash of its JSON), never
by draw order, so the cases still match after NEW fails and Hypothesis goes off shrinking (its
shrink steps are matched to nothing; they are variants of NEW's failure, not cases of the run). Per tensor the share of budget before and after, the cases that newly
fail, the largest movements; a short text summary and an HTML page.

A coverage drop is as loud as a new failure (its own line first in every summary, exit 12
INCOMPLETE): cases only in BASE, a declared boundary BASE crossed and NEW did not, an expert-id
range BASE routed to and NEW never. So is a changed budget table (the runs' fingerprints differ,
k3diff/budget_fingerprint.py): the same code, since either way NEW's pass is not evidence of the
same strength as BASE's. A file without the fingerprint (older) is a warning, not a change.

A compare is a pass only when it compared something and NEW failed nowhere new: NEW's failures on
cases BASE never ran are new failures too (`unmatched_failures`), two runs that matched no case
compared nothing (`disjoint`), and every summary says how many cases matched and, loudly, how many
of BASE's cases NEW did not run (a coverage drop). `status()` is the exit status."""
from __future__ import annotations

from dataclasses import dataclass, field

from k3diff import exit_codes
from k3diff.budgets import pct
from k3diff.report import html, plots, tables
from k3diff.report.failures import distinct
from k3diff.report.verdict import WORDS


@dataclass
class Comparison:
    matched: int = 0
    only_base: int = 0
    only_new: int = 0
    new_failures: list = field(default_factory=list)      # (base case, new case)
    unmatched_failures: list = field(default_factory=list)  # NEW's failing cases that BASE never ran
    fixed: list = field(default_factory=list)
    pairs: dict = field(default_factory=dict)             # stage/tensor -> [(base, new)]
    movements: list = field(default_factory=list)         # (|delta|, delta, stage/tensor, label, base, new)
    accuracy: list = field(default_factory=list)          # the same, for accuracy (u*sum|a||b| units)
    warnings: list = field(default_factory=list)
    lost_boundaries: list = field(default_factory=list)   # "stage dim n": crossed by BASE, not by NEW
    lost_ranges: list = field(default_factory=list)       # "stage range": expert ids BASE routed to, NEW never
    budgets: tuple = (None, None)                         # (BASE's, NEW's) budget table fingerprints

    @property
    def budgets_changed(self) -> bool:
        """Both runs name their budget table and the tables differ (k3diff/budget_fingerprint.py)."""
        b, n = self.budgets
        return bool(b and n and b != n)

    @property
    def coverage_dropped(self) -> bool:
        return bool(self.only_base or self.lost_boundaries or self.lost_ranges)


def _index(run) -> dict:
    """(stage, id) -> case; a case judged twice keeps its worst verdict."""
    out = {}
    for c in run.cases:
        if tables.is_shrink(c):
            continue
        key = (c["stage"], c["id"])
        if key not in out or (tables.failed(c) and not tables.failed(out[key])):
            out[key] = c
    return out


def _ratios(c) -> dict:
    """tensor -> share of budget, graded tensors only (a zero bound is a bitwise check)."""
    return {t["tensor"]: t["ratio"] for t in c.get("tensors") or ()
            if t.get("ratio") is not None and (t.get("bound") or 0) > 0}


def _accuracy(c) -> dict:
    return {t["tensor"]: t["accuracy"] for t in c.get("tensors") or () if t.get("accuracy") is not None}


def _bounds(*runs) -> dict:
    """Every boundary either run's backend declared (dim -> sorted values)."""
    out = {}
    for run in runs:
        for h in run.headers:
            for dim, ns in (h.get("boundaries") or {}).items():
                out.setdefault(dim, set()).update(ns)
    return {d: sorted(ns) for d, ns in out.items()}


def _not_crossed(run, bounds) -> set:
    """'stage dim n' of each declared boundary this run's cases did not cross (k3diff.coverage)."""
    from k3diff.coverage import missed_boundaries

    return {m.split(" (seen", 1)[0] for m in missed_boundaries(tables.judged(run.cases), bounds)}


def _crossable(run, bounds) -> set:
    """'stage dim n' of each declared boundary whose dimension some case of the stage has."""
    out = set()
    for c in tables.judged(run.cases):
        dims = ((c.get("coverage") or {}).get("dims") or {})
        stage = c["stage"].split("-", 1)[0]
        out |= {f"{stage} {dim} {n}" for dim in dims if dim in bounds for n in bounds[dim]}
    return out


def _routed(run) -> set:
    """'stage range' of each expert-id range (k3diff.coverage.RANGES, E-1) some case routed to; a
    stage's batch-invariance cases (moe-inv) count for their stage, as in k3diff.coverage."""
    out = set()
    for c in tables.judged(run.cases):
        for name, n in ((c.get("coverage") or {}).get("expert_ids") or {}).items():
            if isinstance(n, (int, float)) and n > 0:
                out.add(f"{c['stage'].split('-', 1)[0]} {name}")
    return out


def _budget_table(run):
    tables_ = {h.get("budget_table") for h in run.shards if h.get("budget_table")}
    return ", ".join(sorted(tables_)) or None


def compare(base, new) -> Comparison:
    cmp = Comparison(warnings=list(base.warnings) + list(new.warnings))
    bounds = _bounds(base, new)
    crossed_base = _crossable(base, bounds) - _not_crossed(base, bounds)
    crossed_new = _crossable(new, bounds) - _not_crossed(new, bounds)
    cmp.lost_boundaries = sorted(crossed_base - crossed_new)
    cmp.lost_ranges = sorted(_routed(base) - _routed(new))
    cmp.budgets = (_budget_table(base), _budget_table(new))
    if bool(cmp.budgets[0]) != bool(cmp.budgets[1]):
        side = "BASE" if not cmp.budgets[0] else "NEW"
        cmp.warnings.append(f"warning: {side} did not record its budget table (a results file older than the "
                            "fingerprint): whether the budgets changed is unknown")
    if base.seeds != new.seeds:
        cmp.warnings.append(f"warning: BASE seed(s) {base.seeds} != NEW seed(s) {new.seeds}: "
                            "few cases will match")
    b, n = _index(base), _index(new)
    keys = sorted(b.keys() & n.keys())
    cmp.matched, cmp.only_base, cmp.only_new = len(keys), len(b.keys() - n.keys()), len(n.keys() - b.keys())
    cmp.unmatched_failures = [n[k] for k in sorted(n.keys() - b.keys()) if tables.failed(n[k])]
    for key in keys:
        cb, cn = b[key], n[key]
        if tables.failed(cn) and not tables.failed(cb):
            cmp.new_failures.append((cb, cn))
        elif tables.failed(cb) and not tables.failed(cn):
            cmp.fixed.append((cb, cn))
        ab, an = _accuracy(cb), _accuracy(cn)
        for name in sorted(ab.keys() & an.keys()):
            delta = an[name] - ab[name]
            cmp.accuracy.append((abs(delta), delta, f"{cn['stage']}/{name}", cn["label"], ab[name], an[name]))
        rb, rn = _ratios(cb), _ratios(cn)
        for name in sorted(rb.keys() & rn.keys()):
            cmp.pairs.setdefault(tables.tensor_name(cn["stage"], name), []).append((rb[name], rn[name]))
            delta = rn[name] - rb[name]
            cmp.movements.append((abs(delta), delta, f"{cn['stage']}/{name}", cn["label"], rb[name], rn[name]))
    cmp.movements.sort(key=lambda m: -m[0])
    cmp.accuracy.sort(key=lambda m: -m[0])
    return cmp


def disjoint(cmp) -> bool:
    """The two runs matched no case: nothing was compared (another seed, stage or preset)."""
    return cmp.matched == 0


def failing(cmp) -> bool:
    """NEW fails somewhere BASE did not: a matched case that newly fails, or a failing case BASE
    never ran (nothing says it failed before)."""
    return bool(cmp.new_failures or cmp.unmatched_failures)


def status(cmp) -> int:
    """The exit status of `k3diff report --compare`: 1 NEW fails where BASE did not (matched or
    not), else 6 (nothing judged) when no case matched, else 12 (incomplete) when NEW covers less
    than BASE or was judged under another budget table, else 0."""
    if failing(cmp):
        return exit_codes.FAIL
    if disjoint(cmp):
        return exit_codes.NOTHING_JUDGED
    return exit_codes.INCOMPLETE if cmp.coverage_dropped or cmp.budgets_changed else exit_codes.PASS


def headline(cmp) -> list:
    """The lines a reader must not miss, first in every summary: nothing matched, a coverage drop."""
    out = []
    if disjoint(cmp):
        out.append(f"NOTHING COMPARED: 0 cases matched: BASE and NEW share no case ({cmp.only_base} only in BASE, "
                   f"{cmp.only_new} only in NEW): nothing was compared (another seed, stage or preset?)")
    if cmp.only_base:
        total = cmp.only_base + cmp.matched
        out.append(f"COVERAGE DROP: NEW did not run {cmp.only_base} of BASE's {total} case(s) "
                   f"({100 * cmp.only_base / total:.0f}%): those are compared with nothing")
    if cmp.lost_boundaries:
        out.append(f"COVERAGE DROP: NEW did not cross {len(cmp.lost_boundaries)} boundary(ies) BASE crossed: "
                   + ", ".join(cmp.lost_boundaries))
    if cmp.lost_ranges:
        out.append(f"COVERAGE DROP: NEW routed to no expert id in {len(cmp.lost_ranges)} range(s) BASE routed to: "
                   + ", ".join(cmp.lost_ranges))
    if cmp.budgets_changed:
        out.append(f"BUDGETS CHANGED: BASE was judged under budget table {cmp.budgets[0]}, NEW under "
                   f"{cmp.budgets[1]}: shares of budget do not compare, and a loosened row hides a regression "
                   "(`k3diff budgets` lists the table in force)")
    return out


def _median(values):
    s = sorted(values)
    return s[len(s) // 2] if s else None


def tensor_rows(cmp) -> list[tuple]:
    rows = []
    for name, pts in sorted(cmp.pairs.items()):
        mb, mn = _median([a for a, _ in pts]), _median([b for _, b in pts])
        rows.append((name, len(pts), pct(mb), pct(mn), pct(max(a for a, _ in pts)), pct(max(b for _, b in pts))))
    return rows


TENSOR_COLUMNS = ("tensor", "cases", "BASE median", "NEW median", "BASE max", "NEW max")


def _counts(cmp) -> str:
    return (f"{cmp.matched} cases matched ({cmp.only_base} only in BASE, {cmp.only_new} only in NEW); "
            f"{len(cmp.new_failures)} newly failing, {len(cmp.unmatched_failures)} failing where BASE did not run, "
            f"{len(cmp.fixed)} fixed")


def text(cmp, top=5) -> str:
    lines = headline(cmp) + list(cmp.warnings)
    lines.append(_counts(cmp))
    for _, cn in cmp.new_failures:
        lines.append(f"NEW FAIL {cn['stage']}: {cn['label']}: {cn.get('failure') or cn.get('error')}")
    for cn in cmp.unmatched_failures:
        lines.append(f"NEW FAIL (not in BASE) {cn['stage']}: {cn['label']}: {cn.get('failure') or cn.get('error')}")
    lines.append(f"{'tensor':32} {'cases':>5} {'base med':>8} {'new med':>8} {'base max':>8} {'new max':>8}")
    lines += [f"{r[0]:32} {r[1]:5d} {r[2]:>8} {r[3]:>8} {r[4]:>8} {r[5]:>8}" for r in tensor_rows(cmp)]
    for _, delta, name, label, rb, rn in cmp.movements[:top]:
        lines.append(f"moved {name} {pct(rb)} -> {pct(rn)} ({label})")
    for _, delta, name, label, ab, an in cmp.accuracy[:top]:
        lines.append(f"accuracy {name} {ab:.3g} -> {an:.3g} ({label})")
    return "\n".join(lines)


def markdown(cmp, top=10) -> str:
    """For a job summary: the new failures and the largest budget-share movements."""
    lines = [f"**{h}**" for h in headline(cmp)]
    lines += [f"**compare with the previous night**: {_counts(cmp)}", ""]
    fresh = [cn for _, cn in cmp.new_failures] + list(cmp.unmatched_failures)
    if fresh:
        lines += ["| new failure | stage | what |", "|---|---|---|"]
        lines += [f"| {cn['label']} | {cn['stage']} | {(cn.get('failure') or cn.get('error') or '')[:160]} |"
                  for cn in fresh[:top]]
        lines.append("")
    if cmp.movements:
        lines += ["| tensor | case | before | after |", "|---|---|---|---|"]
        lines += [f"| {name} | {label[:60]} | {pct(rb)} | {pct(rn)} |" for _, _, name, label, rb, rn in cmp.movements[:top]]
    return "\n".join(lines + [""] + list(cmp.warnings)) + "\n"


def _replay(cn, new) -> str:
    """The replay of the seed NEW saved for this case's test item (its shrunk minimal case), else one
    that writes this case's seed."""
    saved = [f for f in new.failures if cn.get("item") and f.get("item") == cn["item"]]
    return saved[0]["replay"] + "   # the minimal case it shrank to" if saved else tables.replay_command(cn, new.failures)


def compare_report(cmp, base, new) -> str:
    code = status(cmp)
    state = "pass" if code == exit_codes.PASS else "incomplete" if code == exit_codes.INCOMPLETE else "fail"
    fresh = [cn for _, cn in cmp.new_failures] + list(cmp.unmatched_failures)
    body = [f'<div id="banner" class="{state}"><b class="verdict">{WORDS[state]}</b>'
            f"{len(cmp.new_failures)} case(s) newly failing in NEW and {len(cmp.unmatched_failures)} failing where "
            f"BASE did not run (shrunk to {len(distinct(new))} distinct failing case(s)), {len(cmp.fixed)} fixed, "
            f"{cmp.matched} matched by case</div>"]
    body += [f'<p class="warn"><b>{html.esc(h)}</b></p>' for h in headline(cmp)]
    body += [f'<p><b id="matched-cases">{cmp.matched}</b> cases matched ({cmp.only_base} only in BASE, '
            f'{cmp.only_new} only in NEW); <b class="{"bad" if fresh else ""}">'
            f"{len(cmp.new_failures)}</b> newly failing, {len(cmp.unmatched_failures)} failing where BASE did not "
            f"run, {len(cmp.fixed)} fixed</p>"]
    body += [f'<p class="warn">{html.esc(w)}</p>' for w in cmp.warnings]
    body.append(f"<h2>Newly failing ({len(fresh)})</h2>")
    body += [f'<details class="group" open><summary class="bad">{html.esc(cn["stage"])}: {html.esc(cn["label"])}'
             f'{"" if i < len(cmp.new_failures) else " (not run by BASE)"}</summary>'
             f"<p>{html.esc(cn.get('failure') or cn.get('error'))}</p>"
             f"<pre>{html.esc(_replay(cn, new))}</pre></details>" for i, cn in enumerate(fresh)]
    if cmp.accuracy:
        body.append("<h2>Accuracy movements (error in units of u&middot;&Sigma;|a||b|)</h2>")
        body.append(html.table(("tensor", "case", "BASE", "NEW", "change"), [
            (name, label, f"{ab:.3g}", f"{an:.3g}", f"{delta:+.3g}") for _, delta, name, label, ab, an in cmp.accuracy[:20]]))
    body.append("<h2>Largest movements</h2>")
    body.append(html.table(("tensor", "case", "BASE", "NEW", "change"), [
        (name, label, pct(rb), pct(rn), f"{100 * delta:+.1f} pts" if abs(delta) < 100 else f"{delta:+.3g}x")
        for _, delta, name, label, rb, rn in cmp.movements[:20]]))
    body.append("<h2>NEW vs BASE share of budget</h2>" + html.img(plots.before_after(cmp.pairs),
                                                                   "NEW vs BASE share of budget"))
    body.append("<h2>Runs compared</h2>")
    body.append(html.table(("", "files", "seed(s)", "backend(s)", "budget table", "commit(s)"), [
        (side, ", ".join(r.files), ", ".join(map(str, r.seeds)),
         ", ".join(sorted({str(h.get("backend")) for h in r.headers})), _budget_table(r) or "not recorded",
         ", ".join(sorted({html._short_commit((h.get("environment") or {}).get("git_commit")) for h in r.headers})))
        for side, r in (("BASE", base), ("NEW", new))]))
    body += ["<h2>Share of budget per tensor, before and after</h2>",
             html.table(TENSOR_COLUMNS, tensor_rows(cmp))]
    return html.page("k3diff compare: BASE vs NEW", body,
                     meta={"k3diff-matched": cmp.matched, "k3diff-new-failures": len(fresh)})
