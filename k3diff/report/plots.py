"""Figures as base64 SVG strings (matplotlib, Agg backend: no display, no files), for an HTML page
that opens offline. Each function takes plain data and returns one image, or None with nothing to draw.

Readable at a glance: the share-of-budget axis is linear and clipped to the passing range (a
little past the budget line at 1), so one failure at 10^34 of its budget cannot squash every
passing tensor into a few pixels; values past the edge are drawn as red marks at the edge with
their count and maximum written beside them. Vector output, labels at 9 pt or more, one colour per
stage (never one per tensor).
"""
from __future__ import annotations

import base64
import io

_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#7f7f7f", "#bcbd22")
_FONT = 9
MIME = "image/svg+xml"


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": _FONT, "axes.labelsize": _FONT + 1, "legend.fontsize": _FONT,
                         "svg.fonttype": "none", "svg.hashsalt": "k3diff"})   # text as text; stable output
    return plt


def _encode(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    _plt().close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def clip_edge(values) -> float:
    """The right edge of a share-of-budget axis: the passing range and the budget line, with room."""
    passing = [v for v in values if v <= 1.0]
    return max(1.2, 1.08 * max(passing, default=0.0))


def _fmt(x) -> str:
    return f"{x:.3g}x" if x < 1e4 else f"{x:.1e}x"


def _budget_line(ax, vertical=True):
    (ax.axvline if vertical else ax.axhline)(1.0, color="#d62728", lw=1.2, ls="--", label="budget (1)")


def ratio_boxplot(ratios: dict) -> str | None:
    """One box per stage/tensor: its error as a share of its budget over all cases (1 = the bound)."""
    if not ratios:
        return None
    plt = _plt()
    names = list(ratios)
    edge = clip_edge([v for vs in ratios.values() for v in vs])
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(names) + 1.3))
    data = [[min(v, edge) for v in ratios[n]] for n in names]
    try:                       # matplotlib >= 3.10 names it orientation; vert is deprecated there
        ax.boxplot(data, orientation="horizontal", whis=(0, 100), widths=0.6)
    except TypeError:
        ax.boxplot(data, vert=False, whis=(0, 100), widths=0.6)
    for k, n in enumerate(names, 1):
        over = [v for v in ratios[n] if v > edge]
        if over:
            ax.plot([edge], [k], marker=">", color="#d62728", ms=8, clip_on=False)
            ax.annotate(f"{len(over)} past, max {_fmt(max(over))}", (edge, k), xytext=(8, -3),
                        textcoords="offset points", color="#d62728", fontsize=_FONT, annotation_clip=False)
    ax.set_xlim(0, edge)
    ax.set_yticks(range(1, len(names) + 1), [f"{n} ({len(ratios[n])})" for n in names])
    _budget_line(ax)
    ax.set_xlabel("share of budget: the worst element's or the whole tensor's (L2), the larger; > 1 fails")
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    return _encode(fig)


def ratio_histogram(ratios: dict) -> str | None:
    """All graded tensors together, one outline per stage; values past the edge counted in its title."""
    by_stage = {}
    for name, values in ratios.items():
        by_stage.setdefault(name.split("/")[0], []).extend(values)
    if not by_stage:
        return None
    plt = _plt()
    import numpy as np

    edge = clip_edge([v for vs in by_stage.values() for v in vs])
    fig, ax = plt.subplots(figsize=(9, 3))
    bins = np.linspace(0, edge, 49)
    past = []
    for k, (stage, values) in enumerate(sorted(by_stage.items())):
        ax.hist([v for v in values if v <= edge], bins=bins, histtype="step", lw=1.6,
                color=_PALETTE[k % len(_PALETTE)], label=stage)
        over = [v for v in values if v > edge]
        if over:
            past.append(f"{stage} {len(over)} (max {_fmt(max(over))})")
    ax.set_xlim(0, edge)
    _budget_line(ax)
    if past:
        ax.set_title("past the edge: " + ", ".join(past), color="#d62728", fontsize=_FONT, loc="right")
    ax.set_xlabel("share of budget (every graded tensor of every case)")
    ax.set_ylabel("tensors")
    ax.legend(ncol=min(4, len(by_stage) + 1))
    return _encode(fig)


def heatmap(values: list, title: str) -> str | None:
    """An error map (rows: tokens, columns: the rest of the tensor flattened, max-pooled)."""
    if not values or not values[0]:
        return None
    plt = _plt()
    rows = len(values)
    fig, ax = plt.subplots(figsize=(7, 1.6 if rows == 1 else 2.8 if rows < 8 else 4))
    im = ax.imshow(values, aspect="auto", interpolation="nearest", cmap="magma")
    fig.colorbar(im, ax=ax)
    if rows == 1:
        ax.set_yticks([])
    ax.set_ylabel("token" if rows == 1 else "token (pooled)")
    ax.set_xlabel("element (flattened, pooled)")
    ax.set_title(title, fontsize=_FONT)
    return _encode(fig)


def before_after(pairs: dict) -> str | None:
    """pairs: stage/tensor -> [(base share, new share)], one colour per stage; the diagonal is
    'unchanged'; both axes clipped like the others, points past an edge drawn on it in red."""
    pairs = {n: p for n, p in pairs.items() if p}
    if not pairs:
        return None
    plt = _plt()
    edge = clip_edge([v for p in pairs.values() for ab in p for v in ab])
    fig, ax = plt.subplots(figsize=(6.5, 5.5))
    by_stage = {}
    for name, pts in pairs.items():
        by_stage.setdefault(name.split("/")[0], []).extend(pts)
    clipped = 0
    for k, (stage, pts) in enumerate(sorted(by_stage.items())):
        inside = [(a, b) for a, b in pts if a <= edge and b <= edge]
        out = [(min(a, edge), min(b, edge)) for a, b in pts if a > edge or b > edge]
        clipped += len(out)
        if inside:
            ax.scatter(*zip(*inside), s=12, alpha=0.7, color=_PALETTE[k % len(_PALETTE)], label=stage)
        if out:
            ax.scatter(*zip(*out), s=40, marker="x", color="#d62728", clip_on=False)
    ax.plot([0, edge], [0, edge], color="#7f7f7f", lw=1)
    ax.axhline(1.0, color="#d62728", lw=1, ls="--")
    ax.axvline(1.0, color="#d62728", lw=1, ls="--")
    ax.set_xlim(0, edge)
    ax.set_ylim(0, edge)
    ax.set_xlabel("BASE: share of budget")
    ax.set_ylabel("NEW: share of budget")
    if clipped:
        ax.set_title(f"{clipped} point(s) past an edge (red x, drawn on it)", color="#d62728", fontsize=_FONT)
    ax.legend()
    ax.grid(alpha=0.3)
    return _encode(fig)
