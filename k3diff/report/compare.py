"""BASE versus NEW: the same cases (same seed) judged for two candidates or two commits, matched
by the case itself (stage and the id of the case a seed file would hold: a hash of its JSON), never
by draw order, so the cases still match after NEW fails and Hypothesis goes off shrinking (its
shrink steps are matched to nothing; they are variants of NEW's failure, not cases of the run). Per tensor the share of budget before and after, the cases that newly
fail, the largest movements; a short text summary and an HTML page.

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


def compare(base, new) -> Comparison:
    cmp = Comparison(warnings=list(base.warnings) + list(new.warnings))
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
    not), else 6 (nothing judged) when no case matched, else 0."""
    if failing(cmp):
        return exit_codes.FAIL
    return exit_codes.NOTHING_JUDGED if disjoint(cmp) else exit_codes.PASS


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
    bad = status(cmp) != exit_codes.PASS
    fresh = [cn for _, cn in cmp.new_failures] + list(cmp.unmatched_failures)
    body = [f'<div id="banner" class="{"fail" if bad else "pass"}"><b class="verdict">{"FAIL" if bad else "PASS"}</b>'
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
    body.append(html.table(("", "files", "seed(s)", "backend(s)", "commit(s)"), [
        (side, ", ".join(r.files), ", ".join(map(str, r.seeds)),
         ", ".join(sorted({str(h.get("backend")) for h in r.headers})),
         ", ".join(sorted({html._short_commit((h.get("environment") or {}).get("git_commit")) for h in r.headers})))
        for side, r in (("BASE", base), ("NEW", new))]))
    body += ["<h2>Share of budget per tensor, before and after</h2>",
             html.table(TENSOR_COLUMNS, tensor_rows(cmp))]
    return html.page("k3diff compare: BASE vs NEW", body,
                     meta={"k3diff-matched": cmp.matched, "k3diff-new-failures": len(fresh)})
