#!/usr/bin/env python3
"""Draws the PNG plots of a `tandem compare` report with matplotlib.

Usage: plot_report.py PLOT_DATA.json OUT_DIR
PLOT_DATA.json: {"figures": [{"file", "title", "xlabel", "ylabel",
                              "series": [{"label", "x": [...], "y": [...]}]}]}
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import EngFormatter  # noqa: E402

STYLES = [dict(color="#1f77b4", marker="o", linewidth=2),
          dict(color="#d62728", marker="s", linewidth=1.5, linestyle="--")]


def main():
    data_path, out_dir = sys.argv[1], sys.argv[2]
    with open(data_path) as f:
        data = json.load(f)
    for fig_spec in data["figures"]:
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
        for i, s in enumerate(fig_spec["series"]):
            style = dict(STYLES[i % len(STYLES)])
            if len(s["x"]) > 40:
                style["marker"] = None
            else:
                style["markersize"] = 4
            ax.plot(s["x"], s["y"], label=s["label"], **style)
        ax.set_title(fig_spec["title"])
        ax.set_xlabel(fig_spec["xlabel"])
        ax.set_ylabel(fig_spec["ylabel"])
        ax.xaxis.set_major_formatter(EngFormatter())
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, fig_spec["file"]))
        plt.close(fig)


if __name__ == "__main__":
    main()
