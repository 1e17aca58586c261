#!/usr/bin/env python3
"""Plots a bf16 run against an fp32 run of the same config (same step-0 weights and batches):
training loss per step and held-out loss at each evaluation, and prints the final values and their
relative differences as JSON.

Usage: plot_precision_curves.py FP32_RUN_DIR BF16_RUN_DIR OUT.png
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(run):
    rows = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl")) if line.strip()]
    train = [(r["step"], r["train/loss"]) for r in rows if r.get("train/loss") is not None]
    keys = sorted({k for r in rows for k in r if k.startswith("eval/") and k.endswith("/loss")})
    evals = {k: [(r["step"], r[k]) for r in rows if k in r] for k in keys}
    return train, evals


def main():
    fp32_dir, bf16_dir, out = sys.argv[1:4]
    f_train, f_eval = read(fp32_dir)
    b_train, b_eval = read(bf16_dir)
    fig, axes = plt.subplots(1, 1 + len(f_eval), figsize=(5.5 * (1 + len(f_eval)), 4))
    axes = list(axes) if len(f_eval) else [axes]
    for ax, (title, f, b) in zip(axes, [("training loss", f_train, b_train)] +
                                 [(k, f_eval[k], b_eval.get(k, [])) for k in f_eval]):
        ax.plot(*zip(*f), label="fp32", color="#1f77b4", linewidth=1.4)
        ax.plot(*zip(*b), label="bf16 (fp32 masters)", color="#d62728", linewidth=1.1,
                linestyle="--")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("tandem: bf16 mixed precision vs fp32, same step-0 weights and batches")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    summary = {"final_train_loss": {"fp32": f_train[-1][1], "bf16": b_train[-1][1],
                                    "rel_diff": abs(b_train[-1][1] / f_train[-1][1] - 1)}}
    for k in f_eval:
        fv, bv = f_eval[k][-1][1], b_eval[k][-1][1]
        summary["final_" + k] = {"fp32": fv, "bf16": bv, "rel_diff": abs(bv / fv - 1)}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
