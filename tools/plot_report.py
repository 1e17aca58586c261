#!/usr/bin/env python3
"""Draws the figures of a `tandem compare` report with matplotlib: one figure per group of
metrics, one panel per metric with the run and its reference overlaid, the reference's tolerance
band shaded where the metric is checked, and the panel's verdict in its title (green pass, red
FAIL, grey when only shown).

Usage: plot_report.py PLOT_DATA.json OUT_DIR
PLOT_DATA.json: {"groups": [{"file", "title", "xlabel",
                             "panels": [{"title", "ylabel", "verdict", "detail", "tolerance",
                                         "series": [{"label", "x": [...], "y": [...]}]}]}]}
The first series is the run, the second (if any) the reference.
"""
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import EngFormatter  # noqa: E402

STYLES = [dict(color="#1f77b4", marker="o", linewidth=1.8, zorder=3),
          dict(color="#d62728", marker="s", linewidth=1.3, linestyle="--", zorder=2)]
VERDICT_COLORS = {"pass": "#1a7f37", "FAIL": "#c62828"}
MAX_COLUMNS = 4


def draw_panel(ax, panel, xlabel):
    tol = panel.get("tolerance")
    values, xs = [], []
    for i, s in enumerate(panel["series"]):
        style = dict(STYLES[i % len(STYLES)])
        if len(s["x"]) > 40:
            style["marker"] = None
        else:
            style["markersize"] = 4 if i == 0 else 6
            style["markerfacecolor"] = style["color"] if i == 0 else "none"
        ax.plot(s["x"], s["y"], label=s["label"], **style)
        values += [v for v in s["y"] if v is not None and math.isfinite(v)]
        xs += s["x"]
        if i == 1 and tol is not None:  # the reference's tolerance band
            if len(s["x"]) > 1:
                ax.fill_between(s["x"], [v - tol for v in s["y"]], [v + tol for v in s["y"]],
                                color=style["color"], alpha=0.12, linewidth=0,
                                label=f"reference ± {tol:g}")
            else:
                ax.errorbar(s["x"], s["y"], yerr=tol, color=style["color"], alpha=0.5,
                            capsize=6, linewidth=0, elinewidth=6, label=f"reference ± {tol:g}")
    if values:
        # Never zoom into float-level differences: at least the tolerance band, or 2 % of the
        # value, is visible around the curves.
        lo, hi = min(values), max(values)
        span = max(hi - lo, 4 * tol if tol else 0.0, 0.02 * max(abs(lo), abs(hi)))
        if span == 0.0:
            span = 1.0  # a flat zero (e.g. no skipped steps)
        mid = 0.5 * (lo + hi)
        ax.set_ylim(min(lo, mid - 0.6 * span), max(hi, mid + 0.6 * span))
    if xs:
        ax.set_xlim(0, 1.05 * max(xs))
    verdict = panel["verdict"]
    title = panel["title"]
    if len(title) > 46:
        title = title[:20] + "…" + title[-25:]
    detail = f" ({panel['detail']})" if panel["detail"] else ""
    ax.set_title(f"{title}\n{verdict}{detail}", fontsize=9,
                 color=VERDICT_COLORS.get(verdict, "#555555"))
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(panel["ylabel"], fontsize=8)
    ax.xaxis.set_major_formatter(EngFormatter())
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)


def main():
    data_path, out_dir = sys.argv[1], sys.argv[2]
    with open(data_path) as f:
        data = json.load(f)
    for group in data["groups"]:
        panels = group["panels"]
        cols = min(MAX_COLUMNS, len(panels))
        rows = math.ceil(len(panels) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.9 * rows + 0.5), dpi=100,
                                 squeeze=False)
        for k, panel in enumerate(panels):
            draw_panel(axes[k // cols][k % cols], panel, group["xlabel"])
        for k in range(len(panels), rows * cols):
            axes[k // cols][k % cols].axis("off")
        fig.suptitle(group["title"], fontsize=12, fontweight="bold", x=0.01, ha="left")
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, group["file"]))
        plt.close(fig)


if __name__ == "__main__":
    main()
