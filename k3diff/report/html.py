"""One self-contained HTML page for a run (one results file or the merge of many shards): inline CSS,
plots as data:image/png;base64, no external asset, so it opens offline and travels as one file."""
from __future__ import annotations

from html import escape

from k3diff.report import plots, tables

MAX_HEATMAPS = 12        # failures drawn with their error map; the rest are listed

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1100px;color:#222}
h1{font-size:1.4em}h3{overflow-wrap:anywhere}h2{font-size:1.15em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}td,th{border:1px solid #ddd;padding:2px 7px;
text-align:left;vertical-align:top;overflow-wrap:anywhere}td:first-child{white-space:nowrap}th{background:#f4f4f4}.bad{color:#c00;font-weight:bold}
code,pre{font-size:.8em;background:#f6f6f6}pre{padding:.4em;white-space:pre-wrap;word-break:break-all}
.warn{background:#fff3cd;padding:.4em}img{max-width:100%}
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
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{b64}">'


def page(title: str, body: list[str], meta: dict | None = None) -> str:
    metas = "".join(f'<meta name="{esc(k)}" content="{esc(v)}">' for k, v in (meta or {}).items())
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>{metas}'
            f"<style>{_CSS}</style></head><body><h1>{esc(title)}</h1>" + "\n".join(body) + "</body></html>\n")


def _summary(run) -> list[str]:
    total, fails = len(run.cases), sum(map(tables.failed, run.cases))
    out = [f'<p><b id="total-cases">{total}</b> cases from {len(run.files)} results file(s); '
           f'<b class="{"bad" if fails else ""}">{fails}</b> failing; seed(s) {esc(", ".join(map(str, run.seeds)))}; '
           f'backend(s) {esc(", ".join(sorted({str(h.get("backend")) for h in run.headers})))}</p>']
    out += [f'<p class="warn">{esc(w)}</p>' for w in run.warnings]
    out.append(table(tables.STAGE_COLUMNS, tables.stage_rows(run), ids="stages"))
    out.append("<p><small>cases/s: cases over the summed case seconds (one worker's throughput).</small></p>")
    return out


def _coverage(run) -> list[str]:
    rows = [(axis, Raw(", ".join(f"{esc(k)}&nbsp;<b>{n}</b>" for k, n in counts.items())))
            for axis, counts in tables.coverage(run).items()]
    return ["<h2>Coverage</h2>", table(("axis", "value (cases)"), rows)]


def _errors(run) -> list[str]:
    ratios = tables.tensor_ratios(run)
    by_batch, by_len = {}, {}
    for c in run.cases:
        w = tables.worst_ratio(c)
        if w is None:
            continue
        by_batch.setdefault(c["stage"], []).append((c["batch"], w, tables.failed(c)))
        if c.get("max_cache_len") is not None:
            by_len.setdefault(c["stage"], []).append((c["max_cache_len"], w, tables.failed(c)))
    rows = [(name, len(v), tables.pct(sorted(v)[len(v) // 2]), tables.pct(max(v))) for name, v in ratios.items()]
    return ["<h2>Error as a share of the budget</h2>",
            img(plots.ratio_histogram(ratios), "histogram of shares of budget per stage"),
            img(plots.ratio_boxplot(ratios), "share of budget per tensor"),
            table(("tensor", "cases", "median", "max"), rows),
            "<h2>Error vs batch size and cache length</h2>",
            img(plots.scatter_by_stage(by_batch, "batch size"), "worst share of budget vs batch size"),
            img(plots.scatter_by_stage(by_len, "max cache length"), "worst share of budget vs cache length")]


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


def _failures(run) -> list[str]:
    failing = tables.failing_cases(run)
    out = [f'<h2 id="failures">Failures ({len(failing)})</h2>']
    if not failing:
        return out + ["<p>none</p>"]
    for k, c in enumerate(failing):
        out.append(f'<h3 class="bad">{esc(c["stage"])}: {esc(c["label"])}</h3>'
                   f"<p>{esc(c.get('failure') or c.get('error'))}</p>"
                   f"<pre>{esc(tables.replay_command(c, run.failures))}</pre>")
        emap = c.get("error_map")
        if emap and k < MAX_HEATMAPS:
            out.append(img(plots.heatmap(emap["values"], f"{c['stage']}/{emap['tensor']}: {emap['what']}"),
                           f"error map of {emap['tensor']}"))
    return out


def run_report(run, title="k3diff report") -> str:
    body = _summary(run) + _coverage(run) + _errors(run) + _ties_and_slowest(run) + _failures(run)
    body += _environments(run)
    return page(title, body, meta={"k3diff-cases": len(run.cases),
                                   "k3diff-failures": sum(map(tables.failed, run.cases))})
