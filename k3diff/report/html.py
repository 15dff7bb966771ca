"""One self-contained HTML page for a run (one results file or the merge of many shards): inline CSS,
plots as data:image/svg+xml;base64, no script, no external asset, so it opens offline and travels as
one file. Top first: the verdict banner (is this change safe?), the distinct failures (grouped by
stage and tensor, shrink steps folded), coverage with every declared boundary, then the numbers."""
from __future__ import annotations

from html import escape

import time

from k3diff.report import failures as failing_mod
from k3diff.report import header, plots, tables
from k3diff.report.verdict import WORDS, not_whole, verdict

MAX_HEATMAPS = 12        # failures drawn with their error map; the rest are listed

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1100px;color:#222}
h1{font-size:1.4em}h3{overflow-wrap:anywhere}h2{font-size:1.15em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}td,th{border:1px solid #ddd;padding:2px 7px;
text-align:left;vertical-align:top;overflow-wrap:anywhere}td:first-child{white-space:nowrap}th{background:#f4f4f4}.bad{color:#c00;font-weight:bold}
code,pre{font-size:.8em;background:#f6f6f6}pre{padding:.4em;white-space:pre-wrap;word-break:break-all}
.warn{background:#fff3cd;padding:.4em}img{max-width:100%}
#banner{padding:.7em 1em;border-radius:6px;margin:.5em 0 1em;font-size:1.05em}
#banner.pass{background:#e6f4ea;border:2px solid #1e8e3e}#banner.fail{background:#fce8e6;border:2px solid #c00}
#banner.incomplete{background:#fff3cd;border:2px solid #b06000}#banner b.verdict{font-size:1.4em;margin-right:.5em}
#banner ul{margin:.3em 0 0;padding-left:1.2em}
#judged{border:1px solid #bbb;border-radius:6px;padding:.5em 1em;margin:.5em 0 1em}#judged table{font-size:.9em}
#judged td:first-child{font-weight:600}#judged code.candidate{font-size:1.25em;font-weight:bold}.standin{background:#fff3cd;border:2px solid #b06000;padding:.4em .7em;
font-weight:bold;margin:.3em 0}#edge pre{background:#fff8e1}details{margin:.3em 0 .3em 0;border:1px solid #ddd;border-radius:4px;padding:.2em .6em}
details>summary{cursor:pointer;font-weight:600;overflow-wrap:anywhere}details.group{border-color:#e0a0a0}
.minimal{background:#c00;color:#fff;border-radius:3px;padding:0 .35em;font-size:.8em;margin-right:.4em}
.never{color:#b06000;font-weight:bold}p,li{overflow-wrap:anywhere}
"""


def esc(x) -> str:
    return escape("-" if x is None else str(x))


def table(headers, rows, ids=None) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c if isinstance(c, Raw) else esc(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    attr = f' id="{ids}"' if ids else ""
    return f"<table{attr}><tr>{head}</tr>{body}</table>"


class Raw(str):
    """Already-escaped HTML for a table cell."""


def img(b64: str | None, alt: str) -> str:
    if b64 is None:
        return f"<p><i>{esc(alt)}: nothing to plot</i></p>"
    return f'<img alt="{esc(alt)}" src="data:{plots.MIME};base64,{b64}">'


def page(title: str, body: list[str], meta: dict | None = None) -> str:
    metas = "".join(f'<meta name="{esc(k)}" content="{esc(v)}">' for k, v in (meta or {}).items())
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>{metas}'
            f"<style>{_CSS}</style></head><body><h1>{esc(title)}</h1>" + "\n".join(body) + "</body></html>\n")


def _when(unix) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix)) if unix else "-"


def _duration(seconds) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _short_commit(commit) -> str:
    """The commit's first 12 digits, and "+modified" where the tree was not that commit."""
    c = str(commit or "")
    return c[:12] + ("+modified" if c.endswith("+modified") else "")


def _join(values) -> str:
    return ", ".join(sorted({str(v) for v in values if v not in (None, "")})) or "-"


def judged_header(run) -> str:
    """What was judged: candidate, device, GPU, presets, profile, seed, budget table, the command."""
    f = header.facts(run)
    rows = [("candidate", Raw(f"<code class=\"candidate\">{esc(f['candidate'])}</code>")), ("device", f["device"]), ("GPU", f["gpu"]),
            ("presets (cases)", f["presets"]), ("profile", f["profile"]), ("seed", f["seed"]),
            ("budget table", Raw(f"<code id=\"budget-table\">{esc(f['budget_table'])}</code>")),
            ("command", Raw(f"<pre id=\"command\">{esc(f['command'])}</pre>" if f["command"] else "not recorded"))]
    notes = "".join(f'<p class="standin">{esc(n)}</p>' for n in f["notes"])
    return f'<div id="judged">{notes}{table(("what was judged", ""), rows)}</div>'


def edge_lines(run) -> list[str]:
    """The terminal summary's near-the-edge and whole-tensor lines, from the same functions."""
    from k3diff.summary import l2_lines, near_edge_lines

    lines = near_edge_lines(run.cases) + l2_lines(run.cases)
    if not lines:
        return ['<p id="edge"><small>no passing case near the edge of its budget, none with a whole-tensor '
                "error close to the rule</small></p>"]
    return [f'<div id="edge" class="warn"><pre>{esc(chr(10).join(lines))}</pre></div>']


def banner(run, distinct) -> str:
    """Is this change safe? pass/fail, what ran, when, how long, on what."""
    judged = tables.judged(run.cases)
    shrink = sum(map(tables.is_shrink, run.cases))
    skipped = len({(c["stage"], c["id"]) for c in run.cases if c.get("skipped")})
    state = verdict(run, distinct)
    word = WORDS[state]
    what = (f"{len(distinct)} distinct failing case(s)" if distinct else "no failing case") + (
        f"; {len(run.truncated)} file(s) cut short" if run.truncated else "") + "".join(
        "; " + why.split(": ", 1)[1] for why in not_whole(run))
    shards = run.shards
    envs = [h.get("environment") or {} for h in run.headers]
    starts = [h.get("started_unix") for h in run.headers if h.get("started_unix")]
    shard_files = {h.get("file") for h in shards}
    ends = [e for e in run.ends if e.get("seconds") is not None and e.get("file") in shard_files]
    longest = max((e["seconds"] for e in ends), default=None)
    ended = max((h["started_unix"] + e["seconds"] for h in run.headers for e in ends
                 if e.get("file") == h.get("file") and h.get("started_unix")), default=None)
    gpus = _join(e.get("gpu") for e in envs) if any(e.get("gpu") for e in envs) else "CPU (" + _join(
        h.get("device") for h in shards) + ")"
    items = [
        f"<li><b>ran</b>: {len(judged)} cases over {esc(', '.join(run.stages()))}"
        f" ({shrink} shrink steps of failures not counted; {skipped} skipped); profile {esc(_join(h.get('profile') for h in shards))};"
        f" backend <code>{esc(_join(h.get('backend') for h in shards))}</code>; seed {esc(', '.join(map(str, run.seeds)))};"
        f" {len(shards)} shard(s) in {len(run.files)} file(s)</li>",
        f"<li><b>when</b>: {_when(min(starts) if starts else None)} to {_when(ended)}; "
        f"<b>how long</b>: {_duration(longest)}" + (" (longest shard)" if len(ends) > 1 else "") + "</li>",
        f"<li><b>on</b>: {esc(gpus)}; torch {esc(_join(e.get('torch') for e in envs))}, CUDA "
        f"{esc(_join(e.get('cuda') for e in envs))} (driver {esc(_join(e.get('cuda_driver') for e in envs))}), "
        f"k3diff {esc(_join(e.get('k3diff') for e in envs))} at {esc(_join(_short_commit(e.get('git_commit')) for e in envs))}</li>",
    ]
    return (f'<div id="banner" class="{state}"><b class="verdict">{word}</b>{esc(what)}'
            f"<ul>{''.join(items)}</ul></div>")


def _summary(run) -> list[str]:
    out = [f'<p><b id="total-cases">{len(tables.judged(run.cases))}</b> cases judged '
           f"(each once; shrink steps and skips apart), from {len(run.files)} results file(s)</p>"]
    out += [f'<p class="warn">{esc(w)}</p>' for w in run.warnings]
    out.append(table(tables.STAGE_COLUMNS, tables.stage_rows(run), ids="stages"))
    out.append("<p><small>cases/s: cases over the summed case seconds (one worker's throughput). "
               "<b>forced</b>: a case whose candidate picked different experts than the reference at a "
               "near-tie (scores closer than the routing rule's &delta;); it is re-run with the "
               "reference's expert ids forced, so its outputs are judged on the same experts "
               "(k3diff/routing.py). <b>shrink steps</b>: Hypothesis re-judging smaller variants of a "
               "failure it found; they are folded under that failure below.</small></p>")
    return out


def _failures(run, distinct) -> list[str]:
    out = [f'<h2 id="failures">Failures ({len(distinct)} distinct)</h2>']
    if not distinct:
        return out + ["<p>none</p>"]
    k = 0
    for (stage, tensor), group in failing_mod.grouped(distinct).items():
        out.append(f'<details class="group" open><summary class="bad">{esc(stage)} / {esc(tensor)}: '
                   f"{len(group)} failing case(s)</summary>")
        for f in group:
            c = f.minimal
            headline = (f.saved or {}).get("headline") or c.get("failure") or c.get("error")
            out.append(f'<details open><summary><span class="minimal">minimal</span>{esc(c["label"])}</summary>'
                       f"<p>{esc(headline)}</p>"
                       f"<p>replay{' (the saved seed)' if f.saved else ''}:</p><pre>{esc(f.replay(run.failures))}</pre>")
            emap = c.get("error_map")
            if emap and k < MAX_HEATMAPS:
                out.append(img(plots.heatmap(emap["values"], f"{c['stage']}/{emap['tensor']}: {emap['what']}"),
                               f"error map of {emap['tensor']}"))
                k += 1
            if f.steps:
                rows = [(s["label"], "FAIL" if tables.failed(s) else "ok",
                         tables.pct(tables.worst_ratio(s)) if tables.worst_ratio(s) is not None else "-")
                        for s in f.steps]
                out.append(f"<details><summary>{len(f.steps)} shrink step(s) ({f.failing_steps} failing) "
                           f"from the first failure{': ' + esc(f.first['label']) if f.first else ''}</summary>"
                           + table(("case", "verdict", "worst % of budget"), rows) + "</details>")
            out.append("</details>")
        out.append("</details>")
    return out


def _coverage(run) -> list[str]:
    from k3diff.coverage import coverage_lines

    bounds = {}
    for h in run.headers:
        for dim, ns in (h.get("boundaries") or {}).items():
            bounds.setdefault(dim, set()).update(ns)
    lines = coverage_lines(tables.judged(run.cases), {d: sorted(ns) for d, ns in bounds.items()})
    rows, never = [], None
    stage = ""
    for line in lines:
        if line.startswith("never crossed:"):
            never = line.split(":", 1)[1].strip()
        elif line.startswith("coverage "):
            stage, rest = line[len("coverage "):].split(":", 1)
            rows.append((stage, "", rest.strip()))
        else:
            label, _, rest = line.strip().partition(" ")
            rows.append(("", label, rest.strip()))
    out = ["<h2 id=\"coverage\">Coverage</h2>"]
    if never is not None:
        ok = never.startswith("none")
        out.append(f'<p id="never-crossed" class="{"" if ok else "never"}">never crossed: {esc(never)}</p>')
    elif not bounds:
        out.append("<p><i>the backend declared no boundaries (or the results file predates them)</i></p>")
    out.append(table(("stage (cases)", "what", "seen"), rows, ids="coverage-table"))
    out.append("<p><small>a boundary <code>dim n [&lt;=&gt;]</code>: the sides of n the run drew (below, at, "
               "above); crossed when two were seen.</small></p>")
    axes = [(axis, Raw(", ".join(f"{esc(k)}&nbsp;<b>{n}</b>" for k, n in counts.items())))
            for axis, counts in tables.coverage(run).items()]
    out.append(table(("axis", "value (cases)"), axes))
    skips = tables.skip_reasons(run)
    out.append(f"<h3>Skipped ({sum(n for *_, n in skips)})</h3>")
    out.append(table(("stage", "reason", "cases"), skips) if skips else "<p>none</p>")
    return out


def _errors(run) -> list[str]:
    ratios = tables.tensor_ratios(run)
    acc, l2 = tables.tensor_accuracy(run), tables.tensor_values(run, "l2")
    med_max = lambda v, f: (f(v[len(v) // 2]), f(v[-1])) if v else ("-", "-")  # noqa: E731
    rows = []
    for name, v in ratios.items():
        rows.append((name, len(v), tables.pct(sorted(v)[len(v) // 2]), tables.pct(max(v)),
                     *med_max(sorted(acc.get(name, ())), lambda x: f"{x:.3g}"),
                     *med_max(sorted(l2.get(name, ())), lambda x: f"{x:.2f}x")))
    return ["<h2>Error as a share of the budget</h2>",
            img(plots.ratio_histogram(ratios), "histogram of shares of budget per stage"),
            img(plots.ratio_boxplot(ratios), "share of budget per tensor"),
            table(("tensor", "cases", "median", "max", "accuracy median", "accuracy max", "L2 median", "L2 max"), rows),
            "<p><small>accuracy: the error in units of u&middot;&Sigma;|a||b| (the tensor's accuracy class), "
            "where the error rule reports it. L2: the tensor's whole error over the bf16 baseline's, "
            "&#8214;cand &minus; ref&#8214; / &#8214;base &minus; ref&#8214; (bf16 tensors; the whole-tensor "
            "rule fails it above 2x at every step, a multi-step case's later steps included).</small></p>"]


def _ties_and_slowest(run) -> list[str]:
    tie_rows = [(c["stage"], c["label"], c.get("tie_flips", 0), "yes" if c.get("forced") else "")
                for c in tables.ties(run)]
    slow_rows = [(c["stage"], c["label"], f"{c.get('seconds', 0):.2f}", "FAIL" if tables.failed(c) else "ok")
                 for c in tables.slowest(run)]
    flips = sum(c.get("tie_flips", 0) for c in run.cases)
    forced = sum(1 for c in run.cases if c.get("forced"))
    return [f"<h2>Tie flips and forced replays</h2><p>{flips} near-tie flip(s); {forced} case(s) replayed "
            "with forced routing (first 20 listed)</p>",
            table(("stage", "case", "tie flips", "forced"), tie_rows) if tie_rows else "",
            "<h2>Slowest cases</h2>", table(("stage", "case", "seconds", "verdict"), slow_rows)]


def _environments(run) -> list[str]:
    out = ["<h2>Environment</h2>"]
    for env, files in tables.environments(run):
        out.append(table(("key", "value"), sorted(env.items()) or [("environment", "not recorded")]))
        out.append("<p><small>" + "<br>".join(map(esc, files)) + "</small></p>")
    return out


def run_report(run, title="k3diff report") -> str:
    distinct = failing_mod.distinct(run)
    body = [banner(run, distinct), judged_header(run)] + edge_lines(run) + _failures(run, distinct) + _coverage(run) + _summary(run) + _errors(run)
    body += _ties_and_slowest(run) + _environments(run)
    return page(title, body, meta={"k3diff-cases": len(tables.judged(run.cases)),
                                   "k3diff-failures": len(distinct),
                                   "k3diff-verdict": verdict(run, distinct)})
