"""Figures as base64 PNG strings (matplotlib, Agg backend: no display, no files), for an HTML page
that opens offline. Each function takes plain data and returns one PNG, or None with nothing to draw."""
from __future__ import annotations

import base64
import io

_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
            "#17becf", "#d62728")


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    _plt().close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _ratio_scale(ax, top, axis="x"):
    """Shares of budget: linear up to the bound, logarithmic above when a failure is far off."""
    if top > 20:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("symlog", linthresh=1.0)


def _budget_line(ax, vertical=False):
    (ax.axvline if vertical else ax.axhline)(1.0, color="#d62728", lw=1, ls="--", label="budget")


def ratio_boxplot(ratios: dict) -> str | None:
    """One box per stage/tensor: its error as a share of its budget over all cases (1 = the bound)."""
    if not ratios:
        return None
    plt = _plt()
    names = list(ratios)
    fig, ax = plt.subplots(figsize=(8, 0.28 * len(names) + 1.2))
    ax.boxplot([ratios[n] for n in names], vert=False, whis=(0, 100), widths=0.6)
    _ratio_scale(ax, max(max(v) for v in ratios.values()))
    ax.set_yticks(range(1, len(names) + 1), [f"{n} ({len(ratios[n])})" for n in names], fontsize=7)
    _budget_line(ax, vertical=True)
    ax.set_xlabel("max|cand - ref| / bound  (share of budget; > 1 fails)")
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def ratio_histogram(ratios: dict) -> str | None:
    """All graded tensors together, one histogram per stage."""
    by_stage = {}
    for name, values in ratios.items():
        by_stage.setdefault(name.split("/")[0], []).extend(values)
    if not by_stage:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3))
    import numpy as np

    top = max(1.05, max(max(v) for v in by_stage.values()))
    bins = np.linspace(0, top, 41) if top <= 20 else np.concatenate(
        [np.linspace(0, 1, 21), np.logspace(0, np.log10(top), 21)[1:]])
    for k, (stage, values) in enumerate(sorted(by_stage.items())):
        ax.hist(values, bins=bins, histtype="step", lw=1.5, color=_PALETTE[k % 10], label=stage)
    _ratio_scale(ax, top)
    _budget_line(ax, vertical=True)
    ax.set_xlabel("share of budget (every graded tensor of every case)")
    ax.set_ylabel("tensors")
    ax.legend(fontsize=7)
    return _png(fig)


def scatter_by_stage(points: dict, xlabel: str, logx=True) -> str | None:
    """points: stage -> [(x, worst share of budget, failed)]; failures drawn as red crosses."""
    points = {s: p for s, p in points.items() if p}
    if not points:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for k, (stage, pts) in enumerate(sorted(points.items())):
        ok = [(x, y) for x, y, bad in pts if not bad]
        if ok:
            ax.scatter(*zip(*ok), s=14, alpha=0.7, color=_PALETTE[k % 10], label=stage)
    bad = [(x, y) for pts in points.values() for x, y, b in pts if b]
    if bad:
        ax.scatter(*zip(*bad), s=40, marker="x", color="#d62728", label="failed")
    if logx:
        ax.set_xscale("symlog", linthresh=1)
    _ratio_scale(ax, max(y for pts in points.values() for _, y, _ in pts), axis="y")
    _budget_line(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("worst tensor, share of budget")
    ax.legend(fontsize=7, ncol=4)
    ax.grid(alpha=0.3)
    return _png(fig)


def heatmap(values: list, title: str) -> str | None:
    """An error map (rows: tokens, columns: the rest of the tensor flattened, max-pooled)."""
    if not values or not values[0]:
        return None
    plt = _plt()
    rows = len(values)
    fig, ax = plt.subplots(figsize=(6, 1.5 if rows == 1 else 2.6 if rows < 8 else 4))
    im = ax.imshow(values, aspect="auto", interpolation="nearest", cmap="magma")
    fig.colorbar(im, ax=ax)
    if rows == 1:
        ax.set_yticks([])
    ax.set_ylabel("token" if rows == 1 else "token (pooled)")
    ax.set_xlabel("element (flattened, pooled)")
    ax.set_title(title, fontsize=8)
    return _png(fig)


def before_after(pairs: dict) -> str | None:
    """pairs: stage/tensor -> [(base share, new share)]; the diagonal is 'unchanged'."""
    pairs = {n: p for n, p in pairs.items() if p}
    if not pairs:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 5))
    top = max(1.05, max(max(a, b) for p in pairs.values() for a, b in p))
    for k, (name, pts) in enumerate(sorted(pairs.items())):
        ax.scatter(*zip(*pts), s=10, alpha=0.7, color=_PALETTE[k % 10], label=name if k < 20 else None)
    ax.plot([0, top], [0, top], color="#7f7f7f", lw=1)
    _ratio_scale(ax, top)
    _ratio_scale(ax, top, axis="y")
    ax.axhline(1.0, color="#d62728", lw=1, ls="--")
    ax.axvline(1.0, color="#d62728", lw=1, ls="--")
    ax.set_xlabel("BASE: share of budget")
    ax.set_ylabel("NEW: share of budget")
    ax.legend(fontsize=6, ncol=2)
    ax.grid(alpha=0.3)
    return _png(fig)
